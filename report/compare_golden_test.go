package report

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/reqprof/reqprof/profile"
)

// steadyRequests are n requests of about userNs + kernelNs of CPU: request i
// adds i mod 10 tenths of jitterNs to each, so means and percentiles can be
// worked out by hand. Each takes three times its CPU in wall time.
func steadyRequests(n int, userNs, kernelNs, jitterNs uint64) []profile.Request {
	reqs := make([]profile.Request, n)
	for i := range reqs {
		extra := uint64(i%10) * jitterNs / 10
		r := profile.Request{Route: "POST /mcp tools/call add", Port: 8080,
			UserNs: userNs + extra, KernelNs: kernelNs + extra/4, BytesIn: 120, BytesOut: 480}
		r.Start = time.Duration(i) * time.Millisecond
		r.End = r.Start + time.Duration(3*r.CPUNs())
		reqs[i] = r
	}
	return reqs
}

// causeShare is a cause's part of kernel time, and its calls per request.
type causeShare struct {
	cause           string
	percent         uint64
	callsPerRequest uint64
}

// sdkShares split the SDKs' kernel time: mostly writing the response.
var sdkShares = []causeShare{
	{"syscall:write", 50, 2}, {"syscall:read", 30, 1}, {"softirq:NET_RX", 15, 0}, {"irq", 5, 0},
}

// withBreakdown is t with its requests' kernel time split by shares.
func withBreakdown(t profile.Target, shares []causeShare) profile.Target {
	var kernelNs uint64
	for _, r := range t.Requests {
		kernelNs += r.KernelNs
	}
	t.KernelBreakdown = map[profile.Cause]profile.KernelCost{}
	for _, s := range shares {
		t.KernelBreakdown[profile.ParseCause(s.cause)] = profile.KernelCost{Ns: kernelNs * s.percent / 100, Calls: s.callsPerRequest * uint64(len(t.Requests))}
	}
	return t
}

var benchMeta = profile.Meta{
	Host:      "bench-1",
	Kernel:    "6.1.0-18-amd64",
	Version:   "v0.3.0",
	Commit:    "1a2b3c4d5e6f",
	StartedAt: time.Date(2025, 6, 1, 12, 0, 0, 0, time.FixedZone("CEST", 2*60*60)),
}

// sdkTargets are three servers doing the same work: two SDKs, and a bare
// HTTP server to be the floor.
func sdkTargets() []profile.Target {
	return []profile.Target{
		withBreakdown(profile.Target{PID: 2101, Comm: "server", Label: "rust-sdk", Threads: 4, Requests: steadyRequests(1250, 50_000, 25_000, 10_000)}, sdkShares),
		withBreakdown(profile.Target{PID: 2102, Comm: "python3", Label: "python-sdk", Threads: 8, Requests: steadyRequests(1200, 2_000_000, 400_000, 100_000)}, sdkShares),
		// The bare server makes one write: it needs no read to answer.
		withBreakdown(profile.Target{PID: 2103, Comm: "bare-http", Label: "bare", Threads: 2, Requests: steadyRequests(1300, 8_000, 12_000, 2_000)},
			[]causeShare{{"syscall:write", 70, 1}, {"softirq:NET_RX", 30, 0}}),
	}
}

type comparisonCase struct {
	name string
	run  profile.Run
	opts CompareOptions
}

func comparisonCases() []comparisonCase {
	return []comparisonCase{
		{"sdks_with_floor", profile.Run{Meta: benchMeta, Duration: 10 * time.Second, Targets: sdkTargets()},
			CompareOptions{WithFloor: true, Floor: 2}},
		{"two_targets_partial", twoTargetsPartialRun(), CompareOptions{}},
		{"two_clients", twoClientsRun(), CompareOptions{}},
		// No labels; one target idle, the others loaded 20x apart.
		{"uneven_load", profile.Run{Duration: 5 * time.Second, Targets: []profile.Target{
			{PID: 31, Comm: "light", Requests: steadyRequests(10, 30_000, 10_000, 1_000)},
			{PID: 32, Comm: "idle"},
			{PID: 33, Comm: "heavy", Requests: steadyRequests(200, 10_000, 10_000, 0)},
		}}, CompareOptions{WithFloor: true, Floor: 1}},
	}
}

// TestGoldenComparison checks the comparison table and the JSON with the
// comparison of each case against testdata/NAME.comparison{,.json}.golden,
// and that the JSON reads back as the summary it was written from.
func TestGoldenComparison(t *testing.T) {
	for _, c := range comparisonCases() {
		t.Run(c.name, func(t *testing.T) {
			s := Summarize(c.run)
			comparison, err := Compare(s, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			s.Comparison = comparison
			var table, js bytes.Buffer
			if err := WriteComparison(&table, s, c.opts); err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(&js, s); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, c.name+".comparison.golden", table.Bytes())
			checkGolden(t, c.name+".comparison.json.golden", js.Bytes())
			checkReadsBack(t, js.Bytes(), s)
		})
	}
}

// repeatSources are three saved runs of the same two SDKs, the last taken
// on another host with another kernel, as compare reads them.
func repeatSources() []Source {
	var sources []Source
	for i, name := range []string{"monday.json", "tuesday.json", "other-host.json"} {
		meta := benchMeta
		meta.StartedAt = meta.StartedAt.Add(time.Duration(i) * 24 * time.Hour)
		if i == 2 {
			meta.Host, meta.Kernel = "bench-2", "6.8.0-31-generic"
		}
		targets := sdkTargets()[:2]
		// Each run comes out a little differently: that is the spread.
		driftPercent := []uint64{100, 103, 98}[i]
		for j, userNs := range []uint64{50_000, 2_000_000} {
			targets[j].PID += 100 * i
			targets[j].Requests = steadyRequests(1000+100*i, userNs*driftPercent/100, 25_000, 10_000)
			targets[j] = withBreakdown(targets[j], sdkShares)
		}
		run := profile.Run{Meta: meta, Duration: 10 * time.Second, Targets: targets}
		sources = append(sources, Source{Name: name, Summary: Summarize(run)})
	}
	return sources
}

// TestGoldenCombined checks what compare prints and writes for saved runs
// against testdata/repeats.*.golden: which target came from where, the
// comparison, the run-to-run spread and the combined JSON.
func TestGoldenCombined(t *testing.T) {
	sources := repeatSources()
	s := Combine(sources)
	outputs := []struct {
		golden string
		write  func(*bytes.Buffer) error
	}{
		{"repeats.sources.golden", func(b *bytes.Buffer) error { return WriteSources(b, sources) }},
		{"repeats.comparison.golden", func(b *bytes.Buffer) error { return WriteComparison(b, s, CompareOptions{}) }},
		{"repeats.spread.golden", func(b *bytes.Buffer) error { return WriteSpread(b, s.Spread) }},
		{"repeats.combined.json.golden", func(b *bytes.Buffer) error { return WriteJSON(b, s) }},
	}
	for _, o := range outputs {
		var b bytes.Buffer
		if err := o.write(&b); err != nil {
			t.Fatalf("%s: %v", o.golden, err)
		}
		checkGolden(t, o.golden, b.Bytes())
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, s); err != nil {
		t.Fatal(err)
	}
	checkReadsBack(t, js.Bytes(), s)
}

func checkReadsBack(t *testing.T, js []byte, want Summary) {
	t.Helper()
	back, err := ReadJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatalf("ReadJSON of WriteJSON's output: %v", err)
	}
	if !reflect.DeepEqual(back, want) {
		t.Errorf("read back %+v\nwant %+v", back, want)
	}
}
