package cpython

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// check reads the process's state with its layout, as every use will,
// and says what does not fit: _PyRuntime's size is the layout's; the first interpreter's thread states
// point back to it and name threads of the process; the interpreter's
// own version is its file's release; the types read are named "code",
// "str", "bytes"; the GIL's holder is none or one of its threads; each
// thread's frames have known owners and code objects, whose names are
// str and line tables bytes.
func (p *Process) check(root string) error {
	l := p.Layout
	if p.RuntimeSize != 0 && p.RuntimeSize != l.RuntimeStateSize {
		return fmt.Errorf("_PyRuntime is %d bytes, the layout's _PyRuntimeState %d: its structures are another build's", p.RuntimeSize, l.RuntimeStateSize)
	}
	var err error
	if p.Interp, err = p.mem.u64(p.Runtime + l.RuntimeInterpretersMain); err != nil || p.Interp == 0 {
		return fmt.Errorf("no main interpreter in _PyRuntime (%#x): %v", p.Runtime, err)
	}
	interps, err := p.interpreters()
	if err != nil {
		return err
	}
	if !slices.Contains(interps, p.Interp) {
		return fmt.Errorf("the main interpreter (%#x) is not in the list of interpreters %#x", p.Interp, interps)
	}
	if err := p.checkVersion(); err != nil {
		return err
	}
	if err := p.findTypes(); err != nil {
		return err
	}
	if err := p.findGIL(); err != nil {
		return err
	}
	if l.TstateNativeThreadID == Absent {
		p.PthreadTID = pthreadTIDOffset(p.PID, root)
	}
	threads, err := p.Threads()
	if err != nil {
		return err
	}
	if len(threads) == 0 {
		return fmt.Errorf("no thread state in the interpreters %#x", interps)
	}
	tstates := map[uint64]bool{}
	bound := 0
	for _, t := range threads {
		tstates[t.TState] = true
		switch {
		case t.ThreadID == 0 && t.NativeTID == 0:
			// Not yet bound to its thread: a new thread's state is made
			// (from 3.12, by the thread that starts it) before it runs.
			continue
		case t.NativeTID == 0 && p.PthreadTID != Absent:
			return fmt.Errorf("thread state %#x: its thread's (%#x) struct pthread says tid 0", t.TState, t.ThreadID)
		case t.NativeTID != 0:
			if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", p.PID, t.NativeTID)); err != nil {
				return fmt.Errorf("thread state %#x names thread %d, none of process %d's", t.TState, t.NativeTID, p.PID)
			}
		}
		bound++
	}
	if bound == 0 {
		return errors.New("no thread state is bound to a thread")
	}
	holder, err := p.GILHolder()
	if err != nil {
		return err
	}
	if holder != 0 && !tstates[holder] {
		// A thread that ends leaves the list while it holds the GIL:
		// its state is still whole until it lets the GIL go.
		if back, err := p.mem.u64(holder + l.TstateInterp); err != nil || back != p.Interp {
			return fmt.Errorf("the GIL's holder (%#x) is none of the interpreter's thread states", holder)
		}
	}
	for _, t := range threads {
		if err := p.checkThread(t); err != nil {
			return err
		}
	}
	return nil
}

// checkThread reads t's context and its frames and their code objects.
func (p *Process) checkThread(t Thread) error {
	if t.Context != 0 && p.types.context != 0 {
		typ, err := p.mem.u64(t.Context + p.Layout.ObjectType)
		if err != nil || typ != p.types.context {
			return fmt.Errorf("thread state %#x: its context (%#x) is no contextvars.Context (type %#x): %v", t.TState, t.Context, typ, err)
		}
	}
	frames, err := p.Frames(t)
	if err != nil {
		return fmt.Errorf("thread %d: %w", t.NativeTID, err)
	}
	for _, f := range frames {
		if _, err := p.Locate(f); err != nil {
			return fmt.Errorf("thread %d: %w", t.NativeTID, err)
		}
	}
	return nil
}

// checkVersion reads the interpreter's version from its memory where it
// keeps it: it must be the release its file is named for.
func (p *Process) checkVersion() error {
	if p.Version == 0 {
		if addr, ok := p.Symbols["Py_Version"]; ok { // 3.11+
			v, err := p.mem.u32(addr)
			if err != nil {
				return fmt.Errorf("Py_Version: %w", err)
			}
			p.Version = Version(v)
		}
	}
	if p.Version != 0 {
		if p.Version.Release() != p.Release {
			return fmt.Errorf("the interpreter says it is %s, its file %s", p.Version, p.Release)
		}
		return nil
	}
	if p.versionBuffer == 0 {
		return nil // a stripped 3.10: the layout's checks must do
	}
	s, err := p.mem.cString(p.versionBuffer, 250)
	if err != nil {
		return fmt.Errorf("its version string: %w", err)
	}
	var major, minor, micro int
	if _, err := fmt.Sscanf(s, "%d.%d.%d", &major, &minor, &micro); err != nil || (Release{major, minor}) != p.Release {
		return fmt.Errorf("its version string is %q, its file says %s", s, p.Release)
	}
	p.Version = Version(major<<24 | minor<<16 | micro<<8 | 0xf0)
	return nil
}

// findTypes finds the types read, by their exported symbols, each
// checked by its name.
func (p *Process) findTypes() error {
	for _, want := range []struct {
		symbol, name string
		addr         *uint64
		optional     bool
	}{
		{"PyCode_Type", "code", &p.types.code, false},
		{"PyUnicode_Type", "str", &p.types.str, false},
		{"PyBytes_Type", "bytes", &p.types.bytes, false},
		{"PyContext_Type", "_contextvars.Context", &p.types.context, true},
	} {
		addr, ok := p.Symbols[want.symbol]
		if !ok {
			if want.optional {
				continue
			}
			return fmt.Errorf("its file exports no %s", want.symbol)
		}
		name, err := p.typeName(addr)
		if err != nil {
			return fmt.Errorf("%s's name: %w", want.symbol, err)
		}
		if name != want.name && !(want.optional && strings.HasSuffix(want.name, "."+name)) {
			return fmt.Errorf("%s is named %q, not %q", want.symbol, name, want.name)
		}
		*want.addr = addr
	}
	return nil
}

// findGIL finds the first interpreter's GIL: in _PyRuntime in 3.10 and
// 3.11, in the interpreter from 3.12 (its own, ceval.gil pointing to
// it, unless it shares the main interpreter's).
func (p *Process) findGIL() error {
	l := p.Layout
	if l.RuntimeGIL != Absent {
		p.GIL = p.Runtime + l.RuntimeGIL
		p.TstateCurrent = p.Runtime + l.RuntimeTstateCurrent
	} else {
		gil, err := p.mem.u64(p.Interp + l.InterpCevalGIL)
		if err != nil || gil == 0 {
			return fmt.Errorf("the interpreter's GIL (ceval.gil): %#x %v", gil, err)
		}
		// The main interpreter has a GIL of its own (subinterpreters
		// may share it).
		if gil != p.Interp+l.InterpGIL {
			return fmt.Errorf("the main interpreter's GIL is at %#x, not its own (%#x)", gil, p.Interp+l.InterpGIL)
		}
		p.GIL = gil
	}
	locked, err := p.mem.u32(p.GIL + l.GILLocked)
	if err != nil {
		return fmt.Errorf("the GIL: %w", err)
	}
	if locked > 1 {
		return fmt.Errorf("the GIL's locked is %d, neither 0 nor 1", locked)
	}
	return nil
}

// pthreadTIDOffset is where glibc's struct pthread keeps the kernel tid,
// as the libc pid maps publishes it for libthread_db: a descriptor
// (size in bits, count, offset) named _thread_db_pthread_tid. Absent
// when its libc publishes none (musl, or a libc not found).
func pthreadTIDOffset(pid int, root string) uint64 {
	files, err := mappedFiles(pid)
	if err != nil {
		return Absent
	}
	for _, m := range files {
		base := filepath.Base(m.path)
		if base != "libc.so.6" && !(strings.HasPrefix(base, "libc-") && strings.HasSuffix(base, ".so")) {
			continue
		}
		f, err := elf.Open(filepath.Join(root, m.path))
		if err != nil {
			return Absent
		}
		defer f.Close()
		syms, err := f.DynamicSymbols()
		if err != nil {
			return Absent
		}
		for _, s := range syms {
			if s.Name != "_thread_db_pthread_tid" || s.Size != 12 {
				continue
			}
			for _, prog := range f.Progs {
				if prog.Type != elf.PT_LOAD || s.Value < prog.Vaddr || s.Value+12 > prog.Vaddr+prog.Filesz {
					continue
				}
				var desc [12]byte
				if _, err := prog.ReadAt(desc[:], int64(s.Value-prog.Vaddr)); err != nil {
					return Absent
				}
				bits, count, off := binary.LittleEndian.Uint32(desc[:]), binary.LittleEndian.Uint32(desc[4:]), binary.LittleEndian.Uint32(desc[8:])
				if bits != 32 || count != 1 || off > 4096 {
					return Absent
				}
				return uint64(off)
			}
		}
		return Absent
	}
	return Absent
}
