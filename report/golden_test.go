package report

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/reqprof/reqprof/profile"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

type goldenCase struct {
	name      string
	run       profile.Run
	summarize SummarizeOptions
	table     TableOptions
}

// requestsOneTo200 are 200 requests whose CPU is 1 µs, 2 µs, ... 200 µs,
// split 65% user and 35% kernel, and whose other figures grow with i too,
// so every figure can be checked by hand.
func requestsOneTo200() []profile.Request {
	var reqs []profile.Request
	for i := uint64(1); i <= 200; i++ {
		start := time.Duration(i) * 50 * time.Millisecond
		// 120 of one route, 60 of another, 20 health checks on a port of
		// their own.
		route, port := "GET /users/{id}", uint16(8000)
		switch {
		case i%10 == 9:
			route, port = "GET /health", 9090
		case i%10 >= 6:
			route = "POST /users"
		}
		reqs = append(reqs, profile.Request{
			TID:        4243,
			Conn:       0xffff888100000000 + i%4,
			Route:      route,
			Port:       port,
			Start:      start,
			FirstWrite: start + 1500*time.Microsecond,
			End:        start + 2*time.Millisecond,
			UserNs:     650 * i,
			KernelNs:   350 * i,
			SyscallNs:  300 * i,
			SoftirqNs:  40 * i,
			IrqNs:      10 * i,
			RunqueueNs: 20_000 + 200*i,
			OffCPUNs:   1_500_000 + 1000*i,
			PageFaults: uint32(i % 4),
			// A tenth of its CPU was its connection's setup, and 8% of it
			// came after its last byte written.
			SetupNs: 100 * i,
			TailNs:  80 * i,

			VoluntarySwitches:   2,
			InvoluntarySwitches: uint32(i/10 - (i-1)/10), // every tenth request

			BytesIn:  78,
			BytesOut: 100 + 40*(i%2), // alternately 100 and 140: mean 120
		})
	}
	return reqs
}

// breakdownOneTo200 is the kernel time of requestsOneTo200 by cause: their
// 300·i ns of syscalls, 40·i of softirqs and 10·i of irqs, summed over i,
// in 16 causes whose long tail folds.
var breakdownOneTo200 = byCause(map[string]profile.KernelCost{
	"syscall:write":                   {Ns: 2_600_000, Calls: 400},
	"syscall:read":                    {Ns: 1_500_000, Calls: 400},
	"syscall:epoll_wait":              {Ns: 900_000, Calls: 200},
	"syscall:sendto":                  {Ns: 400_000, Calls: 200},
	"syscall:futex":                   {Ns: 250_000, Calls: 90},
	"syscall:openat":                  {Ns: 120_000, Calls: 20},
	"syscall:close":                   {Ns: 80_000, Calls: 20},
	"syscall:fstat":                   {Ns: 60_000, Calls: 20},
	"syscall:other":                   {Ns: 50_000, Calls: 7},
	"syscall:mmap":                    {Ns: 40_000, Calls: 3},
	"syscall:(entered before attach)": {Ns: 30_000, Calls: 2},
	"softirq:NET_RX":                  {Ns: 600_000},
	"softirq:TIMER":                   {Ns: 150_000},
	"softirq:RCU":                     {Ns: 40_000},
	"softirq:SCHED":                   {Ns: 14_000},
	"irq":                             {Ns: 201_000},
})

// byCause keys kernel costs, given by their causes' names, by the causes.
func byCause(byName map[string]profile.KernelCost) map[profile.Cause]profile.KernelCost {
	causes := make(map[profile.Cause]profile.KernelCost, len(byName))
	for name, cost := range byName {
		causes[profile.ParseCause(name)] = cost
	}
	return causes
}

func oneTargetRun() profile.Run {
	return profile.Run{
		Meta:     profile.Meta{SyscallEntryNs: 85},
		Duration: 10 * time.Second,
		// 200 requests: 310 ns of BPF each.
		Overhead: profile.Overhead{Measured: true, BPFNs: 62_000, BPFRuns: 1_550, BPFSampled: 200 * time.Millisecond, BPFSampledRequests: 180, BPFWindow: time.Second, CollectorCPUNs: 3_500_000, CollectorMaxRSSKB: 28_672},
		Targets: []profile.Target{{
			PID: 4242, Comm: "uvicorn", Threads: 4,
			Requests:           requestsOneTo200(),
			KernelBreakdown:    breakdownOneTo200,
			RunqueueNs:         12_345_678,
			OffCPUNs:           38_765_432_100,
			UnfinishedRequests: 2, UnfinishedNs: 3_500_000,
			UnattributedNs: 1_234_567, BetweenRequestsNs: 234_567,
			UnattributedSources: unattributedOneTarget(),
			SchedCPUNs:          24_900_000,
		}},
	}
}

// unattributedOneTarget are the 1,234,567 ns of oneTargetRun's unattributed
// CPU by thread: a pool of 8 workers, 3 threads that exited, and 5 names of
// one thread each, of which the 2 smallest fold.
func unattributedOneTarget() []profile.UnattributedSource {
	sources := []profile.UnattributedSource{
		{TID: 4250, Comm: "gc", Ns: 90_000, Threads: 1},
		{Comm: profile.ExitedThreads, Ns: 200_000, Threads: 3},
		{TID: 4251, Comm: "timer", Ns: 50_000, Threads: 1},
		{TID: 4242, Comm: "uvicorn", Ns: 40_000, Threads: 1},
		{TID: 4252, Comm: "log-flush", Ns: 15_000, Threads: 1},
		{TID: 4253, Comm: "signal", Ns: 11_567, Threads: 1},
	}
	for i := range uint32(8) { // 100,000 ns to 107,000 ns: 828,000 ns
		sources = append(sources, profile.UnattributedSource{TID: 4260 + i, Comm: "worker", Ns: 100_000 + 1000*uint64(i), Threads: 1})
	}
	return sources
}

func twoTargetsPartialRun() profile.Run {
	return profile.Run{
		Duration: 2500 * time.Millisecond,
		// Out of PID order: the summary keeps the given order.
		Targets: []profile.Target{
			{
				PID: 111, Comm: "server", Label: "rust-sdk", Threads: 2,
				Requests: []profile.Request{
					{Route: "POST /mcp tools/call add", End: 400 * time.Microsecond, UserNs: 120_000, KernelNs: 30_000, BytesIn: 300, BytesOut: 1_500},
					{Route: "POST /mcp tools/call add", End: 300 * time.Microsecond, UserNs: 80_000, KernelNs: 20_000, BytesIn: 300, BytesOut: 1_500},
					{Route: "POST /mcp tools/list", End: 900 * time.Microsecond, UserNs: 300_000, KernelNs: 100_000, BytesIn: 310, BytesOut: 1_520},
					{Route: "POST /mcp tools/call add", End: 350 * time.Microsecond, UserNs: 95_000, KernelNs: 5_000, BytesIn: 290, BytesOut: 1_480},
				},
				KernelBreakdown: byCause(map[string]profile.KernelCost{
					"syscall:write": {Ns: 100_000, Calls: 8}, "syscall:read": {Ns: 40_000, Calls: 4}, "softirq:NET_RX": {Ns: 15_000},
				}),
				UnattributedNs: 3_250_000,
				// A thread can name itself anything: an escape sequence
				// must not reach the terminal.
				UnattributedSources: []profile.UnattributedSource{
					{TID: 112, Comm: "tokio-runtime-w", Ns: 2_000_000, Threads: 1},
					{TID: 113, Comm: "tokio-runtime-w", Ns: 1_000_000, Threads: 1},
					{TID: 114, Comm: "\x1b[31mevil", Ns: 250_000, Threads: 1},
				},
				SchedCPUNs: 5_000_000, // reqprof saw 80%
				LostEvents: 17,
			},
			{
				PID: 99, Comm: "calserver", Label: "go-sdk", Threads: 9,
				// A client chose this route's name: it must not reach
				// the terminal as an escape sequence.
				Requests: []profile.Request{
					{Route: "POST /mcp\x1b[2J", End: 200 * time.Microsecond, UserNs: 40_000, KernelNs: 60_000, BytesIn: 64, BytesOut: 2_048},
					{Route: "POST /mcp\x1b[2J", End: 210 * time.Microsecond, UserNs: 45_500, KernelNs: 61_000, BytesIn: 64, BytesOut: 2_048},
					{Route: "POST /mcp\x1b[2J", End: 190 * time.Microsecond, UserNs: 39_000, KernelNs: 58_000, BytesIn: 64, BytesOut: 2_048},
				},
				UnattributedNs: 1_496_500,
				SchedCPUNs:     1_800_000, // reqprof saw 100%
				Exited:         true,
			},
		},
	}
}

// sampledRun is a target of 1,000 finished requests of which the collector
// kept a sample of 142, every seventh: counts, means, maxima and figures
// per request come from the totals of all 1,000, percentiles and the
// histogram from the 142. Request i costs i µs of CPU, 70% of it user
// time. Three requests of a rare route are none of the sample, so its
// percentiles are unknown.
func sampledRun() profile.Run {
	var finished profile.Totals
	byRoute := map[profile.RouteKey]profile.Totals{}
	var sample []profile.Request
	for i := uint64(1); i <= 1000; i++ {
		route := "GET /items/{id}"
		switch {
		case i == 333 || i == 556 || i == 778:
			route = "GET /rare"
		case i%2 == 0:
			route = "POST /items"
		}
		start := time.Duration(i) * 10 * time.Millisecond
		r := profile.Request{
			Route: route, Port: 8080,
			Start: start, FirstWrite: start + time.Duration(i)*time.Microsecond, End: start + time.Duration(2*i)*time.Microsecond,
			UserNs: 700 * i, KernelNs: 300 * i, SyscallNs: 300 * i,
			RunqueueNs: 100 * i, OffCPUNs: 500 * i,
			PageFaults: uint32(i % 2), VoluntarySwitches: 1,
			BytesIn: 100, BytesOut: 200 + i%3,
		}
		finished.Add(r)
		key := profile.RouteKey{Route: r.Route, Port: r.Port}
		sum := byRoute[key]
		sum.Add(r)
		byRoute[key] = sum
		if i%7 == 0 {
			sample = append(sample, r)
		}
	}
	return profile.Run{
		Duration: 10 * time.Second,
		Targets: []profile.Target{{
			PID: 515, Comm: "server", Threads: 2,
			Finished:        finished,
			RouteTotals:     byRoute,
			Requests:        sample,
			KernelBreakdown: byCause(map[string]profile.KernelCost{"syscall:write": {Ns: 300 * 500_500, Calls: 1000}}),
			RunqueueNs:      60_000_000,
			OffCPUNs:        300_000_000,
			UnattributedNs:  25_000_000,
			SchedCPUNs:      525_500_000,
		}},
	}
}

// selfCostRun is sampledRun with reqprof's own cost measured: 250 ns in
// each of its 1,000 requests' context, 50 ns of it after the request's
// last byte, in the 20 µs of CPU there; 310 ms over all its threads in
// the window; stated to within 40 ns a request. kept says the figures
// keep it (--gross); else they are net of it.
func selfCostRun(kept bool) profile.Run {
	run := sampledRun()
	t := &run.Targets[0]
	n := uint64(t.Finished.Requests)
	t.Finished.SelfNs, t.Finished.TailSelfNs, t.Finished.TailNs = 250*n, 50*n, 20_000*n
	for key, totals := range t.RouteTotals {
		m := uint64(totals.Requests)
		totals.SelfNs, totals.TailSelfNs, totals.TailNs = 250*m, 50*m, 20_000*m
		t.RouteTotals[key] = totals
	}
	for i := range t.Requests {
		t.Requests[i].SelfNs, t.Requests[i].TailSelfNs, t.Requests[i].TailNs = 250, 50, 20_000
	}
	t.SelfCost = profile.SelfCost{Measured: true, Kept: kept, TotalNs: 310_000, SpreadNs: 15_500, TimingSamples: 4}
	return run
}

// liteRun is sampledRun taken in lite mode: no kernel breakdown, the
// user/kernel split an estimate.
func liteRun() profile.Run {
	run := sampledRun()
	run.Lite = true
	run.Targets[0].KernelBreakdown = nil
	return run
}

// backendsRun is sampledRun on an asyncio server whose routes call a
// backend: calls, waits and bytes per route and peer, and one route's
// requests partly interleaved.
func backendsRun() profile.Run {
	run := sampledRun()
	t := &run.Targets[0]
	t.Runtime, t.RuntimeFrom = "asyncio", "detected"
	keys := make([]profile.RouteKey, 0, len(t.RouteTotals))
	for key := range t.RouteTotals {
		keys = append(keys, key)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Route < keys[j].Route })
	for i, key := range keys {
		totals := t.RouteTotals[key]
		n := uint64(totals.Requests)
		t.Backends = append(t.Backends, profile.Backend{Route: key, Peer: "127.0.0.1:9400",
			Calls: n * uint64(i+1), WaitNs: n * 310_000 * uint64(i+1), BytesIn: n * 120, BytesOut: n * 95})
		if i == 0 {
			t.Backends = append(t.Backends, profile.Backend{Route: key, Peer: "[::1]:5432",
				Calls: n, WaitNs: n * 1_250_000, BytesIn: n * 2048, BytesOut: n * 64})
			totals.InterleavedNs = totals.CPUNs / 4
			t.RouteTotals[key] = totals
			t.Finished.InterleavedNs += totals.InterleavedNs
		}
	}
	return run
}

// poolRun is sampledRun on a Node server whose routes hash on libuv's
// pool: its jobs followed to the requests that queued them.
func poolRun() profile.Run {
	run := sampledRun()
	t := &run.Targets[0]
	t.Runtime, t.RuntimeFrom = "node", "detected"
	t.Pool, t.PoolJobs, t.PoolJobsDone, t.PoolNs = "followed", 2000, 1998, 1_084_812_345
	return run
}

// pythonPoolRun is sampledRun on a FastAPI server whose `def` endpoints
// run on anyio's worker threads: some jobs taken by a worker before it
// slept, no hand-off seen for them.
func pythonPoolRun() profile.Run {
	run := sampledRun()
	t := &run.Targets[0]
	t.Runtime, t.RuntimeFrom = "asyncio", "detected"
	t.Pool, t.PoolJobs, t.PoolJobsDone, t.PoolNs, t.PoolJobsUnseen = "followed", 1976, 1974, 1_072_112_345, 24
	return run
}

func goldenCases() []goldenCase {
	return []goldenCase{
		{name: "one_target", run: oneTargetRun()},
		{name: "one_target_by_port_all_syscalls", run: oneTargetRun(),
			summarize: SummarizeOptions{GroupBy: GroupByPort}, table: TableOptions{AllSyscalls: true}},
		{name: "one_target_no_routes", run: oneTargetRun(), summarize: SummarizeOptions{GroupBy: GroupByNone}},
		{name: "two_targets_partial", run: twoTargetsPartialRun()},
		{name: "sampled", run: sampledRun()},
		{name: "python_pool", run: pythonPoolRun()},
		{name: "stacks", run: stacksRun()},
		{name: "stacks_by_port", run: stacksRun(), summarize: SummarizeOptions{GroupBy: GroupByPort}},
		{name: "self_cost", run: selfCostRun(false)},
		{name: "self_cost_gross", run: selfCostRun(true)},
		{name: "lite", run: liteRun()},
		{name: "backends", run: backendsRun()},
		{name: "pool", run: poolRun()},
		{name: "client_and_server", run: clientAndServerRun()},
		{name: "zero_requests", run: profile.Run{
			Duration: 5 * time.Second,
			Targets: []profile.Target{{
				PID: 7, Comm: "idle", Threads: 1,
				UnattributedNs: 2_000_000,
				RunqueueNs:     1_000, OffCPUNs: 4_999_000_000,
			}},
		}},
	}
}

// TestGolden checks the table and JSON of each case against
// testdata/NAME.{table,json}.golden, and that the JSON reads back as the
// summary it was written from.
func TestGolden(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			s := SummarizeWith(c.run, c.summarize)
			var table, js bytes.Buffer
			if err := WriteTableWith(&table, s, c.table); err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(&js, s); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, c.name+".table.golden", table.Bytes())
			checkGolden(t, c.name+".json.golden", js.Bytes())

			back, err := ReadJSON(&js)
			if err != nil {
				t.Fatalf("ReadJSON of WriteJSON's output: %v", err)
			}
			if !reflect.DeepEqual(back, s) {
				t.Errorf("read back %+v\nwant %+v", back, s)
			}
		})
	}
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./report -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test ./report -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// tablewriter switches to East Asian character widths when LANG or
// RUNEWIDTH_EASTASIAN says so, once per process; no table may change.
func TestGoldenUnderEastAsianLocale(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestGolden(|Comparison|Combined)$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "LANG=ja_JP.UTF-8", "LC_ALL=ja_JP.UTF-8", "RUNEWIDTH_EASTASIAN=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("TestGolden under a Japanese locale: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestGolden ")) ||
		!bytes.Contains(out, []byte("--- PASS: TestGoldenComparison ")) ||
		!bytes.Contains(out, []byte("--- PASS: TestGoldenCombined ")) {
		t.Fatalf("TestGolden did not run under a Japanese locale:\n%s", out)
	}
}
