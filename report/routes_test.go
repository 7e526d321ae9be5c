package report

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/profile"
)

func TestParseGroupBy(t *testing.T) {
	for name, want := range map[string]GroupBy{"route": GroupByRoute, "port": GroupByPort, "none": GroupByNone} {
		if got, err := ParseGroupBy(name); err != nil || got != want {
			t.Errorf("ParseGroupBy(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := ParseGroupBy("Route"); err == nil || !strings.Contains(err.Error(), "want route, port or none") {
		t.Errorf("ParseGroupBy(%q) error %v, want one naming the choices", "Route", err)
	}
}

// routeCounts names groupRoutes' routes, with their requests.
func routeCounts(routes []RouteSummary) []string {
	var counts []string
	for _, r := range routes {
		counts = append(counts, fmt.Sprintf("%s %d", r.Route, r.Requests))
	}
	return counts
}

func TestGroupRoutes(t *testing.T) {
	reqs := []profile.Request{
		{Route: "GET /b", Port: 8080, UserNs: 1000},
		{Route: "GET /a", Port: 8080, UserNs: 3000},
		{Route: ":9000", Port: 9000, UserNs: 5000},
		{Route: "GET /b", Port: 8080, UserNs: 2000},
		{Route: "", Port: 0, UserNs: 4000},
	}
	cases := []struct {
		by   GroupBy
		want []string
	}{
		// Most requests first, ties by name.
		{GroupByRoute, []string{"GET /b 2", "(unnamed) 1", ":9000 1", "GET /a 1"}},
		{GroupByPort, []string{":8080 3", "(unknown port) 1", ":9000 1"}},
		{GroupByNone, nil},
	}
	for _, c := range cases {
		if got := routeCounts(groupRoutes(reqs, c.by)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("grouped by %v: %q, want %q", c.by, got, c.want)
		}
	}
	byRoute := groupRoutes(reqs, GroupByRoute)
	if want := (Dist{Mean: 1.5, P50: 1, P90: 2, P99: 2, Max: 2}); byRoute[0].CPUUs != want {
		t.Errorf("GET /b CPU %+v, want %+v: its own two requests'", byRoute[0].CPUUs, want)
	}
	if groupRoutes(nil, GroupByRoute) != nil {
		t.Errorf("no requests gave routes, want none: absent from the JSON")
	}
}

// Clients name routes, so a target can have as many as requests: the
// summary keeps maxRoutes of them, the last the rest folded.
func TestGroupRoutesBounded(t *testing.T) {
	const distinct = maxRoutes + 50
	var reqs []profile.Request
	for i := range distinct {
		// Route i has one request, and two more for the first ten, so that
		// which are kept does not come down to names alone.
		n := 1
		if i < 10 {
			n = 3
		}
		for range n {
			reqs = append(reqs, profile.Request{Route: fmt.Sprintf("GET /item/%03d", i), UserNs: uint64(1000 * (i + 1))})
		}
	}
	routes := groupRoutes(reqs, GroupByRoute)
	if len(routes) != maxRoutes {
		t.Fatalf("%d routes, want %d", len(routes), maxRoutes)
	}
	if routes[0].Route != "GET /item/000" || routes[9].Requests != 3 || routes[10].Route != "GET /item/010" {
		t.Errorf("routes begin %q, want the ten of three requests first, then by name", routeCounts(routes[:11]))
	}
	other := routes[len(routes)-1]
	// 199 routes kept by name order: /item/000 .. /item/198; 51 folded.
	if other.Route != profile.OtherRoutes || other.Requests != distinct-(maxRoutes-1) {
		t.Errorf("last route %q of %d requests, want %q of %d", other.Route, other.Requests, profile.OtherRoutes, distinct-(maxRoutes-1))
	}
	if want := (Dist{Mean: 225, P50: 225, P90: 245, P99: 250, Max: 250}); other.CPUUs != want {
		t.Errorf("folded routes' CPU %+v, want %+v: the 200 .. 250 µs of routes 199 .. 249", other.CPUUs, want)
	}
	var total int
	for _, r := range routes {
		total += r.Requests
	}
	if total != len(reqs) {
		t.Errorf("routes hold %d requests, want all %d", total, len(reqs))
	}
}

// The table shows maxRouteRows rows, the last the rest folded, with their
// requests and mean figures weighted by requests.
func TestRouteCellsBounded(t *testing.T) {
	var routes []RouteSummary
	for i := range maxRouteRows + 5 {
		routes = append(routes, RouteSummary{
			Route: fmt.Sprintf("GET /%d", i), Requests: 10,
			CPUUs: Dist{Mean: float64(i)}, LatencyUs: Dist{Mean: 100},
		})
	}
	// Six folded routes: 19 .. 24, of mean CPU 21.5.
	_, rows := routeCells(TargetSummary{Requests: 10 * len(routes), Routes: routes})
	if len(rows) != maxRouteRows {
		t.Fatalf("%d rows, want %d", len(rows), maxRouteRows)
	}
	want := []string{"6 more routes", "60", "24.0%", "21.5", "", "", "0.0", "0.0", "100.0", ""}
	if got := rows[len(rows)-1]; !reflect.DeepEqual(got, want) {
		t.Errorf("folded row %q, want %q", got, want)
	}
}

// A route's name is whatever a client sent: it is cut short in tables, so
// it cannot stretch them past any screen.
func TestRouteCellsShortenNames(t *testing.T) {
	long := "GET /" + strings.Repeat("a", 500)
	_, rows := routeCells(TargetSummary{Requests: 1, Routes: []RouteSummary{{Route: long, Requests: 1}}})
	if name := []rune(rows[0][0]); len(name) != maxRouteNameRunes || name[len(name)-1] != '…' {
		t.Errorf("route shown as %q, want %d runes ending in …", rows[0][0], maxRouteNameRunes)
	}
}

// Requests the collector named profile.OtherRoutes, past its own bound on names,
// are one route with those the summary folds, last however many they are.
func TestGroupRoutesKeepsTheCollectorsFoldLast(t *testing.T) {
	var reqs []profile.Request
	for range 5 {
		reqs = append(reqs, profile.Request{Route: profile.OtherRoutes, Port: 80, UserNs: 9000})
	}
	reqs = append(reqs, profile.Request{Route: "GET /a", Port: 80, UserNs: 1000}, profile.Request{Route: "GET /a", Port: 80, UserNs: 1000})
	if got, want := routeCounts(groupRoutes(reqs, GroupByRoute)), []string{"GET /a 2", profile.OtherRoutes + " 5"}; !reflect.DeepEqual(got, want) {
		t.Errorf("routes %q, want %q", got, want)
	}

	// With as many named routes as a summary shows, the last of them is
	// folded in with the collector's.
	for i := range maxRoutes {
		reqs = append(reqs, profile.Request{Route: fmt.Sprintf("GET /item/%03d", i), Port: 80, UserNs: 1000})
	}
	routes := groupRoutes(reqs, GroupByRoute)
	other := routes[len(routes)-1]
	if len(routes) != maxRoutes || other.Route != profile.OtherRoutes || other.Requests != 5+2 {
		t.Errorf("%d routes, the last %q of %d requests; want %d, %q of the collector's 5 and 2 folded",
			len(routes), other.Route, other.Requests, maxRoutes, profile.OtherRoutes)
	}
}

// groupRoutes summarizes reqs, every request of a target, by route; as
// groupSampledRoutes.
func groupRoutes(reqs []profile.Request, by GroupBy) []RouteSummary {
	return groupSampledRoutes(profile.RouteTotalsOf(reqs), reqs, by)
}
