package main

import (
	"strings"
	"testing"
	"time"

	"github.com/reqprof/reqprof/report"
)

// TestProgramRunTimesKeepColumns: a program that a server's run did not
// load (lite mode leaves the syscall and interrupt programs out) gets a
// "–" in that server's column, so that every later figure of its row
// stays under its own server, and a program only a later server's run
// loaded still gets a row.
func TestProgramRunTimesKeepColumns(t *testing.T) {
	b := &bench{overheads: []overhead{
		{server: "nginx", bpf: bpfCost{requests: 1000, programs: []programRun{
			{name: "on_sys_enter", calls: 7000, runTime: 400 * time.Microsecond},
			{name: "on_softirq_entry", calls: 2000, runTime: 130 * time.Microsecond},
		}}},
		{server: "nginx, --lite", bpf: bpfCost{requests: 1000, programs: []programRun{
			{name: "on_sched_switch", calls: 3000, runTime: 300 * time.Microsecond},
		}}},
		{server: "Go net/http", bpf: bpfCost{requests: 2000, programs: []programRun{
			{name: "on_softirq_entry", calls: 4000, runTime: 600 * time.Microsecond},
			{name: "on_sys_enter", calls: 24000, runTime: 2600 * time.Microsecond},
			{name: "on_uv_queue_work", calls: 0, runTime: 0},
		}}},
	}}
	var w strings.Builder
	b.writeProgramRunTimes(&w)
	rows := map[string][]string{}
	for line := range strings.Lines(w.String()) {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		var cells []string
		for _, cell := range strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|") {
			cells = append(cells, strings.TrimSpace(cell))
		}
		rows[cells[0]] = cells[1:]
	}
	want := map[string][]string{
		"Program":          {"nginx", "nginx, --lite", "Go net/http"},
		"on_sys_enter":     {"400 (7.00)", "–", "1300 (12.00)"},
		"on_sched_switch":  {"–", "300 (3.00)", "–"},
		"on_softirq_entry": {"130 (2.00)", "–", "300 (2.00)"},
		"on_uv_queue_work": {"–", "–", "0 (0.00)"},
	}
	for name, cells := range want {
		if got := rows[name]; strings.Join(got, "|") != strings.Join(cells, "|") {
			t.Errorf("row %s: %q, want %q\n%s", name, got, cells, w.String())
		}
	}
}

// The stack sampling goal is the sampling program's run time per sample
// in the --stacks run, at the default rate, as a share of a busy CPU.
func TestStackSamplingGoal(t *testing.T) {
	b := &bench{}
	if _, ok := b.stackSamplingGoal(stacksName, "Stack sampling program"); ok {
		t.Error("a goal row without a --stacks run")
	}
	for _, c := range []struct {
		perSample time.Duration
		share     string
		met       string
	}{
		{8 * time.Microsecond, "0.8%", "yes"},
		{12 * time.Microsecond, "1.2%", "**no**"},
	} {
		b.overheads = []overhead{{server: stacksName, bpf: bpfCost{requests: 10_000, programs: []programRun{
			{name: "on_sys_enter", calls: 90_000, runTime: 90 * time.Millisecond},
			{name: "sample_stack", calls: 2_000, runTime: 2_000 * c.perSample},
		}}}}
		row, ok := b.stackSamplingGoal(stacksName, "Stack sampling program")
		if !ok || len(row) != 4 || !strings.HasPrefix(row[2], c.share+" (") || row[3] != c.met {
			t.Errorf("%v a sample: %q, want %s, met %s", c.perSample, row, c.share, c.met)
		}
	}
}

// The run with Python frames says how many of its route's samples were
// under the function its requests burn in.
func TestPythonStackSamplingGoal(t *testing.T) {
	b := &bench{overheads: []overhead{{server: pythonStacksName, bpf: bpfCost{requests: 4_000,
		programs:      []programRun{{name: "sample_stack", calls: 5_000, runTime: 5_000 * 6 * time.Microsecond}},
		underFunction: "heavy_work (routes.py:35)", underShare: 0.93,
	}}}}
	row, ok := b.stackSamplingGoal(pythonStacksName, "Stack sampling program with Python frames")
	want := "0.6% (6.00 µs a sample, 5000 samples; 93.0% of its route's under heavy_work (routes.py:35))"
	if !ok || row[2] != want || row[3] != "yes" || !strings.HasPrefix(row[0], "Stack sampling program with Python frames, share of a busy CPU at 999 Hz (python3") {
		t.Errorf("row %q, want %q", row, want)
	}
}

// Rows are named as docs/BENCHMARKS.md shows them: the server, then how
// the run differs, the --stacks run's among them.
func TestRunNames(t *testing.T) {
	for got, want := range map[string]string{
		runName("nginx"):                     "nginx",
		runName("nginx", "--no-payload", ""): "nginx, --no-payload",
		runName("nginx", floorLabel):         "nginx, reqprof on an idle process",
		stacksName:                           "calserver, 50 µs burn, --stacks",
		pythonStacksName:                     "python3 http.server, 500 µs in heavy_work, --stacks",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}

// The share under a function is of its route's samples, from the folded
// stacks: a function that is never the sampled one (it calls the loop
// that burns) counts.
func TestUnderFunction(t *testing.T) {
	st := &report.StacksSummary{Folded: []report.FoldedStack{
		{Route: "GET /heavy", Frames: []string{"do_GET (routes.py:40)", "heavy_work (routes.py:32)", "spin (routes.py:18)"}, Samples: 90},
		{Route: "GET /heavy", Frames: []string{"do_GET (routes.py:40)"}, Samples: 10},
		{Route: "(between requests)", Frames: []string{"serve_forever (socketserver.py:233)"}, Samples: 50},
	}}
	name, share := underFunction(st, "heavy_work")
	if name != "heavy_work (routes.py:32)" || share != 0.9 {
		t.Errorf("%q %v, want heavy_work (routes.py:32) 0.9", name, share)
	}
}
