// Package calclient is a client that counts its own calls and measures
// its own CPU per call, for reqprof's client-side accuracy tests: the
// client-side counterpart of calserver.
//
// It opens --conns keep-alive connections to an HTTP/1.1 server, one
// goroutine each, and on SIGUSR1 makes --calls calls in all (GET --path),
// shared out among them, then prints one JSON line (Stats) and waits for
// SIGTERM. Two kinds:
//
//   - "nethttp": Go's net/http client (a Transport with --conns idle
//     connections), each call's body read whole;
//   - "grpc": grpc-go's client (internal/testservers/grpcserver's Light method), one
//     call at a time on each connection, which opens at its first call,
//     after SIGUSR1;
//   - "raw": each goroutine locked to its thread writes the request and
//     reads the response itself, then burns --burn of CPU (the calibrated
//     loop of calserver), so that every ns of the thread is the call's: it
//     measures its threads' CPU clocks over the calls.
//
// Stdin is left alone (a client reading a pipe would be taken for a stdio
// server); the statistics go to stdout.
package calclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/internal/testservers/grpcserver"
)

// Stats is what the client measured of its own calls, printed as JSON.
type Stats struct {
	Calls uint64 `json:"calls"`
	// ProcessCPUNs is the process's CPU clock over the calls, all its
	// threads, from the first call to the last answer.
	ProcessCPUNs uint64 `json:"process_cpu_ns"`
	// CallThreadsCPUNs is, for "raw", the CPU clocks of the threads that
	// made the calls, summed over the calls: every ns is a call's.
	CallThreadsCPUNs uint64 `json:"call_threads_cpu_ns,omitempty"`
	WallNs           uint64 `json:"wall_ns"`
}

// Main runs the client with args (without the program name).
func Main(args []string) int {
	fs := flag.NewFlagSet("calclient", flag.ContinueOnError)
	addr := fs.String("addr", "", "HOST:PORT of the HTTP/1.1 server")
	kind := fs.String("kind", "nethttp", "nethttp or raw")
	conns := fs.Int("conns", 4, "keep-alive connections")
	calls := fs.Int("calls", 10000, "calls in all, on SIGUSR1")
	path := fs.String("path", "/", "the path called")
	burn := fs.Duration("burn", 0, "raw: CPU burnt after each answer, calibrated")
	self := fs.Bool("serve-self", false, "also serve HTTP on loopback (net/http) and call that, itself, instead of --addr: a client and a server in one process")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *self {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, "calclient:", err)
			return 1
		}
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }))
		*addr = ln.Addr().String()
	}
	if *addr == "" || *conns < 1 || *calls < *conns || (*kind != "nethttp" && *kind != "raw" && *kind != "grpc") {
		fmt.Fprintln(os.Stderr, "calclient: give --addr, --kind nethttp|raw|grpc, --conns >= 1, --calls >= conns")
		return 2
	}
	start := make(chan os.Signal, 1)
	signal.Notify(start, syscall.SIGUSR1)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	var c caller
	var err error
	switch *kind {
	case "raw":
		c, err = dialRaw(*addr, *path, *conns, calserver.IterationsFor(*burn))
	case "grpc":
		c, err = dialGRPC(*addr, *conns)
	default:
		c, err = newNetHTTP(*addr, *path, *conns)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "calclient:", err)
		return 1
	}
	fmt.Println("ready")
	<-start
	stats, err := run(c, *conns, *calls)
	if err != nil {
		fmt.Fprintln(os.Stderr, "calclient:", err)
		return 1
	}
	out, _ := json.Marshal(stats)
	fmt.Println(string(out))
	<-stop
	return 0
}

// caller makes calls on connection i, n of them; it returns its thread's
// CPU over them when it measures it.
type caller interface {
	calls(i, n int) (threadNs uint64, err error)
}

func run(c caller, conns, calls int) (Stats, error) {
	cpu0 := processCPU()
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, conns)
	threadNs := make([]uint64, conns)
	for i := range conns {
		n := calls / conns
		if i < calls%conns {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			threadNs[i], errs[i] = c.calls(i, n)
		}()
	}
	wg.Wait()
	s := Stats{Calls: uint64(calls), ProcessCPUNs: processCPU() - cpu0, WallNs: uint64(time.Since(t0))}
	for _, ns := range threadNs {
		s.CallThreadsCPUNs += ns
	}
	return s, errors.Join(errs...)
}

func processCPU() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
	return uint64(ts.Nano())
}

// netHTTP calls with Go's net/http client.
type netHTTP struct {
	client *http.Client
	url    string
}

func newNetHTTP(addr, path string, conns int) (*netHTTP, error) {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}
	c := &netHTTP{client: &http.Client{Transport: tr}, url: "http://" + addr + path}
	// The connections open now, before any window: the calls find them idle.
	var wg sync.WaitGroup
	errs := make([]error, conns)
	for i := range conns {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.call() }()
	}
	wg.Wait()
	return c, errors.Join(errs...)
}

func (c *netHTTP) call() error {
	resp, err := c.client.Get(c.url)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return err
}

func (c *netHTTP) calls(_, n int) (uint64, error) {
	for range n {
		if err := c.call(); err != nil {
			return 0, err
		}
	}
	return 0, nil
}

// raw calls on connections of its own, one thread each.
type raw struct {
	conns      []net.Conn
	request    []byte
	iterations uint64
}

func dialRaw(addr, path string, conns int, iterations uint64) (*raw, error) {
	r := &raw{request: []byte("GET " + path + " HTTP/1.1\r\nHost: calclient\r\n\r\n"), iterations: iterations}
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		r.conns = append(r.conns, c)
	}
	return r, nil
}

func (r *raw) calls(i, n int) (uint64, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	conn := r.conns[i]
	br := bufio.NewReaderSize(conn, 64<<10)
	t0 := calserver.ThreadCPU()
	for range n {
		if _, err := conn.Write(r.request); err != nil {
			return 0, err
		}
		if err := loadgen.ReadResponse(br); err != nil {
			return 0, err
		}
		calserver.Burn(r.iterations)
	}
	return uint64(calserver.ThreadCPU() - t0), nil
}

// grpcCalls calls grpcserver's Light method with grpc-go.
type grpcCalls struct {
	conns []*grpc.ClientConn
}

func dialGRPC(addr string, conns int) (*grpcCalls, error) {
	g := &grpcCalls{}
	for range conns {
		cc, err := grpcserver.Dial(addr)
		if err != nil {
			return nil, err
		}
		g.conns = append(g.conns, cc)
	}
	return g, nil
}

func (g *grpcCalls) calls(i, n int) (uint64, error) {
	done, err := grpcserver.LoadOn(context.Background(), g.conns[i], 1, n, []string{grpcserver.Methods.Light})
	if err == nil && done[grpcserver.Methods.Light] != uint64(n) {
		err = fmt.Errorf("%d of %d calls done", done[grpcserver.Methods.Light], n)
	}
	return 0, err
}
