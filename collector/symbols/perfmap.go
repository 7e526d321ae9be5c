package symbols

import (
	"bufio"
	"bytes"
	"io"
	"slices"
	"strconv"
	"strings"
)

// perfSymbol is one line of a perf map: code a JIT compiler (the JVM,
// V8, LuaJIT, .NET) generated, which no file on disk describes.
type perfSymbol struct {
	start, size uint64
	name        string
}

// maxPerfMapSymbols bounds what is kept of one perf map: a JIT that
// writes one without end must not grow reqprof's memory with it.
const maxPerfMapSymbols = 1 << 20

// parsePerfMap reads a perf map, the format perf itself reads: a line per
// symbol, "START SIZE NAME", START and SIZE in hex (with or without 0x),
// NAME the rest of the line. Lines it cannot read are skipped. The result
// is sorted by start; where code was generated again at an address, the
// later line wins.
func parsePerfMap(r io.Reader) []perfSymbol {
	var syms []perfSymbol
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() && len(syms) < maxPerfMapSymbols {
		if s, ok := parsePerfMapLine(sc.Bytes()); ok {
			syms = append(syms, s)
		}
	}
	// Stable: of two lines at one start, the later stays last, and the
	// lookup takes the last.
	slices.SortStableFunc(syms, func(a, b perfSymbol) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})
	return syms
}

func parsePerfMapLine(line []byte) (perfSymbol, bool) {
	line = bytes.TrimSpace(line)
	startText, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return perfSymbol{}, false
	}
	sizeText, name, ok := bytes.Cut(bytes.TrimLeft(rest, " "), []byte(" "))
	if !ok {
		return perfSymbol{}, false
	}
	start, err1 := parseHex(startText)
	size, err2 := parseHex(sizeText)
	name = bytes.TrimSpace(name)
	if err1 != nil || err2 != nil || size == 0 || len(name) == 0 || start+size < start {
		return perfSymbol{}, false
	}
	return perfSymbol{start: start, size: size, name: strings.ToValidUTF8(string(name), "\uFFFD")}, true
}

func parseHex(b []byte) (uint64, error) {
	s := string(b)
	s = strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	return strconv.ParseUint(s, 16, 64)
}

// lookupPerfMap is the symbol of syms that covers addr.
func lookupPerfMap(syms []perfSymbol, addr uint64) (string, bool) {
	// The last symbol starting at or below addr.
	i, _ := slices.BinarySearchFunc(syms, addr+1, func(s perfSymbol, target uint64) int {
		if s.start < target {
			return -1
		}
		return 1
	})
	for i--; i >= 0; i-- {
		s := syms[i]
		if addr < s.start+s.size {
			return s.name, true
		}
		// An earlier, longer symbol may still cover addr; code regenerated
		// over an old symbol is rare enough that a short walk back will do.
		if addr-s.start > 1<<20 {
			break
		}
	}
	return "", false
}
