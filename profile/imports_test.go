package profile

import (
	"os/exec"
	"strings"
	"testing"
)

// profile is the leaf every other package shares, so it must import
// nothing but the standard library, directly or through another package.
func TestOnlyStandardLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 {
		t.Fatalf("go list -deps listed %q, want profile and the standard library", out)
	}
	for _, line := range lines {
		path, standard, _ := strings.Cut(line, " ")
		if standard != "true" && path != "github.com/reqprof/reqprof/profile" {
			t.Errorf("profile depends on %s", path)
		}
	}
}
