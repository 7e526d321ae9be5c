package symbols

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// mapping is one line of /proc/PID/maps: a range of the process's address
// space and what it maps.
type mapping struct {
	start, end uint64
	offset     uint64 // into the file
	exec       bool
	dev        string // major:minor of the file's device
	inode      uint64
	path       string // the file's path, "[vdso]", "" for anonymous memory
	deleted    bool   // the file was deleted (or replaced) since it was mapped
}

// file says whether the mapping maps a file, as opposed to anonymous
// memory or one of the kernel's ([vdso], [heap], [stack]).
func (m mapping) file() bool { return m.inode != 0 && strings.HasPrefix(m.path, "/") }

// parseMaps reads /proc/PID/maps, keeping the executable mappings and
// skipping lines it cannot read.
func parseMaps(r io.Reader) []mapping {
	var maps []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		m, err := parseMapsLine(sc.Bytes())
		if err != nil || !m.exec {
			continue
		}
		maps = append(maps, m)
	}
	return maps
}

// parseMapsLine reads one line of /proc/PID/maps:
//
//	7f6aefb4c000-7f6aefca2000 r-xp 00026000 fe:00 326269   /usr/lib/x86_64-linux-gnu/libc.so.6
func parseMapsLine(line []byte) (mapping, error) {
	var m mapping
	fields := make([][]byte, 0, 6)
	rest := line
	for len(fields) < 5 {
		rest = bytes.TrimLeft(rest, " \t")
		i := bytes.IndexAny(rest, " \t")
		if i < 0 {
			if len(rest) > 0 {
				fields = append(fields, rest)
			}
			rest = nil
			break
		}
		fields = append(fields, rest[:i])
		rest = rest[i:]
	}
	if len(fields) < 5 {
		return m, fmt.Errorf("maps line %q: too few fields", line)
	}
	lo, hi, ok := bytes.Cut(fields[0], []byte("-"))
	if !ok {
		return m, fmt.Errorf("maps line %q: no range", line)
	}
	var err error
	if m.start, err = strconv.ParseUint(string(lo), 16, 64); err != nil {
		return m, fmt.Errorf("maps line %q: %w", line, err)
	}
	if m.end, err = strconv.ParseUint(string(hi), 16, 64); err != nil || m.end < m.start {
		return m, fmt.Errorf("maps line %q: bad range", line)
	}
	perms := fields[1]
	m.exec = len(perms) >= 3 && perms[2] == 'x'
	if m.offset, err = strconv.ParseUint(string(fields[2]), 16, 64); err != nil {
		return m, fmt.Errorf("maps line %q: %w", line, err)
	}
	m.dev = string(fields[3])
	if m.inode, err = strconv.ParseUint(string(fields[4]), 10, 64); err != nil {
		return m, fmt.Errorf("maps line %q: %w", line, err)
	}
	m.path = strings.TrimLeft(string(rest), " \t")
	if p, ok := strings.CutSuffix(m.path, " (deleted)"); ok {
		m.path, m.deleted = p, true
	}
	return m, nil
}

// find is the mapping of maps (sorted by start, as the kernel lists them)
// that holds addr.
func find(maps []mapping, addr uint64) (mapping, bool) {
	lo, hi := 0, len(maps)
	for lo < hi {
		mid := (lo + hi) / 2
		if maps[mid].end <= addr {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(maps) && maps[lo].start <= addr && addr < maps[lo].end {
		return maps[lo], true
	}
	return mapping{}, false
}
