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
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reqprof/reqprof/internal/calserver"
	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/profile"
	"github.com/reqprof/reqprof/report"
)

// startPoolServer starts one of internal/poolservers' servers with the
// interpreter given, working burnUs per unit.
func startPoolServer(t *testing.T, interpreter, script string, burnUs int) *calserver.Process {
	t.Helper()
	return startScriptServer(t, interpreter, nil, "poolservers", script, fmt.Sprint(burnUs))
}

// checkPoolNotSilent loads /light and /heavy on srv at conns connections:
// every request is counted, and either the routes' difference in mean CPU
// is within 10% of the server's own, or the report warns that its
// per-request figures leave out most of the process's CPU.
func checkPoolNotSilent(t *testing.T, srv *calserver.Process, conns, requests int) {
	t.Helper()
	// The warm-up starts the pool's threads before the window.
	paths := []string{"/light", "/heavy"}
	target, truth, totals := loadRoutes(t, srv, conns, requests, paths)
	means := map[string]float64{}
	for _, path := range paths {
		means[path] = meanTotalsUs(totals[path])
		t.Logf("GET %s: %d requests, reqprof %.1f µs, server's work %.1f µs", path, totals[path].Requests, means[path], truth.meanBurnUs(path))
	}
	got := means["/heavy"] - means["/light"]
	want := truth.meanBurnUs("/heavy") - truth.meanBurnUs("/light")
	attributed := float64(target.AttributedNs()) / float64(target.ProcessNs())
	summary := report.Summarize(profile.Run{Duration: time.Second, Targets: []profile.Target{target}}).Targets[0]
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
