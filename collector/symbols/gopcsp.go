package symbols

import "encoding/binary"

// goFrames reads from a Go 1.18+ pclntab how far each function has moved
// the stack pointer at a pc (its pcsp table): 0 where it has not pushed a
// frame, a leaf the compiler gave none or a function in its prologue.
// There, its return address is on top of the stack, and a walk of frame
// pointers (the kernel's) skips its caller, which the sample's
// user_stack_top gives back. debug/gosym reads the tables but keeps this
// one to itself.
type goFrames struct {
	data        []byte
	textStart   uint64
	quantum     uint64 // the instruction size unit pcs are counted in
	nfunc       uint64
	functab     []byte // nfunc+1 (entry offset, _func offset) pairs of uint32
	pclnOffset  uint64
	pctabOffset uint64
}

// newGoFrames reads a pclntab's header; nil for a version it does not
// know (before Go 1.18) or a header that does not fit its data.
func newGoFrames(data []byte, textStart uint64) *goFrames {
	if len(data) < 72 || data[7] != 8 {
		return nil
	}
	switch binary.LittleEndian.Uint32(data) {
	case 0xfffffff0, 0xfffffff1: // Go 1.18, 1.20
	default:
		return nil
	}
	u64 := func(at int) uint64 { return binary.LittleEndian.Uint64(data[at:]) }
	g := &goFrames{data: data, textStart: textStart, quantum: uint64(data[6]), nfunc: u64(8), pctabOffset: u64(56), pclnOffset: u64(64)}
	if g.quantum == 0 || g.nfunc == 0 || g.nfunc > maxGoFunctions || g.pclnOffset > uint64(len(data)) || g.pctabOffset > uint64(len(data)) {
		return nil
	}
	end := g.pclnOffset + 8*(g.nfunc+1)
	if end > uint64(len(data)) {
		return nil
	}
	g.functab = data[g.pclnOffset:end]
	return g
}

// spDelta is how far the function holding pc has moved the stack pointer
// there; false when no function holds pc or its table cannot be read.
func (g *goFrames) spDelta(pc uint64) (int64, bool) {
	if g == nil || pc < g.textStart {
		return 0, false
	}
	off := pc - g.textStart
	entryOff := func(i uint64) uint64 { return uint64(binary.LittleEndian.Uint32(g.functab[8*i:])) }
	// The last function whose entry is at or below pc.
	lo, hi := uint64(0), g.nfunc
	for lo < hi {
		mid := (lo + hi) / 2
		if entryOff(mid) <= off {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 || off >= entryOff(g.nfunc) {
		return 0, false
	}
	i := lo - 1
	funcOff := uint64(binary.LittleEndian.Uint32(g.functab[8*i+4:]))
	fn := g.pclnOffset + funcOff
	if fn+20 > uint64(len(g.data)) {
		return 0, false
	}
	// struct _func: entryOff, nameOff, args, deferreturn, pcsp (uint32s).
	pcsp := uint64(binary.LittleEndian.Uint32(g.data[fn+16:]))
	if pcsp == 0 {
		return 0, false
	}
	entry := g.textStart + uint64(binary.LittleEndian.Uint32(g.data[fn:]))
	return g.pcValue(g.pctabOffset+pcsp, entry, pc)
}

// pcValue runs a pc-value table from at, for a function that starts at
// entry, to the value at target: pairs of a zig-zag varint change of value
// and a varint advance of pc (in quanta), the value starting at -1, the
// table ending at a change of 0 after the first.
func (g *goFrames) pcValue(at, entry, target uint64) (int64, bool) {
	value, pc := int64(-1), entry
	for first := true; at < uint64(len(g.data)); first = false {
		uv, n := binary.Uvarint(g.data[at:])
		if n <= 0 || (uv == 0 && !first) {
			return 0, false
		}
		at += uint64(n)
		value += int64(uv>>1) ^ -int64(uv&1)
		step, n := binary.Uvarint(g.data[at:])
		if n <= 0 {
			return 0, false
		}
		at += uint64(n)
		pc += step * g.quantum
		if target < pc {
			return value, true
		}
	}
	return 0, false
}
