package cpython

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// interpreter is a CPython on this machine the live tests run.
type interpreter struct {
	name    string
	path    string
	release Release
	// dwarf says whether its layout comes from its debug information
	// (pyenv's, built with -g) or the table (Debian's, stripped).
	dwarf bool
}

// interpreters are the CPythons of this machine (and of CI, which is
// alike): Debian's python3.11, stripped, and pyenv's builds.
var interpreters = []interpreter{
	{"debian-3.11", "/usr/bin/python3.11", Release{3, 11}, false},
	{"pyenv-3.10", "/root/.pyenv/versions/3.10.13/bin/python3.10", Release{3, 10}, true},
	{"pyenv-3.11", "/root/.pyenv/versions/3.11.7/bin/python3.11", Release{3, 11}, true},
	{"pyenv-3.12", "/root/.pyenv/versions/3.12.1/bin/python3.12", Release{3, 12}, true},
	{"pyenv-3.13", "/root/.pyenv/versions/3.13.0/bin/python3.13", Release{3, 13}, true},
}

// requireFile skips a test whose interpreter is absent, except under CI,
// whose machines have them all: there a missing one fails.
func requireFile(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: %v (CI machines have every interpreter the tests run)", path, err)
		}
		t.Skipf("%s: %v", path, err)
	}
}

// probeEvent is a line testdata/probe.py prints where it blocks.
type probeEvent struct {
	Phase   string `json:"phase"`
	PID     int    `json:"pid"`
	TID     int    `json:"tid"`
	Ident   uint64 `json:"ident"`
	Version []int  `json:"version"`
	Asyncio string `json:"asyncio_module"`
	Threads []struct {
		Name     string `json:"name"`
		Ident    uint64 `json:"ident"`
		NativeID int    `json:"native_id"`
	} `json:"threads"`
	Stack []struct {
		Name     string `json:"name"`
		Qualname string `json:"qualname"`
		File     string `json:"file"`
		Line     int    `json:"line"`
		Code     uint64 `json:"code"`
	} `json:"stack"`
	Spinner int    `json:"spinner"`
	Context uint64 `json:"context"`
	Outer   uint64 `json:"outer"`
	Inner   uint64 `json:"inner"`
	Marked  bool   `json:"marked"`
}

// probe is a running testdata/probe.py.
type probe struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startProbe runs testdata/probe.py under python with loop ("asyncio"
// or "uvloop").
func startProbe(t *testing.T, python, loop string) *probe {
	t.Helper()
	script, err := filepath.Abs("testdata/probe.py")
	if err != nil {
		t.Fatal(err)
	}
	return startScript(t, python, script, loop)
}

// startScript runs python script args until the test ends.
func startScript(t *testing.T, python string, script string, args ...string) *probe {
	t.Helper()
	cmd := exec.Command(python, append([]string{script}, args...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &probe{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return p
}

// line waits for the script's next line.
func (p *probe) line(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			t.Fatal("the script ended")
		}
		return line
	case <-time.After(30 * time.Second):
		t.Fatal("no line in 30 s")
	}
	return ""
}

// next waits for the probe's next line, which must be phase's, and
// then until its thread blocks reading stdin: the line is printed just
// before.
func (p *probe) next(t *testing.T, phase string) probeEvent {
	t.Helper()
	var ev probeEvent
	if line := p.line(t); json.Unmarshal([]byte(line), &ev) != nil {
		t.Fatalf("%q, want the %q line", line, phase)
	}
	if ev.Phase != phase {
		t.Fatalf("phase %q, want %q", ev.Phase, phase)
	}
	if ev.TID != 0 && len(ev.Stack) < 2 {
		t.Fatalf("%s: the probe's stack is %v", phase, ev.Stack)
	}
	if ev.TID != 0 {
		waitFor(t, fmt.Sprintf("thread %d to read its stdin", ev.TID), func() bool {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/syscall", ev.PID, ev.TID))
			return err == nil && strings.HasPrefix(string(b), "0 0x0 ") // read(0, ...)
		})
	}
	return ev
}

// resume lets the probe go on from where it blocks.
func (p *probe) resume(t *testing.T) {
	t.Helper()
	if _, err := p.stdin.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// countingMemory counts the reads made of a process's memory.
type countingMemory struct {
	memory
	reads int
}

func (m *countingMemory) ReadAt(p []byte, off int64) (int, error) {
	m.reads++
	return m.memory.ReadAt(p, off)
}

// threadOf is the thread of tid, failing the test when there is none.
func threadOf(t *testing.T, p *Process, tid int) Thread {
	t.Helper()
	th, ok, err := p.ThreadOf(tid)
	if err != nil || !ok {
		t.Fatalf("thread %d: found %v, %v", tid, ok, err)
	}
	return th
}

// checkStack compares the frames read of th with those the probe saw.
func checkStack(t *testing.T, p *Process, th Thread, ev probeEvent) []Frame {
	t.Helper()
	frames, err := p.Frames(th)
	if err != nil {
		t.Fatalf("frames: %v", err)
	}
	var got, want []string
	for _, f := range frames {
		loc, err := p.Locate(f)
		if err != nil {
			t.Fatalf("frame %#x: %v", f.Addr, err)
		}
		got = append(got, fmt.Sprintf("%s (%s) %s:%d code %#x", loc.Name, loc.Qualname, loc.Filename, loc.Line, f.Code))
	}
	for _, f := range ev.Stack {
		want = append(want, fmt.Sprintf("%s (%s) %s:%d code %#x", f.Name, f.Qualname, f.File, f.Line, f.Code))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s: frames read:\n  %s\nthe probe's:\n  %s", ev.Phase, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	return frames
}

func TestLiveInterpreters(t *testing.T) {
	for _, in := range interpreters {
		t.Run(in.name, func(t *testing.T) {
			requireFile(t, in.path)
			runProbe(t, in, "asyncio")
		})
	}
}

// TestUvloop runs the probe under uvloop (Debian's python3-uvloop, for
// its python3.11): a task's steps and a handle run in their context as
// under asyncio's loop.
func TestUvloop(t *testing.T) {
	in := interpreters[0]
	requireFile(t, in.path)
	requireFile(t, "/usr/lib/python3/dist-packages/uvloop/__init__.py")
	runProbe(t, in, "uvloop")
}

func runProbe(t *testing.T, in interpreter, loop string) {
	pr := startProbe(t, in.path, loop)
	start := pr.next(t, "start")
	t.Logf("%v, _asyncio: %s", start.Version, start.Asyncio)

	ev := pr.next(t, "plain")
	p, err := Open(ev.PID)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer p.Close()
	t.Logf("%s %s in %s, layout from %s", p.Release, p.Version, p.Path, p.Layout.Sources())
	if p.Release != in.release {
		t.Errorf("release %s, want %s", p.Release, in.release)
	}
	if want := fmt.Sprintf("%d.%d.%d", start.Version[0], start.Version[1], start.Version[2]); p.Version.String() != want {
		t.Errorf("version %s read, the interpreter says %s", p.Version, want)
	}
	checkSources(t, p, in)

	// The threads: each one's tid and ident as threading says.
	threads, err := p.Threads()
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]uint64{}
	for _, th := range threads {
		got[th.NativeTID] = th.ThreadID
	}
	if len(got) != len(ev.Threads) {
		t.Errorf("%d threads read, the probe has %d: %v", len(got), len(ev.Threads), got)
	}
	for _, th := range ev.Threads {
		if ident, ok := got[th.NativeID]; !ok || ident != th.Ident {
			t.Errorf("thread %s (%d, ident %#x): read %#x, %v", th.Name, th.NativeID, th.Ident, ident, ok)
		}
	}
	main := threadOf(t, p, ev.TID)
	checkStack(t, p, main, ev)
	for _, th := range ev.Threads {
		if th.Name != "waiter" {
			continue
		}
		frames, err := p.Frames(threadOf(t, p, th.NativeID))
		if err != nil || len(frames) == 0 {
			t.Fatalf("the waiter's frames: %v %v", frames, err)
		}
		loc, err := p.Locate(frames[0])
		if err != nil || loc.Name != "wait" || filepath.Base(loc.Filename) != "threading.py" {
			t.Errorf("the waiter waits in %+v, %v; want threading.py's wait", loc, err)
		}
	}
	// The cost of each read, done the way the programs will: one read a
	// frame; one for a thread state's context; one for the GIL's holder.
	counting := &countingMemory{memory: p.mem.mem}
	p.mem.mem = counting
	reads := func(what string, read func() error) int {
		t.Helper()
		counting.reads = 0
		if err := read(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return counting.reads
	}
	var frames []Frame
	if n := reads("frames", func() (err error) { frames, err = p.frames(main, true); return err }); n != len(frames) {
		t.Errorf("%d reads for %d frames (C stack's entry frames included)", n, len(frames))
	}
	if n := reads("context", func() error { ctx, ver, err := p.Context(main.TState); _, _ = ctx, ver; return err }); n != 1 {
		t.Errorf("%d reads for a context", n)
	}
	if n := reads("GIL", func() error { _, err := p.GILHolder(); return err }); n != 1 {
		t.Errorf("%d reads for the GIL's holder", n)
	}
	tstateReads := reads("thread state", func() error { _, _, err := p.thread(main.TState, main.Interp); return err })
	walkReads := reads("thread of a tid", func() error { _, _, err := p.ThreadOf(ev.TID); return err })
	base, size := p.Layout.tstateSpan()
	t.Logf("reads: 1 a frame (%d, C stack's entry frames included, %d bytes each), 1 for a context, 1 for the GIL's holder, %d for a thread state (%d bytes from %d) with its innermost frame; %d to find a thread by tid among %d (interpreters included)",
		len(frames), func() uint64 { _, s := p.Layout.frameSpan(); return s }(), tstateReads, size, base, walkReads, len(threads))
	p.mem.mem = counting.memory
	pr.resume(t)

	// The GIL: a thread spinning in Python holds it.
	ev = pr.next(t, "gil-held")
	spinner := threadOf(t, p, ev.Spinner)
	waitFor(t, "the spinner to hold the GIL", func() bool {
		holder, err := p.GILHolder()
		locked, last, err2 := p.GILState()
		return err == nil && err2 == nil && holder == spinner.TState && locked && last == spinner.TState
	})
	// Opened while a thread runs Python code, whose frames change under
	// the reads.
	for i := range 20 {
		busy, err := Open(ev.PID)
		if err != nil {
			t.Errorf("Open %d while a thread spins: %v", i, err)
			continue
		}
		busy.Close()
	}
	pr.resume(t)
	ev = pr.next(t, "gil-free")
	waitFor(t, "the GIL to be free", func() bool {
		holder, err := p.GILHolder()
		locked, _, err2 := p.GILState()
		return err == nil && err2 == nil && holder == 0 && !locked
	})
	pr.resume(t)

	// A task's step: the coroutines' frames, the task's context.
	ev = pr.next(t, "task")
	main = threadOf(t, p, ev.TID)
	frames = checkStack(t, p, main, ev)
	if main.Context != ev.Context {
		t.Errorf("in a task's step: context %#x, the task's is %#x", main.Context, ev.Context)
	}
	taskContextVer := main.ContextVer
	gens := map[string]uint64{}
	for _, f := range frames {
		loc, _ := p.Locate(f)
		if f.Owner == OwnedByGenerator {
			gens[loc.Name] = f.Gen
			if frame, err := p.GenFrame(f.Gen); err != nil || frame != f.Addr {
				t.Errorf("%s: its coroutine's frame is %#x (%v), not %#x", loc.Name, frame, err, f.Addr)
			}
		}
	}
	if gens["inner_coroutine"] != ev.Inner || gens["outer_coroutine"] != ev.Outer || len(gens) != 2 {
		t.Errorf("coroutine frames %#x; want inner_coroutine's %#x, outer_coroutine's %#x", gens, ev.Inner, ev.Outer)
	}
	pr.resume(t)

	ev = pr.next(t, "handle")
	main = threadOf(t, p, ev.TID)
	checkStack(t, p, main, ev)
	if main.Context != ev.Context {
		t.Errorf("in a handle: context %#x, the handle's is %#x", main.Context, ev.Context)
	}
	if main.ContextVer <= taskContextVer {
		t.Errorf("context_ver %d in the handle, %d in the task's step before: it counts each change", main.ContextVer, taskContextVer)
	}
	pr.resume(t)

	// A protocol's callbacks: what runs them says in which context.
	var contexts []uint64
	for range 2 {
		ev = pr.next(t, "protocol")
		main = threadOf(t, p, ev.TID)
		checkStack(t, p, main, ev)
		contexts = append(contexts, main.Context)
		t.Logf("%s: a protocol's data_received runs in context %#x; it sees what connection_made set in its own: %v", loop, main.Context, ev.Marked)
		pr.resume(t)
	}
	// Both loops run a connection's data_received in a context of its
	// own (asyncio's: its reader handle's; uvloop's: its transport's,
	// which connection_made runs in too).
	if contexts[0] == 0 || contexts[0] != contexts[1] {
		t.Errorf("%s: a connection's two data_received ran in contexts %#x", loop, contexts)
	}
	if ev.Marked != (loop == "uvloop") {
		t.Errorf("%s: data_received sees what connection_made set in its context: %v", loop, ev.Marked)
	}
	pr.next(t, "end")
}

// checkSources checks where the layout came from: 3.13's from its
// _Py_DebugOffsets for all it publishes, the rest from DWARF or the
// table.
func checkSources(t *testing.T, p *Process, in interpreter) {
	t.Helper()
	for _, f := range p.Layout.Fields() {
		want := SourceTable
		if in.dwarf {
			want = SourceDWARF
		}
		spec := specNamed(f.Name)
		switch {
		case f.Value == Absent:
			want = SourceNone
		case in.release.Minor >= 13 && spec.debug != nil:
			want = SourceDebugOffsets
		}
		if f.Source != want {
			t.Errorf("%s from %s, want %s", f.Name, f.Source, want)
		}
	}
}

func specNamed(name string) fieldSpec {
	for _, s := range fieldSpecs {
		if s.name == name {
			return s
		}
	}
	panic(errors.New("no field " + name))
}
