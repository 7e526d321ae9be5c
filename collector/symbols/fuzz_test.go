package symbols

import (
	"bytes"
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
