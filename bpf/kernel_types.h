/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The few kernel types reqprof reads, declared with preserve_access_index so
 * that every field offset is relocated against the running kernel's BTF at
 * load time (CO-RE). Keeping them here instead of a generated vmlinux.h keeps
 * the program small, reviewable and independent of the build host's kernel.
 */
#ifndef REQPROF_KERNEL_TYPES_H
#define REQPROF_KERNEL_TYPES_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};

enum {
	BPF_RB_NO_WAKEUP = 1,
};

/* A CPU's run queue: only its address is used (threads.h: steal_clock). */
struct rq;

struct cfs_rq {
	struct rq *rq; /* the CPU's run queue (CONFIG_FAIR_GROUP_SCHED) */
} __attribute__((preserve_access_index));

struct sched_entity {
	__u64 sum_exec_runtime;
	struct cfs_rq *cfs_rq;
} __attribute__((preserve_access_index));

/* What a KVM host shares with each of its guest's CPUs: steal is the ns the
 * host kept that CPU from running, updated each time it runs it again. */
struct kvm_steal_time {
	__u64 steal;
} __attribute__((preserve_access_index));

/* x86-64: the user FS base, where a Go thread keeps its current g. */
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct file {
	void *private_data; /* a socket file's struct socket */
} __attribute__((preserve_access_index));

struct fdtable {
	unsigned int max_fds;
	__u32 unread_pad;
	struct file **fd;
} __attribute__((preserve_access_index));

struct files_struct {
	struct fdtable *fdt;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct sched_entity se;
	struct thread_struct thread;
	struct files_struct *files;
	/* The kernel's own user and system time: whole scheduler ticks,
	 * each charged to the mode the tick found the task in. */
	__u64 utime;
	__u64 stime;
} __attribute__((preserve_access_index));

typedef struct {
	__s64 counter;
} atomic64_t;

struct in6_addr {
	union {
		__u8 u6_addr8[16];
	} in6_u;
} __attribute__((preserve_access_index));

/* A node of a kernel hash list: pprev is NULL once it is out of its list. */
struct hlist_node {
	struct hlist_node *next;
	struct hlist_node **pprev;
} __attribute__((preserve_access_index));

struct sock_common {
	/* A TCP socket's node in the table of connections, left (pprev NULL)
	 * when it closes. */
	struct hlist_node skc_node;
	unsigned short skc_family;
	__u16 skc_num; /* local port, host byte order */
	__u32 unread_pad; /* never read: the layout is the kernel's, relocated */
	atomic64_t skc_cookie; /* set once the socket's cookie was asked for */
	__be32 skc_daddr; /* the peer's IPv4 address */
	__be16 skc_dport; /* the peer's port */
	__u16 unread_pad2;
	struct in6_addr skc_v6_daddr;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
	__u16 sk_type;
	__u32 unread_pad;
} __attribute__((preserve_access_index));

struct socket {
	struct file *file;
	struct sock *sk;
} __attribute__((preserve_access_index));

/* A Unix socket's bound address: an accepted socket shares its listener's. */
struct unix_address {
	int len; /* of name: the family's two bytes, then the path */
	char name[]; /* struct sockaddr_un */
} __attribute__((preserve_access_index));

struct unix_sock {
	struct unix_address *addr;
} __attribute__((preserve_access_index));

/* Where a TCP connection's inbound stream stands: bytes_received counts
 * what arrived since it opened, and rcv_nxt - copied_seq of it is not read
 * yet. */
struct tcp_sock {
	__u64 bytes_received;
	__u32 rcv_nxt;
	__u32 copied_seq;
} __attribute__((preserve_access_index));

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __attribute__((preserve_access_index));

/* x86-64 syscall arguments: di, si, dx, r10, r8, r9; and the stack
 * pointer. */
struct pt_regs {
	long unsigned int dx;
	long unsigned int si;
	long unsigned int di;
	long unsigned int orig_ax; /* the syscall's number, at its exit too */
	long unsigned int sp;
} __attribute__((preserve_access_index));

/* What a perf_event program is given: the registers the sampling
 * interrupt caught, as the UAPI's struct bpf_perf_event_data lays them out
 * on x86-64 (struct pt_regs of asm/ptrace.h). Part of the ABI, so a plain
 * struct, not relocated: the kernel rewrites each access itself, and takes
 * only whole 8-byte loads. */
struct sampled_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

struct perf_sample_ctx {
	struct sampled_regs regs;
	__u64 sample_period;
	__u64 addr;
};

/* bpf_get_stack: the user stack rather than the kernel's. */
#define BPF_F_USER_STACK (1ULL << 8)

/* The kernel's constants the programs compare with. */
#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define SOCK_STREAM 1

#define TCP_ESTABLISHED 1
#define TCP_FIN_WAIT1 4
#define TCP_CLOSE 7
#define TCP_CLOSE_WAIT 8
#define TCP_LAST_ACK 9

#define TASK_RUNNING 0
#define TASK_DEAD 0x80

/* x86-64 numbers of the syscalls whose buffer holds a request's first bytes. */
#define NR_READ 0
#define NR_WRITE 1
#define NR_READV 19
#define NR_WRITEV 20
#define NR_RECVFROM 45
#define NR_RECVMSG 47
/* ... and of those whose buffer holds a client's call. */
#define NR_SENDTO 44
#define NR_SENDMSG 46
#define NR_CLOSE 3
/* ... and of those that accept a connection. */
#define NR_ACCEPT 43
#define NR_ACCEPT4 288
/* ... and of those an event loop waits for events in (an asyncio loop
 * between its iterations). */
#define NR_EPOLL_WAIT 232
#define NR_EPOLL_PWAIT 281
#define NR_EPOLL_PWAIT2 441
#define NR_POLL 7
#define NR_PPOLL 271
#define NR_SELECT 23
#define NR_PSELECT6 270
/* ... and of those that send a signal. */
#define NR_KILL 62
#define NR_TKILL 200
#define NR_TGKILL 234

#define BPF_F_NO_PREALLOC 1

#endif
