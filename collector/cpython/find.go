package cpython

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNotPython says a process runs no CPython interpreter: none of the
// files it maps is named as one's and defines _PyRuntime.
var ErrNotPython = errors.New("not a CPython process")

// Interpreter is where a process's interpreter lies.
type Interpreter struct {
	PID int
	// Path is the file that holds the interpreter (the executable, or
	// libpython when the executable links it), as the process maps it:
	// in the process's mount namespace.
	Path    string
	Release Release
	// Bias is what the file's addresses are moved by in the process: 0
	// for an executable that is not position-independent, else where it
	// is mapped, less its first segment's address.
	Bias uint64
	// Runtime is the address of _PyRuntime, the interpreter's global
	// state, in the process; RuntimeSize its size, as its symbol says.
	Runtime, RuntimeSize uint64
	// Symbols are the addresses, in the process, of the interpreter's
	// exported objects this package reads (PyCode_Type, Py_Version...),
	// those the file defines.
	Symbols map[string]uint64
	// versionBuffer is where 3.10's Py_GetVersion keeps the version it
	// formats (a local symbol, in binaries not stripped); 0 when unknown.
	versionBuffer uint64
}

// exportedObjects are the interpreter's symbols this package reads.
var exportedObjects = []string{
	"_PyRuntime", "Py_Version", "PyCode_Type", "PyUnicode_Type", "PyBytes_Type",
	"PyGen_Type", "PyCoro_Type", "PyContext_Type",
}

// mappedFile is a file a process maps from its start.
type mappedFile struct {
	path  string
	start uint64 // where its mapping of offset 0 starts
}

// Find finds pid's interpreter: ErrNotPython (wrapped) when it runs
// none, another error when it cannot tell.
func Find(pid int) (*Interpreter, error) {
	files, err := mappedFiles(pid)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotPython, err)
	}
	var why []string
	for _, f := range files {
		release, ok := releaseOfFile(filepath.Base(f.path))
		if !ok {
			continue
		}
		interp, err := openInterpreter(fmt.Sprintf("/proc/%d/root%s", pid, f.path), f.start)
		if err != nil {
			// The executable links libpython: the runtime is in the library.
			why = append(why, fmt.Sprintf("%s: %v", f.path, err))
			continue
		}
		interp.PID, interp.Path, interp.Release = pid, f.path, release
		return interp, nil
	}
	if len(why) == 0 {
		return nil, ErrNotPython
	}
	return nil, fmt.Errorf("%w: %s", ErrNotPython, strings.Join(why, "; "))
}

// mappedFiles lists the files pid maps from their start, in the order of
// their first mapping.
func mappedFiles(pid int) ([]mappedFile, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var files []mappedFile
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[5], "/") || seen[fields[5]] {
			continue
		}
		if off, err := strconv.ParseUint(fields[2], 16, 64); err != nil || off != 0 {
			continue
		}
		startHex, _, _ := strings.Cut(fields[0], "-")
		start, err := strconv.ParseUint(startHex, 16, 64)
		if err != nil {
			continue
		}
		seen[fields[5]] = true
		files = append(files, mappedFile{path: fields[5], start: start})
	}
	return files, sc.Err()
}

// openInterpreter reads the interpreter in the ELF file at path, mapped
// from its start at start.
func openInterpreter(path string, start uint64) (*Interpreter, error) {
	r, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return readInterpreter(r, start)
}

// readInterpreter is openInterpreter for the ELF file r. The file is the
// target's, not ours: a malformed one gives an error, never a panic.
func readInterpreter(r io.ReaderAt, start uint64) (interp *Interpreter, err error) {
	defer func() {
		if recover() != nil {
			interp, err = nil, errors.New("malformed ELF file")
		}
	}()
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("a %v %v file: only x86-64 is known", f.Class, f.Machine)
	}
	bias, err := loadBias(f, start)
	if err != nil {
		return nil, err
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("no dynamic symbols: %w", err)
	}
	interp = &Interpreter{Bias: bias, Symbols: map[string]uint64{}}
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || s.Value == 0 {
			continue
		}
		for _, name := range exportedObjects {
			if s.Name == name {
				interp.Symbols[name] = bias + s.Value
			}
		}
		if s.Name == "_PyRuntime" {
			interp.RuntimeSize = s.Size
		}
	}
	runtime, ok := interp.Symbols["_PyRuntime"]
	if !ok {
		return nil, errors.New("defines no _PyRuntime")
	}
	interp.Runtime = runtime
	// 3.10 has no Py_Version: its Py_GetVersion formats the version into
	// a static buffer, named in the symbol table of a binary not stripped.
	if local, err := f.Symbols(); err == nil {
		for _, s := range local {
			if strings.HasPrefix(s.Name, "version.") && elf.ST_TYPE(s.Info) == elf.STT_OBJECT && s.Size >= 64 && s.Size <= 4096 {
				interp.versionBuffer = bias + s.Value
			}
		}
	}
	return interp, nil
}

// loadBias is what f's addresses are moved by when its mapping of offset
// 0 starts at start.
func loadBias(f *elf.File, start uint64) (uint64, error) {
	if f.Type == elf.ET_EXEC {
		return 0, nil // not relocated
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_LOAD {
			if prog.Off != 0 {
				return 0, errors.New("its first loadable segment is not its start")
			}
			return start - prog.Vaddr&^0xfff, nil
		}
	}
	return 0, errors.New("no loadable segment")
}

// buildID is f's GNU build id in hex, "" when it has none.
func buildID(f *elf.File) string {
	s := f.Section(".note.gnu.build-id")
	if s == nil || s.Size > 1024 {
		return ""
	}
	notes, err := s.Data()
	if err != nil || len(notes) < 16 {
		return ""
	}
	nameSize, descSize, kind := binary.LittleEndian.Uint32(notes), binary.LittleEndian.Uint32(notes[4:]), binary.LittleEndian.Uint32(notes[8:])
	nameEnd := 12 + (uint64(nameSize)+3)&^3
	if kind != 3 || nameEnd+uint64(descSize) > uint64(len(notes)) || !bytes.HasPrefix(notes[12:], []byte("GNU\x00")) {
		return ""
	}
	return hex.EncodeToString(notes[nameEnd : nameEnd+uint64(descSize)])
}
