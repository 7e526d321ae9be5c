package symbols

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// object is what one binary or shared library says about its addresses:
// its loadable segments (to turn a file offset into an address the file
// numbers), and its functions, from Go's pclntab or ELF symbol tables.
type object struct {
	buildID  string
	loads    []elf.ProgHeader // PT_LOAD segments
	gotab    *gosym.Table     // a Go binary's functions and lines
	goFrames *goFrames        // and where they have pushed no frame
	syms     []elfSymbol      // sorted by address
	// demangled caches C++ names demangled as they are looked up: a
	// large binary has hundreds of thousands, and demangling them all
	// would take seconds.
	demangled map[string]string
	// why says why the object has no symbols, when it has none.
	why string
}

type elfSymbol struct {
	addr, size uint64
	name       string
}

// errNoSymbols marks an object that was read but names no function.
var errNoSymbols = errors.New("no symbols")

// maxObjectBytes bounds what is read of one object's symbol data; a
// section claiming more is treated as missing.
const maxObjectBytes = 512 << 20

// readObject reads what f's ELF headers, pclntab and symbol tables say;
// debugFile, when not nil, is asked for the separate debug file of an
// object with no .symtab (by build id, then .gnu_debuglink name). Malformed
// input gives an object with no symbols and a reason, never a panic.
func readObject(f io.ReaderAt, debugFile func(buildID, debuglink string) io.ReaderAt) (obj *object) {
	obj = &object{}
	defer func() {
		// debug/elf and debug/gosym are not hardened against every
		// malformed input; a binary read is outside input.
		if r := recover(); r != nil {
			obj = &object{why: fmt.Sprintf("unreadable (%v)", r)}
		}
	}()
	ef, err := elf.NewFile(f)
	if err != nil {
		obj.why = "not an ELF file: " + err.Error()
		return obj
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			obj.loads = append(obj.loads, p.ProgHeader)
		}
	}
	obj.buildID = buildIDOf(ef)
	if tab, frames, err := goTable(ef); err == nil {
		obj.gotab, obj.goFrames = tab, frames
	}
	// A Go binary's ELF symbols too: cgo's C code is in no pclntab.
	obj.syms = elfSymbols(ef)
	if obj.gotab == nil && !hasSection(ef, ".symtab") && debugFile != nil {
		if df := debugFile(obj.buildID, debuglinkOf(ef)); df != nil {
			if dsyms := debugSymbols(df, obj.buildID); len(dsyms) > 0 {
				obj.syms = mergeSymbols(obj.syms, dsyms)
			}
		}
	}
	if len(obj.syms) == 0 && obj.gotab == nil {
		obj.why = "no symbols (no .symtab or .dynsym, no pclntab, no debug file by build id or debuglink)"
	}
	return obj
}

// debugSymbols are the symbols of a separate debug file, if it is for the
// object of buildID (when both have one).
func debugSymbols(f io.ReaderAt, buildID string) (syms []elfSymbol) {
	defer func() {
		if recover() != nil {
			syms = nil
		}
	}()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil
	}
	if id := buildIDOf(ef); buildID != "" && id != "" && id != buildID {
		return nil
	}
	return elfSymbols(ef)
}

func hasSection(ef *elf.File, name string) bool {
	s := ef.Section(name)
	return s != nil && s.Type != elf.SHT_NOBITS
}

// elfSymbols are the function symbols of .symtab and .dynsym, sorted by
// address.
func elfSymbols(ef *elf.File) []elfSymbol {
	var syms []elfSymbol
	add := func(list []elf.Symbol, err error) {
		if err != nil {
			return
		}
		for _, s := range list {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Section == elf.SHN_UNDEF {
				continue
			}
			syms = append(syms, elfSymbol{addr: s.Value, size: s.Size, name: stripVersion(s.Name)})
		}
	}
	if sectionFits(ef, ".symtab") {
		add(ef.Symbols())
	}
	if sectionFits(ef, ".dynsym") {
		add(ef.DynamicSymbols())
	}
	return sortSymbols(syms)
}

// sectionFits says a section is there, has data in the file, and is not
// larger than what reqprof reads.
func sectionFits(ef *elf.File, name string) bool {
	s := ef.Section(name)
	return s != nil && s.Type != elf.SHT_NOBITS && s.Size <= maxObjectBytes
}

// stripVersion drops a dynamic symbol's version ("memcpy@@GLIBC_2.14").
func stripVersion(name string) string {
	if i := strings.Index(name, "@"); i > 0 {
		return name[:i]
	}
	return name
}

// sortSymbols sorts by address and keeps one symbol per address: the one
// with a size, else the first (.symtab's before .dynsym's).
func sortSymbols(syms []elfSymbol) []elfSymbol {
	slices.SortStableFunc(syms, func(a, b elfSymbol) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	out := syms[:0]
	for _, s := range syms {
		if n := len(out); n > 0 && out[n-1].addr == s.addr {
			if out[n-1].size == 0 && s.size > 0 {
				out[n-1] = s
			}
			continue
		}
		out = append(out, s)
	}
	return slices.Clip(out)
}

func mergeSymbols(a, b []elfSymbol) []elfSymbol {
	return sortSymbols(append(append([]elfSymbol(nil), b...), a...))
}

// lookupSymbol is the function of syms that holds addr: the last at or
// below it, if its size covers addr (a symbol without a size runs to the
// next one).
func lookupSymbol(syms []elfSymbol, addr uint64) (string, bool) {
	i, _ := slices.BinarySearchFunc(syms, addr+1, func(s elfSymbol, target uint64) int {
		if s.addr < target {
			return -1
		}
		return 1
	})
	if i == 0 {
		return "", false
	}
	s := syms[i-1]
	if s.size > 0 && addr >= s.addr+s.size {
		return "", false
	}
	return s.name, true
}

// fileAddress is the address the object's own file gives what is at
// offset off of it: the PT_LOAD segment holding off says.
func (o *object) fileAddress(off uint64) (uint64, bool) {
	for _, p := range o.loads {
		if off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// function names the function at addr (the file's own numbering), with
// its file and line when the object says.
func (o *object) function(addr uint64) (name, file string, line int, ok bool) {
	if o.gotab != nil {
		if file, line, fn := o.gotab.PCToLine(addr); fn != nil {
			return fn.Name, file, line, true
		}
	}
	name, ok = lookupSymbol(o.syms, addr)
	if ok && strings.HasPrefix(name, "_Z") {
		name = o.demangle(name)
	}
	return name, "", 0, ok
}

// demangle is a C++ symbol's name as its source spells it.
func (o *object) demangle(mangled string) string {
	if name, ok := o.demangled[mangled]; ok {
		return name
	}
	if o.demangled == nil {
		o.demangled = map[string]string{}
	}
	name := demangle.Filter(mangled)
	o.demangled[mangled] = name
	return name
}

// goTable reads a Go binary's pclntab: from its .gopclntab section, or,
// in a binary whose section headers were stripped too, by its header's
// magic in the read-only data. The pclntab survives `strip` and
// `-ldflags=-s`, as the runtime needs it for its own tracebacks.
func goTable(ef *elf.File) (*gosym.Table, *goFrames, error) {
	var data []byte
	if s := ef.Section(".gopclntab"); s != nil && s.Type != elf.SHT_NOBITS && s.Size <= maxObjectBytes {
		b, err := s.Data()
		if err != nil {
			return nil, nil, err
		}
		data = b
	} else if data = scanPclntab(ef); data == nil {
		return nil, nil, errNoSymbols
	}
	if !pclntabSized(data) {
		return nil, nil, errNoSymbols
	}
	textStart := textStartOf(ef, data)
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, textStart))
	if err != nil {
		return nil, nil, err
	}
	if len(tab.Funcs) == 0 {
		return nil, nil, errNoSymbols
	}
	return tab, newGoFrames(data, textStart), nil
}

// frameless says the function at addr (the file's numbering) has pushed
// no frame there, as far as the object says: its return address is on top
// of the stack.
func (o *object) frameless(addr uint64) bool {
	delta, ok := o.goFrames.spDelta(addr)
	return ok && delta == 0
}

// pclntabMagics are the versions a Go 1.16+ pclntab starts with. Kept as
// numbers, so that reqprof's own binary holds them as no data its scan
// could take for a pclntab.
var pclntabMagics = []uint32{0xfffffff1 /* Go 1.20+ */, 0xfffffff0 /* 1.18, 1.19 */, 0xfffffffa /* 1.16, 1.17 */}

// maxPclntabCandidates bounds the places a scan tries as a pclntab.
const maxPclntabCandidates = 64

// scanPclntab looks for a pclntab in the non-executable loaded segments
// of a binary without section headers: its magic, two zero bytes, the
// instruction size quantum (1 on x86) and the pointer size (8), then a
// count of functions that the table parsed from there has. Nil when none.
func scanPclntab(ef *elf.File) []byte {
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X != 0 || p.Filesz > maxObjectBytes {
			continue
		}
		// Read as far as the file goes, not as far as its header claims.
		data, err := io.ReadAll(p.Open())
		if err != nil {
			continue
		}
		for _, magic := range pclntabMagics {
			header := binary.LittleEndian.AppendUint32(nil, magic)
			header = append(header, 0, 0, 1, 8)
			tries := 0
			for from := 0; tries < maxPclntabCandidates; tries++ {
				i := bytes.Index(data[from:], header)
				if i < 0 {
					break
				}
				candidate := data[from+i:]
				if plausiblePclntab(candidate) {
					return candidate
				}
				from += i + 1
			}
		}
	}
	return nil
}

// plausiblePclntab says whether data parses as a pclntab of as many
// functions as its header counts.
func plausiblePclntab(data []byte) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	if !pclntabSized(data) {
		return false
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, 0))
	return err == nil && uint64(len(tab.Funcs)) == binary.LittleEndian.Uint64(data[8:])
}

// maxGoFunctions bounds the functions a pclntab may claim: the largest Go
// binaries have a few hundred thousand, and debug/gosym makes a Func for
// each a table claims before it reads them.
const maxGoFunctions = 1 << 20

// pclntabSized says a pclntab header claims a count of functions its
// data has room for in its function table, and not more than
// maxGoFunctions, in either byte order: debug/gosym reads the magic both
// ways, and makes a Func for each function a table claims before it reads
// them, so a claim read big-endian from a little-endian check's blind
// spot would make it allocate gigabytes. Data with no pclntab magic
// passes: debug/gosym reads no functions from it.
func pclntabSized(data []byte) bool {
	if len(data) < 16 {
		return false
	}
	ptrSize := uint64(data[7])
	var order binary.ByteOrder
	var entrySize uint64 // bytes per function in the function table
	for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		switch o.Uint32(data) {
		case 0xfffffff1, 0xfffffff0, 0xfffffffa: // Go 1.16+: two uint32s
			order, entrySize = o, 8
		case 0xfffffffb: // Go 1.2 to 1.15: two pointer-sized words
			order, entrySize = o, 2*ptrSize
		}
	}
	if order == nil {
		return true
	}
	var nfunc uint64
	switch ptrSize {
	case 4:
		nfunc = uint64(order.Uint32(data[8:]))
	case 8:
		nfunc = order.Uint64(data[8:])
	default:
		return false
	}
	return nfunc > 0 && nfunc <= maxGoFunctions && nfunc*entrySize <= uint64(len(data))
}

// textStartOf is where a Go binary's text starts, which pclntab entries
// are offsets from: the runtime.text symbol where symbols remain, else the
// pclntab header's own field (Go 1.18 to 1.25; later ones leave it 0),
// else the .text section, else the first executable segment (the linker
// puts .text at its start).
func textStartOf(ef *elf.File, pclntab []byte) uint64 {
	if syms, err := ef.Symbols(); err == nil {
		for _, s := range syms {
			if s.Name == "runtime.text" {
				return s.Value
			}
		}
	}
	// Go 1.18+: magic(4) pad(2) minLC(1) ptrSize(1) nfunc nfiles textStart.
	if len(pclntab) >= 32 && (pclntab[0] == 0xf0 || pclntab[0] == 0xf1) && pclntab[7] == 8 {
		if start := binary.LittleEndian.Uint64(pclntab[24:]); start != 0 {
			return start
		}
	}
	if s := ef.Section(".text"); s != nil {
		return s.Addr
	}
	// No sections either: the entry point is the runtime's _rt0 function,
	// whose offset into the text the table gives.
	if tab, err := gosym.NewTable(nil, gosym.NewLineTable(pclntab, 0)); err == nil {
		for _, fn := range tab.Funcs {
			if strings.HasPrefix(fn.Name, "_rt0_") && strings.HasSuffix(fn.Name, "_linux") && ef.Entry >= fn.Entry {
				return ef.Entry - fn.Entry
			}
		}
	}
	return 0
}

// buildIDOf is the GNU build id of an ELF file, in hex; "" when it has
// none. Go binaries carry one too (their own, and a GNU one when linked
// with -B or externally).
func buildIDOf(ef *elf.File) string {
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > 1<<16 {
			continue
		}
		data, err := io.ReadAll(p.Open())
		if err != nil {
			continue
		}
		if id := gnuBuildID(data, ef.ByteOrder); id != "" {
			return id
		}
	}
	return ""
}

// gnuBuildID finds the NT_GNU_BUILD_ID note among notes.
func gnuBuildID(notes []byte, order binary.ByteOrder) string {
	for len(notes) >= 12 {
		nameSize, descSize, kind := order.Uint32(notes), order.Uint32(notes[4:]), order.Uint32(notes[8:])
		notes = notes[12:]
		nameEnd := align4(uint64(nameSize))
		descEnd := nameEnd + align4(uint64(descSize))
		if descEnd > uint64(len(notes)) {
			return ""
		}
		name := notes[:nameSize]
		desc := notes[nameEnd : nameEnd+uint64(descSize)]
		if kind == 3 && string(bytes.TrimRight(name, "\x00")) == "GNU" { // NT_GNU_BUILD_ID
			return hex.EncodeToString(desc)
		}
		notes = notes[descEnd:]
	}
	return ""
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// debuglinkOf is the file name a .gnu_debuglink section gives, "" when none.
func debuglinkOf(ef *elf.File) string {
	s := ef.Section(".gnu_debuglink")
	if s == nil || s.Size > 4096 {
		return ""
	}
	data, err := s.Data()
	if err != nil {
		return ""
	}
	name, _, _ := bytes.Cut(data, []byte{0})
	if len(name) == 0 || bytes.ContainsAny(name, "/") {
		return ""
	}
	return string(name)
}
