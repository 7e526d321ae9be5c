package serve

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/reqprof/reqprof/live"
	"github.com/reqprof/reqprof/profile"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// The histograms a scrape gets are those Prometheus's own client would
// make of the same values: the same classic buckets, the same native
// buckets of schema 3, the same count and sum.
func TestHistogramAsPrometheusMakesIt(t *testing.T) {
	var bounds []float64
	for _, ns := range live.ClassicBoundsNs {
		bounds = append(bounds, float64(ns)/1e9)
	}
	theirs := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "h", Help: "h", Buckets: bounds,
		NativeHistogramBucketFactor: 1.1, NativeHistogramMaxBucketNumber: 1000,
	})
	var ours live.Histogram
	values := []uint64{0, 1, 999, 1000, 1001, 45_000, 45_500, 46_000, 80_000, 81_000, 150_000, 2e6, 2e9, 5e12}
	for i := range 2000 {
		values = append(values, uint64(30_000+i*i%90_000))
	}
	for _, ns := range values {
		ours.Observe(ns)
		theirs.Observe(float64(ns) / 1e9)
	}
	var want dto.Metric
	if err := theirs.Write(&want); err != nil {
		t.Fatal(err)
	}
	var b live.Buckets
	snapshotOf(&ours, &b)
	var got dto.Metric
	if err := newHistogram(cpuDesc, b, "t", "r").Write(&got); err != nil {
		t.Fatal(err)
	}
	g, w := got.Histogram, want.Histogram
	if g.GetSampleCount() != w.GetSampleCount() || abs(g.GetSampleSum()-w.GetSampleSum()) > 1e-9*w.GetSampleSum() {
		t.Errorf("count %d sum %g, Prometheus's %d and %g", g.GetSampleCount(), g.GetSampleSum(), w.GetSampleCount(), w.GetSampleSum())
	}
	for i, bucket := range w.Bucket {
		if g.Bucket[i].GetUpperBound() != bucket.GetUpperBound() || g.Bucket[i].GetCumulativeCount() != bucket.GetCumulativeCount() {
			t.Errorf("classic bucket %d: le %g %d, Prometheus's le %g %d", i, g.Bucket[i].GetUpperBound(), g.Bucket[i].GetCumulativeCount(), bucket.GetUpperBound(), bucket.GetCumulativeCount())
		}
	}
	if g.GetSchema() != w.GetSchema() || g.GetZeroCount() != w.GetZeroCount() || g.GetZeroThreshold() != w.GetZeroThreshold() {
		t.Errorf("schema %d zero %d (threshold %g), Prometheus's %d %d (%g)", g.GetSchema(), g.GetZeroCount(), g.GetZeroThreshold(), w.GetSchema(), w.GetZeroCount(), w.GetZeroThreshold())
	}
	if gb, wb := expand(g.PositiveSpan, g.PositiveDelta), expand(w.PositiveSpan, w.PositiveDelta); !equalMaps(gb, wb) {
		t.Errorf("native buckets\n%v\nPrometheus's\n%v", gb, wb)
	}
}

// snapshotOf copies h as a Tally's snapshot would.
func snapshotOf(h *live.Histogram, b *live.Buckets) {
	*b = live.BucketsOf(h)
}

// expand turns spans and deltas into counts by key.
func expand(spans []*dto.BucketSpan, deltas []int64) map[int]int64 {
	counts := map[int]int64{}
	key, i := 0, 0
	var count int64
	for _, s := range spans {
		key += int(s.GetOffset())
		for range s.GetLength() {
			count += deltas[i]
			i++
			if count != 0 {
				counts[key] = count
			}
			key++
		}
	}
	return counts
}

func equalMaps(a, b map[int]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// goldenServer is a server in a fixed state: two targets, one with two
// routes, events lost, a process profiled.
func goldenServer() *Server {
	s := New(Options{Specs: []Spec{{PID: 1, Label: "api"}, {Comm: "worker"}}, Version: "v1.2.3", Commit: "abcdef123456"})
	s.tally.Bind([]string{"api", "worker"})
	add := func(target int, route string, user, kernel, syscall, softirq, irq, latency uint64) {
		s.tally.Add(target, profile.Request{
			Route: route, UserNs: user, KernelNs: kernel, SyscallNs: syscall, SoftirqNs: softirq, IrqNs: irq,
			RunqueueNs: 1_000, OffCPUNs: 2_000, Start: time.Second, End: time.Second + time.Duration(latency),
		})
	}
	add(0, "GET /users/{id}", 52_000, 28_000, 20_000, 6_000, 2_000, 90_000)
	add(0, "GET /users/{id}", 60_000, 30_000, 22_000, 6_000, 2_000, 120_000)
	add(0, "POST /orders", 400_000, 100_000, 90_000, 10_000, 0, 1_200_000)
	add(1, "tools/call", 7_000, 3_000, 3_000, 0, 0, 12_000)
	s.attached([]sessionTarget{{spec: 0, label: "api", inst: instance{PID: 4242, Comm: "api-server"}}, {spec: 1, label: "worker", inst: instance{PID: 4343, Comm: "worker"}}})
	s.progress(collectorProgress([]uint64{3, 0}))
	return s
}

// The text a scrape gets, but for reqprof's own CPU, which changes with
// every run.
func TestMetricsText(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exporter{goldenServer()})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	enc := expfmt.NewEncoder(&out, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	got := regexp.MustCompile(`(?m)^reqprof_self_cpu_seconds_total\{part="collector"\} .*\n`).ReplaceAllString(out.String(), "")
	got = regexp.MustCompile(`goversion="[^"]*"`).ReplaceAllString(got, `goversion="go"`)
	path := filepath.Join("testdata", "metrics.golden")
	if *update {
		os.WriteFile(path, []byte(got), 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./serve -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test ./serve -update rewrites it)\ngot:\n%s", path, got)
	}
	if n := testutil.CollectAndCount(exporter{goldenServer()}, "reqprof_request_cpu_seconds"); n != 3 {
		t.Errorf("%d cpu histograms, want one per target and route: 3", n)
	}
	if !strings.Contains(got, `reqprof_kernel_cpu_seconds_total{cause="softirq",target="api"} 2.2e-05`) {
		t.Error("no softirq time for api")
	}
}

// BenchmarkScrape is one scrape of a server with 4 targets of 50 routes
// each, every route with requests: what Prometheus's scrape costs reqprof.
func BenchmarkScrape(b *testing.B) {
	s := New(Options{Specs: []Spec{{Comm: "a"}, {Comm: "b"}, {Comm: "c"}, {Comm: "d"}}})
	s.tally.Bind([]string{"a", "b", "c", "d"})
	for i := range 200_000 {
		s.tally.Add(i%4, profile.Request{Route: routeNames[i%50], UserNs: uint64(20_000 + i%5000*10), Start: 0, End: time.Duration(50_000 + i%7000*10)})
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(exporter{s})
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}

var routeNames = func() (names [50]string) {
	for i := range names {
		names[i] = "GET /route/" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	return names
}()
