/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Hand-off: a thread serving a request that wakes another thread of the
 * target (futex, condition variable, eventfd, pipe) hands it the request:
 * the woken thread serves it until it reads or writes a connection itself
 * or is woken for another request, so worker pools are charged to the
 * request they work for. A chain of hand-offs is at most MAX_HANDOFF_DEPTH
 * long. Only a thread that has itself read or written a served connection
 * takes a request this way: a language runtime's own threads (Go's
 * scheduler wakes them as syscalls come and go) never serve one, and must
 * not be charged to the request whose thread happened to wake them.
 */
#ifndef REQPROF_HANDOFF_H
#define REQPROF_HANDOFF_H

#include "runtimes.h"

/* Whether the thread is sending a signal: a signal wakes its target out of
 * any sleep (Go's runtime preempts its threads with SIGURG), and hands it
 * no work. */
static __always_inline bool signalling(struct thread_state *st)
{
	__u32 nr = st->clock.syscall_nr;
	return st->clock.mode == MODE_SYSCALL && (nr == NR_TGKILL || nr == NR_TKILL || nr == NR_KILL);
}

/* In the waker's context: the current thread wakes p. A wake-up from an
 * interrupt (a timer that ends a sleep, a packet that ends a read) is
 * none of the thread it ran over, and hands nothing: the CPU's state says
 * whether a softirq or hard irq runs over a target thread now. Nor does a
 * signal. True when the waker is a target's thread: its wake-up counts as
 * a run of reqprof's programs in its context. */
static __always_inline bool hand_off(struct task_struct *p)
{
	struct cpu_state *cpu = this_cpu();
	if (cpu && (cpu->softirq_start_ns || cpu->irq_start_ns))
		return false;
	__u32 waker_tid;
	struct thread_state *waker = current_thread(cpu, &waker_tid);
	if (!waker)
		return false;
	count_wakeup(waker);
	if (runtime_hand_off(waker, waker_tid, p))
		return true;
	if (!waker->serving.conn || waker->serving.in_tail || waker->handoff.depth >= MAX_HANDOFF_DEPTH ||
	    signalling(waker))
		return true;
	__u32 plus1 = target_plus1_of(p);
	if (!plus1 || plus1 - 1 != waker->target)
		return true;
	__u32 tid = p->pid;
	if (tid == waker_tid)
		return true;
	if (!served_conn(waker->serving.conn))
		return true;
	struct thread_state *st = bpf_task_storage_get(&threads, p, 0, 0);
	if (!st || !st->serving.served)
		return true;
	waker->serving.handed = 1;
	st->handoff.pending_conn = waker->serving.conn;
	st->handoff.pending_depth = waker->handoff.depth + 1;
	st->handoff.pending = 1;
	return true;
}

/* Back on a CPU, the thread takes up a request it was handed. */
static __always_inline void take_handoff(struct thread_state *st)
{
	runtime_take_job(st);
	struct thread_handoff *h = &st->handoff;
	if (!h->pending)
		return;
	h->pending = 0;
	if (st->serving.conn != h->pending_conn) {
		/* Woken for another request: the sleep it is woken from was no
		 * part of the request it is handed now. */
		turn_to(st, h->pending_conn, 0);
		st->waits.offcpu_pending_ns = 0;
	}
	h->depth = h->pending_depth;
}

#endif /* REQPROF_HANDOFF_H */
