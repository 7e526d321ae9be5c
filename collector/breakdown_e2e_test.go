package collector_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/profile"
)

// runCalserver profiles one calibrated server under loadgen load and
// returns what reqprof measured and what the server measured itself.
func runCalserver(t *testing.T, conns, requests int, args ...string) (profile.Target, calserverTruth) {
	t.Helper()
	srv := startCalserver(t, args...)
	w := measure(t, []int{srv.pid()}, func() {
		if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: srv.addr, Conns: conns, Requests: requests}); err != nil {
			t.Fatalf("load: %v", err)
		}
	})
	t.Logf("syscall entry and exit cost: %d ns", w.run.Meta.SyscallEntryNs)
	stats := srv.stop(t)
	target := targetOf(t, w.run, srv.pid())
	if target.Finished.Requests != requests || int(stats.Requests) != requests {
		t.Fatalf("reqprof counted %d requests, server %d, want %d", target.Finished.Requests, stats.Requests, requests)
	}
	truth := calserverTruth{cpuUs: stats.MeanCPUMicros(), devNullUs: stats.MeanDevNullCPUMicros(), loopUserNs: stats.DevNullLoopUserNs}
	if stats.GetppidCalls > 0 {
		truth.getppidNs = float64(stats.GetppidCPUNs) / float64(stats.GetppidCalls)
	}
	return target, truth
}

type calserverTruth struct {
	cpuUs, devNullUs float64
	loopUserNs       float64 // per syscall: the server loop's own user CPU
	getppidNs        float64 // per getppid() call, the loop's user CPU included
}

func meanUs(requests []profile.Request, ns func(profile.Request) uint64) float64 {
	var sum uint64
	for _, r := range requests {
		sum += ns(r)
	}
	return float64(sum) / float64(len(requests)) / 1e3
}

var (
	writeCause   = profile.Cause{Kind: profile.CauseSyscall, Name: "write"}
	getppidCause = profile.Cause{Kind: profile.CauseSyscall, Name: "getppid"}
)

func causeMeanUs(target profile.Target, cause profile.Cause) float64 {
	return float64(target.KernelBreakdown[cause].Ns) / float64(target.Finished.Requests) / 1e3
}

// TestWritesShowInTheWriteRow: a request that also writes to /dev/null K
// times has a write row larger by what those writes cost, as the server
// measured them with its own thread CPU clock.
//
// A syscall's row is its time between the tracepoints plus the entry and
// exit cost reqprof calibrates on a thread of its own; what a syscall costs
// a target outside the tracepoints differs from that, process by process.
// On this VM (PTI without PCID, a guest of the PVM hypervisor) reqprof's
// getppid row came out at 84.5% to 106.5% of the server's own figure,
// window by window, and the writes' row against the server's clock at
// 87.5% to 109.8% (each window is a new server process). The two move
// together: net of the first, the second was at 96.3% to 101.4% in 15
// windows. So each request also makes K getppid() calls, timed apart: the
// server's figure for them less reqprof's getppid row is what the
// calibration missed in this process, a call; the write row is held to the
// server's writes net of that within 5%, and the calibration's miss itself
// within 20% (docs/LIMITS.md, Syscall entry and exit cost).
func TestWritesShowInTheWriteRow(t *testing.T) {
	const requests, writes, windows = 600, 300, 5
	plain, _ := runCalserver(t, 1, requests, "--model", "epoll", "--burn", "100us")
	var grewSum, netSum, ppidRowSum, ppidTruthSum float64
	for range windows {
		writing, truth := runCalserver(t, 1, requests, "--model", "epoll", "--burn", "100us",
			"--devnull-writes", strconv.Itoa(writes), "--devnull-bytes", "4096", "--getppid-calls", strconv.Itoa(writes))
		grew := causeMeanUs(writing, writeCause) - causeMeanUs(plain, writeCause)
		// The server's clock around its calls also counts its loop's user
		// instructions, which reqprof rightly counts as user time.
		kernelUs := truth.devNullUs - writes*truth.loopUserNs/1e3
		ppid := writing.KernelBreakdown[getppidCause]
		if ppid.Calls != uint64(writes*requests) {
			t.Fatalf("%d getppid calls, want %d", ppid.Calls, writes*requests)
		}
		ppidRowNs := float64(ppid.Ns) / float64(ppid.Calls)
		ppidTruthNs := truth.getppidNs - truth.loopUserNs
		netUs := kernelUs - writes*(ppidTruthNs-ppidRowNs)/1e3
		t.Logf("write row: %.1f → %.1f µs per request (+%.1f); server measured its /dev/null writes at %.1f µs, %.1f µs of it outside its loop's user code; a getppid %.0f ns by the server, %.0f ns by reqprof (%.1f%%): the writes net of that %.1f µs (%.1f%%)",
			causeMeanUs(plain, writeCause), causeMeanUs(writing, writeCause), grew, truth.devNullUs, kernelUs,
			ppidTruthNs, ppidRowNs, 100*ppidRowNs/ppidTruthNs, netUs, 100*grew/netUs)
		grewSum += grew
		netSum += netUs
		ppidRowSum += ppidRowNs
		ppidTruthSum += ppidTruthNs
		if calls := float64(writing.KernelBreakdown[writeCause].Calls) / requests; calls != writes+1 {
			t.Errorf("%.2f write calls per request, want 301 (300 to /dev/null, 1 response)", calls)
		}
		checkBreakdownAddsUp(t, writing)
	}
	if !within(grewSum, netSum, 0.05) {
		t.Errorf("write row grew by %.1f µs per request, the server's writes cost %.1f µs net of the entry cost's miss: more than 5%% apart", grewSum/windows, netSum/windows)
	}
	if !within(ppidRowSum, ppidTruthSum, 0.20) {
		t.Errorf("a getppid: %.0f ns by reqprof, %.0f ns by the server: the entry cost calibrated in reqprof's process missed this one's by more than 20%%", ppidRowSum/windows, ppidTruthSum/windows)
	}
}

// checkBreakdownAddsUp: BPF keeps each request's kernel time by cause in
// slots apart from its totals; the two must agree, and every request's CPU
// is user + syscalls + softirq + irq.
func checkBreakdownAddsUp(t *testing.T, target profile.Target) {
	t.Helper()
	var syscalls, softirqs, irqs uint64
	for _, r := range target.Requests {
		if r.KernelNs != r.SyscallNs+r.SoftirqNs+r.IrqNs || r.CPUNs() != r.UserNs+r.KernelNs {
			t.Fatalf("request %+v: parts do not add up", r)
		}
		syscalls += r.SyscallNs
		softirqs += r.SoftirqNs
		irqs += r.IrqNs
	}
	var bySyscall, bySoftirq, byIrq uint64
	for cause, k := range target.KernelBreakdown {
		switch cause.Kind {
		case profile.CauseSyscall:
			bySyscall += k.Ns
		case profile.CauseSoftirq:
			bySoftirq += k.Ns
		case profile.CauseIRQ:
			byIrq += k.Ns
		default:
			t.Errorf("unknown cause %q", cause)
		}
	}
	if bySyscall != syscalls || bySoftirq != softirqs || byIrq != irqs {
		t.Errorf("breakdown syscalls %d softirq %d irq %d ns, request totals %d %d %d",
			bySyscall, bySoftirq, byIrq, syscalls, softirqs, irqs)
	}
}

// TestOffCPUIsTheSleep: a request that sleeps S is off the CPU for S (plus
// the timer's slack and the wakeup), and its latency is its on-CPU time,
// its run-queue wait and its blocked time.
func TestOffCPUIsTheSleep(t *testing.T) {
	const sleep = 2 * time.Millisecond
	target, _ := runCalserver(t, 1, 300, "--model", "threads", "--burn", "100us", "--sleep", sleep.String())
	offcpu := meanUs(target.Requests, func(r profile.Request) uint64 { return r.OffCPUNs })
	sleepUs := float64(sleep.Microseconds())
	t.Logf("off-CPU %.1f µs per request for a %.0f µs sleep", offcpu, sleepUs)
	// Timer slack (50 µs) and the wakeup bound the excess.
	if offcpu < sleepUs || offcpu > sleepUs*1.05+200 {
		t.Errorf("off-CPU %.1f µs per request, want %.0f µs within 5%% plus 200 µs of wakeup", offcpu, sleepUs)
	}
	if v := meanUs(target.Requests, func(r profile.Request) uint64 { return uint64(r.VoluntarySwitches) * 1000 }); v < 1 {
		t.Errorf("%.2f voluntary switches per request; each request sleeps once", v)
	}
	checkLatencyIsItsParts(t, target)
	checkBreakdownAddsUp(t, target)
}

// checkLatencyIsItsParts: a request's latency is its CPU from its first
// read to its last write (its CPU less what came after its last byte and
// its connection's setup), its run-queue wait and its blocked time.
func checkLatencyIsItsParts(t *testing.T, target profile.Target) {
	t.Helper()
	latency := meanUs(target.Requests, profile.Request.LatencyNs)
	parts := meanUs(target.Requests, func(r profile.Request) uint64 {
		return r.CPUNs() - r.TailNs - r.SetupNs + r.RunqueueNs + r.OffCPUNs
	})
	after := meanUs(target.Requests, func(r profile.Request) uint64 { return r.TailNs })
	t.Logf("latency %.1f µs, on-CPU from the first read to the last write + run-queue + blocked %.1f µs; %.1f µs of CPU after the last byte",
		latency, parts, after)
	if !within(parts, latency, 0.02) {
		t.Errorf("latency %.1f µs per request, its parts add to %.1f µs: more than 2%% apart", latency, parts)
	}
}

// TestRunQueueWait: eight threads burning on two cores wait for a CPU; the
// wait reqprof charges to requests agrees with the kernel's own run_delay
// of the serving threads (/proc/PID/task/TID/schedstat, CONFIG_SCHED_INFO).
func TestRunQueueWait(t *testing.T) {
	srv := startCalserver(t, "--model", "threads", "--burn", "1ms")
	const conns, perConn = 8, 40
	clients := dialKeepAlive(t, srv.addr, conns)
	var before, after map[int]uint64
	w := measure(t, []int{srv.pid()}, func() {
		before = runDelays(t, srv.pid())
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perConn {
					if err := c.roundTrip(); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		// Read before the connections close: their threads exit with them.
		after = runDelays(t, srv.pid())
		for _, c := range clients {
			c.conn.Close()
		}
	})
	srv.stop(t)
	target := targetOf(t, w.run, srv.pid())
	if target.Finished.Requests != conns*perConn {
		t.Fatalf("counted %d requests, want %d", target.Finished.Requests, conns*perConn)
	}
	var kernel uint64
	for tid, delay := range after {
		kernel += delay - before[tid] // a thread born in the window starts at 0
	}
	var charged uint64
	for _, r := range target.Requests {
		charged += r.RunqueueNs
	}
	t.Logf("run-queue wait: reqprof saw %.1f ms (%.1f ms of it inside requests), the kernel counted %.1f ms of run_delay",
		float64(target.RunqueueNs)/1e6, float64(charged)/1e6, float64(kernel)/1e6)
	if kernel < uint64(10*time.Millisecond) {
		t.Fatalf("only %.1f ms of run-queue wait with %d busy threads on %d cores", float64(kernel)/1e6, conns, 2)
	}
	// The kernel clocks a wait from the enqueue (or the top of the
	// scheduler, for a preemption) to the top of the scheduler; reqprof from
	// the wakeup and sched_switch tracepoints, a few µs later at each end.
	// Over thousands of waits on this VM that comes to some ms less.
	if !within(float64(target.RunqueueNs), float64(kernel), 0.15) {
		t.Errorf("reqprof saw %.1f ms of run-queue wait, the kernel counted %.1f ms: more than 15%% apart",
			float64(target.RunqueueNs)/1e6, float64(kernel)/1e6)
	}
	if charged == 0 || charged > target.RunqueueNs {
		t.Errorf("%.1f ms of run-queue wait charged to requests, of %.1f ms in all", float64(charged)/1e6, float64(target.RunqueueNs)/1e6)
	}
	checkLatencyIsItsParts(t, target)
}

type keepAliveClient struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialKeepAlive(t *testing.T, addr string, n int) []*keepAliveClient {
	t.Helper()
	var clients []*keepAliveClient
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients = append(clients, &keepAliveClient{conn: c, r: bufio.NewReader(c)})
	}
	return clients
}

func (c *keepAliveClient) roundTrip() error {
	if _, err := io.WriteString(c.conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return err
}

// runDelays reads each thread's run-queue wait so far, in ns.
func runDelays(t *testing.T, pid int) map[int]uint64 {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	delays := map[int]uint64{}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", task.Name(), "schedstat"))
		if err != nil {
			continue // exited meanwhile
		}
		fields := strings.Fields(string(b))
		if len(fields) < 2 {
			t.Fatalf("schedstat %q", b)
		}
		tid, _ := strconv.Atoi(task.Name())
		delays[tid], _ = strconv.ParseUint(fields[1], 10, 64)
	}
	return delays
}
