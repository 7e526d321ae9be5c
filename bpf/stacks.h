/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Stack samples: where inside a request its CPU goes. The collector opens
 * a software cpu-clock perf event on each CPU (999 Hz by default) with
 * sample_stack attached; when it fires over a target thread, the program
 * sends the thread's kernel and user stacks with the request the thread
 * runs for, found by the same rules its CPU is charged by: the
 * connection its goroutine serves (a Go thread), else the connection the
 * thread serves, and that connection's open request. The collector joins
 * each sample to the request's record, which comes after it, by (conn,
 * start_ns).
 *
 * The program runs from the timer interrupt, over whatever the CPU was
 * doing, possibly another of these programs halfway: it only reads state,
 * never writes a thread's or a connection's, and fills a buffer of its own.
 *
 * The stacks go in the record itself (bpf_get_stack), not as ids of a
 * stack-trace map (bpf_get_stackid): that map is a table of hash buckets
 * without chains, so a stack whose bucket another holds is lost (-EEXIST),
 * which happens to a few percent of new stacks once a few percent of the
 * buckets are taken, or, with BPF_F_REUSE_STACKID, replaces the other and
 * changes what earlier samples said. The collector deduplicates stacks as
 * they arrive instead, in memory it bounds; what the ring buffer carries is
 * at most 3 KB a sample (2 KB of native frames, 1 KB of interpreter
 * frames: interp.h), some 6 MB/s at 999 Hz on two busy CPUs.
 */
#ifndef REQPROF_STACKS_H
#define REQPROF_STACKS_H

#include "goroutines.h"
#include "interp.h"

/* A stack sample being filled: too large for the stack. Its own, not
 * chunk_scratch: the sampling program interrupts the others. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_sample);
} stack_scratch SEC(".maps");

/* The goroutine id of a Go thread's running goroutine, as current_goid
 * reads it, but only for a thread whose layout its own events already
 * looked up (state is not written from here); 0 otherwise. */
static __always_inline __u64 sampled_goid(struct thread_state *st)
{
	struct thread_go *g = &st->go;
	if (g->kind != GO_YES)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 gp = 0, goid = 0;
	if (bpf_probe_read_user(&gp, sizeof(gp), (void *)(task->thread.fsbase + g->tls_offset)) || !gp)
		return 0;
	if (bpf_probe_read_user(&goid, sizeof(goid), (void *)(gp + g->goid_offset)))
		return 0;
	return goid;
}

/* The connection whose request the thread's CPU goes to now: its
 * goroutine's, as follow_goroutine would take up at the next syscall or
 * switch, else the thread's own. */
static __always_inline __u64 sampled_conn(struct thread_state *st)
{
	__u64 goid = sampled_goid(st);
	if (goid) {
		struct goroutine_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .goid = goid};
		__u64 *served = bpf_map_lookup_elem(&goroutines, &key);
		if (served)
			return *served;
	}
	return st->serving.conn;
}

/* Fills in which request a sample ran for: the open request of the
 * connection it serves, which is where its CPU is charged (a tail after a
 * response is settled into that request too). None when it serves no
 * served connection, or one that has no request yet. */
static __always_inline void sample_request(struct stack_sample *s, struct thread_state *st)
{
	s->conn = 0;
	s->start_ns = 0;
	if (!st)
		return;
	__u64 conn = sampled_conn(st);
	if (!conn)
		return;
	struct conn_state *c = bpf_map_lookup_elem(&conns, &conn);
	if (!c || c->role != ROLE_SERVER || c->phase == PHASE_IDLE)
		return;
	s->conn = conn;
	s->start_ns = c->rec.start_ns;
	s->flags |= SAMPLE_IN_REQUEST;
	if (c->rec.flags & REQ_START_UNSEEN)
		s->flags |= SAMPLE_START_UNSEEN;
}

/* The target of the task running on this CPU, + 1, or 0: the per-CPU
 * answer switch_in left when it is for this task now, else a lookup. Read
 * only: the program may have interrupted one writing it. */
static __always_inline __u32 sampled_target_plus1(__u32 tid, __u32 tgid)
{
	struct cpu_state *cpu = this_cpu();
	if (cpu && cpu->generation == targets_generation && cpu->tid == tid)
		return cpu->target_plus1;
	__u32 *target = bpf_map_lookup_elem(&targets, &tgid);
	return target ? *target + 1 : 0;
}

static __always_inline void sample_stacks(struct perf_sample_ctx *ctx)
{
	if (!enabled)
		return;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid, tgid = pid_tgid >> 32;
	if (!tid) /* the idle task */
		return;
	__u32 plus1 = sampled_target_plus1(tid, tgid);
	if (!plus1)
		return;
	__u32 zero = 0;
	struct stack_sample *s = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!s)
		return;
	s->kind = RECORD_STACK;
	s->target = plus1 - 1;
	s->tgid = tgid;
	s->tid = tid;
	s->flags = 0;
	/* A thread with no state yet has had no event since attach: it
	 * serves nothing reqprof knows of. */
	struct thread_state *thread = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
	sample_request(s, thread);

	/* The kernel's frames only when the interrupt came in the kernel
	 * (ring 0); in user mode there are none to walk. */
	long kernel_bytes = 0;
	if ((ctx->regs.cs & 3) == 0) {
		s->flags |= SAMPLE_KERNEL_MODE;
		kernel_bytes = bpf_get_stack(ctx, s->ips, STACK_DEPTH * sizeof(__u64), 0);
		if (kernel_bytes < 0)
			kernel_bytes = 0;
	}
	__u32 kernel_frames = (__u64)kernel_bytes / sizeof(__u64);
	if (kernel_frames > STACK_DEPTH)
		kernel_frames = STACK_DEPTH;
	/* In the kernel, the user stack is where the thread entered it. */
	long user_bytes = bpf_get_stack(ctx, &s->ips[kernel_frames], STACK_DEPTH * sizeof(__u64), BPF_F_USER_STACK);
	if (user_bytes < 0)
		user_bytes = 0;
	__u32 user_frames = (__u64)user_bytes / sizeof(__u64);
	if (user_frames > STACK_DEPTH)
		user_frames = STACK_DEPTH;
	s->kernel_frames = kernel_frames;
	s->user_frames = user_frames;
	/* The user registers, saved where the thread entered the kernel (or
	 * was interrupted in user mode). */
	s->user_stack_top = 0;
	struct pt_regs *user = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	if (user_frames && user)
		bpf_probe_read_user(&s->user_stack_top, sizeof(s->user_stack_top), (void *)user->sp);

	sample_interp(s, kernel_frames + user_frames, thread);

	struct target_stats *st = stats_of(s->target);
	__u64 size = __builtin_offsetof(struct stack_sample, ips) +
		     (kernel_frames + user_frames + 2 * s->interp_frames) * sizeof(__u64);
	if (size > sizeof(*s))
		return;
	COUNT(st, stack_samples, 1);
	if (bpf_ringbuf_output(&requests, s, size, RECORD_FLAGS))
		COUNT(st, lost_stack_samples, 1);
}

#endif /* REQPROF_STACKS_H */
