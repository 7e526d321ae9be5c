// Package live keeps figures of a window while it runs: the collector hands
// each finished request to Config.OnRequest, and live counts it per target
// and route (Tally), writes it to a log (RequestLog), and shows a table of
// the last second (View). reqprof serve exposes a Tally to Prometheus;
// reqprof attach shows it on a terminal.
//
// A Tally's counts only grow: they are totals since it was made, over every
// window that fed it, so that a target that restarts (and is attached anew)
// goes on counting in the same series.
package live

import (
	"sync"
	"unsafe"

	"github.com/reqprof/reqprof/profile"
)

// DefaultMaxRoutes is how many routes a target has figures of its own for
// by default; requests of any further route count under OtherRoute.
const DefaultMaxRoutes = 50

// OtherRoute names the routes folded together past a target's bound, as
// the collector and the reports name them.
const OtherRoute = profile.OtherRoutes

// Counts are the totals of a set of finished requests.
type Counts struct {
	Requests   uint64
	CPUNs      uint64
	UserNs     uint64
	KernelNs   uint64
	SyscallNs  uint64 // KernelNs by cause kind: syscalls,
	SoftirqNs  uint64 // softirqs that ran over the request's thread,
	IrqNs      uint64 // and hard interrupts.
	RunqueueNs uint64
	OffCPUNs   uint64
	LatencyNs  uint64
	BytesIn    uint64
	BytesOut   uint64
}

func (c *Counts) add(r *profile.Request) {
	c.Requests++
	c.CPUNs += r.UserNs + r.KernelNs
	c.UserNs += r.UserNs
	c.KernelNs += r.KernelNs
	c.SyscallNs += r.SyscallNs
	c.SoftirqNs += r.SoftirqNs
	c.IrqNs += r.IrqNs
	c.RunqueueNs += r.RunqueueNs
	c.OffCPUNs += r.OffCPUNs
	c.LatencyNs += r.LatencyNs()
	c.BytesIn += r.BytesIn
	c.BytesOut += r.BytesOut
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Requests += o.Requests
	c.CPUNs += o.CPUNs
	c.UserNs += o.UserNs
	c.KernelNs += o.KernelNs
	c.SyscallNs += o.SyscallNs
	c.SoftirqNs += o.SoftirqNs
	c.IrqNs += o.IrqNs
	c.RunqueueNs += o.RunqueueNs
	c.OffCPUNs += o.OffCPUNs
	c.LatencyNs += o.LatencyNs
	c.BytesIn += o.BytesIn
	c.BytesOut += o.BytesOut
}

// Sub is c less an earlier reading of the same totals.
func (c Counts) Sub(prev Counts) Counts {
	return Counts{
		Requests: c.Requests - prev.Requests, CPUNs: c.CPUNs - prev.CPUNs,
		UserNs: c.UserNs - prev.UserNs, KernelNs: c.KernelNs - prev.KernelNs,
		SyscallNs: c.SyscallNs - prev.SyscallNs, SoftirqNs: c.SoftirqNs - prev.SoftirqNs, IrqNs: c.IrqNs - prev.IrqNs,
		RunqueueNs: c.RunqueueNs - prev.RunqueueNs, OffCPUNs: c.OffCPUNs - prev.OffCPUNs,
		LatencyNs: c.LatencyNs - prev.LatencyNs, BytesIn: c.BytesIn - prev.BytesIn, BytesOut: c.BytesOut - prev.BytesOut,
	}
}

// routeTally is what a Tally keeps of one route of one target.
type routeTally struct {
	name    string
	counts  Counts
	cpu     Histogram
	latency Histogram
}

// targetTally is what a Tally keeps of one target, by its name.
type targetTally struct {
	name   string
	routes []*routeTally // in the order first seen; the last may be OtherRoute
	byName map[string]*routeTally
	other  *routeTally
	// last is the route of the request before, looked up by the name's
	// bytes: the collector interns route names, so the same route comes
	// as the same string, and a pointer compare saves a map lookup.
	last *routeTally
}

// Tally counts finished requests per target and route, with histograms of
// their CPU and latency, in bounded memory: at most maxRoutes routes per
// target, the rest under OtherRoute. Add is meant for Config.OnRequest;
// Snapshot may be called from any goroutine meanwhile.
type Tally struct {
	mu        sync.Mutex
	maxRoutes int
	targets   []*targetTally // in the order named
	byName    map[string]*targetTally
	// bound maps the collector's target index to the target it counts
	// for; several indices may count for one target (processes of one
	// --comm name).
	bound []*targetTally
}

// NewTally is a Tally keeping figures of their own for at most maxRoutes
// routes of each target (DefaultMaxRoutes when 0 or less).
func NewTally(maxRoutes int) *Tally {
	if maxRoutes <= 0 {
		maxRoutes = DefaultMaxRoutes
	}
	return &Tally{maxRoutes: maxRoutes, byName: map[string]*targetTally{}}
}

// Bind says which target each of the collector's target indices counts
// for, by name, for the next window: names[i] is index i's. A target named
// before keeps its counts.
func (t *Tally) Bind(names []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.bound = t.bound[:0]
	for _, name := range names {
		t.bound = append(t.bound, t.target(name))
	}
}

// Declare makes a target of this name known, with no request yet, so that
// it is shown (and exported) before its first request.
func (t *Tally) Declare(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.target(name)
}

func (t *Tally) target(name string) *targetTally {
	if tt, ok := t.byName[name]; ok {
		return tt
	}
	tt := &targetTally{name: name, byName: map[string]*routeTally{}}
	t.byName[name] = tt
	t.targets = append(t.targets, tt)
	return tt
}

// Add counts one finished request of the collector's target index. It
// allocates nothing once its route is known.
func (t *Tally) Add(index int, r profile.Request) {
	t.mu.Lock()
	if index < len(t.bound) {
		rt := t.bound[index].route(r.Route, t.maxRoutes)
		rt.counts.add(&r)
		rt.cpu.Observe(r.UserNs + r.KernelNs)
		rt.latency.Observe(r.LatencyNs())
	}
	t.mu.Unlock()
}

// route is the tally of the route named name, made if need be, or of
// OtherRoute past the bound.
func (tt *targetTally) route(name string, maxRoutes int) *routeTally {
	if last := tt.last; last != nil && sameString(last.name, name) {
		return last
	}
	rt, ok := tt.byName[name]
	switch {
	case ok:
	case len(tt.byName) < maxRoutes && name != OtherRoute:
		// The collector's own fold is named OtherRoute too: one route.
		rt = &routeTally{name: name}
		tt.byName[name] = rt
		tt.routes = append(tt.routes, rt)
	default:
		if tt.other == nil {
			tt.other = &routeTally{name: OtherRoute}
			tt.routes = append(tt.routes, tt.other)
		}
		rt = tt.other
	}
	tt.last = rt
	return rt
}

// sameString says whether a and b are one string in memory: a cheap test
// that may say no for equal strings, never yes for different ones.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// Snapshot is a Tally's totals at one moment.
type Snapshot struct {
	Targets []TargetSnapshot
}

// TargetSnapshot is one target's totals: every route's, and each route's.
type TargetSnapshot struct {
	Name    string
	Total   RouteSnapshot // Route is empty
	Routes  []RouteSnapshot
	byRoute map[string]int
}

// RouteSnapshot is one route's totals and histograms.
type RouteSnapshot struct {
	Route   string
	Counts  Counts
	CPU     Buckets
	Latency Buckets
}

// Snapshot copies out the totals, under the lock the hook takes: a copy
// of the histograms' counted buckets, a few KB a route.
func (t *Tally) Snapshot() Snapshot {
	t.mu.Lock()
	s := Snapshot{Targets: make([]TargetSnapshot, len(t.targets))}
	for i, tt := range t.targets {
		ts := &s.Targets[i]
		ts.Name = tt.name
		ts.Routes = make([]RouteSnapshot, len(tt.routes))
		for j, rt := range tt.routes {
			r := &ts.Routes[j]
			r.Route, r.Counts = rt.name, rt.counts
			rt.cpu.copyTo(&r.CPU)
			rt.latency.copyTo(&r.Latency)
		}
	}
	t.mu.Unlock()
	for i := range s.Targets {
		ts := &s.Targets[i]
		ts.byRoute = make(map[string]int, len(ts.Routes))
		for j, r := range ts.Routes {
			ts.Total.Counts.Add(r.Counts)
			ts.Total.CPU.Add(r.CPU)
			ts.Total.Latency.Add(r.Latency)
			ts.byRoute[r.Route] = j
		}
	}
	return s
}

// Sub is s less an earlier snapshot of the same Tally: what was counted in
// between, per target and route.
func (s Snapshot) Sub(prev Snapshot) Snapshot {
	d := Snapshot{Targets: make([]TargetSnapshot, len(s.Targets))}
	for i, ts := range s.Targets {
		var before *TargetSnapshot
		if i < len(prev.Targets) && prev.Targets[i].Name == ts.Name {
			before = &prev.Targets[i]
		}
		dt := &d.Targets[i]
		dt.Name = ts.Name
		dt.byRoute = ts.byRoute
		dt.Total = ts.Total.sub(before, -1)
		dt.Routes = make([]RouteSnapshot, len(ts.Routes))
		for j, r := range ts.Routes {
			k := -2
			if before != nil {
				if idx, ok := before.byRoute[r.Route]; ok {
					k = idx
				}
			}
			dt.Routes[j] = r.sub(before, k)
		}
	}
	return d
}

// sub is r less route k of before (-1: its total; -2 or before nil: none).
func (r RouteSnapshot) sub(before *TargetSnapshot, k int) RouteSnapshot {
	var prev RouteSnapshot
	switch {
	case before == nil || k == -2:
	case k == -1:
		prev = before.Total
	default:
		prev = before.Routes[k]
	}
	return RouteSnapshot{Route: r.Route, Counts: r.Counts.Sub(prev.Counts), CPU: r.CPU.Sub(prev.CPU), Latency: r.Latency.Sub(prev.Latency)}
}
