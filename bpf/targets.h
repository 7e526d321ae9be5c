/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the collector tells the programs, and what they count for it, per
 * target: the configuration it fixes before load, the switch it turns on
 * once every program is attached, which processes are targets and since
 * when, and each target's counters (target_stats, read back per CPU).
 * Each CPU's state starts with its answer to "is the task here a
 * target?" (threads.h: current_target_plus1), so that events of other
 * processes return without a hash lookup.
 */
#ifndef REQPROF_TARGETS_H
#define REQPROF_TARGETS_H

#include "types.h"

/* Fixed by the collector before load, every field of it (config.go:
 * bpfConfig): no default here to differ from its. */
volatile const struct config cfg;

/* Set by the collector once every program is attached. */
volatile __u32 enabled;

/* Each process of a target (threads.h: target_plus1_of). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGET_PROCESSES);
	__type(key, __u32);   /* tgid */
	__type(value, __u32); /* target index */
} targets SEC(".maps");

/* Bumped by the collector whenever the targets map changes, so that no CPU
 * goes on trusting an answer about a task given before. */
volatile __u32 targets_generation;

/* When each target's window opened (0: not open): set after its processes
 * are in the targets map, just before the collector reads its CPU clock.
 * No time of its threads before then is counted (threads.h: new_thread). */
volatile __u64 target_opened_ns[MAX_TARGETS];

/* Per target, per CPU so the hot path never contends; the collector
 * sums the CPUs' copies. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct target_stats);
} stats SEC(".maps");

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

/* Each CPU's state (struct cpu_state): its last answer to which target
 * the task on it is, the interrupt running over it (interrupts.h), the
 * task it last switched in (sched.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpus SEC(".maps");

static __always_inline struct cpu_state *this_cpu(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&cpus, &zero);
}

#endif /* REQPROF_TARGETS_H */
