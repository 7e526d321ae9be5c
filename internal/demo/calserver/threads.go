package calserver

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// threadsEngine gives each connection an OS thread of its own, doing
// blocking I/O on a blocking socket.
type threadsEngine struct {
	s        *Server
	listenFD int

	mu       sync.Mutex
	conns    map[int]struct{} // open connections, to shut down on stop
	stopping bool
	// acceptErr is why accepting ended early, if it did; written by the
	// acceptor before it returns, read once it has.
	acceptErr error
}

func startThreads(s *Server, listen string) (engine, error) {
	fd, addr, err := listenTCP(listen, 0)
	if err != nil {
		return nil, err
	}
	s.addr = addr
	e := &threadsEngine{s: s, listenFD: fd, conns: make(map[int]struct{})}
	s.wg.Add(1)
	go e.accept()
	return e, nil
}

func (e *threadsEngine) accept() {
	defer e.s.wg.Done()
	// Locked for good: accepting keeps to a thread of its own, apart from
	// the threads that serve requests, and the thread exits with it.
	runtime.LockOSThread()
	for {
		fd, _, err := unix.Accept4(e.listenFD, unix.SOCK_CLOEXEC)
		if err == unix.ECONNABORTED || err == unix.EINTR {
			continue
		}
		if err != nil {
			e.mu.Lock()
			if !e.stopping {
				e.acceptErr = fmt.Errorf("calserver: accept4: %w", err)
			}
			e.mu.Unlock()
			return
		}
		if !e.track(fd) {
			unix.Close(fd)
			return
		}
		setNoDelay(fd)
		e.s.wg.Add(1)
		go e.serve(fd)
	}
}

// track adds fd to the connections stop shuts down, unless stop has begun.
func (e *threadsEngine) track(fd int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping {
		return false
	}
	e.conns[fd] = struct{}{}
	return true
}

func (e *threadsEngine) serve(fd int) {
	defer e.s.wg.Done()
	// Never unlocked: every request on the connection runs on this thread,
	// and the thread exits with the goroutine, as a thread-per-connection
	// server's thread ends with its connection.
	runtime.LockOSThread()
	defer e.closeConn(fd)

	s := e.s
	c := &conn{fd: fd, ledger: &ledger{}}
	// The thread's last request ends with its connection.
	defer c.ledger.settle()
	for {
		r, err := c.takeRequest(s)
		if err != nil {
			return
		}
		if r == nil {
			if c.readMore() != nil {
				return
			}
			continue
		}
		s.respond(c, r)
		if c.writeResponse() != nil {
			return
		}
		s.finishRequest(c)
		if s.closeAfter {
			return
		}
	}
}

func (e *threadsEngine) closeConn(fd int) {
	e.mu.Lock()
	delete(e.conns, fd)
	e.mu.Unlock()
	unix.Close(fd)
}

func (e *threadsEngine) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopping = true
	// shutdown, unlike close, wakes the threads blocked on these sockets: a
	// blocked read returns 0, a blocked accept EINVAL.
	for fd := range e.conns {
		unix.Shutdown(fd, unix.SHUT_RDWR)
	}
	unix.Shutdown(e.listenFD, unix.SHUT_RDWR)
}

func (e *threadsEngine) release() error {
	return errors.Join(e.acceptErr, unix.Close(e.listenFD))
}
