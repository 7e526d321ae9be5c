package report

import (
	"bytes"
	"html"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reqprof/reqprof/profile"
)

// sdkSummary is the sdks_with_floor case, compared with its floor, as
// compare --html draws it.
func sdkSummary(t *testing.T) Summary {
	t.Helper()
	c := comparisonCases()[0]
	s := Summarize(c.run)
	comparison, err := Compare(s, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Comparison = comparison
	return s
}

func writeHTMLString(t *testing.T, s Summary) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHTML(&b, s); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The page is to be opened anywhere, offline: nothing in it may load
// anything, and it runs no script.
func TestHTMLNeedsNothingElse(t *testing.T) {
	compared := writeHTMLString(t, sdkSummary(t))
	repeated := writeHTMLString(t, Combine([]Source{{"a.json", sdkSummary(t)}, {"b.json", sdkSummary(t)}}))
	for _, page := range []string{compared, repeated} {
		for _, loads := range []string{"<script", "src=", "href=", "url(", "@import", "<link", "<iframe"} {
			if strings.Contains(page, loads) {
				t.Errorf("page has %q", loads)
			}
		}
	}
	// benchMeta's build; the repeated runs' columns told apart by file.
	for _, want := range []string{"30.5x, or 2,375.7 µs more", "<td>floor</td>", "<svg", "reqprof v0.3.0, commit 1a2b3c4d5e6f"} {
		if !strings.Contains(compared, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if !strings.Contains(repeated, "rust-sdk (a.json)") || !strings.Contains(repeated, "rust-sdk (b.json)") {
		t.Errorf("page of repeated runs does not tell their rust-sdk apart")
	}
	if !strings.Contains(repeated, "run-to-run spread") {
		t.Errorf("page of repeated runs lacks their spread")
	}
}

// Comm, labels, warnings and hosts come from the profiled processes or from
// a file: none of it may become markup.
func TestHTMLEscapesText(t *testing.T) {
	s := Summarize(profile.Run{
		Meta:     profile.Meta{Host: `<img src=x onerror=alert(1)>`},
		Duration: time.Second,
		Targets: []profile.Target{
			{PID: 1, Comm: `"><script>alert(1)</script>`, Label: "<b>sdk</b>", Requests: routed(steadyRequests(3, 1000, 1000, 0), "GET /<i>x</i>")},
			{PID: 2, Comm: "</title><svg onload=alert(1)>", Requests: steadyRequests(3, 1000, 1000, 0), Exited: true},
		},
	})
	page := writeHTMLString(t, s)
	for _, markup := range []string{"<script>", "<img", "<b>", "<svg onload", "</title><svg", "<i>"} {
		if strings.Contains(page, markup) {
			t.Errorf("page has %q unescaped", markup)
		}
	}
	for _, escaped := range []string{"&lt;b&gt;sdk&lt;/b&gt;", "GET /&lt;i&gt;x&lt;/i&gt;"} {
		if !strings.Contains(page, escaped) {
			t.Errorf("page lacks %q", escaped)
		}
	}
}

// routed is reqs, every one asking for route.
func routed(reqs []profile.Request, route string) []profile.Request {
	for i := range reqs {
		reqs[i].Route = route
	}
	return reqs
}

// One target's histogram is a bar per bucket, as tall as its count; each
// part of the CPU is a bar as long as its mean.
func TestHTMLCharts(t *testing.T) {
	s := Summarize(oneTargetRun())
	page := writeHTMLString(t, s)

	bins := binPattern.FindAllStringSubmatch(page, -1)
	if want := len(s.Targets[0].CPUHistogram.Counts); len(bins) != want {
		t.Errorf("%d histogram bars, want one per bucket: %d", len(bins), want)
	}
	for _, bin := range bins {
		if (bin[2] == "0") != (bin[1] == "0.0") {
			t.Errorf("bar of count %s is %s high", bin[2], bin[1])
		}
	}
	if strings.Contains(page, `class="overlay"`) {
		t.Errorf("one target's histogram is overlaid")
	}
	parts := partPattern.FindAllStringSubmatch(page, -1)
	if want := len(cpuParts(s.Targets[0])); len(parts) != want {
		t.Errorf("%d parts of CPU bars, want %d", len(parts), want)
	}
	for _, p := range parts {
		if p[1] == "0.0" {
			t.Errorf("CPU part of zero width: %s", p[0])
		}
	}
	// 1 µs to 200 µs in growing buckets: a log axis, labelled.
	for _, want := range []string{
		`<h4 class="chart-title">CPU per request: histogram</h4>`,
		`<text class="axis-label" x="404.0" y="248.0" text-anchor="middle">CPU per request (µs), log scale</text>`,
		`transform="rotate(-90 14 110.0)">requests</text>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// Compared targets' histograms are one chart: a colour each, on one axis,
// each as shares of its requests that add up to 100%; a target without
// requests is said to have none.
func TestHTMLOverlaidHistograms(t *testing.T) {
	s := sdkSummary(t)
	s.Targets = append(s.Targets, TargetSummary{PID: 9, Comm: "idle", Warnings: []string{}})
	s.Comparison = compare(s, CompareOptions{})
	page := writeHTMLString(t, s)

	if n := strings.Count(page, `<svg xmlns="http://www.w3.org/2000/svg" class="overlay"`); n != 1 {
		t.Fatalf("%d overlaid charts, want 1", n)
	}
	if bins := binPattern.FindAllString(page, -1); len(bins) != 0 {
		t.Errorf("%d bars of separate histograms next to the overlay", len(bins))
	}
	drawn := 0
	for _, target := range s.Targets {
		if target.CPUHistogram != nil {
			drawn++
		}
	}
	outlines := outlinePattern.FindAllStringSubmatch(page, -1)
	if len(outlines) != drawn {
		t.Fatalf("%d outlines, want one per target with requests: %d", len(outlines), drawn)
	}
	colors := map[string]bool{}
	for i, o := range outlines {
		if o[2] != strconv.Itoa(i) || colors[o[1]] {
			t.Errorf("outline %d is of series %s in %s, a colour already used", i, o[2], o[1])
		}
		colors[o[1]] = true
	}
	sums := make([]float64, drawn)
	for _, bar := range sharePattern.FindAllStringSubmatch(page, -1) {
		if bar[1] == "0.0" {
			t.Errorf("share bar of no height: %s", bar[0])
		}
		series, _ := strconv.Atoi(bar[3])
		share, _ := strconv.ParseFloat(bar[4], 64)
		if !colors[bar[2]] || series >= drawn {
			t.Fatalf("share bar of no outlined series: %s", bar[0])
		}
		sums[series] += share
	}
	for i, sum := range sums {
		if math.Abs(sum-100) > 0.1 {
			t.Errorf("series %d: shares add up to %.2f%%, want 100%%", i, sum)
		}
	}
	for _, want := range []string{
		`<h2 class="chart-title">CPU per request: each target&#39;s distribution</h2>`,
		"CPU per request (µs), log scale", "share of its requests</text>",
		`<span style="background: #1f77b4"></span>rust-sdk (pid 2101)<span`,
		"idle): No finished requests to draw.", "no finished requests",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// Each target's CPU seen, where its unattributed CPU went and its threads'
// waits are on the page, as in the table, and reqprof's own cost.
func TestHTMLTargetLines(t *testing.T) {
	// As a browser reads it: the template escapes more than it must.
	page := html.UnescapeString(writeHTMLString(t, Summarize(oneTargetRun())))
	for _, want := range []string{
		`<p class="cpu-seen">CPU of the process over the window: 24.8 ms = attributed to requests 23.6 ms (95.0%) + unattributed 1.2 ms (5.0%); all-in 124.2 µs per request finished</p>`,
		`<p class="cpu-seen">against the kernel's accounting of the process (its CPU clock), 24.9 ms: reqprof saw 24.8 ms, 99.7%</p>`,
		`<p class="time-split">where the time went, µs per request (means):</p>`,
		`<p class="time-split">cpu 100.5 = 82.4 from its first read to its last write + 8.0 after it (its thread's loop until it turned to other work) + 10.1 connection setup (accept, the thread or process made for the connection, close)</p>`,
		"<h4>unattributed CPU by thread name, largest first</h4>",
		"<tr><td>worker</td><td>8</td><td>0.83</td><td>67.1%</td></tr>",
		"<tr><td>other (2 names)</td><td>2</td><td>0.03</td><td>2.2%</td></tr>",
		`<p class="waits">the process's threads waited over the window, in requests or not: 12.3 ms on a run queue, 38,765.4 ms blocked</p>`,
		"<h2>reqprof's own cost on the whole machine over the 10.0 s window</h2>",
		`<p class="overhead">its BPF programs, for every process's events on every CPU (not only the targets'), timed over 0.2 s of the window:`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// A thread may name itself anything: it stays text.
	two := writeHTMLString(t, Summarize(twoTargetsPartialRun()))
	if !strings.Contains(two, "<td>\x1b[31mevil</td>") {
		t.Errorf("page lacks the thread named with an escape sequence")
	}
}

var (
	binPattern     = regexp.MustCompile(`<rect class="bin" x="[0-9.]+" y="[0-9.]+" width="[0-9.]+" height="([0-9.]+)" fill="#[0-9a-f]{6}" data-count="([0-9]+)">`)
	partPattern    = regexp.MustCompile(`<rect class="part" x="[0-9.]+" y="[0-9.]+" width="([0-9.]+)" height="[0-9.]+" fill="#[0-9a-f]{6}">`)
	sharePattern   = regexp.MustCompile(`<rect class="share" x="[0-9.]+" y="[0-9.]+" width="[0-9.]+" height="([0-9.]+)" fill="(#[0-9a-f]{6})" fill-opacity="[0-9.]+" data-series="([0-9]+)" data-share="([0-9.]+)">`)
	outlinePattern = regexp.MustCompile(`<path class="outline" d="[MVH0-9 ]+" fill="none" stroke="(#[0-9a-f]{6})" stroke-width="2" data-series="([0-9]+)"/?>`)
)

// A bar's kernel parts group the causes of a summary, read back from their
// names, by kind; a cause of no kind reqprof knows is other kernel time.
func TestCPUPartsByKind(t *testing.T) {
	got := cpuParts(TargetSummary{
		UserUs: Dist{Mean: 10},
		KernelBreakdownUs: map[string]float64{
			"syscall:write": 3, "syscall:read": 1, "softirq:NET_RX": 2, "softirq:TIMER": 0, "irq": 0.5, "hrtimer": 0.25,
		},
	})
	want := []cpuPart{{"user", 10}, {"syscalls", 4}, {"softirq", 2}, {"irq", 0.5}, {"other kernel", 0.25}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parts %v, want %v", got, want)
	}
}
