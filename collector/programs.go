package collector

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Limits of the BPF side that the collector works within, from the enum
// limits in bpf/types.h.
const (
	maxTargets = int(reqprofLimitsMAX_TARGETS)
	// MaxTargets is the most targets one window profiles: the programs
	// have room for maxTargets, and the last index is the collector's own
	// thread's while it calibrates (calibrationTarget).
	MaxTargets = maxTargets - 1
	// MaxCaptureBytes is the most bytes of a request's first read that can
	// be captured to name it.
	MaxCaptureBytes = int(reqprofLimitsPAYLOAD_MAX)
)

// tracepointKernel says which Linux added a tracepoint, for the error that
// names what is missing, and whether reqprof works without it (with less
// detail).
type tracepointKernel struct {
	since    string
	optional bool
	// notLite: not attached in lite mode (Config.Lite), as it runs on
	// every syscall, interrupt or page fault of the machine.
	notLite bool
}

// tracepointKernels has an entry for each tracepoint a program of
// bpf/reqprof.bpf.c attaches to (SEC("tp_btf/NAME")); which program
// attaches where is read from the compiled spec, and a test checks that
// this table names those tracepoints and no other.
var tracepointKernels = map[string]tracepointKernel{
	"sched_switch":        {since: "2.6"},
	"sched_waking":        {since: "4.3"},
	"sched_wakeup":        {since: "2.6"},
	"sched_wakeup_new":    {since: "2.6"},
	"sched_process_fork":  {since: "2.6"},
	"sys_enter":           {since: "3.7", notLite: true},
	"sys_exit":            {since: "3.7", notLite: true},
	"sock_recv_length":    {since: "6.3"},
	"sock_send_length":    {since: "6.3"},
	"inet_sock_set_state": {since: "4.16"},
	"softirq_entry":       {since: "2.6", notLite: true},
	"softirq_exit":        {since: "2.6", notLite: true},
	"irq_handler_entry":   {since: "2.6", notLite: true},
	"irq_handler_exit":    {since: "2.6", notLite: true},
	// x86 only: the local APIC timer is no irq_handler.
	"local_timer_entry": {since: "3.10", optional: true, notLite: true},
	"local_timer_exit":  {since: "3.10", optional: true, notLite: true},
	"page_fault_user":   {since: "3.13", optional: true, notLite: true},
}

// embeddedSpec is reqprof's compiled BPF, parsed once: preflight, loading
// and the names other tools look for all read it, and load works on a copy
// of it, since it sets the config.
var embeddedSpec = sync.OnceValues(loadReqprof)

// hook is one program attached to a tracepoint.
type hook struct {
	program    string // its name in the spec
	tracepoint string
	tracepointKernel
}

// hooksOf lists the programs of spec that attach to a tracepoint, in the
// order of their names.
func hooksOf(spec *ebpf.CollectionSpec) []hook {
	var hooks []hook
	for name, p := range spec.Programs {
		if p.Type != ebpf.Tracing || p.AttachType != ebpf.AttachTraceRawTp {
			continue
		}
		hooks = append(hooks, hook{program: name, tracepoint: p.AttachTo, tracepointKernel: tracepointKernels[p.AttachTo]})
	}
	slices.SortFunc(hooks, func(a, b hook) int { return cmp.Compare(a.program, b.program) })
	return hooks
}

// bpfObjects are reqprof's loaded programs, maps and variables, by their
// generated names, and its tracepoint programs in a list to attach and to
// read the run time of.
type bpfObjects struct {
	reqprofObjects
	hooks []loadedHook
	lite  bool // Config.Lite: the programs on every syscall, interrupt and fault are not attached
}

type loadedHook struct {
	hook
	prog *ebpf.Program // owned by reqprofObjects
}

// emptyProgram returns at once: what a program not needed is loaded as.
var emptyProgram = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}

// load loads reqprof's BPF objects with what is fixed before load. Without
// stacks, the stack sampling program is loaded empty: nothing of it can
// keep a kernel that would refuse it from running the rest. In lite mode
// (cfg.Lite) so are the programs it does not attach.
func load(cfg reqprofConfig, stacks bool) (*bpfObjects, error) {
	if cfg.CaptureBytes > uint32(MaxCaptureBytes) {
		return nil, fmt.Errorf("capture bytes %d out of range 1..%d", cfg.CaptureBytes, MaxCaptureBytes)
	}
	embedded, err := embeddedSpec()
	if err != nil {
		return nil, err
	}
	spec := embedded.Copy()
	cfg.StealTimeFromRq = stealClockFromRunQueue()
	var specs reqprofSpecs
	if err := spec.Assign(&specs); err != nil {
		return nil, fmt.Errorf("reading reqprof's BPF spec: %w", err)
	}
	if err := specs.Cfg.Set(cfg); err != nil {
		return nil, fmt.Errorf("configuring the BPF programs: %w", err)
	}
	if !stacks {
		specs.SampleStack.Instructions = emptyProgram
	}
	lite := cfg.Lite != 0
	if lite {
		for _, h := range hooksOf(spec) {
			if h.notLite {
				spec.Programs[h.program].Instructions = emptyProgram
			}
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, describeLoadError(err)
	}
	objs := &bpfObjects{}
	var emptied []*ebpf.Program
	for _, h := range hooksOf(spec) {
		if lite && h.notLite {
			emptied = append(emptied, coll.Programs[h.program])
			continue
		}
		objs.hooks = append(objs.hooks, loadedHook{hook: h, prog: coll.Programs[h.program]})
	}
	objs.lite = lite
	if err := coll.Assign(&objs.reqprofObjects); err != nil {
		coll.Close()
		return nil, fmt.Errorf("loading BPF programs: %w", err)
	}
	coll.Close() // what reqprofObjects does not own
	// Lite mode's emptied programs are loaded only because the generated
	// objects name every program; never attached, they are let go, so
	// that reqprof holds just what it runs (what bpftool and make bench
	// list of it).
	for _, p := range emptied {
		p.Close()
	}
	return objs, nil
}

// programs are the tracepoint programs, loaded.
func (o *bpfObjects) programs() []*ebpf.Program {
	progs := make([]*ebpf.Program, len(o.hooks))
	for i, h := range o.hooks {
		progs[i] = h.prog
	}
	return progs
}

// attachAll attaches every tracepoint program; on error it returns the
// links made so far so the caller can close them. Optional tracepoints
// (x86's local timer, user page faults) are skipped where the kernel lacks
// them.
func attachAll(objs *bpfObjects) ([]link.Link, error) {
	var links []link.Link
	for _, h := range objs.hooks {
		l, err := link.AttachTracing(link.TracingOptions{Program: h.prog})
		if err != nil {
			if h.optional {
				continue
			}
			return links, fmt.Errorf("attaching to tracepoint %s: %w", h.tracepoint, err)
		}
		links = append(links, l)
	}
	return links, nil
}

// rejectedProgram finds the program's name in cilium/ebpf's load error.
var rejectedProgram = regexp.MustCompile(`program (\w+): load program`)

// describeLoadError keeps the part of a verifier log that says why.
func describeLoadError(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		log := ve.Log
		if len(log) > 6 {
			log = log[len(log)-6:]
		}
		which := "reqprof's BPF programs"
		if m := rejectedProgram.FindStringSubmatch(err.Error()); m != nil {
			which = "reqprof's BPF program " + m[1]
		}
		return fmt.Errorf("the kernel's verifier rejected %s: %s", which, strings.Join(log, " | "))
	}
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("loading BPF programs was refused (not root, or locked down): %w", err)
	}
	return fmt.Errorf("loading BPF programs: %w", err)
}

// stealClockFromRunQueue is where a CPU's KVM steal clock lies from its run
// queue, in bytes: both are per-CPU variables (steal_time, runqueues), so
// the distance is the same on every CPU, and the kernel's BTF gives their
// offsets. 0 where the kernel is no KVM guest or its BTF lacks either: the
// programs then read no steal clock (threads.h: steal_clock).
func stealClockFromRunQueue() int64 {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return 0
	}
	var percpu *btf.Datasec
	if err := kernel.TypeByName(".data..percpu", &percpu); err != nil {
		return 0
	}
	return percpuDistance(percpu, "runqueues", "steal_time")
}

// percpuDistance is to's offset less from's in the per-CPU section, 0
// when either is not there.
func percpuDistance(percpu *btf.Datasec, from, to string) int64 {
	offsets := map[string]int64{}
	for _, v := range percpu.Vars {
		if variable, ok := v.Type.(*btf.Var); ok && (variable.Name == from || variable.Name == to) {
			offsets[variable.Name] = int64(v.Offset)
		}
	}
	fromOff, okFrom := offsets[from]
	toOff, okTo := offsets[to]
	if !okFrom || !okTo {
		return 0
	}
	return toOff - fromOff
}
