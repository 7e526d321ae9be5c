package cpython

import (
	"debug/elf"
	"fmt"
	"strings"
	"testing"
)

// pyenvLibrary is the libpython of pyenv's build of release 3.N on this
// machine (and CI's); the test fails under CI, and skips elsewhere, when
// it is absent.
func pyenvLibrary(t testing.TB, minor int) string {
	t.Helper()
	for _, in := range interpreters {
		if in.dwarf && in.release.Minor == minor {
			lib := in.path[:strings.LastIndex(in.path, "/bin/")] + fmt.Sprintf("/lib/libpython3.%d.so.1.0", minor)
			requireFile(t, lib)
			return lib
		}
	}
	t.Fatalf("no pyenv build of 3.%d is listed", minor)
	return ""
}

// dwarfOf indexes the DWARF of the file at path.
func dwarfOf(t testing.TB, path string) *dwarfIndex {
	t.Helper()
	ix, err := debugInfo("/", path)
	if err != nil || ix == nil {
		t.Fatalf("%s: no debug information: %v", path, err)
	}
	return ix
}

// Every table entry is what the DWARF of pyenv's build of that release
// says, and the table has an entry for each field the release has: the
// table cannot drift from the builds it stands for.
func TestTablesMatchDWARF(t *testing.T) {
	for minor := FirstRelease.Minor; minor <= LastRelease.Minor; minor++ {
		t.Run(fmt.Sprintf("3.%d", minor), func(t *testing.T) {
			ix := dwarfOf(t, pyenvLibrary(t, minor))
			table := tables[minor]
			for _, spec := range fieldSpecs {
				query, ok := spec.dwarf[minor]
				entry, inTable := table[spec.name]
				if !ok {
					if inTable {
						t.Errorf("%s: in the table, but 3.%d has no such field", spec.name, minor)
					}
					continue
				}
				want, err := ix.resolve(query)
				if err != nil {
					t.Errorf("%s: %v", spec.name, err)
					continue
				}
				if !inTable || entry != want {
					t.Errorf("%s (%s): table %d (present: %v), DWARF %d", spec.name, query, entry, inTable, want)
				}
			}
			for name := range table {
				if !hasSpec(name) {
					t.Errorf("%s: in the table, no such field", name)
				}
			}
		})
	}
}

func hasSpec(name string) bool {
	for _, s := range fieldSpecs {
		if s.name == name {
			return true
		}
	}
	return false
}

// 3.13's _Py_DebugOffsets, read from the initial value of _PyRuntime in
// pyenv's libpython (static data), says what its DWARF says, for every
// field taken from it; and each section's size is its structure's.
func TestDebugOffsetsMatchDWARF(t *testing.T) {
	lib := pyenvLibrary(t, 13)
	ix := dwarfOf(t, lib)
	d, err := parseDebugOffsets(initialRuntime(t, lib), Release{3, 13})
	if err != nil {
		t.Fatal(err)
	}
	if Version(d.Version).String() != "3.13.0" {
		t.Errorf("version %s", Version(d.Version))
	}
	for _, spec := range fieldSpecs {
		if spec.debug == nil {
			continue
		}
		want, err := ix.resolve(spec.dwarf[13])
		if err != nil {
			t.Fatal(err)
		}
		if got := spec.debug(d); got != want {
			t.Errorf("%s: _Py_DebugOffsets %d, DWARF %d", spec.name, got, want)
		}
	}
	for name, got := range map[string]uint64{
		"pyruntimestate": d.RuntimeState.Size, "_is": d.InterpreterState.Size, "_ts": d.ThreadState.Size,
		"_PyInterpreterFrame": d.InterpreterFrame.Size, "PyCodeObject": d.CodeObject.Size,
		"_object": d.PyObject.Size, "_typeobject": d.TypeObject.Size, "PyBytesObject": d.BytesObject.Size,
		"PyUnicodeObject": d.UnicodeObject.Size,
	} {
		want, err := ix.sizeOf(name)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("sizeof %s: _Py_DebugOffsets %d, DWARF %d", name, got, want)
		}
	}
}

// initialRuntime is the initial value of _PyRuntime's first bytes in
// the ELF file at path: its .data.
func initialRuntime(t testing.TB, path string) []byte {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name != "_PyRuntime" {
			continue
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_LOAD && s.Value >= prog.Vaddr && s.Value+uint64(debugOffsetsSize) <= prog.Vaddr+prog.Filesz {
				b := make([]byte, debugOffsetsSize)
				if _, err := prog.ReadAt(b, int64(s.Value-prog.Vaddr)); err != nil {
					t.Fatal(err)
				}
				return b
			}
		}
	}
	t.Fatalf("%s: no initial _PyRuntime", path)
	return nil
}

// Debian's python3.11 (3.11.2, stripped, not position-independent) is
// read with the table, which is pyenv's 3.11.7's DWARF: its _PyRuntime
// is as large as 3.11.7's _PyRuntimeState (which holds the main
// interpreter and its first thread state), and TestLiveInterpreters
// reads every offset the table gives in a live process of it.
func TestDebianPython(t *testing.T) {
	const debian = "/usr/bin/python3.11"
	requireFile(t, debian)
	ix := dwarfOf(t, pyenvLibrary(t, 11))
	interp, err := openInterpreter(debian, 0x400000)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ix.sizeOf("pyruntimestate")
	if err != nil {
		t.Fatal(err)
	}
	if interp.RuntimeSize != want || interp.Bias != 0 {
		t.Errorf("Debian's _PyRuntime: %d bytes (3.11.7's: %d), bias %#x (not position-independent: 0)", interp.RuntimeSize, want, interp.Bias)
	}
	own, err := debugInfo("/", debian)
	if err != nil {
		t.Fatal(err)
	}
	if own != nil {
		// Its debug file is installed: it must agree with the table.
		l, err := buildLayout(Release{3, 11}, nil, own)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range l.Fields() {
			if f.Value != Absent && f.Value != tables[11][f.Name] {
				t.Errorf("%s: Debian's DWARF %d, the table %d", f.Name, f.Value, tables[11][f.Name])
			}
		}
	}
}

// A build whose _PyRuntime is not the layout's _PyRuntimeState's size is
// refused before anything is read with it.
func TestCheckRuntimeSize(t *testing.T) {
	p, _ := fakeProcess(t)
	p.RuntimeSize = p.Layout.RuntimeStateSize
	if err := p.check("/"); err != nil {
		t.Fatal(err)
	}
	p.RuntimeSize += 8
	if err := p.check("/"); err == nil || !strings.Contains(err.Error(), "another build's") {
		t.Errorf("a _PyRuntime 8 bytes larger: %v", err)
	}
}
