package cpython

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits on what is read of an object: a length beyond them is taken for
// a freed or foreign object, not read.
const (
	maxStringLen    = 4096    // code points of a name or file name
	maxLinetableLen = 1 << 20 // bytes of a line table
)

// Code is what a code object says of itself.
type Code struct {
	Addr      uint64
	Name      string // co_name: the function's name
	Qualname  string // co_qualname (3.11+): Class.method, f.<locals>.g; Name in 3.10
	Filename  string
	FirstLine int
	// codeStart is the address of its instructions (co_code_adaptive,
	// 3.11+); 0 in 3.10, whose frames count in instructions.
	codeStart uint64
	linetable []byte
	minor     int
	// fingerprint is what the code object's head held when read: a
	// lookup in the cache compares it with what it holds now.
	fingerprint codeFingerprint
}

// codeFingerprint is a code object's fields this package reads: its type,
// first line, and the addresses of its name, file name, qualified name
// and line table (immutable objects, held by the code object).
type codeFingerprint [6]uint64

func (l *Layout) fingerprint(head span) codeFingerprint {
	fp := codeFingerprint{head.u64(l.ObjectType), uint64(head.u32(l.CodeFirstLineno)), head.u64(l.CodeName), head.u64(l.CodeFilename), 0, head.u64(l.CodeLinetable)}
	if l.CodeQualname != Absent {
		fp[4] = head.u64(l.CodeQualname)
	}
	return fp
}

// Offset is the byte offset, in c's instructions, of the instruction a
// frame of c is at (Frame.Instr); negative before its first.
func (c *Code) Offset(instr uint64) int {
	if c.codeStart == 0 {
		return int(int64(instr)) * codeUnitSize // 3.10's f_lasti: an index
	}
	return int(int64(instr - c.codeStart))
}

// Line is the source line of the instruction at byte offset off: -1 for
// an instruction of no line, the first line before the first one.
func (c *Code) Line(off int) int {
	if c.minor == 10 {
		return lineOf310(c.linetable, c.FirstLine, off)
	}
	return lineOf311(c.linetable, c.FirstLine, off)
}

// Location is a frame's function, file and line.
type Location struct {
	*Code
	Line int
}

// Locate reads the code of frame f (cached) and its line.
func (p *Process) Locate(f Frame) (Location, error) {
	c, err := p.Code(f.Code)
	if err != nil {
		return Location{}, err
	}
	return Location{c, c.Line(c.Offset(f.Instr))}, nil
}

// codeCache keeps code objects read, by address. A code object can be
// freed and its memory reused by another object, or another code object:
// an entry is taken only while the object's head (type, first line,
// name, file name, line table: the fields read) is what it was when the
// entry was made, checked by one read at each lookup. A code object
// freed and a new one made at its address with the same head (the same
// name, file name and line table objects) is the same code.
type codeCache struct {
	mu      sync.Mutex
	entries map[uint64]*Code
}

// maxCachedCodes bounds the cache: it is emptied when full.
const maxCachedCodes = 1 << 16

func newCodeCache() codeCache { return codeCache{entries: map[uint64]*Code{}} }

// codeHead is the span of a code object read to check it is the one
// cached: from its type to the last of the fields read.
func (l *Layout) codeHead() (base, size uint64) {
	return spanOf(l.ObjectType, l.CodeFilename, l.CodeName, l.CodeQualname, l.CodeFirstLineno, l.CodeLinetable)
}

// Code reads the code object at addr: from the cache when its head is
// unchanged. An address that holds no code object (freed, or never one)
// is an error.
func (p *Process) Code(addr uint64) (*Code, error) {
	base, size := p.Layout.codeHead()
	head, err := p.mem.readSpan(addr, base, size)
	if err != nil {
		return nil, fmt.Errorf("code object %#x: %w", addr, err)
	}
	p.codes.mu.Lock()
	c, ok := p.codes.entries[addr]
	p.codes.mu.Unlock()
	if ok && c.fingerprint == p.Layout.fingerprint(head) {
		return c, nil
	}
	c, err = p.readCode(addr, head)
	if err != nil {
		return nil, err
	}
	p.codes.mu.Lock()
	if len(p.codes.entries) >= maxCachedCodes {
		p.codes.entries = map[uint64]*Code{}
	}
	p.codes.entries[addr] = c
	p.codes.mu.Unlock()
	return c, nil
}

// readCode reads the code object at addr, whose head is read.
func (p *Process) readCode(addr uint64, head span) (*Code, error) {
	l := p.Layout
	if typ := head.u64(l.ObjectType); typ != p.types.code {
		return nil, fmt.Errorf("object %#x is no code object (its type is %#x)", addr, typ)
	}
	c := &Code{Addr: addr, FirstLine: int(int32(head.u32(l.CodeFirstLineno))), minor: l.Release.Minor, fingerprint: l.fingerprint(head)}
	var err error
	if c.Name, err = p.str(head.u64(l.CodeName)); err != nil {
		return nil, fmt.Errorf("code object %#x: its name: %w", addr, err)
	}
	if c.Filename, err = p.str(head.u64(l.CodeFilename)); err != nil {
		return nil, fmt.Errorf("code object %#x: its file name: %w", addr, err)
	}
	c.Qualname = c.Name
	if l.CodeQualname != Absent {
		if c.Qualname, err = p.str(head.u64(l.CodeQualname)); err != nil {
			return nil, fmt.Errorf("code object %#x: its qualified name: %w", addr, err)
		}
	}
	if c.linetable, err = p.bytesObject(head.u64(l.CodeLinetable)); err != nil {
		return nil, fmt.Errorf("code object %#x: its line table: %w", addr, err)
	}
	if l.CodeCodeAdaptive != Absent {
		c.codeStart = addr + l.CodeCodeAdaptive
	}
	return c, nil
}

// typeName reads the name of the type at addr (its tp_name).
func (p *Process) typeName(addr uint64) (string, error) {
	name, err := p.mem.u64(addr + p.Layout.TypeName)
	if err != nil {
		return "", err
	}
	return p.mem.cString(name, 256)
}

// errNotStr says an object is no str.
var errNotStr = errors.New("no str")

// str reads the str at addr: a compact one (as names and file names are),
// of any kind.
func (p *Process) str(addr uint64) (string, error) {
	l := p.Layout
	base, size := spanOf(l.ObjectType, l.UnicodeLength, l.UnicodeState)
	s, err := p.mem.readSpan(addr, base, size)
	if err != nil {
		return "", err
	}
	if typ := s.u64(l.ObjectType); typ != p.types.str {
		return "", fmt.Errorf("object %#x: %w (its type is %#x)", addr, errNotStr, typ)
	}
	state := s.u32(l.UnicodeState)
	length := s.u64(l.UnicodeLength)
	kind := int(state>>l.UnicodeKindShift) & 7
	if state>>l.UnicodeCompactBit&1 == 0 {
		return "", fmt.Errorf("str %#x is not compact", addr)
	}
	if length > maxStringLen {
		return "", fmt.Errorf("str %#x: %d characters, more than %d", addr, length, maxStringLen)
	}
	data := addr + l.CompactUnicodeObjectSize
	if state>>l.UnicodeASCIIBit&1 == 1 {
		data = addr + l.ASCIIObjectSize
	}
	if kind != 1 && kind != 2 && kind != 4 {
		return "", fmt.Errorf("str %#x: kind %d", addr, kind)
	}
	if length == 0 {
		return "", nil
	}
	b := make([]byte, length*uint64(kind))
	if err := p.mem.read(b, data); err != nil {
		return "", err
	}
	return decodeStr(b, kind), nil
}

// decodeStr turns a str's characters, kind bytes each (1: Latin-1, 2:
// UCS-2, 4: UCS-4), into UTF-8.
func decodeStr(b []byte, kind int) string {
	var sb strings.Builder
	for i := 0; i+kind <= len(b); i += kind {
		var r rune
		switch kind {
		case 1:
			r = rune(b[i])
		case 2:
			r = rune(binary.LittleEndian.Uint16(b[i:]))
		default:
			r = rune(binary.LittleEndian.Uint32(b[i:]))
		}
		if utf16.IsSurrogate(r) || !utf8.ValidRune(r) {
			r = utf8.RuneError
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// bytesObject reads the bytes object at addr.
func (p *Process) bytesObject(addr uint64) ([]byte, error) {
	l := p.Layout
	base, size := spanOf(l.ObjectType, l.VarObjectSize)
	s, err := p.mem.readSpan(addr, base, size)
	if err != nil {
		return nil, err
	}
	if typ := s.u64(l.ObjectType); typ != p.types.bytes {
		return nil, fmt.Errorf("object %#x is no bytes object (its type is %#x)", addr, typ)
	}
	n := s.u64(l.VarObjectSize)
	if n > maxLinetableLen {
		return nil, fmt.Errorf("bytes %#x: %d bytes, more than %d", addr, n, maxLinetableLen)
	}
	b := make([]byte, n)
	if n > 0 {
		if err := p.mem.read(b, addr+l.BytesData); err != nil {
			return nil, err
		}
	}
	return b, nil
}
