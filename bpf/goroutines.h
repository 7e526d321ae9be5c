/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Go's goroutines. A Go server runs many goroutines on few threads and
 * moves them between threads, so a thread's last connection says little
 * about whose work it does. For a Go process the collector gives, from its
 * binary, where a thread keeps its running goroutine's g (an offset from
 * the FS base) and where a g keeps the goroutine's id (go_layouts). A
 * goroutine that reads or writes a connection is remembered with it
 * (goroutines), and at each syscall entry and each switch off a CPU the
 * thread takes up the connection of the goroutine it runs.
 */
#ifndef REQPROF_GOROUTINES_H
#define REQPROF_GOROUTINES_H

#include "threads.h"

/* Per Go process: where its threads find their goroutine (set by the
 * collector from its binary, golayout.go). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGET_PROCESSES);
	__type(key, __u32); /* tgid */
	__type(value, struct go_layout);
} go_layouts SEC(".maps");

/* Least recently used goroutines go first: one that served a connection
 * long ago has most likely exited. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_GOROUTINES);
	__type(key, struct goroutine_key);
	__type(value, __u64); /* cookie of the connection it last read or wrote */
} goroutines SEC(".maps");

/* The id of the goroutine the current thread runs, for a thread of a Go
 * process; 0 otherwise, and for the runtime's own stack (g0: its scheduler,
 * netpoller and sysmon), which runs no goroutine. Only in the thread's own
 * context. Costs two reads of user memory, one on the thread's g0. */
static __always_inline __u64 current_goid(struct thread_state *st)
{
	struct thread_go *g = &st->go;
	if (g->kind == GO_NOT)
		return 0;
	if (g->kind == GO_UNKNOWN) {
		__u32 tgid = bpf_get_current_pid_tgid() >> 32;
		struct go_layout *layout = bpf_map_lookup_elem(&go_layouts, &tgid);
		if (!layout) {
			g->kind = GO_NOT;
			return 0;
		}
		g->tls_offset = layout->tls_offset;
		g->goid_offset = layout->goid_offset;
		g->kind = GO_YES;
	}
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 gp = 0, goid = 0;
	if (bpf_probe_read_user(&gp, sizeof(gp), (void *)(task->thread.fsbase + g->tls_offset)) || !gp)
		return 0;
	/* The scheduler's syscalls (netpoll, futex; sysmon's sleeps) are on
	 * g0: known by its address. */
	if (gp == g->g0)
		return 0;
	if (bpf_probe_read_user(&goid, sizeof(goid), (void *)(gp + g->goid_offset)))
		return 0;
	if (!goid)
		g->g0 = gp;
	return goid;
}

/* The id of the goroutine the current thread runs, as current_goid, for
 * an event inside a syscall that the thread entered in the window: the
 * goroutine followed at that entry (st->go.goid), without reading user
 * memory again. A goroutine cannot change while its thread is in the
 * kernel: Go switches goroutines in user space only. */
static __always_inline __u64 goid_in_context(struct thread_state *st)
{
	if (st->clock.mode == MODE_SYSCALL)
		return st->go.goid;
	return current_goid(st);
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
	__u64 goid = goid_in_context(st);
	if (!goid)
		return;
	st->go.goid = goid;
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
 * itself, if any, until it writes the response. goid is the goroutine it
 * runs: current_goid's, or goid_in_context's inside a syscall. */
static __always_inline void follow_goroutine(struct thread_state *st, __u64 goid)
{
	if (goid == st->go.goid)
		return;
	/* Forgotten on g0: the goroutine that comes next may have served
	 * another connection on another thread meanwhile. */
	st->go.goid = goid;
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
	if (conn == st->serving.conn && in_tail == st->serving.in_tail)
		return;
	turn_to(st, conn, in_tail);
	st->handoff.depth = 0;
}

#endif /* REQPROF_GOROUTINES_H */
