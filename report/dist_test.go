package report

import (
	"slices"
	"testing"
)

// The examples of the nearest-rank method on Wikipedia's "Percentile" page.
func TestNearestRank(t *testing.T) {
	cases := []struct {
		sorted  []uint64
		percent int
		want    uint64
	}{
		{[]uint64{15, 20, 35, 40, 50}, 5, 15},
		{[]uint64{15, 20, 35, 40, 50}, 30, 20},
		{[]uint64{15, 20, 35, 40, 50}, 40, 20},
		{[]uint64{15, 20, 35, 40, 50}, 50, 35},
		{[]uint64{15, 20, 35, 40, 50}, 100, 50},
		{[]uint64{3, 6, 7, 8, 8, 10, 13, 15, 16, 20}, 25, 7},
		{[]uint64{3, 6, 7, 8, 8, 10, 13, 15, 16, 20}, 50, 8},
		{[]uint64{3, 6, 7, 8, 8, 10, 13, 15, 16, 20}, 75, 15},
		{[]uint64{3, 6, 7, 8, 8, 10, 13, 15, 16, 20}, 100, 20},
		// p90 of 10 values is rank 9 exactly; float arithmetic can make it 10.
		{[]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
		{[]uint64{7}, 1, 7},
		{[]uint64{7}, 99, 7},
	}
	for _, c := range cases {
		if got := nearestRank(c.sorted, c.percent); got != c.want {
			t.Errorf("nearestRank(%v, %d) = %d, want %d", c.sorted, c.percent, got, c.want)
		}
	}
}

func TestNewDist(t *testing.T) {
	// 1 µs, 2 µs, ... 200 µs, shuffled: ranks 100, 180 and 198 are the
	// p50, p90 and p99, so they differ from the max.
	var oneTo200 []uint64
	for i := uint64(200); i >= 1; i-- {
		oneTo200 = append(oneTo200, (i*7919%200+1)*1000)
	}
	cases := []struct {
		name string
		ns   []uint64
		want Dist
	}{
		{"empty", nil, Dist{}},
		{"one value", []uint64{2500}, Dist{Mean: 2.5, P50: 2.5, P90: 2.5, P99: 2.5, Max: 2.5}},
		{"1 to 200 µs", oneTo200, Dist{Mean: 100.5, P50: 100, P90: 180, P99: 198, Max: 200}},
		// 1050 ns, the median and the mean, rounds half up to 1.1 µs.
		{"half up", []uint64{1049, 1051, 1050}, Dist{Mean: 1.1, P50: 1.1, P90: 1.1, P99: 1.1, Max: 1.1}},
		{"each way", []uint64{1049, 1049, 1049, 1049, 1049, 1150}, Dist{Mean: 1.1, P50: 1.0, P90: 1.2, P99: 1.2, Max: 1.2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := NewDist(c.ns); got != c.want {
				t.Errorf("NewDist = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestNewDistLeavesInputUnsorted(t *testing.T) {
	ns := []uint64{3000, 1000, 2000}
	NewDist(ns)
	if want := []uint64{3000, 1000, 2000}; !slices.Equal(ns, want) {
		t.Errorf("NewDist reordered its input to %v", ns)
	}
}
