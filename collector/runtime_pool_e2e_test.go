package collector_test

// Runtimes that hand a request's work to pool threads of their own: the
// loop thread reads and writes every connection, and a pool thread that
// never touches a socket does the work, then hands the result back.
// reqprof does not follow those threads (docs/LIMITS.md), so the
// requests' figures leave their work out. What these tests hold is that
// this is never silent: a run whose routes' figures are wrong (their
// difference in mean CPU more than 10% from the server's own) carries the
// report's warning that most of the process's CPU went to no request.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/internal/calserver"
	"github.com/reqprof/reqprof/internal/loadgen"
	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/report"
)

// startPoolServer starts one of internal/poolservers' servers with the
// interpreter given, working burnUs per unit.
func startPoolServer(t *testing.T, interpreter, script string, burnUs int) *calserver.Process {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "internal", "poolservers", script))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(interpreter, path, fmt.Sprint(burnUs))
	cmd.Stderr = os.Stderr
	p, err := calserver.Spawn(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// checkPoolNotSilent loads /light and /heavy on srv at conns connections:
// every request is counted, and either the routes' difference in mean CPU
// is within 10% of the server's own, or the report warns that its
// per-request figures leave out most of the process's CPU.
func checkPoolNotSilent(t *testing.T, srv *calserver.Process, conns, requests int) {
	t.Helper()
	// Before the window: the pool's threads start, and the connections'
	// first requests are served.
	if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: srv.Addr, Conns: conns, Requests: 8 * conns, Paths: []string{"/warm"}}); err != nil {
		t.Fatalf("warm-up load: %v", err)
	}
	paths := []string{"/light", "/heavy"}
	w := measure(t, []int{srv.PID()}, func() {
		if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: srv.Addr, Conns: conns, Requests: requests, Paths: paths}); err != nil {
			t.Fatalf("load: %v", err)
		}
	})
	var truth loopServerStats
	if err := srv.StopInto(&truth); err != nil {
		t.Fatalf("server: %v", err)
	}
	target := targetOf(t, w.run, srv.PID())
	means := map[string]float64{}
	for _, path := range paths {
		route := "GET " + path
		got, ok := routeTotals(target)[route]
		if !ok {
			t.Fatalf("no route %q in %v", route, target.RouteTotals)
		}
		if got.Requests != truth.Routes[path].Requests {
			t.Errorf("%s: reqprof counted %d requests, the server %d", route, got.Requests, truth.Routes[path].Requests)
		}
		means[path] = meanTotalsUs(got)
		t.Logf("%s: %d requests, reqprof %.1f µs, server's work %.1f µs", route, got.Requests, means[path], truth.meanBurnUs(path))
	}
	got := means["/heavy"] - means["/light"]
	want := truth.meanBurnUs("/heavy") - truth.meanBurnUs("/light")
	attributed := float64(target.AttributedNs()) / float64(target.ProcessNs())
	var summary report.TargetSummary
	for _, s := range report.Summarize(w.run).Targets {
		if s.PID == srv.PID() {
			summary = s
		}
	}
	t.Logf("/heavy − /light: reqprof %.1f µs, server %.1f µs (%+.1f%%); %.1f%% of the process's CPU attributed; warnings %q",
		got, want, 100*(got/want-1), 100*attributed, summary.Warnings)
	if within(got, want, 0.10) {
		return
	}
	warned := false
	for _, w := range summary.Warnings {
		warned = warned || strings.HasPrefix(w, "only ") && strings.Contains(w, "of the CPU seen went to requests")
	}
	if !warned || !summary.Partial {
		t.Errorf("/heavy − /light: reqprof %.1f µs, the server's work %.1f µs: more than 10%% apart, and the report does not warn (%.1f%% attributed, warnings %q)",
			got, want, 100*attributed, summary.Warnings)
	}
}

// TestFastAPIThreadPoolNotSilent: FastAPI `def` endpoints under uvicorn:
// the asyncio loop thread reads each request and hands the endpoint to one
// of anyio's worker threads, which calls back into the loop with its
// result.
func TestFastAPIThreadPoolNotSilent(t *testing.T) {
	testbin.RequireBPF(t)
	lookPathOrFail(t, debianPython)
	for _, conns := range []int{8, 32} {
		t.Run(fmt.Sprintf("%dconns", conns), func(t *testing.T) {
			srv := startPoolServer(t, debianPython, "fastapi_pool.py", 200)
			checkPoolNotSilent(t, srv, conns, 2000)
		})
	}
}

// TestNodeLibuvPoolNotSilent: a Node server hashing with crypto.pbkdf2,
// which libuv runs on its pool of four threads; at 32 connections jobs
// queue for a pool thread, which takes the next without sleeping.
func TestNodeLibuvPoolNotSilent(t *testing.T) {
	testbin.RequireBPF(t)
	node := lookPathOrFail(t, "node")
	for _, conns := range []int{8, 32} {
		t.Run(fmt.Sprintf("%dconns", conns), func(t *testing.T) {
			srv := startPoolServer(t, node, "node_pool.js", 200)
			checkPoolNotSilent(t, srv, conns, 2000)
		})
	}
}
