package report

import (
	"os/exec"
	"strings"
	"testing"
)

// report must build and test without BPF, so it must not depend on
// cilium/ebpf, directly or through another package.
func TestNoBPFDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-test", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, "github.com/cilium/ebpf") {
			t.Errorf("report depends on %s", dep)
		}
	}
}
