package cpython

import (
	"errors"
	"fmt"
	"slices"
)

// MaxThreads bounds a walk of an interpreter's thread states: a list
// longer than this (or a loop, read while the list changed) is an error.
const MaxThreads = 4096

// Thread is a thread state (PyThreadState) as read at one moment.
type Thread struct {
	TState uint64 // its address
	Interp uint64 // its interpreter's (PyInterpreterState)
	// NativeTID is its thread's kernel tid; 0 when unknown (3.10 with a
	// libc that does not publish where its struct pthread keeps it).
	NativeTID int
	ThreadID  uint64 // pthread_self() of its thread (threading.get_ident())
	// Frame is its innermost frame (a _PyInterpreterFrame from 3.11, a
	// PyFrameObject in 3.10); 0 when it runs no Python code.
	Frame uint64
	// Context is the contextvars.Context it has entered (while an asyncio
	// task's step or a handle runs, the task's or the handle's); 0 when
	// none. ContextVer changes with each enter and exit.
	Context, ContextVer uint64

	prev uint64 // the thread state before it in the list
}

// MaxInterpreters bounds a walk of the process's interpreters.
const MaxInterpreters = 256

// interpreters reads the list of the process's interpreters, newest
// first (the main one last).
func (p *Process) interpreters() ([]uint64, error) {
	var interps []uint64
	interp, err := p.mem.u64(p.Runtime + p.Layout.RuntimeInterpretersHead)
	for ; err == nil && interp != 0; interp, err = p.mem.u64(interp + p.Layout.InterpNext) {
		if len(interps) == MaxInterpreters || slices.Contains(interps, interp) {
			return nil, fmt.Errorf("the list of interpreters: %w", errListChanged)
		}
		interps = append(interps, interp)
	}
	if err != nil {
		return nil, fmt.Errorf("the list of interpreters: %w", err)
	}
	return interps, nil
}

// Threads reads the thread states of every interpreter of the process,
// newest first, the main interpreter's last. A list that changes while
// it is read (a thread starts or ends) is read again, a few times.
func (p *Process) Threads() (threads []Thread, err error) {
	for range 4 {
		if threads, err = p.readThreads(); !errors.Is(err, errListChanged) {
			break
		}
	}
	return threads, err
}

// errListChanged says a list changed while it was read, or loops.
var errListChanged = errors.New("changed while read, or loops")

func (p *Process) readThreads() ([]Thread, error) {
	interps, err := p.interpreters()
	if err != nil {
		return nil, err
	}
	var threads []Thread
	for _, interp := range interps {
		ts, err := p.threadsOf(interp)
		if err != nil {
			return nil, err
		}
		threads = append(threads, ts...)
	}
	return threads, nil
}

// threadsOf reads the thread states of the interpreter at interp.
func (p *Process) threadsOf(interp uint64) ([]Thread, error) {
	first, err := p.mem.u64(interp + p.Layout.InterpThreadsHead)
	if err != nil {
		return nil, fmt.Errorf("interpreter %#x's threads: %w", interp, err)
	}
	var threads []Thread
	seen := map[uint64]bool{}
	for tstate, prev := first, uint64(0); tstate != 0; {
		if seen[tstate] || len(threads) == MaxThreads {
			return nil, fmt.Errorf("interpreter %#x's thread list: %w", interp, errListChanged)
		}
		seen[tstate] = true
		t, next, err := p.thread(tstate, interp)
		if err != nil {
			return nil, err
		}
		if t.prev != prev {
			return nil, fmt.Errorf("thread state %#x: its prev is %#x, not %#x: %w", tstate, t.prev, prev, errListChanged)
		}
		threads = append(threads, t)
		tstate, prev = next, tstate
	}
	return threads, nil
}

// ThreadOf is the thread state of the thread whose kernel tid is tid:
// the walk a BPF program does (interp->threads.head, then next, until
// native_thread_id matches). ok is false when no thread state has it.
func (p *Process) ThreadOf(tid int) (t Thread, ok bool, err error) {
	threads, err := p.Threads()
	if err != nil {
		return Thread{}, false, err
	}
	for _, t := range threads {
		if t.NativeTID == tid {
			return t, true, nil
		}
	}
	return Thread{}, false, nil
}

// tstateSpan is the span of a thread state read at once: every field
// this package reads of it.
func (l *Layout) tstateSpan() (base, size uint64) {
	return spanOf(l.TstatePrev, l.TstateNext, l.TstateInterp, l.TstateThreadID, l.TstateNativeThreadID,
		l.TstateFrame, l.TstateCframe, l.TstateContext, l.TstateContextVer)
}

// thread reads the thread state at tstate, of the interpreter at
// interp, and the next one's address.
func (p *Process) thread(tstate, interp uint64) (Thread, uint64, error) {
	l := p.Layout
	base, size := l.tstateSpan()
	s, err := p.mem.readSpan(tstate, base, size)
	if err != nil {
		return Thread{}, 0, fmt.Errorf("thread state %#x: %w", tstate, err)
	}
	if back := s.u64(l.TstateInterp); back != interp {
		return Thread{}, 0, fmt.Errorf("thread state %#x belongs to interpreter %#x, not %#x", tstate, back, interp)
	}
	t := Thread{
		TState:     tstate,
		Interp:     interp,
		ThreadID:   s.u64(l.TstateThreadID),
		Context:    s.u64(l.TstateContext),
		ContextVer: s.u64(l.TstateContextVer),
		prev:       s.u64(l.TstatePrev),
	}
	if l.TstateNativeThreadID != Absent {
		t.NativeTID = int(int32(s.u64(l.TstateNativeThreadID)))
	} else if p.PthreadTID != Absent && t.ThreadID != 0 {
		tid, err := p.mem.u32(t.ThreadID + p.PthreadTID)
		if err != nil {
			return Thread{}, 0, fmt.Errorf("thread state %#x: its pthread's tid: %w", tstate, err)
		}
		t.NativeTID = int(int32(tid))
	}
	if l.TstateFrame != Absent {
		t.Frame = s.u64(l.TstateFrame)
	} else if cframe := s.u64(l.TstateCframe); cframe != 0 {
		if t.Frame, err = p.mem.u64(cframe + l.CframeCurrentFrame); err != nil {
			return Thread{}, 0, fmt.Errorf("thread state %#x: its C frame: %w", tstate, err)
		}
	}
	return t, s.u64(l.TstateNext), nil
}

// Context reads the context the thread state at tstate has entered
// (0: none) and its version: one read, as the programs will, the two
// fields being next to each other.
func (p *Process) Context(tstate uint64) (context, version uint64, err error) {
	l := p.Layout
	base, size := spanOf(l.TstateContext, l.TstateContextVer)
	s, err := p.mem.readSpan(tstate, base, size)
	if err != nil {
		return 0, 0, fmt.Errorf("thread state %#x's context: %w", tstate, err)
	}
	return s.u64(l.TstateContext), s.u64(l.TstateContextVer), nil
}

// GILState reads the first interpreter's GIL: whether it is held, and
// the last thread state to take it (the holder while it is held).
func (p *Process) GILState() (locked bool, lastHolder uint64, err error) {
	l := p.Layout
	base, size := spanOf(l.GILLastHolder, l.GILLocked)
	s, err := p.mem.readSpan(p.GIL, base, size)
	if err != nil {
		return false, 0, fmt.Errorf("the GIL: %w", err)
	}
	return s.u32(l.GILLocked) != 0, s.u64(l.GILLastHolder), nil
}

// GILHolder is the thread state that holds the first interpreter's GIL,
// 0 while none does: 3.10's and 3.11's gilstate.tstate_current, from
// 3.12 the GIL's last holder while it is locked.
func (p *Process) GILHolder() (uint64, error) {
	if p.TstateCurrent != 0 {
		return p.mem.u64(p.TstateCurrent)
	}
	locked, holder, err := p.GILState()
	if err != nil || !locked {
		return 0, err
	}
	return holder, nil
}

// GenFrame is the frame of the generator or coroutine at gen: 3.10's
// gi_frame (NULL once it finished), from 3.11 the frame in the object.
func (p *Process) GenFrame(gen uint64) (uint64, error) {
	if p.Layout.GenIFrame != Absent {
		return gen + p.Layout.GenIFrame, nil
	}
	return p.mem.u64(gen + p.Layout.GenFrame)
}

// MaxFrames bounds a walk of a thread's frames.
const MaxFrames = 1024

// Owner says who owns a frame (3.11+; in 3.10 a frame is a generator's
// or coroutine's when its f_gen is set, else a thread's).
type Owner int

const (
	OwnedByThread      Owner = iota // a function's, on its thread's stack
	OwnedByGenerator                // a generator's or coroutine's
	OwnedByFrameObject              // a frame object's (the function returned; the frame outlives it)
	OwnedByCStack                   // an entry frame of the evaluation loop (3.12+), no function's
)

func (o Owner) String() string {
	return [...]string{"thread", "generator", "frame object", "C stack"}[o]
}

// Frame is one of a thread's frames as read at one moment.
type Frame struct {
	Addr  uint64 // the frame (_PyInterpreterFrame from 3.11, PyFrameObject in 3.10)
	Code  uint64 // its code object
	Owner Owner
	// Gen is the generator or coroutine running the frame; 0 when it is
	// a function's.
	Gen uint64
	// Instr is where the frame is in its code: 3.10's f_lasti (an index
	// in code units), from 3.11 a pointer into co_code_adaptive. Offset
	// (of Code) turns it into a byte offset.
	Instr uint64
}

// frameSpan is the span of a frame read at once: its link, code,
// instruction and owner (or, in 3.10, its generator). The programs read
// it the same way: one read a frame.
func (l *Layout) frameSpan() (base, size uint64) {
	return spanOf(l.FramePrevious, l.FrameCode, l.FrameInstr, l.FrameOwner, l.FrameGen)
}

// Frames reads the frames of t from its innermost outwards (at most
// MaxFrames), leaving out the entry frames of the C stack (3.12+),
// which are no Python function's.
func (p *Process) Frames(t Thread) ([]Frame, error) {
	return p.frames(t, false)
}

// frames is Frames, with the C stack's entry frames when withCStack.
func (p *Process) frames(t Thread, withCStack bool) ([]Frame, error) {
	var frames []Frame
	l := p.Layout
	base, size := l.frameSpan()
	for addr, n := t.Frame, 0; addr != 0; n++ {
		if n == MaxFrames {
			return nil, fmt.Errorf("more than %d frames (or a loop)", MaxFrames)
		}
		s, err := p.mem.readSpan(addr, base, size)
		if err != nil {
			return nil, fmt.Errorf("frame %#x: %w", addr, err)
		}
		f := Frame{Addr: addr, Code: s.u64(l.FrameCode), Instr: s.u64(l.FrameInstr)}
		if l.FrameOwner != Absent {
			owner := uint64(s.u8(l.FrameOwner))
			switch owner {
			case l.OwnerThread:
				f.Owner = OwnedByThread
			case l.OwnerGenerator:
				f.Owner = OwnedByGenerator
				f.Gen = addr - l.GenIFrame
			case l.OwnerFrameObject:
				f.Owner = OwnedByFrameObject
			case l.OwnerCStack:
				f.Owner = OwnedByCStack
			default:
				return nil, fmt.Errorf("frame %#x: owner %d is none known", addr, owner)
			}
		} else {
			f.Instr = uint64(int64(int32(f.Instr))) // f_lasti, an int
			if f.Gen = s.u64(l.FrameGen); f.Gen != 0 {
				f.Owner = OwnedByGenerator
			}
		}
		if f.Owner != OwnedByCStack || withCStack {
			frames = append(frames, f)
		}
		addr = s.u64(l.FramePrevious)
	}
	return frames, nil
}
