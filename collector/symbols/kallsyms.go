package symbols

import (
	"bufio"
	"bytes"
	"io"
	"slices"
)

// kernelSymbol is one text symbol of /proc/kallsyms.
type kernelSymbol struct {
	addr   uint64
	name   string
	module string // "" for the kernel's own text
}

// parseKallsyms reads /proc/kallsyms, "ADDR TYPE NAME [MODULE]" a line,
// keeping text symbols, sorted by address. When every address reads 0
// (kptr_restrict hides them from this reader), hidden is true. The kernel
// lists some 100,000 symbols: their names are cut from one string, and the
// lines are split by hand, to read them in a few tens of milliseconds.
func parseKallsyms(r io.Reader) (syms []kernelSymbol, hidden bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	type span struct{ start, end int }
	type parsed struct {
		addr         uint64
		name, module span
	}
	var lines []parsed
	var arena []byte
	nonZero, seen := false, 0
	for sc.Scan() {
		line := sc.Bytes()
		addrText, rest, ok := bytes.Cut(line, []byte{' '})
		if !ok || len(rest) < 3 || rest[1] != ' ' {
			continue
		}
		seen++
		addr, ok := parseHexBytes(addrText)
		if !ok {
			continue
		}
		if addr != 0 {
			nonZero = true
		}
		switch rest[0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		// The module follows a tab; names have no blanks.
		name, module := rest[2:], []byte(nil)
		if i := bytes.IndexAny(name, " \t"); i >= 0 {
			name, module = name[:i], name[i+1:]
		}
		if len(name) == 0 {
			continue
		}
		p := parsed{addr: addr}
		p.name = span{len(arena), len(arena) + len(name)}
		arena = append(arena, name...)
		if module = bytes.Trim(bytes.TrimSpace(module), "[]"); len(module) > 0 {
			p.module = span{len(arena), len(arena) + len(module)}
			arena = append(arena, module...)
		}
		lines = append(lines, p)
	}
	if seen > 0 && !nonZero {
		return nil, true
	}
	all := string(arena)
	syms = make([]kernelSymbol, len(lines))
	for i, p := range lines {
		syms[i] = kernelSymbol{addr: p.addr, name: all[p.name.start:p.name.end], module: all[p.module.start:p.module.end]}
	}
	slices.SortStableFunc(syms, func(a, b kernelSymbol) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	return syms, false
}

// parseHexBytes reads a hex number of at most 16 digits.
func parseHexBytes(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(c)
	}
	return n, true
}

// lookupKernel is the symbol of syms at or below addr: kallsyms gives no
// sizes, so a symbol runs to the next one.
func lookupKernel(syms []kernelSymbol, addr uint64) (kernelSymbol, bool) {
	i, _ := slices.BinarySearchFunc(syms, addr+1, func(s kernelSymbol, target uint64) int {
		if s.addr < target {
			return -1
		}
		return 1
	})
	if i == 0 {
		return kernelSymbol{}, false
	}
	return syms[i-1], true
}
