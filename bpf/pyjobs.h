/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Work a Python server hands to its pool threads: FastAPI's `def`
 * endpoints on anyio's worker threads, asyncio's run_in_executor and
 * to_thread. The loop thread reads and writes every connection; a task
 * puts a job in a queue and a pool thread that never touches a socket runs
 * it, then hands the result back through the loop's self-pipe. The kernel
 * sees a futex wake, but not whose: the loop may have read several
 * requests in the turn whose task hands the job over, and it wakes pool
 * threads for the GIL as well. So the interpreter is read where it says
 * so itself, with the layout of its release (struct py_layout, from the
 * collector):
 *   - a job is handed over: a Python thread wakes a thread of its process
 *     that never served a connection, while holding the GIL (a lock
 *     released from Python code; passing the GIL on, it holds none). The
 *     job is the running task's, known by the frame of its outermost
 *     coroutine (py_task_root), which lives as long as the task does;
 *   - the pool thread runs it, its CPU held in its own state, and ends it
 *     when it writes to a Unix socket (the loop's self-pipe: the result
 *     handed back). That CPU goes to the job's entry in py_jobs;
 *   - the task writes its response: the frame of its outermost coroutine
 *     names its entry, whose CPU goes to the request being answered.
 *     The response may go first: the pool thread lets the GIL go to
 *     write to the self-pipe, and the loop, woken or preempting it, can
 *     answer before that write returns. The entry then names the request,
 *     and the job's end delivers to it (py_job_done), not to a later task
 *     whose outermost frame lies where this one's did (CPython reuses
 *     frames: 4% of jobs at 8 connections under FastAPI went that way).
 * What a pool thread runs between jobs (its queue, the GIL's hand-over)
 * is no request's: it stays unattributed, under the thread's name. A job
 * taken without sleeping (no wake to see) goes, as an estimate, to the
 * next response whose task had no job ended (py_claim). A task that hands
 * a job over and writes from another task (a streamed response's) leaves
 * that job unclaimed: unattributed (the collector counts it from
 * pool_held_ns less pool_claimed_ns). Threads of other processes, and of a
 * Python process outside its pool's hand-offs, pay a flag test.
 */
#ifndef REQPROF_PYJOBS_H
#define REQPROF_PYJOBS_H

#include "selfcost.h"

/* py_job.claimant: no socket cookie is all ones. */
#define PY_JOB_ENDED (~0ULL)

/* Per Python process whose pool jobs are followed: its layout. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGET_PROCESSES);
	__type(key, __u32); /* tgid */
	__type(value, struct py_layout);
} py_layouts SEC(".maps");

/* Python pool jobs ended and not yet claimed by their request. Least
 * recently used go first: a task that never writes a response never
 * claims its jobs. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_PY_JOBS);
	__type(key, struct py_job_key);
	__type(value, struct py_job);
} py_jobs SEC(".maps");

/* A zeroed py_job to create entries from: too large for the stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_job);
} py_job_template SEC(".maps");

/* Jobs a target's pool threads ended unseen, into its orphan entries,
 * and no response claimed yet (pyjobs.h): a response looks for one only
 * while there are some. */
volatile __s64 py_orphan_jobs[MAX_TARGETS];

/* The layout of the current thread's interpreter: NULL when its process
 * is no Python process whose pool jobs are followed. Looked up once a
 * thread, and kept in its state. */
static __always_inline struct py_layout *py_layout_of(struct thread_state *st)
{
	if (st->py.kind == PY_NOT)
		return 0;
	if (st->py.kind == PY_UNKNOWN) {
		__u32 tgid = bpf_get_current_pid_tgid() >> 32;
		struct py_layout *l = bpf_map_lookup_elem(&py_layouts, &tgid);
		if (!l) {
			st->py.kind = PY_NOT;
			return 0;
		}
		st->py.layout = *l;
		st->py.kind = PY_YES;
	}
	return &st->py.layout;
}

/* The frame of the outermost coroutine of the task the thread whose
 * thread state is tstate runs, in the current process: the coroutine
 * frames nearest the innermost frame, up to the first frame that is none
 * (the event loop's, which resumed the task). 0 when it runs no task, or
 * the chain is deeper than MAX_PY_FRAMES. A global function, verified
 * once for its callers. */
__attribute__((noinline)) __u64 py_task_root(struct py_layout *l, __u64 tstate)
{
	if (!l || !tstate)
		return 0;
	__u64 cframe = 0, frame = 0, root = 0;
	if (bpf_probe_read_user(&cframe, sizeof(cframe), (void *)(tstate + l->tstate_cframe)) || !cframe)
		return 0;
	if (bpf_probe_read_user(&frame, sizeof(frame), (void *)(cframe + l->cframe_current)))
		return 0;
	/* A frame's link and its owner, read at once: each release's owner
	 * lies within PY_FRAME_SPAN bytes of the link (pylayout_test.go). */
	__u32 owner_at = (l->frame_owner - l->frame_previous) & (PY_FRAME_SPAN - 1);
	for (int i = 0; i < MAX_PY_FRAMES && frame; i++) {
		__u8 span[PY_FRAME_SPAN];
		if (bpf_probe_read_user(span, sizeof(span), (void *)(frame + l->frame_previous)))
			return 0;
		if (span[owner_at] == l->owner_generator)
			root = frame;
		else if (root)
			return root;
		frame = *(__u64 *)span;
	}
	return 0;
}

/* Jobs a pool thread took unseen (py_job_sends) end in one of
 * PY_ORPHAN_SLOTS entries of their own, whose roots no frame has (frames
 * are 8-byte aligned, these are odd). */
#define PY_ORPHAN_SLOTS 8

static __always_inline __u64 py_orphan_root(__u32 slot)
{
	return 1 + 2 * slot;
}

/* The root of an orphan entry: with want_oldest, the one holding the job
 * ended unseen longest ago (0 when none holds one), to be claimed; else
 * one that holds none, for the next to end in. */
static __always_inline __u64 py_orphan_pick(bool want_oldest)
{
	struct py_job_key key = {.tgid = bpf_get_current_pid_tgid() >> 32};
	__u64 pick = 0, oldest = ~0ULL;
	for (__u32 slot = 0; slot < PY_ORPHAN_SLOTS; slot++) {
		key.root = py_orphan_root(slot);
		struct py_job *job = bpf_map_lookup_elem(&py_jobs, &key);
		bool held = job && job->jobs;
		if (!want_oldest && !held)
			return key.root;
		if (want_oldest && held && job->ended_ns < oldest) {
			oldest = job->ended_ns;
			pick = key.root;
		}
	}
	if (want_oldest)
		return pick; /* 0: none held */
	return py_orphan_root(0); /* all held: it joins the first */
}

/* The entry of the jobs of the task whose outermost coroutine frame is
 * root, in the current process, created if need be; NULL when the map
 * is full. */
static __always_inline struct py_job *py_job_of(__u64 root)
{
	struct py_job_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .root = root};
	struct py_job *job = bpf_map_lookup_elem(&py_jobs, &key);
	if (job)
		return job;
	__u32 zero = 0;
	struct py_job *fresh = bpf_map_lookup_elem(&py_job_template, &zero);
	if (fresh)
		bpf_map_update_elem(&py_jobs, &key, fresh, BPF_NOEXIST);
	return bpf_map_lookup_elem(&py_jobs, &key);
}

/* A response claimed job's entry before its job ended: the job's end
 * delivers to that request. */
static __always_inline bool py_claimed_early(struct py_job *job)
{
	return job->claimant && job->claimant != PY_JOB_ENDED;
}

/* What the thread was charged since it last turned elsewhere goes to
 * job, held for the request that claims it. */
static __always_inline void py_hold(struct thread_state *st, struct py_job *job)
{
	if (!st->serving.dirty)
		return;
	st->serving.dirty = 0;
	struct cost *p = &st->serving.pending;
	struct target_stats *s = stats_of(st->target);
	COUNT(s, pool_held_ns, cpu_ns_of(p));
	add_cost(&job->cost, p, true);
	__builtin_memset(p, 0, sizeof(*p));
}

/* In the waker's context: Python thread waker (tid waker_tid) wakes p. If
 * that hands p a job of its pool, p is told which task's, to take up when
 * it runs. True when it did. */
static __always_inline bool py_hand_off(struct thread_state *waker, __u32 waker_tid, struct task_struct *p)
{
	struct py_layout *l = py_layout_of(waker);
	if (!l)
		return false;
	if ((__u32)p->pid == waker_tid || (__u32)p->tgid != bpf_get_current_pid_tgid() >> 32)
		return false;
	struct thread_state *st = bpf_task_storage_get(&threads, p, 0, 0);
	if (st && st->serving.served)
		return false; /* it serves connections itself */
	/* Who holds the GIL: passing it on, the waker has let it go. */
	__u64 tstate = 0, holder = 0;
	if (bpf_probe_read_user(&tstate, sizeof(tstate), (void *)l->tstate_current) || !tstate)
		return false;
	if (bpf_probe_read_user(&holder, sizeof(holder), (void *)(tstate + l->tstate_native_tid)) ||
	    holder != waker_tid)
		return false;
	waker->py.tstate = tstate;
	__u64 root = py_task_root(l, tstate);
	if (!root)
		return false;
	if (!st)
		st = new_thread(p, waker->target, 0, 0); /* asleep since before the window */
	if (!st)
		return false;
	st->handoff.py_root_pending = root;
	waker->py.handed = 1;
	/* The task's step that handed the job over ran on the waker since
	 * its last read, write or poll: the task's too, with its job. */
	struct py_job *job = waker->serving.setup_sk ? 0 : py_job_of(root);
	if (job && py_claimed_early(job)) {
		/* A response claimed it and no job of it ended since: that
		 * task is done, and a new one's frame lies where its did. */
		struct py_job_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .root = root};
		bpf_map_delete_elem(&py_jobs, &key);
		job = py_job_of(root);
	}
	if (job)
		py_hold(waker, job);
	waker->loop.stepping = 1;
	return true;
}

/* Back on a CPU, a pool thread takes up the job it was handed, unless it
 * runs one (woken again for it: a queue wakes its taker once for the
 * item, once more for the queue's lock). What it ran since its last job
 * ended was its pool's own, no request's. */
static __always_inline void py_take_job(struct thread_state *st)
{
	struct thread_handoff *h = &st->handoff;
	if (!h->py_root_pending)
		return;
	__u64 root = h->py_root_pending;
	h->py_root_pending = 0;
	if (h->py_root == root)
		return;
	/* Woken for another task's job while it holds one it never ended:
	 * on a queue its pool shares (a ThreadPoolExecutor's), another
	 * thread took that one first, and it slept again without running
	 * it. What it ran since it took it was its pool's own. */
	if (!st->serving.conn)
		flush_to(st, 0);
	h->py_root = root;
	h->pool_worker = 1;
	/* A task's next job runs: its response, if it goes first, waits
	 * for this one's end too. */
	struct py_job_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .root = root};
	struct py_job *job = bpf_map_lookup_elem(&py_jobs, &key);
	if (job && job->claimant == PY_JOB_ENDED)
		job->claimant = 0;
	struct target_stats *s = stats_of(st->target);
	COUNT(s, pool_jobs_queued, 1);
}

/* The jobs of entry key (job) are the request's being answered on c. */
static __always_inline void py_claim_entry(struct thread_state *st, struct conn_state *c, struct py_job_key *key,
					   struct py_job *job)
{
	__u64 ns = cpu_ns_of(&job->cost);
	add_cost(&c->rec.cost, &job->cost, true);
	struct target_stats *s = stats_of(st->target);
	COUNT(s, pool_jobs_done, job->jobs);
	COUNT(s, pool_ns, ns);
	COUNT(s, pool_claimed_ns, ns);
	bpf_map_delete_elem(&py_jobs, key);
}

/* The pool thread's job is over (its result handed back): its CPU since
 * it took the job up goes to the job's entry, for its request to claim. */
static __always_inline void py_job_done(struct thread_state *st)
{
	struct thread_handoff *h = &st->handoff;
	struct py_job_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .root = h->py_root};
	struct py_job *job = py_job_of(h->py_root);
	h->py_ending = 0;
	h->py_root = 0;
	if (!job) {
		flush_to(st, 0);
		return;
	}
	if (!job->ended_ns)
		job->ended_ns = bpf_ktime_get_ns();
	__sync_fetch_and_add(&job->jobs, 1);
	py_hold(st, job);
	/* One atomic exchange against the response's compare-and-swap
	 * (py_claim): whichever comes second delivers. */
	__u64 claimant = __sync_lock_test_and_set(&job->claimant, PY_JOB_ENDED);
	if (!claimant || claimant == PY_JOB_ENDED)
		return; /* for its response to claim */
	struct conn_state *c = served_conn(claimant);
	if (c && c->rec.start_ns == job->claimant_start_ns)
		py_claim_entry(st, c, &key, job);
	else
		bpf_map_delete_elem(&py_jobs, &key); /* its request is over: unattributed */
}

/* A pool thread running a job writes to socket sk: to a Unix socket that
 * serves nothing, it hands its result back to the loop's self-pipe. The
 * job ends with the syscall, whose CPU is the job's (lite mode has no
 * syscall exit: at once). */
static __always_inline void py_job_sends(struct thread_state *st, struct sock *sk)
{
	/* libuv's pool threads are pool workers too: only a Python
	 * process's count here. */
	if (!st->handoff.pool_worker || st->serving.conn || BPF_CORE_READ(sk, __sk_common.skc_family) != AF_UNIX ||
	    !py_layout_of(st))
		return;
	if (!st->handoff.py_root) {
		/* A job it took without being woken for it: whose, nothing
		 * said. It ends here all the same, in an entry of its own,
		 * for a request left without its job to claim. */
		struct target_stats *s = stats_of(st->target);
		COUNT(s, pool_jobs_unseen, 1);
		st->handoff.py_root = py_orphan_pick(false);
		if (st->target < MAX_TARGETS)
			__sync_fetch_and_add(&py_orphan_jobs[st->target], 1);
	}
	if (cfg.lite)
		py_job_done(st);
	else
		st->handoff.py_ending = 1;
}

/* Python thread st writes the response on c (first: its first write):
 * the jobs its task's pool threads ended are that request's. A response
 * whose task had no job seen to end (taken unseen, from its queue by a
 * thread that had just ended another) takes, at its first write, a job
 * ended unseen, the request then flagged as estimated (REQ_INTERLEAVED):
 * whose each was, nothing said, but a task's response follows its job's
 * end. */
static __always_inline void py_claim(struct thread_state *st, struct conn_state *c, __u64 cookie, bool first)
{
	if (!st->py.handed)
		return;
	struct py_layout *l = py_layout_of(st);
	if (!l)
		return;
	struct py_job_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .root = py_task_root(l, st->py.tstate)};
	if (!key.root)
		return;
	struct py_job *job = bpf_map_lookup_elem(&py_jobs, &key);
	if (job && first && !job->claimant) {
		/* Its job has not ended yet (the pool thread is on its way
		 * out of the self-pipe's write): its end delivers. */
		job->claimant_start_ns = c->rec.start_ns;
		if (!__sync_val_compare_and_swap(&job->claimant, 0, cookie))
			job = 0;
	}
	if (job && !py_claimed_early(job)) {
		__u32 ended = job->jobs;
		py_claim_entry(st, c, &key, job);
		if (ended)
			return;
	}
	if (!first)
		return; /* the rest of a response, whose first write claimed */
	__u32 target = st->target;
	if (target >= MAX_TARGETS || py_orphan_jobs[target] <= 0)
		return; /* no job ended unseen waits for a response */
	key.root = py_orphan_pick(true);
	job = key.root ? bpf_map_lookup_elem(&py_jobs, &key) : 0;
	if (job) {
		__sync_fetch_and_sub(&py_orphan_jobs[target], job->jobs);
		py_claim_entry(st, c, &key, job);
		c->rec.flags |= REQ_INTERLEAVED;
	}
}

#endif /* REQPROF_PYJOBS_H */
