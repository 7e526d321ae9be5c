// Package report turns what the collector measured into distributions,
// tables and JSON. It knows nothing of BPF: every input is a plain Go value,
// so all of it is testable without root.
package report

import "time"

// Request is one finished request, as charged in the kernel: every
// nanosecond a target thread spent on a CPU while serving it.
type Request struct {
	TID      uint32
	Conn     uint64        // opaque connection identity (kernel socket address)
	Start    time.Duration // monotonic clock: entry of the syscall that read its first byte
	End      time.Duration // monotonic clock: last write of its response
	UserNs   uint64        // on-CPU outside syscalls
	KernelNs uint64        // on-CPU inside syscalls
	BytesIn  uint64
	BytesOut uint64
}

// CPUNs is the request's whole on-CPU time.
func (r Request) CPUNs() uint64 { return r.UserNs + r.KernelNs }

// Target is everything measured for one profiled process over the window.
type Target struct {
	PID     int
	Comm    string
	Label   string // user's name for it (--pid 111=rust-sdk); empty if none
	Threads int    // threads seen on a CPU during the window

	Requests []Request // finished inside the window

	// CPU (ns) charged to requests that had not finished when the window
	// closed, or whose start was before it: counted as attributed, but not
	// in the per-request distribution.
	UnfinishedNs       uint64
	UnfinishedRequests int

	UnattributedNs uint64 // target threads on a CPU while serving no request
	// BetweenRequestsNs is the part of UnattributedNs a thread spent after
	// writing a response and before its next request: the server's loop
	// (epoll_wait, accept, bookkeeping).
	BetweenRequestsNs uint64

	// SchedCPUNs is the process's CPU over the window by the kernel's own
	// accounting (CLOCK_PROCESS_CPUTIME_ID), independent of reqprof's BPF.
	SchedCPUNs uint64

	LostEvents uint64 // records or events reqprof could not keep
	Exited     bool   // the process exited before the window closed
}

// AttributedNs is CPU charged to any request, finished or not.
func (t Target) AttributedNs() uint64 {
	var sum uint64
	for _, r := range t.Requests {
		sum += r.CPUNs()
	}
	return sum + t.UnfinishedNs
}

// ProcessNs is all CPU reqprof saw the target's threads use.
func (t Target) ProcessNs() uint64 { return t.AttributedNs() + t.UnattributedNs }

// Run is one profiling window over one or more targets.
type Run struct {
	Duration time.Duration
	Targets  []Target
}
