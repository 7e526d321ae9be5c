/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A target thread's switches off and onto a CPU, and its wake-ups.
 * Waiting: off-CPU time runs from a voluntary switch-out to the wake-up,
 * run-queue time from the wake-up (or a preemption) to the switch-in; both
 * are charged to the request the thread serves when it is back on a CPU.
 */
#ifndef REQPROF_SCHED_H
#define REQPROF_SCHED_H

#include "goroutines.h"
#include "handoff.h"
#include "selfcost.h"

/* prev leaves its CPU: its slice ends, and its wait begins. True when
 * prev is a target's thread. */
static __always_inline bool switch_out(struct task_struct *prev, bool preempt, unsigned int prev_state, __u64 now)
{
	if (!prev->pid) /* the idle task */
		return false;
	/* prev is still the current task: the CPU's record of what it
	 * switched in answers without a lookup of its process. */
	__u32 tid;
	__u32 plus1 = current_target_plus1(this_cpu(), &tid);
	if (!plus1)
		return false;
	struct thread_state *st = running_thread_of(prev, plus1 - 1);
	if (!st)
		return false;
	st->self.switches++;
	/* In a syscall, the goroutine is the one its entry followed. */
	follow_goroutine(st, goid_in_context(st));
	end_slice(st, now, prev->se.sum_exec_runtime);
	struct cost *to = pending_of(st);
	if (preempt || prev_state == TASK_RUNNING) {
		st->waits.runnable_since_ns = now;
		if (to)
			to->involuntary_switches++;
	} else {
		st->waits.blocked_since_ns = now;
		if (to)
			to->voluntary_switches++;
	}
	if (prev_state & TASK_DEAD) {
		/* Its final switch: what it held back has no boundary left to
		 * tell; it was in the exit syscall. */
		if (!cfg.lite) /* lite holds nothing back */
			charge(st, st->clock.held_ns, st->clock.syscall_nr);
		leave(st);
		keep_exited_runs(st);
		bpf_task_storage_delete(&threads, prev);
	} else {
		if (!preempt && prev_state != TASK_RUNNING)
			blocks(st);
		/* Off its CPU, its charges go where they belong: another
		 * thread may end the request meanwhile. Not on an asyncio
		 * loop, whose next write claims them (backends.h): its thread
		 * preempted midway through a task's piece. */
		if (st->loop.model != RUNTIME_ASYNCIO + 1)
			flush(st);
	}
	return true;
}

/* next takes the CPU: a slice begins, its wait ends and is charged, and it
 * takes up a request it was handed. The CPU remembers whether it is a
 * target. True when next is a target's thread. */
static __always_inline bool switch_in(struct task_struct *next, __u64 now)
{
	/* The idle task (pid 0) is never a target. */
	__u32 next_tid = next->pid;
	__u32 plus1 = next_tid ? target_plus1_of(next) : 0;
	if (cfg.hide_switch_ins && plus1)
		return false;
	struct cpu_state *cpu = this_cpu();
	if (cpu) {
		cpu->tid = next_tid;
		cpu->target_plus1 = plus1;
		cpu->generation = targets_generation;
		/* Kept for every task: one whose process becomes a target while
		 * it runs has its slice start here (running_thread_of). */
		cpu->running_tid = next_tid;
		cpu->running_since_ns = now;
		cpu->running_sched_at_in = next->se.sum_exec_runtime;
	}
	if (!plus1)
		return false;
	struct thread_state *st = thread_of(next, plus1 - 1, now);
	if (!st)
		return false;
	start_slice(&st->clock, now, next->se.sum_exec_runtime);
	__u64 runqueue_ns = count_waits(st, now);
	take_handoff(st);
	end_waits(st, runqueue_ns);
	return true;
}

/* p is woken: its blocked time ends and its wait for a CPU begins. */
static __always_inline void woken(struct task_struct *p)
{
	if (!enabled)
		return;
	/* A thread first seen here (new, or asleep since before the window)
	 * gets its state now: its wait for a CPU counts. */
	struct thread_state *st = target_thread(p, 0);
	if (!st)
		return;
	__u64 now = bpf_ktime_get_ns();
	struct thread_waits *w = &st->waits;
	if (w->blocked_since_ns) {
		w->offcpu_pending_ns += now - w->blocked_since_ns;
		w->blocked_since_ns = 0;
	}
	w->runnable_since_ns = now;
}

/* A process forked by a target joins it, when children are followed. */
static __always_inline void follow_child(struct task_struct *parent, struct task_struct *child)
{
	__u32 child_tgid = child->tgid;
	if (child_tgid != (__u32)child->pid)
		return; /* a new thread, not a new process */
	__u32 plus1 = target_plus1_of(parent);
	if (!plus1)
		return;
	__u32 index = plus1 - 1;
	if (bpf_map_update_elem(&targets, &child_tgid, &index, BPF_NOEXIST) == 0) {
		struct target_stats *s = stats_of(index);
		COUNT(s, children_followed, 1);
		/* Until it execs, it runs its parent's binary. */
		__u32 parent_tgid = parent->tgid;
		struct go_layout *layout = bpf_map_lookup_elem(&go_layouts, &parent_tgid);
		if (layout)
			bpf_map_update_elem(&go_layouts, &child_tgid, layout, BPF_ANY);
	}
}

#endif /* REQPROF_SCHED_H */
