package collector

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeMemory is a process's memory as a map of words.
type fakeMemory map[uint64]uint64

func (m fakeMemory) ReadAt(p []byte, off int64) (int, error) {
	v, ok := m[uint64(off)]
	if !ok {
		return 0, errors.New("unmapped")
	}
	binary.LittleEndian.PutUint64(p, v)
	return len(p), nil
}

func TestCheckPythonLayout(t *testing.T) {
	rel := pyReleases["3.11"]
	const runtime, interp, tstate = 0x1000, 0x2000, 0x3000
	tid := uint64(os.Getpid()) // a thread of this process: its main one
	good := func() fakeMemory {
		return fakeMemory{
			runtime + rel.runtimeInterpretersHead: interp,
			interp + rel.interpThreadsHead:        tstate,
			tstate + uint64(rel.tstateInterp):     interp,
			tstate + uint64(rel.tstateNativeTid):  tid,
		}
	}
	if err := checkPythonLayout(good(), os.Getpid(), runtime, rel); err != nil {
		t.Fatalf("a consistent interpreter: %v", err)
	}
	for name, spoil := range map[string]func(fakeMemory){
		"no interpreter":           func(m fakeMemory) { m[runtime+rel.runtimeInterpretersHead] = 0 },
		"unreadable interpreter":   func(m fakeMemory) { delete(m, runtime+rel.runtimeInterpretersHead) },
		"no thread state":          func(m fakeMemory) { m[interp+rel.interpThreadsHead] = 0 },
		"another's thread state":   func(m fakeMemory) { m[tstate+uint64(rel.tstateInterp)] = interp + 8 },
		"no thread of the process": func(m fakeMemory) { m[tstate+uint64(rel.tstateNativeTid)] = 1 << 30 },
	} {
		m := good()
		spoil(m)
		if err := checkPythonLayout(m, os.Getpid(), runtime, rel); err == nil {
			t.Errorf("%s: taken as a good layout", name)
		}
	}
}

// The programs read a frame's link and owner at once, PY_FRAME_SPAN bytes
// from the link on (bpf/pyjobs.h): each release's owner must lie within.
func TestPyReleasesFitFrameSpan(t *testing.T) {
	span := uint32(reqprofLimitsPY_FRAME_SPAN)
	for release, rel := range pyReleases {
		if rel.frameOwner < rel.framePrevious || rel.frameOwner-rel.framePrevious >= span {
			t.Errorf("Python %s: a frame's owner (%d) is not within %d bytes of its link (%d)", release, rel.frameOwner, span, rel.framePrevious)
		}
	}
}

func TestPythonFileNames(t *testing.T) {
	for name, release := range map[string]string{
		"python3.11": "3.11", "libpython3.11.so.1.0": "3.11", "libpython3.12.so": "3.12",
		"python3": "", "python": "", "libpython.so": "", "python3.11-config": "", "mypython3.11": "",
	} {
		m := pythonFile.FindStringSubmatch(name)
		got := ""
		if m != nil {
			got = m[1]
		}
		if got != release {
			t.Errorf("%q: release %q, want %q", name, got, release)
		}
	}
}

// TestPythonLayout finds the layout in a live interpreter of each 3.11 on
// this machine (Debian's, linked statically; one linked with a shared
// libpython, as pyenv builds it, where there is one), and tells a process
// that runs none.
func TestPythonLayout(t *testing.T) {
	pythons := []string{"/usr/bin/python3.11"}
	if home, err := os.UserHomeDir(); err == nil {
		shared, _ := filepath.Glob(filepath.Join(home, ".pyenv/versions/3.11.*/bin/python3.11"))
		pythons = append(pythons, shared...)
	}
	for _, python := range pythons {
		if _, err := os.Stat(python); err != nil {
			if python == pythons[0] && os.Getenv("CI") == "true" {
				t.Fatalf("%s: %v", python, err)
			}
			continue
		}
		t.Run(python, func(t *testing.T) {
			cmd := exec.Command(python, "-c", "import sys, time; print('up', flush=True); time.sleep(30)")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "up\n" {
				t.Fatalf("interpreter did not start: %q %v", line, err)
			}
			layout, err := pythonLayout(cmd.Process.Pid)
			if err != nil {
				t.Fatalf("pythonLayout: %v", err)
			}
			rel := pyReleases["3.11"]
			if layout.TstateCurrent == 0 || layout.FrameOwner != rel.frameOwner || layout.TstateCframe != rel.tstateCframe {
				t.Errorf("layout %+v", layout)
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

// Binaries come from outside: no input may panic the reader, and any
// address it finds is that of the symbol it names.
func FuzzPythonRuntime(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	if python, err := os.ReadFile("/usr/bin/python3.11"); err == nil && len(python) > 4096 {
		f.Add(python[:4096])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if runtime, err := pythonRuntimeIn(bytes.NewReader(b), 0x7f0000000000); err == nil && runtime == 0 {
			t.Errorf("address 0 without an error")
		}
	})
}
