/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Hand-off: a thread serving a request that wakes another thread of the
 * target (futex, condition variable, eventfd, pipe) hands it the request.
 *
 * Worker pools of a server's own (a thread that reads requests hands them
 * to threads that write the responses): the woken thread has served a
 * connection itself, and serves the request until it reads or writes a
 * connection or is woken for another. A chain of hand-offs is at most
 * MAX_HANDOFF_DEPTH long.
 *
 * Pools of a runtime (libuv's, a Python executor, anyio's worker
 * threads): the loop thread does all the I/O and hands work to a thread
 * that never touches a socket, which hands the result back by waking the
 * loop thread (futex, eventfd, the self-pipe) or writing to it when it is
 * awake. Such a thread takes the request as a piece: its CPU from the wake
 * is held in its own state until it answers back to the thread that woke
 * it, and is the request's then. A runtime's own helpers (GC, JIT,
 * timers) are told apart by what they do, not by name: a helper woken by
 * a serving thread that never answers back to it keeps its piece held,
 * and what it holds at the window's end is unattributed, under its
 * thread's name. While it holds a piece, a thread takes no other (a wake
 * by the loop thread mid-job hands over a lock, CPython's GIL, not work),
 * and it hands nothing on. A wake on a futex word the waker itself last
 * slept on hands over a lock they share, not work: no piece starts.
 * After answering back, a thread that goes on without sleeping takes the
 * next job of a queue it was not woken for: whose job it is, the kernel
 * cannot tell, and what it does until its next answer back is counted
 * with the request it last worked for, flagged as estimated.
 *
 * Go's runtime threads are never pool threads: goroutines are followed
 * (goroutines.h), and Go's scheduler wakes its threads as goroutines come
 * and go, for no request.
 */
#ifndef REQPROF_HANDOFF_H
#define REQPROF_HANDOFF_H

#include "backends.h"
#include "selfcost.h"

#define NR_FUTEX 202

/* Whether the thread is sending a signal: a signal wakes its target out of
 * any sleep (Go's runtime preempts its threads with SIGURG), and hands it
 * no work. */
static __always_inline bool signalling(struct thread_state *st)
{
	__u32 nr = st->clock.syscall_nr;
	return st->clock.mode == MODE_SYSCALL && (nr == NR_TGKILL || nr == NR_TKILL || nr == NR_KILL);
}

/* The futex word of the futex call task is in, or 0. */
static __always_inline __u64 futex_word_of(struct task_struct *task, struct thread_state *st)
{
	if (st->clock.mode != MODE_SYSCALL || st->clock.syscall_nr != NR_FUTEX)
		return 0;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	return regs ? BPF_CORE_READ(regs, di) : 0;
}

/* Whether two futex words are one, or the two groups of one glibc
 * condition variable (4 bytes apart). */
static __always_inline bool same_futex(__u64 a, __u64 b)
{
	return a == b || a == b + 4 || a + 4 == b;
}

/* Whether the current thread's futex wake hands over a lock it shares
 * with the woken thread: a word it slept on itself lately. */
static __always_inline bool lock_wake(struct thread_state *waker)
{
	__u64 word = futex_word_of(bpf_get_current_task_btf(), waker);
	if (!word)
		return false;
	return same_futex(word, waker->handoff.slept[0]) || same_futex(word, waker->handoff.slept[1]);
}

/* The pool thread holding a piece answered back, in its current syscall:
 * the piece ends at the syscall's exit (answer_back_done). */
static __always_inline void answer_back(struct thread_state *st)
{
	st->handoff.answered = 1;
}

/* The oldest request of the target's pool queue, taken, and its place
 * in the queue plus 1 in *at; 0 when empty (or when another pool thread
 * takes it at the same time). */
static __always_inline __u64 pop_pool_queue(__u32 target, __u64 *at)
{
	*at = 0;
	struct pool_queue *q = bpf_map_lookup_elem(&pool_queues, &target);
	if (!q)
		return 0;
	__u64 head = q->head, tail = q->tail;
	if (head >= tail)
		return 0;
	/* Past the queue's room, the oldest were overwritten. */
	__u64 from = tail - head > POOL_QUEUE ? tail - POOL_QUEUE : head;
	if (__sync_val_compare_and_swap(&q->head, head, from + 1) != head)
		return 0;
	*at = from + 1;
	return q->conns[from & (POOL_QUEUE - 1)];
}

/* Gives back the request taken at place at - 1, unless another was
 * taken since. */
static __always_inline void unpop_pool_queue(__u32 target, __u64 at)
{
	struct pool_queue *q = bpf_map_lookup_elem(&pool_queues, &target);
	if (q && at)
		__sync_val_compare_and_swap(&q->head, at, at - 1);
}

/* Puts a request in its target's pool queue. */
static __always_inline void push_pool_queue(__u32 target, struct conn_state *c, __u64 cookie)
{
	struct pool_queue *q = bpf_map_lookup_elem(&pool_queues, &target);
	if (!q)
		return;
	c->pool_queued = 1;
	__u64 at = __sync_fetch_and_add(&q->tail, 1);
	q->conns[at & (POOL_QUEUE - 1)] = cookie;
}

/* The oldest request of the pool queue still unanswered (older ones were
 * answered without the pool), taken, its place plus 1 in *at; 0 when
 * none. */
static __always_inline __u64 pop_unanswered(__u32 target, __u64 *at)
{
	for (int i = 0; i < 8; i++) {
		__u64 conn = pop_pool_queue(target, at);
		if (!conn)
			return 0;
		struct conn_state *c = served_conn(conn);
		if (c && c->phase == PHASE_READING)
			return conn;
	}
	*at = 0;
	return 0;
}

/* A thread that feeds a pool turns from its request to cookie, leaving it
 * unanswered with no thread woken for it: its job, if any, waits in the
 * pool's queue. Looks nothing up for a thread that never fed a pool. */
static __always_inline void queue_left_request(struct thread_state *st, __u64 cookie)
{
	__u64 left = st->serving.conn;
	if (!st->handoff.feeds_pool || !left || left == cookie || st->serving.in_tail || st->serving.handed)
		return;
	if (model_of(st) == RUNTIME_ASYNCIO)
		return; /* queued as read (pool_read) */
	struct conn_state *c = served_conn(left);
	if (!c || c->phase != PHASE_READING || c->pool_queued)
		return;
	push_pool_queue(st->target, c, left);
}

/* An asyncio loop that feeds a pool began request cookie (c its state):
 * its task reaches the pool iterations later (anyio's checkpoints yield to
 * the loop), when the loop thread runs another request's piece, in the
 * order the requests were read. So a hand-off from it is for the oldest
 * request read and not yet handed, estimated. */
static __always_inline void pool_read(struct thread_state *st, struct conn_state *c, __u64 cookie)
{
	if (st->handoff.feeds_pool && model_of(st) == RUNTIME_ASYNCIO)
		push_pool_queue(st->target, c, cookie);
}

/* The pool thread is done with pool work: what it holds is its request's. */
static __always_inline void end_pool_work(struct thread_state *st)
{
	leave(st);
	st->handoff.popped = 0;
	st->handoff.fifo = 0;
	st->serving.conn = 0;
	st->handoff.answer_to = 0;
	st->handoff.answered = 0;
	st->handoff.queued = 0;
	st->handoff.depth = 0;
}

/* At a syscall's exit: the piece of a pool thread that answered back in it
 * goes to its request. What the thread does next without sleeping is held
 * too: the request's, unless it answers back again, when it was a job
 * queued with no thread woken, the oldest of its pool's queue, estimated. */
static __always_inline void answer_back_done(struct thread_state *st)
{
	struct thread_handoff *h = &st->handoff;
	h->answered = 0;
	if (h->fifo) {
		/* Its job is done; what it does next without sleeping is the
		 * next job of the queue. */
		leave(st);
		h->queued = 1;
		__u64 next = pop_unanswered(st->target, &h->popped);
		struct conn_state *c = next ? served_conn(next) : 0;
		if (c) {
			c->rec.flags |= REQ_INTERLEAVED;
			st->serving.conn = next;
		}
		return;
	}
	if (!h->queued) {
		leave(st);
		h->queued = 1;
		return;
	}
	__u64 at;
	__u64 next = pop_pool_queue(st->target, &at);
	struct conn_state *c = next ? served_conn(next) : 0;
	if (!c) {
		c = served_conn(st->serving.conn);
		next = st->serving.conn;
	}
	if (c && c->phase == PHASE_READING)
		c->rec.flags |= REQ_INTERLEAVED;
	st->serving.conn = next;
	flush_to(st, c);
}

/* A piece never answered back (the thread exits, the window ends, or it
 * sleeps again where it was woken from, having found no job) was no
 * request's: what it holds is unattributed. Past its answer back, what
 * it holds is its request's. */
static __always_inline void drop_piece(struct thread_state *st)
{
	if (!st->handoff.answer_to)
		return;
	/* The request it took from the queue for a job it did not do goes
	 * back. */
	unpop_pool_queue(st->target, st->handoff.popped);
	if (st->handoff.queued) {
		end_pool_work(st);
		return;
	}
	if (st->serving.dirty) {
		struct cost *p = &st->serving.pending;
		charge_unattributed(st, p->user_ns, kernel_ns_of(p));
		__builtin_memset(p, 0, sizeof(*p));
		st->serving.dirty = 0;
	}
	end_pool_work(st);
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
	__u32 tid = p->pid;
	if (waker->handoff.answer_to) {
		/* A pool thread holding a piece hands nothing on; waking the
		 * thread that handed it the request answers back. */
		if (tid == waker->handoff.answer_to && !lock_wake(waker))
			answer_back(waker);
		return true;
	}
	if (!waker->serving.conn || waker->serving.in_tail || waker->handoff.depth >= MAX_HANDOFF_DEPTH ||
	    signalling(waker))
		return true;
	__u32 plus1 = target_plus1_of(p);
	if (!plus1 || plus1 - 1 != waker->target)
		return true;
	if (tid == waker_tid)
		return true;
	if (!served_conn(waker->serving.conn))
		return true;
	struct thread_state *st = bpf_task_storage_get(&threads, p, 0, 0);
	if (st && st->serving.served) {
		waker->serving.handed = 1;
		st->handoff.pending_conn = waker->serving.conn;
		st->handoff.pending_depth = waker->handoff.depth + 1;
		st->handoff.pending_answer_to = 0;
		st->handoff.pending = 1;
		return true;
	}
	/* A thread that never served a connection: a pool thread, taking a
	 * piece, unless it holds one or the wake hands over a lock. Only a
	 * thread serving a connection of its own hands pieces out. */
	if (waker->handoff.depth || waker->go.kind == GO_YES)
		return true;
	if (!st)
		st = thread_of(p, plus1 - 1, 0);
	if (!st || (st->handoff.answer_to && !st->handoff.queued) || st->go.kind == GO_YES || lock_wake(waker))
		return true;
	__u64 conn = waker->serving.conn;
	if (model_of(waker) == RUNTIME_ASYNCIO) {
		__u64 at;
		__u64 oldest = pop_unanswered(waker->target, &at);
		struct conn_state *c = oldest ? served_conn(oldest) : 0;
		if (c) {
			c->rec.flags |= REQ_INTERLEAVED;
			conn = oldest;
		}
	}
	else {
		/* Into the queue, which the pool runs in order. */
		struct conn_state *c = served_conn(conn);
		if (c && !c->pool_queued)
			push_pool_queue(waker->target, c, conn);
	}
	st->handoff.pending_fifo = model_of(waker) != RUNTIME_ASYNCIO;
	waker->handoff.feeds_pool = 1;
	waker->serving.handed = 1;
	st->handoff.pending_conn = conn;
	st->handoff.pending_depth = 1;
	st->handoff.pending_answer_to = waker_tid;
	st->handoff.pending = 1;
	return true;
}

/* Back on a CPU, the thread takes up a request it was handed. */
static __always_inline void take_handoff(struct thread_state *st)
{
	struct thread_handoff *h = &st->handoff;
	if (!h->pending)
		return;
	h->pending = 0;
	if (h->answer_to) {
		if (!h->queued)
			return; /* it holds a piece */
		end_pool_work(st);
	}
	h->fifo = h->pending_answer_to ? h->pending_fifo : 0;
	h->popped = 0;
	if (h->fifo) {
		/* The job it begins is the oldest queued. */
		__u64 oldest = pop_unanswered(st->target, &h->popped);
		struct conn_state *c = oldest ? served_conn(oldest) : 0;
		if (c) {
			if (oldest != h->pending_conn)
				c->rec.flags |= REQ_INTERLEAVED;
			h->pending_conn = oldest;
		}
	}
	if (st->serving.conn != h->pending_conn) {
		/* Woken for another request: the sleep it is woken from was no
		 * part of the request it is handed now. */
		turn_to(st, h->pending_conn, 0);
		st->waits.offcpu_pending_ns = 0;
	}
	h->depth = h->pending_depth;
	h->answer_to = h->pending_answer_to;
	h->job_word = h->answer_to ? h->slept[0] : 0;
}

/* A thread leaves its CPU voluntarily: the futex word it sleeps on, if
 * any, so that its own wake on that word is known for a lock's. A pool
 * thread that sleeps again on the word it took its piece from, without
 * answering back, found no job: the piece is dropped. */
static __always_inline void note_wait_word(struct task_struct *task, struct thread_state *st)
{
	__u64 word = futex_word_of(task, st);
	if (!word)
		return;
	if (word != st->handoff.slept[0]) {
		st->handoff.slept[1] = st->handoff.slept[0];
		st->handoff.slept[0] = word;
	}
	if (st->handoff.answer_to && st->handoff.job_word && same_futex(word, st->handoff.job_word))
		drop_piece(st);
}

#endif /* REQPROF_HANDOFF_H */
