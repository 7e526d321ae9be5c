package report

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/reqprof/reqprof/profile"
)

// GroupBy is how a target's finished requests are grouped into routes.
type GroupBy int

const (
	GroupByRoute GroupBy = iota // by what each asked for, as the collector named it
	GroupByPort                 // by the local port each came in on
	GroupByNone                 // not at all: the summary has no routes
)

// ParseGroupBy reads a name of a grouping: route, port or none.
func ParseGroupBy(name string) (GroupBy, error) {
	switch name {
	case "route":
		return GroupByRoute, nil
	case "port":
		return GroupByPort, nil
	case "none":
		return GroupByNone, nil
	}
	return 0, fmt.Errorf("cannot group requests by %q: want route, port or none", name)
}

// RouteSummary is the finished requests of one route (or port), with
// figures as their target's. SampledRequests is set when its percentiles
// come from fewer of its requests than Requests, as a target's: it can be
// 0, for a route none of whose requests the sample holds, whose
// percentiles are then unknown and read 0.
type RouteSummary struct {
	Route string `json:"route"`
	// Role is "client" for a target's calls to Peer (named "NAME -> PEER"),
	// absent for the requests it served.
	Role string `json:"role,omitempty"`
	Peer string `json:"peer,omitempty"`
	// Protocol is how its requests came: "http1", "h2", "grpc", "resp",
	// "jsonrpc", "fastcgi", "mixed" for several; absent when unknown.
	Protocol        string `json:"protocol,omitempty"`
	Requests        int    `json:"requests"`
	SampledRequests *int   `json:"sampled_requests,omitempty"`
	CPUUs           Dist   `json:"cpu_us"`
	UserUs          Dist   `json:"user_us"`
	KernelUs        Dist   `json:"kernel_us"`
	LatencyUs       Dist   `json:"latency_us"`
	// Backends are what its requests waited on, per peer; absent when
	// they called none.
	Backends []BackendSummary `json:"backends,omitempty"`
	// Interleaved is the share of its CPU, in percent, that is estimated
	// (profile.Request.Interleaved).
	Interleaved float64 `json:"interleaved,omitempty"`
	// SetupUs is the mean of its requests' connection setup and teardown,
	// part of CPUUs (TargetSummary.SetupUs).
	SetupUs float64 `json:"setup_us"`
}

// Route names come from what clients sent, so a target can have as many
// routes as requests. A summary keeps the maxRoutes-1 most asked for and
// folds the rest into one route named profile.OtherRoutes, always last.
// The collector names its own fold the same: requests it stopped naming
// past its bound on distinct names join the same route here.
const maxRoutes = 200

// Names of requests the collector could not name.
const (
	unnamedRoute = "(unnamed)"
	unknownPort  = "(unknown port)"
)

func routeName(key profile.RouteKey, by GroupBy) string {
	if by == GroupByPort {
		if key.Peer != "" {
			return "calls -> " + key.Peer
		}
		if key.Port == 0 {
			return unknownPort
		}
		return ":" + strconv.Itoa(int(key.Port))
	}
	if key.Route == "" {
		return unnamedRoute
	}
	return key.Route
}

// routeGroup is one route of a summary: the totals of its requests, and
// the indices of those in the sample.
type routeGroup struct {
	peer    string // a client's calls: whom they called
	totals  profile.Totals
	sampled []int // indices rather than copies: a sample can hold many requests
}

// groupSampledRoutes summarizes a target's requests by route, most
// requests first and ties by name: counts and means from totals, per
// route name and port, percentiles from sample, a uniform sample of the
// requests totals count. Nil for no requests or no grouping.
func groupSampledRoutes(totals map[profile.RouteKey]profile.Totals, sample []profile.Request, by GroupBy) []RouteSummary {
	if by == GroupByNone || len(totals) == 0 {
		return nil
	}
	byName := map[string]*routeGroup{}
	group := func(key profile.RouteKey) *routeGroup {
		name := routeName(key, by)
		g := byName[name]
		if g == nil {
			g = &routeGroup{peer: key.Peer}
			byName[name] = g
		}
		return g
	}
	for key, sum := range totals {
		group(key).totals.Merge(sum)
	}
	for i, r := range sample {
		// A sampled request is one of those counted: a name with no
		// totals can only come from a Target built inconsistently.
		if g := byName[routeName(r.Key(), by)]; g != nil {
			g.sampled = append(g.sampled, i)
		}
	}
	// The collector's fold is always folded here too, so that one route
	// holds every request not named.
	other := byName[profile.OtherRoutes]
	delete(byName, profile.OtherRoutes)
	names := slices.SortedFunc(maps.Keys(byName), func(a, b string) int {
		return cmp.Or(cmp.Compare(byName[b].totals.Requests, byName[a].totals.Requests), strings.Compare(a, b))
	})
	if other != nil || len(names) > maxRoutes {
		if other == nil {
			other = &routeGroup{}
		}
		if kept := maxRoutes - 1; len(names) > kept {
			for _, name := range names[kept:] {
				other.totals.Merge(byName[name].totals)
				other.sampled = append(other.sampled, byName[name].sampled...)
			}
			names = names[:kept]
		}
	}
	routes := make([]RouteSummary, 0, len(names)+1)
	for _, name := range names {
		routes = append(routes, summarizeRoute(name, byName[name], sample))
	}
	if other != nil {
		routes = append(routes, summarizeRoute(profile.OtherRoutes, other, sample))
	}
	return routes
}

// summarizeRoute summarizes the requests of g as route name.
func summarizeRoute(name string, g *routeGroup, sample []profile.Request) RouteSummary {
	cpu := make([]uint64, len(g.sampled))
	user := make([]uint64, len(g.sampled))
	kernel := make([]uint64, len(g.sampled))
	latency := make([]uint64, len(g.sampled))
	for i, at := range g.sampled {
		r := sample[at]
		cpu[i], user[i], kernel[i], latency[i] = r.CPUNs(), r.UserNs, r.KernelNs, r.LatencyNs()
	}
	t := g.totals
	route := RouteSummary{
		Route:       name,
		Interleaved: roundTenth(interleavedShare(t)),
		Protocol:    t.Protocol,
		Requests:    t.Requests,
		CPUUs:       sampledDist(cpu, t.CPUNs, t.Requests, t.MaxCPUNs),
		UserUs:      sampledDist(user, t.UserNs, t.Requests, t.MaxUserNs),
		KernelUs:    sampledDist(kernel, t.KernelNs, t.Requests, t.MaxKernelNs),
		LatencyUs:   sampledDist(latency, t.LatencyNs, t.Requests, t.MaxLatencyNs),
		SetupUs:     perRequestUs(t.SetupNs, t.Requests),
		Peer:        g.peer,
	}
	if g.peer != "" {
		route.Role = profile.RoleClient
	}
	if len(g.sampled) < t.Requests {
		route.SampledRequests = new(len(g.sampled))
	}
	return route
}

// A route table shows at most maxRouteRows rows, the last of them the
// routes beyond folded into one; and names cut to maxRouteNameRunes, so
// that a long one cannot stretch the table past any screen.
const (
	maxRouteRows      = 20
	maxRouteNameRunes = 60
)

// routeCells lays out t's routes as the cells of a table with a row per
// route, for the terminal and the page alike; no rows when t has none.
func routeCells(t TargetSummary) (header []string, rows [][]string) {
	if len(t.Routes) == 0 {
		return nil, nil
	}
	shown := t.Routes
	var folded []RouteSummary
	if len(t.Routes) > maxRouteRows {
		shown, folded = t.Routes[:maxRouteRows-1], t.Routes[maxRouteRows-1:]
	}
	for _, r := range shown {
		known := percentilesKnown(r.SampledRequests)
		rows = append(rows, []string{
			shorten(r.Route, maxRouteNameRunes), groupDigits(strconv.Itoa(r.Requests)), requestShare(r.Requests, t.Requests),
			tenths(r.CPUUs.Mean), percentile(r.CPUUs.P50, known), percentile(r.CPUUs.P99, known),
			tenths(r.UserUs.Mean), tenths(r.KernelUs.Mean),
			tenths(r.LatencyUs.Mean), percentile(r.LatencyUs.P99, known),
		})
	}
	if folded != nil {
		rows = append(rows, foldedRouteCells(folded, t.Requests))
	}
	return []string{"route", "requests", "share", "cpu", "cpu p50", "cpu p99", "user", "kernel", "latency", "latency p99"}, rows
}

// foldedRouteCells is the row of routes folded in a table: their requests
// and their means, weighted by requests. Their percentiles cannot be
// worked out from the routes' own, so those cells are empty.
func foldedRouteCells(routes []RouteSummary, targetRequests int) []string {
	var count int
	var cpu, user, kernel, latency float64
	for _, r := range routes {
		count += r.Requests
		n := float64(r.Requests)
		cpu += n * r.CPUUs.Mean
		user += n * r.UserUs.Mean
		kernel += n * r.KernelUs.Mean
		latency += n * r.LatencyUs.Mean
	}
	mean := func(sum float64) string {
		if count == 0 {
			return "n/a"
		}
		return tenths(sum / float64(count))
	}
	return []string{
		fmt.Sprintf("%d more routes", len(routes)), groupDigits(strconv.Itoa(count)), requestShare(count, targetRequests),
		mean(cpu), "", "", mean(user), mean(kernel), mean(latency), "",
	}
}

// percentilesKnown says whether a summary's percentiles were taken from
// any request: not when its sample holds none of them.
func percentilesKnown(sampled *int) bool { return sampled == nil || *sampled > 0 }

// percentile is the cell of a percentile: empty when unknown.
func percentile(us float64, known bool) string {
	if !known {
		return ""
	}
	return tenths(us)
}

// requestShare is part of whole as a percentage: "12.5%".
func requestShare(part, whole int) string {
	if whole == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}

// routesTitle says what route tables hold.
const routesTitle = "routes: µs per request, mean unless a percentile is named"
