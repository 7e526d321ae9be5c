package report

import (
	"math"
	"slices"
	"testing"

	"github.com/reqprof/reqprof/profile"
)

func TestHistogramByHand(t *testing.T) {
	cases := []struct {
		name     string
		valuesNs []uint64
		want     Histogram
	}{
		// 0.1 µs buckets fit 0.0 .. 0.2 µs; 149 ns rounds to 0.1, 150 to 0.2.
		{"tenths", []uint64{0, 49, 50, 149, 150}, Histogram{EdgesUs: []float64{0, 0.1, 0.2, 0.3}, Counts: []int{2, 2, 1}}},
		{"one value", []uint64{7_000}, Histogram{EdgesUs: []float64{7, 7.1}, Counts: []int{1}}},
		// 10.0 to 14.0 µs, in tenths 100 to 140. At growth g a step is
		// 0.1 µs while g × tenths <= 1024, 0.2 µs above. g = 8 keeps 0.1 µs
		// steps to 12.8 µs and needs 35 buckets; g = 9 only to 11.4 µs,
		// and needs 28.
		{"narrow", []uint64{10_000, 12_000, 14_000}, Histogram{
			EdgesUs: []float64{
				10, 10.1, 10.2, 10.3, 10.4, 10.5, 10.6, 10.7, 10.8, 10.9, 11, 11.1, 11.2, 11.3, 11.4,
				11.6, 11.8, 12, 12.2, 12.4, 12.6, 12.8, 13, 13.2, 13.4, 13.6, 13.8, 14, 14.2,
			},
			Counts: []int{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := newHistogram(c.valuesNs)
			if got == nil || !slices.Equal(got.EdgesUs, c.want.EdgesUs) || !slices.Equal(got.Counts, c.want.Counts) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestHistogramNoValues(t *testing.T) {
	if h := newHistogram(nil); h != nil {
		t.Errorf("histogram of nothing: %+v", h)
	}
}

// Whatever the values, a histogram holds each once, in at most
// maxHistogramBuckets buckets between rising edges, and buckets grow with
// CPU, so that a long tail takes few of them.
func TestHistogramShape(t *testing.T) {
	cases := map[string][]uint64{
		"1 to 200 µs":       cpuOf(requestsOneTo200()),
		"heavy tail":        {20_000, 21_000, 22_000, 25_000, 30_000, 5_000_000, 900_000_000},
		"whole uint64":      {0, math.MaxUint64 - 50},
		"near uint64's top": {math.MaxUint64 - 150, math.MaxUint64 - 50},
	}
	for name, values := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHistogram(values)
			if len(h.Counts) == 0 || len(h.Counts) > maxHistogramBuckets || len(h.EdgesUs) != len(h.Counts)+1 {
				t.Fatalf("%d counts, %d edges", len(h.Counts), len(h.EdgesUs))
			}
			if err := checkHistogram(*h, len(values)); err != nil {
				t.Error(err)
			}
			for i := 2; i < len(h.EdgesUs); i++ {
				if h.EdgesUs[i]-h.EdgesUs[i-1] < h.EdgesUs[i-1]-h.EdgesUs[i-2] {
					t.Errorf("bucket %d is narrower than the one before: edges %v", i-1, h.EdgesUs)
				}
			}
		})
	}
}

func cpuOf(reqs []profile.Request) []uint64 {
	cpu := make([]uint64, len(reqs))
	for i, r := range reqs {
		cpu[i] = r.CPUNs()
	}
	return cpu
}
