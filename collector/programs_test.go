package collector

import (
	"slices"
	"testing"
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
