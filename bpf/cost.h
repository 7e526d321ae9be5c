/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Arithmetic on struct cost: adding a syscall, a whole cost, and reading
 * its kernel time. Two flavours of adding a syscall: plain adds for a cost
 * only its thread writes (its pending charges), locked adds for one that
 * several threads may add to at once (a connection's request and tail).
 */
#ifndef REQPROF_COST_H
#define REQPROF_COST_H

#include "types.h"

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

static __always_inline __u64 cpu_ns_of(struct cost *c)
{
	return c->user_ns + kernel_ns_of(c);
}

/* The i-th of n parts of v: the n parts add up to v exactly; v itself
 * when it is all (n == 1), without a division. */
static __always_inline __u64 part_of(__u64 v, __u32 i, __u32 n)
{
	if (n == 1)
		return v;
	return v * (i + 1) / n - v * i / n;
}

/* Adds atomically the i-th of n parts of a field, and only if there is
 * something to add: most of a cost's fields are 0 (softirq vectors that
 * did not run), and a locked add of 0 costs as much as any. */
#define ADD_PART(field, v)                                                                                 \
	do {                                                                                                 \
		__u64 _part = part_of((v), i, n);                                                             \
		if (_part)                                                                                   \
			__sync_fetch_and_add(&(field), _part);                                               \
	} while (0)

/* Adds the i-th of n equal parts of a cost (each syscall's calls too) to
 * one that other threads may be adding to: the whole cost when n is 1, a
 * share when a cost is shared among n requests. Waiting is added only
 * with_waits. */
static __always_inline void add_parts(struct cost *to, struct cost *from, __u32 i, __u32 n, int with_waits)
{
	ADD_PART(to->user_ns, from->user_ns);
	ADD_PART(to->irq_ns, from->irq_ns);
	ADD_PART(to->page_faults, from->page_faults);
	ADD_PART(to->sock_ops, from->sock_ops);
	ADD_PART(to->wakeups, from->wakeups);
	ADD_PART(to->interrupts, from->interrupts);
	ADD_PART(to->pool_probes, from->pool_probes);
	for (int k = 0; k < NR_SOFTIRQS; k++)
		ADD_PART(to->softirq_ns[k], from->softirq_ns[k]);
	for (int k = 0; k < SYSCALL_SLOTS; k++) {
		struct syscall_slot *slot = &from->syscalls[k];
		if (slot->nr)
			add_syscall(to, slot->nr - 1, part_of(slot->ns, i, n), part_of(slot->calls, i, n));
	}
	/* Lite mode's kernel time is ns of no call (threads.h: charge_lite). */
	ADD_PART(to->syscall_ns, from->other_syscall_ns);
	ADD_PART(to->other_syscall_ns, from->other_syscall_ns);
	ADD_PART(to->other_syscall_calls, from->other_syscall_calls);
	if (!with_waits)
		return;
	ADD_PART(to->runqueue_ns, from->runqueue_ns);
	ADD_PART(to->offcpu_ns, from->offcpu_ns);
	ADD_PART(to->voluntary_switches, from->voluntary_switches);
	ADD_PART(to->involuntary_switches, from->involuntary_switches);
}

/* Global functions: the verifier checks each once, not at every place a
 * program inlines it. Their loops over syscall slots, times the callers'
 * branches, took on_sys_exit past the verifier's million instructions.
 * Pointers are checked by their callers; a global function's may be NULL
 * as far as the verifier knows. */

/* Adds a whole cost: add_parts' one part, folded to plain adds. */
__attribute__((noinline)) int add_cost(struct cost *to, struct cost *from, int with_waits)
{
	if (to && from)
		add_parts(to, from, 0, 1, with_waits);
	return 0;
}

/* Adds the i-th of n parts of a cost, waits included when with_waits. */
__attribute__((noinline)) int add_cost_part(struct cost *to, struct cost *from, __u32 i, __u32 n, int with_waits)
{
	if (to && from && i < n)
		add_parts(to, from, i, n, with_waits);
	return 0;
}

/* Counts a tail's cost, settled into its request, as that request's tail
 * too: its CPU and its own runs, those add_cost adds without waits. */
__attribute__((noinline)) int add_tail(struct tail_cost *to, struct cost *from)
{
	if (!to || !from)
		return 0;
	__u32 calls = from->other_syscall_calls;
	for (int k = 0; k < SYSCALL_SLOTS; k++)
		calls += from->syscalls[k].calls;
	__sync_fetch_and_add(&to->cpu_ns, cpu_ns_of(from));
	__sync_fetch_and_add(&to->syscalls, calls);
	__sync_fetch_and_add(&to->sock_ops, from->sock_ops);
	__sync_fetch_and_add(&to->wakeups, from->wakeups);
	__sync_fetch_and_add(&to->interrupts, from->interrupts);
	__sync_fetch_and_add(&to->pool_probes, from->pool_probes);
	__sync_fetch_and_add(&to->page_faults, from->page_faults);
	return 0;
}

#endif /* REQPROF_COST_H */
