/* SPDX-License-Identifier: GPL-2.0 */
/*
 * reqprof's own cost in a target's context. Its programs run on the
 * target's threads (at every syscall, socket operation, switch, wake-up,
 * interrupt and page fault), and the clocks that charge CPU to requests
 * see that time as the target's. The programs count their runs: per
 * request in its cost (its syscalls, switches and faults are counted
 * already; sock_ops, wakeups and interrupts besides), and per thread over
 * its life (self_runs), served a request or not. While timing_self is set
 * (a tenth of the window, with the kernel's statistics) each run in a
 * target's context is timed by kind. The collector multiplies counts by
 * the measured cost of a run, adds what entering a program costs
 * (calibrated at start), and takes that out of its figures, in Go, once.
 */
#ifndef REQPROF_SELFCOST_H
#define REQPROF_SELFCOST_H

#include "threads.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SELF_KINDS);
	__type(key, __u32); /* enum self_kind */
	__type(value, struct self_timing);
} self_timings SEC(".maps");

/* While set (by the collector, while it keeps the kernel's BPF
 * statistics), the programs time their runs in a target's context, by
 * kind, into self_timings: what reqprof costs a target, which the
 * collector takes out of its figures. */
volatile __u32 timing_self;

/* The clock at a program's start while runs are timed, else 0. */
static __always_inline __u64 self_timer(void)
{
	return timing_self ? bpf_ktime_get_ns() : 0;
}

/* Adds a run begun at t0 (0: not timed) in a target's context. */
static __always_inline void self_timed(__u32 kind, __u64 t0)
{
	if (!t0)
		return;
	struct self_timing *t = bpf_map_lookup_elem(&self_timings, &kind);
	if (t) {
		t->ns += bpf_ktime_get_ns() - t0;
		t->runs++;
	}
}

/* A socket operation's program ran on a target thread: counted for the
 * thread, and for what it serves (nothing when it serves no request). */
static __always_inline void count_sock_op(struct thread_state *st)
{
	st->self.sock_ops++;
	if (st->serving.conn) {
		st->serving.dirty = 1;
		st->serving.pending.sock_ops++;
	}
}

static __always_inline void count_wakeup(struct thread_state *st)
{
	st->self.wakeups++;
	if (st->serving.conn) {
		st->serving.dirty = 1;
		st->serving.pending.wakeups++;
	}
}

/* A uprobe on a runtime's pool ran on a target thread (pools.h): its
 * trap costs the thread more than its program, and the collector
 * calibrates both. */
static __always_inline void count_pool_probe(struct thread_state *st)
{
	st->self.pool_probes++;
	struct cost *to = pending_of(st);
	if (to)
		to->pool_probes++;
}

/* A thread's runs go to its target's counters when it exits: its state
 * goes with it. */
static __always_inline void keep_exited_runs(struct thread_state *st)
{
	struct target_stats *s = stats_of(st->target);
	if (!s)
		return;
	s->exited_self.syscalls += st->self.syscalls;
	s->exited_self.sock_ops += st->self.sock_ops;
	s->exited_self.switches += st->self.switches;
	s->exited_self.wakeups += st->self.wakeups;
	s->exited_self.interrupts += st->self.interrupts;
	s->exited_self.faults += st->self.faults;
	s->exited_self.pool_probes += st->self.pool_probes;
}

#endif /* REQPROF_SELFCOST_H */
