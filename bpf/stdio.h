/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Requests on a target's stdin, answered on its stdout (MCP's stdio
 * transport), and a client's calls to a server it spawned over such a
 * pipe: channels the collector lists in stdio_fds, followed at the
 * syscall exit of a read or write on them, as the socket tracepoints
 * follow a connection (sockets.h). A write's record carries its first
 * bytes, for the collector to read the JSON-RPC id it answers.
 */
#ifndef REQPROF_STDIO_H
#define REQPROF_STDIO_H

#include "sockets.h"

/* In a stdio channel's id: the descriptor is a client's end of it, a
 * pipe to a server's stdin or from its stdout, on which the client writes
 * its calls and reads their answers (REQ_CLIENT). */
#define STDIO_CLIENT (1ULL << STDIO_CLIENT_BIT)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct stdio_key);
	__type(value, __u64); /* the channel's id, as a connection's cookie; STDIO_CLIENT: a client's end */
} stdio_fds SEC(".maps");

/* Descriptors in stdio_fds: while 0, no read or write looks there. */
volatile __u32 stdio_channels;

/* Thread st, serving stdio channel c's burst, reads more of it: what it
 * was charged up to the read reaches the record, which is sent as it
 * stands, the read not charged yet (RECORD_READ_MARK). */
static __always_inline void send_read_mark(struct thread_state *st, struct conn_state *c, __u64 cookie)
{
	flush_to(st, c);
	struct request_record *r = snapshot(c, cookie, RECORD_READ_MARK, c->in_off);
	if (r)
		bpf_ringbuf_submit(r, RECORD_FLAGS);
}

/* A write on a stdio channel, whose record is sent once the writer's
 * charges reached its request. */
struct stdio_write {
	struct conn_state *c;
	__u64 cookie;
	__u64 buf; /* the bytes written, or their first iovec's */
	__u64 off; /* in the channel's output */
	__u32 len;
	__u32 buf_len; /* of them in buf */
};

/* A read or write of a target thread on a descriptor its process serves
 * requests on without a socket (stdin and stdout, MCP's stdio transport),
 * done at the syscall's exit, before its time is charged, as the socket
 * tracepoints do inside it. A channel starts with a read: writes to stdout
 * before any request was read (a log) are none of its responses. A write
 * fills w. */
static __always_inline void stdio_done(struct thread_state *st, __u32 tid, struct pt_regs *regs, long ret,
				       struct stdio_write *w)
{
	if (ret <= 0)
		return;
	/* From the registers the syscall was made with, still there at its
	 * exit: a read begun before the window is seen whole. */
	long nr = regs->orig_ax;
	bool reading = nr == NR_READ || nr == NR_READV;
	if (!reading && nr != NR_WRITE && nr != NR_WRITEV)
		return;
	struct stdio_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .fd = regs->di};
	__u64 *cookie = bpf_map_lookup_elem(&stdio_fds, &key);
	if (!cookie)
		return;
	struct sock_op op = {.st = st, .tid = tid, .cookie = *cookie};
	op.c = bpf_map_lookup_elem(&conns, cookie);
	bool client = *cookie & STDIO_CLIENT;
	if (!op.c) {
		if (!reading && !client)
			return;
		op.c = client ? client_pipe_of(*cookie, st->target, tid, reading) : stdio_conn_of(*cookie, st->target, tid);
		if (!op.c)
			return;
	}
	if (client) {
		/* The client's end of a server it spawned: it writes calls to
		 * the server's stdin and reads their answers from its stdout. */
		if (reading)
			answer_read(&op, ret);
		else
			call_written(&op, ret);
		return;
	}
	if (reading) {
		if (cfg.capture_bytes)
			read_buffer(&st->serving, regs, nr);
		/* More of a burst the thread reads: where the calls read so far
		 * stop, for the collector. */
		if (op.c->phase == PHASE_READING && st->serving.conn == op.cookie && !st->serving.in_tail &&
		    op.c->rec.bytes_in && cfg.capture_bytes)
			send_read_mark(st, op.c, op.cookie);
		received(op.st, op.c, op.cookie, op.tid, ret);
		return;
	}
	sent(&op, ret);
	w->c = op.c;
	w->cookie = op.cookie;
	w->len = ret;
	w->buf_len = ret;
	w->off = __sync_fetch_and_add(&op.c->out_off, ret);
	__u64 arg2 = regs->si;
	if (nr == NR_WRITE) {
		w->buf = arg2;
	} else {
		__u64 first[2] = {}; /* struct iovec: base, len */
		if (arg2 && !bpf_probe_read_user(first, sizeof(first), (void *)arg2)) {
			w->buf = first[0];
			if (first[1] < w->buf_len)
				w->buf_len = first[1]; /* what follows is in the next buffers */
		}
	}
}

#endif /* REQPROF_STDIO_H */
