package php

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// FuzzParseBuild: any read-only data gives a build or none, never a panic;
// a build found names an API of at most eight digits.
func FuzzParseBuild(f *testing.F) {
	f.Add([]byte("\x00API420220829,NTS\x00X-Powered-By: PHP/8.2.36\x00API20220829,NTS\x00"))
	f.Add([]byte("API20230831,TS,debug\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, ok := parseBuild(data)
		if ok && b.API > 99999999 {
			t.Errorf("API %d from %q", b.API, data)
		}
	})
}

// FuzzReadInterpreter: any file gives an interpreter or an error, never a
// panic.
func FuzzReadInterpreter(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		interp, err := readInterpreter(bytes.NewReader(data), 0x1000)
		if err == nil && interp.ExecutorGlobals == 0 {
			t.Error("an interpreter without executor_globals")
		}
	})
}

// fuzzBase is where fuzzed memory lies.
const fuzzBase = 0x10000

// FuzzLocate reads frames from memory made of the fuzzer's bytes with
// 8.2's layout: a function, its line, or an error, never a panic, and
// never a name longer than the bound.
func FuzzLocate(f *testing.F) {
	l := tables[20220829]
	f.Add(seedFunction(l), uint64(fuzzBase), uint64(fuzzBase+512))
	f.Fuzz(func(t *testing.T, mem []byte, fn, opline uint64) {
		p := &Process{Layout: &l, mem: reader{fakeMemory{base: fuzzBase, b: mem}}, funcs: map[uint64]*Function{}}
		loc, err := p.Locate(fn, opline)
		if err != nil {
			return
		}
		for _, s := range []string{loc.Name, loc.Class, loc.File} {
			if len(s) > maxStringLen {
				t.Errorf("a string of %d bytes", len(s))
			}
		}
		if loc.Line != 0 && (loc.Line < loc.StartLine || loc.Line > loc.EndLine) {
			t.Errorf("line %d outside %d-%d", loc.Line, loc.StartLine, loc.EndLine)
		}
	})
}

// seedFunction is memory at fuzzBase holding a user function named "f"
// of class "C" in file "a.php", lines 3 to 5, whose one instruction, at
// fuzzBase+512, is at line 4.
func seedFunction(l Layout) []byte {
	mem := make([]byte, 1024)
	put := func(off uint64, v uint64) { binary.LittleEndian.PutUint64(mem[off:], v) }
	str := func(off uint64, s string) {
		binary.LittleEndian.PutUint32(mem[off+l.StringTypeInfo:], l.StringType)
		put(off+l.StringLen, uint64(len(s)))
		copy(mem[off+l.StringVal:], s)
	}
	mem[l.FuncType] = l.FuncUser
	put(l.FuncName, fuzzBase+256)
	str(256, "f")
	put(l.FuncScope, fuzzBase+320)
	put(320+l.ClassName, fuzzBase+384)
	str(384, "C")
	put(l.OpArrayFilename, fuzzBase+448)
	str(448, "a.php")
	binary.LittleEndian.PutUint32(mem[l.OpArrayLineStart:], 3)
	binary.LittleEndian.PutUint32(mem[l.OpArrayLineEnd:], 5)
	put(l.OpArrayOpcodes, fuzzBase+512)
	binary.LittleEndian.PutUint32(mem[l.OpArrayLast:], 1)
	binary.LittleEndian.PutUint32(mem[512+l.OpLineno:], 4)
	return mem
}

// TestLocateFake reads seedFunction's function, at its instruction and
// at addresses that are none of its instructions.
func TestLocateFake(t *testing.T) {
	l := tables[20220829]
	p := &Process{Layout: &l, mem: reader{fakeMemory{base: fuzzBase, b: seedFunction(l)}}, funcs: map[uint64]*Function{}}
	for _, tc := range []struct {
		opline uint64
		want   string
	}{
		{fuzzBase + 512, "C::f a.php:4 (3)"},
		{fuzzBase + 513, "C::f a.php:0 (3)"}, // inside an instruction
		{fuzzBase + 544, "C::f a.php:0 (3)"}, // past the last
	} {
		loc, err := p.Locate(fuzzBase, tc.opline)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%s %s:%d (%d)", loc.QualifiedName(), loc.File, loc.Line, loc.StartLine); got != tc.want {
			t.Errorf("at %#x: %s, want %s", tc.opline, got, tc.want)
		}
	}
	if _, err := p.Locate(fuzzBase+8, fuzzBase+512); err == nil {
		t.Error("a function read 8 bytes off")
	}
}
