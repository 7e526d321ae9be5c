package live

import (
	"os/exec"
	"strings"
	"testing"
)

// live is fed by the collector but knows nothing of BPF, nor of
// Prometheus (serve turns its tallies into metrics): it must not depend
// on either, directly or through another package.
func TestNoBPFNorPrometheusDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/cilium/ebpf") || strings.HasPrefix(dep, "github.com/prometheus/") ||
			dep == "github.com/reqprof/reqprof/collector" {
			t.Errorf("live depends on %s", dep)
		}
	}
}
