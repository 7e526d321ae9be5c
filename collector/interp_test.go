package collector

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/profile"
)

func nativeFrames(names ...string) []profile.Frame {
	var frames []profile.Frame
	for _, n := range names {
		f := profile.Frame{Function: n, Module: "/usr/bin/python3.11"}
		if strings.HasPrefix(n, "0x") {
			f = profile.Frame{Address: 0x1234}
		}
		if strings.HasSuffix(n, "_[k]") {
			f = profile.Frame{Function: strings.TrimSuffix(n, "_[k]"), Module: profile.KernelModule, Kernel: true}
		}
		frames = append(frames, f)
	}
	return frames
}

// pyStack is interpreter frames named as given, innermost first; a name
// ending in "!" ends a run.
func pyStack(truncated bool, names ...string) interpStack {
	st := interpStack{truncated: truncated, module: profile.PythonModule,
		evalLoop: func(f profile.Frame) bool { return f.Function == "_PyEval_EvalFrameDefault" && !f.Interpreted() }}
	for _, n := range names {
		name, end := strings.CutSuffix(n, "!")
		st.frames = append(st.frames, profile.Frame{Function: name, Module: profile.PythonModule, File: "app.py", FunctionLine: 1})
		st.runEnds = append(st.runEnds, end)
	}
	return st
}

func frameNames(frames []profile.Frame) []string {
	var names []string
	for _, f := range frames {
		n := f.Function
		if n == "" {
			n = f.Name()
		}
		names = append(names, n)
	}
	return names
}

// Interpreter frames go where the interpreter's loop runs them, native
// frames below and above kept; where the native walk went astray, what it
// found past its last invocation of the loop is dropped.
func TestSplice(t *testing.T) {
	const eval = "_PyEval_EvalFrameDefault"
	for _, tc := range []struct {
		name    string
		native  []string
		nKernel int
		interp  interpStack
		want    []string
	}{
		{"a walk through every invocation",
			[]string{"PyObject_Free", eval, "PyObject_Call", eval, "main"}, 0,
			pyStack(false, "leaf", "work!", "handle!"),
			[]string{"PyObject_Free", "leaf", "work", "PyObject_Call", "handle", "main"}},
		{"sampled in the loop, the walk astray past it",
			[]string{eval, "0x1234", "PyObject_Call"}, 0,
			pyStack(false, "leaf", "work!", "handle!"),
			[]string{"leaf", "work", "handle"}},
		{"sampled in a C function, the walk astray past it",
			[]string{"PyObject_Free", "0x1234", "0x1234"}, 0,
			pyStack(false, "leaf", "work!", "handle!"),
			[]string{"PyObject_Free", "leaf", "work", "handle"}},
		{"in the kernel",
			[]string{"tcp_sendmsg_[k]", "entry_SYSCALL_64_[k]", "send", "0x1234"}, 2,
			pyStack(false, "sendall", "handle!"),
			[]string{"tcp_sendmsg", "entry_SYSCALL_64", "send", "sendall", "handle"}},
		{"3.10: a run a frame",
			[]string{eval, "PyObject_Call", eval, eval, "main"}, 0,
			pyStack(false, "leaf!", "work!", "handle!"),
			[]string{"leaf", "PyObject_Call", "work", "handle", "main"}},
		{"more invocations than runs: the outer ones stay",
			[]string{eval, "PyObject_Call", eval, "main"}, 0,
			pyStack(false, "leaf", "work!"),
			[]string{"leaf", "work", "PyObject_Call", eval, "main"}},
		{"the outermost frames not read",
			[]string{eval, "main"}, 0,
			pyStack(true, "leaf", "work"),
			[]string{"leaf", "work", "(frames past the 2 read)", "main"}},
		{"no interpreter frames",
			[]string{eval, "main"}, 0,
			interpStack{},
			[]string{eval, "main"}},
	} {
		got := frameNames(splice(nativeFrames(tc.native...), tc.nKernel, tc.interp))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// fakeReader names code c at instruction i "f<c>" at line i, and cannot
// read code 0xbad.
type fakeReader struct{ reads *int }

func (r fakeReader) frame(code, instr uint64) (profile.Frame, error) {
	*r.reads++
	if code == 0xbad {
		return profile.Frame{}, errors.New("unreadable")
	}
	return profile.Frame{Function: fmt.Sprintf("f%x", code), File: "/app/a.py", Line: int(instr), FunctionLine: 1, Module: profile.PythonModule, Address: code}, nil
}
func (fakeReader) evalLoop(f profile.Frame) bool { return f.Function == "_PyEval_EvalFrameDefault" }
func (fakeReader) frameEachRun() bool            { return false }
func (fakeReader) module() string                { return profile.PythonModule }
func (fakeReader) close() error                  { return nil }

// interpSample is a user sample of process 4242 with interpreter frames,
// pairs of (code, instruction), the first entries of them ending runs.
func interpSample(t testing.TB, ips []uint64, entries uint64, interp ...uint64) []byte {
	s := reqprofStackSample{Tgid: 4242, Tid: 4243, UserFrames: uint16(len(ips)), InterpFrames: uint16(len(interp) / 2), InterpEntries: entries}
	copy(s.Ips[:], ips)
	copy(s.Ips[len(ips):], interp)
	return sampleBytes(t, s)
}

// Samples with interpreter frames: named once a stretch of time (not once
// a sample), spliced into the native stack, one stack for samples at the
// same lines; an unreadable frame shows where its code is; a process
// whose interpreter cannot be read is said once.
func TestInterpreterFramesInSamples(t *testing.T) {
	res := newTestResult(t)
	reads := 0
	ip := newInterpreters(nil)
	ip.open = func(pid int) (interpReader, reqprofInterpLayout, error) {
		if pid == 4242 {
			return fakeReader{&reads}, reqprofInterpLayout{}, nil
		}
		return nil, reqprofInterpLayout{}, errors.New("Python 3.99: its layout is not known")
	}
	res.stacks.interp = ip
	// The native walk found nothing: the leaf only, an address.
	for range 3 {
		res.decode(interpSample(t, []uint64{0x401000}, 1<<1, 0xc1, 10, 0xc2, 20, 0xc3, 30))
	}
	res.decode(interpSample(t, []uint64{0x401000}, 1<<1, 0xc1, 11, 0xc2, 20, 0xc3, 30))
	res.decode(interpSample(t, []uint64{0x401000}, 0, 0xbad, 1))
	other := reqprofStackSample{Tgid: 5000, UserFrames: 1, InterpFrames: 1}
	other.Ips[0], other.Ips[1], other.Ips[2] = 0x401000, 0xc1, 1
	res.decode(sampleBytes(t, other))
	res.decode(sampleBytes(t, other))
	st := res.stacks.result(nil)[0]
	var got []string
	for _, s := range st.Samples {
		var names []string
		for _, i := range s.Frames {
			f := st.Frames[i]
			names = append(names, fmt.Sprintf("%s:%d", f.Name(), f.Line))
		}
		got = append(got, fmt.Sprintf("%d %s", s.Count, strings.Join(names, " < ")))
	}
	want := []string{
		"3 0x401000:0 < fc1 (a.py:1):10 < fc2 (a.py:1):20 < fc3 (a.py:1):30",
		"2 0x401000:0",
		"1 0x401000:0 < fc1 (a.py:1):11 < fc2 (a.py:1):20 < fc3 (a.py:1):30",
		"1 0x401000:0 < [python]+0xbad:0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("samples:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Each distinct frame named once: c1 at 10 and 11, c2, c3, 0xbad.
	if reads != 5 {
		t.Errorf("%d frames named, want 5", reads)
	}
	said := 0
	for _, n := range st.Notes {
		if strings.Contains(n, "Python 3.99") {
			said++
			if !strings.HasPrefix(n, "process 5000: ") {
				t.Errorf("note %q, want it about process 5000", n)
			}
		}
	}
	if said != 1 {
		t.Errorf("notes %q, want one about process 5000's Python", st.Notes)
	}
}
