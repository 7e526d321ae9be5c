// Package cserver builds a tiny HTTP/1.1 server written in C (c/cserver.c),
// whose two routes burn CPU in two functions of their own, burn_alpha and
// burn_beta: the stack tests check that reqprof tells them apart in a
// binary that is not Go's. It speaks calserver's protocol ("listening on
// ADDR", its own figures as a JSON line on SIGTERM), so calserver.Spawn
// runs it.
package cserver

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

//go:embed c/cserver.c
var source []byte

// Stats are the server's own figures: requests served and the mean CPU
// its burn took, by the thread's CPU clock, per path.
type Stats struct {
	Requests map[string]uint64  `json:"requests"`
	BurnUs   map[string]float64 `json:"burn_us"`
}

// ErrNoCompiler is what Build's error wraps when there is no C compiler.
var ErrNoCompiler = errors.New("no C compiler (cc, gcc or clang)")

// Build compiles the server into dir with frame pointers, so that its
// stacks can be walked, and debug information, adding extra flags (-s to
// strip it), and returns the binary's path.
func Build(dir string, extra ...string) (string, error) {
	var cc string
	for _, name := range []string{"cc", "gcc", "clang"} {
		if path, err := exec.LookPath(name); err == nil {
			cc = path
			break
		}
	}
	if cc == "" {
		return "", ErrNoCompiler
	}
	src := filepath.Join(dir, "cserver.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "cserver")
	args := append([]string{"-O2", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", bin, src}, extra...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the C server: %v\n%s", err, out)
	}
	return bin, nil
}
