package collector

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"github.com/reqprof/reqprof/collector/cpython"
	"github.com/reqprof/reqprof/collector/php"
	"github.com/reqprof/reqprof/profile"
)

// Interpreter frames (bpf/interp.h): for a target's process whose
// interpreter reqprof knows, the sampling program sends the frames of the
// interpreted code with each sample, as the code each runs and where in
// it. The collector names them here, by reading the process's memory with
// its interpreter's layout (collector/cpython, collector/php), and puts
// them in the native stack where the interpreter's loop runs them
// (splice).

// interpReader names the frames of one process's interpreter.
type interpReader interface {
	// frame names the frame that runs code at instr.
	frame(code, instr uint64) (profile.Frame, error)
	// evalLoop says a native frame is an invocation of the interpreter's
	// loop, which runs a run of its frames.
	evalLoop(f profile.Frame) bool
	// frameEachRun says each frame is a run of its own (CPython 3.10, one
	// C frame of the loop a Python frame).
	frameEachRun() bool
	// module is the Module of its frames (profile.PythonModule...).
	module() string
	close() error
}

// layoutMap is where the programs find each process's interpreter layout
// (interp_layouts).
type layoutMap interface {
	Update(key, value any, flags ebpf.MapUpdateFlags) error
}

// interpreters are the interpreters of the processes samples came from,
// each looked for once.
type interpreters struct {
	layouts layoutMap // nil: the programs are not told (tests)
	procs   map[int]*interpProc
	// open finds and opens pid's interpreter: errNoInterpreter when it
	// runs none known by kind; openInterpreter but in tests.
	open  func(pid int) (interpReader, reqprofInterpLayout, error)
	notes []interpNote
}

type interpNote struct {
	pid  int
	text string
}

// interpProc is one process's interpreter, nil reader when none is read.
type interpProc struct {
	reader interpReader
	memo   map[[2]uint64]memoFrame
	// retryAt is when to look for its interpreter again, for a process
	// whose interpreter runs no code yet (zero: never).
	retryAt time.Time
}

// interpRetryInterval is how soon a process whose interpreter runs no code
// yet is looked at again.
const interpRetryInterval = time.Second

// memoFrame is a frame as named at a time: kept for memoTTL, so that the
// samples of one stretch of a process's life name each frame once (each
// naming reads the process's memory to check its code is still there).
type memoFrame struct {
	frame profile.Frame
	err   error
	at    time.Time
}

// Bounds on the memo of named frames: for how long a frame's name is
// taken without reading the process again, and how many are kept.
const (
	memoTTL       = 100 * time.Millisecond
	maxMemoFrames = 1 << 16
)

func newInterpreters(layouts layoutMap) *interpreters {
	return &interpreters{layouts: layouts, procs: map[int]*interpProc{}, open: openInterpreter}
}

// errNoInterpreter says a process runs no interpreter whose frames are
// read; errNotRunningYet that its interpreter runs no code yet, and is to
// be looked at again.
var (
	errNoInterpreter = errors.New("no interpreter known")
	errNotRunningYet = errors.New("the interpreter runs no code yet")
)

// openInterpreter finds pid's interpreter and the programs' layout for it.
// A process that runs none gives errNoInterpreter; one that maps a file
// named as an interpreter's that cannot be read as one (Python 2.7, which
// has no _PyRuntime) gives why, to be noted.
func openInterpreter(pid int) (interpReader, reqprofInterpLayout, error) {
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/maps", pid)); err != nil {
		return nil, reqprofInterpLayout{}, errNoInterpreter // gone: the symbolizer says so
	}
	p, err := php.Open(pid)
	switch {
	case err == nil:
		return phpReader{p}, phpLayout(p), nil
	case errors.Is(err, php.ErrNoRequestYet):
		return nil, reqprofInterpLayout{}, errNotRunningYet
	case err != php.ErrNotPHP:
		return nil, reqprofInterpLayout{}, err
	}
	py, err := cpython.Open(pid)
	switch {
	case err == nil:
		return pythonReader{py}, pythonInterpLayout(py), nil
	case err != cpython.ErrNotPython:
		return nil, reqprofInterpLayout{}, err
	}
	return nil, reqprofInterpLayout{}, errNoInterpreter
}

// add looks for pid's interpreter, once, and gives the programs its
// layout; what stops its frames being read is noted.
func (ip *interpreters) add(pid int) *interpProc {
	p, ok := ip.procs[pid]
	if ok && (p.retryAt.IsZero() || time.Now().Before(p.retryAt)) {
		return p
	}
	p = &interpProc{}
	ip.procs[pid] = p
	reader, layout, err := ip.open(pid)
	switch {
	case errors.Is(err, errNoInterpreter):
		return p
	case errors.Is(err, errNotRunningYet):
		p.retryAt = time.Now().Add(interpRetryInterval)
		return p
	case err != nil:
		ip.note(pid, "process %d: %v: its interpreter's frames are its own C functions", pid, err)
		return p
	}
	if ip.layouts != nil {
		if err := ip.layouts.Update(uint32(pid), &layout, ebpf.UpdateAny); err != nil {
			ip.note(pid, "process %d: its interpreter's layout could not be given to the programs (%v): its frames are its own C functions", pid, err)
			reader.close()
			return p
		}
	}
	p.reader, p.memo = reader, map[[2]uint64]memoFrame{}
	return p
}

func (ip *interpreters) note(pid int, format string, args ...any) {
	ip.notes = append(ip.notes, interpNote{pid: pid, text: fmt.Sprintf(format, args...)})
}

// close lets go of every process's memory.
func (ip *interpreters) close() {
	for _, p := range ip.procs {
		if p.reader != nil {
			p.reader.close()
		}
	}
}

// interpStack is a sample's interpreter frames, named: innermost first,
// whether each ends a run of the interpreter's loop, and whether the
// outermost were left out.
type interpStack struct {
	frames    []profile.Frame
	runEnds   []bool
	truncated bool
	module    string
	evalLoop  func(profile.Frame) bool
}

// stack names d's interpreter frames; none when its process's interpreter
// is not read.
func (ip *interpreters) stack(d *decodedSample) interpStack {
	p := ip.add(int(d.tgid))
	if p.reader == nil || len(d.interp) == 0 {
		return interpStack{}
	}
	n := len(d.interp) / 2
	st := interpStack{frames: make([]profile.Frame, n), runEnds: make([]bool, n),
		truncated: d.has(reqprofSampleFlagsSAMPLE_INTERP_TRUNCATED), module: p.reader.module(), evalLoop: p.reader.evalLoop}
	now := time.Now()
	for i := range n {
		code, instr := d.interp[2*i], d.interp[2*i+1]
		st.frames[i] = p.frame(code, instr, now)
		st.runEnds[i] = p.reader.frameEachRun() || d.interpEntries&(1<<i) != 0
	}
	return st
}

// frame names the frame that runs code at instr; one that cannot be read
// is named by where its code is, in the interpreter's module.
func (p *interpProc) frame(code, instr uint64, now time.Time) profile.Frame {
	key := [2]uint64{code, instr}
	m, ok := p.memo[key]
	if !ok || now.Sub(m.at) > memoTTL {
		if len(p.memo) >= maxMemoFrames {
			clear(p.memo)
		}
		m.frame, m.err = p.reader.frame(code, instr)
		m.at = now
		p.memo[key] = m
	}
	if m.err != nil {
		return profile.Frame{Module: p.reader.module(), Address: code}
	}
	return m.frame
}

// splice puts a sample's interpreter frames in its native frames (kernel
// frames, nKernel of them, then user frames), in place of the invocations
// of the interpreter's loop that run them: the i-th invocation from the
// innermost runs the i-th run of interpreter frames, a run ending at a
// frame that ends one (an entry frame). Native frames below and above are
// kept. Where the walk of the native stack found fewer invocations than
// there are runs, it went astray (the interpreter has no frame pointers)
// past the last it found: its frames past there are dropped (past the
// innermost user frame, when it found none), and the runs left follow.
func splice(native []profile.Frame, nKernel int, interp interpStack) []profile.Frame {
	if len(interp.frames) == 0 {
		return native
	}
	frames := interp.frames
	var runs [][]profile.Frame
	start := 0
	for i := range frames {
		if interp.runEnds[i] || i == len(frames)-1 {
			runs = append(runs, frames[start:i+1:i+1])
			start = i + 1
		}
	}
	if interp.truncated {
		// The outermost run goes on past what was read.
		last := len(runs) - 1
		runs[last] = append(runs[last], profile.Frame{Function: fmt.Sprintf("(frames past the %d read)", len(frames)), Module: interp.module})
	}
	out := make([]profile.Frame, 0, len(native)+len(frames)+1)
	out = append(out, native[:nKernel]...)
	user := native[nKernel:]
	next := 0
	keep := len(out) + min(len(user), 1) // where a walk astray is cut
	for _, f := range user {
		if next < len(runs) && interp.evalLoop(f) {
			out = append(out, runs[next]...)
			next++
			keep = len(out)
			continue
		}
		out = append(out, f)
	}
	if next < len(runs) {
		out = out[:keep]
		for _, run := range runs[next:] {
			out = append(out, run...)
		}
	}
	return out
}

// pythonReader names a CPython process's frames.
type pythonReader struct{ p *cpython.Process }

func (r pythonReader) frame(code, instr uint64) (profile.Frame, error) {
	if r.p.Release.Minor == 10 {
		instr = uint64(int64(int32(instr))) // f_lasti, an int
	}
	loc, err := r.p.Locate(cpython.Frame{Code: code, Instr: instr})
	if err != nil {
		return profile.Frame{}, err
	}
	name := loc.Qualname
	if name == "" {
		name = loc.Name
	}
	return profile.Frame{
		Function: name, File: loc.Filename, Line: max(loc.Line, 0), FunctionLine: loc.FirstLine,
		Module: profile.PythonModule, Address: code,
	}, nil
}

func (pythonReader) evalLoop(f profile.Frame) bool {
	return f.Function == "_PyEval_EvalFrameDefault" && !f.Interpreted()
}
func (r pythonReader) frameEachRun() bool { return r.p.Release.Minor == 10 }
func (pythonReader) module() string       { return profile.PythonModule }
func (r pythonReader) close() error       { return r.p.Close() }

// pythonInterpLayout is the programs' layout for CPython process p.
func pythonInterpLayout(p *cpython.Process) reqprofInterpLayout {
	l := p.Layout
	out := reqprofInterpLayout{
		Kind:           uint32(reqprofInterpKindINTERP_PYTHON),
		TstateThreadId: uint32(l.TstateThreadID),
		CframeFrame:    interpAbsent,
		FramePrevious:  uint32(l.FramePrevious),
		FrameCode:      uint32(l.FrameCode),
		FrameInstr:     uint32(l.FrameInstr),
		InstrBytes:     8,
		FrameEntry:     interpAbsent,
		FrameOwner:     interpAbsent,
	}
	if p.TstateCurrent != 0 {
		out.Head = p.TstateCurrent
	} else {
		out.Head, out.GilLocked = p.GIL+l.GILLastHolder, p.GIL+l.GILLocked
	}
	if l.TstateFrame != cpython.Absent {
		out.TstateFrame = uint32(l.TstateFrame)
	} else {
		out.TstateFrame, out.CframeFrame = uint32(l.TstateCframe), uint32(l.CframeCurrentFrame)
	}
	offsets := []uint64{l.FramePrevious, l.FrameCode, l.FrameInstr}
	switch {
	case p.Release.Minor == 10:
		out.InstrBytes = 4
	case l.FrameIsEntry != cpython.Absent: // 3.11
		out.FrameEntry, out.EntryMask = uint32(l.FrameIsEntry), 0xff
		offsets = append(offsets, l.FrameIsEntry)
	}
	if l.OwnerCStack != cpython.Absent && l.FrameOwner != cpython.Absent {
		out.FrameOwner, out.OwnerCstack = uint32(l.FrameOwner), uint32(l.OwnerCStack)
		offsets = append(offsets, l.FrameOwner)
	}
	base := slices.Min(offsets)
	out.FrameBase = uint32(base)
	out.FrameSpan = uint32(slices.Max(offsets) + 8 - base)
	return out
}

// phpReader names a PHP process's frames.
type phpReader struct{ p *php.Process }

func (r phpReader) frame(fn, opline uint64) (profile.Frame, error) {
	loc, err := r.p.Locate(fn, opline)
	if err != nil {
		return profile.Frame{}, err
	}
	return profile.Frame{
		Function: loc.QualifiedName(), File: loc.File, Line: loc.Line, FunctionLine: loc.StartLine,
		Module: profile.PHPModule, Address: fn,
	}, nil
}

// evalLoop: execute_ex runs PHP code; in the hybrid VM (the default) its
// handlers are labels inside it.
func (phpReader) evalLoop(f profile.Frame) bool {
	return f.Function == "execute_ex" && !f.Interpreted()
}
func (phpReader) frameEachRun() bool { return false }
func (phpReader) module() string     { return profile.PHPModule }
func (r phpReader) close() error     { return r.p.Close() }

// phpLayout is the programs' layout for PHP process p.
func phpLayout(p *php.Process) reqprofInterpLayout {
	l := p.Layout
	return reqprofInterpLayout{
		Kind:          uint32(reqprofInterpKindINTERP_PHP),
		FrameSpan:     uint32(max(l.ExecOpline, l.ExecFunc, l.ExecThisTypeInfo, l.ExecPrev) + 8),
		Head:          p.CurrentExecuteData,
		CframeFrame:   interpAbsent,
		FrameBase:     0,
		FramePrevious: uint32(l.ExecPrev),
		FrameCode:     uint32(l.ExecFunc),
		FrameInstr:    uint32(l.ExecOpline),
		InstrBytes:    8,
		FrameEntry:    uint32(l.ExecThisTypeInfo),
		EntryMask:     l.CallTop,
		FrameOwner:    interpAbsent,
	}
}

// interpAbsent is INTERP_ABSENT: an offset the release has not.
const interpAbsent = 0xffffffff
