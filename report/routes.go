package report

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
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
	return 0, fmt.Errorf("report: cannot group requests by %q: want route, port or none", name)
}

// RouteSummary is the finished requests of one route (or port), with
// figures as their target's.
type RouteSummary struct {
	Route     string `json:"route"`
	Requests  int    `json:"requests"`
	CPUUs     Dist   `json:"cpu_us"`
	UserUs    Dist   `json:"user_us"`
	KernelUs  Dist   `json:"kernel_us"`
	LatencyUs Dist   `json:"latency_us"`
}

// Route names come from what clients sent, so a target can have as many
// routes as requests. A summary keeps the maxRoutes-1 most asked for and
// folds the rest into one route named otherRoutes, always last.
const (
	maxRoutes   = 200
	otherRoutes = "(other)"
)

// Names of requests the collector could not name.
const (
	unnamedRoute = "(unnamed)"
	unknownPort  = "(unknown port)"
)

func routeName(r Request, by GroupBy) string {
	if by == GroupByPort {
		if r.Port == 0 {
			return unknownPort
		}
		return ":" + strconv.Itoa(int(r.Port))
	}
	if r.Route == "" {
		return unnamedRoute
	}
	return r.Route
}

// groupRoutes summarizes reqs by route, most requests first and ties by
// name; nil for no requests or no grouping.
func groupRoutes(reqs []Request, by GroupBy) []RouteSummary {
	if by == GroupByNone || len(reqs) == 0 {
		return nil
	}
	// Indices rather than copies: a window can hold millions of requests.
	byName := map[string][]int{}
	for i, r := range reqs {
		name := routeName(r, by)
		byName[name] = append(byName[name], i)
	}
	names := slices.SortedFunc(maps.Keys(byName), func(a, b string) int {
		return cmp.Or(cmp.Compare(len(byName[b]), len(byName[a])), strings.Compare(a, b))
	})
	var folded []int
	if len(names) > maxRoutes {
		for _, name := range names[maxRoutes-1:] {
			folded = append(folded, byName[name]...)
		}
		names = names[:maxRoutes-1]
	}
	routes := make([]RouteSummary, 0, len(names)+1)
	for _, name := range names {
		routes = append(routes, summarizeRoute(name, reqs, byName[name]))
	}
	if folded != nil {
		routes = append(routes, summarizeRoute(otherRoutes, reqs, folded))
	}
	return routes
}

// summarizeRoute summarizes the requests of reqs at indices as route name.
func summarizeRoute(name string, reqs []Request, indices []int) RouteSummary {
	cpu := make([]uint64, len(indices))
	user := make([]uint64, len(indices))
	kernel := make([]uint64, len(indices))
	latency := make([]uint64, len(indices))
	for i, at := range indices {
		r := reqs[at]
		cpu[i], user[i], kernel[i], latency[i] = r.CPUNs(), r.UserNs, r.KernelNs, r.LatencyNs()
	}
	return RouteSummary{
		Route:     name,
		Requests:  len(indices),
		CPUUs:     NewDist(cpu),
		UserUs:    NewDist(user),
		KernelUs:  NewDist(kernel),
		LatencyUs: NewDist(latency),
	}
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
		rows = append(rows, []string{
			shorten(r.Route, maxRouteNameRunes), groupDigits(strconv.Itoa(r.Requests)), requestShare(r.Requests, t.Requests),
			tenths(r.CPUUs.Mean), tenths(r.CPUUs.P50), tenths(r.CPUUs.P99),
			tenths(r.UserUs.Mean), tenths(r.KernelUs.Mean),
			tenths(r.LatencyUs.Mean), tenths(r.LatencyUs.P99),
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

// requestShare is part of whole as a percentage: "12.5%".
func requestShare(part, whole int) string {
	if whole == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}

// routesTitle says what route tables hold.
const routesTitle = "routes: µs per request, mean unless a percentile is named"
