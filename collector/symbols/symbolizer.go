package symbols

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/reqprof/reqprof/profile"
)

// Options say where the symbolizer reads from; the zero value reads the
// running system.
type Options struct {
	// Proc is where procfs is mounted: "/proc" by default.
	Proc string
	// Kallsyms is the kernel's symbol list: Proc/kallsyms by default.
	Kallsyms string
	// DebugDirs are where separate debug files are looked for, by build id
	// (DIR/.build-id/ab/cdef….debug) and by debuglink (DIR/BINARY_DIR/NAME),
	// in the target's file system, then in reqprof's: /usr/lib/debug by
	// default.
	DebugDirs []string
	// PerfMapInterval is how soon a perf map is read again for an
	// address it did not name (a JIT names its code after compiling it):
	// a second by default.
	PerfMapInterval time.Duration
}

// Symbolizer resolves addresses, caching what it read: each object once
// (by device and inode), each process's mappings until an address falls
// outside them or the process execs.
type Symbolizer struct {
	opts Options

	kernelRead bool
	kernel     []kernelSymbol

	procs   map[int]*process
	objects map[objectKey]*object

	notes []Note
	noted map[string]bool
}

// Note says where frames are only addresses, and why; PID is the process
// it is about, 0 for the kernel.
type Note struct {
	PID  int
	Text string
}

// process is what is known of one process's address space.
type process struct {
	pid      int
	maps     []mapping
	mapsRead time.Time
	exe      fileID // of /proc/PID/exe when its maps were read
	gone     bool   // its maps could not be read: exited
	nsPID    int    // its pid in its own namespace, which its perf map is named by

	perf     []perfSymbol
	perfRead time.Time
	perfSeen bool // a perf map was found, at some point
}

type fileID struct{ dev, ino uint64 }

type objectKey struct {
	dev   string
	inode uint64
	path  string
}

// Bounds on how often /proc is read again for one process: on an address
// no mapping holds (a library loaded since), on a check that its binary is
// still the one mapped (exec), and for a perf map that grows as a JIT
// compiles.
const (
	mapsRefreshInterval = 100 * time.Millisecond
	exeCheckInterval    = 100 * time.Millisecond
	perfRefreshInterval = time.Second
)

// New returns a Symbolizer reading what opts says.
func New(opts Options) *Symbolizer {
	if opts.Proc == "" {
		opts.Proc = "/proc"
	}
	if opts.Kallsyms == "" {
		opts.Kallsyms = filepath.Join(opts.Proc, "kallsyms")
	}
	if opts.PerfMapInterval == 0 {
		opts.PerfMapInterval = perfRefreshInterval
	}
	if opts.DebugDirs == nil {
		opts.DebugDirs = []string{"/usr/lib/debug"}
	}
	return &Symbolizer{opts: opts, procs: map[int]*process{}, objects: map[objectKey]*object{}, noted: map[string]bool{}}
}

// Notes are what the symbolizer could not resolve, and why, each said
// once, in the order found.
func (s *Symbolizer) Notes() []Note { return s.notes }

func (s *Symbolizer) note(pid int, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	if s.noted[text] {
		return
	}
	s.noted[text] = true
	s.notes = append(s.notes, Note{PID: pid, Text: text})
}

// lookupAddress is the address to resolve for the i-th frame of a stack:
// below the first (the sampled instruction, when leafExact), each is a
// return address, after its call, which may be the first byte of the next
// function or line.
func lookupAddress(ip uint64, i int, leafExact bool) uint64 {
	if (i == 0 && leafExact) || ip == 0 {
		return ip
	}
	return ip - 1
}

// AppendKernel appends to dst the frames of a kernel stack, innermost
// first; leafExact says ips[0] is the interrupted instruction rather than
// a return address.
func (s *Symbolizer) AppendKernel(dst []profile.Frame, ips []uint64, leafExact bool) []profile.Frame {
	if !s.kernelRead {
		s.kernelRead = true
		s.readKallsyms()
	}
	for i, ip := range ips {
		f := profile.Frame{Address: ip, Kernel: true, Module: profile.KernelModule}
		if sym, ok := lookupKernel(s.kernel, lookupAddress(ip, i, leafExact)); ok && ip-sym.addr < maxKernelSymbolSize {
			f.Function = sym.name
			if sym.module != "" {
				f.Module = "[" + sym.module + "]"
			}
		}
		dst = append(dst, f)
	}
	return dst
}

// maxKernelSymbolSize bounds how far past its start a kernel symbol is
// taken to run (kallsyms gives no sizes): past the last symbol of the
// kernel's text an address is no function's.
const maxKernelSymbolSize = 1 << 20

func (s *Symbolizer) readKallsyms() {
	f, err := os.Open(s.opts.Kallsyms)
	if err != nil {
		s.note(0, "no kernel symbols (%v): kernel frames are addresses", err)
		return
	}
	defer f.Close()
	syms, hidden := parseKallsyms(f)
	switch {
	case hidden:
		s.note(0, "kernel symbols are hidden from reqprof (%s lists every address as 0: kernel.kptr_restrict): kernel frames are addresses", s.opts.Kallsyms)
	case len(syms) == 0:
		s.note(0, "no kernel symbols in %s: kernel frames are addresses", s.opts.Kallsyms)
	}
	s.kernel = syms
}

// AppendUser appends to dst the frames of process pid's user stack,
// innermost first; leafExact says ips[0] is the interrupted instruction.
// stackTop is the word on top of the user stack (0 when unknown): where
// the innermost function has pushed no frame, its return address, which
// the walk of frame pointers that gave ips skipped. It is put back when
// the binary says so (Go's pclntab) and it points into a function;
// topUsed says the innermost function had no frame, so that the frames
// depend on stackTop and not on ips alone.
func (s *Symbolizer) AppendUser(dst []profile.Frame, pid int, ips []uint64, leafExact bool, stackTop uint64) (frames []profile.Frame, topUsed bool) {
	p := s.process(pid)
	for i, ip := range ips {
		f, obj, fileAddr := s.userFrame(p, ip, lookupAddress(ip, i, leafExact))
		dst = append(dst, f)
		if i != 0 || obj == nil || !obj.frameless(fileAddr) {
			continue
		}
		topUsed = true
		if stackTop != 0 && (len(ips) < 2 || ips[1] != stackTop) {
			if caller, _, _ := s.userFrame(p, stackTop, stackTop-1); caller.Function != "" {
				dst = append(dst, caller)
			}
		}
	}
	return dst, topUsed
}

// Preload reads, ahead of any sample, the symbols of every file process
// pid runs code from, and the kernel's: resolving a stack then costs no
// file read, which a collector reading samples as they come cannot
// afford while its buffer fills.
func (s *Symbolizer) Preload(pid int) {
	if !s.kernelRead {
		s.kernelRead = true
		s.readKallsyms()
	}
	p := s.process(pid)
	for _, m := range p.maps {
		if m.file() {
			s.object(p, m)
		}
	}
}

// Forget drops what is cached of process pid, which has exited: its pid
// may be given to another.
func (s *Symbolizer) Forget(pid int) { delete(s.procs, pid) }

func (s *Symbolizer) process(pid int) *process {
	p := s.procs[pid]
	if p == nil {
		p = &process{pid: pid}
		s.procs[pid] = p
		s.readMaps(p)
		p.nsPID = s.namespacePID(pid)
		return p
	}
	// An exec replaces the whole address space, at the same pid.
	if !p.gone && time.Since(p.mapsRead) >= exeCheckInterval {
		if id, err := s.exeID(pid); err == nil && id != p.exe {
			s.readMaps(p)
		}
	}
	return p
}

func (s *Symbolizer) readMaps(p *process) {
	p.mapsRead = time.Now()
	f, err := os.Open(filepath.Join(s.opts.Proc, strconv.Itoa(p.pid), "maps"))
	if err != nil {
		if !p.gone {
			s.note(p.pid, "process %d was gone before its stacks were resolved: its frames are addresses", p.pid)
		}
		p.gone = true
		return
	}
	defer f.Close()
	p.maps = parseMaps(f)
	p.exe, _ = s.exeID(p.pid)
}

func (s *Symbolizer) exeID(pid int) (fileID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(s.opts.Proc, strconv.Itoa(pid), "exe"), &st); err != nil {
		return fileID{}, err
	}
	return fileID{dev: st.Dev, ino: st.Ino}, nil
}

// namespacePID is pid as the process's own pid namespace numbers it (the
// last of NSpid in its status), which a JIT names its perf map by.
func (s *Symbolizer) namespacePID(pid int) int {
	b, err := os.ReadFile(filepath.Join(s.opts.Proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return pid
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("NSpid:")); ok {
			fields := bytes.Fields(rest)
			if len(fields) > 0 {
				if n, err := strconv.Atoi(string(fields[len(fields)-1])); err == nil && n > 0 {
					return n
				}
			}
		}
	}
	return pid
}

// userFrame resolves ip of process p, looked up at addr, with the object
// that holds it and the address the object's file gives it (nil, 0 when
// none).
func (s *Symbolizer) userFrame(p *process, ip, addr uint64) (profile.Frame, *object, uint64) {
	f := profile.Frame{Address: ip}
	if p.gone {
		return f, nil, 0
	}
	m, ok := find(p.maps, addr)
	if !ok && time.Since(p.mapsRead) >= mapsRefreshInterval {
		s.readMaps(p) // a library loaded since, or a JIT's new code
		m, ok = find(p.maps, addr)
	}
	if ok && m.path == "[vdso]" {
		return s.vdsoFrame(p, m, f, addr)
	}
	switch {
	case !ok:
		// No code is mapped there: a frame pointer walk went astray in
		// code built without them (or the code was unmapped since).
		return f, nil, 0
	case !m.file() && m.path != "":
		f.Module = m.path // [vsyscall], [uprobes]: the kernel's
		return f, nil, 0
	case !m.file():
		// Anonymous executable memory: a JIT's code, named if its perf
		// map names it (yet: a JIT writes each name after it compiles).
		f.Module = profile.JITModule
		if name, found := s.jitSymbol(p, addr); found {
			f.Function = name
		}
		return f, nil, 0
	}
	return s.objectFrame(f, m, s.object(p, m), addr)
}

// objectFrame fills in f, at addr of mapping m of obj, and says the
// address obj's file gives it (0 when none).
func (s *Symbolizer) objectFrame(f profile.Frame, m mapping, obj *object, addr uint64) (profile.Frame, *object, uint64) {
	ip := f.Address
	f.Module = m.path
	f.MappingStart, f.MappingLimit, f.MappingOffset = m.start, m.end, m.offset
	f.BuildID = obj.buildID
	off := addr - m.start + m.offset
	fileAddr, ok := obj.fileAddress(off)
	if !ok {
		return f, obj, 0
	}
	f.ModuleAddress = fileAddr + (ip - addr)
	if name, file, line, ok := obj.function(fileAddr); ok {
		f.Function, f.File, f.Line = name, file, line
	}
	return f, obj, fileAddr
}

// object is the object m maps, read once per file.
func (s *Symbolizer) object(p *process, m mapping) *object {
	key := objectKey{dev: m.dev, inode: m.inode, path: m.path}
	if obj, ok := s.objects[key]; ok {
		return obj
	}
	obj := s.readObjectOf(p, m)
	if obj.why != "" {
		s.note(p.pid, "%s: %s; its frames are addresses", m.path, obj.why)
	}
	s.objects[key] = obj
	return obj
}

func (s *Symbolizer) readObjectOf(p *process, m mapping) *object {
	// map_files holds the very file mapped, even deleted or replaced
	// since; the path, in the process's root, is the fallback where
	// map_files is closed to this reader.
	candidates := []string{
		filepath.Join(s.opts.Proc, strconv.Itoa(p.pid), "map_files", fmt.Sprintf("%x-%x", m.start, m.end)),
		filepath.Join(s.opts.Proc, strconv.Itoa(p.pid), "root", m.path),
	}
	var lastErr error
	for _, path := range candidates {
		f, err := os.Open(path)
		if err != nil {
			lastErr = err
			continue
		}
		obj := readObject(f, func(buildID, debuglink string) io.ReaderAt { return s.debugFile(p, m.path, buildID, debuglink) })
		f.Close()
		return obj
	}
	why := "could not be read"
	if errors.Is(lastErr, os.ErrNotExist) {
		why = "gone from the file system"
	}
	return &object{why: why}
}

// debugFile is the separate debug file of binary (mapped by p), by build
// id, then by the name its .gnu_debuglink gives, read whole into memory;
// nil when there is none.
func (s *Symbolizer) debugFile(p *process, binary, buildID, debuglink string) io.ReaderAt {
	var paths []string
	roots := []string{filepath.Join(s.opts.Proc, strconv.Itoa(p.pid), "root"), "/"}
	for _, root := range roots {
		for _, dir := range s.opts.DebugDirs {
			if len(buildID) > 2 {
				paths = append(paths, filepath.Join(root, dir, ".build-id", buildID[:2], buildID[2:]+".debug"))
			}
		}
		if debuglink != "" {
			binDir := filepath.Dir(binary)
			paths = append(paths, filepath.Join(root, binDir, debuglink), filepath.Join(root, binDir, ".debug", debuglink))
			for _, dir := range s.opts.DebugDirs {
				paths = append(paths, filepath.Join(root, dir, binDir, debuglink))
			}
		}
	}
	for _, path := range paths {
		if path == filepath.Join(roots[0], binary) || path == filepath.Join(roots[1], binary) {
			continue // the binary itself, named by its own debuglink
		}
		b, err := readBounded(path, maxObjectBytes)
		if err == nil {
			return bytes.NewReader(b)
		}
	}
	return nil
}

// readBounded reads a whole file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > limit {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes", path, limit)
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// jitSymbol is what the process's perf map says of addr, read again when
// it may have grown; a missing perf map is noted once.
func (s *Symbolizer) jitSymbol(p *process, addr uint64) (string, bool) {
	if name, ok := lookupPerfMap(p.perf, addr); ok {
		return name, true
	}
	if time.Since(p.perfRead) < s.opts.PerfMapInterval {
		return "", false
	}
	p.perfRead = time.Now()
	path := filepath.Join(s.opts.Proc, strconv.Itoa(p.pid), "root", "tmp", fmt.Sprintf("perf-%d.map", p.nsPID))
	f, err := os.Open(path)
	if err != nil {
		if !p.perfSeen {
			s.note(p.pid, "process %d runs code in anonymous memory (a JIT?) and has no /tmp/perf-%d.map: those frames are addresses", p.pid, p.nsPID)
		}
		return "", false
	}
	defer f.Close()
	p.perfSeen = true
	p.perf = parsePerfMap(f)
	return lookupPerfMap(p.perf, addr)
}

// maxVDSOBytes bounds what is read of a process's vDSO, a page or two.
const maxVDSOBytes = 1 << 16

// vdsoFrame resolves an address in the vDSO, the kernel's code mapped
// into every process (clock_gettime without a syscall): it is an ELF
// image in the process's memory, the same in every process, read once.
func (s *Symbolizer) vdsoFrame(p *process, m mapping, f profile.Frame, addr uint64) (profile.Frame, *object, uint64) {
	key := objectKey{path: m.path}
	obj, ok := s.objects[key]
	if !ok {
		obj = &object{why: "could not be read"}
		if size := m.end - m.start; size <= maxVDSOBytes {
			if mem, err := os.Open(filepath.Join(s.opts.Proc, strconv.Itoa(p.pid), "mem")); err == nil {
				image := make([]byte, size)
				if n, err := mem.ReadAt(image, int64(m.start)); err == nil && uint64(n) == size {
					obj = readObject(bytes.NewReader(image), nil)
				}
				mem.Close()
			}
		}
		s.objects[key] = obj
	}
	return s.objectFrame(f, m, obj, addr)
}
