package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/profile"
)

// The check sets reqprof's mean CPU per request, its own cost added back
// (the server's clock cannot leave it out), beside each server's own, and
// says how far apart they are; a --gross run's own cost is in its CPU
// already, and is not added twice.
func TestDemoCheckLines(t *testing.T) {
	run := profile.Run{Targets: []profile.Target{
		{Finished: profile.Totals{Requests: 4000, CPUNs: 4000 * 85_800, SelfNs: 4000 * 5_100}},
		{Finished: profile.Totals{Requests: 3999, CPUNs: 3999 * 296_300, SelfNs: 3999 * 23_800}},
	}}
	truths := []calserver.Stats{
		{Totals: calserver.Totals{Requests: 4000, CPUNs: 4000 * 90_000}},
		{Totals: calserver.Totals{Requests: 4000, CPUNs: 4000 * 325_000}},
	}
	var b bytes.Buffer
	writeCheck(&b, run, truths, false)
	for _, want := range []string{
		"  lean   server 90.0 against reqprof 85.8 + its own 5.1 = 90.9 (+1.0%), 4,000 of the server's 4,000 requests\n",
		"  heavy  server 325.0 against reqprof 296.3 + its own 23.8 = 320.1 (-1.5%), 3,999 of the server's 4,000 requests\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("check lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	writeCheck(&b, run, truths, true)
	if want := "  lean   server 90.0 against reqprof 85.8, its own cost in (--gross) (-4.7%), 4,000 of the server's 4,000 requests\n"; !strings.Contains(b.String(), want) {
		t.Errorf("gross check lacks %q:\n%s", want, b.String())
	}
}

// checkLine is a line of the demo's check: the server's mean, reqprof's
// with its own cost in, and how far apart.
var checkLine = regexp.MustCompile(`(?m)^  (\w+) +server ([0-9.]+) against reqprof .*= ([0-9.]+) \(([-+][0-9.]+)%\), ([0-9,]+) of the server's ([0-9,]+) requests$`)

// TestDemoChecksItself runs the demo: for each server, reqprof's CPU per
// request with its own cost in is within 3% of the server's own clock
// (the bound of the collector's tests against the same server), and every
// request the server served is counted.
func TestDemoChecksItself(t *testing.T) {
	testbin.RequireBPF(t)
	t.Setenv(asReqprof, "1")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"demo", "--requests", "3000"}, &stdout, &stderr); code != 0 {
		t.Fatalf("demo exit %d: %s", code, stderr.String())
	}
	lines := checkLine.FindAllStringSubmatch(stdout.String(), -1)
	if len(lines) != len(demoServers) {
		t.Fatalf("%d check lines, want one per server:\n%s", len(lines), stdout.String())
	}
	for _, l := range lines {
		t.Logf("%s", l[0])
		apart, err := strconv.ParseFloat(l[4], 64)
		if err != nil {
			t.Fatal(err)
		}
		if apart < -3 || apart > 3 {
			t.Errorf("%s: reqprof %s µs against the server's %s µs, %s%% apart: more than 3%%", l[1], l[3], l[2], l[4])
		}
		if l[5] != l[6] || l[6] != "3,000" {
			t.Errorf("%s: reqprof counted %s requests, the server %s; want 3,000 each", l[1], l[5], l[6])
		}
	}
	for _, want := range []string{"where the time went, µs per request (means):", "reqprof's own cost, taken out of the figures above:",
		"reqprof's own cost on the whole machine over the"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}
