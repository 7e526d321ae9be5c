package main

// Tests of the built reqprof binary under faults: killed, interrupted
// twice, run twice at once. They load BPF, so they need root; each
// attaches to an idle process and puts no load on the machine.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/testbin"
)

// reqprofBinary is reqprof built as a user builds it, once for the
// package's tests; TestMain removes it.
func reqprofBinary(t *testing.T) string {
	t.Helper()
	return testbin.Path(t, testbin.Reqprof)
}

// idleProcess starts a process that does nothing, to attach to.
func idleProcess(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "infinity")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd.Process.Pid
}

// lockedBuffer is a bytes.Buffer a child process writes while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// reqprofRun is the built reqprof running as a child process.
type reqprofRun struct {
	cmd            *exec.Cmd
	stdout, stderr lockedBuffer
	exited         chan struct{} // closed once it has exited
	err            error         // what Wait said, once exited is closed
}

func startReqprof(t *testing.T, args ...string) *reqprofRun {
	t.Helper()
	r := &reqprofRun{cmd: exec.Command(reqprofBinary(t), args...), exited: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.exited
	})
	return r
}

// waitFor waits until out holds text, failing the test after timeout or
// if reqprof exits first.
func (r *reqprofRun) waitFor(t *testing.T, out *lockedBuffer, text string, timeout time.Duration) {
	t.Helper()
	waitForText(t, out, text, timeout, r.exited, func() string {
		return fmt.Sprintf("reqprof (exit: %v) wrote on stdout:\n%s\nstderr:\n%s", r.err, r.stdout.String(), r.stderr.String())
	})
}

// waitForText waits until out holds text. It fails the test after timeout,
// or once ended is closed (what writes out has stopped) without out
// holding it; what() says what was written, for the failure.
func waitForText(t *testing.T, out *lockedBuffer, text string, timeout time.Duration, ended <-chan struct{}, what func() string) {
	t.Helper()
	deadline := time.After(timeout)
	for !strings.Contains(out.String(), text) {
		select {
		case <-ended:
			if strings.Contains(out.String(), text) {
				return
			}
			t.Fatalf("ended before writing %q; %s", text, what())
		case <-deadline:
			t.Fatalf("no %q written within %v; %s", text, timeout, what())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// exitCode waits at most timeout for reqprof to exit and returns its exit
// code.
func (r *reqprofRun) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-r.exited:
	case <-time.After(timeout):
		t.Fatalf("reqprof still runs after %v; stdout:\n%s\nstderr:\n%s", timeout, r.stdout.String(), r.stderr.String())
	}
	var exit *exec.ExitError
	if r.err != nil && !errors.As(r.err, &exit) {
		t.Fatal(r.err)
	}
	return r.cmd.ProcessState.ExitCode()
}

// reqprof killed with SIGKILL leaves no program, link or map behind: it
// pins nothing, and the kernel detaches and frees what its file
// descriptors held when the process dies.
func TestKilledLeavesNothingLoaded(t *testing.T) {
	testbin.RequireBPF(t)
	idle := idleProcess(t)
	r := startReqprof(t, "attach", "--pid", strconv.Itoa(idle))
	r.waitFor(t, &r.stderr, "reqprof: attached to", 30*time.Second)

	held, err := collector.ObjectsHeldBy(r.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !held.Reqprof || len(held.Links) == 0 || len(held.Maps) == 0 {
		t.Fatalf("reqprof holds %d programs (reqprof's: %v), %d links, %d maps; want its programs attached",
			len(held.Programs), held.Reqprof, len(held.Links), len(held.Maps))
	}
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-r.exited
	killed := time.Now()

	// The kernel frees programs and maps after an RCU grace period: poll.
	for {
		left, err := held.StillLoaded()
		if err != nil {
			t.Fatal(err)
		}
		if left.Empty() {
			t.Logf("reqprof held %d programs, %d links and %d maps; all gone %v after it was killed",
				len(held.Programs), len(held.Links), len(held.Maps), time.Since(killed).Round(time.Millisecond))
			return
		}
		if time.Since(killed) > 5*time.Second {
			t.Fatalf("5 s after reqprof was killed, the kernel still has %d of its %d programs (ids %v), %d of its %d links (%v), %d of its %d maps (%v)",
				len(left.Programs), len(held.Programs), left.Programs, len(left.Links), len(held.Links), left.Links,
				len(left.Maps), len(held.Maps), left.Maps)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stuckFile is a FIFO whose pipe is full: a write to it blocks until the
// test ends, as a report would writing to a stuck disk or pipe.
func stuckFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stuck.json")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	// Opened for reading and writing, a FIFO opens without a peer.
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, os.Getpagesize()); err != nil {
		t.Fatal(err)
	}
	fill := make([]byte, os.Getpagesize())
	for {
		if _, err := unix.Write(fd, fill); errors.Is(err, unix.EAGAIN) {
			return path
		} else if err != nil {
			t.Fatal(err)
		}
	}
}

// The first SIGINT ends the window and the report is written; a second
// one while reqprof finishes (here stuck writing its JSON) exits at once,
// with 130.
func TestSecondInterruptExitsAtOnce(t *testing.T) {
	testbin.RequireBPF(t)
	idle := idleProcess(t)
	r := startReqprof(t, "attach", "--pid", strconv.Itoa(idle), "--json", stuckFile(t))
	r.waitFor(t, &r.stderr, "reqprof: attached to", 30*time.Second)

	if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	// The tables come first, then the JSON, which cannot be written.
	r.waitFor(t, &r.stdout, "reqprof's own cost on the whole machine", 10*time.Second)
	select {
	case <-r.exited:
		t.Fatalf("reqprof exited (%v) while its JSON could not be written", r.err)
	case <-time.After(200 * time.Millisecond):
	}

	sent := time.Now()
	if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	code := r.exitCode(t, 3*time.Second)
	t.Logf("exit %d, %v after the second SIGINT", code, time.Since(sent).Round(time.Millisecond))
	if code != 130 {
		t.Errorf("exit code %d after a second SIGINT, want 130; stderr:\n%s", code, r.stderr.String())
	}
	if want := "reqprof: SIGINT again: exiting at once, without a report\n"; !strings.HasSuffix(r.stderr.String(), want) {
		t.Errorf("stderr %q, want it to end %q", r.stderr.String(), want)
	}
}

// Two reqprofs attached to the same process at once both work, and each
// says the other's programs ran too.
func TestTwoRunsAtOnce(t *testing.T) {
	testbin.RequireBPF(t)
	idle := idleProcess(t)
	args := []string{"attach", "--pid", strconv.Itoa(idle), "--duration", "3s"}
	runs := []*reqprofRun{startReqprof(t, args...), startReqprof(t, args...)}
	warned := 0
	for i, r := range runs {
		if code := r.exitCode(t, time.Minute); code != 0 {
			t.Errorf("run %d: exit %d; stderr:\n%s", i+1, code, r.stderr.String())
			continue
		}
		out := r.stdout.String()
		if want := "pid " + strconv.Itoa(idle) + " (sleep) — 0 requests in "; !strings.HasPrefix(out, want) || !strings.Contains(out, "reqprof's own cost on the whole machine") {
			t.Errorf("run %d: stdout %q, want a report starting %q", i+1, out, want)
		}
		// Whichever opened its window second saw the other loaded.
		if strings.Contains(out, "WARNING: another reqprof was loaded during the window") ||
			strings.Contains(out, "other reqprofs were loaded during the window") {
			warned++
		}
	}
	t.Logf("%d of 2 runs said another reqprof was loaded", warned)
	if warned == 0 {
		t.Errorf("neither run said another reqprof was loaded:\n%s\n%s", runs[0].stdout.String(), runs[1].stdout.String())
	}
}
