// Package profile holds what reqprof measures, as plain values: runs,
// targets, requests, their costs and causes. It is the leaf every other
// package shares: the collector fills it, the renderers in report read it.
// It does no I/O and imports nothing but the standard library.
package profile

import "time"

// Request is one finished request, as charged in the kernel: every
// nanosecond a target thread spent on a CPU while serving it.
type Request struct {
	TID        uint32
	Conn       uint64        // opaque connection identity (socket cookie)
	Route      string        // what it asked for ("GET /users/{id}"), or ":PORT"
	Protocol   string        // how it came: "http1", "h2", "grpc", "resp", "jsonrpc", "fastcgi"; "" unknown
	Port       uint16        // the local port it came in on
	Start      time.Duration // monotonic clock: its first bytes read
	FirstWrite time.Duration // monotonic clock: its first response bytes written
	End        time.Duration // monotonic clock: its last response bytes written
	UserNs     uint64        // on-CPU outside syscalls and interrupts
	KernelNs   uint64        // on-CPU in the kernel: SyscallNs + SoftirqNs + IrqNs
	SyscallNs  uint64
	SoftirqNs  uint64 // softirqs that ran over its thread (NET_RX, TIMER, ...)
	IrqNs      uint64 // hard interrupt handlers that ran over its thread
	RunqueueNs uint64 // runnable, waiting for a CPU
	OffCPUNs   uint64 // blocked: sleeping until woken (locks, disk, timers)
	PageFaults uint32 // user page faults

	VoluntarySwitches   uint32
	InvoluntarySwitches uint32

	BytesIn  uint64
	BytesOut uint64
	// SelfNs is what reqprof's own programs cost in its context: taken
	// out of the figures above, unless the run was made gross.
	SelfNs uint64

	// TailNs is the part of its CPU (UserNs + KernelNs) after its last
	// response byte was written: its thread's loop until it turned to
	// other work (its next request's read, another connection, a wait for
	// events). It is outside its latency: the rest of its CPU, less
	// SetupNs, ran from its first byte read to its last written.
	// TailSelfNs is the part of SelfNs that ran in the tail; TailNs is net
	// of it as the whole is.
	TailNs     uint64
	TailSelfNs uint64

	// Interleaved: which request some of its CPU served is estimated: its
	// thread began another request before answering it, in a runtime
	// reqprof has no model of, or a pool thread took its job from a
	// queue the kernel cannot tell apart.
	Interleaved bool

	// Peer is, for a call the target made as a client on an outbound
	// connection, whom it called ("127.0.0.1:9400", "[::1]:80", "unix");
	// "" for a request it served. A call starts at its first write after
	// the previous answer on its connection was read, its FirstWrite and
	// End are the first and last read of its answer, BytesOut the call,
	// BytesIn the answer.
	Peer string

	// SetupNs is the part of its CPU that was its connection's setup and
	// teardown: the accept, the thread or process made for the
	// connection until it first read it, the close and what the closing
	// thread did after it until it exited or turned to other work. A
	// connection's setup goes to its first request, its teardown to its
	// last.
	SetupNs uint64
}

// UnattributedSource is CPU a target's thread spent on a CPU while serving
// no request.
type UnattributedSource struct {
	TID  uint32 // 0 for the threads that exited in the window, whose ids are gone
	Comm string // the thread's name at the window's end, or ExitedThreads
	Ns   uint64
	// Threads is how many threads it stands for: 1 for a thread, or for
	// the entry of TID 0, how many threads exited in the window.
	Threads int
}

// ExitedThreads names the unattributed CPU of threads that exited before
// the window's end, when their names could no longer be read.
const ExitedThreads = "(exited)"

// LatencyNs is wall time from its first byte read to its last byte written.
func (r Request) LatencyNs() uint64 { return uint64(r.End - r.Start) }

// FirstByteNs is wall time from its first byte read to its first byte
// written; 0 when it wrote nothing.
func (r Request) FirstByteNs() uint64 {
	if r.FirstWrite < r.Start {
		return 0
	}
	return uint64(r.FirstWrite - r.Start)
}

// KernelCost is kernel time spent for one Cause (syscall write, softirq
// NET_RX, irq), summed over requests.
type KernelCost struct {
	Ns    uint64
	Calls uint64 // syscalls only
}

// CPUNs is the request's whole on-CPU time.
func (r Request) CPUNs() uint64 { return r.UserNs + r.KernelNs }

// Target is everything measured for one profiled process over the window.
type Target struct {
	PID     int
	Comm    string
	Label   string // user's name for it (--pid 111=rust-sdk); empty if none
	Threads int    // threads seen on a CPU during the window

	// Finished sums every request that finished inside the window, and
	// RouteTotals the same per route name and port, so that counts, means
	// and maxima stay exact however many requests there were.
	Finished    Totals
	RouteTotals map[RouteKey]Totals
	// Requests are a uniform random sample of the finished requests: all
	// of them unless more than the collector's cap finished. The
	// percentiles and the CPU histogram come from them. A Target built
	// with Requests alone (Finished.Requests == 0) has its totals worked
	// out from them.
	Requests []Request

	// KernelBreakdown sums the finished requests' kernel time by cause.
	KernelBreakdown map[Cause]KernelCost

	// All waiting of the target's threads, in requests or not, for
	// comparison with the kernel's own counters.
	RunqueueNs uint64
	OffCPUNs   uint64

	// UnseenSwitchIns counts the times one of its threads ran with no
	// switch-in seen: the kernel ran no tracepoint for that switch (it
	// traces none from some tasks), and the slice was opened at the
	// thread's first event, its time since the switch-in taken from the
	// kernel's accounting. Its CPU is counted all the same.
	UnseenSwitchIns uint64

	// StolenNs is the time (ns) the hypervisor kept the CPU from its
	// threads while they were on it (a virtual machine's steal time), by
	// the CPU's steal clock: left out of every figure, as the kernel
	// leaves it out of the threads' own CPU time.
	StolenNs uint64

	// CPU (ns) charged to requests that had not finished when the window
	// closed, or whose start was before it: counted as attributed, but not
	// in the per-request distribution.
	UnfinishedNs       uint64
	UnfinishedRequests int

	UnattributedNs uint64 // target threads on a CPU while serving no request
	// UnattributedSources say which threads UnattributedNs went to (GC
	// workers, timers, idle loops), so a user can judge it: one entry per
	// thread that had some, largest first, and one for the threads that
	// exited in the window. They add up to UnattributedNs.
	UnattributedSources []UnattributedSource
	// BetweenRequestsNs is the part of AttributedNs a thread spent after
	// writing a response and before its next request: the server's loop
	// (epoll_wait, accept, bookkeeping).
	BetweenRequestsNs uint64

	// SchedCPUNs is the process's CPU over the window by the kernel's own
	// accounting (CLOCK_PROCESS_CPUTIME_ID), independent of reqprof's BPF.
	SchedCPUNs uint64

	LostEvents uint64 // records or events reqprof could not keep: the sum of LostBreakdown
	// LostBreakdown says where: "ring_buffer" (records the collector read
	// too slowly), "thread_map_full" (no kernel memory for a thread's
	// state; the key predates task storage), "conn_map_full", "malformed".
	LostBreakdown map[string]uint64
	Exited        bool // the process exited before the window closed
	// PerBurst counts, by why, the finished requests counted one per
	// burst (the first bytes read after a response to the last written)
	// because their connection's bytes could not be followed: TLS, an
	// unknown protocol, HTTP/2 joined after its connection opened, a
	// malformed frame. Such a burst may hold several requests, or part of one.
	PerBurst map[string]uint64
	// Notifications counts the JSON-RPC notifications (and responses to
	// the server's own requests) that clients sent raw on a connection:
	// messages that get no answer, so no requests; their CPU is shared by
	// the requests read with them.
	Notifications uint64
	// Execd is the program the process exec'd during the window, the
	// path of its new executable, or "" if it exec'd none: the figures
	// after ExecdAfter (into the window, to within the collector's poll
	// interval) are of that program.
	Execd      string
	ExecdAfter time.Duration
	// Goroutines says, for a Go process, whether its CPU follows its
	// goroutines ("followed") or, and why not, only its threads; empty
	// for any other process.
	Goroutines string
	// Pool says, for a process running libuv (Node) or CPython, whether the jobs it
	// runs on its pool threads are followed to the requests that queued
	// them ("followed") or, and why not, left unattributed; empty for any
	// other process.
	Pool string
	// PoolJobs counts the jobs its threads queued on the pool while
	// serving a request; PoolJobsDone those of them a pool thread handed
	// back while their request was open, whose PoolNs of pool threads'
	// CPU went to it (part of the attributed CPU).
	PoolJobs, PoolJobsDone uint64
	PoolNs                 uint64
	// PoolJobsUnseen counts the jobs a pool thread ended without having
	// been seen to take them from a request (a Python pool thread that
	// takes its next job before it sleeps): each is charged to the next
	// response left without its job, that request Interleaved.
	PoolJobsUnseen uint64

	// Runtime is how its threads were taken to resume a request whose
	// backend answered: "node" (at once, also nginx and C loops),
	// "asyncio" (a write claims the loop's CPU since its last read, write or poll), "threads" (the
	// caller's own thread; an event loop not recognised is taken to go on
	// at once, and the requests it interleaves say so), "go" (goroutines
	// followed). RuntimeFrom says how it was chosen.
	Runtime     string
	RuntimeFrom string
	// Role is what its outbound connections were taken to be: RoleServer
	// (backends of the requests it serves), RoleClient (its calls, each
	// a request of its own, Request.Peer set), RoleBoth; RoleFrom says
	// how it was chosen ("given", or "detected": a client when it
	// listened on nothing and had no stdio channel). "" in runs saved
	// before roles.
	Role     string
	RoleFrom string
	// Backends are what its finished requests did with the peers of its
	// outbound connections, per route and peer.
	Backends []Backend
	// Stacks are its threads' stack samples, with --stacks; nil without.
	Stacks *Stacks
	// SelfCost is what reqprof's own programs cost the target's threads
	// over the window; its per-request part is Finished.SelfNs.
	SelfCost SelfCost
}

// SelfCost is reqprof's own cost in a target's context: its programs'
// runs on the target's threads, counted in the kernel, each costed at what
// a run was measured to cost.
type SelfCost struct {
	Measured bool // false for a run saved by an earlier build
	// Kept: the figures include it (--gross); else it was taken out of
	// each request's CPU, user/kernel split and kernel breakdown.
	Kept bool
	// TotalNs is over all the target's threads, served a request or not:
	// what its process's CPU includes of it.
	TotalNs uint64
	// SpreadNs is TotalNs's standard error: that of the entry cost's
	// calibration, and the spread of the programs' run time over
	// TimingSamples samples of the window, when there were two or more
	// (with fewer, SpreadNs holds the entry cost's part alone).
	SpreadNs      uint64
	TimingSamples int
}

// AttributedNs is CPU charged to any request, finished or not.
func (t Target) AttributedNs() uint64 { return t.Totals().CPUNs + t.UnfinishedNs }

// Totals are t.Finished, or when that is unset, the totals of t.Requests:
// a Target built by hand may hold every request and no totals.
func (t Target) Totals() Totals {
	if t.Finished.Requests > 0 {
		return t.Finished
	}
	var sum Totals
	for _, r := range t.Requests {
		sum.Add(r)
	}
	return sum
}

// TotalsByRoute are t.RouteTotals, or when t.Finished is unset, the totals
// of t.Requests per route, as for Totals.
func (t Target) TotalsByRoute() map[RouteKey]Totals {
	if t.Finished.Requests > 0 {
		return t.RouteTotals
	}
	return RouteTotalsOf(t.Requests)
}

// RouteTotalsOf sums reqs per route name and port.
func RouteTotalsOf(reqs []Request) map[RouteKey]Totals {
	byRoute := map[RouteKey]Totals{}
	for _, r := range reqs {
		key := r.Key()
		sum := byRoute[key]
		sum.Add(r)
		byRoute[key] = sum
	}
	return byRoute
}

// Backend is what the finished requests of one route did with one
// backend, a peer of the target's outbound connections (a database,
// another service, a proxy's upstream): sums over the requests.
type Backend struct {
	Route RouteKey
	Peer  string // "127.0.0.1:9400", "[::1]:5432", or "unix"
	Calls uint64
	// WaitNs runs from each call's first write to its answer's last read.
	WaitNs   uint64
	BytesIn  uint64 // answers read
	BytesOut uint64 // calls written
}

// Totals are exact sums over every finished request, kept as requests
// finish, so that counts and means stay exact when only a sample of the
// requests themselves is kept. Each Max is the largest of one request's
// figure, as the distributions show it.
type Totals struct {
	Requests int
	// Protocol is the requests' protocol when all came by one, else
	// MixedProtocols.
	Protocol string

	CPUNs       uint64
	UserNs      uint64
	KernelNs    uint64
	RunqueueNs  uint64
	OffCPUNs    uint64
	LatencyNs   uint64
	FirstByteNs uint64

	BytesIn             uint64
	BytesOut            uint64
	PageFaults          uint64
	VoluntarySwitches   uint64
	InvoluntarySwitches uint64
	SelfNs              uint64
	SetupNs             uint64 // part of CPUNs: connection setup and teardown (Request.SetupNs)
	TailNs              uint64 // part of CPUNs: after the last response byte (Request.TailNs)
	TailSelfNs          uint64 // part of SelfNs: in the tails

	MaxCPUNs       uint64
	MaxUserNs      uint64
	MaxKernelNs    uint64
	MaxRunqueueNs  uint64
	MaxOffCPUNs    uint64
	MaxLatencyNs   uint64
	MaxFirstByteNs uint64

	// InterleavedNs is the CPU of the requests that were Interleaved:
	// how much of CPUNs is estimated.
	InterleavedNs uint64
}

// Add counts one finished request. It allocates nothing: the collector
// calls it for every request.
func (t *Totals) Add(r Request) {
	cpu, latency, firstByte := r.CPUNs(), r.LatencyNs(), r.FirstByteNs()
	t.Protocol = mergeProtocol(t.Protocol, r.Protocol, t.Requests)
	t.Requests++
	t.CPUNs += cpu
	t.UserNs += r.UserNs
	t.KernelNs += r.KernelNs
	t.RunqueueNs += r.RunqueueNs
	t.OffCPUNs += r.OffCPUNs
	t.LatencyNs += latency
	t.FirstByteNs += firstByte
	t.BytesIn += r.BytesIn
	t.BytesOut += r.BytesOut
	t.PageFaults += uint64(r.PageFaults)
	t.VoluntarySwitches += uint64(r.VoluntarySwitches)
	t.InvoluntarySwitches += uint64(r.InvoluntarySwitches)
	t.SelfNs += r.SelfNs
	t.SetupNs += r.SetupNs
	t.TailNs += r.TailNs
	t.TailSelfNs += r.TailSelfNs
	t.MaxCPUNs = max(t.MaxCPUNs, cpu)
	t.MaxUserNs = max(t.MaxUserNs, r.UserNs)
	t.MaxKernelNs = max(t.MaxKernelNs, r.KernelNs)
	t.MaxRunqueueNs = max(t.MaxRunqueueNs, r.RunqueueNs)
	t.MaxOffCPUNs = max(t.MaxOffCPUNs, r.OffCPUNs)
	t.MaxLatencyNs = max(t.MaxLatencyNs, latency)
	t.MaxFirstByteNs = max(t.MaxFirstByteNs, firstByte)
	if r.Interleaved {
		t.InterleavedNs += cpu
	}
}

// MixedProtocols is the protocol of totals over requests that came by
// more than one.
const MixedProtocols = "mixed"

// mergeProtocol is the protocol of totals of had requests by protocol
// sum, joined by ones by protocol add.
func mergeProtocol(sum, add string, had int) string {
	switch {
	case had == 0:
		return add
	case sum == add:
		return sum
	}
	return MixedProtocols
}

// Merge adds the requests o counts, as if each had been added here.
func (t *Totals) Merge(o Totals) {
	t.Protocol = mergeProtocol(t.Protocol, o.Protocol, t.Requests)
	t.Requests += o.Requests
	t.CPUNs += o.CPUNs
	t.UserNs += o.UserNs
	t.KernelNs += o.KernelNs
	t.RunqueueNs += o.RunqueueNs
	t.OffCPUNs += o.OffCPUNs
	t.LatencyNs += o.LatencyNs
	t.FirstByteNs += o.FirstByteNs
	t.BytesIn += o.BytesIn
	t.BytesOut += o.BytesOut
	t.PageFaults += o.PageFaults
	t.VoluntarySwitches += o.VoluntarySwitches
	t.InvoluntarySwitches += o.InvoluntarySwitches
	t.SelfNs += o.SelfNs
	t.SetupNs += o.SetupNs
	t.TailNs += o.TailNs
	t.TailSelfNs += o.TailSelfNs
	t.MaxCPUNs = max(t.MaxCPUNs, o.MaxCPUNs)
	t.MaxUserNs = max(t.MaxUserNs, o.MaxUserNs)
	t.MaxKernelNs = max(t.MaxKernelNs, o.MaxKernelNs)
	t.MaxRunqueueNs = max(t.MaxRunqueueNs, o.MaxRunqueueNs)
	t.MaxOffCPUNs = max(t.MaxOffCPUNs, o.MaxOffCPUNs)
	t.MaxLatencyNs = max(t.MaxLatencyNs, o.MaxLatencyNs)
	t.MaxFirstByteNs = max(t.MaxFirstByteNs, o.MaxFirstByteNs)
	t.InterleavedNs += o.InterleavedNs
}

// RouteKey is what a request is grouped by: its route name and the local
// port it came in on. Totals per RouteKey merge into those of any
// grouping (by route, by port).
type RouteKey struct {
	Route string
	Port  uint16
	Peer  string // a client's calls: whom they called (Request.Peer)
}

// Key is the route r is counted in.
func (r Request) Key() RouteKey { return RouteKey{Route: r.Route, Port: r.Port, Peer: r.Peer} }

// Client says whether r is a call the target made as a client, not a
// request it served.
func (r Request) Client() bool { return r.Peer != "" }

// Roles of a target: what its outbound connections are (Target.Role).
const (
	RoleServer = "server" // backends of the requests it serves
	RoleClient = "client" // its calls, each a request of its own
	RoleBoth   = "both"   // it serves requests and its calls are requests of their own (a proxy)
)

// OtherRoutes is the route name of requests folded together past a bound
// on distinct names: route names come from what clients sent, so the
// collector stops naming requests past its bound on the names it keeps,
// and a summary folds the routes past the most asked for into one route
// of this name. Both folds are one route.
const OtherRoutes = "(other)"

// ProcessNs is all CPU reqprof saw the target's threads use, net of its
// own cost where that was taken out of the requests' figures.
func (t Target) ProcessNs() uint64 { return t.AttributedNs() + t.UnattributedNs }

// SeenNs is all CPU reqprof saw the target's threads use, its own
// programs' runs in their context included, as the kernel's accounting of
// the process includes them: ProcessNs, plus what was taken out of the
// finished requests' figures when it was.
func (t Target) SeenNs() uint64 {
	if t.SelfCost.Measured && !t.SelfCost.Kept {
		return t.ProcessNs() + t.Totals().SelfNs
	}
	return t.ProcessNs()
}

// Run is one profiling window over one or more targets.
type Run struct {
	Meta     Meta
	Duration time.Duration
	Targets  []Target
	Overhead Overhead
	// Lite: taken in lite mode (--lite), with no program on every
	// syscall: CPU per request, latency, waits and routes are as
	// measured, the user/kernel split is estimated from the kernel's tick
	// accounting, and there is no kernel breakdown, page fault count or
	// connection setup.
	Lite bool
}

// LiteSplitPrecisionPoints is how far a lite run's kernel share of CPU
// (kernel / (user + kernel)) may be from a full run's, in percentage
// points: the split is estimated from the kernel's per-task tick
// accounting. Measured by the collector's TestLiteMode against a full
// window on the same server.
const LiteSplitPrecisionPoints = 20

// Overhead is what reqprof itself cost over the window, so that every
// result carries its price.
type Overhead struct {
	// Measured is false when the kernel would not keep BPF run-time
	// statistics (BPF_ENABLE_STATS); the BPF figures are then unknown.
	Measured bool
	BPFNs    uint64 // run time of reqprof's BPF programs, on every CPU, for every process's events
	BPFRuns  uint64 // their invocations
	// BPFSampled is how long the kernel kept the statistics, when only for
	// part of the window, BPFWindow: BPFNs and BPFRuns are then what it
	// counted meanwhile, while the targets finished BPFSampledRequests
	// requests. 0: kept for all of it.
	BPFSampled         time.Duration
	BPFSampledRequests uint64
	BPFWindow          time.Duration
	// BPFUnknown says why the BPF figures are unknown, when they are.
	BPFUnknown string
	// The collector process (user space): its CPU over the window and its
	// peak resident memory.
	CollectorCPUNs    uint64
	CollectorMaxRSSKB uint64
	// OtherInstances is how many other reqprofs were loaded at some
	// point of the window: their programs ran on the same events, so
	// the targets paid for them too.
	OtherInstances int
}

// Meta says where and when a run was taken. Runs compared later are only
// like with like if taken on the same host and kernel by the same reqprof;
// any field left empty reads as unknown.
type Meta struct {
	Host   string // hostname
	Kernel string // kernel release, as uname -r prints it
	// The reqprof that took the run: its version (as the build set it,
	// git describe) and the commit it was built from, "-dirty" when the
	// tree had changes.
	Version   string
	Commit    string
	StartedAt time.Time // when the window opened
	// SyscallEntryNs is the measured cost of the kernel's syscall entry
	// and exit paths, charged to each syscall (see the collector).
	SyscallEntryNs uint64
}
