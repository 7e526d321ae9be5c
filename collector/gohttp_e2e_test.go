package collector_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/internal/testservers/gohttp"
	"github.com/reqprof/reqprof/profile"
)

// TestGoNetHTTP profiles a plain Go net/http server, goroutines free to move
// between its threads, GOMAXPROCS=2, 8 connections, three routes whose
// handlers burn 0, 500 µs and 2 ms. Each route is counted exactly, and what
// a route costs above the empty one matches what its handler burned, by the
// server's own clock: requests are not mixed up as goroutines move. With
// a sleep halfway through each handler, the goroutine parks and the runtime
// resumes it on whichever thread is free: the second half runs on a thread
// that last read another connection, and only following goroutines charges
// it to the right request.
func TestGoNetHTTP(t *testing.T) {
	testbin.RequireBPF(t)
	bin := buildCmd(t, "github.com/reqprof/reqprof/internal/testservers/gohttp/cmd/gohttp")
	for _, tc := range []struct {
		name  string
		pause string
	}{
		{"handlers burn", "0s"},
		{"handlers sleep halfway", "1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkGoNetHTTP(t, bin, tc.pause)
		})
	}
}

func checkGoNetHTTP(t *testing.T, bin, pause string) {
	cmd := exec.Command(bin, "--route", "/zero=0s", "--route", "/a=500us", "--route", "/b=2ms", "--pause", pause)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	srv, err := calserver.Spawn(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)

	const requests = 1500
	w := measure(t, []int{srv.PID()}, func() {
		if _, err := loadgen.Run(context.Background(), loadgen.Config{
			Addr: srv.Addr, Conns: 8, Requests: requests, Paths: []string{"/zero", "/a", "/b"},
		}); err != nil {
			t.Fatalf("load: %v", err)
		}
	})
	var truth gohttp.Stats
	if err := srv.StopInto(&truth); err != nil {
		t.Fatal(err)
	}
	target := targetOf(t, w.run, srv.PID())
	if target.Goroutines != collector.GoroutinesFollowed {
		t.Errorf("goroutines %q, want %q", target.Goroutines, collector.GoroutinesFollowed)
	}
	routes := byRoute(target.Requests)
	base := meanCPUUs(routes["GET /zero"])
	for _, path := range []string{"/zero", "/a", "/b"} {
		got := routes["GET "+path]
		if uint64(len(got)) != truth.Requests[path] {
			t.Errorf("%s: reqprof counted %d, the server %d", path, len(got), truth.Requests[path])
		}
	}
	for _, path := range []string{"/a", "/b"} {
		above := meanCPUUs(routes["GET "+path]) - base
		t.Logf("%s: %.1f µs per request, %.1f above /zero; the handler burned %.1f µs (%+.1f%%); burns p50 %.1f max %.1f",
			path, meanCPUUs(routes["GET "+path]), above, truth.BurnUs[path], 100*(above/truth.BurnUs[path]-1), truth.BurnP50Us[path], truth.BurnMaxUs[path])
		if !within(above, truth.BurnUs[path], 0.05) {
			t.Errorf("%s costs %.1f µs above /zero, its handler burned %.1f µs: more than 5%% apart; its costliest requests: %s",
				path, above, truth.BurnUs[path], costliest(routes["GET "+path], 5))
		}
	}
	unattributed := float64(target.UnattributedNs) / float64(target.ProcessNs())
	t.Logf("/zero: %.1f µs per request (net/http's own cost); unattributed %.1f%%, largest %+v", base, 100*unattributed, target.UnattributedSources)
	if unattributed > 0.10 {
		t.Errorf("unattributed %.1f%% of the process CPU under steady load, want below 10%%", 100*unattributed)
	}
}

// costliest describes the n requests of most CPU: whether a mean is off
// by a few requests or by all of them.
func costliest(requests []profile.Request, n int) string {
	sorted := slices.Clone(requests)
	slices.SortFunc(sorted, func(a, b profile.Request) int { return cmp.Compare(b.CPUNs(), a.CPUNs()) })
	var parts []string
	for _, r := range sorted[:min(n, len(sorted))] {
		parts = append(parts, fmt.Sprintf("%.1f µs (user %.1f, kernel %.1f) on thread %d at %v", float64(r.CPUNs())/1e3, float64(r.UserNs)/1e3, float64(r.KernelNs)/1e3, r.TID, r.Start))
	}
	return strings.Join(parts, "; ")
}
