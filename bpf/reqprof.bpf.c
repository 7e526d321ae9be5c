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
 *   types.h       limits, enums, the records and states Go mirrors (no maps)
 *   targets.h     the configuration, the targets, their counters, each CPU's state
 *   cost.h        arithmetic on a cost
 *   conns.h       connections, requests, their tails, emitted records, captured bytes
 *   threads.h     target threads: cutting their CPU time and charging it
 *   goroutines.h  Go's goroutines, followed across threads
 *   backends.h    outbound calls: their answers resume the request that called
 *   sockets.h     what a read, write, close or accept on a connection does
 *   stdio.h       requests and calls on stdin and stdout (pipes)
 *   runtimes.h    the hooks into the runtimes' pool models:
 *     pyjobs.h    CPython's pool jobs, read from the interpreter
 *     pools.h     libuv's pool jobs, by uprobes
 *   handoff.h     requests handed to the threads a server wakes
 *   sched.h       switches off and onto a CPU, wake-ups, waiting, forks
 *   calibrate.h   the syscall entry cost, measured on a thread of the collector
 *   selfcost.h    the programs' own runs in a target's context, counted and timed
 *   interrupts.h  softirq and hard-IRQ time carved out of what it interrupted
 *   stacks.h      stack samples of target threads, with the request each ran for
 * Each map and variable lives in the header that owns it.
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
#include "stdio.h"
#include "calibrate.h"
#include "interrupts.h"
#include "runtimes.h"
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
	runtime_syscall_done(st);
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
			runtime_response(op.st, op.c, op.cookie, first);
		}
	} else if (op.st) {
		if (op.c && op.c->role == ROLE_OUTBOUND)
			backend_written(op.st, op.c, ret);
		runtime_sends(op.st, sk);
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
