/* SPDX-License-Identifier: GPL-2.0 */
/*
 * asyncio's tasks, told apart by the interpreter's own state. A loop
 * thread runs many tasks' steps and callbacks between two syscalls, with
 * no kernel event between them. But CPython keeps, in the thread's
 * PyThreadState, the contextvars.Context it runs: asyncio (its own loop
 * and uvloop alike) runs each task step and each callback inside the
 * task's or callback's context, entered and left around it, and counts
 * each change (context_ver). So at each cut of a loop thread's time in
 * user mode (a syscall's entry, a switch off its CPU) the programs read
 * the context it runs, one read of its memory:
 *   - the same context as at the last cut, and no change counted since:
 *     the piece between the two is that context's, seen;
 *   - another: the piece goes to the context the interpreter shows now,
 *     which ran from its step's start up to this syscall (its head); what
 *     the previous context ran after its last syscall (its tail), and any
 *     context that ran wholly in between, are in the piece too. When
 *     both contexts serve the same request and none ran in between, the
 *     piece is still that request's; otherwise its user time is counted
 *     estimated (cost.estimated_ns), never passed off as seen.
 * A context serves the request of the connection it last read or wrote
 * (py_served): a task's context lives as long as the task, a reader
 * callback's as long as its reader. A context not seen to read or write
 * one yet holds its CPU (threads.h: serving.hold) until it does, and that
 * request takes it: a task's work before its first write is its own,
 * seen. Once the request a context served has ended (the next request on
 * its connection began while the task was still winding down, or the
 * context's address was reused by a later task not seen to write yet),
 * its CPU goes to its connection's request now, counted estimated
 * (serving.by_rule). The loop's own context (the one it polls in; uvloop runs its I/O
 * callbacks there) serves the connection its thread last read or wrote
 * in it, as a thread does.
 *
 * A call to a backend written by a task whose request is not known yet
 * is the task's (backend_link.owner_ctx): its answer's reading follows
 * the task's context, and the call is counted for the request once the
 * task is seen to serve one.
 *
 * Only threads of a target whose model is RUNTIME_PYTASKS (a CPython
 * whose layout the collector knows), and only once they have served a
 * connection, read anything.
 */
#ifndef REQPROF_PYTASKS_H
#define REQPROF_PYTASKS_H

#include "python.h"

/* Contexts seen to read or write a served connection, by process: the
 * request they serve. Least recently used go first. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_PY_CONTEXTS);
	__type(key, struct py_ctx_key);
	__type(value, struct py_ctx);
} py_ctxs SEC(".maps");

/* Whether the thread's target's tasks are followed by their context. */
static __always_inline bool follows_tasks(struct thread_state *st)
{
	return model_of(st) == RUNTIME_PYTASKS && py_layout_of(st);
}

static __always_inline struct py_ctx *py_ctx_of(__u64 ctx, bool create)
{
	struct py_ctx_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .ctx = ctx};
	struct py_ctx *b = bpf_map_lookup_elem(&py_ctxs, &key);
	if (b || !create)
		return b;
	struct py_ctx fresh = {};
	bpf_map_update_elem(&py_ctxs, &key, &fresh, BPF_NOEXIST);
	return bpf_map_lookup_elem(&py_ctxs, &key);
}

/* Whether ctx is the loop's own context (or none entered). */
static __always_inline bool py_is_base(struct thread_state *st, __u64 ctx)
{
	return !ctx || ctx == st->py.base_ctx;
}

/* Where the CPU of a context goes: the request of connection conn, or,
 * while it serves none known, held under the key hold. */
struct py_dest {
	__u64 conn;
	__u64 hold;
	__u64 by_rule; /* conn's request is not the one the context was seen to serve */
};

/* The request ctx serves now, if its binding still holds. A context that
 * follows another (via) serves what that one serves. */
static __always_inline struct py_dest py_dest_of(struct thread_state *st, __u64 ctx)
{
	struct py_dest d = {};
	if (py_is_base(st, ctx)) {
		d.conn = st->py.base_conn;
		return d;
	}
	struct py_ctx *b = py_ctx_of(ctx, false);
	if (b && b->via) {
		ctx = b->via;
		b = py_ctx_of(ctx, false);
	}
	struct conn_state *c = b && b->conn ? served_conn(b->conn) : 0;
	if (c) {
		d.conn = b->conn;
		d.by_rule = c->rec.start_ns != b->start_ns;
		return d;
	}
	d.hold = ctx;
	return d;
}

/* The thread turns to what d says; false when it serves that already. */
static __always_inline bool py_turn_to(struct thread_state *st, struct py_dest d)
{
	if (d.conn) {
		if (st->serving.conn == d.conn && !st->serving.hold && st->serving.by_rule == d.by_rule)
			return false;
		turn_to(st, d.conn, 0);
		st->serving.by_rule = d.by_rule;
		return true;
	}
	if (!st->serving.conn && st->serving.hold == d.hold)
		return false;
	leave(st);
	st->serving.conn = 0;
	st->serving.in_tail = 0;
	st->serving.by_rule = 0;
	st->serving.hold = d.hold;
	return true;
}

/* Thread st read bytes of the request of served connection cookie
 * (start_ns its start), or of an answer to a call of it or, while that
 * request is not known, of the task whose context is via: the contexts
 * the code handling them makes before the thread's next cut are that
 * request's (a request's task, made by the protocol that read it; a
 * callback's copy of the context). A context made takes the newest of the
 * interpreter's free ones: the PY_FRESH newest are noted now, and those
 * in use at the next cut were made since (py_bind_fresh). Contexts made
 * when none is free (a burst of them) are not seen so. */
static __always_inline void py_note_read(struct thread_state *st, __u64 cookie, __u64 start_ns, __u64 via)
{
	if (!st->py.read || !follows_tasks(st))
		return;
	struct py_layout *l = &st->py.layout;
	__u64 e = 0;
	if (!l->ctx_freelist || bpf_probe_read_user(&e, sizeof(e), (void *)l->ctx_freelist))
		return;
	for (int i = 0; i < PY_FRESH; i++) {
		st->py.fresh[i] = e;
		if (e && bpf_probe_read_user(&e, sizeof(e), (void *)(e + l->ctx_next_free)))
			e = 0;
	}
	st->py.fresh_conn = cookie;
	st->py.fresh_start_ns = start_ns;
	st->py.fresh_via = via;
	st->py.fresh_armed = 1;
}

/* At the first cut after py_note_read: of the contexts noted free then,
 * those in use now (a free one's reference count is 0, a made one's at
 * least 1) were made since, and serve what was read. An entry left by an
 * earlier context at the same address goes, with what it held. */
static __always_inline void py_bind_fresh(struct thread_state *st)
{
	if (!st->py.fresh_armed)
		return;
	st->py.fresh_armed = 0;
	for (int i = 0; i < PY_FRESH; i++) {
		__u64 e = st->py.fresh[i];
		if (!e)
			break;
		__s64 refs = 0;
		if (bpf_probe_read_user(&refs, sizeof(refs), (void *)e) || refs <= 0)
			continue;
		struct held_key hk = {.tgid = bpf_get_current_pid_tgid() >> 32, .key = e};
		bpf_map_delete_elem(&held, &hk);
		struct py_ctx *b = py_ctx_of(e, true);
		if (!b)
			continue;
		b->conn = st->py.fresh_conn;
		b->start_ns = st->py.fresh_start_ns;
		b->via = st->py.fresh_conn ? 0 : st->py.fresh_via;
	}
}

/* At a cut of thread st's time in user mode (the entry of syscall nr, or
 * a switch off its CPU, nr -1): the interpreter says which context it
 * runs, and the piece being cut goes to what that context serves (above).
 * The caller clears st->clock.estimated once the piece is cut. */
static __always_inline void follow_task(struct thread_state *st, long nr, __u64 now)
{
	if (!st->serving.served || !follows_tasks(st))
		return;
	py_bind_fresh(st);
	__u64 ctx, ver;
	if (!py_context_now(st, &ctx, &ver))
		return;
	if (waits_for_events(nr))
		st->py.base_ctx = ctx;
	if (!st->py.read) {
		st->py.read = 1;
		st->py.ctx = ctx;
		st->py.ctx_ver = ver;
		py_turn_to(st, py_dest_of(st, ctx));
		return;
	}
	__u64 was = st->py.ctx, changes = ver - st->py.ctx_ver;
	if (ctx == was && !changes)
		return;
	st->py.ctx = ctx;
	st->py.ctx_ver = ver;
	/* The fewest changes from was to ctx: leaving a task's context for
	 * the loop's, entering one from it, or both. More: some other
	 * context ran in between, unseen. */
	__u64 least = ctx == was ? 0 : py_is_base(st, was) || py_is_base(st, ctx) ? 1 : 2;
	struct py_dest d = py_dest_of(st, ctx);
	bool moves = d.conn ? st->serving.conn != d.conn || st->serving.hold : st->serving.conn || st->serving.hold != d.hold;
	if (moves && st->clock.mode == MODE_USER && st->clock.run_start_ns && now > st->clock.run_start_ns) {
		/* The previous context's tail and the next one's head: which
		 * is longer, nothing says; each destination takes half. */
		st->clock.estimated = 1;
		cut(st, st->clock.run_start_ns + (now - st->clock.run_start_ns) / 2, false);
	}
	bool turned = py_turn_to(st, d);
	if (turned || changes > least)
		st->clock.estimated = 1;
}

/* Thread st read or wrote served connection c (cookie), and turned to its
 * request: the context it runs serves that request from now on, and what
 * the context held for a request not known yet goes to it (its task's
 * work before it first read or wrote its connection: its own, seen). */
static __always_inline void py_served(struct thread_state *st, __u64 cookie, struct conn_state *c)
{
	if (!st->py.read || !follows_tasks(st))
		return;
	__u64 ctx = st->py.ctx;
	if (py_is_base(st, ctx)) {
		st->py.base_conn = cookie;
		return;
	}
	struct py_ctx *b = py_ctx_of(ctx, true);
	if (!b)
		return;
	b->conn = cookie;
	b->start_ns = c->rec.start_ns;
	b->via = 0;
	release_held(ctx, &c->rec.cost, c->rec.target);
}

/* Thread st writes a call on an outbound connection: the request whose
 * call it is (a served connection's cookie), or, for a task not yet seen
 * to serve one, 0 with *ctx its context. */
static __always_inline __u64 py_caller(struct thread_state *st, __u64 *ctx)
{
	*ctx = 0;
	if (!st->py.read || py_is_base(st, st->py.ctx))
		return st->serving.conn;
	struct py_dest d = py_dest_of(st, st->py.ctx);
	if (!d.conn)
		*ctx = d.hold;
	return d.conn;
}

/* Thread st reads the answer to a call its link says whose: owner's
 * request (owner_start_ns its start), or, while that is not known, the
 * task whose context is owner_ctx. The context it reads in (a reader
 * callback's) serves the same from now on; the loop's own context goes
 * on with the caller, as a loop that resumes it at once does. */
static __always_inline void py_answer(struct thread_state *st, __u64 owner, __u64 owner_start_ns, __u64 owner_ctx)
{
	if (!st->py.read)
		return;
	__u64 ctx = st->py.ctx;
	struct py_dest d = {.conn = owner, .hold = owner ? 0 : owner_ctx};
	py_note_read(st, owner, owner_start_ns, owner_ctx);
	if (py_is_base(st, ctx)) {
		st->py.base_conn = owner;
	} else {
		struct py_ctx *b = py_ctx_of(ctx, true);
		if (b) {
			b->conn = owner;
			b->start_ns = owner_start_ns;
			b->via = owner ? 0 : owner_ctx;
		}
	}
	if (d.conn || d.hold)
		py_turn_to(st, d);
}

#endif /* REQPROF_PYTASKS_H */
