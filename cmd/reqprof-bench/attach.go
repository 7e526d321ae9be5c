package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/reqprof/reqprof/collector"

	"github.com/reqprof/reqprof/report"
)

// attachTimeout bounds reqprof's start (loading, verifying and attaching its
// programs and calibrating take about a second) and its end (the report).
const attachTimeout = time.Minute

// attachment is a running `reqprof attach`: the real binary in a process of
// its own, so that its CPU and memory are what a user would see.
type attachment struct {
	cmd      *exec.Cmd
	jsonPath string
	// cpuAtAttach is its CPU when it said it was attached: what it spends
	// after is the cost of profiling, apart from loading and reporting.
	cpuAtAttach uint64

	stderrDone chan struct{} // closed once its stderr is read to the end
	mu         sync.Mutex
	stderr     []string // what it said besides the attached line
}

// collectorFigures is what one attachment measured and cost.
type collectorFigures struct {
	requests    int    // requests reqprof counted
	lost        uint64 // reqprof's lost_events
	windowCPUNs uint64 // the collector's CPU from attached to the end of load
	totalCPUNs  uint64 // the collector's CPU over its whole life
	peakRSS     uint64 // bytes
	// selfCostNs is what reqprof said its programs cost the target's
	// threads over its window (self_cost_us.total).
	selfCostNs uint64
	// selfSpreadNs is selfCostNs's standard error, as reqprof stated it
	// (self_cost_us.per_request_spread, in proportion).
	selfSpreadNs uint64
	// stacks are the target's stack samples summarized, with --stacks.
	stacks *report.StacksSummary
}

// attach starts reqprof on pid, with these flags besides its defaults, and
// returns once it says it is attached.
func attach(reqprof, dir string, pid int, flags []string) (*attachment, error) {
	jsonFile, err := os.CreateTemp(dir, "run-*.json")
	if err != nil {
		return nil, err
	}
	jsonFile.Close()
	a := &attachment{jsonPath: jsonFile.Name(), stderrDone: make(chan struct{})}
	// --live=false: the bench measures what profiling costs, as it did
	// before attach had a live view, which adds to the collector's CPU.
	a.cmd = exec.Command(reqprof, append([]string{"attach", "--pid", strconv.Itoa(pid), "--json", a.jsonPath, "--live=false"}, flags...)...)
	stderr, err := a.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting reqprof: %w", err)
	}
	attached := make(chan struct{})
	go func(notify chan struct{}) {
		defer close(a.stderrDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if notify != nil && strings.Contains(sc.Text(), "attached") {
				close(notify)
				notify = nil
				continue
			}
			a.mu.Lock()
			a.stderr = append(a.stderr, sc.Text())
			a.mu.Unlock()
		}
	}(attached)
	select {
	case <-attached:
	case <-a.stderrDone:
		_ = a.cmd.Wait()
		return nil, fmt.Errorf("reqprof exited before attaching: %s", a.said())
	case <-time.After(attachTimeout):
		a.kill()
		return nil, fmt.Errorf("reqprof did not attach within %v: %s", attachTimeout, a.said())
	}
	a.cpuAtAttach, err = a.cpuNs()
	if err != nil {
		a.kill()
		return nil, err
	}
	return a, nil
}

func (a *attachment) pid() int { return a.cmd.Process.Pid }

// cpuNs is the collector's CPU so far.
func (a *attachment) cpuNs() (uint64, error) { return collector.ProcessCPUNs(a.pid()) }

// stop ends the window with SIGINT, as Ctrl-C would, and reads the result.
// loadEndCPUNs is the collector's CPU clock read when load stopped.
func (a *attachment) stop(loadEndCPUNs uint64) (collectorFigures, error) {
	f := collectorFigures{windowCPUNs: loadEndCPUNs - a.cpuAtAttach}
	if err := a.cmd.Process.Signal(os.Interrupt); err != nil {
		return f, err
	}
	select {
	case <-a.stderrDone:
	case <-time.After(attachTimeout):
		a.kill()
		return f, fmt.Errorf("reqprof did not finish within %v of SIGINT", attachTimeout)
	}
	if err := a.cmd.Wait(); err != nil {
		return f, fmt.Errorf("reqprof: %w: %s", err, a.said())
	}
	usage := a.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	f.totalCPUNs = uint64(usage.Utime.Nano() + usage.Stime.Nano())
	f.peakRSS = uint64(usage.Maxrss) * 1024 // Maxrss is in KiB on Linux
	file, err := os.Open(a.jsonPath)
	if err != nil {
		return f, err
	}
	defer file.Close()
	summary, err := report.ReadJSON(file)
	if err != nil {
		return f, err
	}
	if len(summary.Targets) != 1 {
		return f, fmt.Errorf("reqprof reported %d targets, want 1", len(summary.Targets))
	}
	f.requests = summary.Targets[0].Requests
	f.lost = summary.Targets[0].LostEvents
	if c := summary.Targets[0].SelfCostUs; c != nil {
		f.selfCostNs = uint64(c.Total * 1e3)
		if c.PerRequest > 0 {
			f.selfSpreadNs = uint64(c.Total * 1e3 * c.PerRequestSpread / c.PerRequest)
		}
	}
	f.stacks = summary.Targets[0].Stacks
	return f, nil
}

// kill is for failures: the bench reports none of this run.
func (a *attachment) kill() {
	_ = a.cmd.Process.Kill()
	<-a.stderrDone
	_ = a.cmd.Wait()
}

func (a *attachment) said() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.stderr, " | ")
}
