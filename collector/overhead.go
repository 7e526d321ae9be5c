package collector

import (
	"io"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/reqprof/reqprof/report"
)

// overheadMeter measures what reqprof costs over a window: the run time of
// its BPF programs, which the kernel keeps while BPF_ENABLE_STATS is held
// (at the price of two clock reads per program run), and the collector's
// own CPU and memory.
type overheadMeter struct {
	stats    io.Closer // nil when the kernel would not keep statistics
	progs    []*ebpf.Program
	bpfNs0   uint64
	bpfRuns0 uint64
	cpuNs0   uint64
}

// enableOverheadStats turns the kernel's BPF run-time statistics on. It
// must come before the syscall entry cost is calibrated: keeping statistics
// makes every program run dearer (two clock reads), and the calibration
// must measure the programs as they will run in the window, or each syscall
// is charged some 40 ns short of its cost.
func enableOverheadStats(objs *reqprofObjects) *overheadMeter {
	m := &overheadMeter{progs: []*ebpf.Program{
		objs.OnSchedSwitch, objs.OnSchedWaking, objs.OnSchedProcessFork, objs.OnSchedWakeup, objs.OnSchedWakeupNew, objs.OnSysEnter, objs.OnSysExit,
		objs.OnSockRecvLength, objs.OnSockSendLength, objs.OnInetSockSetState, objs.OnSoftirqEntry,
		objs.OnSoftirqExit, objs.OnIrqHandlerEntry, objs.OnIrqHandlerExit, objs.OnLocalTimerEntry,
		objs.OnLocalTimerExit, objs.OnPageFaultUser,
	}}
	if closer, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err == nil {
		m.stats = closer
	}
	return m
}

// close turns the statistics off again.
func (m *overheadMeter) close() {
	if m.stats != nil {
		m.stats.Close()
	}
}

// start takes the baselines the window's cost is measured from.
func (m *overheadMeter) start() {
	m.bpfNs0, m.bpfRuns0, _ = m.bpfTotals()
	m.cpuNs0, _ = selfUsage()
}

func (m *overheadMeter) bpfTotals() (ns, runs uint64, ok bool) {
	for _, p := range m.progs {
		st, err := p.Stats()
		if err != nil {
			return 0, 0, false
		}
		ns += uint64(st.Runtime)
		runs += st.RunCount
	}
	return ns, runs, true
}

// stop ends the measurement and says what it found.
func (m *overheadMeter) stop() report.Overhead {
	var o report.Overhead
	if cpuNs, maxRSSKB := selfUsage(); cpuNs >= m.cpuNs0 {
		o.CollectorCPUNs = cpuNs - m.cpuNs0
		o.CollectorMaxRSSKB = maxRSSKB
	}
	if m.stats == nil {
		return o
	}
	if ns, runs, ok := m.bpfTotals(); ok && ns >= m.bpfNs0 {
		o.Measured = true
		o.BPFNs = ns - m.bpfNs0
		o.BPFRuns = runs - m.bpfRuns0
	}
	return o
}

// selfUsage is this process's CPU (user + system) and peak resident memory.
func selfUsage() (cpuNs, maxRSSKB uint64) {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return uint64(ru.Utime.Nano() + ru.Stime.Nano()), uint64(ru.Maxrss)
}
