package cpython

import (
	"encoding/binary"
	"errors"
	"os"
	"sort"
	"strings"
	"testing"
)

// fakeMemory is a process's memory as a few regions.
type fakeMemory map[uint64][]byte

func (m fakeMemory) ReadAt(p []byte, off int64) (int, error) {
	addr := uint64(off)
	for start, b := range m {
		if addr >= start && addr+uint64(len(p)) <= start+uint64(len(b)) {
			return copy(p, b[addr-start:]), nil
		}
	}
	return 0, errors.New("unmapped")
}

func (m fakeMemory) region(addr uint64) []byte {
	var starts []uint64
	for start := range m {
		starts = append(starts, start)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] > starts[j] })
	for _, start := range starts {
		if addr >= start && addr < start+uint64(len(m[start])) {
			return m[start][addr-start:]
		}
	}
	panic("unmapped")
}

func (m fakeMemory) u64(addr, v uint64) { binary.LittleEndian.PutUint64(m.region(addr), v) }
func (m fakeMemory) u32(addr uint64, v uint32) {
	binary.LittleEndian.PutUint32(m.region(addr), v)
}
func (m fakeMemory) u8(addr uint64, v uint8) { m.region(addr)[0] = v }

// Addresses of the fake 3.11 process's objects.
const (
	fakeRuntime  = 0x10000
	fakeInterp   = 0x20000
	fakeTstate   = 0x30000
	fakeFrame    = 0x40000
	fakeCode     = 0x50000
	fakeName     = 0x60000
	fakeFilename = 0x61000
	fakeOther    = 0x62000 // another str
	fakeTable    = 0x63000
	fakeContext  = 0x64000
	fakeCodeType = 0x70000
	fakeStrType  = 0x71000
	fakeBytes    = 0x72000
	fakeCtxType  = 0x73000
	fakeVersion  = 0x75000
	fakeNames    = 0x76000 // the types' names
)

// fakeProcess is a consistent 3.11 process, with Debian's layout (the
// table's), whose one thread (this test's main thread) runs a frame of a
// function "handler" of app.py, at its first line + 2, in a context.
func fakeProcess(t *testing.T) (*Process, fakeMemory) {
	t.Helper()
	l, err := buildLayout(Release{3, 11}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := fakeMemory{}
	for _, a := range []uint64{fakeRuntime, fakeInterp, fakeTstate, fakeFrame, fakeCode, fakeName, fakeFilename, fakeOther, fakeTable, fakeContext, fakeCodeType, fakeStrType, fakeBytes, fakeCtxType, fakeVersion, fakeNames} {
		m[a] = make([]byte, 0x1000)
	}
	m.u64(fakeRuntime+l.RuntimeInterpretersHead, fakeInterp)
	m.u64(fakeRuntime+l.RuntimeInterpretersMain, fakeInterp)
	m.u64(fakeInterp+l.InterpThreadsHead, fakeTstate)
	m.u64(fakeTstate+l.TstateInterp, fakeInterp)
	m.u64(fakeTstate+l.TstateNativeThreadID, uint64(os.Getpid()))
	m.u64(fakeTstate+l.TstateThreadID, 0x7f0000001000)
	m.u64(fakeTstate+l.TstateCframe, fakeTstate+0x800)
	m.u64(fakeTstate+0x800+l.CframeCurrentFrame, fakeFrame)
	m.u64(fakeTstate+l.TstateContext, fakeContext)
	m.u64(fakeContext+l.ObjectType, fakeCtxType)
	m.u64(fakeRuntime+l.RuntimeTstateCurrent, fakeTstate)
	m.u32(fakeRuntime+l.RuntimeGIL+l.GILLocked, 1)
	m.u64(fakeRuntime+l.RuntimeGIL+l.GILLastHolder, fakeTstate)
	m.u32(fakeVersion, 0x030b02f0)
	for i, typ := range []struct {
		addr uint64
		name string
	}{{fakeCodeType, "code"}, {fakeStrType, "str"}, {fakeBytes, "bytes"}, {fakeCtxType, "_contextvars.Context"}} {
		name := fakeNames + uint64(i)*64
		copy(m.region(name), typ.name+"\x00")
		m.u64(typ.addr+l.TypeName, name)
	}
	str := func(addr uint64, s string) {
		m.u64(addr+l.ObjectType, fakeStrType)
		m.u64(addr+l.UnicodeLength, uint64(len(s)))
		m.u32(addr+l.UnicodeState, 1<<l.UnicodeKindShift|1<<l.UnicodeCompactBit|1<<l.UnicodeASCIIBit)
		copy(m.region(addr+l.ASCIIObjectSize), s)
	}
	str(fakeName, "handler")
	str(fakeFilename, "app.py")
	str(fakeOther, "other")
	// A location table: 2 code units on the first line, 3 on the next
	// (one-line form, +1), 1 on the line after (+1).
	table := []byte{0x80 | 10<<3 | 1, 0, 0, 0x80 | 11<<3 | 2, 0, 0, 0x80 | 11<<3 | 0, 0, 0}
	m.u64(fakeTable+l.ObjectType, fakeBytes)
	m.u64(fakeTable+l.VarObjectSize, uint64(len(table)))
	copy(m.region(fakeTable+l.BytesData), table)
	m.u64(fakeCode+l.ObjectType, fakeCodeType)
	m.u32(fakeCode+l.CodeFirstLineno, 10)
	m.u64(fakeCode+l.CodeName, fakeName)
	m.u64(fakeCode+l.CodeQualname, fakeName)
	m.u64(fakeCode+l.CodeFilename, fakeFilename)
	m.u64(fakeCode+l.CodeLinetable, fakeTable)
	m.u64(fakeFrame+l.FrameCode, fakeCode)
	m.u64(fakeFrame+l.FrameInstr, fakeCode+l.CodeCodeAdaptive+5*codeUnitSize)
	m.u8(fakeFrame+l.FrameOwner, uint8(l.OwnerThread))
	interp := &Interpreter{PID: os.Getpid(), Path: "/usr/bin/python3.11", Release: Release{3, 11}, Runtime: fakeRuntime, Symbols: map[string]uint64{
		"_PyRuntime": fakeRuntime, "Py_Version": fakeVersion, "PyCode_Type": fakeCodeType, "PyUnicode_Type": fakeStrType,
		"PyBytes_Type": fakeBytes, "PyContext_Type": fakeCtxType,
	}}
	return &Process{Interpreter: interp, Layout: l, mem: reader{m}, PthreadTID: Absent, codes: newCodeCache()}, m
}

func TestCheckFakeProcess(t *testing.T) {
	p, _ := fakeProcess(t)
	if err := p.check("/"); err != nil {
		t.Fatalf("a consistent process: %v", err)
	}
	if p.Version.String() != "3.11.2" || p.GIL != fakeRuntime+p.Layout.RuntimeGIL {
		t.Errorf("version %s, GIL %#x", p.Version, p.GIL)
	}
	threads, err := p.Threads()
	if err != nil || len(threads) != 1 || threads[0].Context != fakeContext || threads[0].Frame != fakeFrame || threads[0].NativeTID != os.Getpid() {
		t.Fatalf("threads %+v, %v", threads, err)
	}
	frames, err := p.Frames(threads[0])
	if err != nil || len(frames) != 1 {
		t.Fatalf("frames %+v, %v", frames, err)
	}
	loc, err := p.Locate(frames[0])
	if err != nil || loc.Name != "handler" || loc.Filename != "app.py" || loc.Line != 12 {
		t.Errorf("located at %+v %v, want handler in app.py at line 12", loc, err)
	}
}

// A layout that does not fit the process is refused, saying what did
// not fit.
func TestCheckRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		spoil func(l *Layout, m fakeMemory)
		says  string
	}{
		"no main interpreter":      {func(l *Layout, m fakeMemory) { m.u64(fakeRuntime+l.RuntimeInterpretersMain, 0) }, "no main interpreter"},
		"main not in the list":     {func(l *Layout, m fakeMemory) { m.u64(fakeRuntime+l.RuntimeInterpretersHead, 0) }, "not in the list"},
		"another's thread state":   {func(l *Layout, m fakeMemory) { m.u64(fakeTstate+l.TstateInterp, fakeInterp+8) }, "belongs to interpreter"},
		"no thread of the process": {func(l *Layout, m fakeMemory) { m.u64(fakeTstate+l.TstateNativeThreadID, 1<<30) }, "names thread"},
		"a broken thread list":     {func(l *Layout, m fakeMemory) { m.u64(fakeTstate+l.TstatePrev, fakeTstate) }, "its prev"},
		"another release":          {func(l *Layout, m fakeMemory) { m.u32(fakeVersion, 0x030c01f0) }, "says it is 3.12.1"},
		"a type named otherwise":   {func(l *Layout, m fakeMemory) { m.u64(fakeCodeType+l.TypeName, fakeNames+64) }, `is named "str"`},
		"a GIL locked 7 times":     {func(l *Layout, m fakeMemory) { m.u32(fakeRuntime+l.RuntimeGIL+l.GILLocked, 7) }, "neither 0 nor 1"},
		"a GIL held by no thread":  {func(l *Layout, m fakeMemory) { m.u64(fakeRuntime+l.RuntimeTstateCurrent, 0x99990) }, "none of the interpreter's"},
		"a frame of no owner":      {func(l *Layout, m fakeMemory) { m.u8(fakeFrame+l.FrameOwner, 9) }, "owner 9"},
		"code of another type":     {func(l *Layout, m fakeMemory) { m.u64(fakeCode+l.ObjectType, fakeStrType) }, "no code object"},
		"a name that is no str":    {func(l *Layout, m fakeMemory) { m.u64(fakeCode+l.CodeName, fakeTable) }, "no str"},
		"a str not compact":        {func(l *Layout, m fakeMemory) { m.u32(fakeName+l.UnicodeState, 1<<l.UnicodeKindShift) }, "not compact"},
		"a huge str":               {func(l *Layout, m fakeMemory) { m.u64(fakeName+l.UnicodeLength, 1<<40) }, "characters"},
		"a line table no bytes":    {func(l *Layout, m fakeMemory) { m.u64(fakeCode+l.CodeLinetable, fakeName) }, "no bytes object"},
		"a context no Context":     {func(l *Layout, m fakeMemory) { m.u64(fakeTstate+l.TstateContext, fakeName) }, "no contextvars.Context"},
		"an unreadable frame":      {func(l *Layout, m fakeMemory) { m.u64(fakeTstate+0x800+l.CframeCurrentFrame, 0x7000000) }, "frame 0x7000000"},
	} {
		p, m := fakeProcess(t)
		c.spoil(p.Layout, m)
		err := p.check("/")
		if err == nil {
			t.Errorf("%s: taken as a good layout", name)
		} else if !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want it to say %q", name, err, c.says)
		}
	}
}

// A code object is read once while its head is unchanged, read anew when
// it changed (freed, and another took its place), and refused when what
// is there is no code object.
func TestCodeCache(t *testing.T) {
	p, m := fakeProcess(t)
	if err := p.check("/"); err != nil {
		t.Fatal(err)
	}
	first, err := p.Code(fakeCode)
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.Code(fakeCode)
	if err != nil || again != first {
		t.Errorf("an unchanged code object read anew: %p %p %v", first, again, err)
	}
	m.u64(fakeCode+p.Layout.CodeName, fakeOther)
	other, err := p.Code(fakeCode)
	if err != nil || other.Name != "other" {
		t.Errorf("another code object at its address: %+v %v", other, err)
	}
	m.u64(fakeCode+p.Layout.ObjectType, fakeStrType)
	if c, err := p.Code(fakeCode); err == nil {
		t.Errorf("a str taken for code: %+v", c)
	}
}
