/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The runtimes whose pool jobs reqprof models, behind the hooks the
 * generic code calls: the hand-off (handoff.h) at each wake-up and each
 * return to a CPU, and the programs at a syscall's exit and at a socket
 * write. Each hook dispatches to every model; a model that does not apply
 * to the thread returns at once. A new runtime adds its model here, and
 * the generic code is left as it is.
 *
 * libuv's pool (pools.h) needs no hook: uprobes on its own functions see
 * each job queued and handed back.
 */
#ifndef REQPROF_RUNTIMES_H
#define REQPROF_RUNTIMES_H

#include "pools.h"
#include "pyjobs.h"

/* In the waker's context: target thread waker (tid waker_tid) wakes p.
 * True when a runtime's model took the wake-up as a job handed to its
 * pool: then it hands p no request. */
static __always_inline bool runtime_hand_off(struct thread_state *waker, __u32 waker_tid, struct task_struct *p)
{
	return py_hand_off(waker, waker_tid, p);
}

/* Back on a CPU, a pool thread takes up the job it was handed. */
static __always_inline void runtime_take_job(struct thread_state *st)
{
	py_take_job(st);
}

/* At a syscall's exit, its time charged: a pool thread whose syscall
 * handed its job's result back ends the job. */
static __always_inline void runtime_syscall_done(struct thread_state *st)
{
	if (st->handoff.py_ending)
		py_job_done(st);
}

/* Thread st writes the response on c (first: its first write): it claims
 * what the pool ran for its request. */
static __always_inline void runtime_response(struct thread_state *st, struct conn_state *c, __u64 cookie, bool first)
{
	py_claim(st, c, cookie, first);
}

/* Thread st, serving no request, writes to socket sk: a pool thread may
 * be handing its job's result back. */
static __always_inline void runtime_sends(struct thread_state *st, struct sock *sk)
{
	py_job_sends(st, sk);
}

#endif /* REQPROF_RUNTIMES_H */
