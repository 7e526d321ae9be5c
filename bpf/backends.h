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

/* Per target: enum runtime_model, how its threads resume a request whose
 * backend answered; read once per thread. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u32);
} runtimes SEC(".maps");

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

/* An asyncio loop: what a task runs between two syscalls the kernel
 * cannot tell apart, and the ready queue runs many tasks between polls.
 * What it can see: a read wakes the task of the read's request (the
 * server's connection, or the answer on an outbound connection resumes
 * its caller's), which runs in a later iteration, woken tasks in order; a
 * task's piece of CPU ends with a write (the response, or a call). So:
 *   - the CPU from a read on is its request's, up to the next read, write
 *     or poll;
 *   - a write claims the CPU since the last of those: a response's, its
 *     request; a call's, the woken task due first (an answer's task runs
 *     in the next iteration; a request's after its request_depth
 *     iterations, learnt: aiohttp's connection task starts a task per
 *     request, 2; uvicorn's protocol starts it from the read, 1).
 *   - what runs after a poll, or after a job handed to a pool thread,
 *     up to the next poll with no read or write between, is the steps of
 *     tasks that only await (a request's first steps, routing it before
 *     it awaits its job): shared equally among the tasks woken in the
 *     last two iterations and not yet run to a write (loop_share), or,
 *     when none is, left where the thread was.
 * What a task does without a write after that is left with whatever
 * claims it next. */

/* The loop thread's task woken for owner, read in this iteration, by its
 * request's read or (answer) its call's answer: one per request, the
 * latest; when full, the oldest is forgotten. */
/* loop_woke's scan, one slot a step (bpf_loop: the callback is verified
 * once; as a loop, the states of its three running picks took the socket
 * programs past the verifier's million instructions). */
struct woke_scan {
	struct thread_loop *l;
	__u64 owner;
	int slot, free, oldest;
	__u16 oldest_age, pad;
};

static long woke_step(__u64 i, void *ctx)
{
	struct woke_scan *c = ctx;
	struct thread_loop *l = c->l;
	if (!l || i >= LOOP_QUEUE)
		return 1;
	struct loop_wake *w = &l->woken[i];
	if (w->owner == c->owner) {
		c->slot = i;
		return 1;
	}
	if (!w->owner) {
		if (c->free < 0)
			c->free = i;
		return 0;
	}
	__u16 age = l->seq - w->seq;
	if (age > c->oldest_age) {
		c->oldest_age = age;
		c->oldest = i;
	}
	return 0;
}

/* Global functions, verified once. */
__attribute__((noinline)) int loop_woke(struct thread_loop *l, __u64 owner, int answer)
{
	if (!l)
		return 0;
	struct woke_scan c = {.l = l, .owner = owner, .slot = -1, .free = -1, .oldest = 0};
	bpf_loop(LOOP_QUEUE, woke_step, &c, 0);
	int slot = c.slot;
	if (slot < 0)
		slot = c.free >= 0 ? c.free : c.oldest;
	if (slot < 0 || slot >= LOOP_QUEUE)
		return 0;
	l->stepping = 0;
	struct loop_wake *w = &l->woken[slot];
	w->owner = owner;
	w->at = l->iteration;
	w->answer = answer;
	w->seq = ++l->seq;
	return 0;
}

/* owner's task ran (it wrote its response): it is woken no more. */
__attribute__((noinline)) int loop_ran(struct thread_loop *l, __u64 owner)
{
	if (!l)
		return 0;
	l->stepping = 0;
	for (int i = 0; i < LOOP_QUEUE; i++) {
		if (l->woken[i].owner == owner)
			l->woken[i].owner = 0;
	}
	return 0;
}

/* loop_caller's scan, one woken task a step (bpf_loop: verified once):
 * the oldest of the requests read before this iteration, of the answers
 * read in the last, and of all. */
struct caller_scan {
	struct thread_loop *l;
	__u32 now;
	int request, answer, any;
	__u16 request_age, answer_age, any_age, pad;
};

static long caller_step(__u64 i, void *ctx)
{
	struct caller_scan *c = ctx;
	struct thread_loop *l = c->l;
	if (!l || i >= LOOP_QUEUE)
		return 1;
	struct loop_wake *w = &l->woken[i];
	if (!w->owner)
		return 0;
	__u16 age = l->seq - w->seq;
	if (c->any < 0 || age > c->any_age) {
		c->any = i;
		c->any_age = age;
	}
	if (w->answer) {
		if (w->at + 1 == c->now && (c->answer < 0 || age > c->answer_age)) {
			c->answer = i;
			c->answer_age = age;
		}
	} else if (w->at < c->now && (c->request < 0 || age > c->request_age)) {
		c->request = i;
		c->request_age = age;
	}
	return 0;
}

/* The request whose task writes a call now, taken from the woken; 0 when
 * none is. Requests' first tasks run in the order they were read, so the
 * oldest request woken is the one due first; a task woken by an answer
 * read in the last iteration runs in this one: when both may write the
 * call, the request's goes first if it is due by the depth learnt, which
 * is learnt from calls written with no answer read in the last iteration. */
static __always_inline __u64 loop_caller(struct thread_loop *l)
{
	struct caller_scan c = {.l = l, .now = l->iteration, .request = -1, .answer = -1, .any = -1};
	bpf_loop(LOOP_QUEUE, caller_step, &c, 0);
	int pick = c.any;
	if (c.request >= 0 && c.request < LOOP_QUEUE) {
		__u32 depth = c.now - l->woken[c.request].at;
		if (c.answer < 0) {
			if (depth <= 4)
				l->request_depth = depth;
			pick = c.request;
		} else {
			pick = l->request_depth && depth < l->request_depth ? c.answer : c.request;
		}
	} else if (c.answer >= 0) {
		pick = c.answer;
	}
	if (pick < 0 || pick >= LOOP_QUEUE)
		return 0;
	__u64 owner = l->woken[pick].owner;
	l->woken[pick].owner = 0;
	return owner;
}

/* loop_share's scan, one slot a step: the tasks due to have run. */
struct share_scan {
	struct thread_loop *l;
	__u64 owner[LOOP_SHARES];
	__u32 now, n;
};

static long share_step(__u64 i, void *ctx)
{
	struct share_scan *c = ctx;
	struct thread_loop *l = c->l;
	if (!l || i >= LOOP_QUEUE)
		return 1;
	struct loop_wake *w = &l->woken[i];
	__u32 age = c->now - w->at;
	if (!w->owner || age < 1 || age > 2)
		return 0;
	__u32 n = c->n;
	if (n >= LOOP_SHARES)
		return 1;
	c->owner[n] = w->owner;
	c->n = n + 1;
	return 0;
}

/* The loop thread polls after running tasks' steps since its last poll
 * or hand-off, with no read or write to say whose: the steps of the tasks
 * woken in the last two iterations and not yet run to a write (a
 * request's first steps, up to where it awaits its job or its backend).
 * Their CPU is shared equally among them: keeping it where the thread
 * was, the last request read took every task's first step (FastAPI
 * under uvicorn: 4 requests read in one iteration, the last came out
 * 300 µs above the others). A global function, verified once; false when
 * no task is due, and the CPU stays where the thread was. */
__attribute__((noinline)) int loop_share(struct thread_state *st)
{
	if (!st || !st->serving.dirty)
		return 0;
	struct share_scan c = {.l = &st->loop, .now = st->loop.iteration};
	bpf_loop(LOOP_QUEUE, share_step, &c, 0);
	__u32 n = c.n;
	if (!n || n > LOOP_SHARES)
		return 0;
	struct cost *p = &st->serving.pending;
	for (__u32 i = 0; i < LOOP_SHARES && i < n; i++) {
		struct conn_state *r = served_conn(c.owner[i]);
		if (r)
			add_cost_part(&r->rec.cost, p, i, n, true);
		else
			charge_unattributed(st, part_of(p->user_ns, i, n), part_of(kernel_ns_of(p), i, n));
	}
	st->serving.dirty = 0;
	__builtin_memset(p, 0, sizeof(*p));
	return 1;
}

/* An asyncio loop enters its poll: a new iteration, and what ran since the
 * last read or write goes where the thread was, or, after tasks' steps,
 * is shared among the tasks due. */
static __always_inline void loop_poll(struct thread_state *st, long nr)
{
	if (nr != NR_EPOLL_WAIT && nr != NR_EPOLL_PWAIT && nr != NR_EPOLL_PWAIT2)
		return;
	if (model_of(st) != RUNTIME_ASYNCIO)
		return;
	if (!st->loop.stepping || st->serving.setup_sk || !loop_share(st))
		flush(st);
	st->loop.iteration++;
	st->loop.stepping = 1;
}

/* The loop thread writes for owner (r its state), which claims the CPU
 * since the last read, write or poll, and is served from here on. */
static __always_inline void loop_claim(struct thread_state *st, __u64 owner, struct conn_state *r)
{
	if (st->serving.conn == owner && !st->serving.in_tail)
		return;
	if (!st->serving.setup_sk) {
		__u32 in_tail = st->serving.in_tail;
		st->serving.in_tail = 0;
		flush_to(st, r);
		st->serving.in_tail = in_tail;
	}
	resume(st, owner, r, 0);
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
	bool on_loop = model_of(st) == RUNTIME_ASYNCIO;
	if (on_loop) {
		__u64 caller = loop_caller(&st->loop);
		if (caller)
			owner = caller;
	}
	struct conn_state *r = owner ? served_conn(owner) : 0;
	if (!r)
		return;
	if (on_loop) {
		loop_claim(st, owner, r);
		st->loop.flush_at_exit = 1;
	}
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
		loop_woke(&st->loop, l->owner, 1);
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
