/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Connections and their requests: which sockets are served, a
 * connection's open request and the tail after its response, and the
 * record emitted when a request ends.
 *
 * A request starts with the first read of data after the previous response
 * (or after accept), and its response is every write after that until the
 * next request starts or the connection closes. After a write, the
 * writer's costs go to the connection's tail until its next socket
 * operation; the tail is settled into the request it follows, and counted
 * on its own as the server's loop between requests.
 */
#ifndef REQPROF_CONNS_H
#define REQPROF_CONNS_H

#include "cost.h"
#include "targets.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

/* Which sockets are served (served_socket): the TCP ports the targets
 * listen on, and the paths of their Unix listeners, set by the collector. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u16);  /* local TCP port in host byte order */
	__type(value, __u8); /* unused */
} listen_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct unix_path);
	__type(value, __u8); /* unused */
} listen_unix SEC(".maps");

/* The path being looked up: too large for the stack of the programs that
 * need it, with the rest they keep there. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unix_path);
} unix_path_scratch SEC(".maps");

/* Per target: enum target_role, what its outbound connections are; read
 * once per connection, when it is first seen. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u32);
} target_roles SEC(".maps");

/* Not preallocated: a connection's state is large (it holds the captured
 * bytes), and memory should follow the connections that exist. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CONNS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64); /* socket cookie */
	__type(value, struct conn_state);
} conns SEC(".maps");

/* A zeroed conn_state to create entries from: too large for the stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct conn_state);
} conn_template SEC(".maps");

/* Setups of accepted connections not yet closed: not preallocated, as
 * conns. An entry goes when its connection closes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CONNS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64); /* the socket's address */
	__type(value, struct setup_state);
} setups SEC(".maps");

/* A zeroed setup_state to create entries from: too large for the stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct setup_state);
} setup_template SEC(".maps");

/* Set by the programs once a target accepted a connection: until then no
 * close of a socket nobody served looks for its setup. */
volatile __u32 watch_setups;

/* Set once a Unix socket is in listen_unix: until then no close(fd) looks
 * for a Unix socket behind fd. */
volatile __u32 watch_unix;

/* A chunk being filled: too large for the stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct chunk_record);
} chunk_scratch SEC(".maps");

/* Every record goes into the ring buffer without waking its reader: the
 * collector drains it on a timer and never waits on it (consume.go:
 * consume), so a wake-up would be an interrupt on the target's CPU for
 * nobody. */
#define RECORD_FLAGS BPF_RB_NO_WAKEUP

/* The one ring buffer, named for its first records: requests' and their
 * backends' and chunks (here), stack samples (stacks.h). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, RINGBUF_BYTES);
} requests SEC(".maps");

/* Moves a tail's CPU into the request it follows, and counts it as loop
 * time. Its waiting is not the request's: once the response is out, a
 * thread that sleeps or waits for a CPU is waiting for the next request. */
static __always_inline void settle_tail(struct conn_state *c)
{
	struct cost *t = &c->tail;
	struct target_stats *s = stats_of(c->rec.target);
	COUNT(s, between_requests_ns, cpu_ns_of(t));
	add_cost(&c->rec.cost, t, false);
	add_tail(&c->rec.tail, t);
	__builtin_memset(t, 0, sizeof(*t));
}

/* Adds setup CPU to the open request, counted apart as its setup. */
static __always_inline void add_setup(struct conn_state *c, struct cost *setup)
{
	__u64 ns = cpu_ns_of(setup);
	if (!ns && !setup->page_faults)
		return;
	struct target_stats *s = stats_of(c->rec.target);
	COUNT(s, setup_ns, ns);
	__sync_fetch_and_add(&c->rec.setup_ns, ns);
	add_cost(&c->rec.cost, setup, false);
	__builtin_memset(setup, 0, sizeof(*setup));
}

/* Moves what the connection's setup holds so far (its accept, the thread
 * or process made for it) into its open request. Only connections that
 * were seen accepted look their setup up. */
static __always_inline void take_setup(struct conn_state *c)
{
	if (!c->setup_sk)
		return;
	struct setup_state *setup = bpf_map_lookup_elem(&setups, &c->setup_sk);
	if (setup)
		add_setup(c, &setup->cost);
}

/* A connection closed by the thread serving it: its tail since the close
 * (the close itself, and what its closer did after it, up to its exit) is
 * the connection's teardown. */
static __always_inline void settle_close(struct conn_state *c)
{
	add_setup(c, &c->tail);
}

/* CPU of a request that is no request of the distribution: ended before
 * its response, begun before the window, or lost to a full ring buffer. */
static __always_inline void count_dropped(struct target_stats *s, struct request_record *r)
{
	COUNT(s, dropped_ns, cpu_ns_of(&r->cost));
}

/* Sends what the request of c did with each backend it called, just
 * before its own record, which says so (REQ_BACKENDS). */
/* emit, begin_request and end_conn are global functions: the verifier
 * checks each once rather than at every place a program reaches them, which
 * kept on_sys_exit and on_sock_recv_length under its million instructions. */
static __always_inline void emit_backends(struct conn_state *c, __u64 cookie)
{
	struct backend_record b = {.kind = RECORD_BACKEND, .target = c->rec.target, .conn = cookie,
				   .start_ns = c->rec.start_ns};
	for (int i = 0; i < MAX_BACKENDS; i++) {
		if (i >= c->backends_used)
			break;
		b.use = c->backends[i];
		bpf_ringbuf_output(&requests, &b, sizeof(b), RECORD_FLAGS);
	}
	c->rec.flags |= REQ_BACKENDS;
}

__attribute__((noinline)) int emit(struct conn_state *c, __u64 cookie)
{
	if (!c)
		return 0;
	struct request_record *r = &c->rec;
	struct target_stats *s = stats_of(r->target);

	if (r->flags & REQ_START_UNSEEN) {
		/* Its start, and so part of its CPU, is before the window:
		 * counted, not reported as a request. */
		COUNT(s, start_unseen, 1);
		count_dropped(s, r);
		return 0;
	}
	r->kind = RECORD_REQUEST;
	r->conn = cookie;
	COUNT(s, finished, 1);
	if (c->backends_used)
		emit_backends(c, cookie);
	__u32 len = r->payload_len;
	if (len > PAYLOAD_MAX)
		len = PAYLOAD_MAX;
	if (bpf_ringbuf_output(&requests, r, __builtin_offsetof(struct request_record, payload) + len, RECORD_FLAGS)) {
		COUNT(s, lost_records, 1);
		count_dropped(s, r);
	}
	return 0;
}

/* Data after a response (or after accept): a new request starts, and the
 * one whose response was written is emitted. */
__attribute__((noinline)) int begin_request(struct conn_state *c, __u64 cookie, __u32 tid)
{
	if (!c)
		return 0;
	if (c->phase == PHASE_RESPONDING)
		emit(c, cookie);
	struct request_record *r = &c->rec;
	__builtin_memset(&r->cost, 0, sizeof(r->cost));
	__builtin_memset(&r->tail, 0, sizeof(r->tail));
	r->bytes_in = 0;
	r->bytes_out = 0;
	r->setup_ns = 0;
	r->tid = tid;
	r->start_ns = bpf_ktime_get_ns();
	r->first_write_ns = 0;
	r->end_ns = 0;
	r->payload_len = 0;
	r->stream_off = c->in_off;
	r->flags = c->conn_flags;
	c->backends_used = 0;
	c->chunked = 0;
	/* The connection's first request carries what its setup cost so far. */
	if (c->phase == PHASE_IDLE)
		take_setup(c);
	c->phase = PHASE_READING;
	return 0;
}

/* Tells the collector that a connection it was sent chunks of closed, so
 * that it may let go of what it holds for it. */
static __always_inline void send_closed(struct conn_state *c, __u64 cookie)
{
	__u32 zero = 0;
	struct chunk_record *k = bpf_map_lookup_elem(&chunk_scratch, &zero);
	if (!k)
		return;
	k->kind = RECORD_CLOSED;
	k->target = c->rec.target;
	k->conn = cookie;
	k->offset = c->in_off;
	k->len = 0;
	bpf_ringbuf_output(&requests, k, __builtin_offsetof(struct chunk_record, data), RECORD_FLAGS);
}

/* A served connection closes: its tail is settled, and its last request
 * is emitted if it was answered, else dropped. */
__attribute__((noinline)) int end_conn(struct conn_state *c, __u64 cookie)
{
	if (!c)
		return 0;
	if (c->closing)
		settle_close(c);
	else
		settle_tail(c);
	take_setup(c);
	if (c->setup_sk)
		bpf_map_delete_elem(&setups, &c->setup_sk);
	if (c->phase == PHASE_RESPONDING) {
		emit(c, cookie);
	} else {
		struct target_stats *s = stats_of(c->rec.target);
		count_dropped(s, &c->rec);
		COUNT(s, dropped_requests, c->phase == PHASE_READING);
	}
	if (c->streamed)
		send_closed(c, cookie);
	return 0;
}

/* A served connection's last request is done with: it ends, and its
 * state goes. */
static __always_inline void finish_conn(struct conn_state *c, __u64 cookie)
{
	end_conn(c, cookie);
	bpf_map_delete_elem(&conns, &cookie);
}

/* A socket nobody served closes: the setup of a connection a target
 * accepted and closed without a request is CPU of no request. */
static __always_inline void drop_setup(struct sock *sk)
{
	__u64 key = (__u64)sk;
	struct setup_state *setup = bpf_map_lookup_elem(&setups, &key);
	if (!setup)
		return;
	struct target_stats *s = stats_of(setup->target);
	COUNT(s, dropped_ns, cpu_ns_of(&setup->cost));
	bpf_map_delete_elem(&setups, &key);
}

/* The socket behind the current task's descriptor fd, if fd is a socket. */
static __always_inline struct sock *sock_of_fd(long fd)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd < 0 || fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *f = 0;
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return 0;
	struct socket *sock = BPF_CORE_READ(f, private_data);
	/* A socket's file and its struct socket point at each other; any
	 * other file's private data does not point back. */
	if (!sock || BPF_CORE_READ(sock, file) != f)
		return 0;
	return BPF_CORE_READ(sock, sk);
}

/* Whether a Unix stream socket is one accepted from a listener of the
 * targets: it shares its listener's address, while the connecting side
 * has none (or its own). */
static __always_inline bool served_unix(struct sock *sk)
{
	if (BPF_CORE_READ(sk, sk_type) != SOCK_STREAM)
		return false;
	struct unix_address *addr = BPF_CORE_READ((struct unix_sock *)sk, addr);
	if (!addr)
		return false;
	__u32 zero = 0;
	struct unix_path *key = bpf_map_lookup_elem(&unix_path_scratch, &zero);
	if (!key)
		return false;
	__builtin_memset(key, 0, sizeof(*key));
	int len = BPF_CORE_READ(addr, len) - 2; /* less sun_family */
	if (len <= 0)
		return false;
	if (len > UNIX_PATH_MAX)
		len = UNIX_PATH_MAX;
	if (bpf_probe_read_kernel(key->path, len, (char *)addr + bpf_core_field_offset(struct unix_address, name) + 2))
		return false;
	return bpf_map_lookup_elem(&listen_unix, key) != 0;
}

/* How a socket is served: TCP on a port the targets listen on (*port is
 * set), or a Unix stream socket they accepted (*port 0); false for any
 * other socket. */
static __always_inline bool served_socket(struct sock *sk, __u16 *port)
{
	*port = 0;
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family == AF_UNIX)
		return served_unix(sk);
	if (family != AF_INET && family != AF_INET6)
		return false;
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return false;
	__u16 local = BPF_CORE_READ(sk, __sk_common.skc_num);
	if (!bpf_map_lookup_elem(&listen_ports, &local))
		return false;
	*port = local;
	return true;
}

/* Whether sk, served by none of the targets' listeners, is a stream the
 * target connected: TCP, or a Unix stream socket. */
static __always_inline bool outbound_stream(struct sock *sk)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family == AF_UNIX)
		return BPF_CORE_READ(sk, sk_type) == SOCK_STREAM;
	return (family == AF_INET || family == AF_INET6) && BPF_CORE_READ(sk, sk_protocol) == IPPROTO_TCP;
}

/* The peer of an outbound stream: its address and port, or only the
 * family for a Unix socket. */
static __always_inline void peer_of(struct sock *sk, struct backend_peer *p)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	__builtin_memset(p, 0, sizeof(*p));
	p->family = family;
	if (family == AF_INET) {
		__be32 addr = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		__builtin_memcpy(p->addr, &addr, sizeof(addr));
	} else if (family == AF_INET6) {
		bpf_core_read(p->addr, sizeof(p->addr), &sk->__sk_common.skc_v6_daddr);
	}
	if (family != AF_UNIX)
		p->port = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
}

/* Bytes read from a TCP connection since it opened, less unread: what
 * arrived minus what waits in the receive queue. Read once, when a
 * connection is first seen: from then on its reads are counted. */
static __always_inline __u64 consumed_of(struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u64 received = BPF_CORE_READ(tp, bytes_received);
	__u32 unread = BPF_CORE_READ(tp, rcv_nxt) - BPF_CORE_READ(tp, copied_seq);
	return received > unread ? received - unread : 0;
}

/* A new connection's state, not yet in the map: the template with what
 * every connection starts with. Too large for the stack. */
static __always_inline struct conn_state *fresh_conn(__u32 target, __u32 tid, __u32 phase, __u32 role,
						      __u32 conn_flags, __u16 port)
{
	__u32 zero = 0;
	struct conn_state *fresh = bpf_map_lookup_elem(&conn_template, &zero);
	if (!fresh)
		return 0;
	fresh->rec.tgid = bpf_get_current_pid_tgid() >> 32;
	fresh->rec.tid = tid;
	fresh->rec.target = target;
	fresh->rec.flags = conn_flags;
	fresh->rec.local_port = port;
	fresh->phase = phase;
	fresh->role = role;
	fresh->in_off = 0;
	fresh->conn_flags = conn_flags;
	fresh->closing = 0;
	fresh->setup_sk = 0;
	return fresh;
}

/* A full memory barrier: a locked exchange (an atomic that fetches is
 * fully ordered), on this CPU's own word, which no other CPU touches. */
static __always_inline void full_barrier(void)
{
	__u32 zero = 0;
	struct cpu_state *cpu = bpf_map_lookup_elem(&cpus, &zero);
	if (cpu)
		__sync_lock_test_and_set(&cpu->fence, 1);
}

/* Whether sk is a TCP socket that has closed: reset, timed out, or done
 * with. Its close (inet_sock_set_state to TCP_CLOSE) ends its state here,
 * and nothing after it will: a state made for it afterwards would never
 * go. A read or write traced after the close is one whose socket the peer
 * reset while it ran or before (the bytes of a request that arrived
 * before its reset are still read), or whose socket another CPU closed
 * between the call and its tracepoint.
 *
 * The kernel takes a closing socket out of its table of connections
 * before it traces the change of state, and stores the new state only
 * after: out of the table is the mark that is set before the close's
 * program looks for the socket's state. That program and conn_of each
 * write, then put a full barrier, then read the other's write, so that
 * one of them at least sees the other's: the close finds the state
 * made, or conn_of finds the socket closed. */
static __always_inline bool tcp_closed(struct sock *sk)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if ((family != AF_INET && family != AF_INET6) || BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return false;
	return !BPF_CORE_READ(sk, __sk_common.skc_node.pprev);
}

/* Puts fresh in the map as cookie's state unless another CPU put one
 * there first, and returns the state there; NULL, counted, when the map
 * is full. */
static __always_inline struct conn_state *insert_conn(__u64 cookie, struct conn_state *fresh)
{
	bpf_map_update_elem(&conns, &cookie, fresh, BPF_NOEXIST);
	struct conn_state *c = bpf_map_lookup_elem(&conns, &cookie);
	if (!c) {
		struct target_stats *s = stats_of(fresh->rec.target);
		COUNT(s, lost_conns, 1);
	}
	return c;
}

/* Whether target's outbound connections are a client's, each call on
 * them a request of its own (TARGET_CALLS): looked up only when an
 * outbound connection is first seen. */
static __always_inline bool calls_are_requests(__u32 target)
{
	__u32 *role = bpf_map_lookup_elem(&target_roles, &target);
	return role && *role == TARGET_CALLS;
}

/* A connection's state, created on its first sight in phase, with flags;
 * just_read is what the operation that sees it read. */
static __always_inline struct conn_state *conn_of(struct sock *sk, __u64 cookie, __u32 target, __u32 tid,
						   __u32 phase, __u32 flags, int just_read)
{
	struct conn_state *c = bpf_map_lookup_elem(&conns, &cookie);
	if (c)
		return c;
	__u16 port;
	bool served = served_socket(sk, &port);
	/* No count of bytes read is kept for a Unix socket: its requests are
	 * counted from here. */
	__u32 conn_flags = served && !port ? REQ_UNIX : 0;
	if (!served && !outbound_stream(sk))
		/* A datagram socket (a DNS lookup's), netlink, a Unix datagram:
		 * never a request, and no close of it is traced, so it gets no
		 * state (one kept would stay for good, a lookup a request
		 * filling the map). */
		return 0;
	__u32 role = served ? ROLE_SERVER : ROLE_OUTBOUND;
	bool client = role == ROLE_OUTBOUND && calls_are_requests(target);
	if (client) {
		/* Served as a request of its own, the other way round: a call
		 * starts with a write, and a read first seen answers a call
		 * written before the window. Its bytes written are counted from
		 * here, as a Unix socket's read. */
		role = ROLE_SERVER;
		conn_flags = REQ_CLIENT;
		bool first_read = just_read > 0;
		phase = first_read ? PHASE_RESPONDING : PHASE_IDLE;
		flags = first_read ? REQ_START_UNSEEN : 0;
		port = 0;
	}
	struct conn_state *fresh = fresh_conn(target, tid, phase, role, conn_flags, port);
	if (!fresh)
		return 0;
	fresh->rec.flags |= flags;
	if (port) {
		__u64 consumed = consumed_of(sk);
		fresh->in_off = consumed > (__u64)just_read ? consumed - just_read : 0;
	}
	c = insert_conn(cookie, fresh);
	if (!c)
		return 0;
	full_barrier();
	if (tcp_closed(sk)) {
		/* Closed before its first sight was traced: it gets no state,
		 * and the operation serves no request. Deleted whether or not
		 * the close found it (then it was ended there). */
		bpf_map_delete_elem(&conns, &cookie);
		return 0;
	}
	/* Into the map's copy: the template is left as every other
	 * connection needs it. */
	if (role == ROLE_OUTBOUND)
		peer_of(sk, &c->link.peer);
	if (client)
		peer_of(sk, &c->rec.peer);
	/* An outbound Unix stream's end is its peer's EOF or its
	 * descriptor's close, which is watched from now on. */
	if ((role == ROLE_OUTBOUND ? c->link.peer.family : client ? c->rec.peer.family : 0) == AF_UNIX && !watch_unix)
		watch_unix = 1;
	if (served && watch_setups) {
		/* Accepted by a target: its setup is the connection's. */
		__u64 key = (__u64)sk;
		if (bpf_map_lookup_elem(&setups, &key))
			c->setup_sk = key;
	}
	return c;
}

/* A stdio channel's state, created on its first read: a server
 * connection with no port, counted from here. */
static __always_inline struct conn_state *stdio_conn_of(__u64 cookie, __u32 target, __u32 tid)
{
	struct conn_state *fresh = fresh_conn(target, tid, PHASE_IDLE, ROLE_SERVER, REQ_STDIO, 0);
	return fresh ? insert_conn(cookie, fresh) : 0;
}

/* The client's end of a stdio channel (a pipe to the stdin of a server
 * it spawned, or from its stdout), created on its first sight: a client's
 * connection, its calls counted from here, as a socket's, the peer left
 * unknown (the collector names it stdio). */
static __always_inline struct conn_state *client_pipe_of(__u64 cookie, __u32 target, __u32 tid, bool reading)
{
	struct conn_state *fresh = fresh_conn(target, tid, reading ? PHASE_RESPONDING : PHASE_IDLE, ROLE_SERVER,
					      REQ_CLIENT, 0);
	if (!fresh)
		return 0;
	fresh->rec.flags |= reading ? REQ_START_UNSEEN : 0;
	return insert_conn(cookie, fresh);
}

/* A server connection's state, or NULL for any other connection. */
static __always_inline struct conn_state *served_conn(__u64 cookie)
{
	struct conn_state *c = bpf_map_lookup_elem(&conns, &cookie);
	return c && c->role == ROLE_SERVER ? c : 0;
}

/* Sets the user buffer a read-like syscall fills (where a request's bytes
 * land) and its size: for recvmsg and readv, the first iovec's, past which
 * the bytes read are elsewhere. */
static __always_inline void read_buffer(struct thread_serving *sv, struct pt_regs *regs, long nr)
{
	sv->read_buf = 0;
	sv->read_len = 0;
	/* Other syscalls return before reading their registers. The
	 * tracepoint's regs is a typed kernel pointer: its fields are plain
	 * loads (the verifier guards them), with no helper call. */
	if (nr != NR_READ && nr != NR_RECVFROM && nr != NR_READV && nr != NR_RECVMSG)
		return;
	__u64 arg2 = regs->si;
	__u64 iov = 0;
	switch (nr) {
	case NR_READ:
	case NR_RECVFROM:
		sv->read_buf = arg2;
		sv->read_len = regs->dx;
		return;
	case NR_READV:
		iov = arg2;
		break;
	default: /* NR_RECVMSG */
		/* struct user_msghdr: msg_iov at offset 16 on 64-bit */
		if (bpf_probe_read_user(&iov, sizeof(iov), (void *)(arg2 + 16)))
			return;
		break;
	}
	__u64 first[2] = {}; /* struct iovec: base, len */
	if (!iov || bpf_probe_read_user(first, sizeof(first), (void *)iov))
		return;
	sv->read_buf = first[0];
	sv->read_len = first[1];
}

/* Sets, as read_buffer does for a read, the user buffer a client's
 * write-like syscall sends its call from, and its size: read from the
 * thread's registers at the socket's tracepoint, so only a write on a
 * client's connection pays for it. The write-like syscalls take their
 * buffers where their read-like twins do. */
static __always_inline void call_buffer(struct thread_serving *sv)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	long nr = regs ? BPF_CORE_READ(regs, orig_ax) : -1;
	switch (nr) {
	case NR_WRITE:
		nr = NR_READ;
		break;
	case NR_SENDTO:
		nr = NR_RECVFROM;
		break;
	case NR_WRITEV:
		nr = NR_READV;
		break;
	case NR_SENDMSG:
		nr = NR_RECVMSG;
		break;
	default:
		nr = -1; /* sendfile, splice, io_uring: no buffer of the caller's */
	}
	read_buffer(sv, regs, nr);
}

/* Appends ret bytes read into buf to the request's capture, up to
 * cfg.capture_bytes: a server may read a request in pieces (Go's
 * net/http first reads a single byte to watch for the peer's close). */
static __always_inline __u32 capture(struct request_record *r, __u64 buf, __u32 ret)
{
	__u32 off = r->payload_len;
	if (!buf || off >= cfg.capture_bytes || off >= PAYLOAD_MAX)
		return 0;
	__u32 room = cfg.capture_bytes - off;
	__u32 len = ret < room ? ret : room;
	if (len == 0 || len > PAYLOAD_MAX)
		return 0;
	if (bpf_probe_read_user(&r->payload[off], len, (void *)buf))
		return 0;
	r->payload_len = off + len;
	return len;
}

/* HTTP/2's client preface: from it on, every byte of the connection is
 * sent on (prior knowledge, or after an HTTP/1.1 Upgrade). */
static __always_inline bool starts_http2(struct request_record *r)
{
	return r->payload_len >= 4 && r->payload[0] == 'P' && r->payload[1] == 'R' && r->payload[2] == 'I' &&
	       r->payload[3] == ' ';
}

/* Sends on the bytes buf[from, ret) of a read that began at stream offset
 * off, in chunks, within what the request may still send: they precede
 * the request's record in the ring buffer. Bytes left out leave a gap in
 * the offsets, which the collector sees. */
static __always_inline void send_chunks(struct conn_state *c, __u64 cookie, __u64 buf, __u64 off, __u32 from,
					 __u32 ret)
{
	__u32 zero = 0;
	struct chunk_record *k = bpf_map_lookup_elem(&chunk_scratch, &zero);
	if (!k || !buf)
		return;
	k->kind = RECORD_CHUNK;
	k->target = c->rec.target;
	k->conn = cookie;
	for (int i = 0; i < CHUNKS_PER_READ; i++) {
		if (from >= ret)
			return;
		__u32 len = ret - from;
		if (len > CHUNK_BYTES)
			len = CHUNK_BYTES;
		if (!c->follow_all) {
			if (c->chunked >= cfg.chunk_bytes)
				return;
			if (len > cfg.chunk_bytes - c->chunked)
				len = cfg.chunk_bytes - c->chunked;
		}
		if (len == 0 || len > CHUNK_BYTES)
			return;
		if (bpf_probe_read_user(k->data, len, (void *)(buf + from)))
			return;
		k->offset = off + from;
		k->len = len;
		c->chunked += len;
		c->streamed = 1;
		c->rec.flags |= REQ_CHUNKED;
		if (bpf_ringbuf_output(&requests, k, __builtin_offsetof(struct chunk_record, data) + len, RECORD_FLAGS)) {
			struct target_stats *s = stats_of(c->rec.target);
			COUNT(s, lost_chunks, 1);
			return;
		}
		from += len;
	}
}

/* A write of len bytes (buf_len of them from buf) on a stdio channel, at offset off of its
 * output, after the writer's charges reached the request: the record as it
 * stands, for the collector to end the request the write answers (by its
 * JSON-RPC id) and to take the CPU up to the write. A record lost to a
 * full buffer leaves a gap in the offsets, which the collector sees. */
/* The record of c as it stands, of kind, reserved in the ring buffer (no
 * payload), at stream offset off; NULL when the buffer is full. */
static __always_inline struct request_record *snapshot(struct conn_state *c, __u64 cookie, __u32 kind, __u64 off)
{
	struct request_record *r = bpf_ringbuf_reserve(&requests, sizeof(*r), 0);
	if (!r)
		return 0;
	if (bpf_probe_read_kernel(r, __builtin_offsetof(struct request_record, payload), &c->rec)) {
		bpf_ringbuf_discard(r, 0);
		return 0;
	}
	r->kind = kind;
	r->conn = cookie;
	r->stream_off = off;
	r->end_ns = bpf_ktime_get_ns();
	r->payload_len = 0;
	return r;
}

static __always_inline void send_response(struct conn_state *c, __u64 cookie, __u64 buf, __u32 buf_len, __u64 off,
					  __u32 len)
{
	struct request_record *r = snapshot(c, cookie, RECORD_RESPONSE, off);
	if (!r)
		return;
	r->bytes_out = len;
	__u32 head = buf_len < RESPONSE_HEAD ? buf_len : RESPONSE_HEAD;
	if (buf && head && !bpf_probe_read_user(r->payload, head, (void *)buf))
		r->payload_len = head;
	bpf_ringbuf_submit(r, RECORD_FLAGS);
}

/* The window's end, second step, over the conns map: what each open
 * connection's tail holds goes to the request it follows, as when a
 * thread leaves the tail. */
static long settle_conn(void *map, __u64 *cookie, struct conn_state *c, void *unused)
{
	if (c->role != ROLE_SERVER)
		return 0;
	if (c->closing)
		settle_close(c);
	else
		settle_tail(c);
	if (c->phase != PHASE_IDLE)
		take_setup(c);
	return 0;
}

#endif /* REQPROF_CONNS_H */
