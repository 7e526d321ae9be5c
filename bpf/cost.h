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
/* A global function: the verifier checks it once, not at every place a
 * program inlines it. Its loops over syscall slots, times the callers'
 * branches, took on_sys_exit past the verifier's million instructions. */
__attribute__((noinline)) int add_cost(struct cost *to, struct cost *from, int with_waits)
{
	/* Checked by its callers; a global function's pointers may be NULL
	 * as far as the verifier knows. */
	if (!to || !from)
		return 0;
	ADD_NONZERO(to->user_ns, from->user_ns);
	ADD_NONZERO(to->irq_ns, from->irq_ns);
	ADD_NONZERO(to->page_faults, from->page_faults);
	ADD_NONZERO(to->sock_ops, from->sock_ops);
	ADD_NONZERO(to->wakeups, from->wakeups);
	ADD_NONZERO(to->interrupts, from->interrupts);
	ADD_NONZERO(to->pool_probes, from->pool_probes);
	for (int i = 0; i < NR_SOFTIRQS; i++)
		ADD_NONZERO(to->softirq_ns[i], from->softirq_ns[i]);
	for (int i = 0; i < SYSCALL_SLOTS; i++) {
		struct syscall_slot *slot = &from->syscalls[i];
		if (slot->nr)
			add_syscall(to, slot->nr - 1, slot->ns, slot->calls);
	}
	/* Lite mode's kernel time is ns of no call (threads.h: charge_lite). */
	if (from->other_syscall_calls || from->other_syscall_ns) {
		__sync_fetch_and_add(&to->syscall_ns, from->other_syscall_ns);
		__sync_fetch_and_add(&to->other_syscall_ns, from->other_syscall_ns);
		__sync_fetch_and_add(&to->other_syscall_calls, from->other_syscall_calls);
	}
	if (!with_waits)
		return 0;
	ADD_NONZERO(to->runqueue_ns, from->runqueue_ns);
	ADD_NONZERO(to->offcpu_ns, from->offcpu_ns);
	ADD_NONZERO(to->voluntary_switches, from->voluntary_switches);
	ADD_NONZERO(to->involuntary_switches, from->involuntary_switches);
	return 0;
}

#endif /* REQPROF_COST_H */
