package cpython

// Line tables map a code object's instruction offsets (in bytes) to
// source lines. CPython changed their format twice in the releases known
// here; each decoder gives what PyCode_Addr2Line gives for an offset:
// -1 for an instruction of no line (or an offset the table does not
// cover), the first line for a negative offset (a frame not started).

// lineOf310 decodes 3.10's co_linetable (Objects/lnotab_notes.txt in
// 3.10): pairs of an unsigned byte, the length of a range of bytecode,
// and a signed byte, the change of line at the range's start (-128: the
// range has no line). Ranges of length 0 only carry a change of line.
func lineOf310(table []byte, firstLine, offset int) int {
	if offset < 0 {
		return firstLine
	}
	line, start := firstLine, 0
	for i := 0; i+1 < len(table); i += 2 {
		end := start + int(table[i])
		delta := int8(table[i+1])
		rangeLine := -1
		if delta != -128 {
			line += int(delta)
			rangeLine = line
		}
		if start <= offset && offset < end {
			return rangeLine
		}
		start = end
	}
	return -1
}

// Location table entry codes (3.11+, Objects/locations.md).
const (
	locShortForms  = 10 // codes 0-9: the line of the last entry, a byte of columns
	locOneLine0    = 10 // codes 10-12: the line moves by 0-2, two bytes of columns
	locOneLine2    = 12
	locNoColumns   = 13 // a signed varint: the line's change
	locLong        = 14 // a signed varint (the line's change), then end line, column, end column
	locNone        = 15 // no location
	codeUnitSize   = 2  // bytes in a _Py_CODEUNIT
	maxLocationLen = 8  // code units an entry covers: 1-8
)

// lineOf311 decodes the location table of 3.11 and later: entries that
// each start with a byte whose top bit is set, bits 3-6 the entry's code
// and bits 0-2 the number of code units it covers, less one; then the
// code's operands, in bytes whose top bit is clear.
func lineOf311(table []byte, firstLine, offset int) int {
	if offset < 0 {
		return firstLine
	}
	line, start := firstLine, 0
	for i := 0; i < len(table); {
		head := table[i]
		if head&0x80 == 0 {
			return -1 // not at an entry: a malformed table
		}
		code := int(head>>3) & 15
		end := start + (int(head&7)+1)*codeUnitSize
		i++
		rangeLine := line
		switch {
		case code == locNone:
			rangeLine = -1
		case code == locNoColumns || code == locLong:
			delta, n := signedVarint(table[i:])
			if n == 0 {
				return -1
			}
			line += delta
			rangeLine = line
		case code >= locOneLine0 && code <= locOneLine2:
			line += code - locOneLine0
			rangeLine = line
		}
		// Skip the operands: to the next entry's first byte.
		for i < len(table) && table[i]&0x80 == 0 {
			i++
		}
		if start <= offset && offset < end {
			return rangeLine
		}
		start = end
	}
	return -1
}

// varint reads an unsigned varint of the location table: 6 bits a byte,
// least significant first, bit 6 set in every byte but the last. n is
// the bytes read, 0 when b ends first or the value overflows.
func varint(b []byte) (v uint64, n int) {
	for shift := 0; n < len(b) && shift < 64; shift += 6 {
		c := b[n]
		n++
		v |= uint64(c&63) << shift
		if c&64 == 0 {
			return v, n
		}
	}
	return 0, 0
}

// signedVarint reads a signed varint: the sign in the lowest bit.
func signedVarint(b []byte) (int, int) {
	v, n := varint(b)
	if v&1 != 0 {
		return -int(v >> 1), n
	}
	return int(v >> 1), n
}
