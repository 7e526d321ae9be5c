package collector_test

// Runtimes that hand a request's work to pool threads of their own: the
// loop thread reads and writes every connection, and a pool thread that
// never touches a socket does the work, then hands the result back.
// libuv's pool (Node) is followed, job by job (bpf/pools.h): its tests
// hold the routes' figures to the server's own. Other runtimes' pools
// (anyio's worker threads under FastAPI) are not (docs/LIMITS.md), and
// what their tests hold is that this is never silent: a run whose
// routes' figures are wrong (their difference in mean CPU more than 10%
// from the server's own) carries the report's warning that most of the
// process's CPU went to no request.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/calserver"
	"github.com/reqprof/reqprof/internal/loadgen"
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
	target, got, want := loadPoolRoutes(t, srv, conns, requests)
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

// loadPoolRoutes loads /light and /heavy on srv at conns connections, each
// request counted, and returns the target with the routes' difference in
// mean CPU as reqprof and as the server measured it.
func loadPoolRoutes(t *testing.T, srv *calserver.Process, conns, requests int) (target profile.Target, got, want float64) {
	t.Helper()
	paths := []string{"/light", "/heavy"}
	target, truth, totals := loadRoutes(t, srv, conns, requests, paths)
	means := map[string]float64{}
	for _, path := range paths {
		means[path] = meanTotalsUs(totals[path])
		t.Logf("GET %s: %d requests, reqprof %.1f µs, server's work %.1f µs", path, totals[path].Requests, means[path], truth.meanBurnUs(path))
	}
	return target, means["/heavy"] - means["/light"], truth.meanBurnUs("/heavy") - truth.meanBurnUs("/light")
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

// TestNodeLibuvPool: a Node server hashing with crypto.pbkdf2, which
// libuv runs on its pool of four threads; at 32 connections jobs queue
// for a pool thread, which takes the next without sleeping. Every job is
// followed to the request that queued it: the routes' difference within
// 10% of the server's own, every job handed back to its request, and at
// least 90% of the process's CPU attributed (V8's helper threads, its
// GC's concurrent marking and its compiler, stay unattributed). The
// routes' code is compiled before the window (poolWarmRequests): in the
// first thousands of requests V8's helpers compile for 10 to 15% of the
// process's CPU, on no request's behalf. Node runs as it does by
// default: with V8 on the loop thread (--single-threaded) its collections
// land on whichever request runs, 2 to 4 ms each, and a route's mean over
// a thousand requests moves by them (docs/LIMITS.md).
func TestNodeLibuvPool(t *testing.T) {
	testbin.RequireBPF(t)
	node := lookPathOrFail(t, "node")
	for _, conns := range []int{8, 32} {
		t.Run(fmt.Sprintf("%dconns", conns), func(t *testing.T) {
			srv := startPoolServer(t, node, "node_pool.js", 200)
			if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: srv.Addr, Conns: conns, Requests: poolWarmRequests, Paths: []string{"/warm"}}); err != nil {
				t.Fatalf("warm-up load: %v", err)
			}
			target := checkPoolFollowed(t, srv, conns, 2000)
			if attributed := float64(target.AttributedNs()) / float64(target.ProcessNs()); attributed < 0.90 {
				t.Errorf("%.1f%% of the process's CPU attributed, want at least 90%%", 100*attributed)
			}
		})
	}
}

// poolWarmRequests are the requests of node_pool.js's /warm (a job of
// /light's size) made before a window.
const poolWarmRequests = 4000

// checkPoolFollowed loads /light and /heavy on srv at conns connections:
// every request is counted, its one job followed to it, and the routes'
// difference in mean CPU is within 10% of the server's own.
func checkPoolFollowed(t *testing.T, srv *calserver.Process, conns, requests int) profile.Target {
	t.Helper()
	target, got, want := loadPoolRoutes(t, srv, conns, requests)
	t.Logf("/heavy − /light: reqprof %.1f µs, server %.1f µs (%+.1f%%); %.1f%% of the process's CPU attributed; pool %q: %d jobs queued, %d done, %.1f ms; unattributed by thread %v",
		got, want, 100*(got/want-1), 100*float64(target.AttributedNs())/float64(target.ProcessNs()),
		target.Pool, target.PoolJobs, target.PoolJobsDone, float64(target.PoolNs)/1e6, target.UnattributedSources)
	if target.Pool != collector.PoolFollowed {
		t.Fatalf("pool %q, want %q", target.Pool, collector.PoolFollowed)
	}
	// One job a request, each queued while it was read and handed back
	// before its response.
	if target.PoolJobs != uint64(requests) || target.PoolJobsDone != uint64(requests) {
		t.Errorf("%d jobs queued by requests, %d handed back to them; want %d each", target.PoolJobs, target.PoolJobsDone, requests)
	}
	if !within(got, want, 0.10) {
		t.Errorf("/heavy − /light: reqprof %.1f µs, the server's work %.1f µs: more than 10%% apart", got, want)
	}
	return target
}
