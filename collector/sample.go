package collector

import (
	"math/rand/v2"

	"github.com/reqprof/reqprof/collector/route"
	"github.com/reqprof/reqprof/report"
)

// maxSampledRequests bounds the requests kept of each target, to some
// 15 MB of them (152 bytes each). A window of minutes at tens of thousands of requests per
// second finishes millions, and keeping each would take gigabytes. Counts
// and means come from exact totals instead; percentiles from a uniform
// sample this large are within a fraction of a percentile of their rank
// among every request (one standard error: p50 ±0.16, p99 ±0.03).
const maxSampledRequests = 100_000

// maxRouteNames bounds the distinct route names the collector keeps.
// Names come from what clients sent, so without a bound a client could
// grow the collector's memory with each request; past it, requests are
// named report.OtherRoutes, as the summary names the routes it folds.
const maxRouteNames = 10_000

// finishedRequests is what the collector keeps of one target's finished
// requests, in memory bounded however many finish: exact totals, overall
// and per route, and a uniform sample of the requests themselves.
type finishedRequests struct {
	totals  report.Totals
	byRoute map[report.RouteKey]report.Totals
	sample  reservoir
}

// newFinishedRequests keeps at most limit requests of a target, sampled
// with a generator seeded with seed: the same records in the same order
// give the same sample.
func newFinishedRequests(limit int, seed uint64) *finishedRequests {
	return &finishedRequests{
		byRoute: map[report.RouteKey]report.Totals{},
		sample:  reservoir{limit: limit, rand: rand.New(rand.NewPCG(seed, sampleSeed))},
	}
}

// sampleSeed is the second half of every target's generator seed; any
// constant will do, as long as it is one.
const sampleSeed = 0x7265717072_6f66

// add counts one finished request. Once the sample is full it allocates
// nothing, save for a route never seen before.
func (f *finishedRequests) add(r report.Request) {
	f.totals.Add(r)
	key := report.RouteKey{Route: r.Route, Port: r.Port}
	sum := f.byRoute[key]
	sum.Add(r)
	f.byRoute[key] = sum
	f.sample.add(r)
}

// reservoir is a uniform random sample of at most limit of the requests
// added to it (Algorithm R): each of the n added so far is in it with the
// same chance, limit/n.
type reservoir struct {
	kept  []report.Request
	seen  int
	limit int
	rand  *rand.Rand
}

func (s *reservoir) add(r report.Request) {
	s.seen++
	if len(s.kept) < s.limit {
		if len(s.kept) == cap(s.kept) {
			// Grown here rather than by append, which would overshoot
			// the limit by up to a quarter.
			grown := make([]report.Request, len(s.kept), min(s.limit, max(64, 2*cap(s.kept))))
			copy(grown, s.kept)
			s.kept = grown
		}
		s.kept = append(s.kept, r)
		return
	}
	// The n-th request replaces a kept one with chance limit/n, a kept one
	// chosen uniformly: every request seen stays with chance limit/n.
	if i := s.rand.IntN(s.seen); i < s.limit {
		s.kept[i] = r
	}
}

// routeNames names requests, keeps one copy of each name, and at most
// maxRouteNames of them.
type routeNames struct {
	interned map[string]string
	limit    int
}

func newRouteNames(limit int) *routeNames {
	return &routeNames{interned: map[string]string{}, limit: limit}
}

func (n *routeNames) name(payload []byte, port uint16) string {
	name := route.Name(payload, port)
	if interned, ok := n.interned[name]; ok {
		return interned
	}
	if len(n.interned) >= n.limit {
		return report.OtherRoutes
	}
	n.interned[name] = name
	return name
}
