package report

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
)

// meanTarget is a summarized target whose only figures are its requests and
// mean CPU per request.
func meanTarget(pid, requests int, meanUs float64) TargetSummary {
	return TargetSummary{PID: pid, Comm: "srv", Requests: requests, CPUUs: Dist{Mean: meanUs}, Warnings: []string{}}
}

func ptr(x float64) *float64 { return &x }

func TestCompareByHand(t *testing.T) {
	s := Summary{Targets: []TargetSummary{
		meanTarget(1, 100, 80),
		meanTarget(2, 100, 2440),
		meanTarget(3, 100, 20),
		meanTarget(4, 0, 0),
		meanTarget(5, 100, 80.1),
	}}
	got, err := Compare(s, CompareOptions{WithFloor: true, Floor: 2})
	if err != nil {
		t.Fatal(err)
	}
	floor := 2
	want := &Comparison{
		BaselinePID: 1, FloorPID: 3, FloorIndex: &floor,
		Targets: []TargetComparison{
			{PID: 1, CPURatio: ptr(1), CPUDeltaUs: ptr(0), AboveFloorUs: ptr(60)},
			{PID: 2, CPURatio: ptr(30.5), CPUDeltaUs: ptr(2360), AboveFloorUs: ptr(2420)},
			{PID: 3, CPURatio: ptr(0.25), CPUDeltaUs: ptr(-60), AboveFloorUs: ptr(0)},
			// Without a finished request, there is nothing to compare.
			{PID: 4},
			// 80.1 / 80 = 1.00125, to four figures; 80.1 - 80 in float64 is
			// 0.09999999999999432, rounded to 0.1.
			{PID: 5, CPURatio: ptr(1.001), CPUDeltaUs: ptr(0.1), AboveFloorUs: ptr(60.1)},
		},
		Warnings: []string{"pid 4 (srv) finished no request: it has no CPU per request to compare"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %s\nwant %s", jsonString(t, got), jsonString(t, want))
	}
}

func jsonString(t *testing.T, c *Comparison) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteJSON(&b, Summary{Comparison: c}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A baseline that does no work per request has no ratio to give, only a
// difference; nor does one so small that the ratio would not be finite.
func TestCompareBaselineWithoutCPU(t *testing.T) {
	for _, baseUs := range []float64{0, math.SmallestNonzeroFloat64} {
		s := Summary{Targets: []TargetSummary{meanTarget(1, 10, baseUs), meanTarget(2, 10, 50)}}
		c, err := Compare(s, CompareOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tc := c.Targets[1]; tc.CPURatio != nil || tc.CPUDeltaUs == nil || *tc.CPUDeltaUs != 50 {
			t.Errorf("baseline mean %v: comparison %s", baseUs, jsonString(t, c))
		}
	}
}

func TestCompareNeedsTwoTargets(t *testing.T) {
	for _, n := range []int{0, 1} {
		s := Summary{Targets: make([]TargetSummary, n)}
		if c, err := Compare(s, CompareOptions{}); c != nil || err != nil {
			t.Errorf("%d targets: comparison %+v, error %v; want neither", n, c, err)
		}
	}
}

func TestCompareRejectsFloorOutOfRange(t *testing.T) {
	s := Summary{Targets: []TargetSummary{meanTarget(1, 1, 1), meanTarget(2, 1, 1)}}
	for _, floor := range []int{-1, 2} {
		_, err := Compare(s, CompareOptions{WithFloor: true, Floor: floor})
		if err == nil || !strings.Contains(err.Error(), "to be the floor") {
			t.Errorf("floor %d: error %v", floor, err)
		}
		if err := WriteComparison(&bytes.Buffer{}, s, CompareOptions{WithFloor: true, Floor: floor}); err == nil {
			t.Errorf("floor %d: WriteComparison wrote a table", floor)
		}
	}
}

func TestRatio(t *testing.T) {
	cases := map[float64]string{
		0:       "0.00x",
		0.03281: "0.0328x",
		0.5:     "0.500x",
		1:       "1.00x",
		2.357:   "2.36x",
		32.14:   "32.1x",
		234.4:   "234x",
		1234.5:  "1,234x",
	}
	for r, want := range cases {
		if got := ratio(r); got != want {
			t.Errorf("ratio(%v) = %q, want %q", r, got, want)
		}
	}
}

func TestVsBaseline(t *testing.T) {
	cases := []struct {
		tc   TargetComparison
		want string
	}{
		{TargetComparison{CPURatio: ptr(30.48), CPUDeltaUs: ptr(2375.7)}, "30.5x, or 2,375.7 µs more"},
		{TargetComparison{CPURatio: ptr(0.5), CPUDeltaUs: ptr(-120)}, "0.500x, or 120.0 µs less"},
		{TargetComparison{CPUDeltaUs: ptr(50)}, "50.0 µs more"},
		{TargetComparison{}, "n/a"},
	}
	for _, c := range cases {
		if got := vsBaseline(c.tc); got != c.want {
			t.Errorf("vsBaseline(%+v) = %q, want %q", c.tc, got, c.want)
		}
	}
}

func TestCombineKeepsWhatSourcesAgreeOn(t *testing.T) {
	run := func(host, started string, duration float64, pids ...int) Summary {
		s := Summary{Host: host, Kernel: "6.1.0", StartedAt: started, DurationS: duration, Targets: []TargetSummary{}}
		for _, pid := range pids {
			s.Targets = append(s.Targets, meanTarget(pid, 10, 50))
		}
		return s
	}
	t.Run("alike", func(t *testing.T) {
		got := Combine([]Source{
			{"a.json", run("h", "2025-06-02T10:00:00Z", 10, 1, 2)},
			{"b.json", run("h", "2025-06-02T11:30:00+02:00", 10, 3)},
		})
		if got.Host != "h" || got.Kernel != "6.1.0" || got.DurationS != 10 || len(got.Warnings) != 0 {
			t.Errorf("host %q, kernel %q, duration %v, warnings %q", got.Host, got.Kernel, got.DurationS, got.Warnings)
		}
		// 11:30 at +02:00 is 09:30 UTC, before 10:00 UTC.
		if got.StartedAt != "2025-06-02T11:30:00+02:00" {
			t.Errorf("started at %q", got.StartedAt)
		}
		if len(got.Targets) != 3 || got.Targets[2].PID != 3 || got.Comparison == nil || got.Comparison.BaselinePID != 1 {
			t.Errorf("targets %+v, comparison %+v", got.Targets, got.Comparison)
		}
	})
	t.Run("one host unknown", func(t *testing.T) {
		got := Combine([]Source{{"a.json", run("h", "", 10, 1)}, {"old.json", run("", "", 10, 2)}})
		if got.Host != "" || len(got.Warnings) != 0 {
			t.Errorf("host %q, warnings %q; want neither", got.Host, got.Warnings)
		}
	})
	t.Run("syscall entry cost", func(t *testing.T) {
		measured := func(ns uint64) Summary {
			s := run("h", "", 10, 1)
			s.SyscallEntryNs = ns
			return s
		}
		if got := Combine([]Source{{"a.json", measured(85)}, {"b.json", measured(85)}}); got.SyscallEntryNs != 85 {
			t.Errorf("syscall entry cost %d, want the 85 ns both agree on", got.SyscallEntryNs)
		}
		if got := Combine([]Source{{"a.json", measured(85)}, {"b.json", measured(120)}}); got.SyscallEntryNs != 0 {
			t.Errorf("syscall entry cost %d, want 0, unknown, for runs that differ", got.SyscallEntryNs)
		}
	})
	t.Run("different hosts and windows", func(t *testing.T) {
		b := run("h2", "", 5, 2)
		b.Warnings = []string{"runs were taken on different kernels: ..."}
		got := Combine([]Source{{"a.json", run("h1", "", 10, 1)}, {"b.json", b}, {"c.json", run("h1", "", 10, 3)}})
		want := []string{
			"runs were taken on different hosts: h1 (a.json, c.json), h2 (b.json); their CPU per request may differ for that alone",
			"b.json: runs were taken on different kernels: ...",
		}
		if got.Host != "" || got.DurationS != 0 || !reflect.DeepEqual(got.Warnings, want) {
			t.Errorf("host %q, duration %v, warnings %q", got.Host, got.DurationS, got.Warnings)
		}
	})
}

func TestCombineSaysWhichReqprof(t *testing.T) {
	built := func(version, commit string) Summary {
		return Summary{Version: version, Commit: commit, Targets: []TargetSummary{meanTarget(1, 10, 50)}}
	}
	for _, tc := range []struct {
		name                    string
		a, b                    Summary
		wantVersion, wantCommit string
		wantWarning             string
	}{
		{"same build", built("v1", "abc"), built("v1", "abc"), "v1", "abc", ""},
		{"different commits", built("v1", "abc"), built("v2", "def"), "", "",
			"runs were taken on different reqprof commits: abc (a.json), def (b.json); their CPU per request may differ for that alone"},
		{"versions only", built("v1", ""), built("v2", ""), "", "",
			"runs were taken on different reqprof versions: v1 (a.json), v2 (b.json); their CPU per request may differ for that alone"},
		{"one unknown", built("v1", "abc"), built("", ""), "", "", ""},
	} {
		got := Combine([]Source{{"a.json", tc.a}, {"b.json", tc.b}})
		var want []string
		if tc.wantWarning != "" {
			want = []string{tc.wantWarning}
		}
		if got.Version != tc.wantVersion || got.Commit != tc.wantCommit || got.ReqprofVersion != tc.wantCommit || !reflect.DeepEqual(got.Warnings, want) {
			t.Errorf("%s: version %q, commit %q, reqprof_version %q, warnings %q; want %q, %q, %q, %q",
				tc.name, got.Version, got.Commit, got.ReqprofVersion, got.Warnings, tc.wantVersion, tc.wantCommit, tc.wantCommit, want)
		}
	}
}

// Columns that would have the same heading are told apart: by the run
// each came from, then by pid, then by place.
func TestColumnNames(t *testing.T) {
	target := func(pid int, label, source string) TargetSummary {
		return TargetSummary{PID: pid, Comm: "srv", Label: label, Source: source}
	}
	for _, tc := range []struct {
		name    string
		targets []TargetSummary
		want    []string
	}{
		{"distinct", []TargetSummary{target(1, "a", "x.json"), target(2, "b", "x.json"), target(3, "", "y.json")},
			[]string{"a", "b", "3 (srv)"}},
		{"a label in two files", []TargetSummary{target(1, "lean", "mon.json"), target(2, "heavy", "mon.json"), target(3, "lean", "tue.json")},
			[]string{"lean (mon.json)", "heavy", "lean (tue.json)"}},
		{"a label twice in one run", []TargetSummary{target(1, "x", ""), target(2, "x", "")},
			[]string{"x (pid 1)", "x (pid 2)"}},
		{"one file twice", []TargetSummary{target(1, "x", "a.json"), target(1, "x", "a.json")},
			[]string{"x (#0)", "x (#1)"}},
		{"a label in a file and a run of no name", []TargetSummary{target(1, "x", "a.json"), target(2, "x", "")},
			[]string{"x (pid 1)", "x (pid 2)"}},
	} {
		if got := columnNames(tc.targets); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	combined := Combine([]Source{
		{"mon.json", Summary{Targets: []TargetSummary{target(1, "lean", "")}}},
		{"tue.json", Summary{Targets: []TargetSummary{target(1, "lean", "")}}},
	})
	var b strings.Builder
	if err := WriteComparison(&b, combined, CompareOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "lean (mon.json)") || !strings.Contains(b.String(), "lean (tue.json)") {
		t.Errorf("the comparison does not tell the two lean columns apart:\n%s", b.String())
	}
}

func TestSpreadByHand(t *testing.T) {
	labelled := func(label string, requests int, meanUs float64) TargetSummary {
		ts := meanTarget(1, requests, meanUs)
		ts.Label = label
		return ts
	}
	runs := []Summary{
		{Targets: []TargetSummary{labelled("rust", 10, 100), labelled("once", 10, 5), meanTarget(7, 10, 40)}},
		{Targets: []TargetSummary{labelled("idle", 0, 0), labelled("rust", 10, 110), meanTarget(7, 10, 40)}},
		{Targets: []TargetSummary{labelled("rust", 10, 90), labelled("idle", 0, 0), meanTarget(8, 10, 1)}},
	}
	want := []LabelSpread{
		{Target: "rust", Runs: 3, MeanUs: 100, MinUs: 90, MaxUs: 110, RelativeSpread: 0.2},
		// Unlabelled, a target is known by PID and comm: pid 8 is another.
		{Target: "7 (srv)", Runs: 2, MeanUs: 40, MinUs: 40, MaxUs: 40, RelativeSpread: 0},
	}
	if got := Spread(runs); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestWriteSpreadNone(t *testing.T) {
	var b bytes.Buffer
	if err := WriteSpread(&b, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "no target is in more than one run\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// Labels, comms and warnings come from outside: none may reach the terminal
// as an escape sequence.
func TestWriteComparisonEscapesControlCharacters(t *testing.T) {
	evil := meanTarget(2, 10, 1)
	evil.Label = "lab\x1b]el"
	evil.Comm = "ev\x1b[2Jil"
	evil.Partial, evil.Warnings = true, []string{"bad\x07 news"}
	var b bytes.Buffer
	sources := []Source{{"a\x1b.json", Summary{Targets: []TargetSummary{meanTarget(1, 10, 1), evil}}}}
	if err := WriteSources(&b, sources); err != nil {
		t.Fatal(err)
	}
	if err := WriteComparison(&b, Combine(sources), CompareOptions{}); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(b.String(), "\x1b\x07") {
		t.Errorf("control characters reached the output:\n%q", b.String())
	}
}

const zeroDist = `{"mean": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0}`

// route is a route of no time, with the fields given.
func route(fields string) string {
	return `{"route": "GET /", ` + fields + `, "cpu_us": ` + zeroDist + `, "user_us": ` + zeroDist +
		`, "kernel_us": ` + zeroDist + `, "latency_us": ` + zeroDist + `}`
}

func TestReadJSONRejectsBadAdditions(t *testing.T) {
	withTarget := func(extra string) string {
		return strings.Replace(minimalSummary, `"pid": 1,`, `"pid": 1, `+extra+`,`, 1)
	}
	cases := []struct {
		name, input, wantErr string
	}{
		{"started_at not RFC 3339", strings.Replace(minimalSummary, `"duration_s": 1`, `"duration_s": 1, "started_at": "yesterday"`, 1), "started_at"},
		{"negative mean", strings.Replace(minimalSummary, `"mean": 0`, `"mean": -1`, 1), "targets[0].cpu_us has -1"},
		{"mean beyond any measure", strings.Replace(minimalSummary, `"mean": 0`, `"mean": 1e300`, 1), "targets[0].cpu_us has 1e+300"},
		{"histogram of no bucket", withTarget(`"cpu_histogram": {"edges_us": [1], "counts": []}`), "1 edges for 0 counts"},
		{"histogram edges falling", withTarget(`"cpu_histogram": {"edges_us": [2, 1], "counts": [0]}`), "edges_us[1] is 1"},
		{"histogram counts not the requests", withTarget(`"cpu_histogram": {"edges_us": [1, 2], "counts": [3]}`), "counts[0] is 3"},
		{"histogram negative count", withTarget(`"cpu_histogram": {"edges_us": [1, 2, 3], "counts": [-1, 1]}`), "counts[0] is -1"},
		{"comparison of other targets", strings.Replace(minimalSummary, `"duration_s": 1`, `"duration_s": 1, "comparison": {"baseline_pid": 1, "targets": []}`, 1), "comparison has 0 targets"},
		{"floor not a target", strings.Replace(minimalSummary, `"duration_s": 1`, `"duration_s": 1, "comparison": {"baseline_pid": 1, "floor_index": 1, "targets": [{"pid": 1}]}`, 1), "floor_index is 1"},
		{"negative kernel cost", withTarget(`"kernel_breakdown_us": {"irq": 1, "syscall:write": -2}`), "targets[0].kernel_breakdown_us has -2"},
		{"calls beyond any count", withTarget(`"kernel_breakdown_calls": {"syscall:write": 1e30}`), "targets[0].kernel_breakdown_calls has 1e+30"},
		{"negative page faults", withTarget(`"page_faults_per_request": -1`), "targets[0].page_faults_per_request has -1"},
		{"negative switches", withTarget(`"ctx_switches_per_request": {"voluntary": 1, "involuntary": -1}`), "targets[0].ctx_switches_per_request has -1"},
		{"switches half given", withTarget(`"ctx_switches_per_request": {"voluntary": 1}`), `targets[0].ctx_switches_per_request has no "involuntary"`},
		{"negative wait total", withTarget(`"offcpu_total_us": -5`), "targets[0].offcpu_total_us has -5"},
		{"latency without p99", withTarget(`"latency_us": {"mean": 1, "p50": 1, "p90": 1, "max": 1}`), `targets[0].latency_us has no "p99"`},
		{"negative run-queue wait", withTarget(`"runqueue_us": {"mean": -1, "p50": 1, "p90": 1, "p99": 1, "max": 1}`), "targets[0].runqueue_us has -1"},
		{"route without latency", withTarget(`"routes": [{"route": "GET /", "requests": 0, "cpu_us": ` + zeroDist + `, "user_us": ` + zeroDist + `, "kernel_us": ` + zeroDist + `}]`), `targets[0].routes[0] has no "latency_us"`},
		{"routes of more requests", withTarget(`"routes": [` + route(`"requests": 2`) + `]`), "targets[0].routes[0].requests is 2"},
		{"routes of fewer requests", strings.Replace(withTarget(`"routes": [`+route(`"requests": 1`)+`]`), `"comm": "x", "requests": 0`, `"comm": "x", "requests": 2`, 1), "targets[0].routes: requests add up to 1, want the target's, 2"},
		{"negative route requests", withTarget(`"routes": [` + route(`"requests": -1`) + `]`), "targets[0].routes[0].requests is -1"},
		{"route mean beyond any measure", strings.Replace(withTarget(`"routes": [`+route(`"requests": 0`)+`]`), `"route": "GET /", "requests": 0, "cpu_us": {"mean": 0`, `"route": "GET /", "requests": 0, "cpu_us": {"mean": 1e300`, 1), "targets[0].routes[0].cpu_us has 1e+300"},
		{"negative spread runs", strings.Replace(minimalSummary, `"duration_s": 1`, `"duration_s": 1, "spread": [{"target": "x", "runs": -2}]`, 1), "spread[0].runs is -2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadJSON(strings.NewReader(c.input))
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ReadJSON(%q) error %v, want one containing %q", c.input, err, c.wantErr)
			}
		})
	}
}

// The comparison's title says its figures are net of reqprof's own cost
// when they are, and of how many targets when files mix runs.
func TestComparisonTitleSaysOwnCostTakenOut(t *testing.T) {
	net := TargetSummary{Label: "a", SelfCostUs: &SelfCostSummary{PerRequest: 1, TakenOut: true}}
	gross := TargetSummary{Label: "b", SelfCostUs: &SelfCostSummary{PerRequest: 1}}
	for _, c := range []struct {
		targets []TargetSummary
		want    string
	}{
		{[]TargetSummary{net, net}, "CPU per finished request, net of reqprof's own cost"},
		{[]TargetSummary{net, gross}, "CPU per finished request, net of reqprof's own cost in 1 of the 2 targets"},
		{[]TargetSummary{gross, {Label: "c"}}, "CPU per finished request"},
	} {
		if got := comparisonTitle(c.targets, nil); got != c.want {
			t.Errorf("title %q, want %q", got, c.want)
		}
	}
}
