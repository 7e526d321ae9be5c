package collector

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
)

// Capabilities that let a non-root user load and attach tracing programs.
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// Preflight checks everything reqprof needs from the kernel before loading
// anything, and names all that is missing in one error rather than the
// first failure the loader would hit.
func Preflight() error {
	var missing []string
	if err := checkPrivileges(); err != nil {
		missing = append(missing, err.Error())
	}
	progs, err := embeddedSpec()
	if err != nil {
		return fmt.Errorf("reading reqprof's BPF programs: %w", err)
	}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		missing = append(missing, fmt.Sprintf("kernel BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF=y): %v", err))
	} else {
		for _, h := range hooksOf(progs) {
			var typedef *btf.Typedef
			if err := spec.TypeByName("btf_trace_"+h.tracepoint, &typedef); err != nil && !h.optional {
				missing = append(missing, fmt.Sprintf("tracepoint %s (Linux %s+)", h.tracepoint, h.since))
			}
		}
		// At the window's end, iterators over the tasks and over the
		// connections settle what threads and tails still hold.
		var iterCtx *btf.Struct
		if err := spec.TypeByName("bpf_iter__task", &iterCtx); err != nil {
			missing = append(missing, "BPF task iterators (Linux 5.8+)")
		}
		if err := spec.TypeByName("bpf_iter__bpf_map_elem", &iterCtx); err != nil {
			missing = append(missing, "BPF map element iterators (Linux 5.9+)")
		}
	}
	// Threads' state lives in task storage.
	if err := features.HaveMapType(ebpf.TaskStorage); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		missing = append(missing, fmt.Sprintf("probing for task storage maps: %v", err))
	} else if err != nil {
		missing = append(missing, "BPF task storage maps (Linux 5.11+)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("this system lacks what reqprof needs: %s", strings.Join(missing, "; "))
	}
	return nil
}

func checkPrivileges() error {
	if os.Geteuid() == 0 {
		return nil
	}
	eff, err := effectiveCapabilities()
	if err != nil {
		return fmt.Errorf("root (reading capabilities: %v)", err)
	}
	has := func(c uint) bool { return eff&(1<<c) != 0 }
	if has(capSysAdmin) || (has(capBPF) && has(capPerfmon)) {
		return nil
	}
	return errors.New("root, or CAP_BPF and CAP_PERFMON (run with sudo)")
}

func effectiveCapabilities() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		}
	}
	return 0, errors.New("no CapEff line in /proc/self/status")
}
