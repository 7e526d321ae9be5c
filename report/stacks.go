package report

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/reqprof/reqprof/profile"
)

// StacksSummary is where a target's CPU went inside its requests, from
// its stack samples (--stacks): per route, the functions its samples ran
// in, in µs per request.
type StacksSummary struct {
	Hz      int    `json:"hz"`
	Samples uint64 `json:"samples"`
	// Lost counts samples taken but not kept, by why (see profile.Stacks).
	Lost  map[string]uint64 `json:"lost,omitempty"`
	Notes []string          `json:"notes,omitempty"`
	// Routes are the summary's routes that had samples, in the summary's
	// order, then the samples that ran for no finished request:
	// profile.BetweenRequests and profile.UnfinishedRequest.
	Routes []RouteStacks `json:"routes"`
	// Folded are the samples' stacks by route and mode, root first, most
	// samples first, for flame graphs; at most maxFoldedStacks of them,
	// the rest counted in FoldedOmitted.
	Folded        []FoldedStack `json:"folded,omitempty"`
	FoldedOmitted uint64        `json:"folded_omitted_samples,omitempty"`
}

// RouteStacks is one route's samples and its hottest functions.
type RouteStacks struct {
	Route    string `json:"route"`
	Samples  uint64 `json:"samples"`
	Requests int    `json:"requests,omitempty"`
	// KernelShare is the part of its samples taken in the kernel.
	KernelShare float64 `json:"kernel_share"`
	// CPUUsPerRequest is the route's mean CPU per request (reqprof's own
	// figure, not the samples'): each function's µs per request is its
	// share of the route's samples times this. Absent for samples that ran
	// for no finished request, whose figures are in ms of CPU.
	CPUUsPerRequest *float64 `json:"cpu_us_per_request,omitempty"`
	// CPUMs is the samples' CPU (samples × period), for routes of no
	// finished request.
	CPUMs *float64 `json:"cpu_ms,omitempty"`
	// Functions are its hottest functions by self time, at most
	// maxHotFunctions.
	Functions []HotFunction `json:"functions"`
}

// HotFunction is one function's part of a route's samples: self, those
// sampled in it; total, those with it anywhere on the stack. In µs per
// request for a route of finished requests, in ms of CPU otherwise.
type HotFunction struct {
	Function   string  `json:"function"`
	Module     string  `json:"module,omitempty"`
	Kernel     bool    `json:"kernel,omitempty"`
	Self       float64 `json:"self"`
	Total      float64 `json:"total"`
	SelfShare  float64 `json:"self_share"`
	TotalShare float64 `json:"total_share"`
}

// FoldedStack is a stack as flame graphs fold it: its frames' names, root
// first; kernel frames are suffixed "_[k]", as Linux perf's folded output
// marks them.
type FoldedStack struct {
	Route   string   `json:"route"`
	Kernel  bool     `json:"kernel,omitempty"`
	Frames  []string `json:"frames"`
	Samples uint64   `json:"samples"`
}

// Bounds on what a summary keeps of the samples.
const (
	maxHotFunctions = 15
	maxFoldedStacks = 5000
)

// kernelFrameSuffix marks a kernel frame's name in folded stacks.
const kernelFrameSuffix = "_[k]"

// frameName is what folded stacks and flame graphs call a frame.
func frameName(f profile.Frame) string {
	if f.Kernel {
		return f.Name() + kernelFrameSuffix
	}
	return f.Name()
}

// stackRoute is the route a sample's route key is shown under: as the
// summary groups requests, folded into profile.OtherRoutes when the
// summary folded its route; the two routes of no finished request stay.
func stackRoute(key profile.RouteKey, by GroupBy, shown map[string]bool) string {
	if key.Route == profile.BetweenRequests || key.Route == profile.UnfinishedRequest {
		return key.Route
	}
	if by == GroupByNone {
		return "(all requests)"
	}
	name := routeName(key, by)
	if shown != nil && !shown[name] {
		return profile.OtherRoutes
	}
	return name
}

// summarizeStacks is st by the summary's routes (routes, grouped by by);
// nil without samples.
func summarizeStacks(st *profile.Stacks, routes []RouteSummary, totals profile.Totals, by GroupBy) *StacksSummary {
	if st == nil {
		return nil
	}
	s := &StacksSummary{Hz: st.Hz, Lost: st.Lost, Notes: st.Notes, Routes: []RouteStacks{}}
	var shown map[string]bool
	if by != GroupByNone {
		shown = map[string]bool{}
		for _, r := range routes {
			shown[r.Route] = true
		}
	}
	byRoute := map[string][]profile.StackSample{}
	for _, sample := range st.Samples {
		name := stackRoute(sample.Route, by, shown)
		byRoute[name] = append(byRoute[name], sample)
		s.Samples += sample.Count
	}
	// The summary's routes in its order, then those of no request.
	var order []string
	mean := map[string]float64{}
	requests := map[string]int{}
	if by == GroupByNone {
		order = append(order, "(all requests)")
		if totals.Requests > 0 {
			mean["(all requests)"] = float64(totals.CPUNs) / float64(totals.Requests) / 1e3
			requests["(all requests)"] = totals.Requests
		}
	}
	for _, r := range routes {
		order = append(order, r.Route)
		mean[r.Route] = r.CPUUs.Mean
		requests[r.Route] = r.Requests
	}
	order = append(order, profile.BetweenRequests, profile.UnfinishedRequest)
	for _, name := range order {
		samples := byRoute[name]
		if len(samples) == 0 {
			continue
		}
		rs := routeStacks(name, samples, st, requests[name], mean[name])
		s.Routes = append(s.Routes, rs)
	}
	s.Folded, s.FoldedOmitted = foldStacks(st, func(key profile.RouteKey) string { return stackRoute(key, by, shown) }, maxFoldedStacks)
	return s
}

// routeStacks is a route's samples summarized: its hottest functions by
// self time, valued at the route's mean CPU per request when it has
// requests, else at the sampling period.
func routeStacks(name string, samples []profile.StackSample, st *profile.Stacks, requests int, meanCPUUs float64) RouteStacks {
	rs := RouteStacks{Route: name, Requests: requests}
	type tally struct {
		frame       profile.Frame
		self, total uint64
	}
	byName := map[string]*tally{}
	var kernel uint64
	seen := map[string]bool{}
	for _, sample := range samples {
		rs.Samples += sample.Count
		if sample.Kernel {
			kernel += sample.Count
		}
		clear(seen)
		for i, index := range sample.Frames {
			f := st.Frames[index]
			key := frameName(f)
			t := byName[key]
			if t == nil {
				t = &tally{frame: f}
				byName[key] = t
			}
			if i == 0 {
				t.self += sample.Count
			}
			if !seen[key] { // once a sample, however often it recurses
				seen[key] = true
				t.total += sample.Count
			}
		}
	}
	if rs.Samples == 0 {
		return rs
	}
	rs.KernelShare = roundShare(float64(kernel) / float64(rs.Samples))
	// A sample's worth: of the route's mean CPU per request when it has
	// requests, else of the sampling period, in ms.
	worth := func(n uint64) float64 {
		if requests > 0 {
			return roundTenth(float64(n) / float64(rs.Samples) * meanCPUUs)
		}
		return roundTenth(float64(n) * float64(st.PeriodNs) / 1e6)
	}
	if requests > 0 {
		rs.CPUUsPerRequest = new(roundTenth(meanCPUUs))
	} else {
		rs.CPUMs = new(worth(rs.Samples))
	}
	names := slices.SortedFunc(maps.Keys(byName), func(a, b string) int {
		return cmp.Or(cmp.Compare(byName[b].self, byName[a].self), cmp.Compare(byName[b].total, byName[a].total), strings.Compare(a, b))
	})
	for _, name := range names {
		t := byName[name]
		if len(rs.Functions) == maxHotFunctions || t.self == 0 {
			break
		}
		rs.Functions = append(rs.Functions, HotFunction{
			Function:   t.frame.Name(),
			Module:     t.frame.Module,
			Kernel:     t.frame.Kernel,
			Self:       worth(t.self),
			Total:      worth(t.total),
			SelfShare:  roundShare(float64(t.self) / float64(rs.Samples)),
			TotalShare: roundShare(float64(t.total) / float64(rs.Samples)),
		})
	}
	return rs
}

// roundShare keeps a share to 0.1%.
func roundShare(x float64) float64 { return roundTenth(x*1000) / 1000 }

// foldStacks folds st's samples by route (as routeOf names it), mode and
// frame names, root first: the most samples first, at most limit of them
// (0: all), and how many samples the rest hold.
func foldStacks(st *profile.Stacks, routeOf func(profile.RouteKey) string, limit int) ([]FoldedStack, uint64) {
	counts := map[string]*FoldedStack{}
	var b strings.Builder
	for _, sample := range st.Samples {
		route := routeOf(sample.Route)
		names := make([]string, len(sample.Frames))
		for i, index := range sample.Frames {
			names[len(names)-1-i] = frameName(st.Frames[index])
		}
		b.Reset()
		b.WriteString(route)
		if sample.Kernel {
			b.WriteString("\x00k")
		}
		for _, n := range names {
			b.WriteString("\x00")
			b.WriteString(n)
		}
		key := b.String()
		if f, ok := counts[key]; ok {
			f.Samples += sample.Count
			continue
		}
		counts[key] = &FoldedStack{Route: route, Kernel: sample.Kernel, Frames: names, Samples: sample.Count}
	}
	folded := make([]FoldedStack, 0, len(counts))
	for _, f := range counts {
		folded = append(folded, *f)
	}
	slices.SortFunc(folded, func(a, b FoldedStack) int {
		return cmp.Or(cmp.Compare(b.Samples, a.Samples), strings.Compare(a.Route, b.Route),
			cmpBool(a.Kernel, b.Kernel), slices.Compare(a.Frames, b.Frames))
	})
	var omitted uint64
	if limit > 0 && len(folded) > limit {
		for _, f := range folded[limit:] {
			omitted += f.Samples
		}
		folded = folded[:limit]
	}
	return folded, omitted
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
