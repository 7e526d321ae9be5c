package calserver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// poller is the epoll loop the epoll and pool engines share: a non-blocking
// listening socket, an epoll set over it and the connections, and an eventfd
// that stop writes to, to end the loop.
type poller struct {
	listenFD int
	epollFD  int
	wakeFD   int

	loopErr error // why the loop ended early, if it did; read once it has returned
}

// pollHandler is what a poller's loop calls on, from its thread.
type pollHandler interface {
	// accepted takes a new connection's non-blocking socket and watches it.
	accepted(fd int) error
	// ready handles an event on a connection's socket.
	ready(fd int32)
}

func newPoller(listen string) (*poller, string, error) {
	listenFD, addr, err := listenTCP(listen, unix.SOCK_NONBLOCK)
	if err != nil {
		return nil, "", err
	}
	epollFD, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		unix.Close(listenFD)
		return nil, "", fmt.Errorf("calserver: epoll_create1: %w", err)
	}
	wakeFD, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(listenFD)
		unix.Close(epollFD)
		return nil, "", fmt.Errorf("calserver: eventfd: %w", err)
	}
	p := &poller{listenFD: listenFD, epollFD: epollFD, wakeFD: wakeFD}
	for _, fd := range []int{listenFD, wakeFD} {
		if err := p.watch(unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN); err != nil {
			p.release()
			return nil, "", err
		}
	}
	return p, addr, nil
}

// watch adds (EPOLL_CTL_ADD) fd to the epoll set or changes (EPOLL_CTL_MOD)
// what it is watched for. Any thread may call it.
func (p *poller) watch(op, fd int, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd)}
	if err := unix.EpollCtl(p.epollFD, op, fd, &ev); err != nil {
		return fmt.Errorf("calserver: epoll_ctl: %w", err)
	}
	return nil
}

// loop waits for events until stop, handing them to h. It runs on the calling
// goroutine's thread, which it locks for good: the thread exits with the loop
// rather than return to Go's pool.
func (p *poller) loop(h pollHandler) {
	runtime.LockOSThread()
	var events [64]unix.EpollEvent
	for {
		n, err := epollWaitRaw(p.epollFD, events[:], int(blockingSyscallTimeout/time.Millisecond))
		if err == unix.EINTR { // epoll_wait is never restarted after a signal
			continue
		}
		if err != nil {
			p.loopErr = fmt.Errorf("calserver: epoll_wait: %w", err)
			return
		}
		for _, ev := range events[:n] {
			switch int(ev.Fd) {
			case p.wakeFD:
				return
			case p.listenFD:
				if err := p.acceptAll(h); err != nil {
					p.loopErr = err
					return
				}
			default:
				h.ready(ev.Fd)
			}
		}
	}
}

// acceptAll accepts every connection waiting on the listening socket.
func (p *poller) acceptAll(h pollHandler) error {
	for {
		fd, _, err := unix.Accept4(p.listenFD, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch err {
		case nil:
		case unix.EAGAIN:
			return nil
		case unix.ECONNABORTED, unix.EINTR:
			continue
		default:
			return fmt.Errorf("calserver: accept4: %w", err)
		}
		setNoDelay(fd)
		if err := h.accepted(fd); err != nil {
			unix.Close(fd)
			return err
		}
	}
}

// stop makes the loop return soon.
func (p *poller) stop() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	// Only a counter overflow fails, after 2^64-2 stops.
	_, _ = unix.Write(p.wakeFD, one[:])
}

func (p *poller) release() error {
	return errors.Join(p.loopErr, unix.Close(p.listenFD), unix.Close(p.epollFD), unix.Close(p.wakeFD))
}

// epollEngine serves every connection from one OS thread running a
// level-triggered epoll loop over non-blocking sockets.
type epollEngine struct {
	*poller
	s      *Server
	ledger ledger // the one serving thread's

	conns map[int32]*epollConn // owned by the loop's goroutine
}

type epollConn struct {
	conn
	waitingToWrite bool // watched for EPOLLOUT rather than EPOLLIN
}

func startEpoll(s *Server, listen string) (engine, error) {
	p, addr, err := newPoller(listen)
	if err != nil {
		return nil, err
	}
	// The loop's thread keeps a P while it waits (see
	// blockingSyscallTimeout): one more for the rest of the process.
	if runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
	}
	e := &epollEngine{poller: p, s: s, conns: make(map[int32]*epollConn)}
	s.addr = addr
	s.wg.Add(1)
	go e.loop()
	return e, nil
}

func (e *epollEngine) loop() {
	defer e.s.wg.Done()
	// The one thread every request is served on.
	defer e.closeConns()
	defer e.ledger.settle()
	e.poller.loop(e)
}

func (e *epollEngine) accepted(fd int) error {
	if err := e.watch(unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN); err != nil {
		return err
	}
	e.conns[int32(fd)] = &epollConn{conn: conn{fd: fd, ledger: &e.ledger}}
	return nil
}

func (e *epollEngine) ready(fd int32) { e.advance(e.conns[fd]) }

// advance serves c as far as its socket allows, then watches it for what it
// waits on next: room to write the rest of a response, or more to read.
func (e *epollEngine) advance(c *epollConn) {
	if !e.serveReady(&c.conn) {
		e.closeConn(c)
		return
	}
	if wantWrite := len(c.unsentResponse) > 0; wantWrite != c.waitingToWrite {
		events := uint32(unix.EPOLLIN)
		if wantWrite {
			// Not EPOLLIN too: level-triggered, it would fire on every
			// pipelined byte while the response waits.
			events = unix.EPOLLOUT
		}
		if e.watch(unix.EPOLL_CTL_MOD, c.fd, events) != nil {
			e.closeConn(c)
			return
		}
		c.waitingToWrite = wantWrite
	}
}

// serveReady finishes sending a response the socket had no room for, or else
// reads once, then serves every complete request buffered, all without
// blocking. false means the connection is done with.
func (e *epollEngine) serveReady(c *conn) bool {
	s := e.s
	if len(c.unsentResponse) > 0 {
		if err := c.writeResponse(); err != nil {
			return err == unix.EAGAIN
		}
		s.finishRequest(c)
	} else if err := c.readMore(); err != nil {
		return err == unix.EAGAIN
	}
	for {
		r, err := c.takeRequest(s)
		if err != nil {
			return false
		}
		if r == nil {
			return true
		}
		s.respond(c, r)
		if err := c.writeResponse(); err != nil {
			return err == unix.EAGAIN
		}
		s.finishRequest(c)
	}
}

func (e *epollEngine) closeConn(c *epollConn) {
	delete(e.conns, int32(c.fd))
	unix.Close(c.fd) // closing also removes it from the epoll set
}

func (e *epollEngine) closeConns() {
	for _, c := range e.conns {
		e.closeConn(c)
	}
}

// The serving threads block in raw syscalls (epoll_wait, futex), as a C
// server's threads would, not through the Go runtime's syscall wrappers.
// Through them, each thread's P (Go's right to run Go code) passes into a
// syscall state that the runtime's monitor thread, sysmon, polls every
// 20 µs and takes back from a locked goroutine that has not yielded in 10
// ms: that kept sysmon polling for as long as the server was busy, some 12%
// of a one-worker pool's CPU, which is the runtime's and no request's. A
// thread in a raw syscall keeps its P and cannot be stopped for the
// garbage collector's stop-the-world, so none blocks for longer than
// blockingSyscallTimeout: a stop waits that long at most. (GOMAXPROCS is
// raised to give every serving thread a P of its own.)
const blockingSyscallTimeout = 5 * time.Millisecond

// epollWaitRaw is epoll_wait(2) as a raw syscall; see blockingSyscallTimeout.
func epollWaitRaw(epfd int, events []unix.EpollEvent, msec int) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_WAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), uintptr(msec), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
