/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Interpreter frames of a stack sample (stacks.h): the Python or PHP
 * functions a target thread runs when a CPU's sampling clock ticks over
 * it, read from the interpreter's own chain of frames, which needs no
 * unwinding of native code (the interpreters people run are built without
 * frame pointers, and the kernel's walk of the native stack goes astray
 * past the sampled function). Each frame is sent as the code it runs and
 * where in it; the collector names them (collector/cpython,
 * collector/php) and puts them in the native stack where the
 * interpreter's loop runs them.
 *
 * A process's layout comes from the collector (interp_layouts), for the
 * processes whose interpreter it knows and checked. Like the rest of the
 * sampling program, this only reads: a thread's frames are found from its
 * thread state, and a Python thread's thread state, until its own events
 * cache it, as the GIL's holder when that is this very thread (its
 * pthread_t is its FS base); a thread running Python code holds the GIL.
 * A read that fails ends the walk: the frames read so far are sent.
 */
#ifndef REQPROF_INTERP_H
#define REQPROF_INTERP_H

#include "threads.h"

/* Filled by the collector for a target's processes that run an
 * interpreter it knows; looked up at each sample. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGET_PROCESSES);
	__type(key, __u32); /* tgid */
	__type(value, struct interp_layout);
} interp_layouts SEC(".maps");

/* A frame's bytes as read: in a map, where the verifier takes reads at a
 * variable offset that it refuses on the stack (unaligned). Padded, so
 * that a field at the span's end is read whole. */
struct interp_span {
	__u8 b[INTERP_FRAME_SPAN + 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct interp_span);
} interp_scratch SEC(".maps");

/* The sampled thread's PyThreadState: the GIL's holder, when it is this
 * thread; 0 otherwise (it runs no Python code now, or has let the GIL go
 * for a blocking call). st is the thread's state (NULL before its first
 * event), where its own events are to cache its thread state. */
static __always_inline __u64 sampled_py_tstate(const struct interp_layout *l, struct task_struct *task,
					       struct thread_state *st __attribute__((unused)))
{
	__u64 tstate = 0, thread_id = 0;
	if (l->gil_locked) {
		int locked = 0;
		if (bpf_probe_read_user(&locked, sizeof(locked), (void *)l->gil_locked) || !locked)
			return 0;
	}
	if (bpf_probe_read_user(&tstate, sizeof(tstate), (void *)l->head) || !tstate)
		return 0;
	if (bpf_probe_read_user(&thread_id, sizeof(thread_id), (void *)(tstate + l->tstate_thread_id)))
		return 0;
	return thread_id == task->thread.fsbase ? tstate : 0;
}

/* The innermost frame of the sampled thread's interpreter, 0 when none. */
static __always_inline __u64 interp_first_frame(const struct interp_layout *l, struct task_struct *task,
						struct thread_state *st)
{
	__u64 frame = 0;
	if (l->kind == INTERP_PHP) {
		bpf_probe_read_user(&frame, sizeof(frame), (void *)l->head);
		return frame;
	}
	__u64 tstate = sampled_py_tstate(l, task, st);
	if (!tstate || bpf_probe_read_user(&frame, sizeof(frame), (void *)(tstate + l->tstate_frame)) || !frame)
		return 0;
	if (l->cframe_frame != INTERP_ABSENT &&
	    bpf_probe_read_user(&frame, sizeof(frame), (void *)(frame + l->cframe_frame)))
		return 0;
	return frame;
}

/* The 8 bytes (or 4, with instr_bytes) at offset off of a frame whose
 * bytes from frame_base on are in span. */
static __always_inline __u64 span_u64(const __u8 *span, __u32 off)
{
	return *(const __u64 *)(span + (off & (INTERP_FRAME_SPAN - 1)));
}

static __always_inline __u32 span_u32(const __u8 *span, __u32 off)
{
	return *(const __u32 *)(span + (off & (INTERP_FRAME_SPAN - 1)));
}

/* The walk of a thread's frames, one frame a step (bpf_loop: the
 * callback is verified once, where a loop of MAX_INTERP_FRAMES steps
 * would be verified down each of its paths). */
struct interp_walk {
	struct stack_sample *s;
	const struct interp_layout *l;
	__u8 *span;
	__u64 frame; /* the next frame to read, 0 at the end */
	__u32 used;  /* addresses of s before its interpreter frames */
	__u32 n;     /* interpreter frames sent */
};

static long interp_step(__u64 index __attribute__((unused)), void *ctx)
{
	struct interp_walk *w = ctx;
	const struct interp_layout *l = w->l;
	struct stack_sample *s = w->s;
	__u8 *span = w->span;
	__u32 base = l->frame_base;
	if (w->n >= MAX_INTERP_FRAMES)
		return 1; /* w->frame is left unread: the sample is truncated */
	if (!w->frame || bpf_probe_read_user(span, l->frame_span & (INTERP_FRAME_SPAN - 1), (void *)(w->frame + base)))
		return 1;
	w->frame = span_u64(span, l->frame_previous - base);
	if (l->frame_owner != INTERP_ABSENT && span[(l->frame_owner - base) & (INTERP_FRAME_SPAN - 1)] == l->owner_cstack) {
		/* The shim an invocation of the loop starts with: the frame
		 * before it, inner, ended that invocation's run. */
		if (w->n)
			s->interp_entries |= 1ULL << ((w->n - 1) & 63);
		return 0;
	}
	__u32 slot = w->used + 2 * w->n;
	if (slot > 2 * STACK_DEPTH + 2 * MAX_INTERP_FRAMES - 2)
		return 1;
	__u64 at = span_u64(span, l->frame_instr - base);
	if (l->instr_bytes == 4)
		at = (__u32)at;
	s->ips[slot] = span_u64(span, l->frame_code - base);
	s->ips[slot + 1] = at;
	if (l->frame_entry != INTERP_ABSENT && (span_u32(span, l->frame_entry - base) & l->entry_mask))
		s->interp_entries |= 1ULL << (w->n & 63);
	w->n++;
	return 0;
}

/* Appends the sampled thread's interpreter frames to s, after its first
 * `used` addresses: up to MAX_INTERP_FRAMES, innermost first, and which
 * end a run of the interpreter's loop. st is the thread's state. A shim
 * frame (3.12+) takes a step of its own: a walk of MAX_INTERP_FRAMES
 * frames and their shims takes up to twice as many steps. */
static __always_inline void sample_interp(struct stack_sample *s, __u32 used, struct thread_state *st)
{
	s->interp_frames = 0;
	s->interp_entries = 0;
	const struct interp_layout *l = bpf_map_lookup_elem(&interp_layouts, &s->tgid);
	if (!l || !l->frame_span || l->frame_span >= INTERP_FRAME_SPAN)
		return;
	__u32 zero = 0;
	struct interp_span *scratch = bpf_map_lookup_elem(&interp_scratch, &zero);
	if (!scratch)
		return;
	struct interp_walk w = {.s = s, .l = l, .span = scratch->b, .used = used,
				.frame = interp_first_frame(l, bpf_get_current_task_btf(), st)};
	bpf_loop(2 * MAX_INTERP_FRAMES, interp_step, &w, 0);
	if (w.frame)
		s->flags |= SAMPLE_INTERP_TRUNCATED;
	s->interp_frames = w.n;
}

#endif /* REQPROF_INTERP_H */
