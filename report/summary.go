package report

import (
	"fmt"
	"time"
)

// Summary is the result of one run, shaped as the JSON other tools read:
// the json tags are a contract, so keys may be added but never renamed.
type Summary struct {
	// Where and when the run was taken, from Run.Meta; each is absent when
	// unknown. StartedAt is RFC 3339 in UTC, to the second.
	StartedAt      string `json:"started_at,omitempty"`
	Host           string `json:"host,omitempty"`
	Kernel         string `json:"kernel,omitempty"`
	ReqprofVersion string `json:"reqprof_version,omitempty"`

	// DurationS is the window's length; 0 in a summary combined from runs of
	// different lengths, where each target's RequestsPerS is over its own.
	DurationS float64 `json:"duration_s"`

	// Warnings are reasons to distrust the summary as a whole, as opposed to
	// one target of it: Combine says here when it joined runs taken on
	// different hosts, kernels or reqprof versions. Absent when there are
	// none.
	Warnings []string `json:"warnings,omitempty"`

	Targets []TargetSummary `json:"targets"`

	// Comparison sets the targets against the first; present only when
	// there are two or more.
	Comparison *Comparison `json:"comparison,omitempty"`
	// Spread is the run-to-run noise of targets that appear in several of
	// the runs Combine joined; absent when none does.
	Spread []LabelSpread `json:"spread,omitempty"`
}

// TargetSummary is one target's result. CPU figures are in µs rounded to
// 0.1 µs; each is rounded on its own, so ProcessCPUUs equals
// AttributedCPUUs + UnattributedCPUUs only to within that rounding.
type TargetSummary struct {
	PID     int    `json:"pid"`
	Comm    string `json:"comm"`
	Label   string `json:"label,omitempty"`
	Threads int    `json:"threads"`

	Requests     int     `json:"requests"`
	RequestsPerS float64 `json:"requests_per_s"`

	// Per finished request. Each distribution is taken on its own, so the
	// p50 of CPUUs is in general not P50 of UserUs plus P50 of KernelUs.
	CPUUs    Dist `json:"cpu_us"`
	UserUs   Dist `json:"user_us"`
	KernelUs Dist `json:"kernel_us"`
	// CPUHistogram is the shape of CPUUs; absent when no request finished.
	CPUHistogram *Histogram `json:"cpu_histogram,omitempty"`

	BytesInPerRequest  float64 `json:"bytes_in_per_request"`
	BytesOutPerRequest float64 `json:"bytes_out_per_request"`

	ProcessCPUUs      float64 `json:"process_cpu_us"`
	AttributedCPUUs   float64 `json:"attributed_cpu_us"`
	UnattributedCPUUs float64 `json:"unattributed_cpu_us"`
	// Part of UnattributedCPUUs: after a response, before the next request.
	BetweenRequestsCPUUs float64 `json:"between_requests_cpu_us"`
	SchedCPUUs           float64 `json:"sched_cpu_us"`

	UnfinishedRequests int     `json:"unfinished_requests"`
	UnfinishedCPUUs    float64 `json:"unfinished_cpu_us"`

	LostEvents uint64 `json:"lost_events"`
	Exited     bool   `json:"exited"`

	// Partial is true when the figures are known to be incomplete; Warnings
	// says why. Warnings is never null in JSON, so readers need no null case.
	Partial  bool     `json:"partial"`
	Warnings []string `json:"warnings"`
}

// Bounds on reqprof's total of a target's CPU as a share of the kernel's own
// accounting. The two are read at slightly different instants at the
// window's edges, so they never agree exactly; a larger gap means reqprof
// missed or double-counted CPU time.
const (
	minCoveragePercent = 95
	maxCoveragePercent = 105
)

// Summarize turns a run into its result. Targets keep the order the user
// gave them in: the first is the baseline others are compared with.
func Summarize(run Run) Summary {
	targets := run.Targets
	s := Summary{
		Host:           run.Meta.Host,
		Kernel:         run.Meta.Kernel,
		ReqprofVersion: run.Meta.ReqprofVersion,
		DurationS:      float64(run.Duration.Round(time.Millisecond)/time.Millisecond) / 1000,
		Targets:        make([]TargetSummary, 0, len(targets)),
	}
	if !run.Meta.StartedAt.IsZero() {
		s.StartedAt = run.Meta.StartedAt.UTC().Format(time.RFC3339)
	}
	for _, t := range targets {
		s.Targets = append(s.Targets, summarizeTarget(t, run.Duration))
	}
	s.Comparison = compare(s, CompareOptions{})
	return s
}

func summarizeTarget(t Target, window time.Duration) TargetSummary {
	n := len(t.Requests)
	cpu := make([]uint64, n)
	user := make([]uint64, n)
	kernel := make([]uint64, n)
	var bytesIn, bytesOut uint64
	for i, r := range t.Requests {
		cpu[i] = r.CPUNs()
		user[i] = r.UserNs
		kernel[i] = r.KernelNs
		bytesIn += r.BytesIn
		bytesOut += r.BytesOut
	}

	ts := TargetSummary{
		PID:     t.PID,
		Comm:    t.Comm,
		Label:   t.Label,
		Threads: t.Threads,

		Requests: n,

		CPUUs:    NewDist(cpu),
		UserUs:   NewDist(user),
		KernelUs: NewDist(kernel),

		CPUHistogram: newHistogram(cpu),

		ProcessCPUUs:         usFromNs(t.ProcessNs()),
		AttributedCPUUs:      usFromNs(t.AttributedNs()),
		UnattributedCPUUs:    usFromNs(t.UnattributedNs),
		BetweenRequestsCPUUs: usFromNs(t.BetweenRequestsNs),
		SchedCPUUs:           usFromNs(t.SchedCPUNs),

		UnfinishedRequests: t.UnfinishedRequests,
		UnfinishedCPUUs:    usFromNs(t.UnfinishedNs),

		LostEvents: t.LostEvents,
		Exited:     t.Exited,

		Warnings: warnings(t),
	}
	if n > 0 {
		ts.BytesInPerRequest = roundTenth(float64(bytesIn) / float64(n))
		ts.BytesOutPerRequest = roundTenth(float64(bytesOut) / float64(n))
	}
	if window > 0 {
		ts.RequestsPerS = roundTenth(float64(n) / window.Seconds())
	}
	ts.Partial = len(ts.Warnings) > 0
	return ts
}

// warnings lists, in a fixed order, every reason t's figures are incomplete.
func warnings(t Target) []string {
	w := []string{}
	if t.LostEvents > 0 {
		w = append(w, fmt.Sprintf("%d events lost: some CPU time or requests are missing", t.LostEvents))
	}
	if t.Exited {
		w = append(w, "process exited before the window closed: figures cover only part of the window")
	}
	if t.SchedCPUNs > 0 {
		// Integer comparison keeps the bounds exact; it would overflow only
		// past about 5 CPU-years in one window.
		seen := t.ProcessNs()
		if seen*100 < t.SchedCPUNs*minCoveragePercent || seen*100 > t.SchedCPUNs*maxCoveragePercent {
			w = append(w, fmt.Sprintf(
				"reqprof saw %.2f%% of the CPU the kernel accounted (%.1f ms of %.1f ms); expected %d%% to %d%%",
				100*float64(seen)/float64(t.SchedCPUNs),
				float64(seen)/1e6, float64(t.SchedCPUNs)/1e6,
				minCoveragePercent, maxCoveragePercent))
		}
	}
	return w
}
