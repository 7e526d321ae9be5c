package collector

import (
	"strconv"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/profile"
	"github.com/reqprof/reqprof/report"
)

// These tests need no root: they feed the collector's bookkeeping requests
// directly, as consume does with each record it decodes.

// numbered is the i-th of a run of requests: its Conn tells it apart, and
// its figures grow with i so that sums are known.
func numbered(i int) profile.Request {
	return profile.Request{
		Conn:       uint64(i),
		Route:      [...]string{"GET /a", "GET /b", "GET /c"}[i%3],
		Port:       8080,
		End:        1_000,
		UserNs:     uint64(1_000 + i),
		KernelNs:   uint64(i % 7),
		RunqueueNs: uint64(i % 11),
		PageFaults: uint32(i % 2),
		BytesOut:   100,
	}
}

func TestReservoirKeepsItsLimit(t *testing.T) {
	const limit, added = 1_000, 100_000
	f := newFinishedRequests(limit, 1)
	for i := range added {
		f.add(numbered(i))
	}
	kept := f.sample.kept
	if len(kept) != limit || cap(kept) != limit {
		t.Fatalf("kept %d requests in room for %d, want %d in %d", len(kept), cap(kept), limit, limit)
	}
	seen := map[uint64]bool{}
	for _, r := range kept {
		if seen[r.Conn] {
			t.Fatalf("request %d kept twice", r.Conn)
		}
		seen[r.Conn] = true
	}
	if f.totals.Requests != added {
		t.Errorf("totals count %d requests, want %d", f.totals.Requests, added)
	}
}

// Each request added stays in the sample with the same chance, limit/n,
// whenever it came: over many samples, every position is kept about as
// often. A sample biased to the first or the last requests fails by far.
func TestReservoirIsUniform(t *testing.T) {
	const limit, added, trials = 10, 100, 4_000
	var keptAt [added]int
	for seed := range uint64(trials) {
		s := newFinishedRequests(limit, seed).sample
		for i := range added {
			s.add(numbered(i))
		}
		for _, r := range s.kept {
			keptAt[r.Conn]++
		}
	}
	// Chi-square over 100 positions, 99 degrees of freedom: above 148.2
	// with a chance of 0.1% when every position is as likely.
	expected := float64(trials) * limit / added
	var chiSquare float64
	for _, n := range keptAt {
		d := float64(n) - expected
		chiSquare += d * d / expected
	}
	if chiSquare > 148.2 {
		t.Errorf("chi-square %.1f over positions kept %v, want at most 148.2 for a uniform sample", chiSquare, keptAt)
	}
	// And in one large sample, the requests of each tenth of the run.
	const bigLimit, bigAdded = 5_000, 200_000
	s := newFinishedRequests(bigLimit, 7).sample
	for i := range bigAdded {
		s.add(numbered(i))
	}
	var tenths [10]int
	for _, r := range s.kept {
		tenths[r.Conn*10/bigAdded]++
	}
	chiSquare = 0
	for _, n := range tenths {
		d := float64(n) - bigLimit/10
		chiSquare += d * d / (bigLimit / 10)
	}
	// 9 degrees of freedom: 27.9 at 0.1%.
	if chiSquare > 27.9 {
		t.Errorf("kept per tenth of the run %v: chi-square %.1f, want at most 27.9", tenths, chiSquare)
	}
}

// The same records in the same order give the same sample.
func TestReservoirIsDeterministic(t *testing.T) {
	sample := func(seed uint64) []profile.Request {
		f := newFinishedRequests(50, seed)
		for i := range 5_000 {
			f.add(numbered(i))
		}
		return f.sample.kept
	}
	a, b, other := sample(3), sample(3), sample(4)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("two samples of seed 3 differ at %d: %+v and %+v", i, a[i], b[i])
		}
	}
	same := 0
	for i := range a {
		if a[i] == other[i] {
			same++
		}
	}
	if same == len(a) {
		t.Errorf("seeds 3 and 4 kept the same sample")
	}
}

// Once the sample is full, a request of a route seen before costs no
// allocation: the collector adds one per finished request.
func TestFinishedRequestsAddAllocatesNothing(t *testing.T) {
	names := [3]string{"GET /a", "GET /b", "GET /c"}
	f := newFinishedRequests(100, 1)
	r := numbered(0)
	for i := range 1_000 {
		r.Route = names[i%3]
		f.add(r)
	}
	i := 0
	if allocs := testing.AllocsPerRun(1_000, func() { r.Route = names[i%3]; i++; f.add(r) }); allocs > 0 {
		t.Errorf("%v allocations per request added, want none", allocs)
	}
}

// Totals count every request, exactly, while the sample keeps a few; a
// summary of them has the exact count and mean and the sample's
// percentiles.
func TestFinishedRequestsTotalsAreExact(t *testing.T) {
	const limit, added = 100, 5_000
	f := newFinishedRequests(limit, 1)
	var userNs, kernelNs, faults uint64
	var maxUser uint64
	perRoute := map[string]int{}
	for i := range added {
		r := numbered(i)
		f.add(r)
		userNs += r.UserNs
		kernelNs += r.KernelNs
		faults += uint64(r.PageFaults)
		maxUser = max(maxUser, r.UserNs)
		perRoute[r.Route]++
	}
	tot := f.totals
	if tot.Requests != added || tot.UserNs != userNs || tot.KernelNs != kernelNs || tot.CPUNs != userNs+kernelNs ||
		tot.PageFaults != faults || tot.MaxUserNs != maxUser || tot.BytesOut != 100*added || tot.LatencyNs != 1_000*added {
		t.Errorf("totals %+v, want %d requests, %d user ns, %d kernel ns, %d faults, max user %d",
			tot, added, userNs, kernelNs, faults, maxUser)
	}
	var merged profile.Totals
	for key, sum := range f.byRoute {
		if sum.Requests != perRoute[key.Route] {
			t.Errorf("route %q: %d requests, want %d", key.Route, sum.Requests, perRoute[key.Route])
		}
		merged.Merge(*sum)
	}
	if merged != tot {
		t.Errorf("routes' totals merge to %+v, want the target's %+v", merged, tot)
	}

	target := profile.Target{PID: 1, Finished: f.totals, RouteTotals: f.routeTotals(), Requests: f.sample.kept}
	s := report.Summarize(profile.Run{Targets: []profile.Target{target}}).Targets[0]
	wantMean := float64(int((float64(userNs+kernelNs)/added/100)+0.5)) / 10
	if s.Requests != added || s.SampledRequests == nil || *s.SampledRequests != limit || s.CPUUs.Mean != wantMean {
		t.Errorf("summary of %d requests, %v sampled, mean %v µs; want %d, %d, %v", s.Requests, s.SampledRequests, s.CPUUs.Mean, added, limit, wantMean)
	}
	sampleOnly := report.Summarize(profile.Run{Targets: []profile.Target{{PID: 1, Requests: f.sample.kept}}}).Targets[0]
	if s.CPUUs.P50 != sampleOnly.CPUUs.P50 || s.CPUUs.P99 != sampleOnly.CPUUs.P99 {
		t.Errorf("percentiles %+v, want the sample's %+v", s.CPUUs, sampleOnly.CPUUs)
	}
	var routes int
	for _, r := range s.Routes {
		routes += r.Requests
	}
	if routes != added {
		t.Errorf("routes hold %d requests, want all %d", routes, added)
	}
}

// Route names come from clients: past the bound, new ones are one name,
// the one the summary folds routes into, and known ones keep theirs.
func TestRouteNamesBounded(t *testing.T) {
	// Paths of letters that are no hex digits, which the namer would
	// take for an entity's id: i = 12 is "/hi".
	path := func(i int) string {
		var b strings.Builder
		b.WriteByte('/')
		for _, d := range strconv.Itoa(i) {
			b.WriteRune('g' + d - '0')
		}
		return b.String()
	}
	names := newRouteNames(3)
	request := func(i int) []byte { return []byte("GET " + path(i) + " HTTP/1.1\r\n") }
	for i := range 3 {
		if got, want := names.name(request(i), 80), "GET "+path(i); got != want {
			t.Fatalf("named %q, want %q", got, want)
		}
	}
	for i := 3; i < 1_000; i++ {
		if got := names.name(request(i), 80); got != profile.OtherRoutes {
			t.Fatalf("the %d-th name is %q, want %q", i+1, got, profile.OtherRoutes)
		}
	}
	if got, want := names.name(request(1), 80), "GET "+path(1); got != want {
		t.Errorf("a name kept before the bound now %q, want %q", got, want)
	}
	if len(names.interned) != 3 {
		t.Errorf("%d names kept, want 3", len(names.interned))
	}
}

// consume's bookkeeping of each decoded record: counted for its target,
// named, its kernel time by cause added; records of no target, or of
// requests whose start was not seen, only counted as malformed.
func TestConsumeResultAdd(t *testing.T) {
	res := newConsumeResult(2)
	record := func(target uint32, flags uint32) decodedRecord {
		const request = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
		in := reqprofRequestRecord{StartNs: 1_000, EndNs: 5_000, Target: target, Flags: flags, LocalPort: 8080,
			PayloadLen: uint16(len(request)), BytesIn: uint64(len(request)), Conn: uint64(target) + 1}
		in.Cost.UserNs = 2_000
		in.Cost.Syscalls[0] = reqprofSyscallSlot{Nr: 1 + 1, Calls: 1, Ns: 500} // write
		copy(in.Payload[:], request)
		d, err := decodeRecord(recordBytes(t, in))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for range 3 {
		res.add(record(1, 0))
	}
	res.add(record(2, 0))
	res.add(record(0, uint32(reqprofRecordFlagsREQ_START_UNSEEN)))

	if res.malformed != 2 {
		t.Errorf("%d malformed, want the record of no target and the one whose start was unseen", res.malformed)
	}
	if n := res.finished[0].totals.Requests; n != 0 {
		t.Errorf("target 0 has %d requests, want none", n)
	}
	got := res.finished[1]
	if got.totals.Requests != 3 || got.totals.UserNs != 6_000 || len(got.sample.kept) != 3 {
		t.Errorf("target 1: totals %+v and %d sampled, want 3 requests of 2 µs user each, all sampled", got.totals, len(got.sample.kept))
	}
	if sum := got.byRoute[profile.RouteKey{Route: "GET /a", Port: 8080}]; sum.Requests != 3 {
		t.Errorf("routes %v, want 3 requests of GET /a on 8080", got.byRoute)
	}
	if w := res.kernel[1].breakdown()[profile.Cause{Kind: profile.CauseSyscall, Name: "write"}]; w != (profile.KernelCost{Ns: 1_500, Calls: 3}) {
		t.Errorf("write %+v, want 1,500 ns in 3 calls", w)
	}
}

// A reservoir of limit 0 keeps nothing, and a window kept without a sample
// still counts every request exactly.
func TestReservoirOfNone(t *testing.T) {
	f := newFinishedRequests(0, 1)
	for i := range 1000 {
		f.add(profile.Request{Route: "GET /", UserNs: uint64(i)})
	}
	if len(f.sample.kept) != 0 || f.totals.Requests != 1000 || f.totals.UserNs != 999*1000/2 {
		t.Errorf("kept %d, counted %d of %d ns", len(f.sample.kept), f.totals.Requests, f.totals.UserNs)
	}
}
