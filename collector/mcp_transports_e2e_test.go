package collector_test

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/reqprof/reqprof/internal/mcpserver"
	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/profile"
)

// TestMCPStdioAndHTTP profiles one MCP server built with the official Go
// SDK run twice in one window, as the SDK's client runs it: spawned over
// stdio (CommandTransport) and over streamable HTTP on loopback, both
// given the same handshake and the same calls. On both, each tools/call is
// one request counted as the server counted it, the handshake's initialize
// and tools/list are requests named by their method, the JSON-RPC names
// are the same (over HTTP behind "POST /mcp"), and each tool's CPU per
// call is reported, the heavy tool's above the light one's by what the two
// burn apart. Both servers run with GOMAXPROCS=1, as in
// TestMCPServerOverStdio: the SDK runs each call's handler in a goroutine
// that never touches stdio or the connection, and on another thread its
// CPU is the request's only where that thread was handed it.
func TestMCPStdioAndHTTP(t *testing.T) {
	testbin.RequireBPF(t)
	bin := buildCmd(t, "github.com/reqprof/reqprof/internal/mcpserver/cmd/mcpserver")
	pair, err := mcpserver.StartPair(bin, 100*time.Microsecond, 400*time.Microsecond, []string{"GOMAXPROCS=1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pair.Kill)
	// Of each tool on each server: enough that the medians of calls that
	// differ by the runtime's and the host's noise settle within 2-3%.
	const calls = 750
	ctx := context.Background()
	began := time.Now()
	var loaded time.Duration
	w := measure(t, []int{pair.Stdio.PID, pair.HTTP.PID}, func() {
		defer func() { loaded = time.Since(began) }()
		began = time.Now()
		if err := pair.Connect(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 2 * calls {
			if err := pair.Call(ctx, mcpserver.Tools[i%2]); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Logf("the load took %v", loaded.Round(time.Millisecond))
	stdioTruth, httpTruth, err := pair.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		child  *mcpserver.Child
		truth  mcpserver.Stats
		prefix string // what names a call's route before its JSON-RPC name
		// The handshake as the SDK's client makes it: server/discover
		// first; the streamable HTTP handler, with sessions, does not take
		// it, and the client falls back to initialize, which over HTTP is
		// a POST of its own, as is the notification that follows it.
		handshake []string
	}{
		{pair.Stdio, stdioTruth, "", []string{"server/discover", "tools/list"}},
		{pair.HTTP, httpTruth, "POST /mcp ", []string{"server/discover", "initialize", "notifications/initialized", "tools/list"}},
	} {
		target := targetOf(t, w.run, side.child.PID)
		routes := routeTotals(target)
		rpc := map[string]profile.Totals{}
		var names []string
		for name, totals := range routes {
			names = append(names, name)
			if method, ok := strings.CutPrefix(name, side.prefix); ok {
				rpc[method] = totals
			}
		}
		sort.Strings(names)
		light, heavy := rpc["tools/call light"], rpc["tools/call heavy"]
		burnDiff := side.truth.BurnUs["heavy"] - side.truth.BurnUs["light"]
		medianBurnDiff := side.truth.MedianBurnUs["heavy"] - side.truth.MedianBurnUs["light"]
		attributed := float64(target.AttributedNs()) / float64(target.ProcessNs())
		medianDiff := medianCPUUs(target, side.prefix+"tools/call heavy") - medianCPUUs(target, side.prefix+"tools/call light")
		t.Logf("%s: light %d (%.1f µs), heavy %d (%.1f µs): %.1f apart, medians %.1f apart, the tools' burns %.1f apart by their own clock (medians %.1f); mean %.1f µs a request; attributed %.1f%%; notifications %d; unfinished %d; routes %q",
			side.child.Transport, light.Requests, meanTotalsUs(light), heavy.Requests, meanTotalsUs(heavy),
			meanTotalsUs(heavy)-meanTotalsUs(light), medianDiff, burnDiff, medianBurnDiff, meanFinishedCPUUs(target), 100*attributed,
			target.Notifications, target.UnfinishedRequests, names)
		for _, tool := range mcpserver.Tools {
			got := rpc["tools/call "+tool].Requests
			if got != calls || uint64(got) != side.truth.Calls[tool] {
				t.Errorf("%s: counted %d calls of %s, made %d, the server answered %d", side.child.Transport, got, tool, calls, side.truth.Calls[tool])
			}
		}
		for _, method := range side.handshake {
			if n := rpc[method].Requests; n != 1 {
				t.Errorf("%s: %d requests named %q, want the handshake's 1", side.child.Transport, n, side.prefix+method)
			}
		}
		if light.CPUNs == 0 || heavy.CPUNs == 0 {
			t.Errorf("%s: no CPU per call reported: light %d ns, heavy %d ns", side.child.Transport, light.CPUNs, heavy.CPUNs)
		}
		// Medians, not means: over HTTP the means came out 1 to 13% further
		// apart than the burns (stdio: -7 to +1%), in 10 runs on a loaded
		// machine, from a tail of calls that the medians do not show (HTTP
		// +1.5 to +8%, stdio +0.5 to +3%); what that tail holds is not
		// established here. Set against the burns' medians: the host's pace
		// drifts within a run, and moved the burns' mean and median apart.
		if !within(medianDiff, medianBurnDiff, 0.1) {
			t.Errorf("%s: heavy's median CPU is %.1f µs above light's, the tools' median burns %.1f µs apart: more than 10%% off", side.child.Transport, medianDiff, medianBurnDiff)
		}
	}
}

// medianCPUUs is the median CPU of the requests of route target kept.
func medianCPUUs(target profile.Target, route string) float64 {
	var cpu []uint64
	for _, r := range target.Requests {
		if r.Route == route {
			cpu = append(cpu, r.CPUNs())
		}
	}
	if len(cpu) == 0 {
		return 0
	}
	slices.Sort(cpu)
	return float64(cpu[len(cpu)/2]) / 1e3
}
