package report

import (
	"os/exec"
	"strings"
	"testing"
)

// deps lists what pkg depends on, directly or through another package,
// with its tests when withTests.
func deps(t *testing.T, pkg string, withTests bool) []string {
	t.Helper()
	args := []string{"list", "-deps"}
	if withTests {
		args = append(args, "-test")
	}
	out, err := exec.Command("go", append(args, pkg)...).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatalf("go list -deps %s listed nothing", pkg)
	}
	return deps
}

// report must build and test without BPF, so it must not depend on
// cilium/ebpf, directly or through another package.
func TestNoBPFDependency(t *testing.T) {
	for _, dep := range deps(t, ".", true) {
		if strings.HasPrefix(dep, "github.com/cilium/ebpf") {
			t.Errorf("report depends on %s", dep)
		}
	}
}

// The collector fills package profile's values and renders nothing, so it
// must not depend on report (nor on report's renderers through it).
func TestCollectorDoesNotImportReport(t *testing.T) {
	for _, dep := range deps(t, "github.com/reqprof/reqprof/collector", false) {
		if dep == "github.com/reqprof/reqprof/report" {
			t.Errorf("collector depends on %s", dep)
		}
	}
}
