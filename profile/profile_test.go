package profile

import (
	"reflect"
	"testing"
	"time"
)

func requests() []Request {
	return []Request{
		{Route: "GET /a", Port: 80, Start: 10, FirstWrite: 15, End: 30, UserNs: 100, KernelNs: 20, PageFaults: 1},
		{Route: "GET /b", Port: 80, Start: 40, FirstWrite: 30, End: 90, UserNs: 300, KernelNs: 60, BytesOut: 7},
		{Route: "GET /a", Port: 81, Start: 0, End: time.Duration(5), UserNs: 50, RunqueueNs: 9},
	}
}

func TestRequestFigures(t *testing.T) {
	r := requests()[1]
	if r.CPUNs() != 360 || r.LatencyNs() != 50 || r.FirstByteNs() != 0 {
		t.Errorf("cpu %d latency %d first byte %d, want 360, 50 and 0 (wrote before its start)", r.CPUNs(), r.LatencyNs(), r.FirstByteNs())
	}
}

// A Target built with its requests alone has totals worked out from them;
// one with totals keeps its own.
func TestTargetTotals(t *testing.T) {
	reqs := requests()
	built := Target{Requests: reqs, UnfinishedNs: 5, UnattributedNs: 1000}
	got := built.Totals()
	if got.Requests != 3 || got.CPUNs != 530 || got.MaxCPUNs != 360 || got.LatencyNs != 75 || got.FirstByteNs != 5 ||
		got.MaxRunqueueNs != 9 || got.PageFaults != 1 || got.BytesOut != 7 {
		t.Errorf("totals of the requests %+v", got)
	}
	if built.AttributedNs() != 535 || built.ProcessNs() != 1535 {
		t.Errorf("attributed %d, process %d ns, want 535 and 1,535", built.AttributedNs(), built.ProcessNs())
	}
	byRoute := built.TotalsByRoute()
	if len(byRoute) != 3 || byRoute[RouteKey{Route: "GET /a", Port: 80}].CPUNs != 120 {
		t.Errorf("totals by route %+v", byRoute)
	}

	kept := Target{Requests: reqs[:1], Finished: got, RouteTotals: byRoute}
	if kept.Totals() != got || !reflect.DeepEqual(kept.TotalsByRoute(), byRoute) {
		t.Errorf("a target with totals sums its sample instead")
	}
}

// Merging totals is adding their requests one by one.
func TestTotalsMerge(t *testing.T) {
	reqs := requests()
	var all, first, rest Totals
	for i, r := range reqs {
		all.Add(r)
		if i == 0 {
			first.Add(r)
		} else {
			rest.Add(r)
		}
	}
	first.Merge(rest)
	if first != all {
		t.Errorf("merged %+v\nadded  %+v", first, all)
	}
}
