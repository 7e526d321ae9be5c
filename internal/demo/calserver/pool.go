package calserver

import (
	"errors"
	"math"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// poolEngine reads requests on one OS thread and serves them on others, as a
// server with an I/O thread and a pool of workers does. The I/O thread runs
// an epoll loop over the non-blocking sockets; it reads each request, queues
// it as a job and wakes one sleeping worker with FUTEX_WAKE; the worker burns
// the request's CPU and writes the response to the socket itself.
//
// A connection is the I/O thread's or a job's, never both: the I/O thread
// watches it with EPOLLONESHOT, so that once it queues a job the connection
// is out of the epoll set's sight; the worker re-arms it when the response is
// out. The I/O thread therefore never reads a connection's next request
// before the response to the one before was written.
type poolEngine struct {
	*poller
	s       *Server
	q       jobQueue
	workers int

	// Owned by the I/O thread while it runs, then by release.
	conns    map[int32]*poolConn
	ioLedger ledger // the I/O thread's part of the request it last read

	wakes, woken, waits atomic.Uint64 // see Stats.FutexWakes and the next
}

type poolConn struct {
	conn

	// busy is true from the I/O thread's queueing a job of the connection to
	// the worker's handing the connection back: the store by one and load by
	// the other order what each did to the connection before.
	busy atomic.Bool
	next *poolConn // the next job in the queue; a connection has one job at most

	// Set by the worker as it hands the connection back.
	handedBack bool // the I/O thread has not turned to it since
	failed     bool // writing the response failed: the connection is to close
}

func startPool(s *Server, listen string, workers int) (engine, error) {
	p, addr, err := newPoller(listen)
	if err != nil {
		return nil, err
	}
	// Every serving thread needs a P (Go's right to run Go code) when it
	// returns from a syscall. Without a free one it parks until another
	// thread of the runtime hands it one with a futex wake, and those wakes
	// would mix with the queue's own. One P per locked thread, and one for
	// the rest of the process, make them rare. Raised, never lowered: it is
	// the process's setting.
	if need := workers + 2; runtime.GOMAXPROCS(0) < need {
		runtime.GOMAXPROCS(need)
	}
	e := &poolEngine{poller: p, s: s, workers: workers, conns: make(map[int32]*poolConn)}
	s.addr = addr
	s.wg.Add(1 + workers)
	go e.ioLoop()
	for range workers {
		go e.work()
	}
	return e, nil
}

func (e *poolEngine) ioLoop() {
	defer e.s.wg.Done()
	e.ioLedger.ioPart = true
	defer e.ioLedger.settle()
	e.poller.loop(e)
}

const oneShotIn = unix.EPOLLIN | unix.EPOLLONESHOT

func (e *poolEngine) accepted(fd int) error {
	if err := e.watch(unix.EPOLL_CTL_ADD, fd, oneShotIn); err != nil {
		return err
	}
	e.conns[int32(fd)] = &poolConn{conn: conn{fd: fd, ledger: &e.ioLedger}}
	return nil
}

// ready takes the next request of c, from what is buffered or else from one
// read, and queues it; or, if none is complete yet, watches c for more.
func (e *poolEngine) ready(fd int32) {
	c := e.conns[fd]
	if c == nil || c.busy.Load() { // busy cannot be: a job's connection is not watched
		return
	}
	if c.failed {
		e.closeConn(c)
		return
	}
	if c.handedBack {
		c.handedBack = false
		// A request already buffered (pipelined) starts when the thread
		// turns to it, as in finishRequest. Else the next read starts one.
		if c.n > 0 {
			c.startCPU, c.startWall = threadCPUNow(), time.Now()
		}
	}
	r, err := c.takeRequest(e.s)
	if err == nil && r == nil {
		if err = c.readMore(); err == nil {
			r, err = c.takeRequest(e.s)
		} else if err == unix.EAGAIN {
			err = nil
		}
	}
	if err != nil {
		e.closeConn(c)
		return
	}
	if r == nil {
		// Level-triggered: if more came in the meantime, it fires at once.
		if e.watch(unix.EPOLL_CTL_MOD, c.fd, oneShotIn) != nil {
			e.closeConn(c)
		}
		return
	}
	e.dispatch(c, r)
}

// dispatch queues c's request r for the workers and wakes one, if one
// sleeps. The I/O thread's part of the request lasts until it turns to the
// next one (its ledger; as reqprof charges its loop to the request it last
// read).
func (e *poolEngine) dispatch(c *poolConn, r *route) {
	e.ioLedger.settle()
	e.ioLedger.route, e.ioLedger.startCPU = r, c.startCPU
	c.route = r
	c.busy.Store(true)
	woken, waked := e.q.push(c)
	if waked {
		e.wakes.Add(1)
		e.woken.Add(uint64(woken))
	}
}

// work serves jobs until stop. A worker's part of a job runs from the start
// of the pop that returned it to the start of the next pop: the wait for a
// job is the job's, as reqprof charges it to the request the wake hands over.
func (e *poolEngine) work() {
	defer e.s.wg.Done()
	// Never unlocked: the worker is one OS thread for its whole life, and the
	// thread exits with it.
	runtime.LockOSThread()
	s := e.s
	var open *route
	var openStart int64
	for {
		popStart := threadCPUNow()
		if open != nil {
			open.addWorker(popStart - openStart)
			open = nil
		}
		c := e.q.pop(&e.waits)
		if c == nil {
			return
		}
		s.respond(&c.conn, c.route)
		if e.writeAll(c) != nil {
			c.failed = true
		} else {
			c.route.count(c.devNullCPUNs, time.Since(c.startWall).Nanoseconds())
			open, openStart = c.route, popStart
		}
		e.handBack(c)
	}
}

var errStopped = errors.New("server stopping")

// writeAll writes c's response to its non-blocking socket, waiting for room
// if it must, until stop.
func (e *poolEngine) writeAll(c *poolConn) error {
	for {
		err := c.writeResponse()
		if err != unix.EAGAIN {
			return err
		}
		// Responses are tiny: only a client that does not read fills the
		// socket's buffer. Poll for room, and now and then for stop.
		fds := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLOUT}}
		if _, err := unix.Poll(fds, 100); err != nil && err != unix.EINTR {
			return err
		}
		if e.q.closed.Load() {
			return errStopped
		}
	}
}

// handBack returns c to the I/O thread and re-arms its watch: for input, and
// also for room to write if the I/O thread has something to do at once (a
// buffered request to take, a failed connection to close).
func (e *poolEngine) handBack(c *poolConn) {
	events := uint32(oneShotIn)
	if c.n > 0 || c.failed {
		events |= unix.EPOLLOUT
	}
	c.handedBack = true
	c.busy.Store(false)
	// Only fails if c.fd or the epoll set were closed, which neither is while
	// a worker runs; a connection left unwatched would close on Close anyway.
	_ = e.watch(unix.EPOLL_CTL_MOD, c.fd, events)
}

func (e *poolEngine) closeConn(c *poolConn) {
	delete(e.conns, int32(c.fd))
	unix.Close(c.fd) // closing also removes it from the epoll set
}

// stop makes the workers return once done with their jobs, dropping the
// jobs still queued, and the I/O thread return.
func (e *poolEngine) stop() {
	e.q.close()
	e.poller.stop()
}

// release closes the connections once every thread has returned: a worker may
// be writing to one until then.
func (e *poolEngine) release() error {
	for _, c := range e.conns {
		unix.Close(c.fd)
	}
	e.conns = nil
	return e.poller.release()
}

func (e *poolEngine) addStats(st *Stats) {
	st.FutexWakes = e.wakes.Load()
	st.FutexWoken = e.woken.Load()
	st.FutexWaits = e.waits.Load()
}

// jobQueue is a FIFO of connections with a job, on which workers sleep with
// raw futex calls, so that the thread that queues a job is the one whose
// FUTEX_WAKE wakes the worker (Go's own wake-ups, sync.Cond's or a channel's,
// come from whichever thread the runtime picks). It is linked through the
// connections, one job each at most, so it holds no more jobs than there are
// connections and never fills.
//
// The protocol is the classic sequence-counter one. Under the lock, push
// appends a job, increments seq, and notes whether a worker is asleep or
// about to be (sleepers > 0); then, out of the lock, it wakes one with
// FUTEX_WAKE on seq if so. A worker that finds the queue empty reads seq and
// increments sleepers under the lock, then, out of it, sleeps with FUTEX_WAIT
// on seq if seq still holds what it read; whatever it wakes for, it takes the
// lock again and looks again. No wake is lost: a push after the worker read
// seq has changed seq, so that the worker does not sleep or is woken, since
// push saw sleepers > 0.
type jobQueue struct {
	seq atomic.Uint32 // the futex word: an aligned uint32

	locked atomic.Uint32 // the spin lock guarding the fields below

	head, tail *poolConn
	sleepers   int32       // workers between seeing the queue empty and looking again
	closed     atomic.Bool // set under the lock; read without it by writeAll
}

// Linux futex operations, from <linux/futex.h>.
const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// lock takes the spin lock: it guards a few loads and stores, and a spin
// lock, unlike a futex-based mutex, adds no futex wake-ups between threads
// beyond the queue's own. It yields the CPU after a while, in case its holder
// was preempted.
func (q *jobQueue) lock() {
	for spins := 0; ; spins++ {
		if q.locked.Load() == 0 && q.locked.CompareAndSwap(0, 1) {
			return
		}
		if spins == 100 {
			unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			spins = 0
		}
	}
}

func (q *jobQueue) unlock() { q.locked.Store(0) }

// push queues c's job and wakes one worker if any sleeps; it reports whether
// it called FUTEX_WAKE and how many workers that woke.
func (q *jobQueue) push(c *poolConn) (woken int, waked bool) {
	q.lock()
	c.next = nil
	if q.tail == nil {
		q.head = c
	} else {
		q.tail.next = c
	}
	q.tail = c
	q.seq.Add(1)
	waked = q.sleepers > 0
	q.unlock()
	if waked {
		woken = futexWake(&q.seq, 1)
	}
	return woken, waked
}

// pop takes the next job, sleeping until there is one; nil means the queue
// was closed. waits counts its FUTEX_WAIT calls.
func (q *jobQueue) pop(waits *atomic.Uint64) *poolConn {
	q.lock()
	for {
		if q.closed.Load() {
			q.unlock()
			return nil
		}
		if c := q.head; c != nil {
			q.head = c.next
			if q.head == nil {
				q.tail = nil
			}
			c.next = nil
			q.unlock()
			return c
		}
		seq := q.seq.Load()
		q.sleepers++
		q.unlock()
		waits.Add(1)
		futexWait(&q.seq, seq)
		q.lock()
		q.sleepers--
	}
}

// close makes pop return nil from now on, and wakes every sleeping worker.
func (q *jobQueue) close() {
	q.lock()
	q.closed.Store(true)
	q.seq.Add(1)
	q.unlock()
	futexWake(&q.seq, math.MaxInt32)
}

// futexWait sleeps until a FUTEX_WAKE on word, unless word no longer holds
// val, for at most blockingSyscallTimeout. It may also return early (a
// signal, the timeout); callers look again either way. It is a raw syscall
// for the reason blockingSyscallTimeout gives.
func futexWait(word *atomic.Uint32, val uint32) {
	// EAGAIN (word changed) and EINTR are the expected errors; EFAULT and
	// EINVAL cannot be, with a valid aligned word.
	timeout := unix.NsecToTimespec(int64(blockingSyscallTimeout))
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWaitPrivate, uintptr(val), uintptr(unsafe.Pointer(&timeout)), 0, 0)
}

// futexWake wakes up to n threads sleeping on word, and reports how many it
// woke. It cannot block, so it is a raw syscall.
func futexWake(word *atomic.Uint32, n int) int {
	woken, _, errno := unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWakePrivate, uintptr(n), 0, 0, 0)
	if errno != 0 {
		return 0
	}
	return int(woken)
}
