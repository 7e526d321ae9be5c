package php

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// ErrNotPHP says a process runs no PHP: none of the files it maps is
// named as PHP's and exports executor_globals.
var ErrNotPHP = errors.New("not a PHP process")

// Interpreter is where a process's PHP lies.
type Interpreter struct {
	PID int
	// Path is the file that holds the engine (php-fpm8.2, php8.2, a
	// libphp.so), as the process maps it: in its mount namespace.
	Path string
	// Bias is what the file's addresses are moved by in the process.
	Bias uint64
	// ExecutorGlobals is the address of executor_globals in the process.
	ExecutorGlobals uint64
	Build
}

// Build is what a PHP binary says of itself.
type Build struct {
	// API is its engine's API number (ZEND_MODULE_API_NO).
	API uint32
	// ThreadSafe says it is a thread-safe (ZTS) build.
	ThreadSafe bool
	// Version is its release ("8.2.36"), "" when it says none.
	Version string
}

func (b Build) String() string {
	v := b.Version
	if v == "" {
		v = "(release unknown)"
	}
	ts := "NTS"
	if b.ThreadSafe {
		ts = "ZTS"
	}
	return fmt.Sprintf("PHP %s (API %d, %s)", v, b.API, ts)
}

// phpFile matches the names of the files that hold a PHP engine.
var phpFile = regexp.MustCompile(`^(php(-fpm|-cgi)?[0-9.]*|libphp[0-9.]*\.so[0-9.]*)$`)

// Find finds pid's PHP: ErrNotPHP (wrapped) when it runs none, another
// error when it cannot tell.
func Find(pid int) (*Interpreter, error) {
	files, err := mappedFiles(pid)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotPHP, err)
	}
	var why []string
	for _, f := range files {
		if !phpFile.MatchString(filepath.Base(f.path)) {
			continue
		}
		interp, err := openInterpreter(fmt.Sprintf("/proc/%d/root%s", pid, f.path), f.start)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", f.path, err))
			continue
		}
		interp.PID, interp.Path = pid, f.path
		return interp, nil
	}
	if len(why) == 0 {
		return nil, ErrNotPHP
	}
	return nil, fmt.Errorf("%w: %s", ErrNotPHP, strings.Join(why, "; "))
}

// mappedFile is a file a process maps from its start.
type mappedFile struct {
	path  string
	start uint64 // where its mapping of offset 0 starts
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

// openInterpreter reads the engine in the ELF file at path, mapped from
// its start at start.
func openInterpreter(path string, start uint64) (*Interpreter, error) {
	r, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return readInterpreter(r, start)
}

// maxRodataBytes bounds what is read of a binary's read-only data to find
// its build strings: php-fpm8.2's is 1.3 MB.
const maxRodataBytes = 64 << 20

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
	interp = &Interpreter{Bias: bias}
	for _, s := range syms {
		if s.Name == "executor_globals" && s.Section != elf.SHN_UNDEF && s.Value != 0 {
			interp.ExecutorGlobals = bias + s.Value
		}
	}
	if interp.ExecutorGlobals == 0 {
		return nil, errors.New("exports no executor_globals (a thread-safe build keeps them per thread)")
	}
	rodata := f.Section(".rodata")
	if rodata == nil || rodata.Size > maxRodataBytes {
		return nil, errors.New("no read-only data of a size to read")
	}
	data, err := rodata.Data()
	if err != nil {
		return nil, fmt.Errorf("reading its read-only data: %w", err)
	}
	build, ok := parseBuild(data)
	if !ok {
		return nil, errors.New("names no Zend engine API (no \"API<number>,NTS\" string)")
	}
	interp.Build = build
	return interp, nil
}

// buildIDString is how a PHP binary names its engine (its
// ZEND_MODULE_BUILD_ID, which extensions must match): "API" then the API
// number, then ",NTS" or ",TS", and maybe debug and compiler tags.
var buildIDString = regexp.MustCompile(`API([0-9]{8}),(NTS|TS)[,A-Za-z0-9_]*\x00`)

// versionString is the release a PHP binary announces in its responses'
// X-Powered-By header.
var versionString = regexp.MustCompile(`X-Powered-By: PHP/([0-9]+\.[0-9]+\.[0-9]+)`)

// parseBuild finds a PHP binary's build strings in its read-only data.
// The engine's build id comes first as a string of its own, before an
// extension's ("API420220829,NTS": an extension API's, which the pattern
// does not take for the engine's, its number being longer).
func parseBuild(rodata []byte) (Build, bool) {
	m := buildIDString.FindSubmatchIndex(rodata)
	// The match must start a string: a NUL or the data's start before it.
	for m != nil && m[0] > 0 && rodata[m[0]-1] != 0 {
		next := buildIDString.FindSubmatchIndex(rodata[m[1]:])
		if next == nil {
			m = nil
			break
		}
		for i := range next {
			next[i] += m[1]
		}
		m = next
	}
	if m == nil {
		return Build{}, false
	}
	api, err := strconv.ParseUint(string(rodata[m[2]:m[3]]), 10, 32)
	if err != nil {
		return Build{}, false
	}
	b := Build{API: uint32(api), ThreadSafe: string(rodata[m[4]:m[5]]) == "TS"}
	if v := versionString.FindSubmatch(rodata); v != nil {
		b.Version = string(v[1])
	}
	return b, true
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
