/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Requests that wait on a backend. A server that calls a backend mid-request
 * (a database, another service, a proxy's upstream) writes the call on an
 * outbound connection and waits. On an event loop, other requests run in
 * the meantime, so when the answer comes the thread's last connection is
 * someone else's: what the kernel can see is that the call was written
 * while the thread served request R, and so its answer resumes R.
 *
 * Each outbound connection remembers the request that wrote its call in
 * flight (its link). When the answer is read:
 *   - threads, and loops that go on with the caller at once (libuv's
 *     Node, nginx and other C loops, a proxy's upstream): the thread
 *     serves R from the read on;
 *   - asyncio: the reads of one loop iteration wake their tasks, which run
 *     in the next iteration in the same order (a FIFO ready queue), each
 *     piece ending at its next syscall: the thread serves R from the read
 *     on, and again for R's piece of the next iteration;
 *   - Go: its goroutines are followed (goroutines.h), the answer moves
 *     nothing.
 * The request also counts, per backend, its calls, the time from each
 * call's first write to its answer's last read, and the bytes both ways.
 *
 * Only threads that read or write an outbound connection do any of this:
 * a thread that makes no outbound call looks up nothing more.
 */
#ifndef REQPROF_BACKENDS_H
#define REQPROF_BACKENDS_H

#include "threads.h"

/* x86-64 numbers of the syscalls an asyncio loop waits in between
 * iterations. */
#define NR_EPOLL_WAIT 232
#define NR_EPOLL_PWAIT 281
#define NR_EPOLL_PWAIT2 441

/* thread_loop.now_at while the loop waits in its poll. */
#define LOOP_POLLING (LOOP_QUEUE + 1)

/* How the thread's target resumes a request whose backend answered: read
 * once per thread. */
static __always_inline __u32 model_of(struct thread_state *st)
{
	if (!st->loop.model) {
		__u32 target = st->target;
		__u32 *model = bpf_map_lookup_elem(&runtimes, &target);
		st->loop.model = (model ? *model : RUNTIME_THREADS) + 1;
	}
	return st->loop.model - 1;
}

static __always_inline bool same_peer(struct backend_peer *a, struct backend_peer *b)
{
	__u64 *x = (__u64 *)a, *y = (__u64 *)b;
	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2];
}

/* The request of r's slot for peer, taken on its first call; calls to
 * more than MAX_BACKENDS backends are counted with the last. */
static __always_inline struct backend_use *use_of(struct conn_state *r, struct backend_peer *peer)
{
	__u32 used = r->backends_used;
	for (int i = 0; i < MAX_BACKENDS; i++) {
		if (i >= used)
			break;
		if (same_peer(&r->backends[i].peer, peer))
			return &r->backends[i];
	}
	if (used >= MAX_BACKENDS)
		return &r->backends[MAX_BACKENDS - 1];
	struct backend_use *u = &r->backends[used];
	__builtin_memset(u, 0, sizeof(*u));
	u->peer = *peer;
	r->backends_used = used + 1;
	return u;
}

/* The thread serves owner's request (r its state) from here on: after the
 * response, in its tail. */
static __always_inline void resume(struct thread_state *st, __u64 owner, struct conn_state *r, __u32 in_tail)
{
	if (st->serving.conn == owner && st->serving.in_tail == in_tail)
		return;
	leave_with(st, st->serving.conn == owner ? r : 0);
	st->serving.conn = owner;
	st->serving.in_tail = in_tail;
	st->serving.handed = 0;
	st->handoff.depth = 0;
}

/* An asyncio loop read data for owner: its task runs in the next
 * iteration, after those read before it. The reads come after the
 * iteration's pieces: what is left of them was not run as counted. */
static __always_inline void loop_read(struct thread_state *st, __u64 owner)
{
	struct thread_loop *l = &st->loop;
	l->now_len = 0;
	l->now_at = 0;
	__u32 n = l->next_len;
	if (n >= LOOP_QUEUE)
		return;
	l->next[n] = owner;
	l->next_len = n + 1;
}

/* An asyncio loop enters its poll: the next iteration's pieces are the
 * requests this one read, in order. */
static __always_inline void loop_poll(struct thread_state *st, long nr)
{
	if (nr != NR_EPOLL_WAIT && nr != NR_EPOLL_PWAIT && nr != NR_EPOLL_PWAIT2)
		return;
	if (model_of(st) != RUNTIME_ASYNCIO)
		return;
	struct thread_loop *l = &st->loop;
	__u32 n = l->next_len;
	for (int i = 0; i < LOOP_QUEUE; i++) {
		if (i >= n)
			break;
		l->now[i] = l->next[i];
	}
	l->now_len = n;
	l->next_len = 0;
	/* The pieces start at the poll's exit. */
	l->now_at = LOOP_POLLING;
}

/* At a syscall's exit on an asyncio loop with pieces to run: the poll's
 * exit starts the first, any other syscall ends one and starts the next. */
static __always_inline void loop_next_piece(struct thread_state *st)
{
	struct thread_loop *l = &st->loop;
	__u32 at = l->now_at == LOOP_POLLING ? 0 : l->now_at;
	if (at >= l->now_len || at >= LOOP_QUEUE) {
		l->now_len = 0;
		l->now_at = 0;
		return;
	}
	l->now_at = at + 1;
	__u64 owner = l->now[at];
	struct conn_state *r = served_conn(owner);
	if (r)
		resume(st, owner, r, r->phase == PHASE_RESPONDING);
}

/* bytes written on outbound connection o by the thread: the first write
 * after an answer (or the connection's first) is a call, made by the
 * request the thread serves. */
static __always_inline void backend_written(struct thread_state *st, struct conn_state *o, int bytes)
{
	struct backend_link *l = &o->link;
	if (l->call_start_ns && !l->answering) {
		l->unsent_out += bytes; /* the call goes on */
		return;
	}
	l->answering = 0;
	l->call_start_ns = bpf_ktime_get_ns();
	l->waited_ns = 0;
	l->unsent_out = 0;
	l->owner = 0;
	__u64 owner = st->serving.conn;
	struct conn_state *r = owner ? served_conn(owner) : 0;
	if (!r)
		return;
	l->owner = owner;
	l->owner_start_ns = r->rec.start_ns;
	l->owner_in_tail = st->serving.in_tail;
	struct backend_use *u = use_of(r, &l->peer);
	__sync_fetch_and_add(&u->calls, 1);
	__sync_fetch_and_add(&u->bytes_out, bytes);
}

/* bytes of an answer read on outbound connection o by the thread: its
 * wait and bytes go to the request that called, which the thread resumes
 * as its target's runtime does. */
static __always_inline void backend_read(struct thread_state *st, struct conn_state *o, int bytes)
{
	struct backend_link *l = &o->link;
	l->answering = 1;
	if (!l->owner)
		return;
	struct conn_state *r = served_conn(l->owner);
	if (!r || r->rec.start_ns != l->owner_start_ns) {
		/* The request ended before its answer came. */
		l->owner = 0;
		return;
	}
	struct backend_use *u = use_of(r, &l->peer);
	__u64 waited = bpf_ktime_get_ns() - l->call_start_ns;
	__sync_fetch_and_add(&u->wait_ns, waited - l->waited_ns);
	l->waited_ns = waited;
	__sync_fetch_and_add(&u->bytes_in, bytes);
	if (l->unsent_out) {
		__sync_fetch_and_add(&u->bytes_out, l->unsent_out);
		l->unsent_out = 0;
	}
	__u32 model = model_of(st);
	if (model == RUNTIME_GO)
		return;
	if (model == RUNTIME_ASYNCIO)
		loop_read(st, l->owner);
	resume(st, l->owner, r, l->owner_in_tail);
}

/* Whether the thread, about to begin a request on another connection,
 * leaves one it read unanswered, kept (not handed to a thread it woke),
 * in a runtime reqprof has no model of: then which of the two its CPU
 * serves is a guess, and both requests say so (REQ_INTERLEAVED). Looks
 * nothing up unless the thread left a request unanswered. */
static __always_inline bool interleaves(struct thread_state *st, __u64 cookie)
{
	__u64 prev = st->serving.conn;
	if (!prev || prev == cookie || st->serving.in_tail || st->serving.handed)
		return false;
	if (model_of(st) != RUNTIME_THREADS)
		return false;
	struct conn_state *p = served_conn(prev);
	if (!p || p->phase != PHASE_READING)
		return false;
	p->rec.flags |= REQ_INTERLEAVED;
	return true;
}

#endif /* REQPROF_BACKENDS_H */
