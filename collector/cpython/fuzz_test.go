package cpython

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"
)

// Interpreters' binaries come from outside: no input may panic the
// reader, and an interpreter it finds has its _PyRuntime.
func FuzzReadInterpreter(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	if so, err := os.ReadFile("testdata/dwarf/structs.so"); err == nil {
		f.Add(so) // defines _PyRuntime
	}
	if python, err := os.ReadFile("/usr/bin/python3.11"); err == nil && len(python) > 4096 {
		f.Add(python[:4096])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		interp, err := readInterpreter(bytes.NewReader(b), 0x7f0000000000)
		if err == nil && (interp.Runtime == 0 || interp.Symbols["_PyRuntime"] != interp.Runtime) {
			t.Errorf("runtime %#x, symbols %v", interp.Runtime, interp.Symbols)
		}
	})
}

// Debug information comes from outside: no input may panic the DWARF
// reader, and a layout it gives has every field of the release.
func FuzzDWARFLayout(f *testing.F) {
	f.Add([]byte{})
	if so, err := os.ReadFile("testdata/dwarf/structs.so"); err == nil {
		f.Add(so)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, _, err := dwarfOfELF(bytes.NewReader(b))
		if err != nil || ix == nil {
			return
		}
		for minor := FirstRelease.Minor; minor <= LastRelease.Minor; minor++ {
			l, err := buildLayout(Release{3, minor}, nil, ix)
			if err != nil {
				continue
			}
			for _, field := range l.Fields() {
				if _, has := specNamed(field.Name).dwarf[minor]; has != (field.Value != Absent) {
					t.Errorf("3.%d %s: %d", minor, field.Name, field.Value)
				}
			}
		}
	})
}

// validDebugOffsets is a 3.13 _Py_DebugOffsets as the table says.
func validDebugOffsets() []byte {
	tab := tables[13]
	var d debugOffsets
	copy(d.Cookie[:], debugCookie)
	d.Version = 0x030d00f0
	d.RuntimeState.Size, d.RuntimeState.InterpretersHead = 283320, tab["RuntimeInterpretersHead"]
	is := &d.InterpreterState
	is.Size, is.Next, is.ThreadsHead, is.CevalGIL, is.GILRuntimeState = 100000, tab["InterpNext"], tab["InterpThreadsHead"], tab["InterpCevalGIL"], tab["InterpGIL"]
	is.GILRuntimeStateLocked, is.GILRuntimeStateHolder = tab["InterpGIL"]+tab["GILLocked"], tab["InterpGIL"]+tab["GILLastHolder"]
	ts := &d.ThreadState
	ts.Size, ts.Prev, ts.Next, ts.Interp, ts.CurrentFrame, ts.ThreadID, ts.NativeThreadID = 304, 0, 8, 16, tab["TstateFrame"], tab["TstateThreadID"], tab["TstateNativeThreadID"]
	fr := &d.InterpreterFrame
	fr.Size, fr.Previous, fr.Executable, fr.InstrPtr, fr.Owner = 80, tab["FramePrevious"], tab["FrameCode"], tab["FrameInstr"], tab["FrameOwner"]
	co := &d.CodeObject
	co.Size, co.Filename, co.Name, co.Qualname, co.Linetable, co.Firstlineno, co.CoCodeAdaptive = 208, tab["CodeFilename"], tab["CodeName"], tab["CodeQualname"], tab["CodeLinetable"], tab["CodeFirstLineno"], tab["CodeCodeAdaptive"]
	d.PyObject.Size, d.PyObject.ObType = 16, 8
	d.TypeObject.Size, d.TypeObject.TpName = 400, 24
	d.TupleObject.Size, d.ListObject.Size, d.DictObject.Size, d.FloatObject.Size, d.LongObject.Size, d.GC.Size = 32, 40, 48, 24, 32, 400
	d.BytesObject.Size, d.BytesObject.ObSize, d.BytesObject.ObSval = 40, 16, 32
	d.UnicodeObject.Size, d.UnicodeObject.State, d.UnicodeObject.Length, d.UnicodeObject.ASCIIObjectSize = 72, 32, 16, 40
	b, err := binary.Append(nil, binary.LittleEndian, &d)
	if err != nil {
		panic(err)
	}
	return b
}

// _Py_DebugOffsets come from the target's memory: no input may panic the
// parser, and offsets it takes lie within their structures and make a
// layout.
func FuzzDebugOffsets(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte(debugCookie))
	f.Add(validDebugOffsets())
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseDebugOffsets(b, Release{3, 13})
		if err != nil {
			return
		}
		if d.InterpreterState.GILRuntimeStateLocked < d.InterpreterState.GILRuntimeState || d.ThreadState.NativeThreadID >= d.ThreadState.Size {
			t.Errorf("taken: %+v", d)
		}
		if _, err := buildLayout(Release{3, 13}, d, nil); err != nil {
			t.Errorf("no layout: %v", err)
		}
	})
}

// lineTableCoverage is the bytes of instructions a 3.11+ location table
// covers: each entry's first byte (top bit set) says how many code units.
func lineTableCoverage(table []byte) int {
	if len(table) > 0 && table[0]&0x80 == 0 {
		return 0
	}
	n := 0
	for _, b := range table {
		if b&0x80 != 0 {
			n += (int(b&7) + 1) * codeUnitSize
		}
	}
	return n
}

// Line tables come from the target's memory: no input may panic the
// decoders; before the first instruction is the first line; past what
// the table covers there is no line.
func FuzzLineTable311(f *testing.F) {
	f.Add([]byte{0x80 | 10<<3 | 1, 0, 0, 0x80 | 13<<3, 0x43, 0x01}, int32(5), int32(4))
	f.Add([]byte{0x80 | 14<<3 | 7, 0x7f, 0x7f, 0x7f, 0x01, 0x02, 0x03, 0x80 | 15<<3}, int32(1), int32(16))
	f.Fuzz(func(t *testing.T, table []byte, first, offset int32) {
		line := lineOf311(table, int(first), int(offset))
		if offset < 0 && line != int(first) {
			t.Errorf("offset %d: line %d, want the first %d", offset, line, first)
		}
		if int(offset) >= lineTableCoverage(table) && offset >= 0 && line != -1 {
			t.Errorf("offset %d past the table's %d bytes: line %d", offset, lineTableCoverage(table), line)
		}
	})
}

func FuzzLineTable310(f *testing.F) {
	f.Add([]byte{6, 0, 4, 1, 0, 127, 0, 127, 254, 0x80, 10, 0xff}, int32(3), int32(8))
	f.Fuzz(func(t *testing.T, table []byte, first, offset int32) {
		line := lineOf310(table, int(first), int(offset))
		if offset < 0 && line != int(first) {
			t.Errorf("offset %d: line %d, want the first %d", offset, line, first)
		}
		covered := 0
		for i := 0; i+1 < len(table); i += 2 {
			covered += int(table[i])
		}
		if int(offset) >= covered && offset >= 0 && line != -1 {
			t.Errorf("offset %d past the table's %d bytes: line %d", offset, covered, line)
		}
	})
}
