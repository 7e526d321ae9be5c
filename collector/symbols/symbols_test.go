package symbols

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/profile"
)

//go:noinline
func knownFunction(n int) int {
	for i := range n {
		n ^= i
	}
	return n
}

// knownPC is an address inside knownFunction, as a sample would catch it.
func knownPC() uint64 { return uint64(reflect.ValueOf(knownFunction).Pointer()) + 4 }

const knownName = "github.com/reqprof/reqprof/collector/symbols.knownFunction"

func self(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func readObjectFile(t *testing.T, path string) *object {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return readObject(f, nil)
}

// A Go binary resolves by its pclntab, with its file and line, whether
// its symbol table is there, stripped, or its section headers gone too.
func TestGoBinaryByPclntab(t *testing.T) {
	exe := self(t)
	stripped := filepath.Join(t.TempDir(), "stripped")
	if out, err := exec.Command("strip", "-o", stripped, exe).CombinedOutput(); err != nil {
		t.Skipf("strip: %v %s", err, out)
	}
	headless := filepath.Join(t.TempDir(), "headless")
	copyWithoutSectionHeaders(t, stripped, headless)
	for _, path := range []string{exe, stripped, headless} {
		obj := readObjectFile(t, path)
		if obj.gotab == nil {
			t.Fatalf("%s: no pclntab found (%s)", filepath.Base(path), obj.why)
		}
		name, file, line, ok := obj.function(knownPC())
		if !ok || name != knownName {
			t.Errorf("%s: %#x is %q, want %q", filepath.Base(path), knownPC(), name, knownName)
		}
		if !strings.HasSuffix(file, "symbols_test.go") || line == 0 {
			t.Errorf("%s: at %s:%d, want symbols_test.go", filepath.Base(path), file, line)
		}
	}
}

// copyWithoutSectionHeaders writes a copy of an ELF file whose header
// lists no sections, as sstrip leaves one.
func copyWithoutSectionHeaders(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	// ELF64: e_shoff at 0x28, e_shnum at 0x3c, e_shstrndx at 0x3e.
	binary.LittleEndian.PutUint64(b[0x28:], 0)
	binary.LittleEndian.PutUint16(b[0x3c:], 0)
	binary.LittleEndian.PutUint16(b[0x3e:], 0)
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if ef, err := elf.Open(to); err != nil || len(ef.Sections) != 0 {
		t.Fatalf("the copy still has sections (%v)", err)
	}
}

// The symbolizer resolves this very process's addresses through its
// mappings.
func TestUserFramesOfThisProcess(t *testing.T) {
	s := New(Options{})
	frames, _ := s.AppendUser(nil, os.Getpid(), []uint64{knownPC(), knownPC() + 1}, true, 0)
	for i, f := range frames {
		if f.Function != knownName {
			t.Errorf("frame %d: %+v, want %s", i, f, knownName)
		}
		if f.Module != self(t) || f.MappingLimit <= f.MappingStart {
			t.Errorf("frame %d: module %q mapping %#x-%#x, want %s", i, f.Module, f.MappingStart, f.MappingLimit, self(t))
		}
	}
	if notes := s.Notes(); len(notes) > 0 {
		t.Errorf("notes %v, want none", notes)
	}
}

// cProcess builds testdata/addr.c (as flags say), runs it, and returns its
// pid and the addresses of its two functions.
func cProcess(t *testing.T, post func(bin string), flags ...string) (pid int, local, exported uint64) {
	t.Helper()
	return compiledProcess(t, "cc", "testdata/addr.c", post, flags...)
}

// compiledProcess builds source with compiler, runs it, and returns its
// pid and the two addresses it prints.
func compiledProcess(t *testing.T, compiler, source string, post func(bin string), flags ...string) (pid int, local, exported uint64) {
	t.Helper()
	cc, err := exec.LookPath(compiler)
	if err != nil {
		t.Skipf("no %s", compiler)
	}
	bin := filepath.Join(t.TempDir(), "addr")
	args := append([]string{"-O2", "-o", bin, source}, flags...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	if post != nil {
		post(bin)
	}
	cmd := exec.Command(bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(line, "%x %x", &local, &exported); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return cmd.Process.Pid, local, exported
}

func names(frames []profile.Frame) []string {
	var out []string
	for _, f := range frames {
		out = append(out, f.Name())
	}
	return out
}

// A C binary (PIE) resolves by its .symtab.
func TestCBinaryBySymtab(t *testing.T) {
	pid, local, exported := cProcess(t, nil, "-g")
	s := New(Options{})
	frames, _ := s.AppendUser(nil, pid, []uint64{local + 2, exported + 1}, true, 0)
	if got := names(frames); got[0] != "local_burn" || got[1] != "exported_burn" {
		t.Errorf("frames %v, want local_burn, exported_burn", got)
	}
	if frames[0].BuildID == "" {
		t.Error("no build id read")
	}
}

// C++ names are demangled.
func TestCPlusPlusNames(t *testing.T) {
	pid, total, _ := compiledProcess(t, "c++", "testdata/addr.cc", nil)
	s := New(Options{})
	frames, _ := s.AppendUser(nil, pid, []uint64{total + 2}, true, 0)
	if got := frames[0].Function; got != "shop::total(unsigned long)" {
		t.Errorf("frame %q, want shop::total(unsigned long)", got)
	}
}

// Stripped, a C binary keeps only its dynamic symbols: an exported
// function is named, a static one is an address in the binary, and a note
// says so once.
func TestStrippedCBinary(t *testing.T) {
	pid, local, exported := cProcess(t, func(bin string) {
		if out, err := exec.Command("strip", "--strip-all", bin).CombinedOutput(); err != nil {
			t.Skipf("strip: %v %s", err, out)
		}
	}, "-rdynamic")
	s := New(Options{})
	frames, _ := s.AppendUser(nil, pid, []uint64{local + 2, exported + 1}, true, 0)
	got := names(frames)
	if got[1] != "exported_burn" {
		t.Errorf("exported frame %q, want exported_burn from .dynsym", got[1])
	}
	if frames[0].Function == "local_burn" || !strings.HasPrefix(got[0], "addr+0x") {
		t.Errorf("static frame %q, want an address in addr", got[0])
	}
}

// A binary without any symbol gives addresses, with a note said once.
func TestNoSymbolsNoted(t *testing.T) {
	pid, local, _ := cProcess(t, func(bin string) {
		if out, err := exec.Command("strip", "--strip-all", bin).CombinedOutput(); err != nil {
			t.Skipf("strip: %v %s", err, out)
		}
	})
	s := New(Options{})
	frames, _ := s.AppendUser(nil, pid, []uint64{local + 2}, true, 0)
	frames, _ = s.AppendUser(frames, pid, []uint64{local + 3}, true, 0)
	for _, f := range frames {
		if f.Function != "" && f.Function != "_init" {
			// .dynsym of a stripped PIE may still name a neighbour.
			t.Logf("frame %+v", f)
		}
		if f.Function == "local_burn" {
			t.Errorf("frame %+v named a function stripped away", f)
		}
	}
	if len(s.Notes()) > 1 {
		t.Errorf("notes %v, want at most one", s.Notes())
	}
}

// A stripped binary is resolved through the debug file its build id
// names.
func TestDebugFileByBuildID(t *testing.T) {
	debugDir := t.TempDir()
	pid, local, _ := cProcess(t, func(bin string) {
		ef, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		id := buildIDOf(ef)
		ef.Close()
		if id == "" {
			t.Skip("the compiler gave no build id")
		}
		dir := filepath.Join(debugDir, ".build-id", id[:2])
		os.MkdirAll(dir, 0o755)
		if out, err := exec.Command("objcopy", "--only-keep-debug", bin, filepath.Join(dir, id[2:]+".debug")).CombinedOutput(); err != nil {
			t.Skipf("objcopy: %v %s", err, out)
		}
		if out, err := exec.Command("strip", "--strip-all", bin).CombinedOutput(); err != nil {
			t.Skipf("strip: %v %s", err, out)
		}
	}, "-g", "-Wl,--build-id")
	s := New(Options{DebugDirs: []string{debugDir}})
	frames, _ := s.AppendUser(nil, pid, []uint64{local + 2}, true, 0)
	if frames[0].Function != "local_burn" {
		t.Errorf("frame %+v, want local_burn from the debug file; notes %v", frames[0], s.Notes())
	}
}

// A process gone before its stacks are resolved gives addresses and one
// note, and no error.
func TestExitedProcess(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	s := New(Options{})
	pid := cmd.Process.Pid
	frames, _ := s.AppendUser(nil, pid, []uint64{0x401000, 0x401010}, true, 0)
	frames, _ = s.AppendUser(frames, pid, []uint64{0x401020}, true, 0)
	for _, f := range frames {
		if f.Function != "" || f.Module != "" {
			t.Errorf("frame %+v of a process that is gone", f)
		}
	}
	if n := len(s.Notes()); n != 1 {
		t.Errorf("%d notes %v, want one", n, s.Notes())
	}
}

// fakeProc lays out a /proc with one process whose maps are given, and
// returns its root.
func fakeProc(t *testing.T, pid int, maps string, perfMap *string) string {
	t.Helper()
	proc := t.TempDir()
	dir := filepath.Join(proc, fmt.Sprint(pid))
	os.MkdirAll(filepath.Join(dir, "root", "tmp"), 0o755)
	os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644)
	os.WriteFile(filepath.Join(dir, "status"), []byte(fmt.Sprintf("Name:\tjit\nNSpid:\t%d\t7\n", pid)), 0o644)
	if perfMap != nil {
		os.WriteFile(filepath.Join(dir, "root", "tmp", "perf-7.map"), []byte(*perfMap), 0o644)
	}
	return proc
}

// JIT code in anonymous memory is named by the process's perf map, found
// in its own root under its own namespace's pid.
func TestPerfMap(t *testing.T) {
	perfMap := "7f0000001000 100 LazyCompile:*handle app.js:10\n0x7f0000002000 0x80 Interpreter\nbad line\n"
	proc := fakeProc(t, 4242, "7f0000000000-7f0000010000 rwxp 00000000 00:00 0 \n", &perfMap)
	s := New(Options{Proc: proc, Kallsyms: filepath.Join(proc, "none")})
	frames, _ := s.AppendUser(nil, 4242, []uint64{0x7f0000001010, 0x7f0000002041, 0x7f0000003000}, true, 0)
	want := []string{"LazyCompile:*handle app.js:10", "Interpreter", "[jit]+0x7f0000003000"}
	if got := names(frames); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("frames %q, want %q", got, want)
	}
	if frames[0].Module != profile.JITModule {
		t.Errorf("module %q, want %q", frames[0].Module, profile.JITModule)
	}
	if len(s.Notes()) != 0 {
		t.Errorf("notes %v, want none", s.Notes())
	}
}

// A process with JIT code and no perf map is said once.
func TestMissingPerfMapNotedOnce(t *testing.T) {
	proc := fakeProc(t, 4243, "7f0000000000-7f0000010000 r-xp 00000000 00:00 0 \n", nil)
	s := New(Options{Proc: proc})
	for range 3 {
		_, _ = s.AppendUser(nil, 4243, []uint64{0x7f0000001010}, true, 0)
	}
	notes := s.Notes()
	if len(notes) != 1 || !strings.Contains(notes[0].Text, "/tmp/perf-7.map") {
		t.Errorf("notes %v, want one naming /tmp/perf-7.map", notes)
	}
}

// A process that execs another binary is resolved by the new one's
// mappings once its executable changed, not the stale ones.
func TestExecRereadsMaps(t *testing.T) {
	proc := fakeProc(t, 4244, "400000-401000 r-xp 00000000 fe:00 12 /old/binary\n", nil)
	dir := filepath.Join(proc, "4244")
	old, next := filepath.Join(dir, "old"), filepath.Join(dir, "next")
	os.WriteFile(old, nil, 0o644)
	os.WriteFile(next, nil, 0o644)
	os.Symlink(old, filepath.Join(dir, "exe"))
	s := New(Options{Proc: proc})
	frames, _ := s.AppendUser(nil, 4244, []uint64{0x400100}, true, 0)
	if frames[0].Module != "/old/binary" {
		t.Fatalf("frame %+v", frames[0])
	}
	os.WriteFile(filepath.Join(dir, "maps"), []byte("400000-401000 r-xp 00000000 fe:00 13 /new/binary\n"), 0o644)
	os.Remove(filepath.Join(dir, "exe"))
	os.Symlink(next, filepath.Join(dir, "exe"))
	s.procs[4244].mapsRead = s.procs[4244].mapsRead.Add(-exeCheckInterval)
	frames, _ = s.AppendUser(nil, 4244, []uint64{0x400100}, true, 0)
	if frames[0].Module != "/new/binary" {
		t.Errorf("frame %+v after an exec, want /new/binary", frames[0])
	}
	// Neither binary could be read: each is noted once.
	if n := len(s.Notes()); n != 2 {
		t.Errorf("notes %v, want one for each binary", s.Notes())
	}
}

// An address no mapping holds (unmapped since it was sampled) is read
// again once, and stays an address.
func TestUnmappedAddress(t *testing.T) {
	proc := fakeProc(t, 4245, "400000-401000 r-xp 00000000 fe:00 12 /some/binary\n", nil)
	s := New(Options{Proc: proc})
	_, _ = s.AppendUser(nil, 4245, []uint64{0x400100}, true, 0)
	os.WriteFile(filepath.Join(proc, "4245", "maps"), nil, 0o644)
	s.procs[4245].mapsRead = s.procs[4245].mapsRead.Add(-mapsRefreshInterval)
	frames, _ := s.AppendUser(nil, 4245, []uint64{0x500000}, true, 0)
	if frames[0].Module != "" || frames[0].Function != "" || len(s.procs[4245].maps) != 0 {
		t.Errorf("frame %+v, maps %v", frames[0], s.procs[4245].maps)
	}
}

func TestKernelFrames(t *testing.T) {
	dir := t.TempDir()
	kallsyms := filepath.Join(dir, "kallsyms")
	os.WriteFile(kallsyms, []byte(`ffffffff81000000 T _stext
ffffffff81001000 T tcp_sendmsg
ffffffff81001800 t tcp_push
ffffffff81002000 D some_data
ffffffffc0001000 t ext4_write [ext4]
`), 0o644)
	s := New(Options{Kallsyms: kallsyms})
	frames := s.AppendKernel(nil, []uint64{0xffffffff81001804, 0xffffffff81001001, 0xffffffffc0001010, 0xffffffffd0000000}, true)
	want := []string{"tcp_push", "tcp_sendmsg", "ext4_write", "[kernel]+0xffffffffd0000000"}
	if got := names(frames); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("frames %q, want %q", got, want)
	}
	if frames[2].Module != "[ext4]" || !frames[0].Kernel {
		t.Errorf("frames %+v", frames)
	}
	// A return address at a function's first byte belongs to the caller.
	frames = s.AppendKernel(nil, []uint64{0xffffffff81001804, 0xffffffff81001800}, true)
	if frames[1].Function != "tcp_sendmsg" {
		t.Errorf("return address resolved to %q, want the caller tcp_sendmsg", frames[1].Function)
	}
}

func TestHiddenKernelSymbols(t *testing.T) {
	kallsyms := filepath.Join(t.TempDir(), "kallsyms")
	os.WriteFile(kallsyms, []byte("0000000000000000 T _stext\n0000000000000000 T tcp_sendmsg\n"), 0o644)
	s := New(Options{Kallsyms: kallsyms})
	frames := s.AppendKernel(nil, []uint64{0xffffffff81001804}, true)
	if frames[0].Function != "" || len(s.Notes()) != 1 || !strings.Contains(s.Notes()[0].Text, "kptr_restrict") {
		t.Errorf("frames %+v notes %v", frames, s.Notes())
	}
}

func TestParseMapsLine(t *testing.T) {
	m, err := parseMapsLine([]byte("7f6aefb4c000-7f6aefca2000 r-xp 00026000 fe:00 326269                     /usr/lib/my lib.so (deleted)"))
	if err != nil {
		t.Fatal(err)
	}
	want := mapping{start: 0x7f6aefb4c000, end: 0x7f6aefca2000, offset: 0x26000, exec: true, dev: "fe:00", inode: 326269, path: "/usr/lib/my lib.so", deleted: true}
	if m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}
	if _, err := parseMapsLine([]byte("7f6aefb4c000 r-xp")); err == nil {
		t.Error("a short line was read")
	}
}

var _ = runtime.GOOS

// Addresses in the vDSO resolve by the ELF image the kernel maps there.
func TestVDSO(t *testing.T) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	var vdso mapping
	for _, m := range parseMaps(strings.NewReader(string(b))) {
		if m.path == "[vdso]" {
			vdso = m
		}
	}
	if vdso.end == 0 {
		t.Skip("no vDSO mapped")
	}
	s := New(Options{})
	// Where clock_gettime is, by the image itself.
	p := s.process(os.Getpid())
	frames, _ := s.AppendUser(nil, os.Getpid(), []uint64{vdso.start + 1}, true, 0)
	obj := s.objects[objectKey{path: "[vdso]"}]
	if obj == nil || len(obj.syms) == 0 {
		t.Fatalf("vDSO read as %+v (frames %+v, notes %v)", obj, frames, s.Notes())
	}
	var at uint64
	for _, sym := range obj.syms {
		if strings.Contains(sym.name, "clock_gettime") {
			at = sym.addr
		}
	}
	frames, _ = s.AppendUser(nil, p.pid, []uint64{vdso.start + at + 2}, true, 0)
	if !strings.Contains(frames[0].Function, "clock_gettime") || frames[0].Module != "[vdso]" {
		t.Errorf("frame %+v, want clock_gettime in [vdso]", frames[0])
	}
	if len(s.Notes()) != 0 {
		t.Errorf("notes %v", s.Notes())
	}
}

// The pcsp tables say where a Go function has pushed no frame: at every
// function's entry, all through an assembly function without one
// (runtime.memmove), and not in the body of one with locals.
func TestGoFrameless(t *testing.T) {
	obj := readObjectFile(t, self(t))
	if obj.goFrames == nil {
		t.Fatal("no pcsp tables read")
	}
	memmove := obj.gotab.LookupFunc("runtime.memmove")
	framed := obj.gotab.LookupFunc("github.com/reqprof/reqprof/collector/symbols.TestGoFrameless")
	if memmove == nil || framed == nil {
		t.Fatal("functions not found")
	}
	for _, pc := range []uint64{memmove.Entry, memmove.Entry + 20, framed.Entry} {
		if !obj.frameless(pc) {
			t.Errorf("%#x (%s) said to have a frame", pc, obj.gotab.PCToFunc(pc).Name)
		}
	}
	inBody := false
	for pc := framed.Entry; pc < framed.End; pc++ {
		if delta, ok := obj.goFrames.spDelta(pc); ok && delta > 0 {
			inBody = true
			break
		}
	}
	if !inBody {
		t.Error("no pc of a function with locals has a frame")
	}
	if _, ok := obj.goFrames.spDelta(framed.End + 1<<30); ok {
		t.Error("a pc past the text has a frame size")
	}
}

// A frameless innermost function's caller, skipped by the walk of frame
// pointers, is put back from the word on top of the stack; a function
// with a frame leaves the stack as walked.
func TestCallerOfFramelessLeaf(t *testing.T) {
	obj := readObjectFile(t, self(t))
	memmove := obj.gotab.LookupFunc("runtime.memmove")
	framed := obj.gotab.LookupFunc("github.com/reqprof/reqprof/collector/symbols.TestGoFrameless")
	var inBody uint64
	for pc := framed.Entry; pc < framed.End && inBody == 0; pc++ {
		if delta, ok := obj.goFrames.spDelta(pc); ok && delta > 0 {
			inBody = pc
		}
	}
	s := New(Options{})
	frames, used := s.AppendUser(nil, os.Getpid(), []uint64{memmove.Entry + 20, inBody + 1}, true, knownPC()+1)
	want := []string{"runtime.memmove", knownName, "github.com/reqprof/reqprof/collector/symbols.TestGoFrameless"}
	if got := names(frames); !used || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("frames %q (top used %v), want %q", got, used, want)
	}
	frames, used = s.AppendUser(nil, os.Getpid(), []uint64{inBody, memmove.Entry + 21}, true, knownPC()+1)
	if len(frames) != 2 || used {
		t.Errorf("frames %q (top used %v) of a framed leaf, want 2 as walked", names(frames), used)
	}
	// A top that points into no function is no return address.
	frames, _ = s.AppendUser(nil, os.Getpid(), []uint64{memmove.Entry + 20}, true, 0x10)
	if len(frames) != 1 {
		t.Errorf("frames %q, want the leaf alone", names(frames))
	}
}

// Preload reads every file a process runs code from, and the kernel's
// symbols, before any sample: a stack then reads no file.
func TestPreload(t *testing.T) {
	kallsyms := filepath.Join(t.TempDir(), "kallsyms")
	os.WriteFile(kallsyms, []byte("ffffffff81000000 T _stext\n"), 0o644)
	s := New(Options{Kallsyms: kallsyms})
	s.Preload(os.Getpid())
	if !s.kernelRead || len(s.kernel) != 1 {
		t.Errorf("kernel symbols not read: %d", len(s.kernel))
	}
	var exe bool
	for key := range s.objects {
		exe = exe || key.path == self(t)
	}
	if !exe {
		t.Errorf("objects read %v, want this binary among them", s.objects)
	}
}
