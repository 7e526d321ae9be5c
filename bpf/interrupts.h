/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Softirq and hard-IRQ time that interrupted a target thread: charged as
 * such to what the thread serves, and carved out of the piece it
 * interrupted (threads.h: cut), so that user + syscalls + softirq + irq =
 * on-CPU time, exactly. The interrupt running over a CPU is kept per CPU.
 * Like the pieces, interrupts leave out what the hypervisor stole in them:
 * a host often takes its CPU back inside the guest's timer interrupt, and
 * the piece it interrupted leaves that steal out already.
 */
#ifndef REQPROF_INTERRUPTS_H
#define REQPROF_INTERRUPTS_H

#include "selfcost.h"

/* Interrupt time that ran over a target thread: charged to what the thread
 * serves, and remembered so the piece it interrupted is cut short by it. */
static __always_inline void charge_interrupt(struct cpu_state *cpu, __u64 ns, int softirq_vec)
{
	__u32 tid;
	struct thread_state *st = current_thread(cpu, &tid);
	if (!st || !ns)
		return;
	st->clock.interrupted_ns += ns;
	st->self.interrupts++;
	struct cost *to = pending_of(st);
	if (to)
		to->interrupts++;
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

/* The interrupt hooks say whether they ran over a target's thread. */
static __always_inline bool softirq_enter(unsigned int vec)
{
	struct cpu_state *cpu = this_cpu();
	if (!over_target(cpu))
		return false;
	cpu->softirq_start_ns = bpf_ktime_get_ns();
	cpu->softirq_steal_at = steal_clock();
	cpu->softirq_vec = vec;
	cpu->irq_in_softirq_ns = 0;
	return true;
}

static __always_inline bool softirq_exit(void)
{
	struct cpu_state *cpu = this_cpu();
	if (!cpu || !cpu->softirq_start_ns)
		return false;
	__u64 ns = less_stolen(bpf_ktime_get_ns() - cpu->softirq_start_ns, &cpu->softirq_steal_at);
	cpu->softirq_start_ns = 0;
	/* Hard irqs inside it were charged as irq time already (less what
	 * was stolen in them, which ns is less already). */
	ns = ns > cpu->irq_in_softirq_ns ? ns - cpu->irq_in_softirq_ns : 0;
	charge_interrupt(cpu, ns, cpu->softirq_vec);
	return true;
}

static __always_inline bool irq_enter(void)
{
	struct cpu_state *cpu = this_cpu();
	if (!over_target(cpu))
		return false;
	cpu->irq_start_ns = bpf_ktime_get_ns();
	cpu->irq_steal_at = steal_clock();
	return true;
}

static __always_inline bool irq_exit(void)
{
	struct cpu_state *cpu = this_cpu();
	if (!cpu || !cpu->irq_start_ns)
		return false;
	__u64 ns = less_stolen(bpf_ktime_get_ns() - cpu->irq_start_ns, &cpu->irq_steal_at);
	cpu->irq_start_ns = 0;
	if (cpu->softirq_start_ns)
		cpu->irq_in_softirq_ns += ns;
	charge_interrupt(cpu, ns, -1);
	return true;
}

#endif /* REQPROF_INTERRUPTS_H */
