package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/report"
	"github.com/reqprof/reqprof/testdata/calserver"
	"github.com/reqprof/reqprof/testdata/loadgen"
)

// demoServerCommand runs the bundled calibrated server; demo starts it as a
// child process of this same binary so that nothing else need be installed.
const demoServerCommand = "demo-server"

func demo(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var out outputFlags
	out.register(fs, 0)
	burn := fs.Duration("burn", 200*time.Microsecond, "CPU the demo server burns per request")
	requests := fs.Int("requests", 5000, "requests the demo load sends")
	conns := fs.Int("conns", 4, "connections the demo load uses")
	if err := fs.Parse(args); err != nil {
		return err
	}

	server, err := startDemoServer(*burn)
	if err != nil {
		return err
	}
	defer server.kill()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attached := make(chan struct{})
	type outcome struct {
		run report.Run
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		run, err := collector.Run(ctx, collector.Config{
			Targets:      []collector.Target{{PID: server.cmd.Process.Pid, Label: "demo"}},
			Duration:     out.duration,
			CaptureBytes: out.captureBytes,
			NoPayload:    out.noPayload,
			OnAttached: func(line string) {
				fmt.Fprintln(stderr, line)
				close(attached)
			},
		})
		done <- outcome{run, err}
	}()
	select {
	case <-attached:
	case o := <-done:
		return o.err
	}

	fmt.Fprintf(stderr, "reqprof: demo load: %d requests over %d connections to %s (server burns %v per request)\n",
		*requests, *conns, server.addr, *burn)
	load, err := loadgen.Run(ctx, loadgen.Config{Addr: server.addr, Conns: *conns, Requests: *requests})
	cancel()
	o := <-done
	if err != nil {
		return fmt.Errorf("demo load: %w", err)
	}
	if o.err != nil {
		return o.err
	}
	truth, err := server.stop()
	if err != nil {
		return err
	}
	if err := writeReport(o.run, out.jsonPath, stdout); err != nil {
		return err
	}
	if out.jsonPath != "-" {
		fmt.Fprintf(stdout, "\nload generator: %d requests answered, %d errors\n", load.Requests, load.Errors)
		fmt.Fprintf(stdout, "server's own measure (CLOCK_THREAD_CPUTIME_ID around each request): %d requests, %.1f µs CPU per request\n",
			truth.Requests, truth.MeanCPUMicros())
	}
	return nil
}

type demoServer struct {
	cmd    *exec.Cmd
	addr   string
	output *bufio.Reader
}

func startDemoServer(burn time.Duration) (*demoServer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding reqprof's own binary: %w", err)
	}
	cmd := exec.Command(exe, demoServerCommand, "--model", "threads", "--listen", "127.0.0.1:0", "--burn", burn.String())
	cmd.Stderr = os.Stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the demo server: %w", err)
	}
	s := &demoServer{cmd: cmd, output: bufio.NewReader(pipe)}
	line, err := s.output.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		s.kill()
		return nil, fmt.Errorf("the demo server did not start (said %q)", line)
	}
	s.addr = addr
	return s, nil
}

// stop asks the server for its own per-request measurements and waits for it.
func (s *demoServer) stop() (calserver.Stats, error) {
	var stats calserver.Stats
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return stats, err
	}
	line, err := s.output.ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return stats, err
	}
	if err := json.Unmarshal([]byte(line), &stats); err != nil {
		return stats, fmt.Errorf("reading the demo server's own figures: %w", err)
	}
	return stats, s.cmd.Wait()
}

func (s *demoServer) kill() {
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}
