package collector_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/internal/testservers/cserver"
	"github.com/reqprof/reqprof/internal/testservers/gohttp"
	"github.com/reqprof/reqprof/profile"
	"github.com/reqprof/reqprof/report"
)

// stackRoute is one route of a two-route server whose handlers burn in
// functions of their own: what its profile must show.
type stackRoute struct {
	path     string // "/alpha"
	function string // the burn function's name, as its binary says it
	burnUs   float64
}

// TestStacksGoRoutes profiles the Go net/http server with stack samples,
// its routes burning 1 ms in BurnAlpha and 2 ms in BurnBeta: each route's
// user samples are in its own function (≥90%) and hardly ever in the
// other's (≤2%), and the µs per request each function is charged is
// within 10% of what the server measured around it. The burn loops they
// call are leaves the compiler gives no frame, so the kernel's walk of
// frame pointers skips BurnAlpha and BurnBeta: they are found from the
// word on top of the stack, where the pclntab says there is no frame.
func TestStacksGoRoutes(t *testing.T) {
	testbin.RequireBPF(t)
	bin := buildCmd(t, "github.com/reqprof/reqprof/internal/testservers/gohttp/cmd/gohttp")
	cmd := exec.Command(bin, "--route", "/alpha=1ms", "--route", "/beta=2ms", "--burn-in", "/alpha=alpha", "--burn-in", "/beta=beta")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	srv, err := calserver.Spawn(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	w := profileStacks(t, srv, 1000)
	var truth gohttp.Stats
	if err := srv.StopInto(&truth); err != nil {
		t.Fatal(err)
	}
	const pkg = "github.com/reqprof/reqprof/internal/testservers/gohttp."
	checkStackRoutes(t, w, srv.PID(), truth.Requests, []stackRoute{
		{"/alpha", pkg + "BurnAlpha", truth.BurnUs["/alpha"]},
		{"/beta", pkg + "BurnBeta", truth.BurnUs["/beta"]},
	})
}

// TestStacksCRoutes is TestStacksGoRoutes for a C server (a thread per
// connection), whose functions come from its ELF symbol table.
func TestStacksCRoutes(t *testing.T) {
	testbin.RequireBPF(t)
	bin, err := cserver.Build(t.TempDir())
	if errors.Is(err, cserver.ErrNoCompiler) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv, err := calserver.Spawn(exec.Command(bin, "--alpha-us", "1000", "--beta-us", "2000"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	w := profileStacks(t, srv, 1000)
	var truth cserver.Stats
	if err := srv.StopInto(&truth); err != nil {
		t.Fatal(err)
	}
	checkStackRoutes(t, w, srv.PID(), truth.Requests, []stackRoute{
		{"/alpha", "burn_alpha", truth.BurnUs["/alpha"]},
		{"/beta", "burn_beta", truth.BurnUs["/beta"]},
	})
}

// profileStacks loads srv with requests split between /alpha and /beta
// over 4 connections, sampling stacks.
func profileStacks(t *testing.T, srv *calserver.Process, requests int) window {
	t.Helper()
	return measureConfig(t, []int{srv.PID()}, func(cfg *collector.Config) { cfg.Stacks = true }, func() {
		if _, err := loadgen.Run(context.Background(), loadgen.Config{
			Addr: srv.Addr, Conns: 4, Requests: requests, Paths: []string{"/alpha", "/beta"},
		}); err != nil {
			t.Fatalf("load: %v", err)
		}
	})
}

func checkStackRoutes(t *testing.T, w window, pid int, served map[string]uint64, routes []stackRoute) {
	t.Helper()
	target := targetOf(t, w.run, pid)
	st := target.Stacks
	if st == nil {
		t.Fatal("no stacks in the run")
	}
	var samples uint64
	for _, s := range st.Samples {
		samples += s.Count
	}
	sampledMs := float64(samples*st.PeriodNs) / 1e6
	t.Logf("%d samples (%.1f ms at %d Hz) for %.1f ms of CPU by the kernel's clock; lost %v; notes %v",
		samples, sampledMs, st.Hz, float64(w.schedCPU[pid])/1e6, st.Lost, st.Notes)
	if kernelMs := float64(w.schedCPU[pid]) / 1e6; !within(sampledMs, kernelMs, 0.15) {
		t.Errorf("samples stand for %.1f ms of CPU, the kernel counted %.1f ms: more than 15%% apart", sampledMs, kernelMs)
	}
	summary := report.Summarize(w.run)
	var ts report.TargetSummary
	for _, s := range summary.Targets {
		if s.PID == pid {
			ts = s
		}
	}
	for i, r := range routes {
		other := routes[1-i]
		name := "GET " + r.path
		if got := routeRequests(target, name); uint64(got) != served[r.path] {
			t.Errorf("%s: %d requests reqprof finished, the server served %d", name, got, served[r.path])
		}
		var user, own, others uint64
		for _, s := range st.Samples {
			if s.Route.Route != name || s.Kernel {
				continue
			}
			user += s.Count
			if onStack(st, s, r.function) {
				own += s.Count
			}
			if onStack(st, s, other.function) {
				others += s.Count
			}
		}
		if user == 0 {
			t.Errorf("%s: no user samples", name)
			continue
		}
		ownShare, otherShare := float64(own)/float64(user), float64(others)/float64(user)
		us := functionTotalUs(ts, name, r.function)
		t.Logf("%s: %d user samples, %.1f%% in %s, %.1f%% in %s; %.1f µs per request in it, the server measured %.1f µs (%+.1f%%)",
			name, user, 100*ownShare, r.function, 100*otherShare, other.function, us, r.burnUs, 100*(us/r.burnUs-1))
		if ownShare < 0.90 {
			t.Errorf("%s: %.1f%% of its user samples in %s, want at least 90%%", name, 100*ownShare, r.function)
		}
		if otherShare > 0.02 {
			t.Errorf("%s: %.1f%% of its user samples in %s, want at most 2%%", name, 100*otherShare, other.function)
		}
		if !within(us, r.burnUs, 0.10) {
			t.Errorf("%s: %s charged %.1f µs per request, the server measured %.1f µs: more than 10%% apart", name, r.function, us, r.burnUs)
		}
	}
}

func routeRequests(target profile.Target, route string) int {
	n := 0
	for key, totals := range target.RouteTotals {
		if key.Route == route {
			n += totals.Requests
		}
	}
	return n
}

// onStack says whether function is anywhere on a sample's stack.
func onStack(st *profile.Stacks, s profile.StackSample, function string) bool {
	for _, i := range s.Frames {
		if st.Frames[i].Function == function {
			return true
		}
	}
	return false
}

// functionTotalUs is what the summary charges function per request of
// route, with it anywhere on the stack: its total, or for a function that
// is never the sampled one (a caller), from the folded stacks.
func functionTotalUs(ts report.TargetSummary, route, function string) float64 {
	if ts.Stacks == nil {
		return 0
	}
	for _, r := range ts.Stacks.Routes {
		if r.Route != route {
			continue
		}
		for _, f := range r.Functions {
			if f.Function == function {
				return f.Total
			}
		}
		var with uint64
		for _, f := range ts.Stacks.Folded {
			if f.Route == route && containsFrame(f.Frames, function) {
				with += f.Samples
			}
		}
		return float64(with) / float64(r.Samples) * *r.CPUUsPerRequest
	}
	return 0
}

func containsFrame(frames []string, function string) bool {
	for _, f := range frames {
		if f == function || strings.TrimSuffix(f, "_[k]") == function {
			return true
		}
	}
	return false
}

// TestStacksStrippedBinary profiles the C server stripped of its symbols:
// its burn functions are addresses in its binary, told apart still, and a
// note says why, once.
func TestStacksStrippedBinary(t *testing.T) {
	testbin.RequireBPF(t)
	bin, err := cserver.Build(t.TempDir(), "-s")
	if errors.Is(err, cserver.ErrNoCompiler) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv, err := calserver.Spawn(exec.Command(bin, "--alpha-us", "1000", "--beta-us", "1000"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	w := profileStacks(t, srv, 400)
	srv.Kill()
	st := targetOf(t, w.run, srv.PID()).Stacks
	var noted int
	for _, n := range st.Notes {
		if strings.Contains(n, bin) && strings.Contains(n, "no symbols") {
			noted++
		}
	}
	if noted != 1 {
		t.Errorf("notes %q, want one saying %s has no symbols", st.Notes, bin)
	}
	// The sampled function of most of a route's user samples: one
	// address of the binary for each route, not the same one.
	top := map[string]string{}
	for _, route := range []string{"GET /alpha", "GET /beta"} {
		counts := map[string]uint64{}
		for _, s := range st.Samples {
			if s.Route.Route == route && !s.Kernel {
				counts[st.Frames[s.Frames[0]].Name()] += s.Count
			}
		}
		var best string
		for name, n := range counts {
			if n > counts[best] {
				best = name
			}
		}
		top[route] = best
		t.Logf("%s: most sampled in %s (%d of its user samples)", route, best, counts[best])
		if !strings.HasPrefix(best, "cserver+0x") {
			t.Errorf("%s: most sampled in %q, want an address in cserver", route, best)
		}
	}
	if top["GET /alpha"] == top["GET /beta"] {
		t.Errorf("both routes most sampled at %s", top["GET /alpha"])
	}
}
