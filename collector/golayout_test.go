package collector

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A Go program linked by Go's own linker, with DWARF: its goid is inside
// runtime.g and its g is at -8 from the FS base.
func TestReadGoLayoutOfAGoBinary(t *testing.T) {
	layout, err := readGoLayout(openBuilt(t))
	if err != nil {
		t.Fatalf("reading a Go binary: %v", err)
	}
	// runtime.g holds the stack bounds, the panic and defer chains, the
	// scheduling context and more before its id: well past 100 bytes, and
	// the whole struct is some 400.
	if layout.goidOffset < 100 || layout.goidOffset > 512 || layout.goidOffset%8 != 0 {
		t.Errorf("goid at %d in runtime.g, want an aligned offset between 100 and 512", layout.goidOffset)
	}
	if layout.gTLSOffset != -8 {
		t.Errorf("g at %d from the FS base, want -8 for a binary of Go's own linker", layout.gTLSOffset)
	}
}

func TestReadGoLayoutRejects(t *testing.T) {
	for _, path := range []string{"/bin/sh", "/proc/self/cmdline"} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = readGoLayout(f)
		f.Close()
		if !errors.Is(err, errNotGo) {
			t.Errorf("%s: %v, want errNotGo", path, err)
		}
	}
}

// A Go binary stripped of DWARF is a Go binary whose goroutines cannot be
// followed, and the error says why.
func TestReadGoLayoutWithoutDWARF(t *testing.T) {
	_, err := readGoLayout(openBuilt(t, "-ldflags=-w"))
	if err == nil || errors.Is(err, errNotGo) || !strings.Contains(err.Error(), "DWARF") {
		t.Errorf("%v, want an error about DWARF", err)
	}
}

// openBuilt builds an empty Go program with go build and flags, and opens
// it. (A test binary itself has no DWARF.)
func openBuilt(t *testing.T, flags ...string) *os.File {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "main")
	build := exec.Command("go", append(append([]string{"build"}, flags...), "-o", bin, src)...)
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Binaries come from outside: no input may panic the reader.
func FuzzReadGoLayout(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	if self, err := os.ReadFile("/proc/self/exe"); err == nil && len(self) > 4096 {
		f.Add(self[:4096])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		layout, err := readGoLayout(bytes.NewReader(b))
		if err == nil && layout.goidOffset == 0 {
			t.Errorf("layout %+v without an error", layout)
		}
	})
}
