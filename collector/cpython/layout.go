package cpython

import (
	"fmt"
	"reflect"
	"strings"
)

// Absent is the value of a Layout field that the release does not have
// (PyThreadState's native_thread_id before 3.11, the GIL's holder in
// _PyRuntimeState after 3.11...).
const Absent = ^uint64(0)

// Layout is where a release's structures keep what this package (and
// the collector's programs) read: byte offsets within a structure,
// unless said otherwise. A field the release lacks is Absent.
type Layout struct {
	Release Release

	// _PyRuntimeState: the list of interpreters (newest first, linked by
	// InterpNext), the main interpreter; in 3.10 and 3.11 the thread
	// state holding the GIL (gilstate.tstate_current, NULL while none
	// does) and the GIL itself (ceval.gil, a struct _gil_runtime_state).
	RuntimeInterpretersHead uint64
	RuntimeInterpretersMain uint64
	// RuntimeStateSize is the size of _PyRuntimeState, which holds the
	// main interpreter (3.11+) and its first thread state: checked
	// against the size of _PyRuntime's symbol, it tells a build whose
	// structures differ from the layout's.
	RuntimeStateSize     uint64
	RuntimeTstateCurrent uint64
	RuntimeGIL           uint64

	// PyInterpreterState: the next interpreter, its first thread state
	// (newest first); in 3.12 and 3.13 the GIL it uses (ceval.gil, a
	// pointer) and its own (_gil, the main interpreter's).
	InterpNext        uint64
	InterpThreadsHead uint64
	InterpCevalGIL    uint64
	InterpGIL         uint64

	// struct _gil_runtime_state: the last thread state to take the GIL,
	// and whether it is held (an int).
	GILLastHolder uint64
	GILLocked     uint64

	// PyThreadState: the list's links, its interpreter, its thread's
	// pthread_t (thread_id) and, from 3.11, kernel tid (native_thread_id,
	// a 64-bit unsigned long). Its innermost frame is at TstateFrame in
	// 3.10 (frame, a PyFrameObject*) and 3.13 (current_frame, a
	// _PyInterpreterFrame*); in 3.11 and 3.12 it is in its C frame
	// (cframe->current_frame). context is the contextvars.Context entered
	// (the running asyncio task's while a task step runs), context_ver
	// a counter bumped at each change of it.
	TstatePrev           uint64
	TstateNext           uint64
	TstateInterp         uint64
	TstateThreadID       uint64
	TstateNativeThreadID uint64
	TstateFrame          uint64
	TstateCframe         uint64
	CframeCurrentFrame   uint64
	TstateContext        uint64
	TstateContextVer     uint64

	// A frame: PyFrameObject in 3.10, _PyInterpreterFrame from 3.11. Its
	// caller's (or, for a coroutine's, the frame that resumed it), its
	// code object (f_code; f_executable in 3.13), and where it is in its
	// code: 3.10's f_lasti (an int: the index of the last instruction, in
	// 2-byte code units, -1 before the first), 3.11's and 3.12's
	// prev_instr, 3.13's instr_ptr (pointers into the code object's
	// co_code_adaptive). 3.10: f_gen, the generator or coroutine running
	// the frame (NULL for a function's). From 3.11: owner, a byte, whose
	// values say who owns the frame: a thread's stack, a generator or
	// coroutine (the frame lies in it, at GenIFrame), a frame object, or
	// (3.12+) the C stack (an entry frame of the evaluation loop, no
	// Python function's). 3.11: is_entry, a bool, set on the first frame
	// an invocation of the evaluation loop runs (3.12 marks it with an
	// entry frame of the C stack instead).
	FramePrevious    uint64
	FrameCode        uint64
	FrameInstr       uint64
	FrameGen         uint64
	FrameOwner       uint64
	FrameIsEntry     uint64
	OwnerThread      uint64
	OwnerGenerator   uint64
	OwnerFrameObject uint64
	OwnerCStack      uint64

	// PyCodeObject: its names (str), first line (an int), line table
	// (bytes) and, from 3.11, its instructions (co_code_adaptive, in the
	// object), which a frame's instruction pointer points into. (3.10's
	// frames count instructions from 0: co_code is not read.)
	CodeFilename     uint64
	CodeName         uint64
	CodeQualname     uint64
	CodeFirstLineno  uint64
	CodeLinetable    uint64
	CodeCodeAdaptive uint64

	// PyObject's type, PyVarObject's size, PyTypeObject's tp_name (a
	// char*), PyBytesObject's bytes.
	ObjectType    uint64
	VarObjectSize uint64
	TypeName      uint64
	BytesData     uint64

	// str (PyASCIIObject and PyCompactUnicodeObject): its length in code
	// points, its state bits (an unsigned int: kind, 3 bits, is 1, 2 or 4
	// bytes a code point; compact: the characters follow the header;
	// ascii: that header is PyASCIIObject's, else
	// PyCompactUnicodeObject's), as bit positions in it.
	UnicodeLength            uint64
	UnicodeState             uint64
	UnicodeKindShift         uint64
	UnicodeCompactBit        uint64
	UnicodeASCIIBit          uint64
	ASCIIObjectSize          uint64
	CompactUnicodeObjectSize uint64

	// A generator's or coroutine's frame: 3.10's gi_frame (a
	// PyFrameObject*), from 3.11 gi_iframe, the _PyInterpreterFrame
	// embedded in the object.
	GenFrame  uint64
	GenIFrame uint64

	// sources says where each field was found, by its name.
	sources map[string]Source
}

// Source is where a field's offset was found.
type Source int

const (
	SourceNone         Source = iota // absent from the release
	SourceDebugOffsets               // the interpreter's _Py_DebugOffsets (3.13+)
	SourceDWARF                      // the binary's debug information
	SourceTable                      // this package's table for the release
)

func (s Source) String() string {
	return [...]string{"absent", "_Py_DebugOffsets", "DWARF", "table"}[s]
}

// Field is one of a Layout's fields: its name, value and source.
type Field struct {
	Name   string
	Value  uint64
	Source Source
}

// Fields lists l's fields in order (but Release).
func (l *Layout) Fields() []Field {
	var fields []Field
	v := reflect.ValueOf(l).Elem()
	for _, spec := range fieldSpecs {
		fields = append(fields, Field{spec.name, v.FieldByName(spec.name).Uint(), l.sources[spec.name]})
	}
	return fields
}

// Sources says how many fields came from each source, e.g.
// "_Py_DebugOffsets 31, DWARF 9, absent 8".
func (l *Layout) Sources() string {
	counts := map[Source]int{}
	for _, s := range l.sources {
		counts[s]++
	}
	var parts []string
	for _, s := range []Source{SourceDebugOffsets, SourceDWARF, SourceTable, SourceNone} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, counts[s]))
		}
	}
	return strings.Join(parts, ", ")
}

// Source is where field name's value came from.
func (l *Layout) Source(name string) Source { return l.sources[name] }

// set sets field name to v, found in src.
func (l *Layout) set(name string, v uint64, src Source) {
	reflect.ValueOf(l).Elem().FieldByName(name).SetUint(v)
	if l.sources == nil {
		l.sources = map[string]Source{}
	}
	l.sources[name] = src
}

// get is field name's value.
func (l *Layout) get(name string) uint64 {
	return reflect.ValueOf(l).Elem().FieldByName(name).Uint()
}
