package cpython

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Process is a process's interpreter, open for reading: its layout,
// checked against its memory, and the addresses the collector's programs
// read from.
type Process struct {
	*Interpreter
	Layout *Layout
	// Version is the interpreter's own, read from its memory (Py_Version,
	// or 3.13's _Py_DebugOffsets, or 3.10's version string); 0 when it
	// publishes none (a stripped 3.10).
	Version Version
	// Interp is the address of the main interpreter (PyInterpreterState).
	Interp uint64
	// GIL is the address of the main interpreter's GIL (struct
	// _gil_runtime_state): in _PyRuntime in 3.10 and 3.11, in the
	// interpreter from 3.12 (subinterpreters may have their own). Its holder is at GIL+Layout.GILLastHolder
	// while the int at GIL+Layout.GILLocked is not 0.
	GIL uint64
	// TstateCurrent is the address of _PyRuntime's gilstate.tstate_current
	// in 3.10 and 3.11 (the thread state holding the GIL, NULL while none
	// does); 0 from 3.12, which keeps it only in a thread-local variable.
	TstateCurrent uint64
	// PthreadTID is, for 3.10 (whose thread states have no kernel tid),
	// the offset of the kernel tid in glibc's struct pthread, which a
	// thread state's thread_id (pthread_self()) points to, as libc
	// publishes it for libthread_db (_thread_db_pthread_tid); Absent when
	// the process's libc publishes none.
	PthreadTID uint64

	mem   reader
	file  *os.File // /proc/PID/mem; nil for a fake memory (tests)
	types objectTypes
	codes codeCache
}

// objectTypes are the addresses of the types this package reads objects
// of, each checked by its name.
type objectTypes struct{ code, str, bytes, context uint64 }

// Open finds pid's interpreter and opens it for reading: ErrNotPython
// (wrapped) when it runs none, an error naming what could not be read
// when its layout is not known or does not fit.
func Open(pid int) (*Process, error) {
	interp, err := Find(pid)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, err
	}
	p, err := open(interp, f, fmt.Sprintf("/proc/%d/root", pid))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("Python %s (%s): %w", interp.Release, interp.Path, err)
	}
	p.file = f
	return p, nil
}

// Close closes the process's memory.
func (p *Process) Close() error {
	if p.file == nil {
		return nil
	}
	return p.file.Close()
}

// open reads interp's layout (from its _Py_DebugOffsets in mem, the DWARF
// of its file under root, the table) and checks it against mem.
func open(interp *Interpreter, mem memory, root string) (*Process, error) {
	p := &Process{Interpreter: interp, mem: reader{mem}, PthreadTID: Absent}
	layout, err := p.layout(root)
	if err != nil {
		return nil, err
	}
	p.Layout = layout
	p.codes = newCodeCache()
	// The process runs while it is read: a thread state or frame may
	// change under the reads (a thread starts or ends, a frame returns),
	// and a check fail that a second look passes. A layout that does not
	// fit fails every look.
	for attempt := 1; ; attempt++ {
		err = p.check(root)
		if err == nil {
			return p, nil
		}
		if attempt == checkAttempts {
			return nil, fmt.Errorf("its layout (%s) does not fit: %w", layout.Sources(), err)
		}
		// A thread caught between two states may be off its CPU: give it
		// time to go on (1, 2, 4, 8 ms).
		time.Sleep(time.Millisecond << (attempt - 1))
	}
}

// checkAttempts is how many looks a layout gets to fit a running process.
const checkAttempts = 5

// layout builds the process's layout: from 3.13 on, _Py_DebugOffsets
// from its memory first; then the DWARF of its file (cached by file),
// then the table.
func (p *Process) layout(root string) (*Layout, error) {
	var debug *debugOffsets
	if p.Release.Minor >= 13 || !p.Release.Known() {
		b := make([]byte, debugOffsetsSize)
		if err := p.mem.read(b, p.Runtime); err != nil {
			return nil, fmt.Errorf("_PyRuntime: %w", err)
		}
		d, err := parseDebugOffsets(b, p.Release)
		switch {
		case err == nil:
			debug = d
			p.Version = Version(d.Version)
		case errors.Is(err, errNoDebugOffsets) && p.Release.Minor < 13:
		default:
			return nil, err
		}
	}
	path := filepath.Join(root, p.Path)
	id, ok := identify(path)
	key := layoutKey{file: id}
	if debug != nil {
		key.debug = *debug
	}
	staticLayouts.Lock()
	defer staticLayouts.Unlock()
	if cached, hit := staticLayouts.byKey[key]; hit && ok {
		return cached.layout, cached.err
	}
	ix, err := debugInfo(root, p.Path)
	if err != nil {
		ix = nil // malformed debug information: the table may still do
	}
	var cached staticLayout
	cached.layout, cached.err = buildLayout(p.Release, debug, ix)
	if ok {
		if staticLayouts.byKey == nil {
			staticLayouts.byKey = map[layoutKey]staticLayout{}
		}
		staticLayouts.byKey[key] = cached
	}
	return cached.layout, cached.err
}
