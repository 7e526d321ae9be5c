package report

import (
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/reqprof/reqprof/profile"
)

// Flame graphs are drawn here as SVG, like every chart of the page: a
// frame is a box as wide as its share of the samples, its callees on top
// of it, the route at the bottom. Each box carries where it lies as
// fractions of its graph (data-x, data-w) and its level (data-d), and its
// label its whole name (data-label): the page's script (flameScript)
// lays every graph out again at the page's width, says a box's name and
// share under the graph as the pointer rests on it, and zooms into a box
// on a click (the bottom box, an ancestor or Esc zooms back out). Without
// the script, the graphs are drawn at flameWidth and each box's tooltip
// (a <title>) says what it is. Boxes narrower than flameMinWidth are left
// out, their samples still in their callers' width, as flamegraph.pl
// leaves them out.

// Sizes of flame graphs, in CSS pixels.
const (
	// The width a graph is drawn at without the script; with it, the
	// page's.
	flameWidth     = 1200
	flameRowHeight = 16
	// Boxes narrower than this at flameWidth are not drawn: a zoom into
	// a box 1/1000 of the graph still shows its callees of a tenth of it.
	flameMinWidth = 0.1
	// Deeper frames are not drawn: a runaway recursion would make the
	// chart as tall as its stack.
	flameMaxDepth = 80
	// About how wide a character of a box's label is.
	flameCharWidth = 7
	// At most this many routes of a target get a flame graph, and this
	// many targets a differential one against the first.
	maxFlameRoutes       = 6
	maxDifferentialFlame = 3
)

// Colours of flame graph boxes: the route at the root, user frames in warm
// colours and kernel frames in cool ones, each function always the same.
const flameRootColor = "#9e9e9e"

var (
	flameUserColors   = []string{"#e8743b", "#f0a33a", "#e35d3d", "#f3c34b", "#d9512c", "#eb8f45"}
	flameKernelColors = []string{"#5fa8c9", "#7bbfcf", "#4f8fb3"}
	// Differential: from a share that fell most to one that grew most.
	flameFell  = []string{"#c6dbef", "#9ecae1", "#6baed6", "#3182bd", "#08519c"}
	flameGrew  = []string{"#fcbba1", "#fc9272", "#fb6a4a", "#de2d26", "#a50f15"}
	flameEqual = "#e6e6e6"
)

// flameNode is a frame of a flame graph: the samples with it at this place
// of the stack, and its callees.
type flameNode struct {
	name     string
	kernel   bool
	samples  uint64
	children map[string]*flameNode
}

func newFlameNode(name string, kernel bool) *flameNode {
	return &flameNode{name: name, kernel: kernel, children: map[string]*flameNode{}}
}

// add counts samples of a stack, frames root first, below n.
func (n *flameNode) add(frames []string, samples uint64) {
	n.samples += samples
	node := n
	for _, f := range frames {
		name, kernel := strings.CutSuffix(f, kernelFrameSuffix)
		child := node.children[f]
		if child == nil {
			child = newFlameNode(name, kernel)
			node.children[f] = child
		}
		child.samples += samples
		node = child
	}
}

// find is the node at path below n, nil when there is none.
func (n *flameNode) find(path []string) *flameNode {
	node := n
	for _, f := range path {
		if node = node.children[f]; node == nil {
			return nil
		}
	}
	return node
}

// sortedChildren are n's callees by name, as flame graphs lay them out, so
// that the same stacks are in the same place in every graph.
func (n *flameNode) sortedChildren() []string {
	return slices.SortedFunc(maps.Keys(n.children), strings.Compare)
}

// flameTree is a route's samples as a tree whose root is the route.
func flameTree(route string, folded []FoldedStack) *flameNode {
	root := newFlameNode(route, false)
	for _, f := range folded {
		if f.Route == route {
			root.add(f.Frames, f.Samples)
		}
	}
	return root
}

// htmlFlameChart is a flame graph as the page draws it: its size at
// flameWidth, the samples its root holds, and its boxes.
type htmlFlameChart struct {
	Width, Height int
	Samples       uint64
	Frames        []htmlFrame
}

// htmlFrame is one box of a flame graph: for the script, where it lies
// (the samples before it at its level, From, and its own, Samples) and
// its level from the root (Depth); its box and label at flameWidth; its
// colour and tooltip; and its whole label, which the script fits to the
// box's width as Fit fits it to flameWidth.
type htmlFrame struct {
	From, Samples            uint64
	Depth                    int
	X, Y, BoxW, H, TX, TY    string
	Color, Title, Label, Fit string
	// Dark: its fill is dark enough that its label is drawn light.
	Dark bool
}

// flameChart draws a tree as a flame graph: each box's colour from
// colorOf, and its tooltip its name and what says of it. A box is given by
// its path of frames from the root, and its node. The boxes of the first
// routeLevels levels are routes, labelled whole; the others functions,
// labelled without their import path.
func flameChart(root *flameNode, routeLevels int, colorOf, what func(path []string, n *flameNode) string) htmlFlameChart {
	if root.samples == 0 {
		return htmlFlameChart{Width: flameWidth, Height: flameRowHeight}
	}
	scale := float64(flameWidth) / float64(root.samples)
	depth := min(flameDepth(root, scale), flameMaxDepth)
	chart := htmlFlameChart{Width: flameWidth, Height: (depth + 1) * flameRowHeight, Samples: root.samples}
	var draw func(n *flameNode, path []string, before uint64, level int)
	draw = func(n *flameNode, path []string, before uint64, level int) {
		w := float64(n.samples) * scale
		if w < flameMinWidth || level > flameMaxDepth {
			return
		}
		x := float64(before) * scale
		y := float64(chart.Height - (level+1)*flameRowHeight)
		title := n.name
		if n.kernel {
			title += " (kernel)"
		}
		label := n.name
		if level >= routeLevels {
			label = shortFunction(n.name)
		}
		color := colorOf(path, n)
		chart.Frames = append(chart.Frames, htmlFrame{
			From: before, Samples: n.samples, Depth: level,
			X: px(x), Y: px(y), BoxW: px(max(w-0.5, 0.1)), H: px(flameRowHeight - 1),
			TX: px(x + 3), TY: px(y + flameRowHeight - 4),
			Color: color, Title: title + ": " + what(path, n), Label: label, Fit: flameLabel(label, w), Dark: darkColor(color),
		})
		for _, key := range n.sortedChildren() {
			child := n.children[key]
			draw(child, append(path, key), before, level+1)
			before += child.samples
		}
	}
	draw(root, nil, 0, 0)
	return chart
}

// flameDepth is how many levels above n are drawn at scale: boxes too
// narrow to draw take no height.
func flameDepth(n *flameNode, scale float64) int {
	deepest := 0
	for _, c := range n.children {
		if float64(c.samples)*scale >= flameMinWidth {
			deepest = max(deepest, 1+flameDepth(c, scale))
		}
	}
	return deepest
}

// flameLabel is as much of a box's label as fits in it, "" when too
// little would; the page's script fits it the same way (flameScript).
func flameLabel(label string, width float64) string {
	fits := int((width - 6) / flameCharWidth)
	if fits < 3 {
		return ""
	}
	if r := []rune(label); len(r) > fits {
		return string(r[:fits-1]) + "…"
	}
	return label
}

// darkColor says whether a "#rrggbb" fill is too dark for dark text: its
// relative luminance (sRGB, as WCAG reckons it) under 0.15, where black
// text falls under a contrast of 4:1. Of the flame graphs' colours, only
// the differential's darkest red and blue are.
func darkColor(hex string) bool {
	if len(hex) != 7 || hex[0] != '#' {
		return false
	}
	v, err := strconv.ParseUint(hex[1:], 16, 32)
	if err != nil {
		return false
	}
	linear := func(c uint64) float64 {
		x := float64(c) / 255
		if x <= 0.04045 {
			return x / 12.92
		}
		return math.Pow((x+0.055)/1.055, 2.4)
	}
	return 0.2126*linear(v>>16&0xff)+0.7152*linear(v>>8&0xff)+0.0722*linear(v&0xff) < 0.15
}

// frameColor is a function's colour, the same wherever it is drawn.
func frameColor(path []string, n *flameNode) string {
	if len(path) == 0 {
		return flameRootColor
	}
	h := fnv.New32a()
	h.Write([]byte(n.name))
	palette := flameUserColors
	if n.kernel {
		palette = flameKernelColors
	}
	return palette[h.Sum32()%uint32(len(palette))]
}

// htmlFlame is one flame graph of the page, with the table of its
// route's hottest functions.
type htmlFlame struct {
	Title string
	Note  string
	Chart htmlFlameChart
	Table *htmlTable
}

// routeFlames are a target's flame graphs: one per route with samples, its
// first maxFlameRoutes, then the samples of no finished request.
func routeFlames(st *StacksSummary) []htmlFlame {
	if st == nil || len(st.Folded) == 0 {
		return nil
	}
	var flames []htmlFlame
	routes := 0
	for _, r := range st.Routes {
		if r.CPUUsPerRequest != nil {
			if routes == maxFlameRoutes {
				continue
			}
			routes++
		}
		root := flameTree(r.Route, st.Folded)
		if root.samples == 0 {
			continue
		}
		total := r.Samples
		what := func(_ []string, n *flameNode) string {
			samples := n.samples
			share := float64(samples) / float64(total)
			if r.CPUUsPerRequest != nil {
				return fmt.Sprintf("%s µs per request, %.1f%% of the route's samples (%d)", tenths(share**r.CPUUsPerRequest), 100*share, samples)
			}
			return fmt.Sprintf("%s ms of CPU, %.1f%% of these samples (%d)", tenths(share**r.CPUMs), 100*share, samples)
		}
		header, rows := hotFunctionCells(r)
		flame := htmlFlame{
			Title: routeStacksLine(r), Chart: flameChart(root, 1, frameColor, what),
			Table: &htmlTable{Title: "hottest functions", Header: header, Rows: rows},
		}
		if root.samples < total {
			flame.Note = fmt.Sprintf("%d of its %d samples are in stacks past the %d kept for the page.", total-root.samples, total, maxFoldedStacks)
		}
		flames = append(flames, flame)
	}
	return flames
}

// differentialFlame draws the samples of target against those of base: the
// shape is target's (each box as wide as its share of target's samples),
// the colour says how that share changed from base's: red where it grew,
// blue where it fell, in five steps each up to the largest change. Only
// samples of finished requests are drawn, each route a box above the root,
// so targets under different loads compare by shares. A stack base has and
// target has not is not drawn: its width would be 0.
func differentialFlame(baseName string, base *StacksSummary, name string, target *StacksSummary) (htmlFlame, bool) {
	after, before := requestsTree(target), requestsTree(base)
	if after.samples == 0 || before.samples == 0 {
		return htmlFlame{}, false
	}
	shareAfter := func(n *flameNode) float64 { return float64(n.samples) / float64(after.samples) }
	shareBefore := func(path []string) float64 {
		if n := before.find(path); n != nil {
			return float64(n.samples) / float64(before.samples)
		}
		return 0
	}
	// The largest change of a box drawn, for the scale of colours.
	var largest float64
	var walk func(n *flameNode, path []string)
	walk = func(n *flameNode, path []string) {
		if float64(n.samples)/float64(after.samples)*flameWidth < flameMinWidth {
			return
		}
		largest = max(largest, abs(shareAfter(n)-shareBefore(path)))
		for key, c := range n.children {
			walk(c, append(path, key))
		}
	}
	walk(after, nil)
	colorOf := func(path []string, n *flameNode) string {
		return diffColor(shareAfter(n)-shareBefore(path), largest)
	}
	what := func(path []string, n *flameNode) string {
		return fmt.Sprintf("%.1f%% of %s's samples (%d), %.1f%% of %s's", 100*shareAfter(n), name, n.samples, 100*shareBefore(path), baseName)
	}
	return htmlFlame{
		Title: fmt.Sprintf("%s against %s: widths are %s's shares of its samples of finished requests; red grew, blue fell, from %s's (up to %.1f points)",
			name, baseName, name, baseName, 100*largest),
		Chart: flameChart(after, 2, colorOf, what),
	}, true
}

// requestsTree is a target's samples of finished requests as one tree,
// each route a callee of the root.
func requestsTree(st *StacksSummary) *flameNode {
	root := newFlameNode("all requests", false)
	for _, f := range st.Folded {
		if f.Route == profile.BetweenRequests || f.Route == profile.UnfinishedRequest {
			continue
		}
		root.add(append([]string{f.Route}, f.Frames...), f.Samples)
	}
	return root
}

// diffColor is the colour of a change of share, on a scale whose end is
// largest.
func diffColor(change, largest float64) string {
	if largest <= 0 || abs(change) < 0.001 {
		return flameEqual
	}
	step := min(int(abs(change)/largest*float64(len(flameGrew))), len(flameGrew)-1)
	if change > 0 {
		return flameGrew[step]
	}
	return flameFell[step]
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// differentialFlames are the page's differential flame graphs: each
// target with samples against the first one with them, at most
// maxDifferentialFlame.
func differentialFlames(targets []TargetSummary, names []string) []htmlFlame {
	base := -1
	var flames []htmlFlame
	for i, t := range targets {
		if t.Stacks == nil || len(t.Stacks.Folded) == 0 {
			continue
		}
		if base < 0 {
			base = i
			continue
		}
		if len(flames) == maxDifferentialFlame {
			break
		}
		if f, ok := differentialFlame(names[base], targets[base].Stacks, names[i], t.Stacks); ok {
			flames = append(flames, f)
		}
	}
	return flames
}
