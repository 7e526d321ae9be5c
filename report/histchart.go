package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Histograms on the page are drawn to a continuous axis of CPU per request:
// linear, or logarithmic when buckets grow with the CPU they hold (a
// long-tailed distribution), so that each bucket keeps its width on the
// page. One target's histogram is its own buckets, as tall as their
// counts. Several targets' are overlaid on one axis: their buckets differ,
// so each is spread over common slots of the axis, as a share of its
// requests, so that targets of different bucket widths and request counts
// compare.

// seriesColors tell targets apart in an overlaid histogram, in order;
// none is a colour of the CPU bars' parts or of one target's histogram,
// which mean something else.
var seriesColors = []string{
	"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b",
	"#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#ff7f0e",
}

// Sizes of a histogram, in CSS pixels, and the slots an overlay shares.
const (
	histHeight      = 260
	histLeft        = 64
	histRight       = 16
	histTop         = 12
	histBottom      = 52
	overlaySlots    = 40
	overlayOpacity  = "0.3"
	logWidthRatio   = 2  // a histogram whose widest bucket is this many times its narrowest is drawn to a log axis
	logSpanRatio    = 10 // as are histograms spanning this many times their lowest edge
	maxLinearTicks  = 8
	maxLogTickCount = 12
)

// htmlFigure is a chart with its heading and what reads it: legend and
// notes.
type htmlFigure struct {
	Title  string
	Chart  htmlChart
	Legend []htmlLegend
	Notes  []string
}

// histSeries is one target's histogram, to be drawn.
type histSeries struct {
	Name, Color string
	Hist        Histogram
}

// axis maps µs to a position from 0 to 1 along the x axis.
type axis struct {
	lo, hi float64
	log    bool
}

func (a axis) pos(us float64) float64 {
	if a.log {
		us = max(us, a.lo)
		return (math.Log(us) - math.Log(a.lo)) / (math.Log(a.hi) - math.Log(a.lo))
	}
	return (us - a.lo) / (a.hi - a.lo)
}

// label says what the x axis holds, and that it is logarithmic when it is.
func (a axis) label() string {
	if a.log {
		return "CPU per request (µs), log scale"
	}
	return "CPU per request (µs)"
}

// axisOf spans every bucket of hists. It is logarithmic when the buckets
// of any grow (its widest is logWidthRatio times its narrowest or more),
// or when together they span logSpanRatio times their lowest edge: a
// histogram that is narrow next to another would be lost on a linear
// axis. A log axis starting at 0 µs starts at half the smallest edge above
// 0 instead: the bucket below it is drawn from there.
func axisOf(hists []Histogram) axis {
	a := axis{lo: math.Inf(1), hi: math.Inf(-1)}
	lowestPositive := math.Inf(1)
	for _, h := range hists {
		a.lo = min(a.lo, h.EdgesUs[0])
		a.hi = max(a.hi, h.EdgesUs[len(h.EdgesUs)-1])
		narrowest, widest := math.Inf(1), 0.0
		for i := 1; i < len(h.EdgesUs); i++ {
			width := h.EdgesUs[i] - h.EdgesUs[i-1]
			narrowest, widest = min(narrowest, width), max(widest, width)
			if h.EdgesUs[i] > 0 {
				lowestPositive = min(lowestPositive, h.EdgesUs[i])
			}
		}
		if widest >= logWidthRatio*narrowest {
			a.log = true
		}
	}
	if a.lo > 0 && a.hi >= logSpanRatio*a.lo {
		a.log = true
	}
	if a.log && a.lo <= 0 {
		a.lo = lowestPositive / 2
	}
	// Edges too close for their logarithms to differ, or too close to 0
	// for a logarithm (from a file, not reqprof), are drawn to a linear
	// axis.
	if span := math.Log(a.hi) - math.Log(a.lo); a.log && !(span > 1e-9 && span < math.MaxFloat64) {
		a.log, a.lo = false, math.Inf(1)
		for _, h := range hists {
			a.lo = min(a.lo, h.EdgesUs[0])
		}
	}
	return a
}

// ticks are where the axis is labelled: 1, 2 and 5 times a power of ten
// on a log axis (powers of ten alone if that makes too many), and round
// steps on a linear one.
func (a axis) ticks() []float64 {
	if !a.log {
		return linearTicks(a.lo, a.hi, maxLinearTicks)
	}
	var ticks, decades []float64
	within := func(multiples ...float64) []float64 {
		ticks, decades = nil, nil
		for p := math.Floor(math.Log10(a.lo)); p <= math.Ceil(math.Log10(a.hi)); p++ {
			for _, m := range multiples {
				if v := m * math.Pow(10, p); v >= a.lo*(1-1e-9) && v <= a.hi*(1+1e-9) {
					ticks = append(ticks, v)
					if m == 1 {
						decades = append(decades, v)
					}
				}
			}
		}
		return ticks
	}
	// An axis spanning less than a decade or so has every multiple.
	if len(within(1, 2, 5)) < 4 {
		return within(1, 2, 3, 4, 5, 6, 7, 8, 9)
	}
	if len(ticks) <= maxLogTickCount || len(decades) < 2 {
		return ticks
	}
	// Powers of ten, every so many when there are too many of them too.
	every := (len(decades) + maxLogTickCount - 1) / maxLogTickCount
	var thinned []float64
	for i := 0; i < len(decades); i += every {
		thinned = append(thinned, decades[i])
	}
	return thinned
}

// linearTicks are the multiples of a round step (1, 2 or 5 times a power
// of ten) from lo to hi, at most about n of them.
func linearTicks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(n)
	power := math.Pow(10, math.Floor(math.Log10(raw)))
	step := power
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * power; step >= raw {
			break
		}
	}
	first, last := math.Ceil(lo/step-1e-9), math.Floor(hi/step+1e-9)
	// Ends too close for their steps to differ (from a file, not reqprof):
	// the ends alone.
	if !(last-first >= 0 && last-first <= float64(2*n+2)) {
		return []float64{lo, hi}
	}
	var ticks []float64
	for k := range int(last-first) + 1 {
		tick := (first+float64(k))*step + 0 // +0: no tick reads -0
		if len(ticks) == 0 || tick > ticks[len(ticks)-1] {
			ticks = append(ticks, tick)
		}
	}
	return ticks
}

// yAxis are the ticks of a y axis from 0 up to the first round step at
// or above tallest, and its top.
func yAxis(tallest float64) (ticks []float64, top float64) {
	ticks = linearTicks(0, tallest, 4)
	if len(ticks) >= 2 && ticks[len(ticks)-1] < tallest {
		ticks = append(ticks, ticks[len(ticks)-1]+ticks[1]-ticks[0])
	}
	return ticks, max(ticks[len(ticks)-1], tallest)
}

// tickText formats a tick's value with no more digits than it has.
func tickText(v float64) string {
	return groupDigits(strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64))
}

// plot is the rectangle data are drawn in.
type plot struct{ left, top, width, height float64 }

func newPlot() plot {
	return plot{
		left: histLeft, top: histTop,
		width:  chartWidth - histLeft - histRight,
		height: histHeight - histTop - histBottom,
	}
}

func (p plot) bottom() float64 { return p.top + p.height }

// frame draws the axes of a histogram: ticks and grid lines, and the
// labels of both axes with their units. yMax is the top of the y axis, and
// yTicks where it is labelled.
func (p plot) frame(chart *htmlChart, a axis, yLabel string, yTicks []float64, yMax float64, yUnit string) {
	for _, v := range yTicks {
		y := px(p.bottom() - scaled(v, yMax, p.height))
		if v > 0 {
			chart.Lines = append(chart.Lines, htmlLine{Class: "grid", X1: px(p.left), Y1: y, X2: px(p.left + p.width), Y2: y})
		}
		chart.Texts = append(chart.Texts, htmlText{Class: "tick", X: px(p.left - 6), Y: px(p.bottom() - scaled(v, yMax, p.height) + 4), Anchor: "end", Text: tickText(v) + yUnit})
	}
	for _, v := range a.ticks() {
		x := px(p.left + a.pos(v)*p.width)
		chart.Axes = append(chart.Axes, htmlLine{Class: "tick", X1: x, Y1: px(p.bottom()), X2: x, Y2: px(p.bottom() + 5)})
		chart.Texts = append(chart.Texts, htmlText{Class: "tick", X: x, Y: px(p.bottom() + 18), Anchor: "middle", Text: tickText(v)})
	}
	chart.Axes = append(chart.Axes,
		htmlLine{Class: "axis", X1: px(p.left), Y1: px(p.bottom()), X2: px(p.left + p.width), Y2: px(p.bottom())},
		htmlLine{Class: "axis", X1: px(p.left), Y1: px(p.top), X2: px(p.left), Y2: px(p.bottom())},
	)
	middle := p.top + p.height/2
	chart.Texts = append(chart.Texts,
		htmlText{Class: "axis-label", X: px(p.left + p.width/2), Y: px(p.bottom() + 40), Anchor: "middle", Text: a.label()},
		htmlText{Class: "axis-label", X: "14", Y: px(middle), Anchor: "middle", Text: yLabel,
			Transform: "rotate(-90 14 " + px(middle) + ")"},
	)
}

// histogramFigure draws one target's histogram: a bar per bucket, as wide
// as the bucket on the axis and as tall as its count. sampled says the
// counts are of a sample of the requests.
func histogramFigure(h Histogram, sampled bool) htmlFigure {
	chart := htmlChart{Width: chartWidth, Height: histHeight}
	p := newPlot()
	a := axisOf([]Histogram{h})
	yTicks, yMax := yAxis(float64(slices.Max(h.Counts)))
	yLabel := "requests"
	if sampled {
		yLabel = "requests in the sample"
	}
	p.frame(&chart, a, yLabel, yTicks, yMax, "")
	for i, n := range h.Counts {
		x0, x1 := p.left+a.pos(h.EdgesUs[i])*p.width, p.left+a.pos(h.EdgesUs[i+1])*p.width
		height := scaled(float64(n), yMax, p.height)
		chart.Bars = append(chart.Bars, htmlBar{
			Class: "bin", X: px(x0 + 0.5), Y: px(p.bottom() - height),
			W: px(max(1, x1-x0-1)), H: px(height), Color: histogramColor, Count: n,
			Title: fmt.Sprintf("%s to %s µs: %s %s", tenths(h.EdgesUs[i]), tenths(h.EdgesUs[i+1]),
				groupDigits(strconv.Itoa(n)), plural(n, "request", "requests")),
		})
	}
	return htmlFigure{Title: "CPU per request: histogram", Chart: chart}
}

// overlayFigure draws the histograms of several targets on one axis, one
// colour each: each spread over common slots of the axis, as shares of its
// requests, drawn as translucent bars under an outline.
func overlayFigure(series []histSeries) htmlFigure {
	chart := htmlChart{Width: chartWidth, Height: histHeight, Class: "overlay"}
	p := newPlot()
	hists := make([]Histogram, len(series))
	for i, s := range series {
		hists[i] = s.Hist
	}
	a := axisOf(hists)
	shares := make([][]float64, len(series))
	var tallest float64
	for i, s := range series {
		shares[i] = slotShares(s.Hist, a, overlaySlots)
		tallest = max(tallest, slices.Max(shares[i]))
	}
	yTicks, yMax := yAxis(tallest)
	p.frame(&chart, a, "share of its requests", yTicks, yMax, "%")

	slot := p.width / overlaySlots
	// The slot's edges in µs, for the bars' titles.
	edge := func(j int) float64 {
		f := float64(j) / overlaySlots
		if a.log {
			return math.Exp(math.Log(a.lo) + f*(math.Log(a.hi)-math.Log(a.lo)))
		}
		return a.lo + f*(a.hi-a.lo)
	}
	figure := htmlFigure{Title: "CPU per request: each target's distribution"}
	for i, s := range series {
		// An outline around each run of slots the target has requests in.
		var outline strings.Builder
		for j, share := range shares[i] {
			left, right := whole(p.left+float64(j)*slot), whole(p.left+float64(j+1)*slot)
			if share <= 0 {
				if j > 0 && shares[i][j-1] > 0 {
					fmt.Fprintf(&outline, " V%s", whole(p.bottom()))
				}
				continue
			}
			top := p.bottom() - scaled(share, yMax, p.height)
			if j == 0 || shares[i][j-1] <= 0 {
				fmt.Fprintf(&outline, " M%s %s", left, whole(p.bottom()))
			}
			fmt.Fprintf(&outline, " V%s H%s", whole(top), right)
			chart.Bars = append(chart.Bars, htmlBar{
				Class: "share", X: px(p.left + float64(j)*slot), Y: px(top),
				W: px(slot), H: px(p.bottom() - top), Color: s.Color, Opacity: overlayOpacity,
				Series: i, Share: strconv.FormatFloat(share, 'f', 2, 64),
				Title: fmt.Sprintf("%s: %s to %s µs: %.1f%% of its requests", s.Name, tenths(edge(j)), tenths(edge(j+1)), share),
			})
		}
		if last := shares[i][len(shares[i])-1]; last > 0 {
			fmt.Fprintf(&outline, " V%s", whole(p.bottom()))
		}
		chart.Paths = append(chart.Paths, htmlPath{Class: "outline", D: strings.TrimSpace(outline.String()), Color: s.Color, Series: i})
		figure.Legend = append(figure.Legend, htmlLegend{Name: s.Name, Color: s.Color})
	}
	figure.Chart = chart
	return figure
}

// slotShares spreads h's counts over n equal slots of axis a, each
// bucket's evenly over the part of the axis it spans, as percentages of
// its requests: buckets of different histograms then compare slot by
// slot.
func slotShares(h Histogram, a axis, n int) []float64 {
	shares := make([]float64, n)
	var total int
	for _, c := range h.Counts {
		total += c
	}
	if total == 0 {
		return shares
	}
	for i, c := range h.Counts {
		if c == 0 {
			continue
		}
		from, to := a.pos(h.EdgesUs[i])*float64(n), a.pos(h.EdgesUs[i+1])*float64(n)
		share := 100 * float64(c) / float64(total)
		if to-from <= 1e-9 {
			// A bucket of no width on the axis: all of it in one slot.
			shares[min(n-1, max(0, int(from)))] += share
			continue
		}
		for j := max(0, int(from)); j < n && float64(j) < to; j++ {
			overlap := min(to, float64(j+1)) - max(from, float64(j))
			if overlap > 0 {
				shares[j] += share * overlap / (to - from)
			}
		}
	}
	return shares
}

// whole formats a coordinate as a whole pixel, so that outlines are drawn
// crisp.
func whole(x float64) string { return strconv.FormatFloat(math.Round(x), 'f', 0, 64) }
