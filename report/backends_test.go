package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/profile"
)

// TestBackendsPerRequest: a target's backends are summed by peer over its
// routes, per request; a route's only over its own.
func TestBackendsPerRequest(t *testing.T) {
	a := profile.RouteKey{Route: "GET /a", Port: 80}
	b := profile.RouteKey{Route: "GET /b", Port: 80}
	backends := []profile.Backend{
		{Route: a, Peer: "127.0.0.1:9400", Calls: 100, WaitNs: 50_000_000, BytesIn: 4100, BytesOut: 3400},
		{Route: b, Peer: "127.0.0.1:9400", Calls: 200, WaitNs: 100_000_000, BytesIn: 8200, BytesOut: 6800},
		{Route: b, Peer: "unix", Calls: 100, WaitNs: 10_000_000},
	}
	all := summarizeBackends(backends, 200, func(profile.RouteKey) bool { return true })
	want := []BackendSummary{
		{Peer: "127.0.0.1:9400", CallsPerRequest: 1.5, WaitUs: 750, BytesIn: 61.5, BytesOut: 51},
		{Peer: "unix", CallsPerRequest: 0.5, WaitUs: 50},
	}
	if len(all) != len(want) || all[0] != want[0] || all[1] != want[1] {
		t.Errorf("target's backends %+v, want %+v", all, want)
	}
	onlyB := summarizeBackends(backends, 100, func(k profile.RouteKey) bool { return k == b })
	if len(onlyB) != 2 || onlyB[0].CallsPerRequest != 2 || onlyB[0].WaitUs != 1000 || onlyB[1].CallsPerRequest != 1 {
		t.Errorf("route's backends %+v", onlyB)
	}
	if got := summarizeBackends(nil, 100, func(profile.RouteKey) bool { return true }); got != nil {
		t.Errorf("no backends summarized as %+v, want nil", got)
	}
	var out bytes.Buffer
	writeBackends(&out, TargetSummary{Runtime: "node", RuntimeFrom: "detected", Backends: all, Interleaved: 12.5,
		Routes: []RouteSummary{{Route: "GET /b", Backends: onlyB, Interleaved: 20}}})
	for _, line := range []string{
		"runtime: node (detected): a backend's answer resumes its request at once",
		"backend 127.0.0.1:9400: 1.50 calls a request, 750.0 µs waiting, 61.5 B in, 51.0 B out",
		"  GET /b → 127.0.0.1:9400: 2.00 calls a request, 1,000.0 µs waiting",
		"interleaved: 12.5% of requests' CPU is estimated",
		"  GET /b: 20.0%",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("table lacks %q:\n%s", line, out.String())
		}
	}
}
