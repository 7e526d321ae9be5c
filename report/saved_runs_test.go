package report

import (
	"os"
	"path/filepath"
	"testing"
)

// Runs saved as JSON by earlier builds of reqprof (the repository's
// testdata/runs, each `reqprof demo --json`) must still be read, and read
// as what they measured: a user compares today's runs with those.
func TestSavedRunsStillRead(t *testing.T) {
	paths, err := filepath.Glob("../testdata/runs/*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no saved runs in ../testdata/runs: %v", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			s, err := ReadJSON(f)
			if err != nil {
				t.Fatalf("reading %s: %v", path, err)
			}
			byLabel := map[string]TargetSummary{}
			for _, target := range s.Targets {
				byLabel[target.Label] = target
			}
			lean, heavy := byLabel["lean"], byLabel["heavy"]
			if len(s.Targets) != 2 || lean.Requests != 4000 || heavy.Requests != 4000 {
				t.Fatalf("want the demo's lean and heavy servers with 4000 requests each, read %+v", s.Targets)
			}
			// heavy spends 150 µs more of user time on each request.
			if heavy.CPUUs.Mean < lean.CPUUs.Mean+100 {
				t.Errorf("heavy %.1f µs per request, lean %.1f: the demo's difference is lost", heavy.CPUUs.Mean, lean.CPUUs.Mean)
			}
		})
	}
}
