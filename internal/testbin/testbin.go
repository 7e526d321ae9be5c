// Package testbin builds the repository's commands for tests that run
// them as processes (the CLI's and serve's end-to-end tests): each command
// once per test binary, all with the same flags, into one directory that
// Remove deletes.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
)

// Commands the tests build, by the name they are asked for.
const (
	Reqprof   = "github.com/reqprof/reqprof/cmd/reqprof"
	Calserver = "github.com/reqprof/reqprof/internal/demo/calserver/cmd/calserver"
)

// buildFlags are those of every build: the test's binary is the one a
// user builds, with no version stamped (make build stamps it; the tests of
// --version set it themselves).
var buildFlags = []string{"build", "-buildvcs=false"}

type build struct {
	once sync.Once
	path string
	err  error
}

var (
	mu     sync.Mutex
	dir    string
	builds = map[string]*build{}
)

// Path is the binary of the command pkg (an import path), built the first
// time a test of this process asks for it; t fails if it does not build.
func Path(t testing.TB, pkg string) string {
	t.Helper()
	p, err := Build(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Build is Path for callers with no testing.TB.
func Build(pkg string) (string, error) {
	mu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &build{}
		builds[pkg] = b
	}
	mu.Unlock()
	b.once.Do(func() {
		out, err := outDir()
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(out, path.Base(pkg))
		cmd := exec.Command("go", append(buildFlags, "-o", b.path, pkg)...)
		if output, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building %s: %v\n%s", pkg, err, output)
		}
	})
	return b.path, b.err
}

func outDir() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if dir == "" {
		d, err := os.MkdirTemp("", "reqprof-test-bin")
		if err != nil {
			return "", err
		}
		dir = d
	}
	return dir, nil
}

// Remove deletes what was built; a TestMain calls it after m.Run.
func Remove() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir = ""
		builds = map[string]*build{}
	}
}

// RequireBPF skips a test that loads BPF when not root, except under CI,
// where such a test must run: a skipped accuracy test proves nothing.
func RequireBPF(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("BPF tests must run as root under CI")
	}
	t.Skip("loading BPF needs root")
}

// LookPath finds a command a test needs; missing, it fails the test under
// CI (which installs it) and skips it elsewhere.
func LookPath(t testing.TB, name string) string {
	t.Helper()
	if path, err := exec.LookPath(name); err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed (make deps installs it)", name)
	}
	t.Skipf("%s is not installed (make deps installs it)", name)
	return ""
}
