package collector_test

// The harness for tests that load BPF: they need root, run a real server in
// a child process, attach to it, and drive bounded loopback load inside the
// window.

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/profile"
)

// calserverBin is built once for all tests by TestMain.
var calserverBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "reqprof-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	buildDir = dir
	calserverBin = filepath.Join(dir, "calserver")
	build := exec.Command("go", "build", "-o", calserverBin, "github.com/reqprof/reqprof/internal/demo/calserver/cmd/calserver")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the calibrated server:", err)
		return 1
	}
	return m.Run()
}

// buildDir holds the commands tests build, removed when they end.
var buildDir string

// built are the commands of this module built so far, by package.
var built = struct {
	sync.Mutex
	bins map[string]string
}{bins: map[string]string{}}

// buildCmd builds a command of this module once per test binary and
// returns its path.
func buildCmd(t *testing.T, pkg string) string {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if bin, ok := built.bins[pkg]; ok {
		return bin
	}
	bin := filepath.Join(buildDir, filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	built.bins[pkg] = bin
	return bin
}

// server is a calibrated server running as a child process.
type server struct {
	*calserver.Process
	cmd  *exec.Cmd
	addr string
}

func startCalserver(t *testing.T, args ...string) *server {
	t.Helper()
	return startCalserverAt(t, "127.0.0.1:0", args...)
}

// startCalserverAt starts it listening on listen: IP:PORT or unix:PATH.
func startCalserverAt(t *testing.T, listen string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(calserverBin, append([]string{"--listen", listen}, args...)...)
	cmd.Stderr = os.Stderr
	p, err := calserver.Spawn(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return &server{Process: p, cmd: cmd, addr: p.Addr}
}

func (s *server) pid() int { return s.PID() }

// stop ends the server and returns its own measurements.
func (s *server) stop(t *testing.T) calserver.Stats {
	t.Helper()
	stats, err := s.Stop()
	if err != nil {
		t.Fatalf("calserver: %v", err)
	}
	return stats
}

// window is what one profiling run measured, with the kernel's accounting
// of each target read by the test itself at the edges of its load.
type window struct {
	run       profile.Run
	schedCPU  map[int]uint64 // pid → CPU ns over the load, per the test's own clock reads
	attachMsg string
}

// measure attaches to pids, runs load inside the window, and closes the
// window once load returns.
func measure(t *testing.T, pids []int, load func()) window {
	t.Helper()
	return measureWith(t, pids, false, load)
}

// measureWith is measure, following the targets' children when asked.
func measureWith(t *testing.T, pids []int, followChildren bool, load func()) window {
	t.Helper()
	return measureConfig(t, pids, func(cfg *collector.Config) { cfg.FollowChildren = followChildren }, load)
}

// measureConfig is measure with a Config set as configure says.
func measureConfig(t *testing.T, pids []int, configure func(*collector.Config), load func()) window {
	t.Helper()
	testbin.RequireBPF(t)
	var targets []collector.Target
	for _, pid := range pids {
		targets = append(targets, collector.Target{PID: pid})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attached := make(chan string, 1)
	type outcome struct {
		run profile.Run
		err error
	}
	done := make(chan outcome, 1)
	cfg := collector.Config{
		Targets:    targets,
		Duration:   time.Minute, // a bound; the test closes the window earlier
		OnAttached: func(line string) { attached <- line },
		// The tests compare with the servers' own clocks, which count
		// what reqprof's programs cost their threads: so gross, unless
		// a test says otherwise.
		Gross: true,
	}
	configure(&cfg)
	go func() {
		run, err := collector.Run(ctx, cfg)
		done <- outcome{run, err}
	}()
	var w window
	select {
	case w.attachMsg = <-attached:
	case o := <-done:
		t.Fatalf("collector failed before attaching: %v", o.err)
	case <-time.After(30 * time.Second):
		t.Fatal("collector did not attach within 30 s")
	}
	before := processClocks(t, pids)
	load()
	after := processClocks(t, pids)
	cancel()
	o := <-done
	if o.err != nil {
		t.Fatalf("collector: %v", o.err)
	}
	w.run = o.run
	w.schedCPU = map[int]uint64{}
	for _, pid := range pids {
		w.schedCPU[pid] = after[pid] - before[pid]
	}
	return w
}

// processClocks reads each process's CPU clock (the scheduler's nanosecond
// total over all its threads, live and exited).
func processClocks(t *testing.T, pids []int) map[int]uint64 {
	t.Helper()
	clocks := map[int]uint64{}
	for _, pid := range pids {
		ns, err := collector.ProcessCPUNs(pid)
		if err != nil {
			t.Fatal(err)
		}
		clocks[pid] = ns
	}
	return clocks
}

func targetOf(t *testing.T, run profile.Run, pid int) profile.Target {
	t.Helper()
	for _, target := range run.Targets {
		if target.PID == pid {
			return target
		}
	}
	t.Fatalf("no target %d in the run", pid)
	return profile.Target{}
}

// meanFinishedCPUUs is the mean CPU of every request target finished, from
// its exact totals: its Requests are only a sample when many finish.
func meanFinishedCPUUs(target profile.Target) float64 {
	if target.Finished.Requests == 0 {
		return 0
	}
	return float64(target.Finished.CPUNs) / float64(target.Finished.Requests) / 1e3
}

func meanCPUUs(requests []profile.Request) float64 {
	if len(requests) == 0 {
		return 0
	}
	var sum uint64
	for _, r := range requests {
		sum += r.CPUNs()
	}
	return float64(sum) / float64(len(requests)) / 1e3
}

// within reports whether got is within frac of want.
func within(got, want, frac float64) bool {
	return math.Abs(got-want) <= frac*math.Abs(want)
}

// startReady starts cmd, its stderr the test's, stops it at the test's end
// (SIGTERM, then waits for it), and returns its stdout once it printed
// "ready": a target set up and waiting to be measured.
func startReady(t *testing.T, cmd *exec.Cmd) *bufio.Reader {
	t.Helper()
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("%s: %q, %v", filepath.Base(cmd.Path), line, err)
	}
	return out
}
