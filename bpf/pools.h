/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Work a runtime hands to its own pool threads: libuv's (Node's crypto,
 * zlib, fs and dns). The loop thread does all the I/O and queues a job; a
 * pool thread that never touches a socket runs it and hands it back. What
 * the kernel sees of this (a futex wake, an eventfd write that libuv skips
 * while one is pending) says neither where each job begins and ends nor
 * whose it is, so libuv is read where it says so itself, by two uprobes,
 * attached only in the target's processes:
 *   - a job is queued (uv_queue_work, and uv__work_submit where the binary
 *     has the symbol): the thread queuing it serves a request; the job,
 *     known by its struct uv__work's address, is that request's;
 *   - a job is done (uv_async_send on its loop's wq_async): a pool thread
 *     has just put the job it ran at the tail of its loop's done queue,
 *     under the loop's wq_mutex, which it holds. What the thread ran since
 *     its last job ended is the job's, and goes to its request.
 * So a pool thread is one that completes jobs a serving thread queued (by
 * what it does, not what it is called): it is flagged at its first, and
 * from then on its CPU is held in its own state until a job ends. A thread
 * that completes a job no request queued (a timer's, a job queued between
 * requests), or whose request is over, leaves that CPU unattributed, under
 * its name; so does a runtime's helper (V8's, a GC), which completes none.
 * Several jobs at once, more jobs than threads, a thread that takes the
 * next job without sleeping: each is known by its own address, exactly.
 *
 * The offsets are libuv 1.x's public ABI on x86-64 (uv.h): the struct
 * layouts its embedders compile against, the same in every 1.x release.
 * No thread outside a pool pays anything for this: the two probes run
 * only at a job's queuing and end, and a pool thread's flag is read only
 * where a thread serves nothing.
 */
#ifndef REQPROF_POOLS_H
#define REQPROF_POOLS_H

#include "selfcost.h"

/* Jobs queued on a target's pool and not yet done. Least
 * recently used go first: a job cancelled, or queued before a window
 * whose thread never ends it, is never deleted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_POOL_JOBS);
	__type(key, struct pool_job_key);
	__type(value, struct pool_job);
} pool_jobs SEC(".maps");

/* struct uv_loop_s: its done queue (struct uv__queue wq: next, prev) and
 * the async handle its pool threads signal when they add to it. */
#define UV_LOOP_WQ_TAIL 128 /* wq.prev */
#define UV_LOOP_WQ_ASYNC 176
/* struct uv_handle_s: its loop. */
#define UV_HANDLE_LOOP 8
/* struct uv_work_s: its struct uv__work. */
#define UV_WORK_REQ 88
/* struct uv__work: its loop, and its link in a queue. */
#define UV__WORK_LOOP 16
#define UV__WORK_WQ 24

/* The current thread queues job work (a struct uv__work's address): the
 * request it serves owns it. True when it is a target's thread. */
static __always_inline bool pool_job_queued(__u64 work)
{
	__u32 tid;
	struct thread_state *st = current_thread(this_cpu(), &tid);
	if (!st)
		return false;
	count_pool_probe(st);
	/* Between requests (a timer's work, a tail), the job is no
	 * request's. */
	if (!st->serving.conn || st->serving.in_tail)
		return true;
	struct conn_state *c = served_conn(st->serving.conn);
	if (!c)
		return true;
	struct pool_job_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .work = work};
	struct pool_job job = {.conn = st->serving.conn, .start_ns = c->rec.start_ns};
	bpf_map_update_elem(&pool_jobs, &key, &job, BPF_ANY);
	struct target_stats *s = stats_of(st->target);
	COUNT(s, pool_jobs_queued, 1);
	return true;
}

/* The struct uv__work a pool thread signalling handle has just finished:
 * the tail of the done queue of handle's loop, if handle is that loop's
 * wq_async; else 0. */
static __always_inline __u64 finished_work(__u64 handle)
{
	__u64 loop = 0, tail = 0, work_loop = 0;
	if (bpf_probe_read_user(&loop, sizeof(loop), (void *)(handle + UV_HANDLE_LOOP)) || !loop ||
	    loop + UV_LOOP_WQ_ASYNC != handle)
		return 0;
	if (bpf_probe_read_user(&tail, sizeof(tail), (void *)(loop + UV_LOOP_WQ_TAIL)) || !tail)
		return 0;
	__u64 work = tail - UV__WORK_WQ;
	if (bpf_probe_read_user(&work_loop, sizeof(work_loop), (void *)(work + UV__WORK_LOOP)) || work_loop != loop)
		return 0;
	return work;
}

/* The current thread signals handle: if it is a pool thread handing back
 * a job, what it ran since its last one goes to the job's request. True
 * when it is a target's thread. */
static __always_inline bool pool_job_done(__u64 handle)
{
	__u32 tid;
	struct thread_state *st = current_thread(this_cpu(), &tid);
	if (!st)
		return false;
	/* A pool thread never serves a connection; one that does is none. */
	__u64 work = st->serving.conn || st->serving.setup_sk ? 0 : finished_work(handle);
	if (!work) {
		count_pool_probe(st); /* another async handle's send */
		return true;
	}
	/* Up to here, the job's, this probe's run with it. */
	cut(st, bpf_ktime_get_ns(), false);
	st->handoff.pool_worker = 1;
	count_pool_probe(st);
	struct pool_job_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .work = work};
	struct pool_job *job = bpf_map_lookup_elem(&pool_jobs, &key);
	struct conn_state *c = 0;
	if (job) {
		c = served_conn(job->conn);
		if (c && c->rec.start_ns != job->start_ns)
			c = 0; /* its request is over: the job outlived it */
		bpf_map_delete_elem(&pool_jobs, &key);
	}
	struct target_stats *s = stats_of(st->target);
	if (c) {
		COUNT(s, pool_jobs_done, 1);
		COUNT(s, pool_ns, cpu_ns_of(&st->serving.pending));
	}
	flush_to(st, c);
	return true;
}

#endif /* REQPROF_POOLS_H */
