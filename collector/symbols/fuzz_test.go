package symbols

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os"
	"testing"
)

// Perf maps are written by whatever JIT runs in the target: any bytes
// must parse without a panic, and every symbol kept must be well formed.
func FuzzParsePerfMap(f *testing.F) {
	f.Add([]byte("7f0000001000 100 LazyCompile:*handle app.js:10\n0x7f0000002000 0x80 Interpreter\n"))
	f.Add([]byte("ffffffffffffffff 2 wraps\n1 0 empty\n \n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		syms := parsePerfMap(bytes.NewReader(data))
		for i, s := range syms {
			if s.size == 0 || s.start+s.size < s.start || s.name == "" {
				t.Fatalf("symbol %+v kept", s)
			}
			if i > 0 && syms[i-1].start > s.start {
				t.Fatal("symbols not sorted")
			}
			if name, ok := lookupPerfMap(syms, s.start); !ok || name == "" {
				t.Fatalf("the start of %+v resolves to nothing", s)
			}
		}
	})
}

// Maps lines come from the kernel, but paths in them from anyone who can
// name a file: any line must parse or fail, never panic.
func FuzzParseMapsLine(f *testing.F) {
	f.Add([]byte("7f6aefb4c000-7f6aefca2000 r-xp 00026000 fe:00 326269   /usr/lib/x86_64-linux-gnu/libc.so.6"))
	f.Add([]byte("7f0000000000-7f0000010000 rwxp 00000000 00:00 0 "))
	f.Add([]byte("1-0 r-xp 0 0:0 1 /a (deleted)"))
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := parseMapsLine(line)
		if err == nil && m.end < m.start {
			t.Fatalf("mapping %+v ends before it starts", m)
		}
		maps := parseMaps(bytes.NewReader(line))
		for _, m := range maps {
			if _, ok := find(maps, m.start); !ok && m.end > m.start {
				t.Fatalf("mapping %+v does not hold its start", m)
			}
		}
	})
}

// A binary is outside input: whatever its bytes, reading its symbols and
// resolving any address in it gives names or nothing, never a panic.
func FuzzReadObject(f *testing.F) {
	if exe, err := os.Executable(); err == nil {
		if b, err := os.ReadFile(exe); err == nil && len(b) > 8192 {
			f.Add(b[:8192], uint64(0x401000))
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01\x00"), uint64(0))
	f.Add([]byte{}, uint64(1))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		obj := readObject(bytes.NewReader(data), nil)
		obj.function(addr)
		obj.fileAddress(addr)
		obj.frameless(addr)
		if obj.gotab == nil && len(obj.syms) == 0 && obj.why == "" {
			t.Fatal("an object with no symbols says no why")
		}
	})
}

// kallsyms is read whole; a line of any shape must be skipped, not fatal.
func FuzzParseKallsyms(f *testing.F) {
	f.Add([]byte("ffffffff81000000 T _stext\nffffffffc0001000 t ext4_write [ext4]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		syms, _ := parseKallsyms(bytes.NewReader(data))
		for i := 1; i < len(syms); i++ {
			if syms[i-1].addr > syms[i].addr {
				t.Fatal("not sorted")
			}
		}
		if len(syms) > 0 {
			lookupKernel(syms, syms[0].addr)
		}
	})
}

// tinyPclntab is a Go 1.20 pclntab of one function, 100 bytes of text
// from textStart, whose pcsp table says it pushes nothing for 4 bytes and
// 8 bytes after.
func tinyPclntab(textStart uint64) []byte {
	const pctab, pcln = 72, 80
	b := make([]byte, 116)
	binary.LittleEndian.PutUint32(b, 0xfffffff1)
	b[6], b[7] = 1, 8                       // quantum, pointer size
	binary.LittleEndian.PutUint64(b[8:], 1) // nfunc
	binary.LittleEndian.PutUint64(b[24:], textStart)
	binary.LittleEndian.PutUint64(b[56:], pctab)
	binary.LittleEndian.PutUint64(b[64:], pcln)
	copy(b[pctab+1:], []byte{2, 4, 16, 96, 0}) // +1 (to 0) for 4, +8 for 96, end
	binary.LittleEndian.PutUint32(b[pcln:], 0) // function 0's entry and _func
	binary.LittleEndian.PutUint32(b[pcln+4:], 16)
	binary.LittleEndian.PutUint32(b[pcln+8:], 100)   // the end of the text
	binary.LittleEndian.PutUint32(b[pcln+16+16:], 1) // _func.pcsp
	return b
}

func TestTinyPclntab(t *testing.T) {
	g := newGoFrames(tinyPclntab(0x1000), 0x1000)
	for _, c := range []struct {
		pc    uint64
		delta int64
		ok    bool
	}{{0x1000, 0, true}, {0x1003, 0, true}, {0x1004, 8, true}, {0x1063, 8, true}, {0x1064, 0, false}, {0xfff, 0, false}} {
		if delta, ok := g.spDelta(c.pc); delta != c.delta || ok != c.ok {
			t.Errorf("spDelta(%#x) = %d, %v; want %d, %v", c.pc, delta, ok, c.delta, c.ok)
		}
	}
}

// A pclntab is read from a binary's bytes, and its pcsp tables at each
// sampled pc: any bytes give a delta or nothing, never a panic.
func FuzzGoFrames(f *testing.F) {
	f.Add(tinyPclntab(0x1000), uint64(0x1000), uint64(0x1004))
	f.Add(tinyPclntab(0), uint64(0), uint64(99))
	f.Fuzz(func(t *testing.T, data []byte, textStart, pc uint64) {
		g := newGoFrames(data, textStart)
		delta, ok := g.spDelta(pc)
		if again, againOK := g.spDelta(pc); again != delta || againOK != ok {
			t.Fatalf("spDelta(%#x) = %d, %v, then %d, %v", pc, delta, ok, again, againOK)
		}
		if g == nil && ok {
			t.Fatal("a table not read gave a delta")
		}
		plausiblePclntab(data)
	})
}

// Notes are a binary's: the build id found in them is what they hold.
func FuzzGNUBuildID(f *testing.F) {
	note := []byte{4, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0, 0xde, 0xad, 0xbe, 0xef}
	f.Add(note)
	f.Add(append([]byte{2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 'G', 'o', 0, 0}, note...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 3, 0, 0, 0})
	f.Fuzz(func(t *testing.T, notes []byte) {
		id := gnuBuildID(notes, binary.LittleEndian)
		if id == "" {
			return
		}
		raw, err := hex.DecodeString(id)
		if err != nil || !bytes.Contains(notes, raw) {
			t.Fatalf("build id %q is not in the notes %x", id, notes)
		}
	})
}

// A pclntab header is checked for the functions it claims whichever byte
// order its magic is read in: debug/gosym would allocate for each.
func TestPclntabSizedEitherOrder(t *testing.T) {
	if !pclntabSized(tinyPclntab(0)) {
		t.Error("a pclntab of one function is refused")
	}
	// The magic of Go 1.20 big-endian, claiming 0x30000000 functions
	// (found by FuzzGoFrames: debug/gosym ran out of memory on it).
	bigEndian := []byte("\xff\xff\xff\xf1\x00\x00\x01\x08\x00\x00\x00\x000\x00\x00\x00\x00\x00\x00\x00")
	go12 := binary.LittleEndian.AppendUint32(nil, 0xfffffffb)
	go12 = append(go12, 0, 0, 1, 8)
	go12 = binary.LittleEndian.AppendUint64(go12, 1<<40)
	for name, data := range map[string][]byte{"big-endian": bigEndian, "Go 1.2": go12} {
		if pclntabSized(data) {
			t.Errorf("the %s header claiming more functions than it holds passes", name)
		}
		if plausiblePclntab(data) {
			t.Errorf("the %s header is taken for a pclntab", name)
		}
	}
}
