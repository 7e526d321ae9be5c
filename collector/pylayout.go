package collector

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// A Python process's pool jobs (bpf/pyjobs.h) are followed by reading its
// interpreter's state: who holds the GIL, and the frames of the task it
// runs. CPython makes no promise about these structures between minor
// releases (3.13 starts to publish them, in _Py_DebugOffsets), so each
// release followed has its layout here, checked against the process's
// own memory before it is used.

// pyRelease is one CPython minor release's layout on x86-64.
type pyRelease struct {
	// In _PyRuntimeState: gilstate.tstate_current, the thread state
	// holding the GIL (NULL while none does); interpreters.head.
	runtimeTstateCurrent, runtimeInterpretersHead uint64
	// In PyInterpreterState: threads.head.
	interpThreadsHead uint64
	// In PyThreadState: interp, native_thread_id, cframe.
	tstateInterp, tstateNativeTid, tstateCframe uint32
	// In _PyCFrame: current_frame. In _PyInterpreterFrame: previous,
	// owner, and owner's value for a generator's or coroutine's frame.
	cframeCurrent, framePrevious, frameOwner, ownerGenerator uint32
}

// pyReleases are the releases whose layout is known, by "3.N". The
// offsets are CPython 3.11's headers' (Include/cpython/pystate.h,
// Include/internal/pycore_runtime.h, pycore_interp.h, pycore_frame.h),
// and TestPythonLayout checks them against a live interpreter.
var pyReleases = map[string]pyRelease{
	"3.11": {
		runtimeTstateCurrent: 576, runtimeInterpretersHead: 40,
		interpThreadsHead: 16,
		tstateInterp:      16, tstateNativeTid: 160, tstateCframe: 56,
		cframeCurrent: 8, framePrevious: 48, frameOwner: 69, ownerGenerator: 1,
	},
}

// errNotPython says a process runs no CPython interpreter.
var errNotPython = errors.New("not a CPython process")

// pythonFile matches the binaries that hold a CPython interpreter: the
// executable (python3.11, statically linked with it) or its shared
// library (libpython3.11.so.1.0), with the release in the name.
var pythonFile = regexp.MustCompile(`^(?:lib)?python(3\.\d+)(?:\.so.*)?$`)

// pythonLayout finds pid's interpreter and gives the programs' layout
// for it: errNotPython for a process that runs none, an error saying why
// for an interpreter it cannot follow.
func pythonLayout(pid int) (reqprofPyLayout, error) {
	files, err := pythonBinaries(pid)
	if err != nil {
		return reqprofPyLayout{}, err
	}
	// The interpreter is in the library when the executable links one
	// (python3.11 and libpython3.11.so), else in the executable.
	var runtime uint64
	var release string
	for _, f := range files {
		release = f.release
		if runtime, err = pythonRuntime(fmt.Sprintf("/proc/%d/root%s", pid, f.path), f.base); err == nil {
			break
		}
	}
	if err != nil {
		return reqprofPyLayout{}, err
	}
	rel, ok := pyReleases[release]
	if !ok {
		return reqprofPyLayout{}, fmt.Errorf("Python %s's layout is not known (only 3.11's)", release)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return reqprofPyLayout{}, err
	}
	defer mem.Close()
	if err := checkPythonLayout(mem, pid, runtime, rel); err != nil {
		return reqprofPyLayout{}, fmt.Errorf("Python %s: %w", release, err)
	}
	return reqprofPyLayout{
		TstateCurrent:   runtime + rel.runtimeTstateCurrent,
		TstateNativeTid: rel.tstateNativeTid,
		TstateCframe:    rel.tstateCframe,
		CframeCurrent:   rel.cframeCurrent,
		FramePrevious:   rel.framePrevious,
		FrameOwner:      rel.frameOwner,
		OwnerGenerator:  rel.ownerGenerator,
	}, nil
}

// pythonFileMapping is a file named as a CPython interpreter's that a
// process maps: its path, release, and where its first mapping starts.
type pythonFileMapping struct {
	path, release string
	base          uint64
}

// pythonBinaries lists the files among pid's executable and mapped
// libraries that are named as a CPython interpreter's, as the process
// maps them; errNotPython when there is none.
func pythonBinaries(pid int) ([]pythonFileMapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, errNotPython
	}
	defer f.Close()
	var files []pythonFileMapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[2] != "00000000" || !strings.HasPrefix(fields[5], "/") {
			continue
		}
		m := pythonFile.FindStringSubmatch(filepath.Base(fields[5]))
		if m == nil {
			continue
		}
		start, _, _ := strings.Cut(fields[0], "-")
		base, err := strconv.ParseUint(start, 16, 64)
		if err != nil {
			continue
		}
		files = append(files, pythonFileMapping{path: fields[5], release: m[1], base: base})
	}
	if len(files) == 0 {
		return nil, errNotPython
	}
	return files, nil
}

// pythonRuntime is the address of _PyRuntime, the interpreter's global
// state, in the process that maps file at base.
func pythonRuntime(file string, base uint64) (uint64, error) {
	r, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	runtime, err := pythonRuntimeIn(r, base)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	return runtime, nil
}

// pythonRuntimeIn is pythonRuntime for the ELF file r.
func pythonRuntimeIn(r io.ReaderAt, base uint64) (runtime uint64, err error) {
	// The binary is the target's, not ours: a malformed one must not
	// take the collector down with it.
	defer func() {
		if recover() != nil {
			runtime, err = 0, errors.New("malformed ELF file")
		}
	}()
	f, err := elf.NewFile(r)
	if err != nil {
		return 0, err
	}
	s, err := exportedSymbol(f, "_PyRuntime")
	if err != nil {
		return 0, err
	}
	if f.Type == elf.ET_EXEC {
		return s.Value, nil // not relocated
	}
	// A position-independent file is mapped at base, less its first
	// segment's address (0 as linkers lay them out).
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_LOAD {
			return base - prog.Vaddr&^0xfff + s.Value, nil
		}
	}
	return 0, errors.New("no loadable segment")
}

// memReader reads a process's memory.
type memReader interface {
	ReadAt(p []byte, off int64) (int, error)
}

// checkPythonLayout checks rel against the process's memory: the first
// interpreter's first thread state points back to that interpreter and
// names a thread of pid.
func checkPythonLayout(mem memReader, pid int, runtime uint64, rel pyRelease) error {
	word := func(addr uint64) (uint64, error) {
		var b [8]byte
		if _, err := mem.ReadAt(b[:], int64(addr)); err != nil {
			return 0, err
		}
		return binary.LittleEndian.Uint64(b[:]), nil
	}
	interp, err := word(runtime + rel.runtimeInterpretersHead)
	if err != nil || interp == 0 {
		return fmt.Errorf("no interpreter at _PyRuntime (%#x): %v", runtime, err)
	}
	tstate, err := word(interp + rel.interpThreadsHead)
	if err != nil || tstate == 0 {
		return fmt.Errorf("no thread state in its interpreter (%#x): %v", interp, err)
	}
	back, err := word(tstate + uint64(rel.tstateInterp))
	if err != nil || back != interp {
		return fmt.Errorf("its thread state (%#x) is not its interpreter's: the layout is not this build's", tstate)
	}
	tid, err := word(tstate + uint64(rel.tstateNativeTid))
	if err != nil {
		return err
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", pid, tid)); err != nil {
		return fmt.Errorf("its thread state names thread %d, none of its threads: the layout is not this build's", tid)
	}
	return nil
}
