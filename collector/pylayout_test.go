package collector

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
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

// TestPythonLayout gives the programs the layout of each 3.11 on this
// machine (Debian's, linked statically, its layout from package cpython's
// table; pyenv's, with a shared libpython and debug information) as the
// hand table it replaced had it, refuses the other releases with a
// reason, and tells a process that runs none. CI machines have them all.
func TestPythonLayout(t *testing.T) {
	// 3.11's layout as the programs had it before package cpython.
	want311 := reqprofPyLayout{TstateNativeTid: 160, TstateCframe: 56, CframeCurrent: 8, FramePrevious: 48, FrameOwner: 69, OwnerGenerator: 1}
	for python, want := range map[string]string{
		"/usr/bin/python3.11":                          "",
		"/root/.pyenv/versions/3.11.7/bin/python3.11":  "",
		"/root/.pyenv/versions/3.10.13/bin/python3.10": "3.11's thread states",
		"/root/.pyenv/versions/3.12.1/bin/python3.12":  "only 3.10 and 3.11",
		"/root/.pyenv/versions/3.13.0/bin/python3.13":  "only 3.10 and 3.11",
	} {
		t.Run(python, func(t *testing.T) {
			if _, err := os.Stat(python); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("%s: %v", python, err)
				}
				t.Skipf("%s: %v", python, err)
			}
			layout, err := pythonLayout(startPython(t, python))
			if want != "" {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("layout %+v, error %v; want one saying %q", layout, err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("pythonLayout: %v", err)
			}
			if layout.TstateCurrent == 0 {
				t.Errorf("no address of the GIL's holder: %+v", layout)
			}
			layout.TstateCurrent = 0
			if layout != want311 {
				t.Errorf("layout %+v, want %+v", layout, want311)
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
	if _, err := pythonLayout(sleeper.Process.Pid); !errors.Is(err, errNotPython) {
		t.Errorf("sleep: %v, want %v", err, errNotPython)
	}
	if _, err := pythonLayout(1 << 30); !errors.Is(err, errNotPython) || !strings.Contains(err.Error(), "CPython") {
		t.Errorf("no such process: %v, want %v", err, errNotPython)
	}
}
