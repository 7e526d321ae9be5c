package collector

import (
	"math"
	"math/rand/v2"

	"github.com/reqprof/reqprof/profile"
)

// maxSampledRequests bounds the requests kept of each target, to some
// 15 MB of them (152 bytes each). A window of minutes at tens of thousands of requests per
// second finishes millions, and keeping each would take gigabytes. Counts
// and means come from exact totals instead; percentiles from a uniform
// sample this large are within a fraction of a percentile of their rank
// among every request (one standard error: p50 ±0.16, p99 ±0.03).
const maxSampledRequests = 100_000

// finishedRequests is what the collector keeps of one target's finished
// requests, in memory bounded however many finish: exact totals, overall
// and per route, and a uniform sample of the requests themselves.
type finishedRequests struct {
	totals profile.Totals
	// byRoute holds pointers so that adding to a route's totals hashes
	// its key once.
	byRoute map[profile.RouteKey]*profile.Totals
	sample  reservoir
}

// newFinishedRequests keeps at most limit requests of a target, sampled
// with a generator seeded with seed: the same records in the same order
// give the same sample.
func newFinishedRequests(limit int, seed uint64) *finishedRequests {
	return &finishedRequests{
		byRoute: map[profile.RouteKey]*profile.Totals{},
		sample:  reservoir{limit: limit, rand: rand.New(rand.NewPCG(seed, sampleSeed))},
	}
}

// sampleSeed is the second half of every target's generator seed; any
// constant will do, as long as it is one.
const sampleSeed = 0x7265717072_6f66

// add counts one finished request. Once the sample is full it allocates
// nothing, save for a route never seen before.
func (f *finishedRequests) add(r profile.Request) {
	f.totals.Add(r)
	key := r.Key()
	sum := f.byRoute[key]
	if sum == nil {
		sum = &profile.Totals{}
		f.byRoute[key] = sum
	}
	sum.Add(r)
	f.sample.add(r)
}

// reservoir is a uniform random sample of at most limit of the requests
// added to it: each of the n added so far is in it with the same chance,
// limit/n. It is Li's Algorithm L: once full, it draws how many requests to
// pass over before the next one it keeps, rather than a random number for
// every request (Algorithm R), so that a request it does not keep costs a
// comparison, and one it keeps a write into the sample.
type reservoir struct {
	kept  []profile.Request
	seen  int
	limit int
	rand  *rand.Rand
	// Once full: the 1-based number of the next request to keep, and w, the
	// largest of limit uniform draws' (0,1) keys so far, in Li's terms.
	next int
	w    float64
}

// sampleGrowFull is the sample's size past which it grows to its limit at
// once.
const sampleGrowFull = 4096

func (s *reservoir) add(r profile.Request) {
	s.seen++
	if s.limit == 0 {
		return // keeps none
	}
	if len(s.kept) < s.limit {
		if len(s.kept) == cap(s.kept) {
			// Grown here rather than by append, which would overshoot
			// the limit by up to a quarter. Doubling while few have come;
			// past sampleGrowFull, a busy window will fill the sample:
			// to the limit at once, so that the sample is copied (and
			// its memory written) once rather than at every doubling, and
			// the pages of the room left are touched only as it fills.
			room := max(64, 2*cap(s.kept))
			if cap(s.kept) >= sampleGrowFull {
				room = s.limit
			}
			grown := make([]profile.Request, len(s.kept), min(s.limit, room))
			copy(grown, s.kept)
			s.kept = grown
		}
		s.kept = append(s.kept, r)
		if len(s.kept) == s.limit {
			s.w = math.Exp(math.Log(s.uniform()) / float64(s.limit))
			s.skip()
		}
		return
	}
	if s.seen < s.next {
		return
	}
	s.kept[s.rand.IntN(s.limit)] = r
	s.w *= math.Exp(math.Log(s.uniform()) / float64(s.limit))
	s.skip()
}

// skip sets next past the requests a geometric draw says to leave out.
func (s *reservoir) skip() {
	gap := math.Floor(math.Log(s.uniform()) / math.Log1p(-s.w))
	if gap > float64(math.MaxInt-s.seen-1) || math.IsNaN(gap) {
		s.next = math.MaxInt // w so near 0 that no request would be kept
		return
	}
	s.next = s.seen + int(gap) + 1
}

// uniform draws from (0, 1), never 0, whose log would be -Inf.
func (s *reservoir) uniform() float64 {
	return (float64(s.rand.Uint64()>>11) + 0.5) / (1 << 53)
}

// routeTotals are the totals per route, as a run reports them.
func (f *finishedRequests) routeTotals() map[profile.RouteKey]profile.Totals {
	totals := make(map[profile.RouteKey]profile.Totals, len(f.byRoute))
	for key, sum := range f.byRoute {
		totals[key] = *sum
	}
	return totals
}
