package serve

import (
	"os/exec"
	"strings"
	"testing"
)

// The collector is the only package that knows BPF: serve calls its API
// and imports nothing of cilium/ebpf itself.
func TestNoDirectBPFImport(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}} {{join .TestImports " "}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, imp := range strings.Fields(string(out)) {
		if strings.HasPrefix(imp, "github.com/cilium/ebpf") {
			t.Errorf("serve imports %s", imp)
		}
	}
}

// And the collector knows nothing of serving metrics.
func TestCollectorDoesNotImportPrometheus(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/reqprof/reqprof/collector").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/prometheus/") || dep == "github.com/reqprof/reqprof/serve" || dep == "github.com/reqprof/reqprof/live" {
			t.Errorf("collector depends on %s", dep)
		}
	}
}
