// Package gohttp is a plain Go net/http server whose handlers burn a known
// amount of CPU: goroutines are free to move between threads, as in any Go
// server, so a profiler must not assume a request stays on one thread.
package gohttp

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reqprof/reqprof/testdata/calserver"
)

func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// Stats is what the server did: requests per path, and the CPU its handlers
// burned per request, per path, by the thread CPU clock, over the burns
// that stayed on one thread (a clock read on another thread means nothing).
type Stats struct {
	Requests map[string]uint64  `json:"requests"`
	BurnUs   map[string]float64 `json:"burn_us"`
}

type route struct {
	iterations           uint64
	requests             atomic.Uint64
	measured, measuredNs atomic.Uint64
}

// Main serves until SIGTERM, then prints Stats as one JSON line. Routes are
// --route PATH=DURATION.
func Main(args []string) int {
	fs := flag.NewFlagSet("gohttp", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	routes := map[string]time.Duration{}
	fs.Func("route", "PATH=DURATION: the handler of PATH burns DURATION of CPU", func(v string) error {
		path, d, ok := strings.Cut(v, "=")
		dur, err := time.ParseDuration(d)
		if !ok || err != nil {
			return fmt.Errorf("want PATH=DURATION, got %q", v)
		}
		routes[path] = dur
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return 2
	}
	served := map[string]*route{}
	mux := http.NewServeMux()
	for path, d := range routes {
		rt := &route{iterations: calserver.IterationsFor(d)}
		served[path] = rt
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			tid, start := unix.Gettid(), threadCPU()
			calserver.Burn(rt.iterations)
			if end := threadCPU(); unix.Gettid() == tid {
				rt.measured.Add(1)
				rt.measuredNs.Add(uint64(end - start))
			}
			rt.requests.Add(1)
			w.Write([]byte("ok\n"))
		})
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	fmt.Printf("listening on %s\n", ln.Addr())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	stats := Stats{Requests: map[string]uint64{}, BurnUs: map[string]float64{}}
	for path, rt := range served {
		stats.Requests[path] = rt.requests.Load()
		if n := rt.measured.Load(); n > 0 {
			stats.BurnUs[path] = float64(rt.measuredNs.Load()) / float64(n) / 1e3
		}
	}
	json.NewEncoder(os.Stdout).Encode(stats)
	return 0
}
