/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Target threads and the charging of their time: which task is a target,
 * its state, how its on-CPU time is cut into pieces and charged, and where
 * the charges go.
 *
 * Each target thread's on-CPU time is cut at sched_switch and at syscall
 * entry and exit. Time outside syscalls is user time and goes to the
 * thread's request as it goes. Time inside a syscall is held back until
 * sys_exit and then charged to the request the syscall served, so the read
 * that starts a request pays into that request and not the previous one.
 * Interrupt time is carved out of the piece it interrupted (interrupts.h),
 * so that user + syscalls + softirq + irq = on-CPU time, exactly.
 *
 * A thread charges into its own state (pending) and adds that to its
 * destination, the request or the tail of the connection it serves, only
 * when it turns to another destination or leaves its CPU (flush): most
 * syscalls then cost no connection lookup and no locked add.
 */
#ifndef REQPROF_THREADS_H
#define REQPROF_THREADS_H

#include "conns.h"

/* In the task itself: reached from its task_struct in a few loads, where a
 * hash lookup would hash and compare a key on each of the some twenty
 * events of a request; freed with the task. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_state);
} threads SEC(".maps");

/* A zeroed thread_state to create entries from: too large for the stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thread_state);
} thread_template SEC(".maps");

/* The kernel's syscall entry and exit paths run before sys_enter and after
 * sys_exit fire (and so do the parts of these programs before and after
 * they read the clock), so the clock between the two tracepoints misses
 * them, and they would pass for user time. The collector measures their
 * cost (calibrate.h) and sets it here: that much of the user time before
 * each syscall is charged to it. */
volatile __u64 syscall_overhead_ns;

/* The target index + 1 of a task's process, or 0. */
static __always_inline __u32 target_plus1_of(struct task_struct *task)
{
	__u32 tgid = task->tgid;
	__u32 *target = bpf_map_lookup_elem(&targets, &tgid);
	return target ? *target + 1 : 0;
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

extern void *bpf_rdonly_cast(const void *obj__ign, __u32 btf_id) __ksym;

/* The ns the hypervisor has kept this CPU from running, so far: KVM's
 * per-CPU steal clock, which the host brings up to date each time it runs
 * the CPU again. The kernel leaves steal time out of a task's accounting
 * (sum_exec_runtime, and so CLOCK_THREAD_CPUTIME_ID and utime+stime, with
 * CONFIG_PARAVIRT_TIME_ACCOUNTING), where the programs' clock runs on
 * through it: on the test VM, 1.5% of all CPU time, in bursts of hundreds
 * of µs inside one slice. Each piece leaves it out as it is cut, so that it
 * is no request's. The steal clock sits at a fixed distance from the CPU's
 * run queue, both per-CPU variables (cfg.steal_time_from_rq); read in the
 * current task's context, on its CPU. 0 with no such clock. */
static __always_inline __u64 steal_clock(void)
{
	if (!cfg.steal_time_from_rq || !bpf_core_field_exists(struct cfs_rq, rq))
		return 0;
	struct cfs_rq *cfs = bpf_get_current_task_btf()->se.cfs_rq;
	if (!cfs)
		return 0;
	__u64 rq = (__u64)cfs->rq;
	if (!rq)
		return 0;
	struct kvm_steal_time *steal = bpf_rdonly_cast((void *)(rq + cfg.steal_time_from_rq),
						       bpf_core_type_id_kernel(struct kvm_steal_time));
	return steal->steal;
}

/* ns of the programs' clock from since to now, less what the hypervisor
 * stole in it (steal_clock); *steal_at is the steal clock at since, and
 * becomes its value now. */
static __always_inline __u64 less_stolen(__u64 ns, __u64 *steal_at)
{
	__u64 steal = steal_clock();
	__u64 stolen = steal > *steal_at ? steal - *steal_at : 0;
	*steal_at = steal;
	return stolen < ns ? ns - stolen : 0;
}

/* The thread's on-CPU ns by the programs' clock from the last cut (or its
 * slice's start) to now, less what the hypervisor stole in it; the next
 * piece starts now. */
static __always_inline __u64 run_since_cut(struct thread_state *st, __u64 now)
{
	struct thread_clock *k = &st->clock;
	__u64 ns = now > k->run_start_ns ? now - k->run_start_ns : 0;
	k->run_start_ns = now;
	__u64 net = less_stolen(ns, &k->steal_at_ns);
	if (net != ns) {
		struct target_stats *s = stats_of(st->target);
		COUNT(s, stolen_ns, ns - net);
	}
	return net;
}

/* A run start before any window opened: new_thread makes it the opening. */
#define RUNNING_SINCE_BEFORE_OPENING 1

/* A target thread's state, created now: its on-CPU time running since
 * run_start_ns (0: not on a CPU), the kernel's sum_exec_runtime then being
 * sched_at_in (0: unknown, the slice is not sized). None while its target's
 * window is not open: a target is registered before it is opened (its CPU
 * clock read then), so time before that is never counted. A thread on a
 * CPU since before the opening counts from the opening. */
static __always_inline struct thread_state *new_thread(struct task_struct *task, __u32 target, __u64 run_start_ns, __u64 sched_at_in)
{
	if (target >= MAX_TARGETS)
		return 0;
	__u64 opened_ns = target_opened_ns[target];
	if (!opened_ns)
		return 0;
	if (run_start_ns && run_start_ns < opened_ns) {
		run_start_ns = opened_ns;
		sched_at_in = 0;
	}
	__u32 zero = 0;
	struct thread_state *fresh = bpf_map_lookup_elem(&thread_template, &zero);
	if (!fresh)
		return 0;
	/* The only fields ever set in the template: the rest stays 0. */
	fresh->clock.run_start_ns = run_start_ns;
	fresh->clock.steal_at_ns = run_start_ns ? steal_clock() : 0;
	fresh->clock.sched_at_in = sched_at_in;
	/* Lite: no syscall boundary will ever tell, all is charged as it
	 * comes (charge_lite). */
	fresh->clock.mode = cfg.lite ? MODE_USER : MODE_UNKNOWN;
	fresh->target = target;
	struct target_stats *s = stats_of(target);
	struct thread_state *st = bpf_task_storage_get(&threads, task, fresh, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (st)
		COUNT(s, threads_seen, 1);
	else
		COUNT(s, lost_threads, 1); /* out of memory */
	return st;
}

/* A target thread's state, created on first sight with its on-CPU time
 * running since run_start_ns (0: not on a CPU). */
static __always_inline struct thread_state *thread_of(struct task_struct *task, __u32 target, __u64 run_start_ns)
{
	struct thread_state *st = bpf_task_storage_get(&threads, task, 0, 0);
	return st ? st : new_thread(task, target, run_start_ns, 0);
}

/* The state of a target thread running on this CPU, created on first sight
 * (it was switched in before its target's window opened): its slice began
 * when this CPU last switched it in, by the CPU's record of that switch, so
 * the slice is sized as any other when it began inside the window. Without
 * a record (no switch on this CPU since the programs were attached), it
 * counts from the opening. */
static __always_inline struct thread_state *running_thread_of(struct task_struct *task, __u32 target)
{
	struct thread_state *st = bpf_task_storage_get(&threads, task, 0, 0);
	if (st)
		return st;
	struct cpu_state *cpu = this_cpu();
	if (cpu && cpu->running_tid == task->pid && cpu->running_since_ns)
		return new_thread(task, target, cpu->running_since_ns, cpu->running_sched_at_in);
	return new_thread(task, target, RUNNING_SINCE_BEFORE_OPENING, 0);
}

/* A task's state if it is a target's thread, created on first sight. */
static __always_inline struct thread_state *target_thread(struct task_struct *task, __u64 run_start_ns)
{
	__u32 plus1 = target_plus1_of(task);
	return plus1 ? thread_of(task, plus1 - 1, run_start_ns) : 0;
}

/* The target thread running on this CPU, if any, for events in its context. */
static __always_inline struct thread_state *current_thread(struct cpu_state *cpu, __u32 *tid)
{
	if (!enabled)
		return 0;
	__u32 plus1 = current_target_plus1(cpu, tid);
	if (!plus1)
		return 0;
	return running_thread_of(bpf_get_current_task_btf(), plus1 - 1);
}

/* Where the thread's costs go: its request, the tail of the response it
 * last wrote, or nowhere (unattributed) when it serves no request, given
 * its connection's state c. */
static __always_inline struct cost *destination_in(struct thread_state *st, struct conn_state *c)
{
	if (!c || c->role != ROLE_SERVER)
		return 0;
	return st->serving.in_tail ? &c->tail : &c->rec.cost;
}

/* CPU that served no request. */
static __always_inline void charge_unattributed(struct thread_state *st, __u64 user_ns, __u64 kernel_ns)
{
	st->serving.unattributed_ns += user_ns + kernel_ns;
	struct target_stats *s = stats_of(st->target);
	COUNT(s, unattributed_user_ns, user_ns);
	COUNT(s, unattributed_kernel_ns, kernel_ns);
}

/* The thread's cost to come, for its destination: NULL when it serves no
 * connection, and its CPU is unattributed at once. */
static __always_inline struct cost *pending_of(struct thread_state *st)
{
	/* A pool thread's CPU is held for the job it runs (pools.h). */
	if (!st->serving.conn && !st->serving.setup_sk && !st->handoff.pool_worker)
		return 0;
	st->serving.dirty = 1;
	return &st->serving.pending;
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
	if (!st->serving.dirty)
		return;
	st->serving.dirty = 0;
	struct cost *p = &st->serving.pending;
	struct cost *to = destination_in(st, c);
	if (to)
		add_cost(to, p, true);
	else
		charge_unattributed(st, p->user_ns, kernel_ns_of(p));
	__builtin_memset(p, 0, sizeof(*p));
}

/* Adds what the thread was charged to the setup of the connection it
 * serves the setup of, or to nowhere when that connection has closed. Its
 * waiting is not the request's. */
static __always_inline void flush_setup(struct thread_state *st)
{
	if (!st->serving.dirty)
		return;
	st->serving.dirty = 0;
	struct cost *p = &st->serving.pending;
	struct setup_state *setup = bpf_map_lookup_elem(&setups, &st->serving.setup_sk);
	if (setup)
		add_cost(&setup->cost, p, false);
	else
		charge_unattributed(st, p->user_ns, kernel_ns_of(p));
	__builtin_memset(p, 0, sizeof(*p));
}

static __always_inline void flush(struct thread_state *st)
{
	if (!st->serving.dirty)
		return;
	if (!st->serving.conn && st->handoff.pool_worker)
		return; /* held until its job ends (pools.h) */
	if (st->serving.setup_sk)
		flush_setup(st);
	else
		flush_to(st, bpf_map_lookup_elem(&conns, &st->serving.conn));
}

/* The thread stops serving what it serves: its charges go there, and a
 * tail it was in ends; that of a connection it closed ends the
 * connection. c is its connection's state if the caller has it. */
static __always_inline void leave_with(struct thread_state *st, struct conn_state *c)
{
	if (st->serving.setup_sk) {
		flush_setup(st);
		st->serving.setup_sk = 0;
		return;
	}
	if (!st->serving.dirty && !st->serving.in_tail)
		return;
	if (!c && st->serving.conn)
		c = bpf_map_lookup_elem(&conns, &st->serving.conn);
	if (st->serving.in_tail && c && c->role == ROLE_SERVER && !c->closing) {
		/* Leaving a tail, which is settled into its request at once:
		 * the thread's charges go there directly, as settling would
		 * move them, rather than through the tail (a second round of
		 * locked adds). What other threads left in the tail follows. */
		st->serving.in_tail = 0;
		if (st->serving.dirty) {
			st->serving.dirty = 0;
			struct cost *p = &st->serving.pending;
			struct target_stats *s = stats_of(c->rec.target);
			COUNT(s, between_requests_ns, cpu_ns_of(p));
			add_cost(&c->rec.cost, p, false);
			add_tail(&c->rec.tail, p);
			__builtin_memset(p, 0, sizeof(*p));
		}
		settle_tail(c);
		return;
	}
	flush_to(st, c);
	if (st->serving.in_tail) {
		st->serving.in_tail = 0;
		if (c && c->closing)
			finish_conn(c, st->serving.conn);
		else if (c)
			settle_tail(c);
	}
}

static __always_inline void leave(struct thread_state *st)
{
	leave_with(st, 0);
}

/* Whether syscall nr waits for events on a set of descriptors: where an
 * event loop waits for its next work. */
static __always_inline bool waits_for_events(long nr)
{
	return nr == NR_EPOLL_WAIT || nr == NR_EPOLL_PWAIT || nr == NR_EPOLL_PWAIT2 || nr == NR_POLL ||
	       nr == NR_PPOLL || nr == NR_SELECT || nr == NR_PSELECT6;
}

/* The current thread blocks. A connection it closed ends once it turns
 * to other work (leave_with), which an event loop waiting for events has
 * done: it has nothing left to do, and when idle it may wait for long, or
 * for ever, with the connection's state and last request held. So the
 * connection ends here, and the thread serves nothing until its next
 * work; a thread that blocks elsewhere (a lock, in its exit) is still at
 * its connection's teardown. */
static __always_inline void blocks(struct thread_state *st)
{
	if (!st->serving.in_tail || !st->serving.conn)
		return;
	long nr = st->clock.mode == MODE_SYSCALL ? st->clock.syscall_nr : -1;
	if (cfg.lite) {
		/* No syscall boundaries: the syscall it is in is in its
		 * registers (in a page fault, its error code: at worst, a
		 * teardown ended early). */
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
		nr = regs ? BPF_CORE_READ(regs, orig_ax) : -1;
	}
	if (!waits_for_events(nr))
		return;
	struct conn_state *c = bpf_map_lookup_elem(&conns, &st->serving.conn);
	if (!c || !c->closing)
		return;
	/* Its wait up to here is the teardown's, as a wait that returns at
	 * once is; what it does once woken is no connection's. */
	if (!cfg.lite) {
		charge(st, st->clock.held_ns, nr);
		st->clock.held_ns = 0;
	}
	leave_with(st, c);
	st->serving.conn = 0;
}

/* The thread turns to conn (its request, or with in_tail the tail after
 * its response), having left what it served before. */
static __always_inline void turn_to(struct thread_state *st, __u64 conn, __u32 in_tail)
{
	leave(st);
	st->serving.conn = conn;
	st->serving.in_tail = in_tail;
}

/* The thread accepted sk, a connection the targets serve: it serves its
 * setup until it turns to a request, and so does a thread or process it
 * makes meanwhile (inherit_setup). */
static __always_inline void serve_setup(struct thread_state *st, struct sock *sk)
{
	leave(st);
	__u32 zero = 0;
	struct setup_state *fresh = bpf_map_lookup_elem(&setup_template, &zero);
	if (!fresh)
		return;
	__u64 key = (__u64)sk;
	fresh->target = st->target;
	/* A socket's address is reused once it is freed: a stale entry is
	 * replaced. */
	if (bpf_map_update_elem(&setups, &key, fresh, BPF_ANY))
		return;
	st->serving.conn = 0;
	st->serving.in_tail = 0;
	st->serving.setup_sk = key;
	st->handoff.depth = 0;
	if (!watch_setups)
		watch_setups = 1;
}

/* parent made child, a thread or a process: a child of a thread serving a
 * connection's setup serves it too, until it first reads the connection. */
static __always_inline void inherit_setup(struct task_struct *parent, struct task_struct *child)
{
	struct thread_state *from = bpf_task_storage_get(&threads, parent, 0, 0);
	if (!from || !from->serving.setup_sk)
		return;
	__u32 plus1 = target_plus1_of(child);
	if (!plus1)
		return;
	struct thread_state *st = thread_of(child, plus1 - 1, 0);
	if (!st)
		return;
	st->serving.setup_sk = from->serving.setup_sk;
}

/* Lite mode: ns of the current task's time, split into user and kernel
 * time by the share of system time in the kernel's own accounting of it
 * (utime and stime, whole ticks each charged to the mode the tick found
 * it in), over its life: an estimate, sampled at the tick. The kernel part
 * is syscall time with no syscall named. */
static __always_inline void charge_lite(struct thread_state *st, __u64 ns)
{
	if (!ns)
		return;
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 user = task->utime, system = task->stime;
	/* In 1/1024ths: system << 10 overflows after 200 days of CPU. */
	__u64 share = user + system ? (system << 10) / (user + system) : 0;
	__u64 kernel_ns = (ns * share) >> 10;
	struct cost *to = pending_of(st);
	if (!to) {
		charge_unattributed(st, ns - kernel_ns, kernel_ns);
		return;
	}
	to->user_ns += ns - kernel_ns;
	/* Where add_cost takes syscall time of no named syscall from. */
	to->syscall_ns += kernel_ns;
	to->other_syscall_ns += kernel_ns;
}

/* Charges or holds back ns of the thread's time in its current mode:
 * user time is charged now, time in (or possibly in) a syscall is held back
 * for the syscall's boundary. Debt from an earlier slice is paid first. */
static __always_inline void account(struct thread_state *st, __u64 ns)
{
	struct thread_clock *k = &st->clock;
	__u64 paid = ns < k->debt_ns ? ns : k->debt_ns;
	k->debt_ns -= paid;
	ns -= paid;
	if (cfg.lite)
		charge_lite(st, ns);
	else if (k->mode == MODE_USER)
		charge(st, ns, -1);
	else
		k->held_ns += ns;
}

/* Waiting is charged when the thread is back on a CPU, to what it serves. */
static __always_inline void charge_wait(struct thread_state *st, __u64 runqueue_ns)
{
	struct cost *to = pending_of(st);
	if (to) {
		to->runqueue_ns += runqueue_ns;
		/* A pool thread sleeps between jobs, for none of them. */
		if (st->serving.conn || !st->handoff.pool_worker)
			to->offcpu_ns += st->waits.offcpu_pending_ns;
	}
	st->waits.offcpu_pending_ns = 0;
}

/* The thread is back on a CPU at now: its wait for one ends, and with the
 * blocked time before it is counted for its target. Returns the wait. */
static __always_inline __u64 count_waits(struct thread_state *st, __u64 now)
{
	struct target_stats *s = stats_of(st->target);
	__u64 since = st->waits.runnable_since_ns;
	__u64 runqueue_ns = since && now > since ? now - since : 0;
	COUNT(s, runqueue_ns, runqueue_ns);
	COUNT(s, offcpu_ns, st->waits.offcpu_pending_ns);
	return runqueue_ns;
}

/* ... and is charged to what it serves then. */
static __always_inline void end_waits(struct thread_state *st, __u64 runqueue_ns)
{
	if (st->waits.runnable_since_ns) {
		charge_wait(st, runqueue_ns);
		st->waits.runnable_since_ns = 0;
	}
}

/* The current thread runs with no slice open at now: the programs did not
 * see it switched in. A switch runs sched_switch in the context of the
 * task leaving the CPU, and no tracepoint reaches the programs there when
 * the kernel does not trace that task (on the test VM, a system agent's
 * threads: each time one preempted a busy Node server, the server ran on
 * with no slice open, none of it counted, for up to 550 ms, 664 requests
 * in a row at 0 user time). The slice is opened now, as if switched in
 * when it began: the kernel's sum_exec_runtime has not moved while the
 * thread was off its CPU (end_slice kept its value), so what it has
 * counted since is the thread's run since the switch-in, up to the
 * kernel's last update of it (at most a tick ago). That run goes to the
 * piece starting then, in the mode the thread was in; what the kernel adds
 * after, the slice's sizing adds at its end. With no accounting to go by
 * (a thread first seen by its wake-up while it ran), the slice starts now,
 * unsized. */
static __always_inline void open_unseen_slice(struct thread_state *st, __u64 now)
{
	struct thread_clock *k = &st->clock;
	__u64 ran = 0;
	if (k->sched_at_in) {
		__u64 sum = bpf_get_current_task_btf()->se.sum_exec_runtime;
		ran = sum > k->sched_at_in ? sum - k->sched_at_in : 0;
	}
	k->run_start_ns = now > ran ? now - ran : now;
	/* The kernel's count is net of steal time already. */
	k->steal_at_ns = steal_clock();
	struct target_stats *s = stats_of(st->target);
	COUNT(s, unseen_switch_ins, 1);
	end_waits(st, count_waits(st, k->run_start_ns));
}

/* Takes the on-CPU time since the last cut, by the clock, less the
 * interrupts inside it, which were charged when they ended. Entering a
 * syscall from user mode, the syscall entry cost inside the user piece is
 * moved to the syscall. Only ever in the thread's own context: it is on a
 * CPU, and its slice is open, or opened now. */
static __always_inline void cut(struct thread_state *st, __u64 now, bool entering_syscall)
{
	struct thread_clock *k = &st->clock;
	if (!k->run_start_ns)
		open_unseen_slice(st, now);
	__u64 ns = run_since_cut(st, now);
	k->slice_cut_ns += ns;
	__u64 interrupted = k->interrupted_ns < ns ? k->interrupted_ns : ns;
	k->interrupted_ns = 0;
	ns -= interrupted;
	if (entering_syscall && k->mode == MODE_USER) {
		/* The whole entry cost, even when the clock saw a shorter user
		 * piece: between two syscalls of a tight loop it mostly does,
		 * as the kernel's CPU clock runs a few ns a syscall ahead of
		 * this one (which the slice's sizing would otherwise hand to its
		 * last piece). What is charged beyond the clock is counted with
		 * the slice's pieces, so that the sizing takes it back when the
		 * kernel's accounting does not cover it. */
		__u64 entry = syscall_overhead_ns;
		if (ns < entry) {
			k->advance_ns += entry - ns;
			k->slice_cut_ns += entry - ns;
			ns = entry;
		}
		account(st, ns - entry);
		k->held_ns = entry;
		return;
	}
	account(st, ns);
}

/* Starts a slice on a CPU at now (0: off any CPU), with the kernel's
 * sum_exec_runtime at its start (0: unknown, no sizing). Off a CPU, that
 * is the sum when it left, which stays the sum at its next switch-in. */
static __always_inline void start_slice(struct thread_clock *k, __u64 now, __u64 sched_at_in)
{
	k->run_start_ns = now;
	k->steal_at_ns = now ? steal_clock() : 0;
	k->sched_at_in = sched_at_in;
	k->slice_cut_ns = 0;
	k->advance_ns = 0;
	k->interrupted_ns = 0;
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
	struct thread_clock *k = &st->clock;
	/* Switched in unseen, and no event of it since: the whole slice is
	 * its last piece. */
	if (!k->run_start_ns)
		open_unseen_slice(st, now);
	bool known = k->sched_at_in && sum_exec_runtime >= k->sched_at_in;
	__u64 slice = sum_exec_runtime - k->sched_at_in;
	if (!known) {
		cut(st, now, false);
		/* No accounting to size against: what was charged ahead of the
		 * clock is paid back from the next pieces. */
		k->debt_ns += k->advance_ns;
	} else {
		/* The slice's last piece, sized before it is charged. */
		__u64 ns = run_since_cut(st, now);
		__u64 interrupted = k->interrupted_ns < ns ? k->interrupted_ns : ns;
		__u64 total = k->slice_cut_ns + ns;
		k->interrupted_ns = 0;
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
			taken = excess < k->held_ns ? excess : k->held_ns;
			k->held_ns -= taken;
			k->debt_ns += excess - taken;
		}
		account(st, ns);
	}
	start_slice(k, 0, sum_exec_runtime);
}

#endif /* REQPROF_THREADS_H */
