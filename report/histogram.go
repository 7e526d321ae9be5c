package report

import (
	"slices"
	"sort"
)

// Histogram counts finished requests by their CPU, rounded to 0.1 µs like
// every other figure: bucket i holds those with
// EdgesUs[i] <= CPU < EdgesUs[i+1], so there is one more edge than counts.
type Histogram struct {
	EdgesUs []float64 `json:"edges_us"`
	Counts  []int     `json:"counts"`
}

// maxHistogramBuckets keeps a histogram small enough to read and to draw.
const maxHistogramBuckets = 30

// Each bucket is wider than the one before by growth/growthUnit of its lower
// edge (and at least 0.1 µs wide). At the largest growth, each edge is nine
// times the one before, so any uint64 of ns fits in well under
// maxHistogramBuckets buckets; and a step computed as in bucketStep, from
// an edge below 2^64 ns, cannot overflow.
const (
	growthUnit = 1024
	maxGrowth  = 8 * growthUnit
)

// newHistogram buckets valuesNs, or returns nil for no values.
//
// Buckets widen with the CPU they hold, by the smallest growth that fits all
// values in maxHistogramBuckets: a narrow distribution gets fine buckets of
// near equal width, a long-tailed one buckets that grow geometrically, so
// that neither its body nor its tail is lost in one bucket. Edges are whole
// tenths of a µs computed in integers, so the same values give the same
// histogram on every machine.
func newHistogram(valuesNs []uint64) *Histogram {
	if len(valuesNs) == 0 {
		return nil
	}
	tenths := make([]uint64, len(valuesNs))
	for i, v := range valuesNs {
		tenths[i] = (v + 50) / 100 // rounded half up, as usFromNs rounds
	}
	lowest, highest := slices.Min(tenths), slices.Max(tenths)
	growth := uint64(sort.Search(maxGrowth, func(i int) bool {
		return len(bucketEdges(lowest, highest, uint64(i+1))) <= maxHistogramBuckets+1
	}) + 1)
	edges := bucketEdges(lowest, highest, growth)

	h := &Histogram{EdgesUs: make([]float64, len(edges)), Counts: make([]int, len(edges)-1)}
	for i, e := range edges {
		h.EdgesUs[i] = float64(e) / 10
	}
	for _, t := range tenths {
		// The last edge is above highest, so every value has a bucket.
		above, _ := slices.BinarySearch(edges, t+1)
		h.Counts[above-1]++
	}
	return h
}

// bucketEdges are the edges, in tenths of a µs, from lowest to the first
// edge above highest. It stops early once there are more than
// maxHistogramBuckets+1, as that growth is then too small anyway.
func bucketEdges(lowest, highest, growth uint64) []uint64 {
	edges := []uint64{lowest}
	for e := lowest; e <= highest && len(edges) <= maxHistogramBuckets+1; {
		e += bucketStep(e, growth)
		edges = append(edges, e)
	}
	return edges
}

// bucketStep is ceil(edge × growth / growthUnit), at least 1, computed
// without overflowing for any edge below 2^64 / maxGrowth × growthUnit.
func bucketStep(edge, growth uint64) uint64 {
	whole, part := edge/growthUnit, edge%growthUnit
	return max(1, whole*growth+(part*growth+growthUnit-1)/growthUnit)
}
