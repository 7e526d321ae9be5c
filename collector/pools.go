package collector

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// The runtimes' pools whose jobs the programs follow are libuv's
// (bpf/pools.h) and CPython's (bpf/pyjobs.h). libuv's probes go where its
// symbols are: in the executable (Node links libuv in and exports its
// API) or in a shared libuv or libnode. CPython's needs no probe: the
// programs read the interpreter's state, given its layout (pylayout.go).

// What a target's report says of its pool.
const (
	PoolFollowed = "followed"
	// PoolNone: no pool of a known runtime in its processes.
	PoolNone = ""
)

// poolProbe is one uprobe of bpf/pools.h: the symbol it attaches to and
// its program; an optional one is skipped where the binary lacks it.
type poolProbe struct {
	symbol   string
	program  func(*reqprofPrograms) *ebpf.Program
	optional bool
}

// libuvProbes: a job queued (its public API; its internal submit, for
// fs and dns, where the symbol table has it), and a job handed back.
var libuvProbes = []poolProbe{
	{symbol: "uv_queue_work", program: func(p *reqprofPrograms) *ebpf.Program { return p.OnUvQueueWork }},
	{symbol: "uv__work_submit", program: func(p *reqprofPrograms) *ebpf.Program { return p.OnUvWorkSubmit }, optional: true},
	{symbol: "uv_async_send", program: func(p *reqprofPrograms) *ebpf.Program { return p.OnUvAsyncSend }},
}

// poolBinaryNames are the shared libraries looked into for libuv besides
// the executable: reading every mapped library's symbols would cost a
// large process seconds.
var poolBinaryNames = []string{"libuv.so", "libnode.so"}

// libuvBinary finds the file mapped into pid that exports libuv's pool
// API, as a path through /proc/PID/root (the process's own view of the
// filesystem); "" when there is none.
func libuvBinary(pid int) (string, error) {
	candidates, err := mappedExecutables(pid)
	if err != nil {
		return "", err
	}
	for _, path := range candidates {
		full := fmt.Sprintf("/proc/%d/root%s", pid, path)
		if exportsSymbol(full, "uv_queue_work") && exportsSymbol(full, "uv_async_send") {
			return full, nil
		}
	}
	return "", nil
}

// mappedExecutables lists pid's executable and the shared libraries of
// poolBinaryNames it maps, executable first.
func mappedExecutables(pid int) ([]string, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return nil, err
	}
	paths := []string{strings.TrimSuffix(exe, " (deleted)")}
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := map[string]bool{paths[0]: true}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.Contains(fields[1], "x") {
			continue
		}
		path := fields[5]
		if seen[path] || !strings.HasPrefix(path, "/") || !isPoolLibrary(filepath.Base(path)) {
			continue
		}
		seen[path] = true
		paths = append(paths, path)
	}
	return paths, sc.Err()
}

func isPoolLibrary(base string) bool {
	for _, name := range poolBinaryNames {
		if strings.HasPrefix(base, name) {
			return true
		}
	}
	return false
}

// exportsSymbol reports whether the ELF file at path defines symbol in
// its dynamic symbol table, the API it exports.
func exportsSymbol(path, symbol string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = exportedSymbol(f, symbol)
	return err == nil
}

// exportedSymbol is the symbol f defines in its dynamic symbol table by
// that name.
func exportedSymbol(f *elf.File, name string) (elf.Symbol, error) {
	syms, err := f.DynamicSymbols()
	if err != nil {
		return elf.Symbol{}, fmt.Errorf("no dynamic symbols: %w", err)
	}
	for _, s := range syms {
		if s.Name == name && s.Section != elf.SHN_UNDEF {
			return s, nil
		}
	}
	return elf.Symbol{}, fmt.Errorf("exports no %s", name)
}

// attachPools attaches the pool probes in each target's processes that
// run libuv, each probe firing in that process only, and says per target
// how its pool is followed (PoolFollowed, PoolNone, or why not). The
// links are the caller's to close, also on error.
func attachPools(objs *bpfObjects, procs []*process) []link.Link {
	var links []link.Link
	for _, p := range procs {
		p.pool = PoolNone
		for _, pid := range append([]int{p.PID}, p.members...) {
			made, status := attachPool(objs, pid)
			links = append(links, made...)
			if status != PoolNone && p.pool != PoolFollowed {
				p.pool = status
			}
		}
	}
	return links
}

// attachPool attaches the pool probes in pid if it runs libuv, or gives
// the programs its interpreter's layout if it runs CPython.
func attachPool(objs *bpfObjects, pid int) ([]link.Link, string) {
	path, err := libuvBinary(pid)
	if err != nil {
		return nil, PoolNone // gone
	}
	if path == "" {
		return nil, followPython(objs, pid)
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, "not followed: " + err.Error()
	}
	var links []link.Link
	for _, probe := range libuvProbes {
		l, err := ex.Uprobe(probe.symbol, probe.program(&objs.reqprofPrograms), &link.UprobeOptions{PID: pid})
		if err != nil {
			if probe.optional && errors.Is(err, link.ErrNoSymbol) {
				continue
			}
			for _, made := range links {
				made.Close()
			}
			return nil, fmt.Sprintf("not followed: uprobe on %s: %v", probe.symbol, err)
		}
		links = append(links, l)
	}
	return links, PoolFollowed
}

// followPython gives the programs pid's interpreter's layout, if it
// runs a CPython whose layout is known, and says how its pool is followed.
func followPython(objs *bpfObjects, pid int) string {
	layout, err := pythonLayout(pid)
	if errors.Is(err, errNotPython) {
		return PoolNone
	}
	if err != nil {
		return "not followed: " + err.Error()
	}
	if err := objs.PyLayouts.Update(uint32(pid), &layout, ebpf.UpdateAny); err != nil {
		return "not followed: " + err.Error()
	}
	return PoolFollowed
}

// poolCalibrationCalls is how many calls of poolCalibrationPoint each
// round of calibratePoolEntry times, with and without a probe.
const poolCalibrationCalls = 2000

// poolCalibrationPoint is what calibratePoolEntry puts a probe on: a
// function of the collector's own, called in a loop.
//
//go:noinline
func poolCalibrationPoint(x uint64) uint64 { return x*3 + 1 }

// calibratePoolEntry measures what a pool probe's run costs the thread
// that hits it besides its program's own run, which is timed apart: a
// uprobe's trap into the kernel and back, far dearer than a tracepoint's
// (some 7 µs a hit on the test VM). It puts prog on a function of the
// collector, which is no target (the program returns at once), and times
// calls on the collector's thread with and without it, as the syscall
// entry cost is calibrated: the median of rounds of each.
func calibratePoolEntry(prog *ebpf.Program) (float64, error) {
	exe, err := link.OpenExecutable("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	symbol := runtime.FuncForPC(reflect.ValueOf(poolCalibrationPoint).Pointer()).Name()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bare := timePoolCalibrationCalls()
	l, err := exe.Uprobe(symbol, prog, &link.UprobeOptions{PID: os.Getpid()})
	if err != nil {
		return 0, fmt.Errorf("uprobe on the collector's %s: %w", symbol, err)
	}
	probed := timePoolCalibrationCalls()
	l.Close()
	return max(probed-bare, 0), nil
}

// timePoolCalibrationCalls is the median CPU (ns) a call of
// poolCalibrationPoint costs the calling thread over a few rounds.
func timePoolCalibrationCalls() float64 {
	var perCall []float64
	var sink uint64
	for range calibrationRounds {
		start := threadCPUNs()
		for i := range poolCalibrationCalls {
			sink += poolCalibrationPoint(uint64(i))
		}
		perCall = append(perCall, float64(threadCPUNs()-start)/poolCalibrationCalls)
	}
	poolCalibrationSink = sink
	slices.Sort(perCall)
	return perCall[len(perCall)/2]
}

// poolCalibrationSink keeps the calls from being optimised away.
var poolCalibrationSink uint64
