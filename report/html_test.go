package report

import (
	"bytes"
	"reflect"
	"regexp"
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

// Each bucket is drawn as a bar as tall as its count, each part of the CPU
// as a bar as long as its mean; a target without requests is said to have
// none, and draws no histogram.
func TestHTMLCharts(t *testing.T) {
	s := sdkSummary(t)
	s.Targets = append(s.Targets, TargetSummary{PID: 9, Comm: "idle", Warnings: []string{}})
	s.Comparison = compare(s, CompareOptions{})
	page := writeHTMLString(t, s)

	bins := binPattern.FindAllStringSubmatch(page, -1)
	var buckets int
	for _, t := range s.Targets {
		if t.CPUHistogram != nil {
			buckets += len(t.CPUHistogram.Counts)
		}
	}
	if len(bins) != buckets {
		t.Errorf("%d histogram bars, want one per bucket: %d", len(bins), buckets)
	}
	for _, bin := range bins {
		if (bin[2] == "0") != (bin[1] == "0.0") {
			t.Errorf("bar of count %s is %s high", bin[2], bin[1])
		}
	}
	parts := partPattern.FindAllStringSubmatch(page, -1)
	// User, syscalls, softirq and irq for the SDKs; the bare server has no
	// irq time.
	if want := 4 + 4 + 3; len(parts) != want {
		t.Errorf("%d parts of CPU bars, want %d", len(parts), want)
	}
	for _, p := range parts {
		if p[1] == "0.0" {
			t.Errorf("CPU part of zero width: %s", p[0])
		}
	}
	if !strings.Contains(page, "no finished requests") || !strings.Contains(page, "No finished requests to draw.") {
		t.Errorf("idle target not said to have no requests")
	}
}

var (
	binPattern  = regexp.MustCompile(`<rect class="bin" x="[0-9.]+" y="[0-9.]+" width="[0-9.]+" height="([0-9.]+)" fill="#[0-9a-f]{6}" data-count="([0-9]+)">`)
	partPattern = regexp.MustCompile(`<rect class="part" x="[0-9.]+" y="[0-9.]+" width="([0-9.]+)" height="[0-9.]+" fill="#[0-9a-f]{6}">`)
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
