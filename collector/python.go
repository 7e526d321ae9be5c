package collector

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/reqprof/reqprof/collector/cpython"
)

// pyAbsent is struct py_layout's mark of a field the release lacks.
const pyAbsent = 0xffffffff

// pythonLayout finds pid's interpreter and gives the programs its layout
// (bpf/python.h): an error wrapping cpython.ErrNotPython for a process
// that runs none, one saying why for an interpreter it cannot follow.
func pythonLayout(pid int) (reqprofPyLayout, error) {
	p, err := cpython.Open(pid)
	if err != nil {
		return reqprofPyLayout{}, err
	}
	defer p.Close()
	return pyLayoutOf(p)
}

// pyLayoutOf is the programs' layout of the interpreter p, checked
// against its memory when p was opened.
func pyLayoutOf(p *cpython.Process) (reqprofPyLayout, error) {
	l := p.Layout
	// The programs read both in one read.
	if l.TstateContext == cpython.Absent || l.TstateContextVer != l.TstateContext+8 {
		return reqprofPyLayout{}, fmt.Errorf("Python %s: its thread state keeps no context counted beside it", p.Release)
	}
	offset := func(v uint64) uint32 {
		if v == cpython.Absent {
			return pyAbsent
		}
		return uint32(v)
	}
	layout := reqprofPyLayout{
		Interp:        p.Interp,
		TstateCurrent: p.TstateCurrent,
		InterpThreads: offset(l.InterpThreadsHead),
		TstateNext:    offset(l.TstateNext),
		TstateTid:     offset(l.TstateNativeThreadID),
		TstatePthread: offset(l.TstateThreadID),
		TstateContext: offset(l.TstateContext),
		GilLastHolder: offset(l.GILLastHolder),
		GilLocked:     offset(l.GILLocked),
	}
	if p.TstateCurrent == 0 {
		layout.Gil = p.GIL
	}
	if l.InterpContextFreelist != cpython.Absent && l.ContextNextFree != cpython.Absent {
		layout.CtxFreelist = p.Interp + l.InterpContextFreelist
	}
	if layout.TstateTid == pyAbsent && layout.TstatePthread == pyAbsent {
		return reqprofPyLayout{}, fmt.Errorf("Python %s: its thread states name no thread", p.Release)
	}
	return layout, nil
}

// followPython gives the programs pid's interpreter's layout, if it runs
// a CPython whose layout is known, and says how its pool is followed;
// python says whether it did.
func followPython(objs *bpfObjects, pid int) (status string, python bool) {
	layout, err := pythonLayout(pid)
	if errors.Is(err, cpython.ErrNotPython) {
		return PoolNone, false
	}
	if err != nil {
		return "not followed: " + err.Error(), false
	}
	if err := objs.PyLayouts.Update(uint32(pid), &layout, ebpf.UpdateAny); err != nil {
		return "not followed: " + err.Error(), false
	}
	return PoolFollowed, true
}
