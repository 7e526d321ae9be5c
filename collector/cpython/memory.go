package cpython

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// memory is a process's memory: /proc/PID/mem (an *os.File), or a
// fake in tests. Reads are of a running process, whose memory changes
// under them: whatever is read is checked before it is believed.
type memory interface {
	ReadAt(p []byte, addr int64) (int, error)
}

// reader reads values from a process's memory.
type reader struct{ mem memory }

// read fills p from addr, whole or not at all.
func (r reader) read(p []byte, addr uint64) error {
	if addr == 0 || addr >= 1<<63 || addr+uint64(len(p)) < addr {
		return fmt.Errorf("address %#x: not a user address", addr)
	}
	n, err := r.mem.ReadAt(p, int64(addr))
	if n == len(p) {
		return nil
	}
	if err == nil {
		err = errors.New("short read")
	}
	return fmt.Errorf("reading %d bytes at %#x: %w", len(p), addr, err)
}

func (r reader) u64(addr uint64) (uint64, error) {
	var b [8]byte
	if err := r.read(b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func (r reader) u32(addr uint64) (uint32, error) {
	var b [4]byte
	if err := r.read(b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

// cString reads a NUL-terminated string of at most max bytes at addr.
func (r reader) cString(addr uint64, max int) (string, error) {
	buf := make([]byte, 0, max)
	chunk := make([]byte, 64)
	for len(buf) < max {
		// Never read across a page: the string may end just before one
		// that is not mapped.
		n := min(len(chunk), int(4096-addr%4096), max-len(buf))
		if err := r.read(chunk[:n], addr); err != nil {
			return "", err
		}
		if i := bytes.IndexByte(chunk[:n], 0); i >= 0 {
			return string(append(buf, chunk[:i]...)), nil
		}
		buf = append(buf, chunk[:n]...)
		addr += uint64(n)
	}
	return "", fmt.Errorf("no string of at most %d bytes at %#x", max, addr)
}

// span is a structure's bytes read at once: the fields from base on.
type span struct {
	base uint64 // the offset of b[0] in the structure
	b    []byte
}

// u64 is the 8 bytes at offset off of the structure.
func (s span) u64(off uint64) uint64 {
	return binary.LittleEndian.Uint64(s.b[off-s.base:])
}

func (s span) u32(off uint64) uint32 {
	return binary.LittleEndian.Uint32(s.b[off-s.base:])
}

func (s span) u8(off uint64) uint8 { return s.b[off-s.base] }

// spanOf is the smallest span that holds the 8-byte fields at offsets
// (Absent ones left out).
func spanOf(offsets ...uint64) (base, size uint64) {
	lo, hi := Absent, uint64(0)
	for _, o := range offsets {
		if o == Absent {
			continue
		}
		lo, hi = min(lo, o), max(hi, o+8)
	}
	return lo, hi - lo
}

// readSpan reads the span of the structure at addr from base, size bytes.
func (r reader) readSpan(addr, base, size uint64) (span, error) {
	b := make([]byte, size)
	if err := r.read(b, addr+base); err != nil {
		return span{}, err
	}
	return span{base, b}, nil
}
