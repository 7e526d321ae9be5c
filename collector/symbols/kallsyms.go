package symbols

import (
	"bufio"
	"bytes"
	"io"
	"slices"
	"strconv"
	"strings"
)

// kernelSymbol is one text symbol of /proc/kallsyms.
type kernelSymbol struct {
	addr   uint64
	name   string
	module string // "" for the kernel's own text
}

// parseKallsyms reads /proc/kallsyms, "ADDR TYPE NAME [MODULE]" a line,
// keeping text symbols, sorted by address. When every address reads 0
// (kptr_restrict hides them from this reader), hidden is true.
func parseKallsyms(r io.Reader) (syms []kernelSymbol, hidden bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	nonZero := false
	lines := 0
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) < 3 || len(fields[1]) != 1 {
			continue
		}
		lines++
		addr, err := strconv.ParseUint(string(fields[0]), 16, 64)
		if err != nil {
			continue
		}
		if addr != 0 {
			nonZero = true
		}
		switch fields[1][0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		s := kernelSymbol{addr: addr, name: string(fields[2])}
		if len(fields) > 3 {
			s.module = strings.Trim(string(fields[3]), "[]")
		}
		syms = append(syms, s)
	}
	if lines > 0 && !nonZero {
		return nil, true
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
