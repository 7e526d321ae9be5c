// SPDX-License-Identifier: GPL-2.0
/*
 * reqprof: charge every nanosecond a target thread spends on a CPU to the
 * request it is serving, in the kernel, and emit one ring-buffer record per
 * finished request.
 *
 * Built on tp_btf tracepoints (no kprobes, no fentry): they exist on every
 * BTF kernel since 5.5, work where kprobes are locked down, and carry typed
 * arguments; with --stacks, a perf_event program on each CPU's software
 * cpu-clock; and in a target that runs libuv, uprobes on its pool's jobs.
 *
 * This file holds the programs only, each a few lines calling into the
 * pieces, one header a concern:
 *   types.h       limits, enums, records, states, maps, variables (what Go mirrors)
 *   cost.h        arithmetic on a cost
 *   conns.h       connections, requests, their tails, emitted records, captured bytes
 *   threads.h     target threads: cutting their CPU time and charging it
 *   goroutines.h  Go's goroutines, followed across threads
 *   handoff.h     requests handed to the threads a server wakes
 *   pools.h       jobs a runtime runs on its own pool threads (libuv), by uprobes
 *   backends.h    outbound calls: their answers resume the request that called
 *   sched.h       switches off and onto a CPU, wake-ups, waiting
 *   calibrate.h   the syscall entry cost, measured on a thread of the collector
 *   selfcost.h    the programs' own runs in a target's context, counted and timed
 *   interrupts.h  softirq and hard-IRQ time carved out of what it interrupted
 *   stacks.h      stack samples of target threads, with the request each ran for
 *
 * Request model (protocol-agnostic, per TCP connection of a listening port):
 * a request starts with the first read of data after the previous response
 * (or after accept), and its response is every write after that until the
 * next request starts or the connection closes. A thread serves the request
 * of the connection it last read or wrote, or was handed by its waker. A
 * request's CPU runs from the entry of the read that starts it until its
 * thread turns to other work: the server's loop after a response (its
 * tail) is part of it, and is also counted on its own.
 *
 * At the window's end the collector runs the settle_* iterators, so that
 * what threads and tails still hold reaches its request by the same rules
 * as during the window, written once, here.
 */
#include "sched.h"
#include "backends.h"
#include "calibrate.h"
#include "interrupts.h"
#include "pools.h"
#include "stacks.h"
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	if (!enabled)
		return 0;
	__u64 t0 = self_timer();
	__u64 now = bpf_ktime_get_ns();
	bool out = switch_out(prev, preempt, prev_state, now);
	if (switch_in(next, now) || out)
		self_timed(SELF_SWITCH, t0);
	return 0;
}

/* The waker runs this, in its own context: a target thread serving a
 * request hands it to the thread it wakes. */
SEC("tp_btf/sched_waking")
int BPF_PROG(on_sched_waking, struct task_struct *p)
{
	__u64 t0 = self_timer();
	if (hand_off(p))
		self_timed(SELF_WAKE, t0);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(on_sched_wakeup, struct task_struct *p)
{
	woken(p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_sched_wakeup_new, struct task_struct *p)
{
	woken(p);
	return 0;
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

/* A new thread or process: it joins its parent's target when children
 * are followed, and a thread or process made by a thread serving a
 * connection's setup (a thread or a fork per connection) serves it too. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_sched_process_fork, struct task_struct *parent, struct task_struct *child)
{
	if (!enabled)
		return 0;
	if (cfg.follow_children)
		follow_child(parent, child);
	inherit_setup(parent, child);
	return 0;
}

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
	bool interleaved = !reading && interleaves(op->st, op->cookie);
	turn_to_request(op, reading);
	if (!reading) {
		begin_request(c, op->cookie, op->tid);
		if (interleaved)
			c->rec.flags |= REQ_INTERLEAVED;
	}
	if (model_of(op->st) == RUNTIME_ASYNCIO)
		loop_woke(&op->st->loop, op->cookie, 0);
	__u64 off = __sync_fetch_and_add(&c->in_off, ret);
	__sync_fetch_and_add(&c->rec.bytes_in, ret);
	struct thread_serving *sv = &op->st->serving;
	/* The bytes in the buffer the syscall named; more (readv's next
	 * buffers) are a gap to the collector. */
	__u32 got = sv->read_len < (__u64)ret ? sv->read_len : ret;
	__u32 captured = 0;
	/* The payload holds the request's first bytes, without a hole. */
	if (off == c->rec.stream_off + c->rec.payload_len)
		captured = capture(&c->rec, sv->read_buf, got);
	if (!reading && starts_http2(&c->rec))
		c->follow_all = 1;
	if (cfg.chunk_bytes)
		send_chunks(c, op->cookie, sv->read_buf, off, captured, got);
	note_goroutine(op->st, op->cookie);
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
	bool interleaved = !writing && interleaves(op->st, op->cookie);
	turn_to_request(op, writing);
	if (!writing) {
		begin_request(c, op->cookie, op->tid);
		if (interleaved)
			c->rec.flags |= REQ_INTERLEAVED;
	}
	__u64 off = __sync_fetch_and_add(&c->in_off, ret);
	__sync_fetch_and_add(&c->rec.bytes_out, ret);
	struct thread_serving *sv = &op->st->serving;
	sv->read_buf = 0;
	sv->read_len = 0;
	if (cfg.capture_bytes)
		call_buffer(sv);
	__u32 got = sv->read_len < (__u64)ret ? sv->read_len : ret;
	__u32 captured = 0;
	if (off == c->rec.stream_off + c->rec.payload_len)
		captured = capture(&c->rec, sv->read_buf, got);
	if (!writing && starts_http2(&c->rec))
		c->follow_all = 1;
	if (cfg.chunk_bytes)
		send_chunks(c, op->cookie, sv->read_buf, off, captured, got);
	note_goroutine(op->st, op->cookie);
}

/* ret bytes of the answer to a client's call read by op's thread: as
 * sent() for a server's response. The thread goes on with the call it
 * answers, at once or, on an asyncio loop, in its next iteration. */
static __always_inline void answer_read(struct sock_op *op, int ret)
{
	struct conn_state *c = op->c;
	turn_to_request(op, true);
	__u64 now = bpf_ktime_get_ns();
	c->phase = PHASE_RESPONDING;
	if (!c->rec.first_write_ns)
		c->rec.first_write_ns = now;
	c->rec.end_ns = now;
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
	turn_to_request(op, true);
	__u64 now = bpf_ktime_get_ns();
	c->phase = PHASE_RESPONDING;
	if (!c->rec.first_write_ns)
		c->rec.first_write_ns = now;
	c->rec.end_ns = now;
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

/* Thread st, serving stdio channel c's burst, reads more of it: what it
 * was charged up to the read reaches the record, which is sent as it
 * stands, the read not charged yet (RECORD_READ_MARK). */
static __always_inline void send_read_mark(struct thread_state *st, struct conn_state *c, __u64 cookie)
{
	flush_to(st, c);
	struct request_record *r = snapshot(c, cookie, RECORD_READ_MARK, c->in_off);
	if (r)
		bpf_ringbuf_submit(r, RECORD_FLAGS);
}

/* A write on a stdio channel, whose record is sent once the writer's
 * charges reached its request. */
struct stdio_write {
	struct conn_state *c;
	__u64 cookie;
	__u64 buf; /* the bytes written, or their first iovec's */
	__u64 off; /* in the channel's output */
	__u32 len;
	__u32 buf_len; /* of them in buf */
};

/* A read or write of a target thread on a descriptor its process serves
 * requests on without a socket (stdin and stdout, MCP's stdio transport),
 * done at the syscall's exit, before its time is charged, as the socket
 * tracepoints do inside it. A channel starts with a read: writes to stdout
 * before any request was read (a log) are none of its responses. A write
 * fills w. */
static __always_inline void stdio_done(struct thread_state *st, __u32 tid, struct pt_regs *regs, long ret,
				       struct stdio_write *w)
{
	if (ret <= 0)
		return;
	/* From the registers the syscall was made with, still there at its
	 * exit: a read begun before the window is seen whole. */
	long nr = regs->orig_ax;
	bool reading = nr == NR_READ || nr == NR_READV;
	if (!reading && nr != NR_WRITE && nr != NR_WRITEV)
		return;
	struct stdio_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .fd = regs->di};
	__u64 *cookie = bpf_map_lookup_elem(&stdio_fds, &key);
	if (!cookie)
		return;
	struct sock_op op = {.st = st, .tid = tid, .cookie = *cookie};
	op.c = bpf_map_lookup_elem(&conns, cookie);
	bool client = *cookie & STDIO_CLIENT;
	if (!op.c) {
		if (!reading && !client)
			return;
		op.c = client ? client_pipe_of(*cookie, st->target, tid, reading) : stdio_conn_of(*cookie, st->target, tid);
		if (!op.c)
			return;
	}
	if (client) {
		/* The client's end of a server it spawned: it writes calls to
		 * the server's stdin and reads their answers from its stdout. */
		if (reading)
			answer_read(&op, ret);
		else
			call_written(&op, ret);
		return;
	}
	if (reading) {
		if (cfg.capture_bytes)
			read_buffer(&st->serving, regs, nr);
		/* More of a burst the thread reads: where the calls read so far
		 * stop, for the collector. */
		if (op.c->phase == PHASE_READING && st->serving.conn == op.cookie && !st->serving.in_tail &&
		    op.c->rec.bytes_in && cfg.capture_bytes)
			send_read_mark(st, op.c, op.cookie);
		received(op.st, op.c, op.cookie, op.tid, ret);
		return;
	}
	sent(&op, ret);
	w->c = op.c;
	w->cookie = op.cookie;
	w->len = ret;
	w->buf_len = ret;
	w->off = __sync_fetch_and_add(&op.c->out_off, ret);
	__u64 arg2 = regs->si;
	if (nr == NR_WRITE) {
		w->buf = arg2;
	} else {
		__u64 first[2] = {}; /* struct iovec: base, len */
		if (arg2 && !bpf_probe_read_user(first, sizeof(first), (void *)arg2)) {
			w->buf = first[0];
			if (first[1] < w->buf_len)
				w->buf_len = first[1]; /* what follows is in the next buffers */
		}
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

SEC("tp_btf/sys_enter")
int BPF_PROG(on_sys_enter, struct pt_regs *regs, long id)
{
	__u64 t0 = self_timer();
	__u32 tid;
	struct thread_state *st = current_thread(this_cpu(), &tid);
	if (!st)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	calibration_enter(st, tid, now);
	/* After the clock: finding the goroutine is this syscall's cost. */
	follow_goroutine(st, current_goid(st));
	struct thread_clock *k = &st->clock;
	if (k->mode == MODE_UNKNOWN) {
		/* Whatever was held back was user time: we are entering now. */
		cut(st, now, false);
		charge(st, k->held_ns, -1);
		k->held_ns = 0;
	} else {
		/* Leaves held_ns at the entry cost taken from the user piece. */
		k->held_ns = 0;
		cut(st, now, true);
	}
	k->mode = MODE_SYSCALL;
	k->syscall_nr = id;
	loop_poll(st, id);
	if (id == NR_CLOSE && watch_unix)
		closing_fd(regs->di);

	if (cfg.capture_bytes)
		read_buffer(&st->serving, regs, id);
	self_timed(SELF_SYS_ENTER, t0);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
	__u64 t0 = self_timer();
	__u32 tid;
	struct thread_state *st = current_thread(this_cpu(), &tid);
	if (!st)
		return 0;
	st->self.syscalls++;
	struct thread_clock *k = &st->clock;
	cut(st, bpf_ktime_get_ns(), false);
	calibration_exit(st, tid);
	struct stdio_write w = {};
	if (stdio_channels)
		stdio_done(st, tid, regs, ret, &w);
	/* Before the accept is charged: it is the new connection's. */
	if (ret >= 0 && k->mode == MODE_SYSCALL && (k->syscall_nr == NR_ACCEPT || k->syscall_nr == NR_ACCEPT4))
		accepted_fd(st, ret);
	/* The syscall's whole CPU goes to the request it served, known now.
	 * Entered before the window: its number is unknown. */
	charge(st, k->held_ns, k->mode == MODE_SYSCALL ? k->syscall_nr : SYSCALL_UNKNOWN);
	k->held_ns = 0;
	k->mode = MODE_USER;
	if (st->handoff.py_ending)
		py_job_done(st);
	if (st->serving.wrote) {
		/* What it did up to here was the response; from here on, its tail. */
		flush(st);
		st->serving.wrote = 0;
		st->serving.in_tail = 1;
	}
	if (w.c)
		send_response(w.c, w.cookie, w.buf, w.buf_len, w.off, w.len);
	if (st->loop.flush_at_exit) {
		st->loop.flush_at_exit = 0;
		flush(st);
	}
	self_timed(SELF_SYS_EXIT, t0);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(on_sock_recv_length, struct sock *sk, int ret, int flags)
{
	__u64 t0 = self_timer();
	if (ret == 0 && enabled) {
		/* The peer closed it: a Unix socket's end (TCP's is traced). */
		__u32 tid;
		if (BPF_CORE_READ(sk, __sk_common.skc_family) == AF_UNIX && current_thread(this_cpu(), &tid))
			close_unix(sk, bpf_get_socket_cookie(sk));
		return 0;
	}
	struct sock_op op = {};
	if (sock_op_of(&op, sk, ret, PHASE_IDLE, 0, ret)) {
		if (op.c->conn_flags & REQ_CLIENT)
			answer_read(&op, ret);
		else
			received(op.st, op.c, op.cookie, op.tid, ret);
	} else if (op.c && op.c->role == ROLE_OUTBOUND)
		backend_read(op.st, op.c, ret);
	if (op.st)
		self_timed(SELF_SOCK, t0);
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(on_sock_send_length, struct sock *sk, int ret, int flags)
{
	/* A write on a connection never read from in the window answers a
	 * request that started before it. */
	__u64 t0 = self_timer();
	struct sock_op op = {};
	if (sock_op_of(&op, sk, ret, PHASE_RESPONDING, REQ_START_UNSEEN, 0)) {
		if (op.c->conn_flags & REQ_CLIENT) {
			call_written(&op, ret);
		} else {
			bool first = op.c->phase != PHASE_RESPONDING;
			sent(&op, ret);
			py_claim(op.st, op.c, op.cookie, first);
		}
	} else if (op.st) {
		if (op.c && op.c->role == ROLE_OUTBOUND)
			backend_written(op.st, op.c, ret);
		py_job_sends(op.st, sk);
	}
	if (op.st)
		self_timed(SELF_SOCK, t0);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_inet_sock_set_state, struct sock *sk, int oldstate, int newstate)
{
	if (!enabled)
		return 0;
	/* Only the server's own close ends its last request: the peer's FIN
	 * (CLOSE_WAIT) may come while a response is still being written. */
	bool closing = (oldstate == TCP_ESTABLISHED && newstate == TCP_FIN_WAIT1) ||
		       (oldstate == TCP_CLOSE_WAIT && newstate == TCP_LAST_ACK) || newstate == TCP_CLOSE;
	if (!closing)
		return 0;
	/* Out of the kernel's table already: the barrier orders that before
	 * the lookup, against a state conn_of makes meanwhile (tcp_closed). */
	if (newstate == TCP_CLOSE)
		full_barrier();
	__u64 cookie = bpf_get_socket_cookie(sk);
	struct conn_state *c = bpf_map_lookup_elem(&conns, &cookie);
	if (!c) {
		if (watch_setups)
			drop_setup(sk);
		return 0;
	}
	if (c->role == ROLE_SERVER)
		close_served(c, cookie);
	else
		bpf_map_delete_elem(&conns, &cookie);
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(on_softirq_entry, unsigned int vec)
{
	__u64 t0 = self_timer();
	if (softirq_enter(vec))
		self_timed(SELF_INTERRUPT, t0);
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(on_softirq_exit, unsigned int vec)
{
	__u64 t0 = self_timer();
	if (softirq_exit())
		self_timed(SELF_INTERRUPT, t0);
	return 0;
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(on_irq_handler_entry, int irq, void *action)
{
	__u64 t0 = self_timer();
	if (irq_enter())
		self_timed(SELF_INTERRUPT, t0);
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(on_irq_handler_exit, int irq, void *action, int ret)
{
	__u64 t0 = self_timer();
	if (irq_exit())
		self_timed(SELF_INTERRUPT, t0);
	return 0;
}

/* The local APIC timer (x86) is no irq_handler: it has its own tracepoints,
 * attached where the kernel has them. */
SEC("tp_btf/local_timer_entry")
int BPF_PROG(on_local_timer_entry, int vector)
{
	__u64 t0 = self_timer();
	if (irq_enter())
		self_timed(SELF_INTERRUPT, t0);
	return 0;
}

SEC("tp_btf/local_timer_exit")
int BPF_PROG(on_local_timer_exit, int vector)
{
	__u64 t0 = self_timer();
	if (irq_exit())
		self_timed(SELF_INTERRUPT, t0);
	return 0;
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(on_page_fault_user, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	__u64 t0 = self_timer();
	__u32 tid;
	struct thread_state *st = current_thread(this_cpu(), &tid);
	if (!st)
		return 0;
	st->self.faults++;
	struct cost *to = pending_of(st);
	if (to)
		to->page_faults++;
	self_timed(SELF_FAULT, t0);
	return 0;
}

/* libuv queues a job on its pool: uv_queue_work(loop, req, work, done),
 * the job being req's struct uv__work. A probe's run is reqprof's own
 * cost: its trap, calibrated when the probes are attached, and its
 * program, timed as the others are (selfcost.h). */
SEC("uprobe/uv_queue_work")
int on_uv_queue_work(struct pt_regs *ctx)
{
	if (!enabled)
		return 0;
	__u64 t0 = self_timer();
	if (pool_job_queued(ctx->si + UV_WORK_REQ))
		self_timed(SELF_POOL, t0);
	return 0;
}

/* ... or, for its own requests (fs, dns), uv__work_submit(loop, w, kind,
 * work, done), where the binary has the symbol. */
SEC("uprobe/uv__work_submit")
int on_uv_work_submit(struct pt_regs *ctx)
{
	if (!enabled)
		return 0;
	__u64 t0 = self_timer();
	if (pool_job_queued(ctx->si))
		self_timed(SELF_POOL, t0);
	return 0;
}

/* uv_async_send(handle): a pool thread hands a job back to its loop. */
SEC("uprobe/uv_async_send")
int on_uv_async_send(struct pt_regs *ctx)
{
	if (!enabled)
		return 0;
	__u64 t0 = self_timer();
	if (pool_job_done(ctx->di))
		self_timed(SELF_POOL, t0);
	return 0;
}

/* A CPU's sampling clock ticked (a software cpu-clock perf event, opened
 * on each CPU only with --stacks): the stacks of the target thread it
 * caught, if any, with the request it ran for. */
SEC("perf_event")
int sample_stack(struct perf_sample_ctx *ctx)
{
	sample_stacks(ctx);
	return 0;
}

/* The window's end, first step (the programs above detached): each thread
 * adds what it holds to its destination, as when it leaves its CPU, and
 * its state is written out for the collector, as its ids (8 bytes: the
 * tid in the low half, its process's tgid in the high half, so that the
 * collector can name the thread from /proc/TGID/task/TID) and struct
 * thread_state (a task storage map has no keys to iterate over). */
SEC("iter/task")
int settle_threads(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task)
		return 0;
	struct thread_state *st = bpf_task_storage_get(&threads, task, 0, 0);
	if (!st)
		return 0;
	/* A pool thread's job not done: no request's. */
	if (!st->serving.conn && st->handoff.pool_worker)
		flush_to(st, 0);
	flush(st);
	__u64 ids = (__u64)(__u32)task->tgid << 32 | (__u32)task->pid;
	bpf_seq_write(ctx->meta->seq, &ids, sizeof(ids));
	bpf_seq_write(ctx->meta->seq, st, sizeof(*st));
	return 0;
}

/* The window's end, second step, over the conns map: what each open
 * connection's tail holds goes to the request it follows, as when a
 * thread leaves the tail. */
static long settle_conn(void *map, __u64 *cookie, struct conn_state *c, void *unused)
{
	if (c->role != ROLE_SERVER)
		return 0;
	if (c->closing)
		settle_close(c);
	else
		settle_tail(c);
	if (c->phase != PHASE_IDLE)
		take_setup(c);
	return 0;
}

/* Run as a task iterator, once, at its end (the call with no task): a map
 * element iterator is what the step is, but some kernels refuse to load
 * one (EPERM) where they load task iterators. */
SEC("iter/task")
int settle_conns(struct bpf_iter__task *ctx)
{
	if (ctx->task)
		return 0;
	bpf_for_each_map_elem(&conns, settle_conn, 0, 0);
	return 0;
}
