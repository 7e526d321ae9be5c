// Package calserver is an HTTP/1.1 server whose per-request CPU is known: it
// burns a configured amount of CPU per request and measures, on the serving
// thread's own CPU clock, what each request really cost. It serves with raw
// syscalls on OS threads it keeps to itself, outside Go's netpoller, so every
// request runs start to finish on one thread, as in a C server; that is what
// a per-thread profiler expects and what lets the thread's clock be the truth.
//
// It is code that ships in the reqprof binary (`reqprof demo` serves with
// it, and so do reqprof-bench and the collector's tests), so it lives under
// internal/demo/ with the load generator the demo drives it with: what the
// binary carries, apart from the servers only tests and the bench run
// (internal/testservers/). testdata/ holds data only.
package calserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// response is the same for every request but JSON-RPC ones: the work, not
// the bytes, is what the routes vary.
const response = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"

// A JSON-RPC request's response echoes its id: rpcResultHead, the id (or
// null), rpcResultTail.
const (
	rpcResponseHead = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
	rpcResultHead   = `{"jsonrpc":"2.0","id":`
	rpcResultTail   = `,"result":{}}`
)

// Server serves until Close.
type Server struct {
	addr     string
	response []byte

	byKey    map[string]*route // by route key; see Config.Routes
	fallback *route
	routes   []*route

	devNull       int
	devNullBuf    []byte
	devNullWrites int
	getppidCalls  int
	// user CPU of one round of the write loop apart from its syscall
	devNullLoopUserNs float64
	sleep             time.Duration
	closeAfter        bool // Config.CloseAfterResponse
	// getppid() calls made and the thread CPU they took, all requests'
	getppidDone, getppidCPUNs atomic.Uint64

	engine    engine
	wg        sync.WaitGroup // the engine's serving goroutines
	closeOnce sync.Once
	closeErr  error
}

// engine is one Model's serving machinery.
type engine interface {
	// stop makes every serving goroutine return soon.
	stop()
	// release frees what the engine holds once its goroutines have returned,
	// and reports why serving failed early, if it did.
	release() error
}

// engineStats is implemented by engines with figures of their own for Stats.
type engineStats interface {
	addStats(*Stats)
}

// Start calibrates the burn loop (once per process, a few ms), starts serving
// and returns once the server accepts connections.
func Start(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	listen := cfg.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	s := &Server{
		response:      []byte(response),
		byKey:         make(map[string]*route, len(cfg.Routes)),
		fallback:      &route{name: DefaultRoute, iterations: IterationsFor(cfg.Burn)},
		devNullBuf:    make([]byte, cfg.DevNullBytes),
		devNullWrites: cfg.DevNullWrites,
		getppidCalls:  cfg.GetppidCalls,
		sleep:         cfg.Sleep,
		closeAfter:    cfg.CloseAfterResponse,
	}
	s.routes = append(s.routes, s.fallback)
	for key, burn := range cfg.Routes {
		r := &route{name: key, iterations: IterationsFor(burn)}
		s.byKey[key] = r
		s.routes = append(s.routes, r)
	}
	var err error
	if s.devNull, err = unix.Open("/dev/null", unix.O_WRONLY|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("calserver: open /dev/null: %w", err)
	}
	if s.devNullWrites > 0 || s.getppidCalls > 0 {
		s.devNullLoopUserNs = writeLoopUserNs(s.devNull, s.devNullBuf)
	}
	switch cfg.Model {
	case Threads:
		s.engine, err = startThreads(s, listen)
	case Epoll:
		s.engine, err = startEpoll(s, listen)
	case Pool:
		workers := cfg.Workers
		if workers == 0 {
			workers = DefaultWorkers
		}
		s.engine, err = startPool(s, listen, workers)
	default:
		err = fmt.Errorf("calserver: unknown model %q", cfg.Model)
	}
	if err != nil {
		unix.Close(s.devNull)
		return nil, err
	}
	return s, nil
}

// Addr is the IP:port the server listens on.
func (s *Server) Addr() string { return s.addr }

// Stats is the ground truth so far. Taken while requests are in flight, its
// counters may be a request apart from one another; after Close it is final.
func (s *Server) Stats() Stats {
	st := Stats{Routes: make(map[string]Totals, len(s.routes)), DevNullLoopUserNs: s.devNullLoopUserNs,
		GetppidCalls: s.getppidDone.Load(), GetppidCPUNs: s.getppidCPUNs.Load()}
	for _, r := range s.routes {
		t := r.totals()
		st.Routes[r.name] = t
		st.add(t)
	}
	if e, ok := s.engine.(engineStats); ok {
		e.addStats(&st)
	}
	return st
}

// Close stops serving: it closes every connection, waits for the requests in
// progress to finish, and frees the server's descriptors.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.engine.stop()
		s.wg.Wait()
		s.closeErr = errors.Join(s.engine.release(), unix.Close(s.devNull))
	})
	return s.closeErr
}

// listenTCP opens a listening TCP socket on addr (IP:port) with the given
// extra socket type flags, and returns it with the address it is bound to.
func listenTCP(addr string, typeFlags int) (fd int, bound string, err error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		return listenUnix(path, typeFlags)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return -1, "", fmt.Errorf("calserver: listen address: %w", err)
	}
	domain, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()})
	if ap.Addr().Is4() {
		domain, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	fd, err = unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|typeFlags, 0)
	if err != nil {
		return -1, "", fmt.Errorf("calserver: socket: %w", err)
	}
	bound, err = bindAndListen(fd, sa, ap.Addr())
	if err != nil {
		unix.Close(fd)
		return -1, "", err
	}
	return fd, bound, nil
}

// listenUnix opens a listening Unix stream socket at path (replacing a
// stale one): servers behind a local proxy listen on one.
func listenUnix(path string, typeFlags int) (fd int, bound string, err error) {
	fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|typeFlags, 0)
	if err != nil {
		return -1, "", fmt.Errorf("calserver: socket: %w", err)
	}
	_ = unix.Unlink(path)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return -1, "", fmt.Errorf("calserver: bind %s: %w", path, err)
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		unix.Close(fd)
		return -1, "", fmt.Errorf("calserver: listen: %w", err)
	}
	return fd, "unix:" + path, nil
}

func bindAndListen(fd int, sa unix.Sockaddr, ip netip.Addr) (string, error) {
	// Restarting on a fixed port must not wait out the last run's TIME_WAITs.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return "", fmt.Errorf("calserver: SO_REUSEADDR: %w", err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		return "", fmt.Errorf("calserver: bind: %w", err)
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		return "", fmt.Errorf("calserver: listen: %w", err)
	}
	local, err := unix.Getsockname(fd)
	if err != nil {
		return "", fmt.Errorf("calserver: getsockname: %w", err)
	}
	var port int
	switch local := local.(type) {
	case *unix.SockaddrInet4:
		port = local.Port
	case *unix.SockaddrInet6:
		port = local.Port
	}
	return netip.AddrPortFrom(ip, uint16(port)).String(), nil
}

// setNoDelay turns Nagle off, as servers do, so that a response is never held
// back waiting for the client's ACK of the one before.
func setNoDelay(fd int) {
	// Failure only costs latency on pipelined responses, which tests do not send.
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
}

// Size limits of a request: its head (request line and headers, through the
// blank line) and its body. Clients send tens of bytes of head and at most a
// few KiB of body.
const (
	maxHead = 4 << 10
	maxBody = 12 << 10
)

// conn is one connection's buffered input and the request being served on it.
type conn struct {
	fd  int
	buf [maxHead + maxBody]byte // room for one whole request at least
	n   int                     // bytes buffered in buf

	// Scratch space, reused from request to request: a JSON-RPC request's
	// route key and response.
	key         []byte
	rpcResponse []byte

	// The request in progress: when it started, what it is, what is left to
	// send of its response.
	startCPU       int64
	startWall      time.Time
	route          *route
	response       []byte // the response takeRequest chose, for respond to send
	devNullCPUNs   int64
	unsentResponse []byte

	// ledger is the serving thread's: where a served request waits until
	// the thread turns to other work. Nil in the pool model, which records
	// its own way.
	ledger *ledger
}

// ledger holds a serving thread's last request, whose response is out but
// whose CPU is still being counted: the profiler this server calibrates
// charges a thread's CPU to the request it last served (its loop back to
// epoll_wait or read included) until the thread reads the next request. The
// truth ends at the same point: just before that read.
type ledger struct {
	route        *route
	startCPU     int64
	startWall    time.Time
	endWall      time.Time // the response's last byte: wall time keeps ending there
	devNullCPUNs int64
	// ioPart: the pool model's I/O thread, whose ledger holds only its
	// part of a request's CPU; the worker records the request.
	ioPart bool
}

// settle records the open request, if any, ending its CPU now.
func (l *ledger) settle() {
	if l == nil || l.route == nil {
		return
	}
	l.settleAt(threadCPUNow())
}

// settleAt records the open request, if any, ending its CPU at now, a
// reading of the thread's CPU clock.
func (l *ledger) settleAt(now int64) {
	if l == nil || l.route == nil {
		return
	}
	cpu := now - l.startCPU
	if l.ioPart {
		l.route.addIO(cpu)
	} else {
		l.route.record(cpu, l.devNullCPUNs, l.endWall.Sub(l.startWall).Nanoseconds())
	}
	l.route = nil
}

var (
	errHeadTooLarge = errors.New("request head larger than 4 KiB")
	errBodyTooLarge = errors.New("request body larger than 12 KiB")
	errMalformed    = errors.New("malformed request head")
	errChunked      = errors.New("request with Transfer-Encoding, unsupported")
	headEnd         = []byte("\r\n\r\n")
	crlf            = []byte("\r\n")
	methodPOST      = []byte("POST")
	contentLength   = []byte("Content-Length")
	transferEnc     = []byte("Transfer-Encoding")
	jsonNull        = []byte("null")
)

// readMore reads what the socket has into the buffer. When nothing is
// buffered the read brings a new request's first bytes, so the request starts
// just before it, where the thread's last request ends: the whole read
// syscall, blocking entry included, is the request's. A read returning 0
// bytes reports io.EOF.
func (c *conn) readMore() error {
	fresh := c.n == 0
	var before int64
	if fresh {
		// One reading ends the thread's last request and starts this
		// one: the requests' spans tile the thread's time, one clock
		// read between each two, as reqprof's do. (With a reading for
		// each, the second, its syscall included, was in reqprof's
		// request and in no span of the server's.)
		before = threadCPUNow()
		c.ledger.settleAt(before)
	}
	n, err := unix.Read(c.fd, c.buf[c.n:])
	if err != nil {
		return err
	}
	if n == 0 {
		return io.EOF
	}
	if fresh {
		c.startCPU, c.startWall = before, time.Now()
	}
	c.n += n
	return nil
}

// takeRequest removes the first complete request, head and body, from the
// buffer, sets c.response to its response, and returns its route; or returns
// nil if no request is complete yet.
func (c *conn) takeRequest(s *Server) (*route, error) {
	end := bytes.Index(c.buf[:min(c.n, maxHead)], headEnd)
	if end < 0 {
		if c.n >= maxHead {
			return nil, errHeadTooLarge
		}
		return nil, nil
	}
	method, path, bodyLen, err := parseHead(c.buf[:end])
	if err != nil {
		return nil, err
	}
	bodyStart := end + len(headEnd)
	reqEnd := bodyStart + bodyLen // at most len(c.buf), by the limits
	if c.n < reqEnd {
		return nil, nil
	}
	// Routed before the buffer moves under method, path and body.
	var r *route
	call, isRPC := rpcCall{}, false
	if bytes.Equal(method, methodPOST) {
		call, isRPC = parseRPC(c.buf[bodyStart:reqEnd])
	}
	if isRPC {
		r = s.routeFor(c.rpcKey(call))
		c.response = c.buildRPCResponse(call.id)
	} else {
		r = s.routeFor(path)
		c.response = s.response
	}
	c.n = copy(c.buf[:], c.buf[reqEnd:c.n])
	return r, nil
}

// parseHead reads the head "METHOD PATH?QUERY VERSION\r\nHeaders": the
// method, the path without the query, and the body's length from
// Content-Length (0 if absent).
func parseHead(head []byte) (method, path []byte, bodyLen int, err error) {
	line, headers, _ := bytes.Cut(head, crlf)
	method, target, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return nil, nil, 0, errMalformed
	}
	target, _, ok = bytes.Cut(target, []byte{' '})
	if !ok {
		return nil, nil, 0, errMalformed
	}
	path, _, _ = bytes.Cut(target, []byte{'?'})

	seenLength := false
	for len(headers) > 0 {
		var header []byte
		header, headers, _ = bytes.Cut(headers, crlf)
		name, value, ok := bytes.Cut(header, []byte{':'})
		if !ok {
			return nil, nil, 0, errMalformed
		}
		switch {
		case bytes.EqualFold(name, contentLength):
			n, err := parseLength(bytes.Trim(value, " \t"))
			if err != nil {
				return nil, nil, 0, err
			}
			if seenLength && n != bodyLen {
				return nil, nil, 0, errMalformed
			}
			bodyLen, seenLength = n, true
		case bytes.EqualFold(name, transferEnc):
			return nil, nil, 0, errChunked
		}
	}
	return method, path, bodyLen, nil
}

// parseLength reads a Content-Length value of at most maxBody.
func parseLength(digits []byte) (int, error) {
	if len(digits) == 0 {
		return 0, errMalformed
	}
	n := 0
	for _, d := range digits {
		if d < '0' || d > '9' {
			return 0, errMalformed
		}
		if n = n*10 + int(d-'0'); n > maxBody {
			return 0, errBodyTooLarge
		}
	}
	return n, nil
}

// rpcKey is a JSON-RPC call's route key: its method, and for "tools/call"
// and "prompts/get" a space and params.name too.
func (c *conn) rpcKey(call rpcCall) []byte {
	c.key = appendUnescaped(c.key[:0], call.method)
	if call.name != nil && (string(c.key) == "tools/call" || string(c.key) == "prompts/get") {
		c.key = append(c.key, ' ')
		c.key = appendUnescaped(c.key, call.name)
	}
	return c.key
}

// buildRPCResponse is the response to a JSON-RPC call with the raw id (nil
// if it had none).
func (c *conn) buildRPCResponse(id []byte) []byte {
	if id == nil {
		id = jsonNull
	}
	b := append(c.rpcResponse[:0], rpcResponseHead...)
	b = strconv.AppendInt(b, int64(len(rpcResultHead)+len(id)+len(rpcResultTail)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, rpcResultHead...)
	b = append(b, id...)
	b = append(b, rpcResultTail...)
	c.rpcResponse = b
	return b
}

func (s *Server) routeFor(key []byte) *route {
	if r, ok := s.byKey[string(key)]; ok { // string(key) here does not allocate
		return r
	}
	return s.fallback
}

// timedSyscalls makes n raw syscalls trap(a1, a2, a3) and returns the
// thread CPU they took, the loop's own instructions included.
func timedSyscalls(n int, trap, a1, a2, a3 uintptr) int64 {
	before := threadCPUNow()
	for range n {
		unix.RawSyscall(trap, a1, a2, a3)
	}
	return threadCPUNow() - before
}

// respond does a request's work and queues its response on c.
func (s *Server) respond(c *conn, r *route) {
	c.route = r
	Burn(r.iterations)
	c.devNullCPUNs = 0
	if s.devNullWrites > 0 {
		// Raw syscalls, without the Go runtime's entersyscall/exitsyscall
		// around each: a write to /dev/null never blocks, and the measure
		// is then the writes' kernel CPU with next to no user code in it.
		// They cannot fail; they are here for their kernel CPU.
		buf := unsafe.Pointer(unsafe.SliceData(s.devNullBuf))
		c.devNullCPUNs = timedSyscalls(s.devNullWrites, unix.SYS_WRITE, uintptr(s.devNull), uintptr(buf), uintptr(len(s.devNullBuf)))
	}
	if s.getppidCalls > 0 {
		// Outside the request's /dev/null figure: a reference in the same
		// thread for the cost of a syscall that does next to nothing.
		s.getppidCPUNs.Add(uint64(timedSyscalls(s.getppidCalls, unix.SYS_GETPPID, 0, 0, 0)))
		s.getppidDone.Add(uint64(s.getppidCalls))
	}
	if s.sleep > 0 {
		ts := unix.NsecToTimespec(s.sleep.Nanoseconds())
		// A signal cuts nanosleep short and leaves the remainder in ts.
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
	}
	c.unsentResponse = c.response
}

// writeResponse sends what the socket takes of the queued response. On a
// non-blocking socket it can stop short with EAGAIN.
func (c *conn) writeResponse() error {
	for len(c.unsentResponse) > 0 {
		n, err := unix.Write(c.fd, c.unsentResponse)
		if err != nil {
			return err
		}
		c.unsentResponse = c.unsentResponse[n:]
	}
	return nil
}

// finishRequest ends the request whose response's last byte just went out.
// Its CPU goes on until the thread turns to other work (see ledger), unless
// the next request (pipelined) is already buffered: the thread turns to it
// right now, so it starts here; each of several requests that arrived in one
// read is thus charged from the end of the one before. If nothing is
// buffered, the next read starts the next request.
func (s *Server) finishRequest(c *conn) {
	endWall := time.Now()
	if c.n > 0 || c.ledger == nil {
		endCPU := threadCPUNow()
		c.route.record(endCPU-c.startCPU, c.devNullCPUNs, endWall.Sub(c.startWall).Nanoseconds())
		c.startCPU, c.startWall = endCPU, endWall
		return
	}
	*c.ledger = ledger{route: c.route, startCPU: c.startCPU, startWall: c.startWall, endWall: endWall, devNullCPUNs: c.devNullCPUNs}
}
