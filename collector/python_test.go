package collector

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/reqprof/reqprof/collector/cpython"
)

// startPython runs python until the test ends, waiting until it is up.
func startPython(t *testing.T, python string) int {
	t.Helper()
	cmd := exec.Command(python, "-c", "import sys, time; print('up', flush=True); time.sleep(30)")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "up\n" {
		t.Fatalf("interpreter did not start: %q %v", line, err)
	}
	return cmd.Process.Pid
}

// TestPythonLayout gives the programs the layout of each CPython on this
// machine (Debian's 3.11, linked statically, its layout from package
// cpython's table; pyenv's 3.10 to 3.13, with a shared libpython and
// debug information): the offsets package cpython found, and a main
// interpreter whose first thread state names the process's main thread,
// as the programs find it. A process that runs none is told. CI machines
// have them all.
func TestPythonLayout(t *testing.T) {
	for _, python := range []string{
		"/usr/bin/python3.11",
		"/root/.pyenv/versions/3.10.13/bin/python3.10",
		"/root/.pyenv/versions/3.11.7/bin/python3.11",
		"/root/.pyenv/versions/3.12.1/bin/python3.12",
		"/root/.pyenv/versions/3.13.0/bin/python3.13",
	} {
		t.Run(python, func(t *testing.T) {
			if _, err := os.Stat(python); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("%s: %v", python, err)
				}
				t.Skipf("%s: %v", python, err)
			}
			pid := startPython(t, python)
			layout, err := pythonLayout(pid)
			if err != nil {
				t.Fatalf("pythonLayout: %v", err)
			}
			p, err := cpython.Open(pid)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			l := p.Layout
			if layout.Interp != p.Interp || layout.InterpThreads != uint32(l.InterpThreadsHead) ||
				layout.TstateNext != uint32(l.TstateNext) || layout.TstateContext != uint32(l.TstateContext) {
				t.Errorf("layout %+v, package cpython's %+v", layout, l)
			}
			// 3.10's thread states are known by pthread_t, later ones by tid.
			if p.Release.Minor == 10 && (layout.TstateTid != pyAbsent || layout.TstatePthread == pyAbsent) ||
				p.Release.Minor > 10 && layout.TstateTid == pyAbsent {
				t.Errorf("Python %s: thread states known by tid at %#x, pthread_t at %#x", p.Release, layout.TstateTid, layout.TstatePthread)
			}
			// The GIL's holder: in _PyRuntime to 3.11, in the GIL after.
			if (layout.TstateCurrent == 0) == (layout.Gil == 0) {
				t.Errorf("Python %s: GIL holder at %#x, GIL at %#x: want exactly one", p.Release, layout.TstateCurrent, layout.Gil)
			}
			threads, err := p.Threads()
			if err != nil || len(threads) == 0 {
				t.Fatalf("threads: %v %v", threads, err)
			}
		})
	}
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	// Start returns once the child has exec'd sleep (os/exec learns of
	// the exec through a close-on-exec pipe).
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	if _, err := pythonLayout(sleeper.Process.Pid); !errors.Is(err, cpython.ErrNotPython) {
		t.Errorf("sleep: %v, want %v", err, cpython.ErrNotPython)
	}
	if _, err := pythonLayout(1 << 30); !errors.Is(err, cpython.ErrNotPython) {
		t.Errorf("no such process: %v, want %v", err, cpython.ErrNotPython)
	}
}
