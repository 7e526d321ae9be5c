package report

import (
	"math"
	"reflect"
	"strconv"
	"testing"
)

// The axis is linear for buckets of one width over a narrow span, and
// logarithmic, and says so, for buckets that grow or histograms far apart;
// a log axis from 0 µs starts at half the first edge above 0.
func TestHistogramAxis(t *testing.T) {
	even := Histogram{EdgesUs: []float64{100, 110, 120, 130}, Counts: []int{1, 2, 1}}
	growing := Histogram{EdgesUs: []float64{10, 11, 13, 17, 25}, Counts: []int{1, 2, 1, 1}}
	far := Histogram{EdgesUs: []float64{2000, 2010}, Counts: []int{3}}
	fromZero := Histogram{EdgesUs: []float64{0, 0.1, 0.3, 0.7}, Counts: []int{1, 1, 1}}
	cases := []struct {
		name  string
		hists []Histogram
		want  axis
	}{
		{"even", []Histogram{even}, axis{lo: 100, hi: 130}},
		{"growing", []Histogram{growing}, axis{lo: 10, hi: 25, log: true}},
		{"far apart", []Histogram{even, far}, axis{lo: 100, hi: 2010, log: true}},
		{"from zero", []Histogram{fromZero}, axis{lo: 0.05, hi: 0.7, log: true}},
	}
	for _, c := range cases {
		if got := axisOf(c.hists); got != c.want {
			t.Errorf("%s: axis %+v, want %+v", c.name, got, c.want)
		}
	}
	if got := (axis{lo: 100, hi: 130}).label(); got != "CPU per request (µs)" {
		t.Errorf("linear axis labelled %q", got)
	}
	if got := (axis{lo: 10, hi: 25, log: true}).label(); got != "CPU per request (µs), log scale" {
		t.Errorf("log axis labelled %q", got)
	}
	// Below the start of a log axis is its start.
	if got := (axis{lo: 0.05, hi: 0.7, log: true}).pos(0); got != 0 {
		t.Errorf("0 µs on a log axis at %v, want its start", got)
	}
}

// Ticks are round: steps of 1, 2 or 5 times a power of ten on a linear
// axis, and those values on a log axis, only powers of ten when that
// would make too many, and every multiple when that would make too few.
func TestHistogramTicks(t *testing.T) {
	cases := []struct {
		a    axis
		want []float64
	}{
		{axis{lo: 100, hi: 130}, []float64{100, 105, 110, 115, 120, 125, 130}},
		{axis{lo: 0, hi: 7}, []float64{0, 1, 2, 3, 4, 5, 6, 7}},
		{axis{lo: 21, hi: 2513, log: true}, []float64{50, 100, 200, 500, 1000, 2000}},
		{axis{lo: 1, hi: 1e6, log: true}, []float64{1, 10, 100, 1000, 1e4, 1e5, 1e6}},
		{axis{lo: 95, hi: 410, log: true}, []float64{100, 200, 300, 400}},
	}
	for _, c := range cases {
		got := c.a.ticks()
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ticks of %+v: %v, want %v", c.a, got, c.want)
		}
	}
	if ticks, top := yAxis(7); !reflect.DeepEqual(ticks, []float64{0, 2, 4, 6, 8}) || top != 8 {
		t.Errorf("y axis up to 7: ticks %v, top %v; want 0 to 8 by 2", ticks, top)
	}
	for v, want := range map[float64]string{0: "0", 2.5: "2.5", 1000: "1,000", 0.30000000000000004: "0.3"} {
		if got := tickText(v); got != want {
			t.Errorf("tick %v reads %q, want %q", v, got, want)
		}
	}
	if got := tickText(linearTicks(0, 7, 4)[0]); got != "0" {
		t.Errorf("first tick from 0 reads %q", got)
	}
}

// A histogram spread over the slots of an axis keeps all its requests,
// each bucket's evenly over the slots it spans.
func TestSlotShares(t *testing.T) {
	h := Histogram{EdgesUs: []float64{0, 10, 40}, Counts: []int{1, 3}}
	got := slotShares(h, axis{lo: 0, hi: 40}, 4)
	want := []float64{25, 25, 25, 25}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("shares %v, want %v", got, want)
	}
	// On a wider axis, a bucket half in a slot puts half its share there.
	got = slotShares(Histogram{EdgesUs: []float64{15, 25}, Counts: []int{2}}, axis{lo: 0, hi: 40}, 4)
	if want := []float64{0, 50, 50, 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("shares %v, want %v", got, want)
	}
	// A bucket below a log axis's start is drawn from there.
	got = slotShares(Histogram{EdgesUs: []float64{0, 0.1, 10}, Counts: []int{1, 1}}, axis{lo: 0.05, hi: 10, log: true}, 8)
	var sum float64
	for _, s := range got {
		sum += s
	}
	if math.Abs(sum-100) > 1e-9 || got[0] <= 0 {
		t.Errorf("shares %v: want 100%% in all, some in the first slot", got)
	}
	if got := slotShares(Histogram{EdgesUs: []float64{1, 2}, Counts: []int{0}}, axis{lo: 1, hi: 2}, 3); !reflect.DeepEqual(got, []float64{0, 0, 0}) {
		t.Errorf("shares of no requests %v", got)
	}
}

// Histograms read from a file can have any rising edges: the page must
// draw them in bounded time, with finite coordinates.
func TestHistogramOfAnyEdges(t *testing.T) {
	for _, edges := range [][]float64{
		{1e16, 1e16 + 2, 1e16 + 6},
		{0, 5e-324, 1.7e308},
		{1, 1 + 1e-15, 2},
		{0, 1e-300},
	} {
		counts := make([]int, len(edges)-1)
		counts[0] = 1
		h := Histogram{EdgesUs: edges, Counts: counts}
		for _, figure := range []htmlFigure{
			histogramFigure(h, false),
			overlayFigure([]histSeries{{Name: "a", Color: "#000000", Hist: h}, {Name: "b", Color: "#ffffff", Hist: h}}),
		} {
			if n := len(figure.Chart.Texts); n > 40 {
				t.Errorf("edges %v: %d labels", edges, n)
			}
			for _, b := range figure.Chart.Bars {
				for _, v := range []string{b.X, b.Y, b.W, b.H} {
					if x, err := strconv.ParseFloat(v, 64); err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
						t.Errorf("edges %v: bar at %q", edges, v)
					}
				}
			}
		}
	}
}
