package php

import (
	"fmt"
)

// FuncType is what kind of function a zend_function is.
type FuncType int

const (
	Internal FuncType = iota + 1 // written in C (strlen, array_map)
	User                         // written in PHP: a function, a method, a file's top level
)

func (t FuncType) String() string {
	switch t {
	case Internal:
		return "internal function"
	case User:
		return "user function"
	}
	return "unknown function"
}

// Function is what a zend_function says of itself.
type Function struct {
	Addr  uint64
	Type  FuncType
	Name  string // "" for a file's top level (and eval'd code)
	Class string // the class of a method, "" for a function
	// File, StartLine and EndLine are a user function's.
	File               string
	StartLine, EndLine int

	opcodes uint64
	last    uint32
	// fingerprint is what the function's head held when read: a lookup
	// compares it with what it holds now (a function compiled for one
	// request, without opcache, is freed at its end and its memory used
	// again).
	fingerprint [5]uint64
	lines       map[uint64]int // by instruction, as read
}

// QualifiedName is how PHP's own traces name the function: Class::method,
// function, or {main} for a file's top level.
func (f *Function) QualifiedName() string {
	name := f.Name
	if name == "" {
		name = "{main}"
	}
	if f.Class != "" {
		return f.Class + "::" + name
	}
	return name
}

// maxFunctions and maxLines bound what is cached of a process's
// functions: past them the cache starts again.
const (
	maxFunctions = 1 << 16
	maxLines     = 1 << 12
)

func (p *Process) head(addr uint64) (block, [5]uint64, error) {
	l := p.Layout
	b := make(block, l.FuncHeadSize)
	if err := p.mem.read(b, addr); err != nil {
		return nil, [5]uint64{}, err
	}
	fp := [5]uint64{uint64(b.u8(l.FuncType)), b.u64(l.FuncName), b.u64(l.FuncScope), b.u64(l.OpArrayFilename), b.u64(l.OpArrayOpcodes)}
	return b, fp, nil
}

// Function reads the zend_function at addr (cached while its head reads
// the same).
func (p *Process) Function(addr uint64) (*Function, error) {
	b, fp, err := p.head(addr)
	if err != nil {
		return nil, fmt.Errorf("function %#x: %w", addr, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.funcs[addr]; ok && f.fingerprint == fp {
		return f, nil
	}
	f, err := p.decodeFunction(addr, b, fp)
	if err != nil {
		return nil, fmt.Errorf("function %#x: %w", addr, err)
	}
	if len(p.funcs) >= maxFunctions {
		clear(p.funcs)
	}
	p.funcs[addr] = f
	return f, nil
}

// readFunction reads the zend_function at addr, uncached.
func (p *Process) readFunction(addr uint64) (*Function, error) {
	b, fp, err := p.head(addr)
	if err != nil {
		return nil, err
	}
	return p.decodeFunction(addr, b, fp)
}

// maxOpcodes bounds the instructions of a function taken for one.
const maxOpcodes = 1 << 24

func (p *Process) decodeFunction(addr uint64, b block, fp [5]uint64) (*Function, error) {
	l := p.Layout
	f := &Function{Addr: addr, fingerprint: fp}
	switch t := b.u8(l.FuncType); t {
	case l.FuncInternal:
		f.Type = Internal
	case l.FuncUser, l.FuncEval:
		f.Type = User
	default:
		return nil, fmt.Errorf("of type %d, which is none known", t)
	}
	var err error
	if name := b.u64(l.FuncName); name != 0 {
		if f.Name, err = p.str(name); err != nil {
			return nil, fmt.Errorf("its name: %w", err)
		}
	} else if f.Type == Internal {
		return nil, fmt.Errorf("an internal function without a name")
	}
	if scope := b.u64(l.FuncScope); scope != 0 {
		if f.Class, err = p.className(scope); err != nil {
			return nil, fmt.Errorf("its class: %w", err)
		}
	}
	if f.Type == User {
		if f.File, err = p.str(b.u64(l.OpArrayFilename)); err != nil {
			return nil, fmt.Errorf("its file: %w", err)
		}
		f.StartLine, f.EndLine = int(b.u32(l.OpArrayLineStart)), int(b.u32(l.OpArrayLineEnd))
		f.opcodes, f.last = b.u64(l.OpArrayOpcodes), b.u32(l.OpArrayLast)
		if f.StartLine > f.EndLine || f.last > maxOpcodes || (f.last > 0 && f.opcodes == 0) {
			return nil, fmt.Errorf("lines %d to %d, %d instructions at %#x: no function's", f.StartLine, f.EndLine, f.last, f.opcodes)
		}
		f.lines = map[uint64]int{}
	}
	return f, nil
}

// Line is the line of the instruction at opline of f: 0 when it is no
// instruction of f's (or f is internal).
func (p *Process) Line(f *Function, opline uint64) int {
	l := p.Layout
	if f.Type != User || opline < f.opcodes || opline >= f.opcodes+uint64(f.last)*l.OpSize || (opline-f.opcodes)%l.OpSize != 0 {
		return 0
	}
	p.mu.Lock()
	line, ok := f.lines[opline]
	p.mu.Unlock()
	if ok {
		return line
	}
	var b [4]byte
	if err := p.mem.read(b[:], opline+l.OpLineno); err != nil {
		return 0
	}
	line = int(block(b[:]).u32(0))
	if line < f.StartLine || line > f.EndLine {
		line = 0 // not the function's: read while it changed
	}
	p.mu.Lock()
	if len(f.lines) >= maxLines {
		clear(f.lines)
	}
	f.lines[opline] = line
	p.mu.Unlock()
	return line
}

// Location is a frame's function and line.
type Location struct {
	*Function
	Line int // 0 when unknown
}

// Locate reads the function of a frame (its zend_execute_data's func,
// cached) and the line of its instruction (opline).
func (p *Process) Locate(fn, opline uint64) (Location, error) {
	f, err := p.Function(fn)
	if err != nil {
		return Location{}, err
	}
	return Location{f, p.Line(f, opline)}, nil
}
