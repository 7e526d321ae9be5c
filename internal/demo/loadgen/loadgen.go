// Package loadgen drives a loopback HTTP/1.1 server with bounded, closed-loop
// load: each connection sends one request, reads the whole response, and only
// then sends the next.
//
// It ships in the reqprof binary (`reqprof demo` loads its servers with it;
// reqprof-bench and the collector's tests use it too), so it lives under
// internal/demo/, not testdata/, beside the calibrated server it drives;
// see package calserver for the layout.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config bounds a run in requests and in time.
type Config struct {
	Addr     string // host:port of a loopback server, or unix:PATH
	Conns    int    // concurrent connections; default 1, at most Requests
	Requests int    // total requests, split evenly across the connections
	// Paths are requested in turn, connection i starting at Paths[i%len],
	// so that every path gets its share however few requests a connection
	// sends; default "/".
	Paths []string
	// Bodies, if not nil, has one entry per path: the request for Paths[i]
	// is a POST of Bodies[i] as application/json if Bodies[i] != "", a GET
	// otherwise. Nil means every request is a GET.
	Bodies []string
	// Timeout bounds the whole run; default 30s.
	Timeout time.Duration
	// Pipeline, above 1, sends that many requests in one write before
	// reading their responses (HTTP/1.1 pipelining): the server reads
	// several requests in one read.
	Pipeline int
	// ConnPerRequest opens a connection for each request, as an HTTP/1.0
	// client does, and closes it once the response is in: the server
	// accepts, and may make a thread or process, for every request.
	// Pipeline is then 1.
	ConnPerRequest bool
	// Shuffle picks each request's path at random (from a seed fixed per
	// connection) instead of in turn: connections whose requests reach an
	// event loop together, and are read in one of its iterations, then
	// send them in no fixed order of paths, so that a path's figures do
	// not take what the first or last read of an iteration costs.
	Shuffle bool
}

// ErrConfig is what Run's errors for an invalid Config wrap.
var ErrConfig = errors.New("loadgen: invalid config")

// Result counts what a run got.
type Result struct {
	Requests int            `json:"requests"` // responses fully received
	Errors   int            `json:"errors"`   // failed requests (or dials), each ending its connection
	Elapsed  time.Duration  `json:"elapsed_ns"`
	PerPath  map[string]int `json:"per_path"` // responses fully received, by path
	// PerRequest counts the responses fully received by request: element i
	// for the request made of Config.Paths[i] (and Config.Bodies[i]), so that
	// requests to one path with different bodies are told apart.
	PerRequest []int `json:"per_request"`
}

// Run sends cfg.Requests requests and returns once every connection is done
// and closed. It reports an error wrapping ErrConfig if the config is
// invalid; otherwise it reports an error if not every request got its
// response, and the Result counts what did.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	requests := make([][]byte, len(cfg.Paths))
	for i, path := range cfg.Paths {
		requests[i] = request(path, cfg.body(i))
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	start := time.Now()
	conns := make([]connResult, cfg.Conns)
	var wg sync.WaitGroup
	for i := range conns {
		n := cfg.Requests / cfg.Conns
		if i < cfg.Requests%cfg.Conns {
			n++
		}
		if cfg.ConnPerRequest {
			wg.Go(func() { conns[i] = runConnPerRequest(ctx, cfg.Addr, requests, i, n, cfg.Shuffle) })
			continue
		}
		wg.Go(func() { conns[i] = runConn(ctx, cfg.Addr, requests, i, n, cfg.Pipeline, cfg.Shuffle) })
	}
	wg.Wait()

	res := Result{
		Elapsed:    time.Since(start),
		PerPath:    make(map[string]int),
		PerRequest: make([]int, len(cfg.Paths)),
	}
	var errs []error
	for _, c := range conns {
		for i, n := range c.perRequest {
			res.Requests += n
			res.PerPath[cfg.Paths[i]] += n
			res.PerRequest[i] += n
		}
		if c.err != nil {
			res.Errors++
			errs = append(errs, c.err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("loadgen: %d of %d requests answered: %w", res.Requests, cfg.Requests, err)
	}
	return res, nil
}

// request is the bytes of a GET of path, or with a body a POST of it.
// Headers are kept short so that a profiler capturing a request's first few
// hundred bytes sees the body too.
func request(path, body string) []byte {
	if body == "" {
		return []byte("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	return []byte("POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

func (c Config) body(i int) string {
	if c.Bodies == nil {
		return ""
	}
	return c.Bodies[i]
}

func (c Config) withDefaults() (Config, error) {
	if c.Requests <= 0 {
		return c, fmt.Errorf("%w: %d requests; want at least 1", ErrConfig, c.Requests)
	}
	if c.Bodies != nil && len(c.Bodies) != len(c.Paths) {
		return c, fmt.Errorf("%w: %d bodies for %d paths; want one per path", ErrConfig, len(c.Bodies), len(c.Paths))
	}
	if err := checkLoopback(c.Addr); err != nil {
		return c, err
	}
	if c.Conns <= 0 {
		c.Conns = 1
	}
	// A connection without a request would only open and close.
	c.Conns = min(c.Conns, c.Requests)
	if len(c.Paths) == 0 {
		c.Paths = []string{"/"}
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	c.Pipeline = max(c.Pipeline, 1)
	if c.ConnPerRequest {
		c.Pipeline = 1
	}
	return c, nil
}

// checkLoopback refuses any address but loopback: load is for the local
// test server only.
func checkLoopback(addr string) error {
	if strings.HasPrefix(addr, "unix:") {
		return nil // a Unix socket is local by nature
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: address: %w", ErrConfig, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return fmt.Errorf("%w: %s is not a loopback address", ErrConfig, addr)
	}
	return nil
}

type connResult struct {
	perRequest []int // responses received, by index in Config.Paths
	err        error
}

// pathOrder is which of count requests each of a connection's n is: in
// turn from first, or at random from a seed fixed by first.
func pathOrder(first, n, count int, shuffle bool) []int {
	order := make([]int, n)
	random := rand.New(rand.NewPCG(uint64(first), 0))
	for j := range order {
		order[j] = (first + j) % count
		if shuffle {
			order[j] = random.IntN(count)
		}
	}
	return order
}

// runConnPerRequest sends n requests one after another, in pathOrder's
// order, each on a connection of its own; it stops at the first that fails.
func runConnPerRequest(ctx context.Context, addr string, requests [][]byte, first, n int, shuffle bool) connResult {
	res := connResult{perRequest: make([]int, len(requests))}
	order := pathOrder(first, n, len(requests), shuffle)
	for j := range n {
		one := runConn(ctx, addr, requests, order[j], 1, 1, false)
		for i, got := range one.perRequest {
			res.perRequest[i] += got
		}
		if one.err != nil {
			res.err = fmt.Errorf("request %d: %w", j, one.err)
			return res
		}
	}
	return res
}

// runConn sends n requests on one connection, in pathOrder's order, depth of them in each write, and closes it: the close is what
// ends the server's last request on it for a profiler that watches
// connections.
func runConn(ctx context.Context, addr string, requests [][]byte, first, n, depth int, shuffle bool) connResult {
	res := connResult{perRequest: make([]int, len(requests))}
	order := pathOrder(first, n, len(requests), shuffle)
	var dialer net.Dialer
	network := "tcp"
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, addr = "unix", path
	}
	c, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		res.err = err
		return res
	}
	defer c.Close()
	// The end of ctx, by cancellation or by Config.Timeout, must also
	// interrupt a read or write in progress.
	stopInterrupt := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stopInterrupt()

	r := bufio.NewReader(c)
	var batch []byte
	for i := 0; i < n; i += depth {
		batch = batch[:0]
		for j := i; j < min(i+depth, n); j++ {
			batch = append(batch, requests[order[j]]...)
		}
		if _, err := c.Write(batch); err != nil {
			res.err = fmt.Errorf("request %d: %w", i, err)
			return res
		}
		for j := i; j < min(i+depth, n); j++ {
			if err := ReadResponse(r); err != nil {
				res.err = fmt.Errorf("response %d: %w", j, err)
				return res
			}
			res.perRequest[order[j]]++
		}
	}
	return res
}

var (
	statusOK      = []byte("HTTP/1.1 200 ")
	statusOK10    = []byte("HTTP/1.0 200 ") // an HTTP/1.0 server's
	contentLength = []byte("content-length")
)

// ReadResponse reads one whole response: status line, headers, and a body of
// Content-Length bytes.
func ReadResponse(r *bufio.Reader) error {
	status, err := r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(status, statusOK) && !bytes.HasPrefix(status, statusOK10) {
		return fmt.Errorf("status line %q", status)
	}
	length := -1
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(name), contentLength) {
			if length, err = strconv.Atoi(string(bytes.TrimSpace(value))); err != nil || length < 0 {
				return fmt.Errorf("header %q", line)
			}
		}
	}
	if length < 0 {
		return errors.New("response without Content-Length")
	}
	_, err = r.Discard(length)
	return err
}
