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

// KernelBTFPath is where the kernel publishes its BTF, which reqprof's
// programs are relocated against; a kernel built without
// CONFIG_DEBUG_INFO_BTF has none.
const KernelBTFPath = "/sys/kernel/btf/vmlinux"

// ErrUnsupported is what Preflight's error wraps: this process or this
// system lacks what reqprof needs.
var ErrUnsupported = errors.New("this system lacks what reqprof needs")

// Preflight checks everything reqprof needs from the kernel before loading
// anything, and names all that is missing in one error rather than the
// first failure the loader would hit.
func Preflight() error {
	var missing []string
	privileges := checkPrivileges()
	if privileges != nil {
		missing = append(missing, privileges.Error())
	}
	progs, err := embeddedSpec()
	if err != nil {
		return fmt.Errorf("reading reqprof's BPF programs: %w", err)
	}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		missing = append(missing, fmt.Sprintf("kernel BTF (%s, CONFIG_DEBUG_INFO_BTF=y): %v", KernelBTFPath, err))
	} else {
		for _, h := range hooksOf(progs) {
			var typedef *btf.Typedef
			if err := spec.TypeByName("btf_trace_"+h.tracepoint, &typedef); err != nil && !h.optional {
				missing = append(missing, fmt.Sprintf("tracepoint %s (Linux %s+)", h.tracepoint, h.since))
			}
		}
		// At the window's end, task iterators settle what threads hold,
		// and what connections' tails hold (over the conns map, with
		// bpf_for_each_map_elem: a kernel before 5.13 rejects it at load,
		// which names the program).
		var iterCtx *btf.Struct
		if err := spec.TypeByName("bpf_iter__task", &iterCtx); err != nil {
			missing = append(missing, "BPF task iterators (Linux 5.8+)")
		}
	}
	// Threads' state lives in task storage. Probing creates a map, which
	// fails for want of privileges alone: they are named above already.
	if privileges == nil {
		if err := features.HaveMapType(ebpf.TaskStorage); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
			missing = append(missing, fmt.Sprintf("probing for task storage maps: %v", err))
		} else if err != nil {
			missing = append(missing, "BPF task storage maps (Linux 5.11+)")
		}
	}
	if len(missing) > 0 {
		return setupError{fmt.Sprintf("%v: %s", ErrUnsupported, strings.Join(missing, "; ")), ErrUnsupported}
	}
	return nil
}

// Privileged says whether this process may load and attach reqprof's
// programs: it is root, or has CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON.
func Privileged() (bool, error) {
	if os.Geteuid() == 0 {
		return true, nil
	}
	eff, err := effectiveCapabilities()
	if err != nil {
		return false, err
	}
	has := func(c uint) bool { return eff&(1<<c) != 0 }
	return has(capSysAdmin) || (has(capBPF) && has(capPerfmon)), nil
}

func checkPrivileges() error {
	ok, err := Privileged()
	switch {
	case err != nil:
		return fmt.Errorf("root (reading capabilities: %v)", err)
	case !ok:
		return errors.New("root, or CAP_BPF and CAP_PERFMON (run with sudo)")
	}
	return nil
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
