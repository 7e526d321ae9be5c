package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/report"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// testdata/a.json and b.json are runs of two SDKs each on different hosts,
// rust-sdk in both, bare in b.json; old.json is an older reqprof's summary,
// with no host, kernel or histogram, of a target that exited early.
func TestCompareSavedRuns(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"testdata/a.json", "testdata/b.json", "--floor", "bare", "testdata/old.json"}
	if err := compare(args, &stdout, &stderr); err != nil {
		t.Fatalf("compare %q: %v\n%s", args, err, stderr.String())
	}
	golden := filepath.Join("testdata", "compare.golden")
	if *update {
		if err := os.WriteFile(golden, stdout.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/reqprof -run TestCompareSavedRuns -update creates it)", err)
	}
	if !bytes.Equal(stdout.Bytes(), want) {
		t.Errorf("output differs from %s (-update rewrites it)\ngot:\n%s\nwant:\n%s", golden, stdout.Bytes(), want)
	}
	// Columns of the same label are told apart by the file each came from.
	if !bytes.Contains(stdout.Bytes(), []byte("rust-sdk (testdata/a.json) │")) || !bytes.Contains(stdout.Bytes(), []byte("rust-sdk (testdata/b.json) │")) ||
		!bytes.Contains(stdout.Bytes(), []byte("baseline: rust-sdk (testdata/a.json);")) {
		t.Errorf("the two rust-sdk columns are not told apart by their files:\n%s", stdout.Bytes())
	}
	// Whatever else changes, these must be said.
	for _, warning := range []string{
		"WARNING: runs were taken on different hosts: alpha (testdata/a.json), beta (testdata/b.json), unknown (testdata/old.json)",
		"WARNING: runs were taken on different kernels:",
		"WARNING: request counts differ more than 10x, from 60 for pid 555 (calserver) to 1,200 for bare (pid 444)",
		"WARNING: pid 555 (calserver) is partial: process exited",
	} {
		if !bytes.Contains(stdout.Bytes(), []byte("\n"+warning)) {
			t.Errorf("output lacks a line starting %q", warning)
		}
	}
}

func TestCompareWritesJSONAndHTML(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "page.html")
	var stdout, stderr bytes.Buffer
	args := []string{"--json", "-", "--html", page, "--floor", "3", "testdata/a.json", "testdata/b.json"}
	if err := compare(args, &stdout, &stderr); err != nil {
		t.Fatalf("compare %q: %v\n%s", args, err, stderr.String())
	}
	s, err := report.ReadJSON(&stdout)
	if err != nil {
		t.Fatalf("--json - wrote no summary alone: %v", err)
	}
	var pids []int
	for _, target := range s.Targets {
		pids = append(pids, target.PID)
	}
	if want := []int{111, 222, 333, 444}; !slices.Equal(pids, want) {
		t.Errorf("targets %v, want %v: those of each file, in the order given", pids, want)
	}
	c := s.Comparison
	if c == nil || c.BaselinePID != 111 || c.FloorPID != 444 || c.FloorIndex == nil || *c.FloorIndex != 3 {
		t.Fatalf("comparison %+v, want baseline 111 and floor 444 at 3", c)
	}
	if d := c.Targets[1].AboveFloorUs; d == nil || *d != 2420.5 {
		t.Errorf("python-sdk above the floor: %v µs, want 2440.7 - 20.2 = 2420.5", d)
	}
	if len(s.Spread) != 1 || s.Spread[0].Target != "rust-sdk" || s.Spread[0].Runs != 2 {
		t.Errorf("spread %+v, want rust-sdk over 2 runs", s.Spread)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	// The targets' histograms overlaid on one chart.
	if !bytes.Contains(html, []byte(`class="overlay"`)) || !bytes.Contains(html, []byte(`<rect class="share"`)) || !bytes.Contains(html, []byte("python-sdk")) {
		t.Errorf("--html wrote no page of the comparison:\n%s", html)
	}
}

func TestCompareRejects(t *testing.T) {
	notJSON := filepath.Join(t.TempDir(), "table.txt")
	if err := os.WriteFile(notJSON, []byte("pid 111 (server) — 4 requests\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "compare needs a run saved with attach --json FILE"},
		{[]string{"--floor", "0"}, "compare needs a run saved with attach --json FILE"},
		{[]string{"testdata/missing.json"}, "no such file"},
		{[]string{notJSON}, notJSON + ": not JSON: invalid character 'p'"},
		{[]string{"testdata/a.json", "--floor", "2"}, "--floor 2: there are 2 targets"},
		{[]string{"testdata/a.json", "--floor", "-1"}, "--floor -1: there are 2 targets"},
		{[]string{"testdata/a.json", "--floor", "bare"}, `--floor "bare": no target has that label (labels: "rust-sdk", "python-sdk")`},
		{[]string{"testdata/a.json", "testdata/b.json", "--floor", "rust-sdk"}, `--floor "rust-sdk": 2 targets have that label`},
		{[]string{"testdata/a.json", "--frobnicate"}, "unknown flag --frobnicate"},
	} {
		var stdout, stderr bytes.Buffer
		err := compare(tc.args, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("compare %q: error %v, want one containing %q", tc.args, err, tc.want)
		}
		if stdout.Len() > 0 {
			t.Errorf("compare %q printed results despite failing:\n%s", tc.args, stdout.String())
		}
	}
}

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		wantFiles []string
		wantFloor string
	}{
		{[]string{"--floor", "x", "a", "b"}, []string{"a", "b"}, "x"},
		{[]string{"a", "--floor", "x", "b"}, []string{"a", "b"}, "x"},
		{[]string{"a", "b", "--floor=x"}, []string{"a", "b"}, "x"},
		{[]string{"a", "--", "--floor", "x"}, []string{"a", "--floor", "x"}, ""},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		floor := fs.String("floor", "", "")
		files, err := parseInterspersed(fs, tc.args)
		if err != nil || !slices.Equal(files, tc.wantFiles) || *floor != tc.wantFloor {
			t.Errorf("parseInterspersed(%q) = %q, floor %q, error %v; want %q, floor %q",
				tc.args, files, *floor, err, tc.wantFiles, tc.wantFloor)
		}
	}
}
