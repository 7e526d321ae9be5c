package cpython

import (
	"path/filepath"
	"testing"
)

// A process whose threads start and end, and whose frames change, while
// it is opened: every open finds its layout fits (thread states not yet
// bound, a list read while it changed, the GIL held by a thread leaving
// the list, frames that moved are taken for what they are).
func TestOpenWhileThreadsChurn(t *testing.T) {
	script, err := filepath.Abs("testdata/churn.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range interpreters {
		t.Run(in.name, func(t *testing.T) {
			requireFile(t, in.path)
			pr := startScript(t, in.path, script)
			if line := pr.line(t); line != "up" {
				t.Fatalf("%q, want up", line)
			}
			for i := range 50 {
				p, err := Open(pr.cmd.Process.Pid)
				if err != nil {
					t.Fatalf("open %d: %v", i, err)
				}
				p.Close()
			}
		})
	}
}
