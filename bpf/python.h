/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A CPython interpreter's state, read from outside: the layout of a
 * process's interpreter (given by the collector, collector/cpython), a
 * thread's own PyThreadState, and the contextvars.Context it runs (an
 * asyncio task's while a step of the task runs, a callback's while the
 * callback runs). pytasks.h follows tasks by it, pyjobs.h a pool's jobs.
 */
#ifndef REQPROF_PYTHON_H
#define REQPROF_PYTHON_H

#include "selfcost.h"

/* Per Python process whose interpreter is followed: its layout. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGET_PROCESSES);
	__type(key, __u32); /* tgid */
	__type(value, struct py_layout);
} py_layouts SEC(".maps");

/* The layout of the current thread's interpreter: NULL when its process
 * is no Python process that is followed. Looked up once a thread, and
 * kept in its state. */
static __always_inline struct py_layout *py_layout_of(struct thread_state *st)
{
	if (st->py.kind == PY_NOT)
		return 0;
	if (st->py.kind == PY_UNKNOWN) {
		__u32 tgid = bpf_get_current_pid_tgid() >> 32;
		struct py_layout *l = bpf_map_lookup_elem(&py_layouts, &tgid);
		if (!l) {
			st->py.kind = PY_NOT;
			return 0;
		}
		st->py.layout = *l;
		st->py.kind = PY_YES;
	}
	return &st->py.layout;
}

/* Whether the thread state at tstate is the current thread's: by its
 * kernel tid (3.11+), or by its pthread_t, which glibc makes the thread's
 * FS base (3.10). */
static __always_inline bool py_tstate_is_current(struct py_layout *l, __u64 tstate)
{
	__u64 id = 0;
	if (l->tstate_tid != PY_ABSENT) {
		if (bpf_probe_read_user(&id, sizeof(id), (void *)(tstate + l->tstate_tid)))
			return false;
		return id == (__u32)bpf_get_current_pid_tgid();
	}
	if (bpf_probe_read_user(&id, sizeof(id), (void *)(tstate + l->tstate_pthread)))
		return false;
	return id && id == bpf_get_current_task_btf()->thread.fsbase;
}

/* The current thread's own PyThreadState, found once by walking its
 * interpreter's list and kept in its state; 0 while it has none (a thread
 * that runs no Python yet: looked for again, at most MAX_PY_LOOKUPS
 * times). A global function, verified once. */
__attribute__((noinline)) __u64 py_own_tstate(struct thread_state *st)
{
	if (!st)
		return 0;
	if (st->py.tstate)
		return st->py.tstate;
	struct py_layout *l = py_layout_of(st);
	if (!l || st->py.lookups >= MAX_PY_LOOKUPS)
		return 0;
	st->py.lookups++;
	__u64 tstate = 0;
	if (bpf_probe_read_user(&tstate, sizeof(tstate), (void *)(l->interp + l->interp_threads)))
		return 0;
	for (int i = 0; i < MAX_PY_THREADS && tstate; i++) {
		if (py_tstate_is_current(l, tstate)) {
			st->py.tstate = tstate;
			return tstate;
		}
		if (bpf_probe_read_user(&tstate, sizeof(tstate), (void *)(tstate + l->tstate_next)))
			return 0;
	}
	return 0;
}

/* The context the thread runs now, and the interpreter's count of its
 * context changes (context_ver, which follows it: +1 at each enter and
 * each exit). False when it cannot be read. */
static __always_inline bool py_context_now(struct thread_state *st, __u64 *ctx, __u64 *ver)
{
	__u64 tstate = py_own_tstate(st);
	if (!tstate)
		return false;
	__u64 both[2];
	if (bpf_probe_read_user(both, sizeof(both), (void *)(tstate + st->py.layout.tstate_context)))
		return false;
	*ctx = both[0];
	*ver = both[1];
	return true;
}

#endif /* REQPROF_PYTHON_H */
