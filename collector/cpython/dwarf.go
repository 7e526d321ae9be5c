package cpython

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"strings"
)

// dwarfIndex finds an interpreter's structures in its DWARF debug
// information: pyenv's builds, and any built with -g, carry it; Debian's
// python3.11 does not (its separate debug file may be installed).
type dwarfIndex struct {
	data *dwarf.Data
	// types are struct and union definitions by tag, and typedefs, by
	// name: the first definition seen (a definition has a size).
	types map[string]dwarf.Offset
	// enumerators are the values of the enumerations' constants, by name.
	enumerators map[string]int64
}

// newDWARFIndex indexes the top-level types of every compilation unit of
// data, whose .debug_info has size bytes: an entry takes at least one, so
// a reader that gives more entries than that (malformed data can make
// debug/dwarf's go round in place) is stopped.
func newDWARFIndex(data *dwarf.Data, size uint64) (*dwarfIndex, error) {
	ix := &dwarfIndex{data: data, types: map[string]dwarf.Offset{}, enumerators: map[string]int64{}}
	r := &boundedReader{Reader: data.Reader(), left: size}
	for {
		e, err := r.Next()
		if err != nil {
			return nil, err
		}
		if e == nil {
			return ix, nil
		}
		switch e.Tag {
		case dwarf.TagCompileUnit, dwarf.TagPartialUnit:
			continue // its children are the top-level entries
		case dwarf.TagStructType, dwarf.TagUnionType, dwarf.TagTypedef:
			name, _ := e.Val(dwarf.AttrName).(string)
			_, sized := e.Val(dwarf.AttrByteSize).(int64)
			if name != "" && (sized || e.Tag == dwarf.TagTypedef) {
				if _, seen := ix.types[name]; !seen {
					ix.types[name] = e.Offset
				}
			}
		case dwarf.TagEnumerationType:
			if e.Children {
				if err := ix.readEnumerators(r); err != nil {
					return nil, err
				}
				continue
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
}

// boundedReader is a dwarf.Reader that gives at most left entries.
type boundedReader struct {
	*dwarf.Reader
	left uint64
}

func (r *boundedReader) Next() (*dwarf.Entry, error) {
	if r.left == 0 {
		return nil, errors.New("malformed debug information: more entries than bytes")
	}
	r.left--
	return r.Reader.Next()
}

// readEnumerators reads an enumeration's constants, r at its first child.
func (ix *dwarfIndex) readEnumerators(r *boundedReader) error {
	for {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil || e.Tag == 0 {
			return nil
		}
		if e.Tag == dwarf.TagEnumerator {
			name, _ := e.Val(dwarf.AttrName).(string)
			if v, ok := e.Val(dwarf.AttrConstValue).(int64); ok && name != "" {
				if _, seen := ix.enumerators[name]; !seen {
					ix.enumerators[name] = v
				}
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
}

// errNoDWARFEntry says a type, member or constant is not in the debug
// information (not in this release, or not used by the build).
var errNoDWARFEntry = errors.New("not in the debug information")

// typeNamed is the type (struct, union or typedef) called name.
func (ix *dwarfIndex) typeNamed(name string) (dwarf.Type, error) {
	off, ok := ix.types[name]
	if !ok {
		return nil, fmt.Errorf("type %s: %w", name, errNoDWARFEntry)
	}
	return ix.data.Type(off)
}

// sizeOf is the size of type name.
func (ix *dwarfIndex) sizeOf(name string) (uint64, error) {
	t, err := ix.typeNamed(name)
	if err != nil {
		return 0, err
	}
	if t.Size() <= 0 {
		return 0, fmt.Errorf("type %s: no size", name)
	}
	return uint64(t.Size()), nil
}

// enumerator is the value of an enumeration constant.
func (ix *dwarfIndex) enumerator(name string) (uint64, error) {
	v, ok := ix.enumerators[name]
	if !ok {
		return 0, fmt.Errorf("constant %s: %w", name, errNoDWARFEntry)
	}
	return uint64(v), nil
}

// member is where the member at path ("interpreters.head") lies in type
// name: its offset in bits from the type's start (a bitfield's own bit,
// counted from the least significant of little-endian storage), and its
// size in bits. Anonymous structs and unions are looked through.
func (ix *dwarfIndex) member(name, path string) (bitOffset, bitSize uint64, err error) {
	t, err := ix.typeNamed(name)
	if err != nil {
		return 0, 0, err
	}
	for _, part := range strings.Split(path, ".") {
		st, ok := underlying(t).(*dwarf.StructType)
		if !ok {
			return 0, 0, fmt.Errorf("%s.%s: %s is no struct", name, path, t)
		}
		field, off, found := findField(st, part)
		if !found {
			return 0, 0, fmt.Errorf("%s.%s: %w", name, path, errNoDWARFEntry)
		}
		bitOffset += off
		bitSize = uint64(max(field.Type.Size(), 0)) * 8
		if field.BitSize > 0 {
			bitSize = uint64(field.BitSize)
		}
		t = field.Type
	}
	return bitOffset, bitSize, nil
}

// offsetOf is the byte offset of the member at path in type name.
func (ix *dwarfIndex) offsetOf(name, path string) (uint64, error) {
	bits, _, err := ix.member(name, path)
	if err != nil {
		return 0, err
	}
	if bits%8 != 0 {
		return 0, fmt.Errorf("%s.%s is a bitfield", name, path)
	}
	return bits / 8, nil
}

// findField is the field called name in st, or in an anonymous struct or
// union within it, with its offset in bits from st's start.
func findField(st *dwarf.StructType, name string) (*dwarf.StructField, uint64, bool) {
	for _, f := range st.Field {
		off := fieldBitOffset(f)
		if f.Name == name {
			return f, off, true
		}
		if f.Name == "" {
			if inner, ok := underlying(f.Type).(*dwarf.StructType); ok {
				if g, goff, found := findField(inner, name); found {
					return g, off + goff, true
				}
			}
		}
	}
	return nil, 0, false
}

// fieldBitOffset is f's offset in bits from its struct's start. DWARF 4+
// gives a bitfield's position as such (DataBitOffset); DWARF 2 and 3 from
// the most significant bit of its storage unit (BitOffset).
func fieldBitOffset(f *dwarf.StructField) uint64 {
	if f.BitSize == 0 {
		return uint64(f.ByteOffset) * 8
	}
	if f.DataBitOffset != 0 || f.BitOffset == 0 && f.ByteSize == 0 {
		return uint64(f.DataBitOffset)
	}
	return uint64(f.ByteOffset)*8 + uint64(f.ByteSize)*8 - uint64(f.BitOffset) - uint64(f.BitSize)
}

// underlying strips typedefs and qualifiers.
func underlying(t dwarf.Type) dwarf.Type {
	for {
		switch u := t.(type) {
		case *dwarf.TypedefType:
			t = u.Type
		case *dwarf.QualType:
			t = u.Type
		default:
			return t
		}
	}
}
