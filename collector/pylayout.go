package collector

import (
	"fmt"

	"github.com/reqprof/reqprof/collector/cpython"
)

// A Python process's pool jobs (bpf/pyjobs.h) are followed by reading its
// interpreter's state: who holds the GIL, and the frames of the task it
// runs. Package cpython finds the interpreter and its layout (from the
// interpreter's own _Py_DebugOffsets, its debug information or a table
// per release), checked against the process's memory; this file hands
// the programs the part of it struct py_layout holds.

// errNotPython says a process runs no CPython interpreter.
var errNotPython = cpython.ErrNotPython

// pythonLayout finds pid's interpreter and gives the programs' layout
// for it: errNotPython for a process that runs none, an error saying why
// for an interpreter it cannot follow.
func pythonLayout(pid int) (reqprofPyLayout, error) {
	p, err := cpython.Open(pid)
	if err != nil {
		return reqprofPyLayout{}, err
	}
	defer p.Close()
	return programLayout(p)
}

// programLayout is the part of p's layout the programs read: the
// address of the thread state holding the GIL, a thread state's tid and
// C frame, a C frame's current frame, and a frame's link and owner.
// Those are 3.11's structures: 3.10 keeps its frames elsewhere (and no
// owner), 3.12 and 3.13 no holder of the GIL in _PyRuntime, 3.13 no C
// frame, which struct py_layout cannot say yet.
func programLayout(p *cpython.Process) (reqprofPyLayout, error) {
	l := p.Layout
	switch {
	case p.TstateCurrent == 0:
		return reqprofPyLayout{}, fmt.Errorf("Python %s: the programs read the GIL's holder from _PyRuntime, where only 3.10 and 3.11 keep it", p.Release)
	case l.TstateCframe == cpython.Absent || l.FrameOwner == cpython.Absent || l.TstateNativeThreadID == cpython.Absent:
		return reqprofPyLayout{}, fmt.Errorf("Python %s: the programs read 3.11's thread states and frames (C frames, frame owners, native tids)", p.Release)
	}
	// The programs read a frame's link and owner at once, PY_FRAME_SPAN
	// bytes from the link on (bpf/pyjobs.h).
	if l.FrameOwner < l.FramePrevious || l.FrameOwner-l.FramePrevious >= uint64(reqprofLimitsPY_FRAME_SPAN) {
		return reqprofPyLayout{}, fmt.Errorf("Python %s: a frame's owner (%d) is not within %d bytes of its link (%d)", p.Release, l.FrameOwner, reqprofLimitsPY_FRAME_SPAN, l.FramePrevious)
	}
	return reqprofPyLayout{
		TstateCurrent:   p.TstateCurrent,
		TstateNativeTid: uint32(l.TstateNativeThreadID),
		TstateCframe:    uint32(l.TstateCframe),
		CframeCurrent:   uint32(l.CframeCurrentFrame),
		FramePrevious:   uint32(l.FramePrevious),
		FrameOwner:      uint32(l.FrameOwner),
		OwnerGenerator:  uint32(l.OwnerGenerator),
	}, nil
}
