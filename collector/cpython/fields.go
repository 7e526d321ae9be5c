package cpython

import (
	"fmt"
	"strings"
)

// fieldSpec says where to find one of Layout's fields: in the DWARF of
// each release that has it, and in 3.13's _Py_DebugOffsets where it is
// published there.
type fieldSpec struct {
	name string
	// dwarf is the query per minor release (3.N: N), absent from releases
	// without one:
	//   "T.a.b"        the offset of member a.b in type T (struct tag or typedef)
	//   "sizeof T"     T's size
	//   "enum NAME"    an enumeration constant's value
	//   "bit T.a.b"    bitfield b's position within a (bit 0: a's least significant)
	dwarf map[int]string
	// debug is the field's value in _Py_DebugOffsets; nil when not there.
	debug func(*debugOffsets) uint64
}

// from gives query for every known release from minor 3.N on.
func from(minor int, query string) map[int]string {
	m := map[int]string{}
	for n := minor; n <= LastRelease.Minor; n++ {
		m[n] = query
	}
	return m
}

// all gives query for every known release.
func all(query string) map[int]string { return from(FirstRelease.Minor, query) }

// only gives query for the releases listed.
func only(query string, minors ...int) map[int]string {
	m := map[int]string{}
	for _, n := range minors {
		m[n] = query
	}
	return m
}

// merge joins per-release queries.
func merge(ms ...map[int]string) map[int]string {
	out := map[int]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// fieldSpecs are Layout's fields, in its order.
var fieldSpecs = []fieldSpec{
	{"RuntimeInterpretersHead", all("pyruntimestate.interpreters.head"), func(d *debugOffsets) uint64 { return d.RuntimeState.InterpretersHead }},
	{"RuntimeInterpretersMain", all("pyruntimestate.interpreters.main"), nil},
	{"RuntimeStateSize", all("sizeof pyruntimestate"), func(d *debugOffsets) uint64 { return d.RuntimeState.Size }},
	{"RuntimeTstateCurrent", only("pyruntimestate.gilstate.tstate_current", 10, 11), nil},
	{"RuntimeGIL", only("pyruntimestate.ceval.gil", 10, 11), nil},

	{"InterpNext", all("_is.next"), func(d *debugOffsets) uint64 { return d.InterpreterState.Next }},
	{"InterpThreadsHead", merge(only("_is.tstate_head", 10), from(11, "_is.threads.head")), func(d *debugOffsets) uint64 { return d.InterpreterState.ThreadsHead }},
	{"InterpCevalGIL", from(12, "_is.ceval.gil"), func(d *debugOffsets) uint64 { return d.InterpreterState.CevalGIL }},
	{"InterpGIL", from(12, "_is._gil"), func(d *debugOffsets) uint64 { return d.InterpreterState.GILRuntimeState }},

	{"GILLastHolder", all("_gil_runtime_state.last_holder"), func(d *debugOffsets) uint64 {
		return d.InterpreterState.GILRuntimeStateHolder - d.InterpreterState.GILRuntimeState
	}},
	{"GILLocked", all("_gil_runtime_state.locked"), func(d *debugOffsets) uint64 {
		return d.InterpreterState.GILRuntimeStateLocked - d.InterpreterState.GILRuntimeState
	}},

	{"TstatePrev", all("_ts.prev"), func(d *debugOffsets) uint64 { return d.ThreadState.Prev }},
	{"TstateNext", all("_ts.next"), func(d *debugOffsets) uint64 { return d.ThreadState.Next }},
	{"TstateInterp", all("_ts.interp"), func(d *debugOffsets) uint64 { return d.ThreadState.Interp }},
	{"TstateThreadID", all("_ts.thread_id"), func(d *debugOffsets) uint64 { return d.ThreadState.ThreadID }},
	{"TstateNativeThreadID", from(11, "_ts.native_thread_id"), func(d *debugOffsets) uint64 { return d.ThreadState.NativeThreadID }},
	{"TstateFrame", merge(only("_ts.frame", 10), from(13, "_ts.current_frame")), func(d *debugOffsets) uint64 { return d.ThreadState.CurrentFrame }},
	{"TstateCframe", only("_ts.cframe", 11, 12), nil},
	{"CframeCurrentFrame", only("_PyCFrame.current_frame", 11, 12), nil},
	{"TstateContext", all("_ts.context"), nil},
	{"TstateContextVer", all("_ts.context_ver"), nil},

	{"FramePrevious", merge(only("_frame.f_back", 10), from(11, "_PyInterpreterFrame.previous")), func(d *debugOffsets) uint64 { return d.InterpreterFrame.Previous }},
	{"FrameCode", merge(only("_frame.f_code", 10), only("_PyInterpreterFrame.f_code", 11, 12), from(13, "_PyInterpreterFrame.f_executable")), func(d *debugOffsets) uint64 { return d.InterpreterFrame.Executable }},
	{"FrameInstr", merge(only("_frame.f_lasti", 10), only("_PyInterpreterFrame.prev_instr", 11, 12), from(13, "_PyInterpreterFrame.instr_ptr")), func(d *debugOffsets) uint64 { return d.InterpreterFrame.InstrPtr }},
	{"FrameGen", only("_frame.f_gen", 10), nil},
	{"FrameOwner", from(11, "_PyInterpreterFrame.owner"), func(d *debugOffsets) uint64 { return d.InterpreterFrame.Owner }},
	{"FrameIsEntry", only("_PyInterpreterFrame.is_entry", 11), nil},
	{"OwnerThread", from(11, "enum FRAME_OWNED_BY_THREAD"), nil},
	{"OwnerGenerator", from(11, "enum FRAME_OWNED_BY_GENERATOR"), nil},
	{"OwnerFrameObject", from(11, "enum FRAME_OWNED_BY_FRAME_OBJECT"), nil},
	{"OwnerCStack", from(12, "enum FRAME_OWNED_BY_CSTACK"), nil},

	{"CodeFilename", all("PyCodeObject.co_filename"), func(d *debugOffsets) uint64 { return d.CodeObject.Filename }},
	{"CodeName", all("PyCodeObject.co_name"), func(d *debugOffsets) uint64 { return d.CodeObject.Name }},
	{"CodeQualname", from(11, "PyCodeObject.co_qualname"), func(d *debugOffsets) uint64 { return d.CodeObject.Qualname }},
	{"CodeFirstLineno", all("PyCodeObject.co_firstlineno"), func(d *debugOffsets) uint64 { return d.CodeObject.Firstlineno }},
	{"CodeLinetable", all("PyCodeObject.co_linetable"), func(d *debugOffsets) uint64 { return d.CodeObject.Linetable }},
	{"CodeCodeAdaptive", from(11, "PyCodeObject.co_code_adaptive"), func(d *debugOffsets) uint64 { return d.CodeObject.CoCodeAdaptive }},

	{"ObjectType", all("_object.ob_type"), func(d *debugOffsets) uint64 { return d.PyObject.ObType }},
	{"VarObjectSize", all("PyVarObject.ob_size"), func(d *debugOffsets) uint64 { return d.BytesObject.ObSize }},
	{"TypeName", all("_typeobject.tp_name"), func(d *debugOffsets) uint64 { return d.TypeObject.TpName }},
	{"BytesData", all("PyBytesObject.ob_sval"), func(d *debugOffsets) uint64 { return d.BytesObject.ObSval }},

	{"UnicodeLength", all("PyASCIIObject.length"), func(d *debugOffsets) uint64 { return d.UnicodeObject.Length }},
	{"UnicodeState", all("PyASCIIObject.state"), func(d *debugOffsets) uint64 { return d.UnicodeObject.State }},
	{"UnicodeKindShift", all("bit PyASCIIObject.state.kind"), nil},
	{"UnicodeCompactBit", all("bit PyASCIIObject.state.compact"), nil},
	{"UnicodeASCIIBit", all("bit PyASCIIObject.state.ascii"), nil},
	{"ASCIIObjectSize", all("sizeof PyASCIIObject"), func(d *debugOffsets) uint64 { return d.UnicodeObject.ASCIIObjectSize }},
	{"CompactUnicodeObjectSize", all("sizeof PyCompactUnicodeObject"), nil},

	{"GenFrame", only("PyGenObject.gi_frame", 10), nil},
	{"GenIFrame", from(11, "PyGenObject.gi_iframe"), nil},
}

// resolve answers a field's DWARF query. The debug information is the
// target's: malformed, it gives an error, never a panic.
func (ix *dwarfIndex) resolve(query string) (v uint64, err error) {
	defer func() {
		if recover() != nil {
			v, err = 0, fmt.Errorf("%s: malformed debug information", query)
		}
	}()
	switch {
	case strings.HasPrefix(query, "sizeof "):
		return ix.sizeOf(strings.TrimPrefix(query, "sizeof "))
	case strings.HasPrefix(query, "enum "):
		return ix.enumerator(strings.TrimPrefix(query, "enum "))
	case strings.HasPrefix(query, "bit "):
		typ, path, _ := strings.Cut(strings.TrimPrefix(query, "bit "), ".")
		i := strings.LastIndex(path, ".")
		if i < 0 {
			return 0, fmt.Errorf("bad query %q", query)
		}
		parent := path[:i]
		bit, _, err := ix.member(typ, path)
		if err != nil {
			return 0, err
		}
		start, err := ix.offsetOf(typ, parent)
		if err != nil {
			return 0, err
		}
		return bit - start*8, nil
	}
	typ, path, ok := strings.Cut(query, ".")
	if !ok {
		return 0, fmt.Errorf("bad query %q", query)
	}
	return ix.offsetOf(typ, path)
}
