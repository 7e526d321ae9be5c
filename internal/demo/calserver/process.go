package calserver

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
)

// Process is a server run by Main (or one speaking the same protocol) in a
// child process: it says "listening on ADDR" once it serves, and on SIGTERM
// prints its figures as one JSON line and exits.
type Process struct {
	Cmd  *exec.Cmd
	Addr string // IP:PORT
	out  *bufio.Reader
}

// Spawn starts cmd and waits for the line that says where it listens.
func Spawn(cmd *exec.Cmd) (*Process, error) {
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	p := &Process{Cmd: cmd, out: bufio.NewReader(pipe)}
	line, err := p.out.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		p.Kill()
		return nil, fmt.Errorf("%s did not start (said %q)", cmd.Path, line)
	}
	p.Addr = addr
	return p, nil
}

// PID is the server process's.
func (p *Process) PID() int { return p.Cmd.Process.Pid }

// Stop ends the server and returns its own figures.
func (p *Process) Stop() (Stats, error) {
	var stats Stats
	err := p.StopInto(&stats)
	return stats, err
}

// StopInto ends the server and decodes its figures into v.
func (p *Process) StopInto(v any) error {
	if p.Cmd.ProcessState == nil {
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	}
	line, err := p.out.ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := json.Unmarshal([]byte(line), v); err != nil {
		return fmt.Errorf("reading the server's own figures %q: %w", line, err)
	}
	return p.Cmd.Wait()
}

// Kill ends the server without its figures, if it still runs.
func (p *Process) Kill() {
	if p.Cmd.ProcessState == nil {
		_ = p.Cmd.Process.Kill()
		_ = p.Cmd.Wait()
	}
}
