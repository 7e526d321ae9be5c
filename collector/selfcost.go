package collector

import (
	"math"
	"sync/atomic"

	"github.com/reqprof/reqprof/profile"
)

// selfKinds is how many kinds of program runs the programs count and time
// in a target's context (bpf/selfcost.h).
const selfKinds = int(reqprofSelfKindSELF_KINDS)

// selfRates is what one run of reqprof's programs costs a target, by kind:
// entering a program (the tracepoint's dispatch, and for the syscall
// tracepoints the kernel's slower syscall path they switch on), measured
// at start, and the program's own run in a target's context, timed by the
// programs while the statistics are kept.
type selfRates struct {
	entryNs float64
	// poolEntryNs is what a uprobe on a runtime's pool costs to enter
	// (its trap, far dearer than a tracepoint's dispatch), calibrated
	// when the probes are attached (calibratePoolEntry); 0 before.
	poolEntryNs float64
	runNs       [selfKinds]float64

	// What the rates may be off by: the standard error of entryNs, and
	// the rates of each sample of the window's timed runs (a kind with
	// no run timed in a sample has the rate of the whole there), whose
	// spread is that of runNs.
	entrySpreadNs float64
	sampleRunNs   [][selfKinds]float64
}

func (r *selfRates) perRun(kind reqprofSelfKind) float64 {
	if kind == reqprofSelfKindSELF_POOL {
		return r.poolEntryNs + r.runNs[kind]
	}
	return r.entryNs + r.runNs[kind]
}

// selfSplit is reqprof's own cost in one cost's context, by where it was
// charged: in syscalls (the syscall tracepoints, and the socket, wake-up
// and voluntary switch runs made inside a syscall), as user time (page
// faults, and switches that preempted user code: the clock counts both as
// user time), and in interrupts (the interrupt hooks' runs).
type selfSplit struct {
	syscallNs, userNs, interruptNs float64
}

func (s selfSplit) totalNs() float64 { return s.syscallNs + s.userNs + s.interruptNs }

// splitOf is the own cost of the runs counted in c.
func (r *selfRates) splitOf(c *reqprofCost) selfSplit {
	calls := uint64(c.OtherSyscallCalls)
	for _, slot := range c.Syscalls {
		if slot.Nr != 0 {
			calls += uint64(slot.Calls)
		}
	}
	syscall := float64(calls)*(r.perRun(reqprofSelfKindSELF_SYS_ENTER)+r.perRun(reqprofSelfKindSELF_SYS_EXIT)) +
		float64(c.SockOps)*r.perRun(reqprofSelfKindSELF_SOCK) +
		float64(c.Wakeups)*r.perRun(reqprofSelfKindSELF_WAKE) +
		float64(c.VoluntarySwitches)*r.perRun(reqprofSelfKindSELF_SWITCH)
	// A uprobe's trap passes for user time: no syscall boundary is crossed.
	user := float64(c.PageFaults)*r.perRun(reqprofSelfKindSELF_FAULT) +
		float64(c.InvoluntarySwitches)*r.perRun(reqprofSelfKindSELF_SWITCH) +
		float64(c.PoolProbes)*r.perRun(reqprofSelfKindSELF_POOL)
	// An interrupt runs two hooks, its entry's and its exit's.
	interrupt := float64(c.Interrupts) * 2 * r.perRun(reqprofSelfKindSELF_INTERRUPT)
	return selfSplit{syscallNs: syscall, userNs: user, interruptNs: interrupt}
}

// tailOf is the own cost of the runs counted in a request's tail: those
// splitOf counts, but switches, which a tail does not pass to its request.
func (r *selfRates) tailOf(t *reqprofTailCost) float64 {
	return float64(t.Syscalls)*(r.perRun(reqprofSelfKindSELF_SYS_ENTER)+r.perRun(reqprofSelfKindSELF_SYS_EXIT)) +
		float64(t.SockOps)*r.perRun(reqprofSelfKindSELF_SOCK) +
		float64(t.Wakeups)*r.perRun(reqprofSelfKindSELF_WAKE) +
		float64(t.PageFaults)*r.perRun(reqprofSelfKindSELF_FAULT) +
		float64(t.PoolProbes)*r.perRun(reqprofSelfKindSELF_POOL) +
		float64(t.Interrupts)*2*r.perRun(reqprofSelfKindSELF_INTERRUPT)
}

// totalOf is the own cost of a target's runs over the window: those of
// its threads, served a request or not.
func (r *selfRates) totalOf(runs reqprofSelfRuns) float64 {
	var ns float64
	for k, n := range runsByKind(runs) {
		ns += n * r.perRun(reqprofSelfKind(k))
	}
	return ns
}

// spreadOf is the standard error of totalOf(runs): the entry cost's, for
// every run but a pool probe's (whose trap is calibrated apart), and the
// spread of what the window's samples of timed runs make of the same
// runs, over the square root of their number. samples is how many there
// were: with fewer than two, the second part is not known and left out.
func (r *selfRates) spreadOf(runs reqprofSelfRuns) (ns float64, samples int) {
	byKind := runsByKind(runs)
	var entered float64
	for k, n := range byKind {
		if reqprofSelfKind(k) != reqprofSelfKindSELF_POOL {
			entered += n
		}
	}
	entry := entered * r.entrySpreadNs
	totals := make([]float64, len(r.sampleRunNs))
	for i, rates := range r.sampleRunNs {
		for k, n := range byKind {
			totals[i] += n * rates[k]
		}
	}
	_, timed := meanAndError(totals)
	return math.Sqrt(entry*entry + timed*timed), len(totals)
}

// runsByKind is how many runs of each kind runs counts: a syscall is one
// of each syscall tracepoint, an interrupt its entry's and its exit's.
func runsByKind(runs reqprofSelfRuns) [selfKinds]float64 {
	var n [selfKinds]float64
	n[reqprofSelfKindSELF_SYS_ENTER] = float64(runs.Syscalls)
	n[reqprofSelfKindSELF_SYS_EXIT] = float64(runs.Syscalls)
	n[reqprofSelfKindSELF_SOCK] = float64(runs.SockOps)
	n[reqprofSelfKindSELF_SWITCH] = float64(runs.Switches)
	n[reqprofSelfKindSELF_WAKE] = float64(runs.Wakeups)
	n[reqprofSelfKindSELF_INTERRUPT] = 2 * float64(runs.Interrupts)
	n[reqprofSelfKindSELF_FAULT] = float64(runs.Faults)
	n[reqprofSelfKindSELF_POOL] = float64(runs.PoolProbes)
	return n
}

func addRuns(into *reqprofSelfRuns, from reqprofSelfRuns) {
	into.Syscalls += from.Syscalls
	into.SockOps += from.SockOps
	into.Switches += from.Switches
	into.Wakeups += from.Wakeups
	into.Interrupts += from.Interrupts
	into.Faults += from.Faults
	into.PoolProbes += from.PoolProbes
}

// selfCost is the rule that takes reqprof's own cost out of a request's
// figures, the one place it is applied: at the decode boundary, before a
// request is split, tallied or handed on. The rates are updated by the
// overhead meter as the window goes and read by the consumer.
type selfCost struct {
	rates atomic.Pointer[selfRates]
	gross bool // Config.Gross: measured and stated, not taken out
}

func newSelfCost(gross bool) *selfCost {
	s := &selfCost{gross: gross}
	s.rates.Store(&selfRates{})
	return s
}

// taken is what came out of one record's figures, for the kernel
// breakdown's rows.
type taken struct {
	syscallNs, interruptNs uint64
}

// net sets r.SelfNs to the own cost of the runs counted in c, and
// r.TailSelfNs to that of the runs counted in its tail, part of c; unless
// gross it takes them out of r's figures, each part from the time it was
// charged as, never below zero: syscall time, user time, then softirq and
// irq time, and the tail's out of r.TailNs.
func (s *selfCost) net(r *profile.Request, c *reqprofCost, tail *reqprofTailCost) taken {
	if s == nil {
		return taken{}
	}
	rates := s.rates.Load()
	split := rates.splitOf(c)
	r.SelfNs = roundNs(split.totalNs())
	if tail != nil {
		r.TailSelfNs = min(roundNs(rates.tailOf(tail)), r.SelfNs)
	}
	if s.gross {
		return taken{}
	}
	takeNs(&r.TailNs, r.TailSelfNs)
	var t taken
	t.syscallNs = takeNs(&r.SyscallNs, roundNs(split.syscallNs))
	takeNs(&r.UserNs, roundNs(split.userNs))
	want := roundNs(split.interruptNs)
	t.interruptNs = takeNs(&r.SoftirqNs, want)
	t.interruptNs += takeNs(&r.IrqNs, want-t.interruptNs)
	r.KernelNs = r.SyscallNs + r.SoftirqNs + r.IrqNs
	// Each part was floored apart: the tail stays part of the whole.
	r.TailNs = min(r.TailNs, r.CPUNs())
	return t
}

// takeNs takes up to want from *from, and says how much it took.
func takeNs(from *uint64, want uint64) uint64 {
	got := min(*from, want)
	*from -= got
	return got
}

func roundNs(ns float64) uint64 {
	if ns <= 0 || math.IsNaN(ns) {
		return 0
	}
	return uint64(math.Round(ns))
}

// scaleDown takes total off rows in proportion to each: the kernel
// breakdown's rows keep summing to the requests' netted kernel time.
func scaleDown(rows []*uint64, total uint64) {
	var sum uint64
	for _, r := range rows {
		sum += *r
	}
	if sum == 0 || total == 0 {
		return
	}
	total = min(total, sum)
	left := total
	for i, r := range rows {
		part := uint64(float64(total) * float64(*r) / float64(sum))
		if i == len(rows)-1 || part > left {
			part = min(left, *r)
		}
		part = min(part, *r)
		*r -= part
		left -= part
	}
	// Rounding leaves at most a few ns: from the first rows that have them.
	for _, r := range rows {
		if left == 0 {
			break
		}
		left -= takeNs(r, left)
	}
}
