/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Calibration of the syscall entry cost (syscall_overhead_ns, threads.h).
 * The collector runs syscalls on a thread of its own (calibration_tid, made
 * a target for the purpose) serving a made-up connection, and compares its
 * CPU clock with what these programs charge its syscalls.
 */
#ifndef REQPROF_CALIBRATE_H
#define REQPROF_CALIBRATE_H

#include "threads.h"

volatile __u32 calibration_tid;
volatile __u64 calibration_syscall_ns;
volatile __u64 calibration_syscalls;
/* The made-up connection the calibrating thread serves, a new one for each
 * measure: socket cookies count up from 1 and never reach them. */
volatile __u64 calibration_cookie;

/* The calibrating thread starts a measure: it serves the made-up request,
 * and what its state holds from an earlier measure (a thread's state lives
 * as long as it does) is forgotten. In its context, entering a syscall. */
static __always_inline void start_calibration(struct thread_state *st, __u64 now)
{
	st->serving.conn = calibration_cookie;
	st->serving.in_tail = 0;
	st->serving.dirty = 0;
	__builtin_memset(&st->serving.pending, 0, sizeof(st->serving.pending));
	struct thread_clock *k = &st->clock;
	k->mode = MODE_USER;
	start_slice(k, now, 0); /* the slice has no known start: no sizing */
	k->debt_ns = 0;
	k->held_ns = 0;
}

/* At a syscall's entry: the calibrating thread begins a measure when it
 * does not serve the made-up connection yet. */
static __always_inline void calibration_enter(struct thread_state *st, __u32 tid, __u64 now)
{
	if (tid == calibration_tid && st->serving.conn != calibration_cookie)
		start_calibration(st, now);
}

/* At a syscall's exit, its held-back time complete: counted when the
 * calibrating thread made it. */
static __always_inline void calibration_exit(struct thread_state *st, __u32 tid)
{
	if (tid == calibration_tid) {
		calibration_syscall_ns += st->clock.held_ns;
		calibration_syscalls++;
	}
}

#endif /* REQPROF_CALIBRATE_H */
