/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the collector mirrors: limits, enums, and the records and states
 * it reads back (the ring buffer's records, the maps' keys and values,
 * the configuration it fixes). Each enum and struct named here reaches Go
 * through bpf2go (collector/gen.go), so the Go side uses generated names
 * and never a copy of a number. No maps and no variables: each lives
 * with the header that owns it.
 */
#ifndef REQPROF_TYPES_H
#define REQPROF_TYPES_H

#include "kernel_types.h"
#include <bpf/bpf_helpers.h>

/* Sizes and limits. An enum rather than #defines: the collector needs
 * several of them, and bpf2go mirrors an enum, not a macro. */
enum limits {
	MAX_TARGETS = 64,
	MAX_TARGET_PROCESSES = 4096, /* with children followed, many per target */
	MAX_GOROUTINES = 65536,
	/* Most jobs queued on targets' pools and not yet done (pools.h). */
	MAX_POOL_JOBS = 16384,
	MAX_PY_JOBS = 4096,     /* Python pool jobs ended, their request not yet known (pyjobs.h) */
	MAX_PY_FRAMES = 96,     /* frames walked to find a Python task's coroutine (pyjobs.h) */
	PY_FRAME_SPAN = 32,     /* bytes of a frame read at once, from its link on: its owner lies within (pyjobs.h) */
	MAX_HANDOFF_DEPTH = 4,
	MAX_CONNS = 65536,
	NR_SOFTIRQS = 10,
	SYSCALL_SLOTS = 12,
	/* Most bytes of a request captured for naming it. */
	PAYLOAD_MAX = 512,
	/* Room for a capture to be continued at any offset below PAYLOAD_MAX
	 * with up to PAYLOAD_MAX more bytes, which is what the verifier can
	 * check. */
	PAYLOAD_BUF = 2 * PAYLOAD_MAX,
	/* Bytes of a request beyond its capture are sent on as chunks of at
	 * most this many bytes, at most CHUNKS_PER_READ of them a read: the
	 * collector splits a burst into the requests it carries (pipelining,
	 * HTTP/2 streams). What a read brings beyond that is a gap, which the
	 * collector sees from the offsets. */
	CHUNK_BYTES = 4096,
	/* Bytes of a write on a stdio channel sent with its RECORD_RESPONSE:
	 * enough for a JSON-RPC response's "id", which encoders put first or
	 * after "jsonrpc" (and after an LSP Content-Length header). */
	RESPONSE_HEAD = 256,
	CHUNKS_PER_READ = 4,
	RINGBUF_BYTES = 8 << 20,
	/* Bytes of a Unix socket's path (struct sockaddr_un's sun_path). */
	UNIX_PATH_MAX = 108,
	/* The number charged for a syscall entered before the window opened. */
	SYSCALL_UNKNOWN = 0xfffff,
	/* Most frames of a stack sample's kernel stack, and of its user
	 * stack: the kernel's default perf_event_max_stack. */
	STACK_DEPTH = 127,
	/* Most interpreter frames (Python, PHP) of a stack sample, innermost
	 * first (interp.h): their entry flags are one 64-bit word. */
	MAX_INTERP_FRAMES = 64,
	/* Bytes of an interpreter frame read at once, from the lowest offset
	 * read: every field read lies within (interp_layout.frame_span). */
	INTERP_FRAME_SPAN = 128,
	/* Most backends (peers of outbound connections) counted apart for one
	 * request; calls to more are counted with the last. */
	MAX_BACKENDS = 4,
	/* Most tasks an asyncio loop thread holds woken and not yet run
	 * (backends.h). */
	LOOP_QUEUE = 32,
	/* Most tasks an asyncio loop iteration's unclaimed CPU is shared
	 * among (backends.h: loop_share). */
	LOOP_SHARES = 8,
	/* The bit of a stdio channel's id that marks a client's end of it
	 * (STDIO_CLIENT). */
	STDIO_CLIENT_BIT = 62,
};

/* What the current syscall-boundary state of a thread is. */
enum thread_mode {
	/* First seen mid-flight (at attach): not yet known whether it is in a
	 * syscall; its time is held back until the next syscall boundary tells. */
	MODE_UNKNOWN = 0,
	MODE_USER = 1,
	MODE_SYSCALL = 2,
};

/* Whether a thread is a Go runtime's, as far as its goroutines go. */
enum go_thread {
	GO_UNKNOWN = 0, /* not looked up yet */
	GO_NOT = 1,
	GO_YES = 2,
};

/* Whether a thread is a Python interpreter's whose pool jobs are followed
 * (pyjobs.h), as goroutines are for Go. */
enum py_thread {
	PY_UNKNOWN = 0, /* not looked up yet */
	PY_NOT = 1,
	PY_YES = 2,
};

enum conn_phase {
	PHASE_IDLE = 0,       /* accepted, or request finished: waiting for data */
	PHASE_READING = 1,    /* request bytes arriving, no response yet */
	PHASE_RESPONDING = 2, /* response being written */
};

enum conn_role {
	ROLE_SERVER = 1,   /* local port is one the target listens on */
	/* 2 was a socket of no stream (datagrams, netlink): those get no state. */
	ROLE_OUTBOUND = 3, /* a stream the target connected (a backend): its answers resume the request that called */
};

/* How a target's threads resume a request whose backend answered
 * (backends.h); the collector sets it per target in runtimes. */
enum runtime_model {
	/* Not recognised: a thread per request reads its own answers; an
	 * event loop's answer is assumed to resume its request at once, and
	 * requests it interleaves are flagged (REQ_INTERLEAVED). */
	RUNTIME_THREADS = 0,
	RUNTIME_IMMEDIATE = 1, /* an event loop that goes on with the caller at once after the read (libuv, nginx) */
	RUNTIME_ASYNCIO = 2, /* a write claims the CPU since the loop's last read or poll; a call's writer is the task woken for it (backends.h) */
	RUNTIME_GO = 3,      /* goroutines are followed (goroutines.h): an answer moves no thread */
};

/* request_record.flags */
enum record_flags {
	REQ_START_UNSEEN = 1, /* the request began before reqprof attached */
	REQ_CHUNKED = 2,      /* bytes beyond its payload were sent as chunk records before it */
	REQ_UNIX = 4,         /* it came on a Unix stream socket (local_port is 0) */
	REQ_STDIO = 8,        /* it came on the process's stdin, its response on stdout */
	REQ_BACKENDS = 16,    /* backend records for it precede it (struct backend_record) */
	REQ_INTERLEAVED = 32, /* its thread began another request before answering it, in a runtime not modelled */
	/* A call the target made on an outbound connection, its client's
	 * request: start_ns its first write, first_write_ns and end_ns the
	 * first and last read of its answer, bytes_out the call, bytes_in the
	 * answer, the payload the call's first bytes written, peer whom it
	 * called (conns.h: client_conn). */
	REQ_CLIENT = 64,
};

/* What a target's outbound connections are (the collector sets it per
 * target in target_roles). */
enum target_role {
	TARGET_SERVES = 0, /* backends of the requests it serves (backends.h) */
	TARGET_CALLS = 1,  /* a client's: each call on them is a request of its own (REQ_CLIENT) */
};

/* What a ring-buffer record is: every record starts with its kind. */
enum record_kind {
	RECORD_REQUEST = 1, /* struct request_record */
	RECORD_CHUNK = 2,   /* struct chunk_record: inbound bytes of a connection */
	RECORD_CLOSED = 3,  /* struct chunk_record with no data: a streamed connection closed */
	RECORD_STACK = 4,   /* struct stack_sample: a target thread's stacks, sampled on a CPU */
	/* struct request_record, sent at each write on a stdio channel: the
	 * open record as it stands after the write (its cost so far), with
	 * stream_off the write's offset in the channel's output, bytes_out the
	 * write's length and the payload its first RESPONSE_HEAD bytes, so that
	 * the collector reads the JSON-RPC id it answers. */
	RECORD_RESPONSE = 5,
	RECORD_BACKEND = 6, /* struct backend_record: what a request waited on one backend for */
	/* struct request_record, sent at a read that goes on with a burst of a
	 * stdio channel, before the read is charged: the open record's cost
	 * up to the read, with stream_off where the read starts in the
	 * channel's input. The collector gives what ran since the last such
	 * mark or response to the calls read before it, so that a call read
	 * and set aside (waiting on another service) keeps its own reading and
	 * parsing, rather than the call answered next taking them. */
	RECORD_READ_MARK = 7,
};

/* stack_sample.flags */
enum sample_flags {
	SAMPLE_KERNEL_MODE = 1, /* taken in the kernel: its kernel frames lead, its user frames are the caller's */
	SAMPLE_IN_REQUEST = 2,  /* conn and start_ns name the request it ran for */
	SAMPLE_START_UNSEEN = 4, /* that request began before reqprof attached: it will not be reported */
	SAMPLE_INTERP_TRUNCATED = 8, /* its thread ran more interpreter frames than MAX_INTERP_FRAMES: the outermost are left out */
};

/* What interpreter a process runs, whose frames stack samples read
 * (interp.h). */
enum interp_kind {
	INTERP_NONE = 0,
	INTERP_PYTHON = 1,
	INTERP_PHP = 2,
};

/* An offset of interp_layout a release does not have. */
#define INTERP_ABSENT 0xffffffffu

struct syscall_slot {
	__u32 nr; /* the syscall's number + 1; 0: a free slot */
	__u32 calls;
	__u64 ns;
};

/* What a request cost: on-CPU time by kind, and waiting. */
struct cost {
	__u64 user_ns;     /* on-CPU outside syscalls and interrupts */
	__u64 syscall_ns;  /* on-CPU inside syscalls, interrupts carved out */
	__u64 softirq_ns[NR_SOFTIRQS];
	__u64 irq_ns;      /* hard interrupt handlers */
	__u64 runqueue_ns; /* runnable, waiting for a CPU */
	__u64 offcpu_ns;   /* blocked: sleeping until woken */
	__u64 other_syscall_ns; /* syscalls beyond the named slots */
	__u32 other_syscall_calls;
	__u32 page_faults;
	__u32 voluntary_switches;
	__u32 involuntary_switches;
	/* Runs of reqprof's own programs in its context besides the syscall
	 * tracepoints' (whose runs are its syscalls): the collector takes
	 * what they cost out of its figures (selfcost.h). */
	__u32 sock_ops;   /* sock_recv_length and sock_send_length */
	__u32 wakeups;    /* sched_waking and sched_wakeup, run by it */
	__u32 interrupts; /* a softirq or hard irq's entry and exit over it */
	__u32 pool_probes; /* uprobes on a runtime's pool run by it (pools.h) */
	struct syscall_slot syscalls[SYSCALL_SLOTS];
};

/* The part of a request's cost that was its tail: the CPU after its last
 * write until its thread turned to other work, settled into its cost; with
 * the runs of reqprof's own programs counted in it (as in struct cost, the
 * switches aside: a tail's waiting is not its request's), so that the
 * collector takes their cost out of it as out of the whole. */
struct tail_cost {
	__u64 cpu_ns;
	__u32 syscalls;
	__u32 sock_ops;
	__u32 wakeups;
	__u32 interrupts;
	__u32 pool_probes;
	__u32 page_faults;
};

/* A peer of an outbound connection: its address (IPv4 in the first 4
 * bytes), port, and family (AF_UNIX: a Unix socket, no address). */
struct backend_peer {
	__u8 addr[16];
	__u16 port; /* host byte order */
	__u16 family;
	__u32 pad;
};

/* One finished request, the only thing sent to user space per request.
 * The payload is sent only up to payload_len. */
struct request_record {
	__u32 kind;           /* RECORD_REQUEST */
	__u32 target;
	__u64 conn;           /* socket cookie: unique for the kernel's lifetime */
	__u64 stream_off;     /* bytes read from the connection before its first: 0 at its start */
	__u64 start_ns;       /* its first bytes read */
	__u64 first_write_ns; /* its first response bytes written */
	__u64 end_ns;         /* its last write */
	__u64 bytes_in;
	__u64 bytes_out;
	/* Part of cost that was its connection's setup and teardown: the
	 * accept, the thread or process made for the connection until it
	 * first read it, and the close with what its closer did after it. */
	__u64 setup_ns;
	/* REQ_CLIENT: the peer it called; zero for a served request. */
	struct backend_peer peer;
	struct cost cost;
	struct tail_cost tail; /* part of cost */
	__u32 tgid;
	__u32 tid; /* thread that read its first bytes */
	__u32 flags; /* enum record_flags */
	__u16 local_port;
	__u16 payload_len;
	__u8 payload[PAYLOAD_BUF]; /* its first bytes read, payload_len of them */
};

/* What one request did with one backend. */
struct backend_use {
	struct backend_peer peer;
	__u64 calls;     /* writes after an answer (or the first): one call each */
	__u64 wait_ns;   /* from each call's first write to its answer's last read */
	__u64 bytes_in;  /* answers read */
	__u64 bytes_out; /* calls written */
};

/* Sent just before the record of the request it belongs to (REQ_BACKENDS). */
struct backend_record {
	__u32 kind; /* RECORD_BACKEND */
	__u32 target;
	__u64 conn;     /* the request's connection */
	__u64 start_ns; /* the request's start */
	struct backend_use use;
};

/* An outbound connection's call in flight, and the request that made it:
 * its answer resumes that request. */
struct backend_link {
	__u64 owner;          /* cookie of the served connection whose request wrote the call; 0: none */
	__u64 owner_start_ns; /* that request's start: the answer resumes it only while it is open */
	__u64 call_start_ns;  /* the call's first write; 0: no call yet */
	__u64 waited_ns;      /* of the call's wait, already added to the owner */
	__u64 unsent_out;     /* bytes written in the call, not yet added to the owner */
	__u32 answering;      /* the answer is being read: the next write is another call */
	__u32 owner_in_tail;  /* the call was written after the owner's response */
	struct backend_peer peer;
};

/* Bytes read from a served connection beyond a request's payload, sent
 * as they are read (so before the request's record); sent only up to len. */
struct chunk_record {
	__u32 kind;   /* RECORD_CHUNK or RECORD_CLOSED */
	__u32 target;
	__u64 conn;
	__u64 offset; /* bytes read from the connection before data[0] */
	__u32 len;
	__u32 pad;
	__u8 data[CHUNK_BYTES];
};

/* What a target thread was doing when a CPU's sampling clock ticked
 * (stacks.h): the request it ran for, if any, and its stacks. Sent only up
 * to kernel_frames + user_frames addresses. */
struct stack_sample {
	__u32 kind; /* RECORD_STACK */
	__u32 target;
	__u32 tgid;
	__u32 tid;
	__u64 conn;     /* socket cookie of the connection whose request it ran for; 0: none */
	__u64 start_ns; /* that request's start, which the collector finds it by */
	__u32 flags;    /* enum sample_flags */
	__u16 kernel_frames;
	__u16 user_frames;
	/* The word on top of the user stack, where a function that has not
	 * pushed a frame pointer (a leaf without a frame, or one in its
	 * prologue) keeps its return address, which the walk of frame
	 * pointers misses: the collector puts it back where the binary says
	 * the function has no frame (Go's pclntab). 0 when unread. */
	__u64 user_stack_top;
	/* Bit i: interpreter frame i is the last of those one invocation of
	 * the interpreter's loop runs (an entry frame: the C stack holds one
	 * such invocation for each run of frames up to one). */
	__u64 interp_entries;
	__u16 interp_frames;
	__u16 pad16[3];
	/* Return addresses, innermost first: the kernel frames, then the user
	 * frames; then the interpreter frames, innermost first, two words
	 * each: the code it runs (a Python code object, a PHP zend_function)
	 * and where in it (a Python frame's instruction pointer, or 3.10's
	 * f_lasti; a PHP frame's opline). */
	__u64 ips[2 * STACK_DEPTH + 2 * MAX_INTERP_FRAMES];
};

/* How the sampling program reads a process's interpreter frames
 * (interp.h), from the collector (collector/cpython, collector/php).
 * Offsets are bytes in a structure; INTERP_ABSENT where a release has no
 * such field. */
struct interp_layout {
	__u32 kind;       /* enum interp_kind */
	__u32 frame_span; /* bytes of a frame read at once, from frame_base: at most INTERP_FRAME_SPAN */
	/* PHP: the address of executor_globals.current_execute_data. Python:
	 * where the thread state holding the GIL is (3.10, 3.11: _PyRuntime's
	 * gilstate.tstate_current; 3.12, 3.13: the GIL's last_holder). */
	__u64 head;
	/* Python 3.12, 3.13: the GIL's locked (an int), without which its
	 * last_holder holds it no more; 0 where head is tstate_current. */
	__u64 gil_locked;
	__u32 tstate_thread_id; /* PyThreadState: its thread's pthread_t, the thread's FS base on x86-64 */
	__u32 tstate_frame;     /* ... its innermost frame (3.10, 3.13), or its _PyCFrame (3.11, 3.12) */
	__u32 cframe_frame;     /* _PyCFrame: its innermost frame; INTERP_ABSENT where tstate_frame is the frame */
	__u32 frame_base;       /* a frame's lowest offset read */
	__u32 frame_previous;   /* a frame: its caller's */
	__u32 frame_code;       /* ... its code */
	__u32 frame_instr;      /* ... where it is in it */
	__u32 instr_bytes;      /* 4 for 3.10's int f_lasti, else 8 */
	/* Where a frame says it is an entry frame (3.11's is_entry, PHP's
	 * This.u1.type_info), and the bits of the 32-bit word there that say
	 * so; INTERP_ABSENT where none does. */
	__u32 frame_entry;
	__u32 entry_mask;
	/* Python 3.12, 3.13: a frame's owner (a byte), and the owner of the
	 * shim frame each invocation of the loop pushes first, which ends a
	 * run and is no function's; INTERP_ABSENT before. */
	__u32 frame_owner;
	__u32 owner_cstack;
};

/* The open request of one connection, and the tail of its last writer.
 * Counters are added to atomically: several threads may serve one
 * connection. */
struct conn_state {
	struct request_record rec;
	struct cost tail;
	enum conn_phase phase;
	enum conn_role role;
	/* Bytes read from it so far, counted from the TCP stream's start, so
	 * that a connection joined after it opened shows it. */
	__u64 in_off;
	/* Bytes of the open request sent on as chunks: up to cfg.chunk_bytes
	 * a request, or every byte once follow_all is set. */
	__u32 chunked;
	/* HTTP/2: its header compression has state over the whole connection,
	 * so the collector needs every byte of it, not a request's first. */
	__u32 follow_all;
	/* Chunks were sent: the collector holds state for it until told it closed. */
	__u32 streamed;
	/* Flags every request of it carries (REQ_UNIX). */
	__u32 conn_flags;
	/* Served: the backends its open request called, backends_used of them. */
	__u32 backends_used;
	/* Closed by the thread serving it, which goes on charging its tail
	 * (the close, and what it does after) until it turns to other work
	 * or exits: only then is its last request emitted. */
	__u32 closing;
	struct backend_use backends[MAX_BACKENDS];
	/* Outbound: its call in flight. */
	struct backend_link link;
	/* Bytes written to it so far (stdio channels only): where each
	 * write's RECORD_RESPONSE starts in its output. */
	__u64 out_off;
	/* The accepted socket's address, its key in setups; 0: none. */
	__u64 setup_sk;
};

/* What a connection's setup cost before it is known by its cookie: from
 * the accept that returned it, the accepting thread's CPU, and that of a
 * thread or process it made for it, until that first reads it. Keyed by
 * the socket's address: the cookie does not exist yet at accept. */
struct setup_state {
	struct cost cost;
	__u32 target;
	__u32 pad;
};

/* A thread's on-CPU time, cut into pieces at syscall boundaries and
 * switches, and sized per slice to the kernel's accounting (threads.h). */
struct thread_clock {
	__u64 run_start_ns;   /* start of the on-CPU time not yet cut */
	__u64 held_ns;        /* on-CPU ns held back until the syscall boundary */
	__u64 sched_at_in;    /* kernel's sum_exec_runtime when put on the CPU; 0: unknown */
	__u64 slice_cut_ns;   /* ns cut from the current slice so far */
	__u64 debt_ns;        /* ns charged beyond the kernel's accounting, paid back later */
	__u64 interrupted_ns; /* interrupt time inside the piece not yet cut: already charged */
	__u64 advance_ns;     /* syscall entry cost charged beyond the clock in this slice */
	__u64 steal_at_ns;    /* the CPU's steal clock at run_start_ns (steal_clock) */
	__u32 mode;           /* enum thread_mode */
	__u32 syscall_nr;
};

/* What the thread serves, and what it was charged for it and has not yet
 * added there (threads.h: pending_of, flush). */
struct thread_serving {
	__u64 conn;     /* cookie of the connection it last read/wrote */
	__u64 read_buf; /* user buffer of the current read-like syscall */
	__u64 read_len; /* the bytes that buffer holds: past them a read fills another */
	__u32 in_tail;  /* the last socket operation was a write */
	__u32 handed;   /* it handed its request to a thread it woke (handoff.h) */
	__u32 pad;
	__u32 wrote;    /* the current syscall wrote to a served connection */
	__u32 served;   /* it has read or written a served connection */
	__u32 dirty;    /* pending holds something */
	/* A connection it accepted, or was made (cloned, forked) for, whose
	 * setup it serves until it turns to a request: the socket's address,
	 * its key in setups. Set only while conn is 0. */
	__u64 setup_sk;
	__u64 unattributed_ns; /* its CPU that served no request: to name the largest sources */
	/* What it was charged since it last turned to another destination (or
	 * left its CPU), for its destination now. */
	struct cost pending;
};

/* Blocked and runnable time, charged when it is back on a CPU. */
struct thread_waits {
	__u64 blocked_since_ns;  /* voluntary switch-out, until woken */
	__u64 runnable_since_ns; /* woken or preempted, until back on a CPU */
	__u64 offcpu_pending_ns; /* blocked time to charge when back on a CPU */
};

/* A request handed to the thread by the thread that woke it (handoff.h). */
struct thread_handoff {
	__u64 pending_conn;  /* set by a waker serving that request ... */
	__u32 pending;       /* ... and taken up when the thread runs */
	__u32 pending_depth;
	__u32 depth;         /* 0: it serves a connection of its own */
	/* It completes jobs of its runtime's pool (pools.h): serving no
	 * connection, its CPU is held until its job ends. */
	__u32 pool_worker;
	/* A Python pool job (pyjobs.h): the coroutine frame of the task that
	 * handed it the job it runs (0: none), one handed while it slept, to
	 * take up when it runs, and whether the syscall it is in hands its
	 * job back. */
	__u64 py_root;
	__u64 py_root_pending;
	__u32 py_ending;
	__u32 py_pad;
};


/* Where a Python interpreter keeps what pyjobs.h reads, for its release:
 * the collector gives it per process (pylayout.go). */
struct py_layout {
	__u64 tstate_current;    /* address of the thread state holding the GIL (0: none holds it) */
	__u32 tstate_native_tid; /* in a thread state: its thread's tid */
	__u32 tstate_cframe;     /* ... its C frame, the innermost evaluation loop's */
	__u32 cframe_current;    /* in a C frame: the Python frame it runs */
	__u32 frame_previous;    /* in a frame: its caller's, or the frame that resumed it */
	__u32 frame_owner;       /* ... its owner (a byte) */
	__u32 owner_generator;   /* the owner of a coroutine's (or generator's) frame */
};

/* A Python interpreter's thread (pyjobs.h): its process's layout, copied
 * at its first look, as a Go thread's offsets are. */
struct thread_py {
	struct py_layout layout;
	__u64 tstate; /* its PyThreadState, seen while it held the GIL */
	__u32 kind;   /* enum py_thread */
	__u32 handed; /* it handed a pool thread a job: its responses claim jobs */
};

/* Where a Go thread finds its goroutine (goroutines.h). */
struct thread_go {
	__s64 tls_offset;  /* its current g, from the FS base */
	__u64 goid_offset; /* a goroutine's id, in its g */
	__u64 goid;        /* the goroutine whose connection it last took up */
	/* A g of its own seen with id 0: its g0 (or its signal stack's g),
	 * which stays at that address with id 0 for the thread's life. */
	__u64 g0;
	__u32 kind; /* enum go_thread */
	__u32 pad;
};

/* Runs of reqprof's programs in a target thread's context, by kind,
 * over its life in the window, served a request or not: the target's
 * whole own cost, which its process's CPU includes (selfcost.h). */
struct self_runs {
	__u64 syscalls; /* sys_enter and sys_exit, one each */
	__u64 sock_ops;
	__u64 switches;
	__u64 wakeups;
	__u64 interrupts;
	__u64 faults;
	__u64 pool_probes;
};

/* A task an asyncio loop woke for a request (backends.h): by a read of
 * the request, or of the answer to its call. */
struct loop_wake {
	__u64 owner;  /* the request's connection cookie; 0: a free slot */
	__u32 at;     /* the loop iteration that read it */
	__u16 answer; /* woken by a backend's answer, not by the request's read */
	__u16 seq;    /* order of waking */
};

/* An asyncio loop thread (backends.h): its iteration (polls counted), the
 * tasks woken and not yet run. */
struct thread_loop {
	struct loop_wake woken[LOOP_QUEUE];
	__u32 iteration;
	__u16 seq;
	__u16 request_depth; /* iterations from a request's read to its task's first run; 0: not learnt yet */
	__u32 flush_at_exit; /* a call was written: its syscall is its caller's */
	__u32 model;         /* enum runtime_model + 1; 0: not looked up yet */
	/* Since its last read or write, the thread has polled or handed a
	 * job over: it runs tasks' steps, none of which said whose. */
	__u32 stepping;
	__u32 pad;
};

/* Per target thread. Only ever written from the CPU the thread runs on, or
 * by its waker while it sleeps. */
struct thread_state {
	__u32 target;
	__u32 pad;
	struct thread_clock clock;
	struct self_runs self;
	struct thread_serving serving;
	struct thread_waits waits;
	struct thread_handoff handoff;
	struct thread_go go;
	struct thread_py py;
	struct thread_loop loop;
};

/* A job queued on a runtime's pool (pools.h), by its process and the
 * address of its struct uv__work. */
struct pool_job_key {
	__u32 tgid;
	__u32 pad;
	__u64 work;
};

/* The request that queued it: its connection and start. */
struct pool_job {
	__u64 conn;
	__u64 start_ns;
};

/* A Python pool job ended (pyjobs.h), by its process and the coroutine
 * frame of the task that handed it over, which names its request once
 * that task writes the response. */
struct py_job_key {
	__u32 tgid;
	__u32 pad;
	__u64 root;
};

/* The CPU of the jobs that task's pool threads have ended. */
struct py_job {
	struct cost cost;
	__u64 jobs;
	__u64 ended_ns; /* when its first job ended: jobs taken unseen are claimed oldest first */
	/* Who delivers its CPU (pyjobs.h: py_claim, py_job_done): 0 while
	 * its job runs and no response was written; PY_JOB_ENDED once its
	 * job ended first, for the response to claim; else the connection
	 * of the request whose response went first, with that request's
	 * start, for the job's end to deliver to. */
	__u64 claimant;
	__u64 claimant_start_ns;
};

/* Per-target counters, per CPU so the hot path never contends. */
struct target_stats {
	__u64 unattributed_user_ns;
	__u64 unattributed_kernel_ns;
	__u64 between_requests_ns; /* part of attributed: tails, the server's loop after responses */
	__u64 dropped_ns;          /* CPU of requests closed before any response */
	__u64 dropped_requests;
	__u64 lost_records;        /* ring buffer full */
	__u64 lost_threads;        /* thread map full */
	__u64 lost_conns;          /* connection map full */
	__u64 threads_seen;
	__u64 start_unseen;        /* finished requests that began before attach */
	__u64 runqueue_ns;         /* all run-queue wait of target threads, in requests or not */
	__u64 offcpu_ns;           /* all blocked time of target threads */
	__u64 children_followed;   /* processes forked by a target and added to it */
	__u64 finished;            /* requests finished (emitted, or lost to a full ring buffer) */
	__u64 lost_chunks;         /* chunks of inbound bytes lost to a full ring buffer */
	__u64 lost_stack_samples;  /* stack samples lost to a full ring buffer */
	__u64 stack_samples;       /* stack samples taken of its threads: sent, or lost (above); only sample_stack writes either */
	__u64 setup_ns;            /* part of attributed: connections' setup and teardown */
	__u64 unseen_switch_ins;   /* slices opened at a thread's first event on a CPU, its switch-in not seen (threads.h) */
	__u64 pool_jobs_queued;    /* jobs queued on the runtime's pool by a thread serving a request (pools.h) */
	__u64 pool_jobs_done;      /* of them, ended by a pool thread while their request was open */
	__u64 pool_ns;             /* part of attributed: pool threads' CPU in those jobs */
	__u64 pool_held_ns;        /* pool threads' CPU held for a request known later (pyjobs.h) */
	__u64 pool_claimed_ns;     /* of it, the part that reached its request: the rest is unattributed */
	__u64 pool_jobs_unseen;    /* jobs a pool thread ended that it was seen to take from no request (pyjobs.h) */
	__u64 stolen_ns;           /* hypervisor steal inside its threads' slices, left out (threads.h: steal_clock) */
	struct self_runs exited_self; /* the program runs of its threads that exited */
};

/* Kinds of runs of reqprof's programs in a target's context, whose cost
 * is timed while timing_self is set (selfcost.h). */
enum self_kind {
	SELF_SYS_ENTER = 0,
	SELF_SYS_EXIT = 1,
	SELF_SOCK = 2,
	SELF_SWITCH = 3,
	SELF_WAKE = 4,
	SELF_INTERRUPT = 5,
	SELF_FAULT = 6,
	SELF_POOL = 7, /* a uprobe on a runtime's pool (pools.h) */
	SELF_KINDS = 8,
};

/* The time of the timed runs of one kind, and how many. */
struct self_timing {
	__u64 ns;
	__u64 runs;
};

/* Per CPU: which task was last seen here and whether it is a target (lets
 * events of other processes return without a hash lookup), and the
 * interrupt now running over it. */
struct cpu_state {
	__u64 softirq_start_ns;   /* 0: no softirq over a target thread */
	__u64 irq_start_ns;       /* 0: no hard irq over a target thread */
	__u64 irq_in_softirq_ns;  /* hard irq time inside the running softirq */
	__u64 softirq_steal_at;   /* the CPU's steal clock at the softirq's start */
	__u64 irq_steal_at;       /* ... and at the hard irq's */
	__u64 running_since_ns;    /* when running_tid was put on this CPU */
	__u64 running_sched_at_in; /* its sum_exec_runtime then */
	__u32 running_tid;         /* the task last put on this CPU */
	__u32 tid;
	__u32 target_plus1; /* 0: not a target */
	__u32 generation;   /* targets_generation when filled in */
	__u32 softirq_vec;
	/* Written only by a locked exchange, for the barrier it is
	 * (conns.h: full_barrier). */
	__u32 fence;
};

/* Go servers run many goroutines on few threads and move them between
 * threads, so a thread's last connection says little about whose work it
 * does. For a Go process the collector gives, from its binary, where a
 * thread keeps its running goroutine's g (an offset from the FS base) and
 * where a g keeps the goroutine's id. */
struct go_layout {
	__s64 tls_offset;
	__u64 goid_offset;
};

struct goroutine_key {
	__u32 tgid;
	__u32 pad;
	__u64 goid;
};

/* What the collector fixes before load. */
struct config {
	/* Bytes of each request to capture for naming it; 0 turns capture off. */
	__u32 capture_bytes;
	/* Whether processes forked by a target join it (pre-fork servers). */
	__u32 follow_children;
	/* Bytes of a request beyond capture_bytes sent on as chunks, so that
	 * the requests pipelined in it are counted; HTTP/2 connections send
	 * all. 0 turns chunks off. */
	__u32 chunk_bytes;
	/* Lite mode: no program on the syscall, interrupt and fault
	 * tracepoints; a socket operation is a request's boundary, and the
	 * user/kernel split is estimated from the kernel's tick accounting
	 * (threads.h: charge_lite). */
	__u32 lite;
	/* Tests only: no switch-in of a target's thread is seen, as where
	 * the kernel runs no tracepoint for a switch (threads.h:
	 * open_unseen_slice). Fixed at 0 otherwise: the verifier drops it. */
	__u32 hide_switch_ins;
	__u32 pad;
	/* Where a CPU's KVM steal clock (the per-CPU steal_time) is from its
	 * run queue (the per-CPU runqueues), in bytes, from the kernel's BTF;
	 * 0: none, the steal clock is not read (threads.h: steal_clock). */
	__s64 steal_time_from_rq;
};

/* The path of a Unix socket a target listens on: its bytes as the kernel
 * keeps them (a filesystem path with its NUL, an abstract name after its
 * leading NUL), zero-padded. */
struct unix_path {
	char path[UNIX_PATH_MAX];
};

/* A descriptor of a target process that carries requests without a
 * socket: its stdin and stdout (MCP's stdio transport), both the same
 * channel. */
struct stdio_key {
	__u32 tgid;
	__u32 fd;
};

/* The types Go mirrors by name: this list is the only one. bpf2go gives
 * each a Go type of its own (reqprof<Name>), from the -type flag that
 * collector/internal/genbpf makes of each line. A pointer to each puts it
 * in the programs' BTF, where an enum used only for its constants, or a
 * record built in a map's value, would have none of its own. */
#define MIRRORED_STRUCT(name) const struct name *unused_##name __attribute__((unused))
#define MIRRORED_ENUM(name) const enum name *unused_##name __attribute__((unused))
MIRRORED_STRUCT(request_record);
MIRRORED_STRUCT(target_stats);
MIRRORED_STRUCT(conn_state);
MIRRORED_STRUCT(thread_state);
MIRRORED_STRUCT(cost);
MIRRORED_STRUCT(tail_cost);
MIRRORED_STRUCT(syscall_slot);
MIRRORED_STRUCT(go_layout);
MIRRORED_ENUM(limits);
MIRRORED_ENUM(conn_phase);
MIRRORED_ENUM(conn_role);
MIRRORED_ENUM(record_flags);
MIRRORED_ENUM(record_kind);
MIRRORED_STRUCT(chunk_record);
MIRRORED_STRUCT(unix_path);
MIRRORED_STRUCT(setup_state);
MIRRORED_STRUCT(stdio_key);
MIRRORED_STRUCT(stack_sample);
MIRRORED_ENUM(sample_flags);
MIRRORED_ENUM(self_kind);
MIRRORED_STRUCT(self_timing);
MIRRORED_STRUCT(self_runs);
MIRRORED_STRUCT(backend_record);
MIRRORED_STRUCT(backend_use);
MIRRORED_ENUM(runtime_model);
MIRRORED_ENUM(target_role);
MIRRORED_STRUCT(backend_peer);
MIRRORED_STRUCT(py_layout);
MIRRORED_STRUCT(interp_layout);
MIRRORED_ENUM(interp_kind);

#endif /* REQPROF_TYPES_H */
