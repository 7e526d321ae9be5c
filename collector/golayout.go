package collector

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
)

// goLayout is what the programs need to follow a Go process's goroutines:
// where a thread keeps its running goroutine's g, as an offset from its FS
// base, and where a g keeps the goroutine's id. Both depend on the Go
// release and on how the binary was linked, so they are read from the
// binary itself rather than assumed.
type goLayout struct {
	gTLSOffset int64
	goidOffset uint64
}

// errNotGo says a binary is no Go program.
var errNotGo = errors.New("not a Go binary")

// readGoLayout reads the layout from a Go binary: errNotGo for any other,
// and an error naming what is missing for a Go binary it cannot follow (one
// built without DWARF, -ldflags=-w).
func readGoLayout(r io.ReaderAt) (layout goLayout, err error) {
	// The binary is the target's, not ours: a malformed one must not take
	// the collector down with it.
	defer func() {
		if recover() != nil {
			layout, err = goLayout{}, errNotGo
		}
	}()
	f, err := elf.NewFile(r)
	if err != nil {
		return goLayout{}, errNotGo
	}
	defer f.Close()
	if f.Section(".go.buildinfo") == nil {
		return goLayout{}, errNotGo
	}
	goid, err := goidOffset(f)
	if err != nil {
		return goLayout{}, err
	}
	return goLayout{gTLSOffset: gTLSOffset(f), goidOffset: goid}, nil
}

// goidOffset finds runtime.g's goid field in the binary's DWARF, looking
// only into the runtime's compile unit.
func goidOffset(f *elf.File) (uint64, error) {
	d, err := f.DWARF()
	if err != nil {
		return 0, fmt.Errorf("no DWARF to find runtime.g in (built with -ldflags=-w?): %w", err)
	}
	r := d.Reader()
	for {
		cu, err := r.Next()
		if err != nil {
			return 0, fmt.Errorf("reading DWARF: %w", err)
		}
		if cu == nil {
			return 0, errors.New("runtime.g not in the binary's DWARF")
		}
		if cu.Tag != dwarf.TagCompileUnit || cu.Val(dwarf.AttrName) != "runtime" {
			r.SkipChildren()
			continue
		}
		// The runtime may come in more than one unit; runtime.g is in one.
		if off, found, err := goidInUnit(r); err != nil || found {
			return off, err
		}
	}
}

// goidInUnit reads a compile unit of the runtime, positioned at its first
// child, up to runtime.g's goid member; found is false when the unit ends
// without runtime.g.
func goidInUnit(r *dwarf.Reader) (offset uint64, found bool, err error) {
	for {
		e, err := r.Next()
		if err != nil {
			return 0, false, fmt.Errorf("reading DWARF: %w", err)
		}
		if e == nil || e.Tag == 0 {
			return 0, false, nil
		}
		if e.Tag != dwarf.TagStructType || e.Val(dwarf.AttrName) != "runtime.g" {
			if e.Children {
				r.SkipChildren()
			}
			continue
		}
		for {
			m, err := r.Next()
			if err != nil {
				return 0, false, fmt.Errorf("reading DWARF: %w", err)
			}
			if m == nil || m.Tag == 0 {
				return 0, false, errors.New("runtime.g has no goid")
			}
			if m.Tag == dwarf.TagMember && m.Val(dwarf.AttrName) == "goid" {
				if off, ok := m.Val(dwarf.AttrDataMemberLoc).(int64); ok && off >= 0 {
					return uint64(off), true, nil
				}
				return 0, false, errors.New("runtime.g's goid has no offset")
			}
		}
	}
}

// gTLSOffset is where, below the FS base, the runtime keeps the current g:
// the runtime.tlsg TLS symbol in the executable's TLS block, which x86-64
// places right below the thread pointer. A binary linked by Go's own linker
// has no other TLS, and g is at -8; one linked externally (cgo) may have.
func gTLSOffset(f *elf.File) int64 {
	const internal = -8
	var tls *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_TLS {
			tls = p
		}
	}
	syms, err := f.Symbols()
	if tls == nil || err != nil {
		return internal
	}
	for _, s := range syms {
		if s.Name == "runtime.tlsg" && elf.ST_TYPE(s.Info) == elf.STT_TLS {
			align := max(tls.Align, 1)
			block := (tls.Memsz + align - 1) / align * align
			return int64(s.Value) - int64(block)
		}
	}
	return internal
}
