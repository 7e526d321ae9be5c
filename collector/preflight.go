package collector

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/btf"
)

// tracepoints are the tp_btf attach points reqprof needs, each with the
// kernel version that added it, for the error message.
var tracepoints = []struct{ name, since string }{
	{"sched_switch", "2.6"},
	{"sys_enter", "3.7"},
	{"sys_exit", "3.7"},
	{"sock_recv_length", "6.3"},
	{"sock_send_length", "6.3"},
	{"inet_sock_set_state", "4.16"},
}

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
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		missing = append(missing, fmt.Sprintf("kernel BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF=y): %v", err))
	} else {
		for _, tp := range tracepoints {
			var typedef *btf.Typedef
			if err := spec.TypeByName("btf_trace_"+tp.name, &typedef); err != nil {
				missing = append(missing, fmt.Sprintf("tracepoint %s (Linux %s+)", tp.name, tp.since))
			}
		}
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
