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
 * Softirq and hard-IRQ time that interrupted a target thread is carved out
 * of the piece it interrupted and charged as such, so that
 * user + syscalls + softirq + irq = on-CPU time, exactly.
 *
 * After a write, the thread's costs go to the connection's "tail" until its
 * next socket operation: more of the same response, a new request, another
 * connection, or the close. The tail is part of the request it follows (its
 * response lasts until the next request starts), so the server's loop
 * between requests (epoll_wait, accept, bookkeeping) is charged to the
 * requests it serves; it is also counted on its own, to show the loop's
 * share. So a request's CPU runs from the entry of the read that starts it
 * until its thread turns to other work.
 *
 * Waiting: off-CPU time runs from a voluntary switch-out to the wakeup,
 * run-queue time from the wakeup (or a preemption) to the switch-in; both
 * are charged to the request the thread serves when it is back on a CPU.
 *
 * Hand-off: a thread serving a request that wakes another thread of the
 * target (futex, condition variable, eventfd, pipe) hands it the request: the
 * woken thread serves it until it reads or writes a connection itself or is
 * woken for another request, so worker pools are charged to the request they
 * work for. A chain of hand-offs is at most MAX_HANDOFF_DEPTH long. Only a
 * thread that has itself read or written a served connection takes a
 * request this way: a language runtime's own threads (Go's scheduler wakes
 * them as syscalls come and go) never serve one, and must not be charged
 * to the request whose thread happened to wake them.
 */
#include "kernel_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#define MAX_TARGETS 64
#define MAX_TARGET_PROCESSES 4096 /* with children followed, many per target */
#define MAX_GOROUTINES 65536
#define MAX_HANDOFF_DEPTH 4
#define MAX_CONNS 65536
#define NR_SOFTIRQS 10
#define SYSCALL_SLOTS 8
#define PAYLOAD_MAX 512
/* Room for a capture to be continued at any offset below PAYLOAD_MAX with up
 * to PAYLOAD_MAX more bytes, which is what the verifier can check. */
#define PAYLOAD_BUF (2 * PAYLOAD_MAX)
#define RINGBUF_BYTES (8 << 20)
#define WAKEUP_BYTES (RINGBUF_BYTES / 4)

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6

#define TCP_ESTABLISHED 1
#define TCP_FIN_WAIT1 4
#define TCP_CLOSE 7
#define TCP_CLOSE_WAIT 8
#define TCP_LAST_ACK 9

#define TASK_RUNNING 0
#define TASK_DEAD 0x80

/* x86-64 numbers of the syscalls whose buffer holds a request's first bytes. */
#define NR_READ 0
#define NR_READV 19
#define NR_RECVFROM 45
#define NR_RECVMSG 47

#define BPF_F_NO_PREALLOC 1

/* What the current syscall-boundary state of a thread is. */
enum thread_mode {
	/* First seen mid-flight (at attach): not yet known whether it is in a
	 * syscall; its time is held back until the next syscall boundary tells. */
	MODE_UNKNOWN = 0,
	MODE_USER = 1,
	MODE_SYSCALL = 2,
};

/* Whether a thread is a Go runtime's, as far as its goroutines go. */
enum go_thread {
	GO_UNKNOWN = 0, /* not looked up yet */
	GO_NOT = 1,
	GO_YES = 2,
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

/* request_record.flags */
#define REQ_START_UNSEEN 1 /* the request began before reqprof attached */

struct syscall_slot {
	__u32 nr;
	__u32 calls;
	__u64 ns;
};

/* What a request cost: on-CPU time by kind, and waiting. */
struct cost {
	__u64 user_ns;     /* on-CPU outside syscalls and interrupts */
	__u64 syscall_ns;  /* on-CPU inside syscalls, interrupts carved out */
	__u64 softirq_ns[NR_SOFTIRQS];
	__u64 irq_ns;      /* hard interrupt handlers */
	__u64 runqueue_ns; /* runnable, waiting for a CPU */
	__u64 offcpu_ns;   /* blocked: sleeping until woken */
	__u64 other_syscall_ns; /* syscalls beyond the named slots */
	__u32 other_syscall_calls;
	__u32 page_faults;
	__u32 voluntary_switches;
	__u32 involuntary_switches;
	struct syscall_slot syscalls[SYSCALL_SLOTS];
};

/* One finished request, the only thing sent to user space per request.
 * The payload is sent only up to payload_len. */
struct request_record {
	__u64 conn;           /* socket cookie: unique for the kernel's lifetime */
	__u64 start_ns;       /* its first bytes read */
	__u64 first_write_ns; /* its first response bytes written */
	__u64 end_ns;         /* its last write */
	__u64 bytes_in;
	__u64 bytes_out;
	struct cost cost;
	__u32 tgid;
	__u32 tid; /* thread that read its first bytes */
	__u32 target;
	__u32 flags;
	__u16 local_port;
	__u16 payload_len;
	__u32 pad;
	__u8 payload[PAYLOAD_BUF]; /* its first bytes read, payload_len of them */
};

/* The open request of one connection, and the tail of its last writer.
 * Counters are added to atomically: several threads may serve one
 * connection. */
struct conn_state {
	struct request_record rec;
	struct cost tail;
	__u32 phase;
	__u32 role;
};

/* Per target thread. Only ever written from the CPU the thread runs on, or
 * by its waker while it sleeps. */
struct thread_state {
	__u64 conn;              /* cookie of the connection it last read/wrote */
	__u64 run_start_ns;      /* start of the on-CPU time not yet cut */
	__u64 held_ns;           /* on-CPU ns held back until the syscall boundary */
	__u64 sched_at_in;       /* kernel's sum_exec_runtime when put on the CPU; 0: unknown */
	__u64 slice_cut_ns;      /* ns cut from the current slice so far */
	__u64 debt_ns;           /* ns charged beyond the kernel's accounting, paid back later */
	__u64 interrupted_ns;    /* interrupt time inside the piece not yet cut: already charged */
	__u64 blocked_since_ns;  /* voluntary switch-out, until woken */
	__u64 runnable_since_ns; /* woken or preempted, until back on a CPU */
	__u64 offcpu_pending_ns; /* blocked time to charge when back on a CPU */
	__u64 read_buf;          /* user buffer of the current read-like syscall */
	__u32 target;
	__u32 mode;
	__u32 in_tail;     /* the last socket operation was a write */
	__u32 wrote;       /* the current syscall wrote to a served connection */
	__u32 syscall_nr;
	__u32 handoff_depth;   /* 0: it serves a connection of its own */
	__u64 handoff_conn;    /* set by a waker serving that request ... */
	__u32 handoff_pending; /* ... and taken up when the thread runs */
	__u32 handoff_pending_depth;
	__u32 served;          /* it has read or written a served connection */
	__u32 go;              /* GO_UNKNOWN, GO_NOT, or GO_YES with the layout below */
	__u64 unattributed_ns; /* its CPU that served no request: to name the largest sources */
	__u64 advance_ns;      /* syscall entry cost charged beyond the clock in this slice */
	__s64 tls_offset;    /* Go: its current g, from the FS base */
	__u64 goid_offset;     /* Go: a goroutine's id, in its g */
	__u64 goid;            /* Go: the goroutine whose connection it last took up */
	__u32 dirty;           /* pending holds something */
	__u32 unused;
	/* What it was charged since it last turned to another destination (or
	 * left its CPU), for its destination now: see flush(). */
	struct cost pending;
};

/* Per-target counters, per CPU so the hot path never contends. */
struct target_stats {
	__u64 unattributed_user_ns;
	__u64 unattributed_kernel_ns;
	__u64 between_requests_ns; /* part of attributed: tails, the server's loop after responses */
	__u64 dropped_ns;          /* CPU of requests closed before any response */
	__u64 dropped_requests;
	__u64 lost_records;        /* ring buffer full */
	__u64 lost_threads;        /* thread map full */
	__u64 lost_conns;          /* connection map full */
	__u64 threads_seen;
	__u64 start_unseen;        /* finished requests that began before attach */
	__u64 runqueue_ns;         /* all run-queue wait of target threads, in requests or not */
	__u64 offcpu_ns;           /* all blocked time of target threads */
	__u64 children_followed;   /* processes forked by a target and added to it */
	__u64 finished;            /* requests finished (emitted, or lost to a full ring buffer) */
};

/* Per CPU: which task was last seen here and whether it is a target (lets
 * events of other processes return without a hash lookup), and the
 * interrupt now running over it. */
struct cpu_state {
	__u64 softirq_start_ns;   /* 0: no softirq over a target thread */
	__u64 irq_start_ns;       /* 0: no hard irq over a target thread */
	__u64 irq_in_softirq_ns;  /* hard irq time inside the running softirq */
	__u32 tid;
	__u32 target_plus1; /* 0: not a target */
	__u32 generation;   /* targets_generation when filled in */
	__u32 softirq_vec;
};

/* The ring buffer is untyped: this puts request_record into BTF so that
 * bpf2go generates its Go twin. */
const struct request_record *unused_request_record __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGET_PROCESSES);
	__type(key, __u32);   /* tgid */
	__type(value, __u32); /* target index */
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u16);  /* local TCP port in host byte order */
	__type(value, __u8); /* unused */
} listen_ports SEC(".maps");

/* In the task itself: reached from its task_struct in a few loads, where a
 * hash lookup would hash and compare a key on each of the some twenty
 * events of a request; freed with the task. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_state);
} threads SEC(".maps");

/* Go servers run many goroutines on few threads and move them between
 * threads, so a thread's last connection says little about whose work it
 * does. For a Go process the collector gives, from its binary, where a
 * thread keeps its running goroutine's g (an offset from the FS base) and
 * where a g keeps the goroutine's id. A goroutine that reads or writes a
 * connection is remembered with it, and at each syscall entry and each
 * switch off a CPU the thread takes up the connection of the goroutine it
 * runs. */
struct go_layout {
	__s64 tls_offset;
	__u64 goid_offset;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGET_PROCESSES);
	__type(key, __u32); /* tgid */
	__type(value, struct go_layout);
} go_layouts SEC(".maps");

struct goroutine_key {
	__u32 tgid;
	__u32 pad;
	__u64 goid;
};

/* Least recently used goroutines go first: one that served a connection
 * long ago has most likely exited. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_GOROUTINES);
	__type(key, struct goroutine_key);
	__type(value, __u64); /* cookie of the connection it last read or wrote */
} goroutines SEC(".maps");

/* Not preallocated: a connection's state is large (it holds the captured
 * bytes), and memory should follow the connections that exist. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CONNS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
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
	__type(value, struct cpu_state);
} cpus SEC(".maps");

/* A zeroed thread_state to create entries from: too large for the stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thread_state);
} thread_template SEC(".maps");

/* A zeroed conn_state to create entries from: too large for the stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct conn_state);
} conn_template SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, RINGBUF_BYTES);
} requests SEC(".maps");

/* Bytes of each request to capture for naming it; 0 turns capture off.
 * Set before load. */
volatile const __u32 capture_bytes = 256;
/* Whether processes forked by a target join it (pre-fork servers). */
volatile const __u32 follow_children = 0;

/* Set by the collector once every program is attached, so that all of them
 * start counting at the same instant, enable_ns (CLOCK_MONOTONIC). */
volatile __u32 enabled;
volatile __u64 enable_ns;
/* Bumped by the collector whenever the targets map changes, so that no CPU
 * goes on trusting an answer about a task given before. */
volatile __u32 targets_generation;

/* The kernel's syscall entry and exit paths run before sys_enter and after
 * sys_exit fire (and so do the parts of these programs before and after
 * they read the clock), so the clock between the two tracepoints misses
 * them, and they would pass for user time. The collector measures their
 * cost once, by running syscalls on a thread of its own (calibration_tid,
 * made a target for the purpose) and comparing its CPU clock with what
 * these programs charge, and sets syscall_overhead_ns: that much of the
 * user time before each syscall is charged to it. */
volatile __u64 syscall_overhead_ns;
volatile __u32 calibration_tid;
volatile __u64 calibration_syscall_ns;
volatile __u64 calibration_syscalls;
/* The made-up connection the calibrating thread serves, a new one for each
 * measure: socket cookies count up from 1 and never reach them. */
volatile __u64 calibration_cookie;

/* The state of every thread that has some, for the collector at the end of
 * a window (a task storage map has no keys to iterate over). */
SEC("iter/task")
int dump_threads(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task)
		return 0;
	struct thread_state *st = bpf_task_storage_get(&threads, task, 0, 0);
	if (!st)
		return 0;
	__u64 tid = task->pid;
	bpf_seq_write(ctx->meta->seq, &tid, sizeof(tid));
	bpf_seq_write(ctx->meta->seq, st, sizeof(*st));
	return 0;
}

static __always_inline struct target_stats *stats_of(__u32 target)
{
	return bpf_map_lookup_elem(&stats, &target);
}

/* Adds to a counter of a target's stats, which may be missing. (A pointer
 * to the field taken before the null check would not pass the verifier.) */
#define COUNT(s, field, n)                                                                                   \
	do {                                                                                                 \
		if (s)                                                                                       \
			(s)->field += (n);                                                                   \
	} while (0)

static __always_inline struct cpu_state *this_cpu(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&cpus, &zero);
}

/* Current task's target index + 1, or 0. The per-CPU entry remembers the
 * last answer for the task on this CPU; it is checked against the current
 * tid, so a stale entry costs a hash lookup, never a wrong answer. */
static __always_inline __u32 current_target_plus1(struct cpu_state *cpu, __u32 *tid)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	*tid = (__u32)pid_tgid;
	__u32 generation = targets_generation;
	if (cpu && cpu->generation == generation && cpu->tid == *tid)
		return cpu->target_plus1;

	__u32 tgid = pid_tgid >> 32;
	__u32 *target = bpf_map_lookup_elem(&targets, &tgid);
	__u32 plus1 = target ? *target + 1 : 0;
	if (cpu) {
		cpu->tid = *tid;
		cpu->target_plus1 = plus1;
		cpu->generation = generation;
	}
	return plus1;
}

static __always_inline struct thread_state *thread_of(struct task_struct *task, __u32 target, __u64 run_start_ns)
{
	struct thread_state *st = bpf_task_storage_get(&threads, task, 0, 0);
	if (st)
		return st;

	__u32 zero = 0;
	struct thread_state *fresh = bpf_map_lookup_elem(&thread_template, &zero);
	if (!fresh)
		return 0;
	/* The only fields ever set in the template: the rest stays 0. */
	fresh->run_start_ns = run_start_ns;
	fresh->target = target;
	fresh->mode = MODE_UNKNOWN;
	struct target_stats *s = stats_of(target);
	st = bpf_task_storage_get(&threads, task, fresh, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (st)
		COUNT(s, threads_seen, 1);
	else
		COUNT(s, lost_threads, 1); /* out of memory */
	return st;
}

/* The target thread running on this CPU, if any, for events in its context. */
static __always_inline struct thread_state *current_thread(struct cpu_state *cpu, __u32 *tid)
{
	if (!enabled)
		return 0;
	__u32 plus1 = current_target_plus1(cpu, tid);
	if (!plus1)
		return 0;
	/* Seen for the first time here: it has run since before enable. */
	return thread_of(bpf_get_current_task_btf(), plus1 - 1, enable_ns);
}

/* Where the thread's costs go: its request, the tail of the response it
 * last wrote, or nowhere (unattributed) when it serves no request, given
 * its connection's state c. */
static __always_inline struct cost *destination_in(struct thread_state *st, struct conn_state *c)
{
	if (!c || c->role != ROLE_SERVER)
		return 0;
	return st->in_tail ? &c->tail : &c->rec.cost;
}

/* Adds one syscall to a cost that only the thread's own context writes. */
static __always_inline void add_syscall_own(struct cost *to, __u32 nr, __u64 ns)
{
	to->syscall_ns += ns;
	for (int i = 0; i < SYSCALL_SLOTS; i++) {
		struct syscall_slot *slot = &to->syscalls[i];
		if (!slot->nr)
			slot->nr = nr + 1;
		if (slot->nr == nr + 1) {
			slot->ns += ns;
			slot->calls++;
			return;
		}
	}
	to->other_syscall_ns += ns;
	to->other_syscall_calls++;
}

/* Adds to a cost that several threads may add to at once. */
static __always_inline void add_syscall(struct cost *to, __u32 nr, __u64 ns, __u32 calls)
{
	__sync_fetch_and_add(&to->syscall_ns, ns);
	for (int i = 0; i < SYSCALL_SLOTS; i++) {
		struct syscall_slot *slot = &to->syscalls[i];
		/* Slot numbers are stored as nr + 1 so that 0 means free. */
		__u32 have = slot->nr;
		if (!have)
			have = __sync_val_compare_and_swap(&slot->nr, 0, nr + 1) ?: nr + 1;
		if (have == nr + 1) {
			__sync_fetch_and_add(&slot->ns, ns);
			__sync_fetch_and_add(&slot->calls, calls);
			return;
		}
	}
	__sync_fetch_and_add(&to->other_syscall_ns, ns);
	__sync_fetch_and_add(&to->other_syscall_calls, calls);
}

static __always_inline __u64 kernel_ns_of(struct cost *c)
{
	__u64 ns = c->syscall_ns + c->irq_ns;
	for (int i = 0; i < NR_SOFTIRQS; i++)
		ns += c->softirq_ns[i];
	return ns;
}

/* Adds atomically, and only what is there to add: most of a cost's fields
 * are 0 (softirq vectors that did not run), and a locked add of 0 costs
 * as much as any. */
#define ADD_NONZERO(field, n)                                                                              \
	do {                                                                                                 \
		if (n)                                                                                       \
			__sync_fetch_and_add(&(field), (n));                                                 \
	} while (0)

/* Adds a cost to one that other threads may be adding to. Waiting is
 * added only with_waits. */
static __always_inline void add_cost(struct cost *to, struct cost *from, bool with_waits)
{
	ADD_NONZERO(to->user_ns, from->user_ns);
	ADD_NONZERO(to->irq_ns, from->irq_ns);
	ADD_NONZERO(to->page_faults, from->page_faults);
	for (int i = 0; i < NR_SOFTIRQS; i++)
		ADD_NONZERO(to->softirq_ns[i], from->softirq_ns[i]);
	for (int i = 0; i < SYSCALL_SLOTS; i++) {
		struct syscall_slot *slot = &from->syscalls[i];
		if (slot->nr)
			add_syscall(to, slot->nr - 1, slot->ns, slot->calls);
	}
	if (from->other_syscall_calls) {
		__sync_fetch_and_add(&to->syscall_ns, from->other_syscall_ns);
		__sync_fetch_and_add(&to->other_syscall_ns, from->other_syscall_ns);
		__sync_fetch_and_add(&to->other_syscall_calls, from->other_syscall_calls);
	}
	if (!with_waits)
		return;
	ADD_NONZERO(to->runqueue_ns, from->runqueue_ns);
	ADD_NONZERO(to->offcpu_ns, from->offcpu_ns);
	ADD_NONZERO(to->voluntary_switches, from->voluntary_switches);
	ADD_NONZERO(to->involuntary_switches, from->involuntary_switches);
}

/* CPU that served no request. */
static __always_inline void charge_unattributed(struct thread_state *st, __u64 user_ns, __u64 kernel_ns)
{
	st->unattributed_ns += user_ns + kernel_ns;
	struct target_stats *s = stats_of(st->target);
	COUNT(s, unattributed_user_ns, user_ns);
	COUNT(s, unattributed_kernel_ns, kernel_ns);
}

/* The thread's cost to come, for its destination: NULL when it serves no
 * connection, and its CPU is unattributed at once. A thread charges into
 * its own state and adds that to the connection only when it turns to
 * another destination or leaves its CPU (flush): most syscalls then cost
 * no connection lookup and no locked add. */
static __always_inline struct cost *pending_of(struct thread_state *st)
{
	if (!st->conn)
		return 0;
	st->dirty = 1;
	return &st->pending;
}

/* Charges user time (syscall_nr < 0) or one syscall's time; a syscall is
 * counted even when it took no measurable time. */
static __always_inline void charge(struct thread_state *st, __u64 ns, int syscall_nr)
{
	if (!ns && syscall_nr < 0)
		return;
	struct cost *to = pending_of(st);
	if (!to)
		charge_unattributed(st, syscall_nr < 0 ? ns : 0, syscall_nr < 0 ? 0 : ns);
	else if (syscall_nr < 0)
		to->user_ns += ns;
	else
		add_syscall_own(to, syscall_nr, ns);
}

/* Adds what the thread was charged to its destination, given its
 * connection's state c (NULL when gone): the request, the tail, or nowhere. */
static __always_inline void flush_to(struct thread_state *st, struct conn_state *c)
{
	if (!st->dirty)
		return;
	st->dirty = 0;
	struct cost *p = &st->pending;
	struct cost *to = destination_in(st, c);
	if (to)
		add_cost(to, p, true);
	else
		charge_unattributed(st, p->user_ns, kernel_ns_of(p));
	__builtin_memset(p, 0, sizeof(*p));
}

static __always_inline void flush(struct thread_state *st)
{
	if (st->dirty)
		flush_to(st, bpf_map_lookup_elem(&conns, &st->conn));
}

/* Moves a tail's CPU into the request it follows, and counts it as loop
 * time. Its waiting is not the request's: once the response is out, a
 * thread that sleeps or waits for a CPU is waiting for the next request. */
static __always_inline void settle_tail(struct conn_state *c)
{
	struct cost *t = &c->tail;
	struct target_stats *s = stats_of(c->rec.target);
	COUNT(s, between_requests_ns, t->user_ns + kernel_ns_of(t));
	add_cost(&c->rec.cost, t, false);
	__builtin_memset(t, 0, sizeof(*t));
}

/* The thread stops serving what it serves: its charges go there, and a
 * tail it was in ends. c is its connection's state if the caller has it. */
static __always_inline void leave_with(struct thread_state *st, struct conn_state *c)
{
	if (!st->dirty && !st->in_tail)
		return;
	if (!c && st->conn)
		c = bpf_map_lookup_elem(&conns, &st->conn);
	flush_to(st, c);
	if (st->in_tail) {
		st->in_tail = 0;
		if (c)
			settle_tail(c);
	}
}

static __always_inline void leave(struct thread_state *st)
{
	leave_with(st, 0);
}

/* The id of the goroutine the current thread runs, for a thread of a Go
 * process; 0 otherwise, and for the runtime's own stack (g0: its scheduler,
 * netpoller and sysmon), which runs no goroutine. Only in the thread's own
 * context. Costs two reads of user memory. */
static __always_inline __u64 current_goid(struct thread_state *st)
{
	if (st->go == GO_NOT)
		return 0;
	if (st->go == GO_UNKNOWN) {
		__u32 tgid = bpf_get_current_pid_tgid() >> 32;
		struct go_layout *layout = bpf_map_lookup_elem(&go_layouts, &tgid);
		if (!layout) {
			st->go = GO_NOT;
			return 0;
		}
		st->tls_offset = layout->tls_offset;
		st->goid_offset = layout->goid_offset;
		st->go = GO_YES;
	}
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 g = 0, goid = 0;
	if (bpf_probe_read_user(&g, sizeof(g), (void *)(task->thread.fsbase + st->tls_offset)) || !g)
		return 0;
	if (bpf_probe_read_user(&goid, sizeof(goid), (void *)(g + st->goid_offset)))
		return 0;
	return goid;
}

/* The goroutines map's key for goroutine goid of the current process. */
static __always_inline struct goroutine_key goroutine_key_of(__u64 goid)
{
	struct goroutine_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .goid = goid};
	return key;
}

/* A goroutine read or wrote a served connection: it serves it now. The
 * map is written only when that changes, once in a goroutine's life for a
 * net/http connection's: an update of an LRU map takes its locks. */
static __always_inline void note_goroutine(struct thread_state *st, __u64 cookie)
{
	__u64 goid = current_goid(st);
	if (!goid)
		return;
	st->goid = goid;
	struct goroutine_key key = goroutine_key_of(goid);
	__u64 *conn = bpf_map_lookup_elem(&goroutines, &key);
	if (!conn || *conn != cookie)
		bpf_map_update_elem(&goroutines, &key, &cookie, BPF_ANY);
}

/* The thread takes up the connection of the goroutine it runs, before the
 * piece of CPU that goroutine ran is charged. Where the goroutine says
 * nothing, the thread keeps the connection it had, as a thread that is not
 * Go's does: on the runtime's own stack (what the scheduler does after a
 * goroutine parks is that request's loop), and in a goroutine that never
 * touched a connection (a worker handed a request with a wake-up, a GC
 * worker). A goroutine handed work over a channel by one that read the
 * request is the limit: it is charged to the connection it last served
 * itself, if any, until it writes the response. */
static __always_inline void follow_goroutine(struct thread_state *st)
{
	__u64 goid = current_goid(st);
	if (goid == st->goid)
		return;
	/* Forgotten on g0: the goroutine that comes next may have served
	 * another connection on another thread meanwhile. */
	st->goid = goid;
	if (!goid)
		return;
	struct goroutine_key key = goroutine_key_of(goid);
	__u64 *served = bpf_map_lookup_elem(&goroutines, &key);
	if (!served)
		return;
	__u64 conn = *served;
	/* The goroutine is past its request when the connection's response
	 * is out: its CPU is then the tail, as for a thread after a write. */
	struct conn_state *c = bpf_map_lookup_elem(&conns, &conn);
	__u32 in_tail = c && c->phase == PHASE_RESPONDING;
	if (conn == st->conn && in_tail == st->in_tail)
		return;
	leave(st);
	st->conn = conn;
	st->in_tail = in_tail;
	st->handoff_depth = 0;
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
		charge(st, ns, -1);
	else
		st->held_ns += ns;
}

/* Takes the on-CPU time since the last cut, by the clock, less the
 * interrupts inside it, which were charged when they ended. Entering a
 * syscall from user mode, the syscall entry cost inside the user piece is
 * moved to the syscall. */
static __always_inline void cut(struct thread_state *st, __u64 now, bool entering_syscall)
{
	if (!st->run_start_ns)
		return;
	__u64 ns = now > st->run_start_ns ? now - st->run_start_ns : 0;
	st->run_start_ns = now;
	st->slice_cut_ns += ns;
	__u64 interrupted = st->interrupted_ns < ns ? st->interrupted_ns : ns;
	st->interrupted_ns = 0;
	ns -= interrupted;
	if (entering_syscall && st->mode == MODE_USER) {
		/* The whole entry cost, even when the clock saw a shorter user
		 * piece: between two syscalls of a tight loop it mostly does,
		 * as the kernel's CPU clock runs a few ns a syscall ahead of
		 * this one (which the slice's sizing would otherwise hand to its
		 * last piece). What is charged beyond the clock is counted with
		 * the slice's pieces, so that the sizing takes it back when the
		 * kernel's accounting does not cover it. */
		__u64 entry = syscall_overhead_ns;
		if (ns < entry) {
			st->advance_ns += entry - ns;
			st->slice_cut_ns += entry - ns;
			ns = entry;
		}
		account(st, ns - entry);
		st->held_ns = entry;
		return;
	}
	account(st, ns);
}

/* Ends the thread's slice on a CPU. The clock measures wall time on the CPU
 * from one sched_switch to the next; the kernel's own accounting
 * (sum_exec_runtime, what CLOCK_THREAD_CPUTIME_ID and utime+stime report)
 * starts and stops each slice at other points of the scheduler's path (and
 * leaves out steal time on a virtual machine). Each slice is made to total
 * what the kernel accounted: a shortfall is added to the last piece; an
 * excess comes off the syscall the thread is leaving the CPU in (the
 * scheduler's path is where the two clocks part), and what is left of it
 * becomes a debt paid from the next pieces. */
static __always_inline void end_slice(struct thread_state *st, __u64 now, __u64 sum_exec_runtime)
{
	bool known = st->sched_at_in && sum_exec_runtime >= st->sched_at_in && st->run_start_ns;
	__u64 slice = sum_exec_runtime - st->sched_at_in;
	if (!known) {
		cut(st, now, false);
		/* No accounting to size against: what was charged ahead of the
		 * clock is paid back from the next pieces. */
		st->debt_ns += st->advance_ns;
	} else {
		/* The slice's last piece, sized before it is charged. */
		__u64 ns = now > st->run_start_ns ? now - st->run_start_ns : 0;
		__u64 interrupted = st->interrupted_ns < ns ? st->interrupted_ns : ns;
		__u64 total = st->slice_cut_ns + ns;
		st->interrupted_ns = 0;
		ns -= interrupted;
		if (slice >= total) {
			ns += slice - total;
		} else {
			/* The excess comes off this piece, else off what the
			 * syscall it is in holds, else it is a debt. */
			__u64 excess = total - slice;
			__u64 taken = excess < ns ? excess : ns;
			ns -= taken;
			excess -= taken;
			taken = excess < st->held_ns ? excess : st->held_ns;
			st->held_ns -= taken;
			st->debt_ns += excess - taken;
		}
		account(st, ns);
	}
	st->run_start_ns = 0;
	st->sched_at_in = 0;
	st->slice_cut_ns = 0;
	st->advance_ns = 0;
}

static __always_inline void emit(struct conn_state *c, __u64 cookie)
{
	struct request_record *r = &c->rec;
	struct target_stats *s = stats_of(r->target);

	if (r->flags & REQ_START_UNSEEN) {
		/* Its start, and so part of its CPU, is before the window:
		 * counted, not reported as a request. */
		COUNT(s, start_unseen, 1);
		COUNT(s, dropped_ns, r->cost.user_ns + kernel_ns_of(&r->cost));
		return;
	}
	r->conn = cookie;
	COUNT(s, finished, 1);
	__u32 len = r->payload_len;
	if (len > PAYLOAD_MAX)
		len = PAYLOAD_MAX;
	/* Waking the collector for every record would cost an inter-processor
	 * interrupt per request (a VM exit on a virtual machine): it polls
	 * instead, and is woken only when the buffer is filling up. */
	__u64 wakeup = bpf_ringbuf_query(&requests, BPF_RB_AVAIL_DATA) > WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP
										       : BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&requests, r, __builtin_offsetof(struct request_record, payload) + len, wakeup)) {
		COUNT(s, lost_records, 1);
		COUNT(s, dropped_ns, r->cost.user_ns + kernel_ns_of(&r->cost));
	}
}

static __always_inline __u16 served_port(struct sock *sk)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return 0;
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	__u16 port = BPF_CORE_READ(sk, __sk_common.skc_num);
	return bpf_map_lookup_elem(&listen_ports, &port) ? port : 0;
}

static __always_inline struct conn_state *conn_of(struct sock *sk, __u64 cookie, __u32 target, __u32 tid,
						   __u32 phase, __u32 flags)
{
	struct conn_state *c = bpf_map_lookup_elem(&conns, &cookie);
	if (c)
		return c;

	__u32 zero = 0;
	struct conn_state *fresh = bpf_map_lookup_elem(&conn_template, &zero);
	if (!fresh)
		return 0;
	__u16 port = served_port(sk);
	fresh->rec.tgid = bpf_get_current_pid_tgid() >> 32;
	fresh->rec.tid = tid;
	fresh->rec.target = target;
	fresh->rec.flags = flags;
	fresh->rec.local_port = port;
	fresh->phase = phase;
	fresh->role = port ? ROLE_SERVER : ROLE_OTHER;
	if (bpf_map_update_elem(&conns, &cookie, fresh, BPF_NOEXIST)) {
		c = bpf_map_lookup_elem(&conns, &cookie);
		if (!c) {
			struct target_stats *s = stats_of(target);
			COUNT(s, lost_conns, 1);
		}
		return c;
	}
	return bpf_map_lookup_elem(&conns, &cookie);
}

/* Waiting is charged when the thread is back on a CPU, to what it serves. */
static __always_inline void charge_wait(struct thread_state *st, __u64 runqueue_ns)
{
	struct cost *to = pending_of(st);
	if (to) {
		to->runqueue_ns += runqueue_ns;
		to->offcpu_ns += st->offcpu_pending_ns;
	}
	st->offcpu_pending_ns = 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	if (!enabled)
		return 0;
	__u64 now = bpf_ktime_get_ns();

	/* prev: close its on-CPU interval. */
	__u32 prev_tid = prev->pid;
	if (prev_tid) {
		__u32 tgid = prev->tgid;
		__u32 *target = bpf_map_lookup_elem(&targets, &tgid);
		/* Seen for the first time here: it has run since before enable. */
		struct thread_state *st = target ? thread_of(prev, *target, enable_ns) : 0;
		if (st) {
			follow_goroutine(st);
			end_slice(st, now, prev->se.sum_exec_runtime);
			struct cost *to = pending_of(st);
			if (preempt || prev_state == TASK_RUNNING) {
				st->runnable_since_ns = now;
				if (to)
					to->involuntary_switches++;
			} else {
				st->blocked_since_ns = now;
				if (to)
					to->voluntary_switches++;
			}
			if (prev_state & TASK_DEAD) {
				/* Its final switch: what it held back has no boundary
				 * left to tell; it was in the exit syscall. */
				charge(st, st->held_ns, st->syscall_nr);
				leave(st);
				bpf_task_storage_delete(&threads, prev);
			} else {
				/* Off its CPU, its charges go where they belong: another
				 * thread may end the request meanwhile. */
				flush(st);
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
	struct cpu_state *cpu = this_cpu();
	if (cpu) {
		cpu->tid = next_tid;
		cpu->target_plus1 = next_plus1;
		cpu->generation = targets_generation;
	}
	if (!next_plus1)
		return 0;
	struct thread_state *st = thread_of(next, next_plus1 - 1, now);
	if (!st)
		return 0;
	st->run_start_ns = now;
	st->sched_at_in = next->se.sum_exec_runtime;
	st->slice_cut_ns = 0;
	st->advance_ns = 0;
	st->interrupted_ns = 0;
	struct target_stats *s = stats_of(next_plus1 - 1);
	__u64 runqueue_ns = st->runnable_since_ns ? now - st->runnable_since_ns : 0;
	COUNT(s, runqueue_ns, runqueue_ns);
	COUNT(s, offcpu_ns, st->offcpu_pending_ns);
	if (st->handoff_pending) {
		st->handoff_pending = 0;
		if (st->conn != st->handoff_conn) {
			/* Woken for another request: the sleep it is woken from
			 * was no part of the request it is handed now. */
			leave(st);
			st->conn = st->handoff_conn;
			st->offcpu_pending_ns = 0;
		}
		st->handoff_depth = st->handoff_pending_depth;
	}
	if (st->runnable_since_ns) {
		charge_wait(st, runqueue_ns);
		st->runnable_since_ns = 0;
	}
	return 0;
}

static __always_inline void woken(struct task_struct *p)
{
	if (!enabled)
		return;
	__u32 tgid = p->tgid;
	__u32 *target = bpf_map_lookup_elem(&targets, &tgid);
	if (!target)
		return;
	/* A thread first seen here (new, or asleep since before the window)
	 * gets its state now: its wait for a CPU counts. */
	struct thread_state *st = thread_of(p, *target, 0);
	if (!st)
		return;
	__u64 now = bpf_ktime_get_ns();
	if (st->blocked_since_ns) {
		st->offcpu_pending_ns += now - st->blocked_since_ns;
		st->blocked_since_ns = 0;
	}
	st->runnable_since_ns = now;
}

/* The waker runs this, in its own context: a target thread serving a
 * request hands it to the thread it wakes. */
SEC("tp_btf/sched_waking")
int BPF_PROG(on_sched_waking, struct task_struct *p)
{
	__u32 waker_tid;
	struct thread_state *waker = current_thread(this_cpu(), &waker_tid);
	if (!waker || !waker->conn || waker->in_tail || waker->handoff_depth >= MAX_HANDOFF_DEPTH)
		return 0;
	__u32 tgid = p->tgid;
	__u32 *target = bpf_map_lookup_elem(&targets, &tgid);
	if (!target || *target != waker->target)
		return 0;
	__u32 tid = p->pid;
	if (tid == waker_tid)
		return 0;
	struct conn_state *c = bpf_map_lookup_elem(&conns, &waker->conn);
	if (!c || c->role != ROLE_SERVER)
		return 0;
	struct thread_state *st = bpf_task_storage_get(&threads, p, 0, 0);
	if (!st || !st->served)
		return 0;
	st->handoff_conn = waker->conn;
	st->handoff_pending_depth = waker->handoff_depth + 1;
	st->handoff_pending = 1;
	return 0;
}

/* A process forked by a target joins it, when children are followed. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_sched_process_fork, struct task_struct *parent, struct task_struct *child)
{
	if (!enabled || !follow_children)
		return 0;
	__u32 child_tgid = child->tgid;
	if (child_tgid != (__u32)child->pid)
		return 0; /* a new thread, not a new process */
	__u32 parent_tgid = parent->tgid;
	__u32 *target = bpf_map_lookup_elem(&targets, &parent_tgid);
	if (!target)
		return 0;
	__u32 index = *target;
	if (bpf_map_update_elem(&targets, &child_tgid, &index, BPF_NOEXIST) == 0) {
		struct target_stats *s = stats_of(index);
		COUNT(s, children_followed, 1);
		/* Until it execs, it runs its parent's binary. */
		struct go_layout *layout = bpf_map_lookup_elem(&go_layouts, &parent_tgid);
		if (layout)
			bpf_map_update_elem(&go_layouts, &child_tgid, layout, BPF_ANY);
	}
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

/* The user buffer a read-like syscall fills: where a request's first bytes
 * land. For recvmsg and readv, the first iovec's. */
static __always_inline __u64 read_buffer(struct pt_regs *regs, long nr)
{
	/* Other syscalls return before reading their registers: a read of
	 * kernel memory costs on every syscall. */
	if (nr != NR_READ && nr != NR_RECVFROM && nr != NR_READV && nr != NR_RECVMSG)
		return 0;
	__u64 arg2 = BPF_CORE_READ(regs, si);
	__u64 iov = 0;
	switch (nr) {
	case NR_READ:
	case NR_RECVFROM:
		return arg2;
	case NR_READV:
		iov = arg2;
		break;
	default: /* NR_RECVMSG */
		/* struct user_msghdr: msg_iov at offset 16 on 64-bit */
		if (bpf_probe_read_user(&iov, sizeof(iov), (void *)(arg2 + 16)))
			return 0;
		break;
	}
	__u64 base = 0;
	if (!iov || bpf_probe_read_user(&base, sizeof(base), (void *)iov))
		return 0;
	return base;
}

/* The calibrating thread starts a measure: it serves the made-up request,
 * and what its state holds from an earlier measure (a thread's state lives
 * as long as it does) is forgotten. In its context, entering a syscall. */
static __always_inline void start_calibration(struct thread_state *st, __u64 now)
{
	st->conn = calibration_cookie;
	st->in_tail = 0;
	st->mode = MODE_USER;
	st->run_start_ns = now;
	st->sched_at_in = 0; /* the slice has no known start: no sizing */
	st->slice_cut_ns = 0;
	st->advance_ns = 0;
	st->debt_ns = 0;
	st->held_ns = 0;
	st->interrupted_ns = 0;
	st->dirty = 0;
	__builtin_memset(&st->pending, 0, sizeof(st->pending));
}

SEC("tp_btf/sys_enter")
int BPF_PROG(on_sys_enter, struct pt_regs *regs, long id)
{
	__u32 tid;
	struct thread_state *st = current_thread(this_cpu(), &tid);
	if (!st)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (tid == calibration_tid && st->conn != calibration_cookie)
		start_calibration(st, now);
	/* After the clock: finding the goroutine is this syscall's cost. */
	follow_goroutine(st);
	if (st->mode == MODE_UNKNOWN) {
		/* Whatever was held back was user time: we are entering now. */
		cut(st, now, false);
		charge(st, st->held_ns, -1);
		st->held_ns = 0;
	} else {
		/* Leaves held_ns at the entry cost taken from the user piece. */
		st->held_ns = 0;
		cut(st, now, true);
	}
	st->mode = MODE_SYSCALL;
	st->syscall_nr = id;
	st->read_buf = capture_bytes ? read_buffer(regs, id) : 0;
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
	__u32 tid;
	struct thread_state *st = current_thread(this_cpu(), &tid);
	if (!st)
		return 0;
	cut(st, bpf_ktime_get_ns(), false);
	if (tid == calibration_tid) {
		calibration_syscall_ns += st->held_ns;
		calibration_syscalls++;
	}
	/* The syscall's whole CPU goes to the request it served, known now.
	 * Entered before the window: its number is unknown. */
	charge(st, st->held_ns, st->mode == MODE_SYSCALL ? st->syscall_nr : 0xfffff);
	st->held_ns = 0;
	st->mode = MODE_USER;
	if (st->wrote) {
		/* What it did up to here was the response; from here on, its tail. */
		flush(st);
		st->wrote = 0;
		st->in_tail = 1;
	}
	return 0;
}

/* Appends a read's bytes to the request's capture, up to capture_bytes: a
 * server may read a request in pieces (Go's net/http first reads a single
 * byte to watch for the peer's close). */
static __always_inline void capture(struct request_record *r, struct thread_state *st, int ret)
{
	__u32 off = r->payload_len;
	if (!st->read_buf || off >= capture_bytes || off >= PAYLOAD_MAX)
		return;
	__u32 room = capture_bytes - off;
	__u32 len = (__u32)ret < room ? (__u32)ret : room;
	if (len == 0 || len > PAYLOAD_MAX)
		return;
	if (bpf_probe_read_user(&r->payload[off], len, (void *)st->read_buf) == 0)
		r->payload_len = off + len;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(on_sock_recv_length, struct sock *sk, int ret, int flags)
{
	if (ret <= 0)
		return 0;
	__u32 tid;
	struct thread_state *st = current_thread(this_cpu(), &tid);
	if (!st)
		return 0;
	__u64 cookie = bpf_get_socket_cookie(sk);
	struct conn_state *c = conn_of(sk, cookie, st->target, tid, PHASE_IDLE, 0);
	if (!c || c->role != ROLE_SERVER)
		return 0;
	/* Reading more of the request it reads costs nothing here; anything
	 * else ends what it served before. */
	if (st->conn != cookie || st->in_tail || c->phase != PHASE_READING)
		leave_with(st, st->conn == cookie ? c : 0);

	if (c->phase != PHASE_READING) {
		/* Data after a response (or after accept): a new request. */
		if (c->phase == PHASE_RESPONDING)
			emit(c, cookie);
		struct request_record *r = &c->rec;
		__builtin_memset(&r->cost, 0, sizeof(r->cost));
		r->bytes_in = 0;
		r->bytes_out = 0;
		r->flags = 0;
		r->tid = tid;
		r->start_ns = bpf_ktime_get_ns();
		r->first_write_ns = 0;
		r->end_ns = 0;
		r->payload_len = 0;
		c->phase = PHASE_READING;
	}
	capture(&c->rec, st, ret);
	__sync_fetch_and_add(&c->rec.bytes_in, ret);
	st->conn = cookie;
	st->handoff_depth = 0;
	st->served = 1;
	note_goroutine(st, cookie);
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(on_sock_send_length, struct sock *sk, int ret, int flags)
{
	if (ret <= 0)
		return 0;
	__u32 tid;
	struct thread_state *st = current_thread(this_cpu(), &tid);
	if (!st)
		return 0;
	__u64 cookie = bpf_get_socket_cookie(sk);
	/* A write on a connection never read from in the window answers a
	 * request that started before it. */
	struct conn_state *c = conn_of(sk, cookie, st->target, tid, PHASE_RESPONDING, REQ_START_UNSEEN);
	if (!c || c->role != ROLE_SERVER)
		return 0;
	if (st->conn != cookie || st->in_tail)
		leave_with(st, st->conn == cookie ? c : 0);
	__u64 now = bpf_ktime_get_ns();
	c->phase = PHASE_RESPONDING;
	if (!c->rec.first_write_ns)
		c->rec.first_write_ns = now;
	c->rec.end_ns = now;
	__sync_fetch_and_add(&c->rec.bytes_out, ret);
	st->conn = cookie;
	st->handoff_depth = 0;
	st->served = 1;
	st->wrote = 1;
	note_goroutine(st, cookie);
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
	if (c->role == ROLE_SERVER) {
		/* Closed by a thread serving it: what it was charged is part of
		 * the last request. */
		__u32 tid;
		struct thread_state *st = current_thread(this_cpu(), &tid);
		if (st && st->conn == cookie)
			flush_to(st, c);
		settle_tail(c);
		if (c->phase == PHASE_RESPONDING) {
			emit(c, cookie);
		} else {
			struct target_stats *s = stats_of(c->rec.target);
			__u64 ns = c->rec.cost.user_ns + kernel_ns_of(&c->rec.cost);
			COUNT(s, dropped_ns, ns);
			COUNT(s, dropped_requests, c->phase == PHASE_READING);
		}
	}
	bpf_map_delete_elem(&conns, &cookie);
	return 0;
}

/* Interrupt time that ran over a target thread: charged to what the thread
 * serves, and remembered so the piece it interrupted is cut short by it. */
static __always_inline void charge_interrupt(struct cpu_state *cpu, __u64 ns, int softirq_vec)
{
	__u32 tid;
	struct thread_state *st = current_thread(cpu, &tid);
	if (!st || !ns)
		return;
	st->interrupted_ns += ns;
	struct cost *to = pending_of(st);
	if (!to)
		charge_unattributed(st, 0, ns);
	else if (softirq_vec >= 0 && softirq_vec < NR_SOFTIRQS)
		to->softirq_ns[softirq_vec] += ns;
	else
		to->irq_ns += ns;
}

static __always_inline bool over_target(struct cpu_state *cpu)
{
	__u32 tid;
	return enabled && cpu && current_target_plus1(cpu, &tid);
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(on_softirq_entry, unsigned int vec)
{
	struct cpu_state *cpu = this_cpu();
	if (!over_target(cpu))
		return 0;
	cpu->softirq_start_ns = bpf_ktime_get_ns();
	cpu->softirq_vec = vec;
	cpu->irq_in_softirq_ns = 0;
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(on_softirq_exit, unsigned int vec)
{
	struct cpu_state *cpu = this_cpu();
	if (!cpu || !cpu->softirq_start_ns)
		return 0;
	__u64 ns = bpf_ktime_get_ns() - cpu->softirq_start_ns;
	cpu->softirq_start_ns = 0;
	/* Hard irqs inside it were charged as irq time already. */
	ns = ns > cpu->irq_in_softirq_ns ? ns - cpu->irq_in_softirq_ns : 0;
	charge_interrupt(cpu, ns, cpu->softirq_vec);
	return 0;
}

static __always_inline void irq_enter(void)
{
	struct cpu_state *cpu = this_cpu();
	if (over_target(cpu))
		cpu->irq_start_ns = bpf_ktime_get_ns();
}

static __always_inline void irq_exit(void)
{
	struct cpu_state *cpu = this_cpu();
	if (!cpu || !cpu->irq_start_ns)
		return;
	__u64 ns = bpf_ktime_get_ns() - cpu->irq_start_ns;
	cpu->irq_start_ns = 0;
	if (cpu->softirq_start_ns)
		cpu->irq_in_softirq_ns += ns;
	charge_interrupt(cpu, ns, -1);
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(on_irq_handler_entry, int irq, void *action)
{
	irq_enter();
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(on_irq_handler_exit, int irq, void *action, int ret)
{
	irq_exit();
	return 0;
}

/* The local APIC timer (x86) is no irq_handler: it has its own tracepoints,
 * attached where the kernel has them. */
SEC("tp_btf/local_timer_entry")
int BPF_PROG(on_local_timer_entry, int vector)
{
	irq_enter();
	return 0;
}

SEC("tp_btf/local_timer_exit")
int BPF_PROG(on_local_timer_exit, int vector)
{
	irq_exit();
	return 0;
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(on_page_fault_user, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	__u32 tid;
	struct thread_state *st = current_thread(this_cpu(), &tid);
	if (!st)
		return 0;
	struct cost *to = pending_of(st);
	if (to)
		to->page_faults++;
	return 0;
}
