package report

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reqprof/reqprof/profile"
)

// The figures of the one_target golden case, worked out by hand from
// requestsOneTo200: request i has 650·i ns user and 350·i ns kernel time.
func TestSummarizeByHand(t *testing.T) {
	s := Summarize(oneTargetRun())
	if s.DurationS != 10 || len(s.Targets) != 1 {
		t.Fatalf("summary %+v, want 10 s and one target", s)
	}
	got := s.Targets[0]
	var cpuNs []uint64
	for _, r := range requestsOneTo200() {
		cpuNs = append(cpuNs, r.CPUNs())
	}
	want := TargetSummary{
		PID: 4242, Comm: "uvicorn", Threads: 4,
		Requests:     200,
		RequestsPerS: 20,
		// Ranks 100, 180, 198 and 200 of 1 µs ... 200 µs; mean (1+200)/2.
		CPUUs: Dist{Mean: 100.5, P50: 100, P90: 180, P99: 198, Max: 200},
		// 65325 ns mean; 198 × 650 ns = 128.7 µs.
		UserUs: Dist{Mean: 65.3, P50: 65, P90: 117, P99: 128.7, Max: 130},
		// 35175 ns mean rounds half up; 198 × 350 ns = 69.3 µs.
		KernelUs: Dist{Mean: 35.2, P50: 35, P90: 63, P99: 69.3, Max: 70},
		// Bucketing has tests of its own: here it need only be of the CPU.
		CPUHistogram: newHistogram(cpuNs),
		// Means of 1,000·i ns of CPU, 80·i of it after the last byte and
		// 100·i setup; 2 ms of latency, 20,000 + 200·i ns on a run queue
		// and 1,500,000 + 1,000·i blocked: 82.4 µs from the first read to
		// the last write, 277.0 µs of the latency unaccounted.
		TimeSplitUs: &TimeSplitSummary{CPUUs: 100.5, ReadToWriteUs: 82.4, AfterResponseUs: 8, SetupUs: 10.1,
			LatencyUs: 2000, RunqueueUs: 40.1, BlockedUs: 1600.5, UnaccountedUs: 277},
		// 20,000 + 200·i ns and 1,500,000 + 1,000·i ns.
		RunqueueUs:  &Dist{Mean: 40.1, P50: 40, P90: 56, P99: 59.6, Max: 60},
		OffCPUUs:    &Dist{Mean: 1600.5, P50: 1600, P90: 1680, P99: 1698, Max: 1700},
		LatencyUs:   &Dist{Mean: 2000, P50: 2000, P90: 2000, P99: 2000, Max: 2000},
		FirstByteUs: &Dist{Mean: 1500, P50: 1500, P90: 1500, P99: 1500, Max: 1500},
		// i mod 4 faults; an involuntary switch every tenth request.
		PageFaultsPerRequest:  new(1.5),
		CtxSwitchesPerRequest: &CtxSwitches{Voluntary: 2, Involuntary: 0.1},
		// Each cause's ns and calls over 200 requests.
		KernelBreakdownUs: map[string]float64{
			"syscall:write": 13, "syscall:read": 7.5, "syscall:epoll_wait": 4.5, "syscall:sendto": 2,
			"syscall:futex": 1.3, "syscall:openat": 0.6, "syscall:close": 0.4, "syscall:fstat": 0.3,
			"syscall:other": 0.3, "syscall:mmap": 0.2, "syscall:(entered before attach)": 0.2,
			"softirq:NET_RX": 3, "softirq:TIMER": 0.8, "softirq:RCU": 0.2, "softirq:SCHED": 0.1, "irq": 1,
		},
		KernelBreakdownCalls: map[string]float64{
			"syscall:write": 2, "syscall:read": 2, "syscall:epoll_wait": 1, "syscall:sendto": 1,
			"syscall:futex": 0.45, "syscall:openat": 0.1, "syscall:close": 0.1, "syscall:fstat": 0.1,
			"syscall:other": 0.04, "syscall:mmap": 0.02, "syscall:(entered before attach)": 0.01,
		},
		// Grouping has tests of its own.
		Routes:             groupRoutes(requestsOneTo200(), GroupByRoute),
		BytesInPerRequest:  78,
		BytesOutPerRequest: 120,
		// 20100 µs in finished requests + 3500 µs in unfinished ones.
		AttributedCPUUs:   23600,
		UnattributedCPUUs: 1234.6,
		// Of 1,234,567 ns: the 8 workers' 828,000, the exited threads'
		// 200,000, then gc, timer and uvicorn; log-flush and signal fold.
		UnattributedSources: []UnattributedSourceSummary{
			{Thread: "worker", Threads: 8, CPUMs: 0.828, Share: 0.671},
			{Thread: profile.ExitedThreads, Threads: 3, CPUMs: 0.2, Share: 0.162},
			{Thread: "gc", Threads: 1, CPUMs: 0.09, Share: 0.073},
			{Thread: "timer", Threads: 1, CPUMs: 0.05, Share: 0.041},
			{Thread: "uvicorn", Threads: 1, CPUMs: 0.04, Share: 0.032},
			{Thread: OtherThreads, Threads: 2, CPUMs: 0.0266, Share: 0.022, Names: 2},
		},
		BetweenRequestsCPUUs: 234.6,
		SetupUs:              10.1,
		ProcessCPUUs:         24834.6,
		SchedCPUUs:           24900,
		AllInPerRequestUs:    124.2,   // 24,834.6 µs seen over 200 requests
		SeenCPUUs:            24834.6, // no own cost taken out
		RunqueueTotalUs:      new(12345.7),
		OffCPUTotalUs:        new(38765432.1),
		UnfinishedRequests:   2,
		UnfinishedCPUUs:      3500,
		Warnings:             []string{},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// Unattributed CPU is grouped by thread name, so a pool of threads of one
// name is one source of as many threads; sources come largest first, ties
// by name; past six names, all but the five largest fold into one, last;
// shares are of the target's unattributed CPU.
func TestSummarizeSources(t *testing.T) {
	src := func(tid uint32, comm string, ns uint64) profile.UnattributedSource {
		return profile.UnattributedSource{TID: tid, Comm: comm, Ns: ns, Threads: 1}
	}
	six := []profile.UnattributedSource{
		src(1, "b", 100), src(2, "a", 300), src(3, "c", 50), src(4, "a", 200),
		{Comm: profile.ExitedThreads, Ns: 100, Threads: 4},
		src(5, "d", 40), src(6, "e", 30),
		src(7, "zero", 0),           // none: not a source
		{TID: 8, Comm: "e", Ns: 10}, // built without a count: one thread
	}
	got := summarizeSources(six, 1000)
	want := []UnattributedSourceSummary{
		{Thread: "a", Threads: 2, CPUMs: 0.0005, Share: 0.5},
		{Thread: profile.ExitedThreads, Threads: 4, CPUMs: 0.0001, Share: 0.1},
		{Thread: "b", Threads: 1, CPUMs: 0.0001, Share: 0.1},
		{Thread: "c", Threads: 1, CPUMs: 0.0001, Share: 0.05},
		{Thread: "e", Threads: 2, CPUMs: 0, Share: 0.04},
		{Thread: "d", Threads: 1, CPUMs: 0, Share: 0.04},
	}
	// 40 ns each for d and e: a tie, by name.
	want[4], want[5] = want[5], want[4]
	if !reflect.DeepEqual(got, want) {
		t.Errorf("six names: got  %+v\nwant %+v", got, want)
	}

	seven := append(six, src(9, "f", 25), src(10, "f", 25))
	got = summarizeSources(seven, 1000)
	if len(got) != 6 {
		t.Fatalf("seven names: %d sources, want the five largest and one folded: %+v", len(got), got)
	}
	// d (40), e (40) and f (50) fold: f is now the fifth largest.
	if got[4].Thread != "f" || got[4].Threads != 2 {
		t.Errorf("fifth source %+v, want f, of 2 threads", got[4])
	}
	folded := UnattributedSourceSummary{Thread: OtherThreads, Threads: 3, CPUMs: 0.0001, Share: 0.08, Names: 2}
	if got[5] != folded {
		t.Errorf("folded source %+v, want %+v", got[5], folded)
	}

	// Shares never pass 1, even of sources that add up to more than
	// the target's unattributed CPU.
	if got := summarizeSources([]profile.UnattributedSource{src(1, "a", 300), src(2, "b", 100)}, 200); got[0].Share != 0.75 || got[1].Share != 0.25 {
		t.Errorf("shares of sources past their total: %+v", got)
	}
	if got := summarizeSources(nil, 500); got != nil {
		t.Errorf("no sources summarized as %+v", got)
	}
}

// The first target is the baseline of comparisons: the order the user gave
// must survive.
func TestSummarizeKeepsTargetOrder(t *testing.T) {
	s := Summarize(profile.Run{Targets: []profile.Target{{PID: 30}, {PID: 10}, {PID: 20}}})
	var pids []int
	for _, ts := range s.Targets {
		pids = append(pids, ts.PID)
	}
	if want := []int{30, 10, 20}; !slices.Equal(pids, want) {
		t.Errorf("PIDs in order %v, want %v", pids, want)
	}
}

// An empty target or a zero-length window must give zeros, not NaN or
// infinities, which JSON cannot encode.
func TestSummarizeEmpty(t *testing.T) {
	for _, run := range []profile.Run{
		{Duration: 0, Targets: []profile.Target{{PID: 1}}},
		{Duration: time.Second, Targets: []profile.Target{{PID: 1}}},
		{Duration: 0, Targets: []profile.Target{{PID: 1, Requests: []profile.Request{{UserNs: 1000}}}}},
	} {
		s := Summarize(run)
		if _, err := json.Marshal(s); err != nil {
			t.Errorf("Summarize(%+v) cannot be encoded: %v", run, err)
		}
	}
	got := Summarize(profile.Run{Duration: time.Second, Targets: []profile.Target{{PID: 1}}}).Targets[0]
	want := TargetSummary{PID: 1, RunqueueTotalUs: new(0.0), OffCPUTotalUs: new(0.0), Warnings: []string{}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestSummarizeNoTargets(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, Summarize(profile.Run{Duration: time.Second})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"targets": []`) {
		t.Errorf("no targets should encode as an empty list, got\n%s", b.String())
	}
}

func TestCoverageWarning(t *testing.T) {
	cases := []struct {
		name        string
		seenNs      uint64
		schedNs     uint64
		wantWarning bool
	}{
		{"exactly 95%", 950_000, 1_000_000, false},
		{"just under 95%", 949_999, 1_000_000, true},
		{"exactly 105%", 1_050_000, 1_000_000, false},
		{"just over 105%", 1_050_001, 1_000_000, true},
		{"no kernel accounting", 950_000, 0, false},
		{"nothing seen", 0, 1_000_000, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			target := profile.Target{PID: 1, UnattributedNs: c.seenNs, SchedCPUNs: c.schedNs}
			got := Summarize(profile.Run{Duration: time.Second, Targets: []profile.Target{target}}).Targets[0]
			if got.Partial != c.wantWarning || (len(got.Warnings) == 1) != c.wantWarning {
				t.Errorf("partial %v, warnings %q; want a warning: %v", got.Partial, got.Warnings, c.wantWarning)
			}
		})
	}
}

// Less than three quarters of the CPU seen going to requests is said, naming the
// threads most of the rest went to: the per-request figures then leave out
// most of the process's work (a runtime's pool threads), which must not
// pass silently.
func TestLowAttributionWarning(t *testing.T) {
	pool := []profile.UnattributedSource{
		{TID: 11, Comm: "AnyIO worker th", Ns: 700_000, Threads: 1},
		{TID: 12, Comm: "AnyIO worker th", Ns: 90_000, Threads: 1},
		{TID: 1, Comm: "uvicorn", Ns: 10_000, Threads: 1},
	}
	cases := []struct {
		name         string
		attributedNs uint64
		requests     int
		want         string
	}{
		{"a fifth attributed", 200_000, 100, `only 20.0% of the CPU seen went to requests: per-request figures leave out the rest, most of it (79.0%) on 2 threads named "AnyIO worker th" (a runtime's pool threads, which never touch a connection, are followed for libuv and CPython 3.11 only: docs/LIMITS.md)`},
		{"a half", 800_000, 100, `only 50.0% of the CPU seen went to requests: per-request figures leave out the rest, most of it (49.4%) on 2 threads named "AnyIO worker th" (a runtime's pool threads, which never touch a connection, are followed for libuv and CPython 3.11 only: docs/LIMITS.md)`},
		{"exactly three quarters", 2_400_000, 100, ""},
		{"no request", 0, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			target := profile.Target{PID: 1, UnattributedNs: 800_000, UnattributedSources: pool, SchedCPUNs: 800_000 + c.attributedNs,
				Finished: profile.Totals{Requests: c.requests, CPUNs: c.attributedNs}}
			got := Summarize(profile.Run{Duration: time.Second, Targets: []profile.Target{target}}).Targets[0]
			if c.want == "" {
				if got.Partial {
					t.Errorf("warnings %q, want none", got.Warnings)
				}
				return
			}
			if !got.Partial || len(got.Warnings) != 1 || got.Warnings[0] != c.want {
				t.Errorf("partial %v, warnings %q\nwant %q", got.Partial, got.Warnings, c.want)
			}
		})
	}
}

// The kernel's accounting includes reqprof's own cost in the target's
// threads: where it was taken out of the requests, the coverage check adds
// it back, or every run of a server with many syscalls a request would be
// partial for what reqprof itself took out.
func TestCoverageCountsOwnCostTakenOut(t *testing.T) {
	target := profile.Target{PID: 1, UnattributedNs: 100_000, SchedCPUNs: 1_000_000,
		Finished: profile.Totals{Requests: 10, CPUNs: 830_000, SelfNs: 70_000},
		SelfCost: profile.SelfCost{Measured: true, TotalNs: 70_000}}
	got := Summarize(profile.Run{Duration: time.Second, Targets: []profile.Target{target}}).Targets[0]
	if got.Partial || got.SeenCPUUs != 1000 {
		t.Errorf("own cost taken out: partial %v (warnings %q), seen %.1f µs; want not partial, 1,000 µs seen", got.Partial, got.Warnings, got.SeenCPUUs)
	}
	target.SelfCost.Kept = true // --gross: 93% seen is 93%
	got = Summarize(profile.Run{Duration: time.Second, Targets: []profile.Target{target}}).Targets[0]
	if !got.Partial || len(got.Warnings) != 1 || !strings.HasPrefix(got.Warnings[0], "reqprof saw 93.00%") {
		t.Errorf("own cost kept: partial %v, warnings %q; want reqprof saw 93.00%%", got.Partial, got.Warnings)
	}
}

func TestWarningsInOrder(t *testing.T) {
	target := profile.Target{PID: 1, LostEvents: 3, Exited: true, Execd: "/usr/bin/python3", ExecdAfter: 1200 * time.Millisecond,
		UnattributedNs: 10, SchedCPUNs: 1_000_000}
	got := Summarize(profile.Run{Duration: time.Second, Targets: []profile.Target{target}}).Targets[0]
	prefixes := []string{"3 events lost", "process exited",
		"process exec'd /usr/bin/python3 1.2 s into the window: figures after it are of the new program", "reqprof saw 0.00%"}
	if !got.Partial || len(got.Warnings) != len(prefixes) {
		t.Fatalf("partial %v, warnings %q; want %d warnings", got.Partial, got.Warnings, len(prefixes))
	}
	for i, p := range prefixes {
		if !strings.HasPrefix(got.Warnings[i], p) {
			t.Errorf("warning %d is %q, want it to start %q", i, got.Warnings[i], p)
		}
	}
}

// Lost events are named by cause, in a fixed order, those a later reqprof
// may add after them.
func TestLostEventsByCause(t *testing.T) {
	target := profile.Target{PID: 1, LostEvents: 10, LostBreakdown: map[string]uint64{
		"malformed": 1, "conn_map_full": 2, "ring_buffer": 4, "thread_map_full": 2, "new_cause": 1,
	}}
	got := Summarize(profile.Run{Duration: time.Second, Targets: []profile.Target{target}}).Targets[0]
	want := "10 events lost (ring buffer full 4, thread state not created 2, connection map full 2, malformed records 1, new_cause 1): some CPU time or requests are missing"
	if len(got.Warnings) != 1 || got.Warnings[0] != want {
		t.Errorf("warnings %q, want %q", got.Warnings, want)
	}
}

// Another reqprof loaded during the window is said under reqprof's own
// cost, and in the JSON.
func TestOtherReqprofsWarned(t *testing.T) {
	for n, want := range map[int]string{
		0: "",
		1: "WARNING: another reqprof was loaded during the window: the targets' threads ran its programs too, and their CPU figures include that cost\n",
		2: "WARNING: 2 other reqprofs were loaded during the window: the targets' threads ran their programs too, and their CPU figures include that cost\n",
	} {
		run := profile.Run{Duration: time.Second, Targets: []profile.Target{{PID: 1}},
			Overhead: profile.Overhead{CollectorCPUNs: 1, OtherInstances: n}}
		s := Summarize(run)
		var b bytes.Buffer
		if err := WriteTable(&b, s); err != nil {
			t.Fatal(err)
		}
		_, after, _ := strings.Cut(b.String(), "its collector (user space)")
		_, warning, _ := strings.Cut(after, "\n")
		if warning != want || s.Overhead.OtherReqprofs != n {
			t.Errorf("%d others: other_reqprofs %d, table ends %q; want %q", n, s.Overhead.OtherReqprofs, warning, want)
		}
	}
}

// A sampled target's counts, means, maxima and figures per request are
// those of every finished request; its percentiles and histogram those of
// the sample, which tells because they differ from every request's.
func TestSummarizeSampled(t *testing.T) {
	run := sampledRun()
	target := run.Targets[0]
	got := Summarize(run).Targets[0]

	if got.Requests != 1000 || got.RequestsPerS != 100 {
		t.Errorf("%d requests, %v req/s; want the 1,000 that finished, 100 req/s", got.Requests, got.RequestsPerS)
	}
	if got.SampledRequests == nil || *got.SampledRequests != len(target.Requests) {
		t.Fatalf("sampled requests %v, want %d", got.SampledRequests, len(target.Requests))
	}
	// Every request: i µs for i in 1 .. 1000.
	if got.CPUUs.Mean != 500.5 || got.CPUUs.Max != 1000 {
		t.Errorf("cpu mean %v max %v, want every request's 500.5 and 1000", got.CPUUs.Mean, got.CPUUs.Max)
	}
	// The sample: 7, 14, ... 994 µs; ranks 71, 128 and 141 of 142.
	if got.CPUUs.P50 != 497 || got.CPUUs.P90 != 896 || got.CPUUs.P99 != 987 {
		t.Errorf("cpu percentiles %+v, want the sample's 497, 896, 987", got.CPUUs)
	}
	var sampleMean float64
	for _, r := range target.Requests {
		sampleMean += float64(r.CPUNs()) / 1000 / float64(len(target.Requests))
	}
	if sampleMean == got.CPUUs.Mean {
		t.Fatalf("the sample's mean is every request's: the test cannot tell them apart")
	}
	var histogramCount int
	for _, n := range got.CPUHistogram.Counts {
		histogramCount += n
	}
	if histogramCount != len(target.Requests) {
		t.Errorf("histogram of %d requests, want the sample's %d", histogramCount, len(target.Requests))
	}
	// 0.5 faults and 201 bytes out per request, over all 1,000.
	if *got.PageFaultsPerRequest != 0.5 || got.BytesOutPerRequest != 201 || got.KernelBreakdownUs["syscall:write"] != 150.2 {
		t.Errorf("per request: %v faults, %v bytes out, %v µs write; want 0.5, 201, 150.2",
			*got.PageFaultsPerRequest, got.BytesOutPerRequest, got.KernelBreakdownUs["syscall:write"])
	}
	if got.AttributedCPUUs != 500_500 {
		t.Errorf("attributed %v µs, want every request's 500,500", got.AttributedCPUUs)
	}

	if len(got.Routes) != 3 {
		t.Fatalf("routes %q, want 3", routeCounts(got.Routes))
	}
	var routeRequests, routeSampled int
	for _, r := range got.Routes {
		routeRequests += r.Requests
		if r.SampledRequests == nil {
			t.Fatalf("route %q has no sampled_requests in a sampled target", r.Route)
		}
		routeSampled += *r.SampledRequests
	}
	if routeRequests != 1000 || routeSampled != len(target.Requests) {
		t.Errorf("routes hold %d requests, %d sampled; want 1000 and %d", routeRequests, routeSampled, len(target.Requests))
	}
	// Requests 333, 556 and 778: none a multiple of 7.
	rare := got.Routes[2]
	if rare.Route != "GET /rare" || rare.Requests != 3 || *rare.SampledRequests != 0 ||
		rare.CPUUs != (Dist{Mean: 555.7, Max: 778}) {
		t.Errorf("rare route %+v: want 3 requests, none sampled, mean 555.7 and max 778 µs, no percentiles", rare)
	}
}

// A target whose sample holds every request says nothing of a sample, and
// sums the same as one built with its requests alone.
func TestSummarizeTotalsWithFullSample(t *testing.T) {
	built := oneTargetRun()
	withTotals := oneTargetRun()
	target := &withTotals.Targets[0]
	target.RouteTotals = map[profile.RouteKey]profile.Totals{}
	for _, r := range target.Requests {
		target.Finished.Add(r)
		key := profile.RouteKey{Route: r.Route, Port: r.Port}
		sum := target.RouteTotals[key]
		sum.Add(r)
		target.RouteTotals[key] = sum
	}
	got, want := Summarize(withTotals), Summarize(built)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("with totals %+v\nwithout   %+v", got, want)
	}
	if got.Targets[0].SampledRequests != nil {
		t.Errorf("sampled requests %d of a full sample, want none said", *got.Targets[0].SampledRequests)
	}
}

// The exact count, not the sample's, divides BPF time per request.
func TestOverheadPerRequestOfSampledRun(t *testing.T) {
	run := sampledRun()
	run.Overhead = profile.Overhead{Measured: true, BPFNs: 5_000_000, BPFRuns: 10_000}
	if got := Summarize(run).Overhead.BPFNsPerRequest; got == nil || *got != 5000 {
		t.Errorf("BPF ns per request %v, want 5,000 ns over 1,000 requests", got)
	}
}

// Tables and pages say when percentiles come from a sample, and show none
// where the sample held none.
func TestSampleSaid(t *testing.T) {
	s := Summarize(sampledRun())
	var table, page bytes.Buffer
	if err := WriteTable(&table, s); err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(&page, s); err != nil {
		t.Fatal(err)
	}
	if want := "percentiles from a uniform sample of 142 of 1,000 requests\n"; !strings.Contains(table.String(), want) {
		t.Errorf("table says nothing of its sample, want %q in:\n%s", want, table.String())
	}
	if want := "percentiles and the histogram from a uniform sample of 142 of 1,000 requests"; !strings.Contains(page.String(), want) {
		t.Errorf("page says nothing of its sample, want %q", want)
	}
	var unsampled bytes.Buffer
	if err := WriteTable(&unsampled, Summarize(oneTargetRun())); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(unsampled.String(), "sample") {
		t.Errorf("a table of every request speaks of a sample:\n%s", unsampled.String())
	}

	// A hand-built target whose sample is empty has no percentiles.
	run := sampledRun()
	run.Targets[0].Requests = nil
	empty := Summarize(run).Targets[0]
	header, rows := distCells(empty)
	if header[2] != "p50" || rows[0][2] != "" || rows[0][1] != "500.5" {
		t.Errorf("cpu row %q of no sample, want the mean and no p50", rows[0])
	}
	if empty.CPUHistogram != nil {
		t.Errorf("histogram %+v of no sample, want none", empty.CPUHistogram)
	}
}

// A run whose BPF figures are unknown says why, in the footer and the JSON.
func TestOverheadUnknownSaysWhy(t *testing.T) {
	run := sampledRun()
	run.Overhead = profile.Overhead{CollectorCPUNs: 1_000_000, BPFUnknown: "window too short"}
	s := Summarize(run)
	if s.Overhead == nil || s.Overhead.BPFNsPerRequest != nil || s.Overhead.BPFUnknown != "window too short" {
		t.Fatalf("overhead %+v, want no BPF figures and the reason", s.Overhead)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, s); err != nil {
		t.Fatal(err)
	}
	if want := "its BPF programs, for every process's events on every CPU (not only the targets'): run time unknown (window too short)"; !strings.Contains(table.String(), want) {
		t.Errorf("footer lacks %q:\n%s", want, table.String())
	}
}

// Statistics kept for part of the window: the run time per request is the
// sample's over the requests finished meanwhile, whatever the rest of the
// window did, and the run time over the window is scaled by time.
func TestOverheadFromSampledStatistics(t *testing.T) {
	run := sampledRun()
	run.Overhead = profile.Overhead{Measured: true, BPFNs: 2_000_000, BPFRuns: 40_000,
		BPFSampled: time.Second, BPFSampledRequests: 4_000, BPFWindow: 10 * time.Second}
	o := Summarize(run).Overhead
	if o.BPFNsPerRequest == nil || *o.BPFNsPerRequest != 500 {
		t.Errorf("BPF ns per request %v, want 500: 2 ms over the 4,000 requests of the sample", o.BPFNsPerRequest)
	}
	if o.BPFCPUUs == nil || *o.BPFCPUUs != 20_000 {
		t.Errorf("BPF CPU %v µs, want 20,000: 2 ms in 1 s of a 10 s window", o.BPFCPUUs)
	}
	if o.BPFNsPerRun == nil || *o.BPFNsPerRun != 50 {
		t.Errorf("BPF ns per run %v, want 50", o.BPFNsPerRun)
	}

	run.Overhead.BPFSampledRequests = 0
	s := Summarize(run)
	if s.Overhead.BPFNsPerRequest != nil {
		t.Errorf("BPF ns per request %v with no request in the sample, want none", *s.Overhead.BPFNsPerRequest)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, s); err != nil {
		t.Fatal(err)
	}
	if want := "timed over 1.0 s of the window: no request finished meanwhile; 50.0 ns a program run; 20.0 ms of CPU over the whole window, scaled by time"; !strings.Contains(table.String(), want) {
		t.Errorf("footer lacks %q:\n%s", want, table.String())
	}
}
