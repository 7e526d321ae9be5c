package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reqprof/reqprof/internal/demo/calserver"
)

// Pair is the same server run twice by its client: once as a child over
// stdio (the SDK's CommandTransport) and once over streamable HTTP on
// 127.0.0.1 (the SDK's StreamableClientTransport). Both processes exist
// from StartPair on and neither has read a byte of MCP: Connect makes the
// handshake, so that a profiler attached in between sees it.
type Pair struct {
	Stdio, HTTP *Child
}

// Child is one of the pair's servers.
type Child struct {
	Transport string // "stdio" or "http"
	PID       int
	Endpoint  string // over HTTP, its URL
	cmd       *exec.Cmd
	stderr    chan string // the server's stderr, line by line, closed at its end
	stderrW   *os.File    // this process's copy of that pipe's write end, until the server runs
	session   *mcp.ClientSession
	connected chan connectResult // stdio: Connect's outcome, begun by StartPair
}

type connectResult struct {
	session *mcp.ClientSession
	err     error
}

// StartPair starts bin (this package's command) twice, its tools burning
// light and heavy, each with env added to this process's. The rounds of
// the burn loop are reckoned here once and given to both, so that both do
// the same work, which each would reckon a little apart.
func StartPair(bin string, light, heavy time.Duration, env []string) (*Pair, error) {
	p := &Pair{}
	serverArgs := []string{
		"--light-rounds", strconv.FormatUint(calserver.IterationsFor(light), 10),
		"--heavy-rounds", strconv.FormatUint(calserver.IterationsFor(heavy), 10),
	}
	var err error
	if p.Stdio, err = startStdio(bin, serverArgs, env); err != nil {
		return nil, err
	}
	if p.HTTP, err = startHTTP(bin, serverArgs, env); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

func client() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "reqprof-compare", Version: "1"}, nil)
}

// startStdio starts the stdio server through CommandTransport, held
// (--hold) so that the initialize the client writes waits in its stdin
// until Connect releases it.
func startStdio(bin string, serverArgs, env []string) (*Child, error) {
	c := &Child{Transport: "stdio", connected: make(chan connectResult, 1)}
	c.cmd = exec.Command(bin, append([]string{"--hold"}, serverArgs...)...)
	c.cmd.Env = append(os.Environ(), env...)
	if err := c.pipeStderr(); err != nil {
		return nil, err
	}
	go func() {
		// Connect starts the command and blocks until initialize is answered.
		session, err := client().Connect(context.Background(), &mcp.CommandTransport{Command: c.cmd}, nil)
		c.connected <- connectResult{session, err}
	}()
	// The server says its pid once it waits for SIGUSR1; Connect ends
	// first only when the command could not start.
	for c.PID == 0 {
		select {
		case line, ok := <-c.stderr:
			if !ok {
				return nil, fmt.Errorf("the stdio server ended before it said its pid: %v", (<-c.connected).err)
			}
			if pid, ok := strings.CutPrefix(line, heldLine+" "); ok {
				c.PID, _ = strconv.Atoi(pid)
			}
		case res := <-c.connected:
			c.startedStderr()
			return nil, fmt.Errorf("the stdio server did not start: %v", res.err)
		}
	}
	c.startedStderr()
	return c, nil
}

// startHTTP starts the HTTP server on a free port of 127.0.0.1 and reads
// its URL.
func startHTTP(bin string, serverArgs, env []string) (*Child, error) {
	c := &Child{Transport: "http"}
	c.cmd = exec.Command(bin, append([]string{"--http", "127.0.0.1:0"}, serverArgs...)...)
	c.cmd.Env = append(os.Environ(), env...)
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.pipeStderr(); err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		c.startedStderr()
		return nil, err
	}
	c.startedStderr()
	c.PID = c.cmd.Process.Pid
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if url, ok := strings.CutPrefix(strings.TrimSpace(line), listeningLine); ok {
		c.Endpoint = url
		return c, nil
	}
	c.cmd.Process.Kill()
	c.cmd.Wait()
	return nil, fmt.Errorf("the HTTP server did not start: %q %v", line, err)
}

// pipeStderr sends the server's stderr, line by line, to c.stderr, to
// its end. The pipe is this package's, not exec's: Wait closes a pipe
// from StderrPipe once the process exits, which can cut off the last line
// before it is read (the figures the server writes as it ends, on a slow
// host), and CommandTransport waits for the stdio server as it closes.
// startedStderr closes the write end this process holds, once the server
// runs with its own.
func (c *Child) pipeStderr() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	c.cmd.Stderr, c.stderrW = w, w
	c.stderr = make(chan string, 16)
	go func() {
		defer r.Close()
		scanner := bufio.NewScanner(r)
		scanner.Buffer(nil, 1<<24) // the figures are one long line
		for scanner.Scan() {
			c.stderr <- scanner.Text()
		}
		close(c.stderr)
	}()
	return nil
}

// startedStderr lets go of the write end of the server's stderr once the
// server holds its own, so that the reader sees its end.
func (c *Child) startedStderr() {
	if c.stderrW != nil {
		c.stderrW.Close()
		c.stderrW = nil
	}
}

// Connect makes the MCP handshake (initialize, notifications/initialized)
// with both servers and lists their tools.
func (p *Pair) Connect(ctx context.Context) error {
	if err := p.Stdio.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return err
	}
	connected := <-p.Stdio.connected
	if connected.err != nil {
		return fmt.Errorf("stdio: %w", connected.err)
	}
	p.Stdio.session = connected.session
	session, err := client().Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.HTTP.Endpoint}, nil)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	p.HTTP.session = session
	for _, c := range p.children() {
		if _, err := c.session.ListTools(ctx, nil); err != nil {
			return fmt.Errorf("%s: tools/list: %w", c.Transport, err)
		}
	}
	return nil
}

func (p *Pair) children() []*Child { return []*Child{p.Stdio, p.HTTP} }

// Call calls tool once on each server, stdio first.
func (p *Pair) Call(ctx context.Context, tool string) error {
	for _, c := range p.children() {
		if _, err := c.session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}}); err != nil {
			return fmt.Errorf("%s: tools/call %s: %w", c.Transport, tool, err)
		}
	}
	return nil
}

// Close ends both sessions and servers and returns what each server says
// it answered.
func (p *Pair) Close() (stdio, http Stats, err error) {
	// Over stdio, closing the session closes the server's stdin and waits
	// for it to exit; over HTTP it sends DELETE, and SIGTERM ends the server.
	if p.Stdio.session != nil {
		p.Stdio.session.Close()
	}
	if p.HTTP.session != nil {
		p.HTTP.session.Close()
	}
	p.HTTP.cmd.Process.Signal(syscall.SIGTERM)
	p.HTTP.cmd.Wait()
	stdio, err1 := p.Stdio.stats()
	http, err2 := p.HTTP.stats()
	return stdio, http, errors.Join(err1, err2)
}

// stats reads the JSON line the server writes to stderr as it ends.
func (c *Child) stats() (Stats, error) {
	var stats Stats
	var said []string
	for line := range c.stderr {
		if json.Unmarshal([]byte(line), &stats) == nil && stats.Calls != nil {
			return stats, nil
		}
		said = append(said, line)
	}
	return stats, fmt.Errorf("the %s server gave no figures: %q", c.Transport, said)
}

// Kill ends both servers at once.
func (p *Pair) Kill() {
	for _, c := range p.children() {
		if c != nil && c.cmd.Process != nil {
			c.cmd.Process.Kill()
		}
	}
}

// CompareOptions are --compare's flags.
type CompareOptions struct {
	Light, Heavy time.Duration
	Calls        int
	Delay        time.Duration
	Linger       time.Duration
	Procs        int
}

// runCompare starts the pair from this very binary, says their pids, waits
// for SIGUSR1 or the delay, makes the handshakes and opts.Calls calls of
// each tool on each server, keeps them up for opts.Linger or until SIGINT
// or SIGTERM, ends them, and says what each answered.
func runCompare(opts CompareOptions) int {
	if opts.Calls < 1 || opts.Procs < 1 || opts.Delay < 0 || opts.Linger < 0 {
		fmt.Fprintln(os.Stderr, "mcpserver: --calls and --procs must be 1 or more, --delay and --linger 0 or more")
		return 2
	}
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	start := make(chan os.Signal, 1)
	signal.Notify(start, syscall.SIGUSR1)
	pair, err := StartPair(bin, opts.Light, opts.Heavy, []string{"GOMAXPROCS=" + strconv.Itoa(opts.Procs)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pair.Kill()
	fmt.Printf("stdio server pid %d; http server pid %d at %s\n", pair.Stdio.PID, pair.HTTP.PID, pair.HTTP.Endpoint)
	fmt.Printf("reqprof attach --pid %d=stdio --pid %d=http\n", pair.Stdio.PID, pair.HTTP.PID)
	var after <-chan time.Time
	if opts.Delay > 0 {
		after = time.After(opts.Delay)
		fmt.Printf("calling in %v, or at SIGUSR1 to pid %d\n", opts.Delay, os.Getpid())
	} else {
		fmt.Printf("calling at SIGUSR1 to pid %d\n", os.Getpid())
	}
	select {
	case <-start:
	case <-after:
	}
	ctx := context.Background()
	if err := pair.Connect(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	began := time.Now()
	for i := range 2 * opts.Calls {
		if err := pair.Call(ctx, Tools[i%2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	took := time.Since(began)
	fmt.Printf("%d calls on each in %v\n", 2*opts.Calls, took.Round(time.Millisecond))
	if opts.Linger > 0 {
		// The servers stay up, so that a profiler's window can close
		// before they exit.
		fmt.Printf("servers up for %v, or until SIGINT or SIGTERM to pid %d\n", opts.Linger, os.Getpid())
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
		select {
		case <-stop:
		case <-time.After(opts.Linger):
		}
	}
	stdio, http, err := pair.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, s := range []struct {
		name  string
		stats Stats
	}{{"stdio", stdio}, {"http", http}} {
		fmt.Printf("%s server answered light %d (burn %.1f µs), heavy %d (burn %.1f µs)\n", s.name,
			s.stats.Calls["light"], s.stats.BurnUs["light"], s.stats.Calls["heavy"], s.stats.BurnUs["heavy"])
	}
	return 0
}
