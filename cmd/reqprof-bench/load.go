package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/reqprof/reqprof/internal/demo/loadgen"
)

// wrkResult is what one wrk run reports.
type wrkResult struct {
	requests  int
	perSecond float64
	errors    int    // socket errors and non-2xx responses
	cpuNs     uint64 // wrk's own CPU
}

var (
	wrkRequests  = regexp.MustCompile(`(\d+) requests in `)
	wrkPerSecond = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	wrkSocket    = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkStatus    = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

// runWrk loads url with wrk, closed loop: each connection sends its next
// request when the last is answered. script, if any, is a wrk script that
// makes the requests; headers are "Name: value" lines.
func runWrk(wrk, url, script string, threads, conns int, d time.Duration, headers ...string) (wrkResult, error) {
	args := []string{"-t" + strconv.Itoa(threads), "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(int(d.Seconds())) + "s"}
	if script != "" {
		args = append(args, "-s", script)
	}
	for _, h := range headers {
		args = append(args, "-H", h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, wrk, append(args, url)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %w\n%s", err, out)
	}
	usage := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	r := wrkResult{cpuNs: uint64(usage.Utime.Nano() + usage.Stime.Nano())}
	m, rate := wrkRequests.FindSubmatch(out), wrkPerSecond.FindSubmatch(out)
	if m == nil || rate == nil {
		return r, fmt.Errorf("no request count in wrk's output:\n%s", out)
	}
	r.requests, _ = strconv.Atoi(string(m[1]))
	r.perSecond, _ = strconv.ParseFloat(string(rate[1]), 64)
	if m := wrkSocket.FindSubmatch(out); m != nil {
		for _, n := range m[1:] {
			count, _ := strconv.Atoi(string(n))
			r.errors += count
		}
	}
	if m := wrkStatus.FindSubmatch(out); m != nil {
		count, _ := strconv.Atoi(string(m[1]))
		r.errors += count
	}
	if r.requests == 0 {
		return r, fmt.Errorf("wrk got no response:\n%s", out)
	}
	return r, nil
}

// holdResult is what the many-connections client got.
type holdResult struct {
	opened   int           // connections established
	openTime time.Duration // until the last was
	requests int           // responses received
	errors   int           // failed dials, requests or responses
}

// dialParallel bounds dials in flight: more only overflow the listen
// backlog, and a dropped SYN costs a second's retry.
const dialParallel = 256

// holdConnections opens n keep-alive connections to addr and keeps them
// open for hold, each sending a request when it is open and then one every
// interval, at a random phase so that load stays even. It returns once every
// connection is closed.
func holdConnections(addr string, n int, hold, interval time.Duration) holdResult {
	var (
		opened, requests, failures atomic.Int64
		lastOpen                   atomic.Int64 // ns since start
		wg                         sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(hold)
	dials := make(chan struct{}, dialParallel)
	for range n {
		wg.Go(func() {
			dials <- struct{}{}
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			<-dials
			if err != nil {
				failures.Add(1)
				return
			}
			defer c.Close()
			opened.Add(1)
			for now := int64(time.Since(start)); ; {
				last := lastOpen.Load()
				if now <= last || lastOpen.CompareAndSwap(last, now) {
					break
				}
			}
			// Any read or write still pending at the end fails then.
			if err := c.SetDeadline(deadline.Add(5 * time.Second)); err != nil {
				failures.Add(1)
				return
			}
			r := bufio.NewReader(c)
			// The first request at once, so that the server (and reqprof)
			// knows every connection; then at a random phase, every interval.
			for next := time.Now().Add(rand.N(interval)); ; next = next.Add(interval) {
				if _, err := c.Write(holdRequest); err != nil {
					failures.Add(1)
					return
				}
				if err := loadgen.ReadResponse(r); err != nil {
					failures.Add(1)
					return
				}
				requests.Add(1)
				if !next.Before(deadline) {
					break
				}
				time.Sleep(time.Until(next))
			}
			// Every connection stays open to the end.
			time.Sleep(time.Until(deadline))
		})
	}
	wg.Wait()
	return holdResult{
		opened:   int(opened.Load()),
		openTime: time.Duration(lastOpen.Load()),
		requests: int(requests.Load()),
		errors:   int(failures.Load()),
	}
}

var holdRequest = []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")

var h2loadRequests = regexp.MustCompile(`requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored`)

// runH2load loads url with h2load for d: conns connections, streams of
// them in flight on each. A stream is a request.
func runH2load(h2load, url string, conns, streams int, d time.Duration) (wrkResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, h2load, "-c", strconv.Itoa(conns), "-m", strconv.Itoa(streams),
		"-D", strconv.Itoa(int(d.Seconds())), url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("h2load: %w\n%s", err, out)
	}
	usage := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	r := wrkResult{cpuNs: uint64(usage.Utime.Nano() + usage.Stime.Nano())}
	m := h2loadRequests.FindSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no request count in h2load's output:\n%s", out)
	}
	r.requests, _ = strconv.Atoi(string(m[1]))
	failed, _ := strconv.Atoi(string(m[2]))
	errored, _ := strconv.Atoi(string(m[3]))
	r.errors = failed + errored
	r.perSecond = float64(r.requests) / d.Seconds()
	if r.requests == 0 {
		return r, fmt.Errorf("h2load got no response:\n%s", out)
	}
	return r, nil
}
