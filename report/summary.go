package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/reqprof/reqprof/profile"
)

// Summary is the result of one run, shaped as the JSON other tools read:
// the json tags are a contract, so keys may be added but never renamed.
type Summary struct {
	// Where and when the run was taken, from Run.Meta; each is absent when
	// unknown. StartedAt is RFC 3339 in UTC, to the second.
	StartedAt string `json:"started_at,omitempty"`
	Host      string `json:"host,omitempty"`
	Kernel    string `json:"kernel,omitempty"`
	// Version and Commit are the reqprof that took the run: the version
	// its build was given (git describe), and the commit it was built
	// from, "-dirty" when the tree had changes.
	Version string `json:"version,omitempty"`
	Commit  string `json:"commit,omitempty"`
	// ReqprofVersion is Commit under the key older reqprofs wrote it as,
	// and read back: written still, for tools that read it.
	ReqprofVersion string `json:"reqprof_version,omitempty"`
	// SyscallEntryNs is the measured cost of a syscall's entry and exit,
	// included in each syscall's kernel time; absent when unknown.
	SyscallEntryNs uint64 `json:"syscall_entry_ns,omitempty"`
	// Lite says the run was taken in lite mode (--lite), and how precise
	// its user/kernel split is; absent for a full run.
	Lite *LiteSummary `json:"lite,omitempty"`

	// DurationS is the window's length; 0 in a summary combined from runs of
	// different lengths, where each target's RequestsPerS is over its own.
	DurationS float64 `json:"duration_s"`

	// Warnings are reasons to distrust the summary as a whole, as opposed to
	// one target of it: Combine says here when it joined runs taken on
	// different hosts, kernels or reqprof builds. Absent when there are
	// none.
	Warnings []string `json:"warnings,omitempty"`

	Targets []TargetSummary `json:"targets"`

	// Comparison sets the targets against the first; present only when
	// there are two or more.
	Comparison *Comparison `json:"comparison,omitempty"`

	// Overhead is what reqprof itself cost; absent in a combined summary
	// and in files from before it was kept.
	Overhead *OverheadSummary `json:"overhead,omitempty"`
	// Spread is the run-to-run noise of targets that appear in several of
	// the runs Combine joined; absent when none does.
	Spread []LabelSpread `json:"spread,omitempty"`
}

// TargetSummary is one target's result. CPU figures are in µs rounded to
// 0.1 µs; each is rounded on its own, so ProcessCPUUs equals
// AttributedCPUUs + UnattributedCPUUs only to within that rounding.
type TargetSummary struct {
	PID   int    `json:"pid"`
	Comm  string `json:"comm"`
	Label string `json:"label,omitempty"`
	// Source is the run a target came from in a summary Combine joined
	// from several: a file's name, or "run 2" of --repeat; absent in one
	// run's summary.
	Source  string `json:"source,omitempty"`
	Threads int    `json:"threads"`

	Requests     int     `json:"requests"`
	RequestsPerS float64 `json:"requests_per_s"`
	// SampledRequests is how many of the finished requests the percentiles
	// and the histogram were taken from, a uniform random sample; absent
	// when they were taken from every one. Counts, means, maxima and
	// figures per request are exact either way.
	SampledRequests *int `json:"sampled_requests,omitempty"`

	// Per finished request. Each distribution is taken on its own, so the
	// p50 of CPUUs is in general not P50 of UserUs plus P50 of KernelUs.
	CPUUs    Dist `json:"cpu_us"`
	UserUs   Dist `json:"user_us"`
	KernelUs Dist `json:"kernel_us"`
	// CPUHistogram is the shape of CPUUs; absent when no request finished.
	// Its counts add up to SampledRequests when set, else to Requests.
	CPUHistogram *Histogram `json:"cpu_histogram,omitempty"`

	// TimeSplitUs says where a mean finished request's time and CPU went;
	// absent when no request finished, and in summaries of a reqprof that
	// did not tell apart the CPU after a request's last byte.
	TimeSplitUs *TimeSplitSummary `json:"time_split_us,omitempty"`

	// Waiting and wall time per finished request. Each of these, down to
	// Routes, is absent when no request finished, and in summaries of a
	// reqprof that did not measure it, so that absent never reads as 0.
	RunqueueUs  *Dist `json:"runqueue_us,omitempty"` // runnable, waiting for a CPU
	OffCPUUs    *Dist `json:"offcpu_us,omitempty"`   // blocked, waiting to be woken
	LatencyUs   *Dist `json:"latency_us,omitempty"`
	FirstByteUs *Dist `json:"first_byte_us,omitempty"`

	PageFaultsPerRequest  *float64     `json:"page_faults_per_request,omitempty"`
	CtxSwitchesPerRequest *CtxSwitches `json:"ctx_switches_per_request,omitempty"`

	// KernelBreakdownUs is the mean kernel time per finished request by
	// cause, keyed by the cause's name ("syscall:write", "softirq:NET_RX",
	// "irq"; profile.ParseCause reads it back), every cause measured;
	// KernelBreakdownCalls the mean calls per request of each syscall
	// counted.
	KernelBreakdownUs    map[string]float64 `json:"kernel_breakdown_us,omitempty"`
	KernelBreakdownCalls map[string]float64 `json:"kernel_breakdown_calls,omitempty"`

	// Routes are the finished requests grouped as Summarize was asked,
	// most requests first; absent when asked for no grouping.
	Routes []RouteSummary `json:"routes,omitempty"`

	BytesInPerRequest  float64 `json:"bytes_in_per_request"`
	BytesOutPerRequest float64 `json:"bytes_out_per_request"`

	ProcessCPUUs      float64 `json:"process_cpu_us"`
	AttributedCPUUs   float64 `json:"attributed_cpu_us"`
	UnattributedCPUUs float64 `json:"unattributed_cpu_us"`
	// UnattributedSources say which threads it went to, grouped by
	// thread name, largest first: the largest few, and the rest folded
	// into one; absent when there was none, or the collector did not say.
	UnattributedSources []UnattributedSourceSummary `json:"unattributed_sources,omitempty"`
	// Part of AttributedCPUUs: after a response, before the thread turns
	// to other work (the server's loop), charged to the request it follows.
	BetweenRequestsCPUUs float64 `json:"between_requests_cpu_us"`
	// SetupUs is the mean per finished request of its connection's setup
	// and teardown, part of CPUUs: the accept, the thread or process made
	// for the connection until it read it, the close and what its closer
	// did after it until it exited or turned to other work.
	SetupUs    float64 `json:"setup_us"`
	SchedCPUUs float64 `json:"sched_cpu_us"`
	// AllInPerRequestUs is all the CPU seen (ProcessCPUUs, unattributed
	// included: a runtime's own threads, work between requests) over the
	// requests finished: the utime+stime per request users divide out,
	// taken on the exact clock over the window. 0 with no request.
	AllInPerRequestUs float64 `json:"all_in_per_request_us"`
	// SeenCPUUs is ProcessCPUUs with reqprof's own cost in the target's
	// threads added back where it was taken out: what is set against the
	// kernel's accounting (SchedCPUUs), which includes it. Absent in runs
	// saved before it was kept.
	SeenCPUUs float64 `json:"seen_cpu_us,omitempty"`

	// All waiting of the target's threads over the window, in requests or
	// not; absent in summaries of a reqprof that did not measure it.
	RunqueueTotalUs *float64 `json:"runqueue_total_us,omitempty"`
	OffCPUTotalUs   *float64 `json:"offcpu_total_us,omitempty"`

	UnfinishedRequests int     `json:"unfinished_requests"`
	UnfinishedCPUUs    float64 `json:"unfinished_cpu_us"`

	// PerBurst counts, by why, the requests counted one per burst (the
	// bytes read after a response up to the next response) because their
	// connection's bytes could not be followed: TLS, an unknown protocol,
	// HTTP/2 joined after its connection opened, a malformed frame.
	PerBurst map[string]uint64 `json:"per_burst,omitempty"`
	// Notifications counts JSON-RPC notifications clients sent raw on a
	// connection: messages, not requests.
	Notifications uint64 `json:"notifications,omitempty"`

	LostEvents    uint64            `json:"lost_events"`
	LostBreakdown map[string]uint64 `json:"lost_breakdown,omitempty"`
	Exited        bool              `json:"exited"`
	// Execd is the program the process exec'd during the window, and
	// ExecdAfterS how far into the window: figures after it are of that
	// program. Absent when it exec'd none.
	Execd       string  `json:"execd,omitempty"`
	ExecdAfterS float64 `json:"execd_after_s,omitempty"`
	Goroutines  string  `json:"goroutines,omitempty"`
	// Pool is how a libuv or CPython process's pool jobs were followed;
	// absent for any other process.
	Pool *PoolSummary `json:"pool,omitempty"`
	// SelfCostUs is what reqprof's own programs cost in the target's
	// context; absent for a run saved by a build that did not measure it.
	SelfCostUs *SelfCostSummary `json:"self_cost_us,omitempty"`
	// StealUs is the time the hypervisor kept the CPU from its threads
	// while they were on it (a virtual machine's steal time), left out of
	// every figure as the kernel leaves it out of their CPU time; absent
	// when none, or off a KVM guest.
	StealUs float64 `json:"steal_us,omitempty"`
	// Runtime is how its threads were taken to resume a request whose
	// backend answered ("node", "asyncio", "threads", "go"), and
	// RuntimeFrom how that was chosen ("detected", "--runtime", "not
	// recognised").
	Runtime     string `json:"runtime,omitempty"`
	RuntimeFrom string `json:"runtime_from,omitempty"`
	// Role is what its outbound connections were taken to be: "client"
	// (each call a request of its own, a route with its peer), "server"
	// (backends of its requests), "both"; RoleFrom how it was chosen
	// ("detected", "--role"). Absent in runs saved before roles.
	Role     string `json:"role,omitempty"`
	RoleFrom string `json:"role_from,omitempty"`
	// Peers are its calls as a client per peer; absent when it made none.
	Peers []PeerSummary `json:"peers,omitempty"`
	// Ends are its calls as a client and the requests it served side by
	// side, with their sum; absent unless it has both.
	Ends *EndsSummary `json:"ends,omitempty"`
	// Backends are what its requests waited on, per peer of its outbound
	// connections; absent when they called none.
	Backends []BackendSummary `json:"backends,omitempty"`
	// Interleaved is the share of its requests' CPU, in percent, that is
	// estimated (see RouteSummary.Interleaved).
	Interleaved float64 `json:"interleaved,omitempty"`

	// Stacks say where its CPU went inside its requests, from stack
	// samples; absent unless they were taken (--stacks).
	Stacks *StacksSummary `json:"stacks,omitempty"`

	// Partial is true when the figures are known to be incomplete; Warnings
	// says why. Warnings is never null in JSON, so readers need no null case.
	Partial  bool     `json:"partial"`
	Warnings []string `json:"warnings"`
}

// CtxSwitches are a request's mean context switches: voluntary when its
// thread blocked, involuntary when the scheduler took the CPU from it.
type CtxSwitches struct {
	Voluntary   float64 `json:"voluntary"`
	Involuntary float64 `json:"involuntary"`
}

// Bounds on reqprof's total of a target's CPU as a share of the kernel's own
// accounting. The two are read at slightly different instants at the
// window's edges, so they never agree exactly; a larger gap means reqprof
// missed or double-counted CPU time.
const (
	minCoveragePercent = 95
	maxCoveragePercent = 105
)

// SummarizeOptions choose how Summarize groups requests. The zero value
// groups them by route.
type SummarizeOptions struct {
	GroupBy GroupBy
}

// Summarize turns a run into its result, requests grouped by route.
// Targets keep the order the user gave them in: the first is the baseline
// others are compared with.
func Summarize(run profile.Run) Summary {
	return SummarizeWith(run, SummarizeOptions{})
}

// SummarizeWith is Summarize with requests grouped as opts says.
func SummarizeWith(run profile.Run, opts SummarizeOptions) Summary {
	targets := run.Targets
	s := Summary{
		Host:           run.Meta.Host,
		Kernel:         run.Meta.Kernel,
		Version:        run.Meta.Version,
		Commit:         run.Meta.Commit,
		ReqprofVersion: run.Meta.Commit,
		SyscallEntryNs: run.Meta.SyscallEntryNs,
		Lite:           liteSummary(run.Lite),
		DurationS:      float64(run.Duration.Round(time.Millisecond)/time.Millisecond) / 1000,
		Targets:        make([]TargetSummary, 0, len(targets)),
	}
	if !run.Meta.StartedAt.IsZero() {
		s.StartedAt = run.Meta.StartedAt.UTC().Format(time.RFC3339)
	}
	for _, t := range targets {
		s.Targets = append(s.Targets, summarizeTarget(t, run.Duration, opts))
	}
	s.Comparison = compare(s, CompareOptions{})
	s.Overhead = summarizeOverhead(run)
	return s
}

// OverheadSummary is Overhead for readers: BPF time per finished request
// (absent when the kernel kept no BPF statistics or nothing finished).
type OverheadSummary struct {
	BPFNsPerRequest *float64 `json:"bpf_ns_per_request,omitempty"`
	BPFNsPerRun     *float64 `json:"bpf_ns_per_run,omitempty"`
	BPFCPUUs        *float64 `json:"bpf_cpu_us,omitempty"`
	// BPFStatsSampledS: the kernel kept BPF statistics this many seconds of
	// the window (absent when all of it); bpf_cpu_us is then their run time
	// scaled to the window.
	BPFStatsSampledS *float64 `json:"bpf_stats_sampled_s,omitempty"`
	// BPFStatsSampledRequests is how many requests finished meanwhile:
	// bpf_ns_per_request is the sample's run time over them.
	BPFStatsSampledRequests *uint64 `json:"bpf_stats_sampled_requests,omitempty"`
	// BPFUnknown says why the BPF figures are absent.
	BPFUnknown        string  `json:"bpf_unknown,omitempty"`
	CollectorCPUUs    float64 `json:"collector_cpu_us"`
	CollectorMaxRSSMB float64 `json:"collector_max_rss_mb"`
	// OtherReqprofs is how many other reqprofs were loaded during the
	// window: the targets paid for their programs too. Absent when none.
	OtherReqprofs int `json:"other_reqprofs,omitempty"`
}

func summarizeOverhead(run profile.Run) *OverheadSummary {
	o := run.Overhead
	if o == (profile.Overhead{}) {
		return nil // not known: a run built by hand, or read from elsewhere
	}
	s := &OverheadSummary{
		CollectorCPUUs:    usFromNs(o.CollectorCPUNs),
		CollectorMaxRSSMB: roundTenth(float64(o.CollectorMaxRSSKB) / 1024),
		OtherReqprofs:     o.OtherInstances,
	}
	if !o.Measured {
		s.BPFUnknown = o.BPFUnknown
		return s
	}
	if o.BPFRuns > 0 {
		perRun := roundTenth(float64(o.BPFNs) / float64(o.BPFRuns))
		s.BPFNsPerRun = &perRun
	}
	if o.BPFSampled > 0 {
		// Kept for part of the window: the run time over the window is
		// scaled by time, the run time per request is the sample's own.
		s.BPFStatsSampledS = new(roundTenth(o.BPFSampled.Seconds()))
		s.BPFStatsSampledRequests = new(o.BPFSampledRequests)
		s.BPFCPUUs = new(usFromNs(uint64(float64(o.BPFNs) * max(1, o.BPFWindow.Seconds()/o.BPFSampled.Seconds()))))
		if o.BPFSampledRequests > 0 {
			s.BPFNsPerRequest = new(roundTenth(float64(o.BPFNs) / float64(o.BPFSampledRequests)))
		}
		return s
	}
	s.BPFCPUUs = new(usFromNs(o.BPFNs))
	requests := 0
	for _, t := range run.Targets {
		requests += t.Totals().Requests
	}
	if requests > 0 {
		s.BPFNsPerRequest = new(roundTenth(float64(o.BPFNs) / float64(requests)))
	}
	return s
}

func summarizeTarget(t profile.Target, window time.Duration, opts SummarizeOptions) TargetSummary {
	totals := t.Totals()
	n := totals.Requests
	// Percentiles and the histogram come from the sample; everything else
	// from the exact totals.
	sample := t.Requests
	cpu := make([]uint64, len(sample))
	user := make([]uint64, len(sample))
	kernel := make([]uint64, len(sample))
	runqueue := make([]uint64, len(sample))
	offCPU := make([]uint64, len(sample))
	latency := make([]uint64, len(sample))
	firstByte := make([]uint64, len(sample))
	for i, r := range sample {
		cpu[i] = r.CPUNs()
		user[i] = r.UserNs
		kernel[i] = r.KernelNs
		runqueue[i] = r.RunqueueNs
		offCPU[i] = r.OffCPUNs
		latency[i] = r.LatencyNs()
		firstByte[i] = r.FirstByteNs()
	}

	ts := TargetSummary{
		PID:     t.PID,
		Comm:    t.Comm,
		Label:   t.Label,
		Threads: t.Threads,

		Requests: n,

		CPUUs:    sampledDist(cpu, totals.CPUNs, n, totals.MaxCPUNs),
		UserUs:   sampledDist(user, totals.UserNs, n, totals.MaxUserNs),
		KernelUs: sampledDist(kernel, totals.KernelNs, n, totals.MaxKernelNs),

		CPUHistogram: newHistogram(cpu),

		ProcessCPUUs:         usFromNs(t.ProcessNs()),
		AttributedCPUUs:      usFromNs(t.AttributedNs()),
		UnattributedCPUUs:    usFromNs(t.UnattributedNs),
		UnattributedSources:  summarizeSources(t.UnattributedSources, t.UnattributedNs),
		BetweenRequestsCPUUs: usFromNs(t.BetweenRequestsNs),
		SetupUs:              perRequestUs(totals.SetupNs, n),
		SchedCPUUs:           usFromNs(t.SchedCPUNs),
		AllInPerRequestUs:    perRequestUs(t.ProcessNs(), n),
		SeenCPUUs:            usFromNs(t.SeenNs()),
		RunqueueTotalUs:      new(usFromNs(t.RunqueueNs)),
		OffCPUTotalUs:        new(usFromNs(t.OffCPUNs)),

		UnfinishedRequests: t.UnfinishedRequests,
		UnfinishedCPUUs:    usFromNs(t.UnfinishedNs),

		PerBurst:      t.PerBurst,
		Notifications: t.Notifications,
		LostEvents:    t.LostEvents,
		LostBreakdown: t.LostBreakdown,
		Exited:        t.Exited,
		Execd:         t.Execd,
		Goroutines:    t.Goroutines,
		Pool:          summarizePool(t),
		Runtime:       t.Runtime,
		RuntimeFrom:   t.RuntimeFrom,
		Role:          t.Role,
		RoleFrom:      t.RoleFrom,
		Backends:      summarizeBackends(t.Backends, n, func(profile.RouteKey) bool { return true }),
		Interleaved:   roundTenth(interleavedShare(totals)),
		StealUs:       roundTenth(usFromNs(t.StolenNs)),

		Warnings: warnings(t),
	}
	if t.Execd != "" {
		ts.ExecdAfterS = roundTenth(t.ExecdAfter.Seconds())
	}
	if t.SelfCost.Measured {
		ts.SelfCostUs = &SelfCostSummary{Total: roundHundredth(usFromNs(t.SelfCost.TotalNs)), TakenOut: !t.SelfCost.Kept}
		if n > 0 {
			perRequest := float64(totals.SelfNs) / 1e3 / float64(n)
			ts.SelfCostUs.PerRequest = roundHundredth(perRequest)
			if t.SelfCost.TotalNs > 0 {
				// The requests' own cost is costed at the same rates as
				// the whole's, so it is as far off, in proportion.
				ts.SelfCostUs.PerRequestSpread = roundHundredth(perRequest * float64(t.SelfCost.SpreadNs) / float64(t.SelfCost.TotalNs))
			}
			ts.SelfCostUs.TimingSamples = t.SelfCost.TimingSamples
		}
	}
	ts.TimeSplitUs = timeSplitOf(totals, n, t.SelfCost.Measured && !t.SelfCost.Kept)
	if len(sample) < n {
		ts.SampledRequests = new(len(sample))
	}
	if n > 0 {
		perRequest := func(sum uint64) float64 { return roundTenth(float64(sum) / float64(n)) }
		ts.RunqueueUs = new(sampledDist(runqueue, totals.RunqueueNs, n, totals.MaxRunqueueNs))
		ts.OffCPUUs = new(sampledDist(offCPU, totals.OffCPUNs, n, totals.MaxOffCPUNs))
		ts.LatencyUs = new(sampledDist(latency, totals.LatencyNs, n, totals.MaxLatencyNs))
		ts.FirstByteUs = new(sampledDist(firstByte, totals.FirstByteNs, n, totals.MaxFirstByteNs))
		ts.PageFaultsPerRequest = new(perRequest(totals.PageFaults))
		ts.CtxSwitchesPerRequest = &CtxSwitches{Voluntary: perRequest(totals.VoluntarySwitches), Involuntary: perRequest(totals.InvoluntarySwitches)}
		ts.KernelBreakdownUs, ts.KernelBreakdownCalls = breakdownPerRequest(t.KernelBreakdown, n)
		ts.Routes = groupSampledRoutes(t.TotalsByRoute(), sample, opts.GroupBy)
		for i := range ts.Routes {
			r := &ts.Routes[i]
			r.Backends = summarizeBackends(t.Backends, r.Requests, func(k profile.RouteKey) bool { return routeName(k, opts.GroupBy) == r.Route })
		}
		ts.Peers = summarizePeers(t.TotalsByRoute())
		ts.Ends = summarizeEnds(t.TotalsByRoute())
		ts.BytesInPerRequest = perRequest(totals.BytesIn)
		ts.BytesOutPerRequest = perRequest(totals.BytesOut)
	}
	ts.Stacks = summarizeStacks(t.Stacks, ts.Routes, totals, opts.GroupBy)
	if window > 0 {
		ts.RequestsPerS = roundTenth(float64(n) / window.Seconds())
	}
	ts.Partial = len(ts.Warnings) > 0
	return ts
}

// warnings lists, in a fixed order, every reason t's figures are incomplete.
func warnings(t profile.Target) []string {
	w := []string{}
	if t.LostEvents > 0 {
		w = append(w, fmt.Sprintf("%d events lost%s: some CPU time or requests are missing", t.LostEvents, lostCauses(t.LostBreakdown)))
	}
	if t.Exited {
		w = append(w, "process exited before the window closed: figures cover only part of the window")
	}
	if t.Execd != "" {
		w = append(w, fmt.Sprintf("process exec'd %s %.1f s into the window: figures after it are of the new program",
			t.Execd, t.ExecdAfter.Seconds()))
	}
	if t.SchedCPUNs > 0 {
		// Integer comparison keeps the bounds exact; it would overflow only
		// past about 5 CPU-years in one window.
		// Like with like: the kernel's accounting includes reqprof's own
		// cost in the target's threads, taken out of the requests.
		seen := t.SeenNs()
		if seen*100 < t.SchedCPUNs*minCoveragePercent || seen*100 > t.SchedCPUNs*maxCoveragePercent {
			w = append(w, fmt.Sprintf(
				"reqprof saw %.2f%% of the CPU the kernel accounted (%.1f ms of %.1f ms); expected %d%% to %d%%",
				100*float64(seen)/float64(t.SchedCPUNs),
				float64(seen)/1e6, float64(t.SchedCPUNs)/1e6,
				minCoveragePercent, maxCoveragePercent))
		}
	}
	if w1 := lowAttributionWarning(t); w1 != "" {
		w = append(w, w1)
	}
	return w
}

// minAttributedPercent is the share of the CPU seen that must go to
// requests for the per-request figures to stand for the process's work
// without a warning. Below it the rest is not a runtime's odd helper (Go's
// sysmon took up to 12% of a busy client's CPU): it is a large part of
// what the process did, typically on threads a runtime hands
// requests' work to without their touching a connection, which reqprof
// does not follow (LIMITS.md), and per-request and per-route figures
// leave it out.
const minAttributedPercent = 75

// lowAttributionWarning says when less than minAttributedPercent of the
// CPU seen went to requests, and to which threads most of the rest went;
// "" otherwise, or with no request finished.
func lowAttributionWarning(t profile.Target) string {
	seen := t.ProcessNs()
	if seen == 0 || t.AttributedNs()*100 >= seen*minAttributedPercent || t.Totals().Requests == 0 {
		return ""
	}
	msg := fmt.Sprintf("only %.1f%% of the CPU seen went to requests: per-request figures leave out the rest",
		100*float64(t.AttributedNs())/float64(seen))
	if sources := summarizeSources(t.UnattributedSources, t.UnattributedNs); len(sources) > 0 {
		top := sources[0]
		threads := "threads"
		if top.Threads == 1 {
			threads = "thread"
		}
		msg += fmt.Sprintf(", most of it (%.1f%%) on %d %s named %q", 100*float64(top.CPUMs)*1e6/float64(seen), top.Threads, threads, top.Thread)
	}
	return msg + " (a runtime's pool threads, which never touch a connection, are followed for libuv and CPython 3.11 only: docs/LIMITS.md)"
}

// lostCauses names where events were lost, as " (ring buffer full 4,
// thread state not created 2)", in a fixed order; "" when the breakdown is unknown.
func lostCauses(breakdown map[string]uint64) string {
	var parts []string
	seen := map[string]bool{}
	for _, c := range lostCauseNames {
		if n := breakdown[c.key]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c.name, n))
		}
		seen[c.key] = true
	}
	// Causes a later reqprof may name, in a file read back.
	var others []string
	for key, n := range breakdown {
		if !seen[key] && n > 0 {
			others = append(others, fmt.Sprintf("%s %d", key, n))
		}
	}
	slices.Sort(others)
	parts = append(parts, others...)
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// lostCauseNames are the keys of profile.Target.LostBreakdown, as warnings
// name them.
var lostCauseNames = []struct{ key, name string }{
	{"ring_buffer", "ring buffer full"},
	{"thread_map_full", "thread state not created"},
	{"conn_map_full", "connection map full"},
	{"malformed", "malformed records"},
}

// UnattributedSourceSummary is the unattributed CPU of a target's threads
// of one name. Thread is the name the threads had at the window's end;
// profile.ExitedThreads for threads that exited before it; or, with Names
// set, OtherThreads: the threads of the Names smaller names folded.
type UnattributedSourceSummary struct {
	Thread  string `json:"thread"`
	Threads int    `json:"threads"` // how many threads of that name had some
	// CPUMs is their unattributed CPU in ms, rounded to 0.1 µs, and Share
	// its share of the target's unattributed CPU, from 0 to 1, rounded to
	// 0.001.
	CPUMs float64 `json:"cpu_ms"`
	Share float64 `json:"share"`
	Names int     `json:"names,omitempty"`
}

// OtherThreads is the thread name of the sources past the largest few,
// folded into one.
const OtherThreads = "(other)"

// maxSources is how many thread names a summary keeps; past it, all but
// the largest maxSources-1 are folded into one.
const maxSources = 6

// summarizeSources groups a target's unattributed CPU by thread name, so
// that a pool of workers of one name is one source of as many threads,
// largest first and ties by name; past maxSources names, the smallest are
// folded into one source, always last. Shares are of the target's
// unattributed CPU, totalNs, or of what the sources add up to if that is
// more.
func summarizeSources(sources []profile.UnattributedSource, totalNs uint64) []UnattributedSourceSummary {
	type group struct {
		name    string
		ns      uint64
		threads int
	}
	byName := map[string]*group{}
	var groups []*group
	var sum uint64
	for _, src := range sources {
		if src.Ns == 0 {
			continue
		}
		g := byName[src.Comm]
		if g == nil {
			g = &group{name: src.Comm}
			byName[src.Comm] = g
			groups = append(groups, g)
		}
		g.ns += src.Ns
		g.threads += max(1, src.Threads) // a source is a thread at least
		sum += src.Ns
	}
	if len(groups) == 0 {
		return nil
	}
	slices.SortFunc(groups, func(a, b *group) int { return cmp.Or(cmp.Compare(b.ns, a.ns), cmp.Compare(a.name, b.name)) })
	whole := max(totalNs, sum)
	summary := func(name string, ns uint64, threads int) UnattributedSourceSummary {
		return UnattributedSourceSummary{
			Thread: name, Threads: threads,
			CPUMs: float64((ns+50)/100) / 10_000,
			Share: math.Round(float64(ns)/float64(whole)*1000) / 1000,
		}
	}
	out := make([]UnattributedSourceSummary, 0, min(len(groups), maxSources))
	for i, g := range groups {
		// Folding a single name would hide it and save no row.
		if i == maxSources-1 && len(groups) > maxSources {
			var ns uint64
			var threads int
			for _, rest := range groups[i:] {
				ns += rest.ns
				threads += rest.threads
			}
			folded := summary(OtherThreads, ns, threads)
			folded.Names = len(groups) - i
			return append(out, folded)
		}
		out = append(out, summary(g.name, g.ns, g.threads))
	}
	return out
}

// LiteSummary is what a run in lite mode leaves out or estimates: its
// user/kernel split comes from the kernel's tick accounting, within
// SplitPrecisionPoints percentage points of the kernel share a full run
// measures, and it has no kernel breakdown (no syscall rows).
type LiteSummary struct {
	SplitPrecisionPoints float64 `json:"split_precision_points"`
}

func liteSummary(lite bool) *LiteSummary {
	if !lite {
		return nil
	}
	return &LiteSummary{SplitPrecisionPoints: profile.LiteSplitPrecisionPoints}
}

// SelfCostSummary is reqprof's own cost in a target's context: per
// finished request (its mean), and over all the target's threads in the
// window. TakenOut says whether the request figures are net of it (the
// default) or keep it (--gross).
//
// PerRequestSpread is PerRequest's standard error: the calibration's of
// what entering a program costs, and the spread of the programs' run
// time over the window's TimingSamples samples of it when there were two
// or more (with fewer, the calibration's alone).
type SelfCostSummary struct {
	PerRequest       float64 `json:"per_request"`
	PerRequestSpread float64 `json:"per_request_spread"`
	TimingSamples    int     `json:"timing_samples"`
	Total            float64 `json:"total"`
	TakenOut         bool    `json:"taken_out"`
}

// TimeSplitSummary is where a mean finished request's CPU and time went,
// in µs, each figure a mean over the finished requests, rounded to 0.1 µs
// so that each sum holds exactly as shown.
//
// Its CPU is ReadToWrite + AfterResponse + Setup: ReadToWrite runs from
// the read that brought its first bytes to the write of its last,
// AfterResponse after that write, its thread's loop until it turned to
// other work, and Setup is its connection's setup and teardown.
//
// Its latency, from its first byte read to its last written, is
// ReadToWrite + OwnCostReadToWrite + Runqueue + Blocked + Unaccounted.
// OwnCostReadToWrite is what reqprof's programs cost in that span, taken
// out of the CPU figures (absent when they keep it, with --gross: then it
// is in ReadToWrite). Unaccounted is the wall time left (its thread at
// other work, or the CPU kept by the hypervisor), or, negative, how much
// of the parts lies outside the latency: the read that brings the first
// byte runs before it, the write of the last returns after it.
type TimeSplitSummary struct {
	CPUUs              float64 `json:"cpu"`
	ReadToWriteUs      float64 `json:"cpu_read_to_write"`
	AfterResponseUs    float64 `json:"cpu_after_response"`
	SetupUs            float64 `json:"setup"`
	LatencyUs          float64 `json:"latency"`
	OwnCostReadToWrite float64 `json:"own_cost_read_to_write,omitempty"`
	RunqueueUs         float64 `json:"runqueue"`
	BlockedUs          float64 `json:"blocked"`
	UnaccountedUs      float64 `json:"unaccounted"`
}

// timeSplitOf is where the mean of a target's n finished requests went,
// from their totals; ownTakenOut says the CPU figures are net of
// reqprof's own cost. Each figure is rounded to 0.1 µs first, and the
// parts left to balance the sums (ReadToWrite, Unaccounted) are worked
// out in tenths from the rounded ones.
func timeSplitOf(totals profile.Totals, n int, ownTakenOut bool) *TimeSplitSummary {
	if n <= 0 {
		return nil
	}
	tenthsOf := func(ns uint64) int64 { return int64(math.Round(float64(ns) / float64(n) / 100)) }
	cpu, after, setup := tenthsOf(totals.CPUNs), tenthsOf(totals.TailNs), tenthsOf(totals.SetupNs)
	latency, runqueue, blocked := tenthsOf(totals.LatencyNs), tenthsOf(totals.RunqueueNs), tenthsOf(totals.OffCPUNs)
	readToWrite := max(0, cpu-after-setup)
	var own int64
	if ownTakenOut && totals.SelfNs > totals.TailSelfNs {
		own = tenthsOf(totals.SelfNs - totals.TailSelfNs)
	}
	us := func(tenths int64) float64 { return float64(tenths) / 10 }
	return &TimeSplitSummary{
		CPUUs: us(cpu), ReadToWriteUs: us(readToWrite), AfterResponseUs: us(after), SetupUs: us(setup),
		LatencyUs: us(latency), OwnCostReadToWrite: us(own), RunqueueUs: us(runqueue), BlockedUs: us(blocked),
		UnaccountedUs: us(latency - readToWrite - own - runqueue - blocked),
	}
}

// PoolSummary says how the jobs a runtime ran on its own pool threads
// (libuv's, CPython's) were followed: Status "followed" or why not;
// JobsQueued by threads serving a request, JobsDone of them handed back
// while their request was open, whose CPUUs of pool threads' CPU went to
// it; JobsUnseen ended by a pool thread that was not seen to take them
// (their CPU unattributed).
type PoolSummary struct {
	Status     string  `json:"status"`
	JobsQueued uint64  `json:"jobs_queued"`
	JobsDone   uint64  `json:"jobs_done"`
	CPUUs      float64 `json:"cpu_us"`
	JobsUnseen uint64  `json:"jobs_unseen,omitempty"`
}

func summarizePool(t profile.Target) *PoolSummary {
	if t.Pool == "" {
		return nil
	}
	return &PoolSummary{Status: t.Pool, JobsQueued: t.PoolJobs, JobsDone: t.PoolJobsDone, CPUUs: usFromNs(t.PoolNs), JobsUnseen: t.PoolJobsUnseen}
}
