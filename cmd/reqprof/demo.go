package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/profile"
)

// demoServerCommand runs the bundled calibrated server; demo starts it as a
// child process of this same binary so that nothing else need be installed.
const demoServerCommand = "demo-server"

// demoServerName is the demo servers' process name, which reports show
// beside their pids: as children of this binary they would be "reqprof".
const demoServerName = "calserver"

// nameDemoServer renames this process, a demo server, to demoServerName:
// every thread it has so far, which the ones it starts later take their
// name from. A name is only shown: without it the server still serves.
func nameDemoServer() {
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		_ = os.WriteFile("/proc/self/task/"+task.Name()+"/comm", []byte(demoServerName), 0)
	}
}

// count is n and its noun: "1 request", "2 requests".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// demoCall is the request both demo servers answer: an MCP tools/call.
const demoCall = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`

// demoServers do the same work (the tool call burns 50 µs) with different
// machinery around it: one lean, one that spends another 150 µs decoding and
// validating, and logs each call with 20 small writes.
var demoServers = []struct {
	label string
	args  []string
}{
	{"lean", []string{"--model", "epoll", "--route", "tools/call add=50us"}},
	{"heavy", []string{"--model", "epoll", "--route", "tools/call add=200us", "--devnull-writes", "20", "--devnull-bytes", "256"}},
}

func demo(args []string, stdout, stderr io.Writer) error {
	c := newCommand("demo", "reqprof demo [flags]",
		"Starts two bundled servers that answer the same MCP tools/call, one lean and one heavy, "+
			"loads them alike, and prints each one's report, the comparison, and each server's own measure of its CPU per request. "+
			"Needs root (or CAP_BPF and CAP_PERFMON) and a kernel with BTF.")
	var out outputFlags
	requests := c.Int("requests", 4000, "`N` requests the demo load sends to each server")
	conns := c.Int("conns", 4, "`N` connections the demo load opens to each server")
	out.register(c, "until the load is done")
	if err := c.parse(args, stdout); err != nil {
		return err
	}
	if c.NArg() > 0 {
		return badInput("unexpected argument %q (demo takes flags only)", c.Arg(0))
	}
	if *requests < 1 || *conns < 1 {
		return badInput("--requests %d, --conns %d: want 1 or more of each", *requests, *conns)
	}
	if err := out.validate(); err != nil {
		return err
	}
	if err := checkHost(); err != nil {
		return err
	}

	servers, targets, err := startDemoServers()
	defer func() {
		for _, s := range servers {
			s.Kill()
		}
	}()
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attached := make(chan struct{})
	done, err := startCollector(ctx, out.config(targets, func(line string) {
		fmt.Fprintln(stderr, line)
		close(attached)
	}, nil), attached)
	if done == nil {
		return err
	}

	fmt.Fprintf(stderr, "reqprof: demo load: %s over %s to each of %d servers\n",
		count(*requests, "MCP tools/call request", "MCP tools/call requests"), count(*conns, "connection", "connections"), len(servers))
	loadErr := loadAll(ctx, servers, *conns, *requests)
	cancel()
	o := <-done
	if loadErr != nil {
		return fmt.Errorf("demo load: %w", loadErr)
	}
	if o.err != nil {
		return o.err
	}
	truths, err := stopDemoServers(servers)
	if err != nil {
		return err
	}
	if err := writeReport([]profile.Run{o.run}, out, false, stdout); err != nil {
		return err
	}
	if out.jsonPath != "-" {
		writeTruths(stdout, truths)
	}
	return nil
}

// startDemoServers starts every demo server and returns them with the
// targets reqprof attaches to. On an error it returns the servers started
// so far, for the caller to kill.
func startDemoServers() ([]*calserver.Process, []collector.Target, error) {
	var servers []*calserver.Process
	var targets []collector.Target
	for _, d := range demoServers {
		s, err := startDemoServer(d.args)
		if err != nil {
			return servers, nil, err
		}
		servers = append(servers, s)
		targets = append(targets, collector.Target{PID: s.PID(), Label: d.label})
	}
	return servers, targets, nil
}

// collectorOutcome is what a collector run ends with.
type collectorOutcome struct {
	run profile.Run
	err error
}

// startCollector runs reqprof's collector with cfg until ctx is done, and
// returns once it is attached (cfg.OnAttached closes attached), with the
// channel its outcome arrives on. If the collector ends before it is
// attached, the channel is nil and the error is the collector's.
func startCollector(ctx context.Context, cfg collector.Config, attached <-chan struct{}) (<-chan collectorOutcome, error) {
	done := make(chan collectorOutcome, 1)
	go func() {
		run, err := collector.Run(ctx, cfg)
		done <- collectorOutcome{run, err}
	}()
	select {
	case <-attached:
		return done, nil
	case o := <-done:
		return nil, o.err
	}
}

// stopDemoServers stops every server and returns each one's own measure.
func stopDemoServers(servers []*calserver.Process) ([]calserver.Stats, error) {
	var truths []calserver.Stats
	for _, s := range servers {
		truth, err := s.Stop()
		if err != nil {
			return nil, err
		}
		truths = append(truths, truth)
	}
	return truths, nil
}

// writeTruths prints each demo server's own measure of its requests, to set
// beside reqprof's.
func writeTruths(w io.Writer, truths []calserver.Stats) {
	fmt.Fprintln(w, "\neach server's own measure (CLOCK_THREAD_CPUTIME_ID around each request):")
	for i, truth := range truths {
		fmt.Fprintf(w, "  %-6s %s, %.1f µs CPU per request\n", demoServers[i].label, count(int(truth.Requests), "request", "requests"), truth.MeanCPUMicros())
	}
}

// loadAll drives every server at once with the same load.
func loadAll(ctx context.Context, servers []*calserver.Process, conns, requests int) error {
	var wg sync.WaitGroup
	errs := make([]error, len(servers))
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = loadgen.Run(ctx, loadgen.Config{
				Addr: s.Addr, Conns: conns, Requests: requests,
				Paths: []string{"/mcp"}, Bodies: []string{demoCall},
			})
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func startDemoServer(args []string) (*calserver.Process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding reqprof's own binary: %w", err)
	}
	cmd := exec.Command(exe, append([]string{demoServerCommand, "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Stderr = os.Stderr
	return calserver.Spawn(cmd)
}
