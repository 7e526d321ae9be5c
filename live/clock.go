package live

import "golang.org/x/sys/unix"

// monotonicNs is the clock the collector's request times are read on
// (bpf_ktime_get_ns).
func monotonicNs() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
