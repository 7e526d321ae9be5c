package collector_test

// Runtimes that hand work to pool threads of their own: the loop thread
// reads and writes every connection, and a pool thread that never touches
// a socket does the request's work, then hands the result back to the
// loop. reqprof follows the request into the pool thread that the thread
// serving it wakes, and back. Each test server measures its own work per
// route; reqprof must count every request and attribute at least 75% of
// the process's CPU (12 to 42% before pool threads were followed). The
// routes' difference in mean CPU must be within 10% of the server's own,
// or else the report must say the routes' split is estimated: where jobs
// queue, the kernel cannot always tell which request a pool thread works
// for (docs/LIMITS.md), and a wrong figure must not pass for a measure.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/reqprof/reqprof/internal/calserver"
	"github.com/reqprof/reqprof/internal/loadgen"
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

// checkPoolRoutes loads /light and /heavy on srv at conns connections
// and checks reqprof against the server's own figures: counts exact, the
// routes' difference in mean CPU within 10% of the server's, at least 90%
// of the process's CPU attributed.
func checkPoolRoutes(t *testing.T, srv *calserver.Process, conns, requests int) {
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
		t.Logf("%s: %d requests, reqprof %.1f µs, server's work %.1f µs, estimated %.1f%%",
			route, got.Requests, means[path], truth.meanBurnUs(path), 100*float64(got.InterleavedNs)/float64(got.CPUNs))
	}
	got := means["/heavy"] - means["/light"]
	want := truth.meanBurnUs("/heavy") - truth.meanBurnUs("/light")
	attributed := 1 - float64(target.UnattributedNs)/float64(target.ProcessNs())
	t.Logf("/heavy − /light: reqprof %.1f µs, server %.1f µs (%+.1f%%); %.1f%% of the process's CPU attributed; unattributed by thread: %+v",
		got, want, 100*(got/want-1), 100*attributed, target.UnattributedSources)
	if !within(got, want, 0.10) {
		for _, path := range paths {
			route := routeTotals(target)["GET "+path]
			if share := float64(route.InterleavedNs) / float64(route.CPUNs); share < 0.5 {
				t.Errorf("/heavy − /light: reqprof %.1f µs, the server's work %.1f µs: more than 10%% apart, and GET %s says only %.1f%% of its CPU is estimated",
					got, want, path, 100*share)
			}
		}
	}
	if attributed < 0.75 {
		t.Errorf("%.1f%% of the process's CPU attributed, want at least 75%%", 100*attributed)
	}
}

// TestFastAPIThreadPool: FastAPI `def` endpoints under uvicorn: the
// asyncio loop thread reads each request and hands the endpoint to one of
// anyio's worker threads, which calls back into the loop with its result.
func TestFastAPIThreadPool(t *testing.T) {
	if _, err := os.Stat(debianPython); err != nil {
		t.Fatalf("%s is not installed (make deps installs python3-fastapi and uvicorn)", debianPython)
	}
	for _, conns := range []int{8, 32} {
		t.Run(fmt.Sprintf("%dconns", conns), func(t *testing.T) {
			srv := startPoolServer(t, debianPython, "fastapi_pool.py", 200)
			checkPoolRoutes(t, srv, conns, 3000)
		})
	}
}

// TestNodeLibuvPool: a Node server hashing with crypto.pbkdf2, which
// libuv runs on its pool of four threads; at 32 connections jobs queue
// for a pool thread, which takes the next without sleeping.
func TestNodeLibuvPool(t *testing.T) {
	node := lookPathOrFail(t, "node")
	for _, conns := range []int{8, 32} {
		t.Run(fmt.Sprintf("%dconns", conns), func(t *testing.T) {
			srv := startPoolServer(t, node, "node_pool.js", 200)
			checkPoolRoutes(t, srv, conns, 4000)
		})
	}
}
