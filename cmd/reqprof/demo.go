package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/profile"
)

// demoServerCommand runs the bundled calibrated server; demo starts it as a
// child process of this same binary so that nothing else need be installed.
const demoServerCommand = "demo-server"

// demoLoadCommand runs the demo's load generator, also as a child process:
// in reqprof's own process its CPU and memory would be counted as the
// collector's.
const demoLoadCommand = "demo-load"

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
			"loads them alike, and prints each one's report, the comparison, and reqprof's CPU per request checked against each server's own clock. "+
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

	fmt.Fprintf(stderr, "reqprof: demo load, from a process of its own: %s over %s to each of %d servers "+
		"(reqprof's own binary run as calserver, so their functions are in \"reqprof\")\n",
		count(*requests, "MCP tools/call request", "MCP tools/call requests"), count(*conns, "connection", "connections"), len(servers))
	loadErr := runDemoLoad(ctx, servers, *conns, *requests)
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
		writeCheck(stdout, o.run, truths, out.gross)
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

// writeCheck sets reqprof's CPU per request beside each demo server's own
// measure of it, like for like: the server reads its serving thread's CPU
// clock where reqprof starts and ends a request (at the read that brings
// it, and at the read that brings the thread's next one), so both spans
// hold the thread's loop after the response; and that clock cannot leave
// out what reqprof's programs cost the thread, so reqprof's figure is set
// beside it with its own cost in: added back, or kept (gross).
func writeCheck(w io.Writer, run profile.Run, truths []calserver.Stats, gross bool) {
	fmt.Fprintln(w, "\nchecked against each server's own clock, µs of CPU per request: its serving thread's CPU clock")
	fmt.Fprintln(w, "(CLOCK_THREAD_CPUTIME_ID), read where reqprof starts and ends a request: at the read that brings it, and")
	fmt.Fprintln(w, "at the read that brings the thread's next; reqprof's own cost is in that clock, so it is added back here")
	for i, truth := range truths {
		line := fmt.Sprintf("  %-6s server %.1f", demoServers[i].label, truth.MeanCPUMicros())
		if i < len(run.Targets) {
			line += " against reqprof " + reqprofAgainstTruth(run.Targets[i].Totals(), gross, truth)
		}
		fmt.Fprintln(w, line)
	}
}

// reqprofAgainstTruth is reqprof's mean CPU per request of totals, its own
// cost in, beside the server's: "85.8 + its own 5.1 = 90.9 (+0.9%), 4,000
// of the server's 4,000 requests". gross: the CPU keeps the own cost
// already.
func reqprofAgainstTruth(totals profile.Totals, gross bool, truth calserver.Stats) string {
	n := totals.Requests
	if n == 0 {
		return "(no finished requests)"
	}
	perRequest := func(ns uint64) float64 { return float64(ns) / float64(n) / 1e3 }
	cpu, own := perRequest(totals.CPUNs), perRequest(totals.SelfNs)
	var b strings.Builder
	withOwn := cpu
	switch {
	case gross:
		fmt.Fprintf(&b, "%.1f, its own cost in (--gross)", cpu)
	default:
		withOwn += own
		fmt.Fprintf(&b, "%.1f + its own %.1f = %.1f", cpu, own, withOwn)
	}
	if server := truth.MeanCPUMicros(); server > 0 {
		fmt.Fprintf(&b, " (%+.1f%%)", 100*(withOwn/server-1))
	}
	fmt.Fprintf(&b, ", %s of the server's %s requests", groupThousands(n), groupThousands(int(truth.Requests)))
	return b.String()
}

// groupThousands is n with a comma between each group of three digits.
func groupThousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// runDemoLoad drives every server at once with the same load, from a
// child process of this binary (demoLoadCommand), and waits for it.
func runDemoLoad(ctx context.Context, servers []*calserver.Process, conns, requests int) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding reqprof's own binary: %w", err)
	}
	args := []string{demoLoadCommand, "--conns", strconv.Itoa(conns), "--requests", strconv.Itoa(requests)}
	for _, s := range servers {
		args = append(args, "--addr", s.Addr)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// demoLoad is the demo's load generator, run as demoLoadCommand: the
// same load to every --addr at once. It returns the exit code.
func demoLoad(args []string, stderr io.Writer) int {
	flags := flag.NewFlagSet(demoLoadCommand, flag.ContinueOnError)
	flags.SetOutput(stderr)
	conns := flags.Int("conns", 4, "connections to each server")
	requests := flags.Int("requests", 4000, "requests to each server")
	var addrs []string
	flags.Func("addr", "a server's IP:PORT (repeatable)", func(a string) error { addrs = append(addrs, a); return nil })
	if err := flags.Parse(args); err != nil || flags.NArg() > 0 || len(addrs) == 0 {
		fmt.Fprintln(stderr, "reqprof demo-load: want --addr IP:PORT (repeatable), --conns N, --requests N")
		return 2
	}
	var wg sync.WaitGroup
	errs := make([]error, len(addrs))
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = loadgen.Run(context.Background(), loadgen.Config{
				Addr: addr, Conns: *conns, Requests: *requests,
				Paths: []string{"/mcp"}, Bodies: []string{demoCall},
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(stderr, "reqprof demo-load:", err)
		return 1
	}
	return 0
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
