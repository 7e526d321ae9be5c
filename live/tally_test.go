package live

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/reqprof/reqprof/profile"
)

func request(route string, userNs, kernelNs uint64) profile.Request {
	return profile.Request{
		Route: route, UserNs: userNs, KernelNs: kernelNs, SyscallNs: kernelNs,
		Start: time.Second, End: time.Second + time.Duration(2*(userNs+kernelNs)),
	}
}

func TestTallyCountsPerTargetAndRoute(t *testing.T) {
	tally := NewTally(0)
	// Two processes of one name count as one target.
	tally.Bind([]string{"api", "api", "db"})
	tally.Add(0, request("GET /a", 60_000, 20_000))
	tally.Add(1, request("GET /a", 40_000, 20_000))
	tally.Add(1, request("GET /b", 1_000, 0))
	tally.Add(2, request("GET", 5_000, 5_000))
	tally.Add(7, request("GET", 5_000, 5_000)) // an index not bound: not counted
	s := tally.Snapshot()
	if len(s.Targets) != 2 || s.Targets[0].Name != "api" || s.Targets[1].Name != "db" {
		t.Fatalf("targets %+v", s.Targets)
	}
	api := s.Targets[0]
	if c := api.Total.Counts; c.Requests != 3 || c.CPUNs != 141_000 || c.UserNs != 101_000 || c.KernelNs != 40_000 || c.SyscallNs != 40_000 || c.LatencyNs != 282_000 {
		t.Errorf("api's totals %+v", c)
	}
	if len(api.Routes) != 2 || api.Routes[0].Route != "GET /a" || api.Routes[0].Counts.Requests != 2 || api.Routes[0].CPU.Count != 2 {
		t.Errorf("api's routes %+v", api.Routes)
	}
	if api.Total.CPU.Count != 3 || api.Total.CPU.SumNs != 141_000 || api.Total.Latency.SumNs != 282_000 {
		t.Errorf("api's histograms: cpu %d, %d ns; latency %d ns", api.Total.CPU.Count, api.Total.CPU.SumNs, api.Total.Latency.SumNs)
	}
	// A new window's binding keeps what was counted.
	tally.Bind([]string{"db"})
	tally.Add(0, request("GET", 5_000, 5_000))
	if s := tally.Snapshot(); s.Targets[1].Total.Counts.Requests != 2 || s.Targets[0].Total.Counts.Requests != 3 {
		t.Errorf("after rebinding: %d and %d requests", s.Targets[0].Total.Counts.Requests, s.Targets[1].Total.Counts.Requests)
	}
}

// Routes past the bound count under OtherRoute, and so does the
// collector's own fold of that name: one route, never two of a name.
func TestTallyBoundsRoutes(t *testing.T) {
	tally := NewTally(3)
	tally.Bind([]string{"api"})
	tally.Add(0, request(OtherRoute, 1, 0))
	for i := range 1000 {
		tally.Add(0, request(fmt.Sprintf("GET /%d", i), 1, 0))
	}
	s := tally.Snapshot().Targets[0]
	names := map[string]uint64{}
	for _, r := range s.Routes {
		if _, dup := names[r.Route]; dup {
			t.Errorf("route %q twice", r.Route)
		}
		names[r.Route] = r.Counts.Requests
	}
	if len(s.Routes) != 4 || names[OtherRoute] != 1001-3 || names["GET /0"] != 1 {
		t.Errorf("routes %v, want GET /0 to /2 and %s", names, OtherRoute)
	}
}

func TestSnapshotSub(t *testing.T) {
	tally := NewTally(0)
	tally.Bind([]string{"api"})
	tally.Add(0, request("GET /a", 10_000, 0))
	before := tally.Snapshot()
	tally.Add(0, request("GET /a", 20_000, 0))
	tally.Add(0, request("GET /b", 1_000_000, 0))
	tally.Declare("late")
	d := tally.Snapshot().Sub(before)
	if len(d.Targets) != 2 || d.Targets[1].Name != "late" || d.Targets[1].Total.Counts.Requests != 0 {
		t.Fatalf("targets %+v", d.Targets)
	}
	api := d.Targets[0]
	if api.Total.Counts.Requests != 2 || api.Total.Counts.CPUNs != 1_020_000 || api.Total.CPU.Count != 2 {
		t.Errorf("api's delta %+v", api.Total.Counts)
	}
	if a := api.Routes[0]; a.Route != "GET /a" || a.Counts.Requests != 1 || a.CPU.Quantile(1) < 19_000 || a.CPU.Quantile(1) > 22_000 {
		t.Errorf("GET /a's delta: %d requests, max %.0f ns", a.Counts.Requests, a.CPU.Quantile(1))
	}
	if b := api.Routes[1]; b.Route != "GET /b" || b.Counts.Requests != 1 || b.CPU.Count != 1 {
		t.Errorf("GET /b's delta %+v", b.Counts)
	}
}

// Counting a request allocates nothing once its route is known, whatever
// it costs: the hook runs for each of up to 150,000 requests a second.
func TestTallyAddAllocatesNothing(t *testing.T) {
	tally := NewTally(0)
	tally.Bind([]string{"api"})
	routes := []string{"GET /a", "GET /b", "POST /c"}
	for _, r := range routes {
		tally.Add(0, request(r, 1, 1))
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		i++
		tally.Add(0, request(routes[i%3], uint64(i*997), uint64(i)))
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per request", allocs)
	}
}

// A Tally's memory is bounded however many routes clients make up and
// however often its targets are attached anew.
func TestTallyMemoryBoundedOverChurn(t *testing.T) {
	tally := NewTally(DefaultMaxRoutes)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var after1 uint64
	for round := range 20 {
		tally.Bind([]string{"api", "api", "worker"}) // a restart: attached anew
		for i := range 20_000 {
			tally.Add(i%3, request(fmt.Sprintf("GET /%d/%d", round, i), uint64(i), 1))
		}
		tally.Snapshot()
		if round == 1 {
			after1 = heap()
		}
	}
	grown := int64(heap()) - int64(after1)
	s := tally.Snapshot()
	for _, ts := range s.Targets {
		if len(ts.Routes) > DefaultMaxRoutes+1 {
			t.Errorf("%s has %d routes, bound %d", ts.Name, len(ts.Routes), DefaultMaxRoutes+1)
		}
	}
	if grown > 1<<20 {
		t.Errorf("heap grew %d KB over 18 more rounds of 20,000 new routes", grown>>10)
	}
}

func TestHistogramBuckets(t *testing.T) {
	var h Histogram
	for _, ns := range []uint64{0, 999, 1_000, 1_001, 150_000, 2e9} {
		h.Observe(ns)
	}
	var b Buckets
	h.copyTo(&b)
	want := [len(ClassicBoundsNs) + 1]uint64{}
	want[0], want[1], want[7], want[len(want)-1] = 3, 1, 1, 1 // 0, 999, 1000 | 1001 | 150k | 2 s
	if b.Classic != want || b.Count != 6 || b.Zero != 1 || b.SumNs != 2_000_153_000 {
		t.Errorf("classic %v zero %d count %d sum %d", b.Classic, b.Zero, b.Count, b.SumNs)
	}
	// Each value is in the native bucket whose bounds hold it.
	for _, ns := range []uint64{1, 999, 1_000, 1_001, 150_000, 2e9, 1 << 62} {
		k := nativeKey(ns)
		s := float64(ns) / 1e9
		if k < maxNativeKey && (s <= NativeUpperSeconds(k-1)*(1+1e-12) || s > NativeUpperSeconds(k)*(1+1e-12)) {
			t.Errorf("%d ns in bucket %d: (%g, %g] s", ns, k, NativeUpperSeconds(k-1), NativeUpperSeconds(k))
		}
	}
}

func TestQuantileWithinABucket(t *testing.T) {
	var h Histogram
	for i := range 10_000 {
		h.Observe(uint64(50_000 + i*10)) // 50 to 150 µs, even
	}
	var b Buckets
	h.copyTo(&b)
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := 50_000 + q*100_000
		if got := b.Quantile(q); math.Abs(got/want-1) > 0.045 {
			t.Errorf("q%.2f: %.0f ns, want %.0f within 4.5%%", q, got, want)
		}
	}
	if (Buckets{}).Quantile(0.99) != 0 {
		t.Error("the quantile of nothing is not 0")
	}
}

// The hook as reqprof serve runs it: what serving metrics adds to each
// finished request, over attach.
func BenchmarkTallyAdd(b *testing.B) {
	tally := NewTally(0)
	tally.Bind([]string{"api", "worker"})
	routes := []string{"GET /users/{id}", "POST /orders", "tools/call", "GET /health"}
	reqs := make([]profile.Request, 1024)
	for i := range reqs {
		reqs[i] = request(routes[(i/7)%len(routes)], uint64(20_000+i*97), uint64(5_000+i*13))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tally.Add(i&1, reqs[i&1023])
	}
}
