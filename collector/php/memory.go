package php

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Memory reads a process's memory: /proc/PID/mem (an *os.File), or a
// fake in tests. The process runs while it is read: whatever is read is
// checked before it is believed.
type Memory interface {
	ReadAt(p []byte, addr int64) (int, error)
}

// reader reads values from a process's memory.
type reader struct{ mem Memory }

// read fills p from addr, whole or not at all.
func (r reader) read(p []byte, addr uint64) error {
	if addr == 0 || addr >= 1<<47 || addr+uint64(len(p)) < addr {
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

// block is a structure's first bytes, read at once.
type block []byte

func (b block) u64(off uint64) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
func (b block) u32(off uint64) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
func (b block) u8(off uint64) uint8   { return b[off] }
