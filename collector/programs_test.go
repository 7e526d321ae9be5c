package collector

import (
	"slices"
	"testing"

	"github.com/cilium/ebpf/btf"
)

// Which program attaches where is read from the compiled spec, the
// kernels that have each tracepoint from tracepointKernels: the two must
// name the same tracepoints, or preflight would pass a kernel that lacks
// one and loading would fail later.
func TestTracepointTableMatchesPrograms(t *testing.T) {
	spec, err := loadReqprof()
	if err != nil {
		t.Fatal(err)
	}
	hooks := hooksOf(spec)
	if len(hooks) == 0 {
		t.Fatal("the spec has no tracepoint program")
	}
	attached := map[string]bool{}
	for _, h := range hooks {
		attached[h.tracepoint] = true
		if h.since == "" {
			t.Errorf("program %s attaches to %s, which tracepointKernels lacks", h.program, h.tracepoint)
		}
	}
	for tp := range tracepointKernels {
		if !attached[tp] {
			t.Errorf("tracepointKernels names %s, which no program attaches to", tp)
		}
	}
	// The iterators are no hooks: they run once, at the window's end.
	for _, name := range []string{"settle_threads", "settle_conns"} {
		if _, ok := spec.Programs[name]; !ok {
			t.Errorf("the spec has no program %s", name)
		}
		if slices.ContainsFunc(hooks, func(h hook) bool { return h.program == name }) {
			t.Errorf("iterator %s listed as a tracepoint program", name)
		}
	}
}

// The steal clock's distance from the run queue is read from the per-CPU
// section's offsets, and is 0 (no steal clock read) when either is missing.
func TestPercpuDistance(t *testing.T) {
	v := func(name string, off uint32) btf.VarSecinfo {
		return btf.VarSecinfo{Type: &btf.Var{Name: name, Type: &btf.Int{Size: 8}}, Offset: off, Size: 8}
	}
	percpu := &btf.Datasec{Name: ".data..percpu", Vars: []btf.VarSecinfo{v("this_cpu_off", 86056), v("steal_time", 97280), v("runqueues", 195776)}}
	if got := percpuDistance(percpu, "runqueues", "steal_time"); got != 97280-195776 {
		t.Errorf("distance %d, want %d", got, 97280-195776)
	}
	noGuest := &btf.Datasec{Name: ".data..percpu", Vars: []btf.VarSecinfo{v("runqueues", 195776)}}
	if got := percpuDistance(noGuest, "runqueues", "steal_time"); got != 0 {
		t.Errorf("without steal_time: %d, want 0", got)
	}
}
