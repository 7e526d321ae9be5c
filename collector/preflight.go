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

// tracepoint is a tp_btf attach point, with the kernel version that added
// it, for the error message.
type tracepoint struct {
	name, since string
	optional    bool // reqprof works without it, with less detail
}

var (
	tpSchedSwitch      = tracepoint{name: "sched_switch", since: "2.6"}
	tpSchedWakeup      = tracepoint{name: "sched_wakeup", since: "2.6"}
	tpSchedWakeupNew   = tracepoint{name: "sched_wakeup_new", since: "2.6"}
	tpSchedWaking      = tracepoint{name: "sched_waking", since: "4.3"}
	tpSchedProcessFork = tracepoint{name: "sched_process_fork", since: "2.6"}
	tpSysEnter         = tracepoint{name: "sys_enter", since: "3.7"}
	tpSysExit          = tracepoint{name: "sys_exit", since: "3.7"}
	tpSockRecvLength   = tracepoint{name: "sock_recv_length", since: "6.3"}
	tpSockSendLength   = tracepoint{name: "sock_send_length", since: "6.3"}
	tpInetSockSetState = tracepoint{name: "inet_sock_set_state", since: "4.16"}
	tpSoftirqEntry     = tracepoint{name: "softirq_entry", since: "2.6"}
	tpSoftirqExit      = tracepoint{name: "softirq_exit", since: "2.6"}
	tpIrqHandlerEntry  = tracepoint{name: "irq_handler_entry", since: "2.6"}
	tpIrqHandlerExit   = tracepoint{name: "irq_handler_exit", since: "2.6"}
	// x86 only: the local APIC timer is no irq_handler.
	tpLocalTimerEntry = tracepoint{name: "local_timer_entry", since: "3.10", optional: true}
	tpLocalTimerExit  = tracepoint{name: "local_timer_exit", since: "3.10", optional: true}
	tpPageFaultUser   = tracepoint{name: "page_fault_user", since: "3.13", optional: true}
)

var tracepoints = []tracepoint{
	tpSchedSwitch, tpSchedWaking, tpSchedWakeup, tpSchedWakeupNew, tpSchedProcessFork, tpSysEnter, tpSysExit, tpSockRecvLength, tpSockSendLength,
	tpInetSockSetState, tpSoftirqEntry, tpSoftirqExit, tpIrqHandlerEntry, tpIrqHandlerExit,
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
		// Threads' state is read back at the end through a task iterator.
		var iterCtx *btf.Struct
		if err := spec.TypeByName("bpf_iter__task", &iterCtx); err != nil {
			missing = append(missing, "BPF task iterators (Linux 5.8+)")
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
