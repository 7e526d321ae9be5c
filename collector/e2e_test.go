package collector_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/internal/testservers/nginxconf"
	"github.com/reqprof/reqprof/profile"
	"github.com/reqprof/reqprof/report"
)

// TestCPUPerRequestMatchesServer is the foundation's proof: against a server
// that measures its own CPU per request with CLOCK_THREAD_CPUTIME_ID, over
// the same span reqprof charges (the read that starts a request to the read
// that starts its thread's next, its loop after the response included),
// reqprof's count is exact and its mean within 3%.
func TestCPUPerRequestMatchesServer(t *testing.T) {
	for _, model := range []string{"threads", "epoll"} {
		for _, burn := range []time.Duration{200 * time.Microsecond, time.Millisecond} {
			for _, conns := range []int{1, 8} {
				name := fmt.Sprintf("%s/%v/%dconns", model, burn, conns)
				t.Run(name, func(t *testing.T) {
					requests := int(400 * time.Millisecond / burn) // ~0.4 s of CPU
					requests -= requests % conns
					checkAgainstServer(t, model, burn, conns, requests)
				})
			}
		}
	}
}

func checkAgainstServer(t *testing.T, model string, burn time.Duration, conns, requests int) {
	srv := startCalserver(t, "--model", model, "--burn", burn.String())
	var load loadgen.Result
	w := measure(t, []int{srv.pid()}, func() {
		var err error
		load, err = loadgen.Run(context.Background(), loadgen.Config{Addr: srv.addr, Conns: conns, Requests: requests})
		if err != nil {
			t.Fatalf("load: %v", err)
		}
	})
	truth := srv.stop(t)
	target := targetOf(t, w.run, srv.pid())
	summary := report.Summarize(profile.Run{Duration: w.run.Duration, Targets: []profile.Target{target}}).Targets[0]

	if load.Requests != requests || int(truth.Requests) != requests {
		t.Fatalf("load got %d responses, server served %d, want %d", load.Requests, truth.Requests, requests)
	}
	if target.Finished.Requests != requests {
		t.Errorf("reqprof counted %d requests (and %d unfinished), load generator %d", target.Finished.Requests, target.UnfinishedRequests, requests)
	}
	got, want := meanFinishedCPUUs(target), truth.MeanCPUMicros()
	t.Logf("cpu per request: reqprof %.1f µs, server %.1f µs (%+.2f%%); user %.1f kernel %.1f; unattributed %.1f ms",
		got, want, 100*(got/want-1), summary.UserUs.Mean, summary.KernelUs.Mean, summary.UnattributedCPUUs/1e3)
	if !within(got, want, 0.03) {
		t.Errorf("mean cpu per request %.1f µs, server measured %.1f µs: more than 3%% apart", got, want)
	}
	// The CPU after each request's last byte (its thread's loop back to
	// the next read) is told apart: part of the request's CPU, and, the
	// load's every request finished, all of the loop's CPU the programs
	// counted between requests.
	f := target.Finished
	t.Logf("after the last byte: %.1f µs per request; between requests %.1f ms", float64(f.TailNs)/float64(f.Requests)/1e3, float64(target.BetweenRequestsNs)/1e6)
	if f.TailNs == 0 || f.TailNs >= f.CPUNs || !within(float64(f.TailNs), float64(target.BetweenRequestsNs), 0.01) {
		t.Errorf("%d ns of the requests' %d ns after their last byte, the loop between requests %d ns: want a part of the first, all of the last",
			f.TailNs, f.CPUNs, target.BetweenRequestsNs)
	}
	// The report's three totals add up, to its 0.1 µs rounding.
	if d := summary.ProcessCPUUs - summary.AttributedCPUUs - summary.UnattributedCPUUs; d > 0.2 || d < -0.2 {
		t.Errorf("attributed %.1f + unattributed %.1f != process %.1f µs",
			summary.AttributedCPUUs, summary.UnattributedCPUUs, summary.ProcessCPUUs)
	}
	// All CPU reqprof saw agrees with the kernel's accounting, read here
	// independently at the edges of the load.
	seen, kernel := float64(target.ProcessNs()), float64(w.schedCPU[srv.pid()])
	if !within(seen, kernel, 0.02) {
		t.Errorf("reqprof saw %.1f ms of process CPU (requests %.1f, unfinished %.1f, unattributed %.1f of which between requests %.1f), the kernel accounted %.1f ms: more than 2%% apart",
			seen/1e6, float64(target.AttributedNs()-target.UnfinishedNs)/1e6, float64(target.UnfinishedNs)/1e6,
			float64(target.UnattributedNs)/1e6, float64(target.BetweenRequestsNs)/1e6, kernel/1e6)
	}
	if target.LostEvents != 0 {
		t.Errorf("%d events lost", target.LostEvents)
	}
}

// TestNginxUnderWrk profiles a real server nobody here wrote: nginx from
// Debian, one process, under wrk. The request count must match wrk's.
func TestNginxUnderWrk(t *testing.T) {
	testbin.RequireBPF(t)
	nginxBin, wrkBin := lookPathOrFail(t, "nginx"), lookPathOrFail(t, "wrk")
	pid, port := startNginx(t, nginxBin, 0)

	var wrkCount int
	w := measure(t, []int{pid}, func() { wrkCount = runWrk(t, wrkBin, port) })
	target := targetOf(t, w.run, pid)
	got := target.Finished.Requests
	t.Logf("nginx: wrk %d requests, reqprof %d (%.1f µs cpu/request), unfinished %d", wrkCount, got, meanFinishedCPUUs(target), target.UnfinishedRequests)
	if wrkCount < 1000 {
		t.Fatalf("wrk completed only %d requests", wrkCount)
	}
	if !within(float64(got), float64(wrkCount), 0.01) {
		t.Errorf("reqprof counted %d requests, wrk %d: more than 1%% apart", got, wrkCount)
	}
}

// TestPreforkNginxThroughMaster: nginx with a master and two workers,
// attached through the master with its children followed: every request
// the workers serve is counted.
func TestPreforkNginxThroughMaster(t *testing.T) {
	testbin.RequireBPF(t)
	nginxBin, wrkBin := lookPathOrFail(t, "nginx"), lookPathOrFail(t, "wrk")
	master, port := startNginx(t, nginxBin, 2)
	var wrkCount int
	w := measureWith(t, []int{master}, true, func() { wrkCount = runWrk(t, wrkBin, port) })
	target := targetOf(t, w.run, master)
	tids := map[uint32]bool{}
	for _, r := range target.Requests {
		tids[r.TID] = true
	}
	t.Logf("pre-fork nginx: wrk %d requests, reqprof %d from %d worker threads, %.1f µs cpu/request; unattributed %.1f%% of %.1f ms",
		wrkCount, target.Finished.Requests, len(tids), meanFinishedCPUUs(target),
		100*float64(target.UnattributedNs)/float64(target.ProcessNs()), float64(target.ProcessNs())/1e6)
	if wrkCount < 1000 || !within(float64(target.Finished.Requests), float64(wrkCount), 0.01) {
		t.Errorf("reqprof counted %d requests, wrk %d: more than 1%% apart", target.Finished.Requests, wrkCount)
	}
	if len(tids) != 2 {
		t.Errorf("requests served by %d threads, want nginx's 2 workers", len(tids))
	}
	if share := float64(target.UnattributedNs) / float64(target.ProcessNs()); share > 0.10 {
		t.Errorf("unattributed %.1f%% of the process CPU under steady load, want below 10%%", 100*share)
	}
}

// runWrk loads 127.0.0.1:port with wrk for 2 s over 8 connections and
// returns the requests wrk completed.
func runWrk(t *testing.T, wrkBin string, port int) int {
	t.Helper()
	out, err := exec.Command(wrkBin, "-t2", "-c8", "-d2s", fmt.Sprintf("http://127.0.0.1:%d/", port)).CombinedOutput()
	if err != nil {
		t.Fatalf("wrk: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(\d+) requests in`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no request count in wrk's output:\n%s", out)
	}
	count, _ := strconv.Atoi(string(m[1]))
	return count
}

func lookPathOrFail(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return filepath.Join(dir, name)
		}
	}
	t.Fatalf("%s is not installed (.ci/run installs it)", name)
	return ""
}

// startNginx runs nginx in the foreground, answering every request with a
// small fixed body: as a single process, or as a master with workers
// (pre-fork), when workers > 0.
func startNginx(t *testing.T, bin string, workers int) (pid, port int) {
	t.Helper()
	dir := t.TempDir()
	port = freePort(t)
	conf := nginxconf.Config{Dir: dir, Port: port, Workers: workers}.Text()
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", confPath, "-p", dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// TERM, not KILL: a master passes it on to its workers.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	waitListening(t, port)
	return cmd.Process.Pid, port
}

func freePort(t *testing.T) int {
	t.Helper()
	srv := startCalserver(t, "--model", "epoll")
	_, portText, _ := strings.Cut(srv.addr, ":")
	srv.stop(t)
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// waitListening waits until a TCP connection to the port is accepted.
func waitListening(t *testing.T, port int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing listens on port %d after 10 s", port)
}

// TestTargetExitsDuringWindow: the window closes when every target has
// exited, and the result says the process exited rather than passing off
// a part as the whole.
func TestTargetExitsDuringWindow(t *testing.T) {
	testbin.RequireBPF(t)
	srv := startCalserver(t, "--model", "threads", "--burn", "100us")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	attached := make(chan struct{})
	go func() {
		<-attached
		if _, err := loadgen.Run(ctx, loadgen.Config{Addr: srv.addr, Conns: 2, Requests: 200}); err != nil {
			t.Errorf("load: %v", err)
		}
		_ = srv.cmd.Process.Signal(syscall.SIGTERM)
	}()
	run, err := collector.Run(ctx, collector.Config{
		Targets:    []collector.Target{{PID: srv.pid()}},
		OnAttached: func(string) { close(attached) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the window did not close when the target exited")
	}
	srv.stop(t)
	target := run.Targets[0]
	if !target.Exited {
		t.Error("target not marked as exited")
	}
	if len(target.Requests) != 200 {
		t.Errorf("counted %d requests before the exit, want 200", len(target.Requests))
	}
	if s := report.Summarize(run).Targets[0]; !s.Partial {
		t.Errorf("a target that exited is not labelled partial: warnings %q", s.Warnings)
	}
}

// TestTargetExecsDuringWindow: a target that execs another program
// during the window is labelled partial, naming the program, rather than
// passing off two programs' figures as one's.
func TestTargetExecsDuringWindow(t *testing.T) {
	testbin.RequireBPF(t)
	sleepPath, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if sleepPath, err = filepath.EvalSymlinks(sleepPath); err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("sh", "-c", "read x; exec sleep 100")
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sh.Process.Kill()
		sh.Wait()
	}()
	run, err := collector.Run(context.Background(), collector.Config{
		Targets:  []collector.Target{{PID: sh.Process.Pid}},
		Duration: 1500 * time.Millisecond,
		// Once the collector knows the program it runs (some polls in).
		OnAttached: func(string) {
			time.AfterFunc(500*time.Millisecond, func() { stdin.Write([]byte("go\n")) })
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	target := run.Targets[0]
	if target.Comm != "sh" || target.Execd != sleepPath || target.Exited {
		t.Fatalf("target %q execd %q after %v, exited %v; want sh, exec'd %s, running", target.Comm, target.Execd, target.ExecdAfter, target.Exited, sleepPath)
	}
	if target.ExecdAfter < 500*time.Millisecond || target.ExecdAfter > run.Duration {
		t.Errorf("exec seen %v into the %v window, want after 500ms", target.ExecdAfter, run.Duration)
	}
	s := report.Summarize(run).Targets[0]
	want := "process exec'd " + sleepPath + " "
	if !s.Partial || len(s.Warnings) == 0 || !strings.HasPrefix(s.Warnings[0], want) ||
		!strings.HasSuffix(s.Warnings[0], "into the window: figures after it are of the new program") {
		t.Errorf("partial %v, warnings %q; want one starting %q", s.Partial, s.Warnings, want)
	}
}

// TestReusedPidIsNotTheTarget: once a target has exited, a process given
// its pid is not charged to it. One of two idle targets is killed; a
// process that burns some CPU is then given its pid: a shell sets
// ns_last_pid just below it, which makes it the next pid the kernel gives,
// and forks at once.
func TestReusedPidIsNotTheTarget(t *testing.T) {
	testbin.RequireBPF(t)
	start := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		return cmd
	}
	// Each line it reads is a pid to set ns_last_pid to; it then starts a
	// process that burns about 30 ms of CPU and sleeps, and writes its pid.
	forker := exec.Command("sh", "-c", `while read last; do
		echo $last > /proc/sys/kernel/ns_last_pid
		sh -c 'i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; exec sleep 100' &
		echo $!
	done`)
	toForker, err := forker.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	fromForker, err := forker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	forker.Stderr = os.Stderr
	if err := forker.Start(); err != nil {
		t.Fatal(err)
	}
	var forkedPids []int // its children, which it does not wait for
	t.Cleanup(func() {
		toForker.Close()
		forker.Wait()
		for _, pid := range forkedPids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	forked := bufio.NewScanner(fromForker)

	gone, stays := start("sleep", "100"), start("sleep", "100")
	pid := gone.Process.Pid
	forgotten := make(chan int, 2)
	collector.SetTargetForgottenHook(func(pid int) { forgotten <- pid })
	t.Cleanup(func() { collector.SetTargetForgottenHook(nil) })
	// The window closes once the process given the pid has burnt its CPU
	// (it execs sleep then), or at the first error.
	ctx, closeWindow := context.WithCancel(context.Background())
	defer closeWindow()
	reused := make(chan error, 1)
	reuse := func() error {
		gone.Process.Kill()
		gone.Wait()
		// Its exit seen and its pid let go by the programs.
		select {
		case forgot := <-forgotten:
			if forgot != pid {
				return fmt.Errorf("pid %d forgotten, want %d", forgot, pid)
			}
		case <-time.After(30 * time.Second):
			return fmt.Errorf("the exit of %d was not seen within 30 s", pid)
		}
		for range 20 {
			fmt.Fprintln(toForker, pid-1)
			if !forked.Scan() {
				return fmt.Errorf("the forking shell ended: %v", forked.Err())
			}
			child, err := strconv.Atoi(forked.Text())
			if err != nil {
				return err
			}
			forkedPids = append(forkedPids, child)
			if child == pid {
				return waitExecd(pid, "sleep", 30*time.Second)
			}
			syscall.Kill(child, syscall.SIGKILL)
		}
		return fmt.Errorf("pid %d was not given again in 20 tries", pid)
	}
	run, err := collector.Run(ctx, collector.Config{
		Targets:  []collector.Target{{PID: pid}, {PID: stays.Process.Pid}},
		Duration: time.Minute, // a bound: the test closes the window
		OnAttached: func(string) {
			go func() {
				reused <- reuse()
				closeWindow()
			}()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-reused; err != nil {
		t.Fatal(err)
	}
	target := run.Targets[0]
	t.Logf("target %d: exited %v, %d threads, %.2f ms of CPU seen", pid, target.Exited, target.Threads, float64(target.ProcessNs())/1e6)
	if !target.Exited {
		t.Error("the target whose pid was given again is not marked exited")
	}
	if target.ProcessNs() > 5e6 {
		t.Errorf("%.1f ms of CPU charged to an idle target that exited: the process given its pid was taken for it", float64(target.ProcessNs())/1e6)
	}
}

// waitExecd waits until process pid runs command name (its comm), for up
// to within.
func waitExecd(pid int, name string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err == nil && strings.TrimSpace(string(comm)) == name {
			return nil
		}
		if err != nil || time.Now().After(deadline) {
			return fmt.Errorf("process %d does not run %s: %q %v", pid, name, comm, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunRejectsBadTargets needs no root: targets are checked first.
func TestRunRejectsBadTargets(t *testing.T) {
	for _, tc := range []struct {
		targets []collector.Target
		want    string
	}{
		{nil, "no target"},
		{[]collector.Target{{PID: -3}}, "invalid pid"},
		{[]collector.Target{{PID: 1 << 30}}, "no process with pid 1073741824"},
		{[]collector.Target{{PID: os.Getpid()}, {PID: os.Getpid()}}, "given twice"},
	} {
		_, err := collector.Run(context.Background(), collector.Config{Targets: tc.targets})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("targets %v: error %v, want one saying %q", tc.targets, err, tc.want)
		}
		if noProcess := strings.Contains(tc.want, "no process"); errors.Is(err, collector.ErrNoProcess) != noProcess {
			t.Errorf("targets %v: error %v is ErrNoProcess: %v, want %v", tc.targets, err, !noProcess, noProcess)
		}
	}
}

// TestCgroupTarget profiles every process of a cgroup v2 directory as one
// target: a server moved into a cgroup is found through it.
func TestCgroupTarget(t *testing.T) {
	testbin.RequireBPF(t)
	dir := filepath.Join("/sys/fs/cgroup", fmt.Sprintf("reqprof-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("making a cgroup (cgroup v2 at /sys/fs/cgroup): %v", err)
	}
	srv := startCalserver(t, "--model", "epoll", "--burn", "100us")
	t.Cleanup(func() {
		srv.stop(t)
		os.Remove(dir) // empty once the server has exited
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(srv.pid())), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attached := make(chan struct{})
	done := make(chan struct{})
	var run profile.Run
	var runErr error
	go func() {
		defer close(done)
		run, runErr = collector.Run(ctx, collector.Config{
			Targets:        []collector.Target{{Cgroup: dir, Label: "app"}},
			FollowChildren: true,
			Duration:       time.Minute,
			OnAttached:     func(string) { close(attached) },
		})
	}()
	select {
	case <-attached:
	case <-done:
		t.Fatalf("collector: %v", runErr)
	}
	if _, err := loadgen.Run(ctx, loadgen.Config{Addr: srv.addr, Conns: 2, Requests: 500}); err != nil {
		t.Fatalf("load: %v", err)
	}
	cancel()
	<-done
	if runErr != nil {
		t.Fatal(runErr)
	}
	target := run.Targets[0]
	if target.PID != srv.pid() || target.Label != "app" || len(target.Requests) != 500 {
		t.Errorf("cgroup target: pid %d label %q, %d requests; want pid %d, \"app\", 500", target.PID, target.Label, len(target.Requests), srv.pid())
	}
}
