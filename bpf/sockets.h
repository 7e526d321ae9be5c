/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What a target thread's operations on a connection do, for the programs
 * on the socket tracepoints (and, for stdio channels, on the syscall
 * exit) to call: a read starts a request or goes on with it and captures
 * its bytes, a write answers it; on a client's connection (REQ_CLIENT) a
 * write makes a call and a read answers it; a close ends the connection;
 * an accept starts its setup. In lite mode, with no syscall boundaries,
 * each operation is also the boundary the thread's time is cut at.
 */
#ifndef REQPROF_SOCKETS_H
#define REQPROF_SOCKETS_H

#include "backends.h"
#include "goroutines.h"
#include "selfcost.h"

/* A socket operation of a target thread on a served connection. */
struct sock_op {
	struct thread_state *st;
	struct conn_state *c;
	__u64 cookie;
	__u32 tid;
	__u32 pad;
};

/* Lite mode has no syscall boundaries: a socket operation is one. The
 * thread's time up to it goes where its charges went until now (the
 * previous request's tail, when this read starts a request); a Go thread
 * then takes up the goroutine it runs. A read's buffer is read from the
 * registers the syscall was made with, to capture the request's bytes. */
static __always_inline void lite_boundary(struct thread_state *st, int just_read)
{
	cut(st, bpf_ktime_get_ns(), false);
	follow_goroutine(st, current_goid(st));
	if (just_read && cfg.capture_bytes) {
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
		read_buffer(&st->serving, regs, BPF_CORE_READ(regs, orig_ax));
	}
}

/* Fills op for ret bytes moved on sk by the current thread, creating the
 * connection's state in phase, with flags, on its first sight; false when
 * nothing moved, or no target thread moved them. */
static __always_inline bool sock_op_of(struct sock_op *op, struct sock *sk, int ret, __u32 phase, __u32 flags,
				       int just_read)
{
	if (ret <= 0)
		return false;
	op->st = current_thread(this_cpu(), &op->tid);
	if (!op->st)
		return false;
	if (cfg.lite)
		lite_boundary(op->st, just_read);
	op->cookie = bpf_get_socket_cookie(sk);
	op->c = conn_of(sk, op->cookie, op->st->target, op->tid, phase, flags, just_read);
	if (op->c && op->c->role == ROLE_SERVER)
		return true;
	/* Counted here, where the thread goes on with what it serves (or,
	 * on an outbound connection, before its answer resumes a request);
	 * a served one's, once the thread turned to its request. */
	count_sock_op(op->st);
	return false;
}

/* The thread turns to op's request: what it served before ends, unless it
 * goes on with the same request. */
static __always_inline void turn_to_request(struct sock_op *op, bool same_request)
{
	struct thread_state *st = op->st;
	if (st->serving.conn != op->cookie || st->serving.in_tail || !same_request)
		leave_with(st, st->serving.conn == op->cookie ? op->c : 0);
	st->serving.conn = op->cookie;
	st->serving.served = 1;
	st->serving.handed = 0;
	st->handoff.depth = 0;
	count_sock_op(st);
}

/* The thread turns to op's request, which starts unless the thread goes
 * on with it (going_on): one begun while the thread's earlier request is
 * unanswered, in a runtime not modelled, is flagged interleaved. */
static __always_inline void start_or_go_on(struct sock_op *op, bool going_on)
{
	struct conn_state *c = op->c;
	bool interleaved = !going_on && interleaves(op->st, op->cookie);
	turn_to_request(op, going_on);
	if (!going_on) {
		begin_request(c, op->cookie, op->tid);
		if (interleaved)
			c->rec.flags |= REQ_INTERLEAVED;
	}
}

/* ret bytes of op's request, at offset off of its connection's stream,
 * in the buffer its syscall named (read_buffer, call_buffer): captured to
 * name it, HTTP/2 told by a request's first bytes (unless it goes on),
 * and what is past the capture sent on in chunks. */
static __always_inline void take_bytes(struct sock_op *op, __u64 off, int ret, bool going_on)
{
	struct conn_state *c = op->c;
	struct thread_serving *sv = &op->st->serving;
	/* The bytes in the buffer the syscall named; more (readv's next
	 * buffers) are a gap to the collector. */
	__u32 got = sv->read_len < (__u64)ret ? sv->read_len : ret;
	__u32 captured = 0;
	/* The payload holds the request's first bytes, without a hole. */
	if (off == c->rec.stream_off + c->rec.payload_len)
		captured = capture(&c->rec, sv->read_buf, got);
	if (!going_on && starts_http2(&c->rec))
		c->follow_all = 1;
	if (cfg.chunk_bytes)
		send_chunks(c, op->cookie, sv->read_buf, off, captured, got);
	note_goroutine(op->st, op->cookie);
}

/* ret bytes of a request read on c by thread st: a request starts, or
 * goes on, and its bytes are captured. A global function, verified once:
 * reached from both a socket tracepoint and the syscall exit (stdio), with
 * its capture and chunks it took both programs near the verifier's million
 * instructions. */
__attribute__((noinline)) int received(struct thread_state *st, struct conn_state *c, __u64 cookie, __u32 tid, int ret)
{
	if (!st || !c)
		return 0;
	struct sock_op the_op = {.st = st, .c = c, .cookie = cookie, .tid = tid};
	struct sock_op *op = &the_op;
	/* Reading more of the request it reads costs nothing here; anything
	 * else ends what it served before. */
	bool reading = c->phase == PHASE_READING;
	start_or_go_on(op, reading);
	if (model_of(op->st) == RUNTIME_ASYNCIO)
		loop_woke(&op->st->loop, op->cookie, 0);
	__u64 off = __sync_fetch_and_add(&c->in_off, ret);
	__sync_fetch_and_add(&c->rec.bytes_in, ret);
	take_bytes(op, off, ret, reading);
	return 0;
}

/* ret bytes of a client's call written by op's thread on its connection
 * (REQ_CLIENT): as received() for a server's request, the other way
 * round. The first write after an answer starts a call, which ends the
 * one answered; its bytes, from the write's buffer, name it. */
static __always_inline void call_written(struct sock_op *op, int ret)
{
	struct conn_state *c = op->c;
	bool writing = c->phase == PHASE_READING;
	/* On an asyncio loop the write claims the CPU since the loop's last
	 * read, write or poll, as a server's response does: the task that
	 * builds the call ran there. */
	if (model_of(op->st) == RUNTIME_ASYNCIO) {
		loop_claim(op->st, op->cookie, c);
		loop_ran(&op->st->loop, op->cookie);
	}
	start_or_go_on(op, writing);
	__u64 off = __sync_fetch_and_add(&c->in_off, ret);
	__sync_fetch_and_add(&c->rec.bytes_out, ret);
	struct thread_serving *sv = &op->st->serving;
	sv->read_buf = 0;
	sv->read_len = 0;
	if (cfg.capture_bytes)
		call_buffer(sv);
	take_bytes(op, off, ret, writing);
}

/* The thread goes on with op's request, whose response (a client's call's
 * answer) is under way: its first and last bytes are timed. */
static __always_inline void responds(struct sock_op *op)
{
	struct conn_state *c = op->c;
	turn_to_request(op, true);
	__u64 now = bpf_ktime_get_ns();
	c->phase = PHASE_RESPONDING;
	if (!c->rec.first_write_ns)
		c->rec.first_write_ns = now;
	c->rec.end_ns = now;
}

/* ret bytes of the answer to a client's call read by op's thread: as
 * sent() for a server's response. The thread goes on with the call it
 * answers, at once or, on an asyncio loop, in its next iteration. */
static __always_inline void answer_read(struct sock_op *op, int ret)
{
	struct conn_state *c = op->c;
	responds(op);
	__sync_fetch_and_add(&c->rec.bytes_in, ret);
	op->st->serving.wrote = 1;
	if (model_of(op->st) == RUNTIME_ASYNCIO)
		loop_woke(&op->st->loop, op->cookie, 1);
	note_goroutine(op->st, op->cookie);
}

/* ret bytes of a response written by op's thread. */
static __always_inline void sent(struct sock_op *op, int ret)
{
	struct conn_state *c = op->c;
	if (model_of(op->st) == RUNTIME_ASYNCIO) {
		loop_claim(op->st, op->cookie, c);
		loop_ran(&op->st->loop, op->cookie);
	}
	responds(op);
	__sync_fetch_and_add(&c->rec.bytes_out, ret);
	op->st->serving.wrote = 1;
	note_goroutine(op->st, op->cookie);
	if (cfg.lite) {
		/* No syscall exit to wait for: the tail starts here. */
		flush(op->st);
		op->st->serving.wrote = 0;
		op->st->serving.in_tail = 1;
	}
}

/* A served connection closes: what the thread closing it was charged is
 * part of its last request, which ends, now or, when it is the thread
 * serving it, once that thread turns elsewhere; its state goes then. */
static __always_inline void close_served(struct conn_state *c, __u64 cookie)
{
	if (c->closing)
		return; /* its closer is still at it */
	__u32 tid;
	struct thread_state *st = current_thread(this_cpu(), &tid);
	if (st && st->serving.conn == cookie) {
		/* Closed by the thread serving it: the close, and what the
		 * thread does after it until it turns to other work or exits
		 * (a thread per connection ends), are the connection's
		 * teardown, part of its last request, which waits for them. */
		flush_to(st, c);
		if (st->serving.in_tail)
			settle_tail(c);
		c->closing = 1;
		st->serving.in_tail = 1;
		return;
	}
	finish_conn(c, cookie);
}

/* A Unix socket has no state changes to trace (TCP's close is
 * inet_sock_set_state): a served one ends when its server reads the end of
 * it, or closes its descriptor; an outbound one's state goes then. */
static __always_inline void close_unix(struct sock *sk, __u64 cookie)
{
	if (!cookie || BPF_CORE_READ(sk, __sk_common.skc_family) != AF_UNIX)
		return;
	struct conn_state *c = bpf_map_lookup_elem(&conns, &cookie);
	if (!c)
		return;
	if (c->role == ROLE_SERVER)
		close_served(c, cookie);
	else
		bpf_map_delete_elem(&conns, &cookie);
}

/* close(fd) by a target thread: the socket behind fd, if a Unix one it
 * serves. The cookie is the one the socket tracepoints asked for, kept in
 * the socket once made. */
static __always_inline void closing_fd(long fd)
{
	struct sock *sk = sock_of_fd(fd);
	if (sk)
		close_unix(sk, BPF_CORE_READ(sk, __sk_common.skc_cookie.counter));
}

/* accept returned fd to a target thread: if it is a connection the
 * targets serve, the thread serves its setup from here. */
static __always_inline void accepted_fd(struct thread_state *st, long fd)
{
	struct sock *sk = sock_of_fd(fd);
	__u16 port;
	if (sk && served_socket(sk, &port))
		serve_setup(st, sk);
}

#endif /* REQPROF_SOCKETS_H */
