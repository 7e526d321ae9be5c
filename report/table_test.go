package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/reqprof/reqprof/profile"
)

func TestGroupDigits(t *testing.T) {
	cases := map[string]string{
		"0":           "0",
		"999":         "999",
		"1000":        "1,000",
		"12345.6":     "12,345.6",
		"1234567.5":   "1,234,567.5",
		"-1234567.25": "-1,234,567.25",
		"-12.5":       "-12.5",
		"100000":      "100,000",
	}
	for in, want := range cases {
		if got := groupDigits(in); got != want {
			t.Errorf("groupDigits(%q) = %q, want %q", in, got, want)
		}
	}
}

func writeTableString(t *testing.T, s Summary) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteTable(&b, s); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A process chooses its own comm, and a summary file can say anything: none
// of it may reach the terminal as an escape sequence.
func TestWriteTableEscapesControlCharacters(t *testing.T) {
	s := Summary{Targets: []TargetSummary{{
		PID:      1,
		Comm:     "evil\x1b[2J",
		Label:    "lab\x1b]el",
		Warnings: []string{"bad\x07 news"},
		Partial:  true,
	}}}
	out := writeTableString(t, s)
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("control characters reached the output:\n%q", out)
	}
	for _, want := range []string{"evil\uFFFD[2J", `"lab\x1b]el"`, "WARNING: bad\uFFFD news"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// A summary read from a file may be marked partial with no reason given; the
// table must still say so.
func TestWriteTablePartialWithoutWarnings(t *testing.T) {
	out := writeTableString(t, Summary{Targets: []TargetSummary{{PID: 1, Partial: true}}})
	if !strings.Contains(out, "WARNING: partial result\n") {
		t.Errorf("partial summary not labelled:\n%s", out)
	}
}

func TestWriteTableNoTargets(t *testing.T) {
	if got := writeTableString(t, Summary{DurationS: 1}); got != "no targets\n" {
		t.Errorf("got %q, want %q", got, "no targets\n")
	}
}

func TestWriteTableOneRequest(t *testing.T) {
	s := Summarize(oneTargetRun())
	s.Targets[0].Requests = 1
	out := writeTableString(t, s)
	if !strings.Contains(out, " — 1 request in ") {
		t.Errorf("title for one request:\n%s", out)
	}
}

// A summary of a reqprof that measured no waits, kernel causes or routes
// shows what it has, and no zeros for what it has not.
func TestWriteTableOfOlderSummary(t *testing.T) {
	s := Summarize(oneTargetRun())
	older := &s.Targets[0]
	older.RunqueueUs, older.OffCPUUs, older.LatencyUs, older.FirstByteUs = nil, nil, nil, nil
	older.PageFaultsPerRequest, older.CtxSwitchesPerRequest = nil, nil
	older.KernelBreakdownUs, older.KernelBreakdownCalls, older.Routes = nil, nil, nil
	older.RunqueueTotalUs, older.OffCPUTotalUs = nil, nil
	out := writeTableString(t, s)
	for _, absent := range []string{"run-queue", "blocked", "latency", "where the time went", "page faults", "kernel cost", "route", "threads waited"} {
		if strings.Contains(out, absent) {
			t.Errorf("table has %q:\n%s", absent, out)
		}
	}
	if !strings.Contains(out, "│ kernel │") {
		t.Errorf("table lacks the kernel row:\n%s", out)
	}
}

// Steal time the programs left out is summarised and said on the CPU line;
// with none, the line says nothing of it.
func TestStealLeftOutIsSaid(t *testing.T) {
	run := profile.Run{Duration: time.Second, Targets: []profile.Target{{PID: 7, Comm: "srv", StolenNs: 12_345_678}}}
	ts := Summarize(run).Targets[0]
	if ts.StealUs != 12345.7 {
		t.Fatalf("steal_us %v, want 12345.7", ts.StealUs)
	}
	if line := cpuSeenLines(ts)[0]; !strings.Contains(line, "; hypervisor steal left out 12.3 ms") {
		t.Errorf("CPU line %q does not say the steal left out", line)
	}
	ts.StealUs = 0
	if line := cpuSeenLines(ts)[0]; strings.Contains(line, "steal") {
		t.Errorf("CPU line %q speaks of steal where there was none", line)
	}
}
