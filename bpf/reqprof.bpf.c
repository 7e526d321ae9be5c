// SPDX-License-Identifier: GPL-2.0
/*
 * reqprof: charge every nanosecond a target thread spends on a CPU to the
 * request it is serving, in the kernel, and emit one ring-buffer record per
 * finished request.
 *
 * Built on tp_btf tracepoints only (no kprobes, no fentry): they exist on
 * every BTF kernel since 5.5, work where kprobes are locked down, and carry
 * typed arguments.
 *
 * Request model (protocol-agnostic, per TCP connection of a listening port):
 * a request starts with the first read of data after the previous response
 * (or after accept), and its response is every write after that until the
 * next request starts or the connection closes. A thread serves the request
 * of the connection it last read or wrote.
 *
 * CPU accounting: each target thread's on-CPU time is cut at sched_switch and
 * at syscall entry and exit. Time outside syscalls is user time and goes to
 * the thread's request as it goes. Time inside a syscall is held back until
 * sys_exit and then charged to the request the syscall served, so the read
 * that starts a request pays into that request and not the previous one.
 * After a write, the thread's time is held as a "tail": if its next socket
 * operation writes more of the same response, the tail was part of that
 * request; otherwise (it reads, or turns to another connection) the tail was
 * the server's loop between requests (epoll_wait, accept, bookkeeping) and is
 * reported as unattributed, between requests. So a request's CPU runs from
 * the entry of the read that starts it to the exit of its last write.
 */
#include "kernel_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#define MAX_TARGETS 64
#define MAX_THREADS 32768
#define MAX_CONNS 65536

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6

#define TCP_ESTABLISHED 1
#define TCP_FIN_WAIT1 4
#define TCP_CLOSE 7
#define TCP_CLOSE_WAIT 8
#define TCP_LAST_ACK 9

#define TASK_DEAD 0x80

/* What the current syscall-boundary state of a thread is. */
enum thread_mode {
	/* First seen mid-flight (at attach): not yet known whether it is in a
	 * syscall; its time is held back until the next syscall boundary tells. */
	MODE_UNKNOWN = 0,
	MODE_USER = 1,
	MODE_SYSCALL = 2,
};

enum conn_phase {
	PHASE_IDLE = 0,       /* accepted, or request finished: waiting for data */
	PHASE_READING = 1,    /* request bytes arriving, no response yet */
	PHASE_RESPONDING = 2, /* response being written */
};

enum conn_role {
	ROLE_SERVER = 1, /* local port is one the target listens on */
	ROLE_OTHER = 2,  /* outbound or non-TCP: never starts a request */
};

/* conn_state.flags and request_record.flags */
#define REQ_START_UNSEEN 1 /* the request began before reqprof attached */

/* One finished request, the only thing sent to user space per request. */
struct request_record {
	__u64 conn;      /* socket cookie: unique for the kernel's lifetime */
	__u64 start_ns;  /* entry of the syscall that read its first bytes */
	__u64 end_ns;    /* its last write */
	__u64 user_ns;   /* on-CPU outside syscalls */
	__u64 kernel_ns; /* on-CPU inside syscalls */
	__u64 bytes_in;
	__u64 bytes_out;
	__u32 tgid;
	__u32 tid; /* thread that read its first bytes */
	__u32 target;
	__u32 flags;
};

/* The open request of one connection. Counters are added to atomically:
 * several threads may serve one connection. */
struct conn_state {
	__u64 start_ns;
	__u64 end_ns;
	__u64 user_ns;
	__u64 kernel_ns;
	__u64 bytes_in;
	__u64 bytes_out;
	__u32 tgid;
	__u32 tid;
	__u32 target;
	__u32 phase;
	__u32 role;
	__u32 flags;
};

/* Per target thread. Only ever written from the CPU the thread runs on. */
struct thread_state {
	__u64 conn;             /* cookie of the connection it last read/wrote */
	__u64 run_start_ns;     /* start of the on-CPU time not yet charged */
	__u64 syscall_start_ns; /* entry of the current syscall */
	__u64 held_ns;          /* on-CPU ns held back until the syscall boundary */
	__u64 sched_at_in;      /* kernel's sum_exec_runtime when put on the CPU; 0: unknown */
	__u64 slice_cut_ns;     /* ns cut from the current slice so far */
	__u64 debt_ns;          /* ns charged beyond the kernel's accounting, paid back later */
	__u64 tail_user_ns;     /* time since the last write, not yet known to be */
	__u64 tail_kernel_ns;   /* part of the request or between requests */
	__u32 target;
	__u32 mode;
	__u32 in_tail;          /* the last socket operation was a write */
	__u32 wrote;            /* the current syscall wrote to a served connection */
};

/* Per-target counters, per CPU so the hot path never contends. */
struct target_stats {
	__u64 unattributed_user_ns;
	__u64 unattributed_kernel_ns;
	__u64 charged_ns;         /* all CPU charged anywhere: a consistency check */
	__u64 dropped_ns;         /* CPU of requests closed before any response */
	__u64 dropped_requests;
	__u64 lost_records;       /* ring buffer full */
	__u64 lost_threads;       /* thread map full */
	__u64 lost_conns;         /* connection map full */
	__u64 threads_seen;
	__u64 start_unseen;       /* finished requests that began before attach */
	__u64 switch_ins;         /* times a target thread was put on a CPU */
	__u64 between_requests_ns; /* part of unattributed: after a response, before the next */
};

/* Which task was last seen on this CPU and whether it is a target: lets
 * syscall and socket events of other processes return without a hash
 * lookup. */
struct cpu_current {
	__u32 tid;
	__u32 target_plus1; /* 0: not a target */
	__u32 valid;        /* 0 until the first event on this CPU tells */
	__u32 pad;
};

/* The ring buffer is untyped: this puts request_record into BTF so that
 * bpf2go generates its Go twin. */
const struct request_record *unused_request_record __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);   /* tgid */
	__type(value, __u32); /* target index */
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u16);  /* local TCP port in host byte order */
	__type(value, __u8); /* unused */
} listen_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32); /* tid */
	__type(value, struct thread_state);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, __u64); /* socket cookie */
	__type(value, struct conn_state);
} conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct target_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_current);
} current_on_cpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} requests SEC(".maps");

/* Set by the collector once every program is attached, so that all of them
 * start counting at the same instant, enable_ns (CLOCK_MONOTONIC). */
volatile __u32 enabled;
volatile __u64 enable_ns;

static __always_inline struct target_stats *stats_of(__u32 target)
{
	return bpf_map_lookup_elem(&stats, &target);
}

static __always_inline void count(__u64 *counter, __u64 n)
{
	if (counter)
		*counter += n;
}

/* Current task's target index + 1, or 0. The per-CPU entry remembers the
 * last answer for the task on this CPU; it is checked against the current
 * tid, so a stale entry costs a hash lookup, never a wrong answer. */
static __always_inline __u32 current_target_plus1(__u32 *tid)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	*tid = (__u32)pid_tgid;
	__u32 zero = 0;
	struct cpu_current *cur = bpf_map_lookup_elem(&current_on_cpu, &zero);
	if (cur && cur->valid && cur->tid == *tid)
		return cur->target_plus1;

	__u32 tgid = pid_tgid >> 32;
	__u32 *target = bpf_map_lookup_elem(&targets, &tgid);
	__u32 plus1 = target ? *target + 1 : 0;
	if (cur) {
		cur->tid = *tid;
		cur->target_plus1 = plus1;
		cur->valid = 1;
	}
	return plus1;
}

static __always_inline struct thread_state *thread_of(__u32 tid, __u32 target, __u64 run_start_ns)
{
	struct thread_state *st = bpf_map_lookup_elem(&threads, &tid);
	if (st)
		return st;

	struct thread_state fresh = {
		.run_start_ns = run_start_ns,
		.target = target,
		.mode = MODE_UNKNOWN,
	};
	struct target_stats *s = stats_of(target);
	if (bpf_map_update_elem(&threads, &tid, &fresh, BPF_NOEXIST) == 0)
		count(s ? &s->threads_seen : 0, 1);
	st = bpf_map_lookup_elem(&threads, &tid);
	if (!st)
		count(s ? &s->lost_threads : 0, 1);
	return st;
}

/* Charges ns of CPU to the request the thread serves, or to the target's
 * unattributed time if it serves none. */
static __always_inline void charge(struct thread_state *st, __u64 ns, bool kernel)
{
	if (!ns)
		return;
	struct target_stats *s = stats_of(st->target);
	if (s)
		s->charged_ns += ns;

	if (st->in_tail) {
		if (kernel)
			st->tail_kernel_ns += ns;
		else
			st->tail_user_ns += ns;
		return;
	}
	struct conn_state *c = 0;
	if (st->conn)
		c = bpf_map_lookup_elem(&conns, &st->conn);
	if (c && c->role == ROLE_SERVER) {
		if (kernel)
			__sync_fetch_and_add(&c->kernel_ns, ns);
		else
			__sync_fetch_and_add(&c->user_ns, ns);
		return;
	}
	if (!s)
		return;
	if (kernel)
		s->unattributed_kernel_ns += ns;
	else
		s->unattributed_user_ns += ns;
}

/* Settles the time since the thread's last write: part of its request when
 * more of the same response follows, else time between requests. */
static __always_inline void end_tail(struct thread_state *st, bool same_response)
{
	if (!st->in_tail)
		return;
	st->in_tail = 0;
	struct conn_state *c = 0;
	if (same_response && st->conn)
		c = bpf_map_lookup_elem(&conns, &st->conn);
	if (c) {
		__sync_fetch_and_add(&c->user_ns, st->tail_user_ns);
		__sync_fetch_and_add(&c->kernel_ns, st->tail_kernel_ns);
	} else {
		struct target_stats *s = stats_of(st->target);
		if (s) {
			s->unattributed_user_ns += st->tail_user_ns;
			s->unattributed_kernel_ns += st->tail_kernel_ns;
			s->between_requests_ns += st->tail_user_ns + st->tail_kernel_ns;
		}
	}
	st->tail_user_ns = 0;
	st->tail_kernel_ns = 0;
}

/* Charges or holds back ns of the thread's time in its current mode:
 * user time is charged now, time in (or possibly in) a syscall is held back
 * for the syscall's boundary. Debt from an earlier slice is paid first. */
static __always_inline void account(struct thread_state *st, __u64 ns)
{
	__u64 paid = ns < st->debt_ns ? ns : st->debt_ns;
	st->debt_ns -= paid;
	ns -= paid;
	if (st->mode == MODE_USER)
		charge(st, ns, false);
	else
		st->held_ns += ns;
}

/* Takes the on-CPU time since the last cut, by the clock. */
static __always_inline void cut(struct thread_state *st, __u64 now)
{
	if (!st->run_start_ns)
		return;
	__u64 ns = now > st->run_start_ns ? now - st->run_start_ns : 0;
	st->run_start_ns = now;
	st->slice_cut_ns += ns;
	account(st, ns);
}

/* Ends the thread's slice on a CPU. The clock measures wall time on the CPU,
 * which on a virtual machine includes time the hypervisor ran something
 * else (steal) and misses scheduler work done before the switch; the
 * kernel's own accounting (sum_exec_runtime, what CLOCK_THREAD_CPUTIME_ID
 * and utime+stime report) excludes and includes those. The slice's last
 * piece is sized so that the slice totals what the kernel accounted;
 * an excess already charged becomes a debt paid from the next pieces. */
static __always_inline void end_slice(struct thread_state *st, __u64 now, __u64 sum_exec_runtime)
{
	if (!st->sched_at_in || sum_exec_runtime < st->sched_at_in) {
		cut(st, now);
	} else if (st->run_start_ns) {
		__u64 slice = sum_exec_runtime - st->sched_at_in;
		if (slice >= st->slice_cut_ns) {
			account(st, slice - st->slice_cut_ns);
		} else {
			st->debt_ns += st->slice_cut_ns - slice;
		}
	}
	st->run_start_ns = 0;
	st->sched_at_in = 0;
	st->slice_cut_ns = 0;
}

static __always_inline void emit(struct conn_state *c, __u64 cookie)
{
	__u64 user_ns = __sync_lock_test_and_set(&c->user_ns, 0);
	__u64 kernel_ns = __sync_lock_test_and_set(&c->kernel_ns, 0);
	struct target_stats *s = stats_of(c->target);

	if (c->flags & REQ_START_UNSEEN) {
		/* Its start, and so part of its CPU, is before the window:
		 * counted, not reported as a request. */
		count(s ? &s->start_unseen : 0, 1);
		count(s ? &s->dropped_ns : 0, user_ns + kernel_ns);
		return;
	}

	struct request_record *r = bpf_ringbuf_reserve(&requests, sizeof(*r), 0);
	if (!r) {
		count(s ? &s->lost_records : 0, 1);
		count(s ? &s->dropped_ns : 0, user_ns + kernel_ns);
		return;
	}
	r->conn = cookie;
	r->start_ns = c->start_ns;
	r->end_ns = c->end_ns;
	r->user_ns = user_ns;
	r->kernel_ns = kernel_ns;
	r->bytes_in = c->bytes_in;
	r->bytes_out = c->bytes_out;
	r->tgid = c->tgid;
	r->tid = c->tid;
	r->target = c->target;
	r->flags = c->flags;
	bpf_ringbuf_submit(r, 0);
}

static __always_inline bool served_socket(struct sock *sk)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return false;
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return false;
	__u16 port = BPF_CORE_READ(sk, __sk_common.skc_num);
	return bpf_map_lookup_elem(&listen_ports, &port) != 0;
}

static __always_inline struct conn_state *conn_of(struct sock *sk, __u64 cookie, __u32 target, __u32 tid,
						   __u32 phase, __u32 flags)
{
	struct conn_state *c = bpf_map_lookup_elem(&conns, &cookie);
	if (c)
		return c;

	struct conn_state fresh = {
		.tgid = bpf_get_current_pid_tgid() >> 32,
		.tid = tid,
		.target = target,
		.phase = phase,
		.role = served_socket(sk) ? ROLE_SERVER : ROLE_OTHER,
		.flags = flags,
	};
	if (bpf_map_update_elem(&conns, &cookie, &fresh, BPF_NOEXIST)) {
		c = bpf_map_lookup_elem(&conns, &cookie);
		if (!c) {
			struct target_stats *s = stats_of(target);
			count(s ? &s->lost_conns : 0, 1);
		}
		return c;
	}
	return bpf_map_lookup_elem(&conns, &cookie);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	if (!enabled)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u32 zero = 0;
	struct cpu_current *cur = bpf_map_lookup_elem(&current_on_cpu, &zero);
	if (!cur)
		return 0;

	/* prev: close its on-CPU interval. */
	__u32 prev_tid = prev->pid;
	__u32 prev_plus1 = 0;
	if (prev_tid) {
		__u32 tgid = prev->tgid;
		__u32 *target = bpf_map_lookup_elem(&targets, &tgid);
		prev_plus1 = target ? *target + 1 : 0;
	}
	if (prev_plus1) {
		/* Seen for the first time here: it has run since before enable. */
		struct thread_state *st = thread_of(prev_tid, prev_plus1 - 1, enable_ns);
		if (st) {
			end_slice(st, now, prev->se.sum_exec_runtime);
			if (prev_state & TASK_DEAD) {
				/* Its final switch: what it held back has no boundary
				 * left to tell; it was in the exit syscall. */
				charge(st, st->held_ns, true);
				end_tail(st, false);
				bpf_map_delete_elem(&threads, &prev_tid);
			}
		}
	}

	/* next: open its on-CPU interval. The idle task (pid 0) is never a target. */
	__u32 next_tid = next->pid;
	__u32 next_plus1 = 0;
	if (next_tid) {
		__u32 tgid = next->tgid;
		__u32 *target = bpf_map_lookup_elem(&targets, &tgid);
		next_plus1 = target ? *target + 1 : 0;
	}
	cur->tid = next_tid;
	cur->target_plus1 = next_plus1;
	cur->valid = 1;
	if (next_plus1) {
		struct thread_state *st = thread_of(next_tid, next_plus1 - 1, now);
		if (st) {
			st->run_start_ns = now;
			st->sched_at_in = next->se.sum_exec_runtime;
			st->slice_cut_ns = 0;
		}
		struct target_stats *s = stats_of(next_plus1 - 1);
		count(s ? &s->switch_ins : 0, 1);
	}
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(on_sys_enter, struct pt_regs *regs, long id)
{
	if (!enabled)
		return 0;
	__u32 tid;
	__u32 plus1 = current_target_plus1(&tid);
	if (!plus1)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct thread_state *st = thread_of(tid, plus1 - 1, enable_ns);
	if (!st)
		return 0;
	cut(st, now);
	if (st->mode != MODE_SYSCALL) {
		/* Whatever was held back was user time: we are entering now. */
		charge(st, st->held_ns, false);
	}
	st->held_ns = 0;
	st->mode = MODE_SYSCALL;
	st->syscall_start_ns = now;
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
	if (!enabled)
		return 0;
	__u32 tid;
	__u32 plus1 = current_target_plus1(&tid);
	if (!plus1)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct thread_state *st = thread_of(tid, plus1 - 1, enable_ns);
	if (!st)
		return 0;
	cut(st, now);
	/* The syscall's whole CPU goes to the request it served, known now. */
	charge(st, st->held_ns, true);
	st->held_ns = 0;
	st->mode = MODE_USER;
	if (st->wrote) {
		st->wrote = 0;
		st->in_tail = 1;
	}
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(on_sock_recv_length, struct sock *sk, int ret, int flags)
{
	if (!enabled || ret <= 0)
		return 0;
	__u32 tid;
	__u32 plus1 = current_target_plus1(&tid);
	if (!plus1)
		return 0;
	struct thread_state *st = thread_of(tid, plus1 - 1, enable_ns);
	if (!st)
		return 0;
	__u64 cookie = bpf_get_socket_cookie(sk);
	struct conn_state *c = conn_of(sk, cookie, plus1 - 1, tid, PHASE_IDLE, 0);
	if (!c || c->role != ROLE_SERVER)
		return 0;
	end_tail(st, false);

	if (c->phase != PHASE_READING) {
		/* Data after a response (or after accept): a new request. */
		if (c->phase == PHASE_RESPONDING)
			emit(c, cookie);
		c->user_ns = 0;
		c->kernel_ns = 0;
		c->bytes_in = 0;
		c->bytes_out = 0;
		c->flags = 0;
		c->tid = tid;
		c->start_ns = st->mode == MODE_SYSCALL ? st->syscall_start_ns : bpf_ktime_get_ns();
		c->end_ns = 0;
		c->phase = PHASE_READING;
	}
	__sync_fetch_and_add(&c->bytes_in, ret);
	st->conn = cookie;
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(on_sock_send_length, struct sock *sk, int ret, int flags)
{
	if (!enabled || ret <= 0)
		return 0;
	__u32 tid;
	__u32 plus1 = current_target_plus1(&tid);
	if (!plus1)
		return 0;
	struct thread_state *st = thread_of(tid, plus1 - 1, enable_ns);
	if (!st)
		return 0;
	__u64 cookie = bpf_get_socket_cookie(sk);
	/* A write on a connection never read from in the window answers a
	 * request that started before it. */
	struct conn_state *c = conn_of(sk, cookie, plus1 - 1, tid, PHASE_RESPONDING, REQ_START_UNSEEN);
	if (!c || c->role != ROLE_SERVER)
		return 0;
	end_tail(st, st->conn == cookie);
	c->phase = PHASE_RESPONDING;
	c->end_ns = bpf_ktime_get_ns();
	__sync_fetch_and_add(&c->bytes_out, ret);
	st->conn = cookie;
	st->wrote = 1;
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
	__u64 cookie = bpf_get_socket_cookie(sk);
	struct conn_state *c = bpf_map_lookup_elem(&conns, &cookie);
	if (!c)
		return 0;
	if (c->phase == PHASE_RESPONDING) {
		emit(c, cookie);
	} else if (c->role == ROLE_SERVER) {
		struct target_stats *s = stats_of(c->target);
		__u64 ns = c->user_ns + c->kernel_ns;
		if (ns || c->phase == PHASE_READING) {
			count(s ? &s->dropped_ns : 0, ns);
			count(s ? &s->dropped_requests : 0, c->phase == PHASE_READING);
		}
	}
	bpf_map_delete_elem(&conns, &cookie);
	return 0;
}
