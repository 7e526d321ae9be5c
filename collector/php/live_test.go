package php

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cliPHP is Debian's PHP 8.2 command line.
const cliPHP = "/usr/bin/php8.2"

// TestLiveFrames runs testdata/spin.php under Debian's PHP CLI and reads
// its frames until it spins in Worker::heavy_work: each frame's function,
// class, file and line, and which frames begin an invocation of the
// executor, as the script's own source says.
func TestLiveFrames(t *testing.T) {
	if _, err := os.Stat(cliPHP); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is needed (php8.2-cli): %v", cliPHP, err)
		}
		t.Skipf("no %s", cliPHP)
	}
	script, err := filepath.Abs("testdata/spin.php")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cliPHP, script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the script said %q (%v)", line, err)
	}
	p, err := Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	t.Logf("%s in %s, executor_globals at %#x", p.Build, p.Path, p.ExecutorGlobals)
	want := []string{
		"Worker::heavy_work " + script + ":7 top=false",
		"{closure} " + script + ":14 top=true",
		"array_map :0 top=false",
		"outer " + script + ":14 top=false",
		"{main} " + script + ":18 top=true",
	}
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		frames, err := p.Frames()
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, f := range frames {
			loc, err := p.Locate(f.Func, f.Opline)
			if err != nil {
				t.Fatalf("frame %#x: %v", f.Addr, err)
			}
			got = append(got, fmt.Sprintf("%s %s:%d top=%v", loc.QualifiedName(), loc.File, loc.Line, f.Top))
		}
		if len(got) > 0 && strings.HasPrefix(got[0], "Worker::heavy_work") {
			break
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// fakeMemory is memory made of one block at base.
type fakeMemory struct {
	base uint64
	b    []byte
}

func (m fakeMemory) ReadAt(p []byte, addr int64) (int, error) {
	a := uint64(addr)
	if a < m.base || a-m.base >= uint64(len(m.b)) {
		return 0, errors.New("unmapped")
	}
	n := copy(p, m.b[a-m.base:])
	if n < len(p) {
		return n, errors.New("unmapped")
	}
	return n, nil
}

// TestUnknownEngines: a thread-safe build, or an engine whose API has no
// table, is an error naming it, before any memory is read.
func TestUnknownEngines(t *testing.T) {
	for _, tc := range []struct {
		build Build
		want  string
	}{
		{Build{API: 20230831, Version: "8.3.1"}, "API 20230831"},
		{Build{API: 20220829, ThreadSafe: true, Version: "8.2.36"}, "thread-safe"},
	} {
		_, err := open(&Interpreter{Build: tc.build, ExecutorGlobals: 0x1000}, fakeMemory{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.build, err, tc.want)
		}
	}
	// A known engine whose memory does not read as its layout says.
	garbage := bytes.Repeat([]byte{0x41}, 4096)
	_, err := open(&Interpreter{Build: Build{API: 20220829}, ExecutorGlobals: 0x1000}, fakeMemory{base: 0x1000, b: garbage})
	if err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("memory of 0x41s: %v, want its layout not to fit", err)
	}
	// Executor globals not set up yet: no request started.
	_, err = open(&Interpreter{Build: Build{API: 20220829}, ExecutorGlobals: 0x1000}, fakeMemory{base: 0x1000, b: make([]byte, 4096)})
	if !errors.Is(err, ErrNoRequestYet) {
		t.Errorf("zeroed executor globals: %v, want ErrNoRequestYet", err)
	}
}

// TestParseBuild reads the build strings of Debian's php-fpm8.2 and of
// made-up data.
func TestParseBuild(t *testing.T) {
	for _, tc := range []struct {
		data string
		want Build
		ok   bool
	}{
		{"\x00API420220829,NTS\x00X-Powered-By: PHP/8.2.36\x00API20220829,NTS\x00", Build{API: 20220829, Version: "8.2.36"}, true},
		{"API20230831,TS,debug\x00", Build{API: 20230831, ThreadSafe: true}, true},
		{"xAPI20220829,NTS\x00", Build{}, false},
		{"API2022082,NTS\x00", Build{}, false},
	} {
		got, ok := parseBuild([]byte(tc.data))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %+v %v, want %+v %v", tc.data, got, ok, tc.want, tc.ok)
		}
	}
	for _, bin := range []string{"/usr/sbin/php-fpm8.2", cliPHP} {
		if _, err := os.Stat(bin); err != nil {
			continue
		}
		interp, err := openInterpreter(bin, 0x555555554000)
		if err != nil {
			t.Errorf("%s: %v", bin, err)
			continue
		}
		t.Logf("%s: %s, executor_globals at %#x", bin, interp.Build, interp.ExecutorGlobals)
		if interp.API != 20220829 || interp.ThreadSafe || !strings.HasPrefix(interp.Version, "8.2.") {
			t.Errorf("%s: %s, want 8.2's engine without thread safety", bin, interp.Build)
		}
	}
}
