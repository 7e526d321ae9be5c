// Package gohttp is a plain Go net/http server whose handlers burn a known
// amount of CPU: goroutines are free to move between threads, as in any Go
// server, so a profiler must not assume a request stays on one thread.
//
// It is a program, not data, so it lives under internal/, with the
// servers only tests and the bench run; see package calserver for the
// layout.
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
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/reqprof/reqprof/internal/demo/calserver"
)

// Stats is what the server did: requests per path, and the CPU its handlers
// burned per request, per path, by the thread CPU clock, over every burn.
type Stats struct {
	Requests map[string]uint64  `json:"requests"`
	BurnUs   map[string]float64 `json:"burn_us"`
	// The measured burns' spread, per burn (half a handler's with --pause).
	BurnP50Us map[string]float64 `json:"burn_p50_us"`
	BurnMaxUs map[string]float64 `json:"burn_max_us"`
}

type route struct {
	iterations uint64
	// spin burns the route's CPU: calserver's, or one of the functions
	// of its own that --burn-in names, so that a profile can tell routes
	// apart by function.
	spin     func(uint64)
	requests atomic.Uint64
	mu       sync.Mutex
	burns    []int64 // ns, each burn measured on one thread
}

// burn burns CPU and measures it by the thread's clock. The goroutine is
// locked to its thread for the burn alone: Go may still preempt it (sysmon
// after 10 ms, a GC's stop), but it resumes on the same thread and no other
// goroutine runs there meanwhile, so every burn is measured and none counts
// another's work. Leaving out the burns that moved or were preempted, as
// this server once did, left out more of the slow ones on a host whose pace
// varied: a truth a few percent low. Between burns (reading, writing,
// sleeping with --pause) the goroutine moves between threads freely.
func (rt *route) burn(iterations uint64) {
	runtime.LockOSThread()
	start := calserver.ThreadCPU()
	rt.spin(iterations)
	end := calserver.ThreadCPU()
	runtime.UnlockOSThread()
	rt.mu.Lock()
	rt.burns = append(rt.burns, int64(end-start))
	rt.mu.Unlock()
}

// mean is the burns' mean in ns.
func mean(burns []int64) float64 {
	var sum int64
	for _, b := range burns {
		sum += b
	}
	return float64(sum) / float64(len(burns))
}

// burnFunctions are what --burn-in names: loops of their own, the same
// work as calserver.Burn's, which a stack profile names apart.
var burnFunctions = map[string]func(uint64){"alpha": BurnAlpha, "beta": BurnBeta}

// BurnAlpha burns as calserver.Burn does, in a function of its own.
//
//go:noinline
func BurnAlpha(iterations uint64) { burnSink.Store(spinAlpha(iterations, burnSink.Load()|1)) }

// BurnBeta burns as calserver.Burn does, in another function of its own.
//
//go:noinline
func BurnBeta(iterations uint64) { burnSink.Store(spinBeta(iterations, burnSink.Load()|1)) }

var burnSink atomic.Uint64

// spinAlpha and spinBeta are calserver's xorshift loop, each its own copy:
// the same cost a round, so calserver's calibration holds for them.
//
//go:noinline
func spinAlpha(n, x uint64) uint64 {
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

//go:noinline
func spinBeta(n, x uint64) uint64 {
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
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
	pause := fs.Duration("pause", 0, "sleep this long halfway through each handler's burn")
	burnIn := map[string]string{}
	fs.Func("burn-in", "PATH=FUNCTION: the handler of PATH burns in BurnAlpha or BurnBeta (alpha, beta) rather than calserver's loop", func(v string) error {
		path, fn, ok := strings.Cut(v, "=")
		if _, known := burnFunctions[fn]; !ok || !known {
			return fmt.Errorf("want PATH=alpha or PATH=beta, got %q", v)
		}
		burnIn[path] = fn
		return nil
	})
	h2c := fs.Bool("h2c", false, "serve HTTP/2 without TLS as well (prior knowledge and the HTTP/1.1 Upgrade)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	served := map[string]*route{}
	mux := http.NewServeMux()
	for path, d := range routes {
		rt := &route{iterations: calserver.IterationsFor(d), spin: calserver.Burn}
		if fn, ok := burnIn[path]; ok {
			rt.spin = burnFunctions[fn]
		}
		served[path] = rt
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if *pause == 0 {
				rt.burn(rt.iterations)
			} else {
				// Half, a sleep (the goroutine parks, and the runtime
				// may resume it on another thread), the other half.
				rt.burn(rt.iterations / 2)
				time.Sleep(*pause)
				rt.burn(rt.iterations - rt.iterations/2)
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
	if *h2c {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	go srv.Serve(ln)
	fmt.Printf("listening on %s\n", ln.Addr())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	stats := Stats{Requests: map[string]uint64{}, BurnUs: map[string]float64{}, BurnP50Us: map[string]float64{}, BurnMaxUs: map[string]float64{}}
	for path, rt := range served {
		stats.Requests[path] = rt.requests.Load()
		if len(rt.burns) > 0 {
			burns := 1.0
			if *pause > 0 {
				burns = 2 // two halves, each measured on its own
			}
			slices.Sort(rt.burns) // for the spread below
			stats.BurnUs[path] = burns * mean(rt.burns) / 1e3
			stats.BurnP50Us[path] = float64(rt.burns[len(rt.burns)/2]) / 1e3
			stats.BurnMaxUs[path] = float64(rt.burns[len(rt.burns)-1]) / 1e3
		}
	}
	json.NewEncoder(os.Stdout).Encode(stats)
	return 0
}
