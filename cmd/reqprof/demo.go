package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/profile"
	"github.com/reqprof/reqprof/testdata/calserver"
	"github.com/reqprof/reqprof/testdata/loadgen"
)

// demoServerCommand runs the bundled calibrated server; demo starts it as a
// child process of this same binary so that nothing else need be installed.
const demoServerCommand = "demo-server"

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
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var out outputFlags
	out.register(fs, 0)
	requests := fs.Int("requests", 4000, "requests the demo load sends to each server")
	conns := fs.Int("conns", 4, "connections the demo load opens to each server")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := out.validate(); err != nil {
		return err
	}

	var servers []*calserver.Process
	defer func() {
		for _, s := range servers {
			s.Kill()
		}
	}()
	var targets []collector.Target
	for _, d := range demoServers {
		s, err := startDemoServer(d.args)
		if err != nil {
			return err
		}
		servers = append(servers, s)
		targets = append(targets, collector.Target{PID: s.PID(), Label: d.label})
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attached := make(chan struct{})
	type outcome struct {
		run profile.Run
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		cfg := out.config(targets)
		cfg.OnAttached = func(line string) {
			fmt.Fprintln(stderr, line)
			close(attached)
		}
		run, err := collector.Run(ctx, cfg)
		done <- outcome{run, err}
	}()
	select {
	case <-attached:
	case o := <-done:
		return o.err
	}

	fmt.Fprintf(stderr, "reqprof: demo load: %d MCP tools/call requests over %d connections to each of %d servers\n",
		*requests, *conns, len(servers))
	loadErr := loadAll(ctx, servers, *conns, *requests)
	cancel()
	o := <-done
	if loadErr != nil {
		return fmt.Errorf("demo load: %w", loadErr)
	}
	if o.err != nil {
		return o.err
	}
	var truths []calserver.Stats
	for _, s := range servers {
		truth, err := s.Stop()
		if err != nil {
			return err
		}
		truths = append(truths, truth)
	}
	if err := writeReport([]profile.Run{o.run}, out, false, stdout); err != nil {
		return err
	}
	if out.jsonPath != "-" {
		fmt.Fprintln(stdout, "\neach server's own measure (CLOCK_THREAD_CPUTIME_ID around each request):")
		for i, truth := range truths {
			fmt.Fprintf(stdout, "  %-6s %d requests, %.1f µs CPU per request\n", demoServers[i].label, truth.Requests, truth.MeanCPUMicros())
		}
	}
	return nil
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
