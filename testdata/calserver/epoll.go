package calserver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// epollEngine serves every connection from one OS thread running a
// level-triggered epoll loop over non-blocking sockets.
type epollEngine struct {
	s        *Server
	listenFD int
	epollFD  int
	wakeFD   int // an eventfd that stop writes to, to end the loop

	// Owned by the loop's goroutine.
	conns   map[int32]*epollConn
	loopErr error // why the loop ended early, if it did; read once it has returned
}

type epollConn struct {
	conn
	waitingToWrite bool // watched for EPOLLOUT rather than EPOLLIN
}

func startEpoll(s *Server, listen string) (engine, error) {
	listenFD, addr, err := listenTCP(listen, unix.SOCK_NONBLOCK)
	if err != nil {
		return nil, err
	}
	epollFD, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		unix.Close(listenFD)
		return nil, fmt.Errorf("calserver: epoll_create1: %w", err)
	}
	wakeFD, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(listenFD)
		unix.Close(epollFD)
		return nil, fmt.Errorf("calserver: eventfd: %w", err)
	}
	e := &epollEngine{
		s:        s,
		listenFD: listenFD,
		epollFD:  epollFD,
		wakeFD:   wakeFD,
		conns:    make(map[int32]*epollConn),
	}
	for _, fd := range []int{listenFD, wakeFD} {
		if err := e.watch(unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN); err != nil {
			e.release()
			return nil, err
		}
	}
	s.addr = addr
	s.wg.Add(1)
	go e.loop()
	return e, nil
}

func (e *epollEngine) watch(op, fd int, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd)}
	if err := unix.EpollCtl(e.epollFD, op, fd, &ev); err != nil {
		return fmt.Errorf("calserver: epoll_ctl: %w", err)
	}
	return nil
}

func (e *epollEngine) loop() {
	defer e.s.wg.Done()
	// The one thread every request is served on. Never unlocked, so the
	// thread exits with the loop rather than return to Go's pool.
	runtime.LockOSThread()
	defer e.closeConns()

	var events [64]unix.EpollEvent
	for {
		n, err := unix.EpollWait(e.epollFD, events[:], -1)
		if err == unix.EINTR { // epoll_wait is never restarted after a signal
			continue
		}
		if err != nil {
			e.loopErr = fmt.Errorf("calserver: epoll_wait: %w", err)
			return
		}
		for _, ev := range events[:n] {
			switch int(ev.Fd) {
			case e.wakeFD:
				return
			case e.listenFD:
				if err := e.acceptAll(); err != nil {
					e.loopErr = err
					return
				}
			default:
				e.advance(e.conns[ev.Fd])
			}
		}
	}
}

// acceptAll accepts every connection waiting on the listening socket.
func (e *epollEngine) acceptAll() error {
	for {
		fd, _, err := unix.Accept4(e.listenFD, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
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
		if err := e.watch(unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN); err != nil {
			unix.Close(fd)
			return err
		}
		e.conns[int32(fd)] = &epollConn{conn: conn{fd: fd}}
	}
}

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

func (e *epollEngine) stop() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	// Only a counter overflow fails, after 2^64-2 stops.
	_, _ = unix.Write(e.wakeFD, one[:])
}

func (e *epollEngine) release() error {
	return errors.Join(e.loopErr, unix.Close(e.listenFD), unix.Close(e.epollFD), unix.Close(e.wakeFD))
}
