package report

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/reqprof/reqprof/profile"
)

// WriteHTML writes s as a page that needs nothing but itself, to be opened
// from a file or mailed: its style is inline, its charts are SVG drawn
// here, and its one script, inline too, only lays flame graphs out at the
// page's width and zooms them (flameScript), when there are any. It shows the comparison table (of
// s.Comparison, as Summarize, Combine or the caller set it), a bar per
// target of its mean CPU per request split into user time and kinds of
// kernel time, the targets' CPU histograms (overlaid on one axis when
// there are several), each target's distributions, kernel costs, routes,
// the CPU seen with where its unattributed part went, and its threads'
// waits, then reqprof's own cost and the run-to-run spread when s has
// them. Every text from outside, such as comm, thread names, labels,
// routes or warnings, is escaped.
func WriteHTML(w io.Writer, s Summary) error {
	page, err := newHTMLPage(s)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, page); err != nil {
		return fmt.Errorf("report: rendering HTML: %w", err)
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("report: writing HTML: %w", err)
	}
	return nil
}

// partColors fill the parts of the CPU bars, in the order their names
// first appear, and histogramColor the histogram's bars, which must not be
// mistaken for a part.
var partColors = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#edc948", "#b07aa1"}

const histogramColor = "#59a14f"

// cpuPart is one stacked part of a target's mean CPU per request.
type cpuPart struct {
	Name string
	Us   float64
}

// cpuParts splits t's mean CPU per request into the parts its bar stacks:
// user time, and kernel time by kind of cause where the summary has its
// causes. Means add up where percentiles do not, so the parts make up the
// whole to within rounding. Parts of no time are left out.
func cpuParts(t TargetSummary) []cpuPart {
	parts := []cpuPart{{"user", t.UserUs.Mean}}
	if t.KernelBreakdownUs == nil {
		parts = append(parts, cpuPart{"kernel", t.KernelUs.Mean})
	} else {
		kinds := []cpuPart{{"syscalls", 0}, {"softirq", 0}, {"irq", 0}, {"other kernel", 0}}
		// In order of cause, so that the sums come out the same every time.
		for _, cause := range slices.Sorted(maps.Keys(t.KernelBreakdownUs)) {
			kind := &kinds[3]
			switch profile.ParseCause(cause).Kind {
			case profile.CauseSyscall:
				kind = &kinds[0]
			case profile.CauseSoftirq:
				kind = &kinds[1]
			case profile.CauseIRQ:
				kind = &kinds[2]
			}
			kind.Us += t.KernelBreakdownUs[cause]
		}
		parts = append(parts, kinds...)
	}
	return slices.DeleteFunc(parts, func(p cpuPart) bool { return p.Us <= 0 })
}

type htmlPage struct {
	Title      string
	Facts      []string
	Warnings   []string
	TableTitle string
	Header     []string
	Rows       [][]string
	Legend     []htmlLegend
	Split      htmlChart
	// Distributions overlays the targets' histograms, when there are
	// several targets; else the target has its own.
	Distributions *htmlFigure
	Targets       []htmlTarget
	// Differentials are flame graphs of targets' stack samples against
	// the first target's.
	Differentials []htmlFlame
	// OverheadTitle heads what reqprof itself cost, Overhead's lines.
	OverheadTitle string
	Overhead      []string
	Spread        *htmlTable
	// Script lays flame graphs out and zooms them; empty on a page
	// without any.
	Script template.JS
}

type htmlTable struct {
	Title  string
	Header []string
	Rows   [][]string
	Notes  []string // said under the table, a paragraph each
}

type htmlLegend struct{ Name, Color string }

type htmlChart struct {
	Width, Height int
	Class         string
	Lines         []htmlLine // under the data: grid lines
	Bars          []htmlBar
	Paths         []htmlPath
	Axes          []htmlLine // over the data: axes and their ticks
	Texts         []htmlText
}

type htmlBar struct {
	Class, X, Y, W, H, Color, Title string
	Opacity                         string // of its fill; "" for opaque
	Count                           int    // one target's histogram bars only
	Series                          int    // overlaid histogram bars: the target's index among those drawn
	Share                           string // overlaid histogram bars: % of the target's requests
}

type htmlLine struct {
	Class, X1, Y1, X2, Y2 string
}

type htmlPath struct {
	Class, D, Color string
	Series          int
}

type htmlText struct {
	Class, X, Y, Anchor, Text string
	Transform                 string // "" for none
}

type htmlTarget struct {
	Name, Process, About string
	Sample               string // says the percentiles and histogram come from a sample, when they do
	Tables               []htmlTable
	SelfCost             string
	CPUSeen              []string
	Setup                string
	Sources              *htmlTable
	Waits                string
	Histogram            *htmlFigure
	NoHistogram          string // why there is none
	// Stacks: what the stack samples rest on, a flame graph per route,
	// and notes on frames left as addresses.
	StacksTitle string
	Flames      []htmlFlame
	StackNotes  []string
}

// Sizes of the charts, in CSS pixels.
const (
	chartWidth      = 760
	splitLabelWidth = 190
	splitBarWidth   = 380
	splitRowHeight  = 30
)

func newHTMLPage(s Summary) (htmlPage, error) {
	header, rows, err := comparisonCells(s.Targets, s.Comparison)
	if err != nil {
		return htmlPage{}, err
	}
	page := htmlPage{
		Title:      "reqprof: CPU per request",
		Warnings:   append(slices.Clone(s.Warnings), comparisonWarnings(s.Targets)...),
		TableTitle: comparisonTitle(s.Targets, s.Comparison),
		Header:     header,
		Rows:       rows,
	}
	page.Split, page.Legend = splitChart(s.Targets)
	for _, fact := range []struct{ name, value string }{
		{"started", s.StartedAt}, {"host", s.Host}, {"kernel", s.Kernel}, {"reqprof", buildName(s)},
	} {
		if fact.value != "" {
			page.Facts = append(page.Facts, fact.name+" "+fact.value)
		}
	}
	if s.DurationS > 0 {
		page.Facts = append(page.Facts, "window "+tenths(s.DurationS)+" s")
	}
	names := columnNames(s.Targets)
	overlaid := len(s.Targets) > 1
	var series []histSeries
	var undrawn []string
	for i, t := range s.Targets {
		ht := htmlTarget{
			Name:    names[i],
			Process: fmt.Sprintf("pid %d (%s)", t.PID, t.Comm),
			About: fmt.Sprintf("%s %s, %s req/s", groupDigits(strconv.Itoa(t.Requests)),
				plural(t.Requests, "finished request", "finished requests"), tenths(t.RequestsPerS)),
			Sample:   sampleNote(t, "percentiles and the histogram"),
			SelfCost: selfCostLine(t, s.Overhead, s.DurationS),
			CPUSeen:  cpuSeenLines(t),
			Waits:    waitsLine(t),
		}
		if t.TimeSplitUs == nil {
			ht.Setup = setupLine(t)
		}
		if t.Requests > 0 {
			header, rows := distCells(t)
			ht.Tables = append(ht.Tables, htmlTable{Title: distTitle, Header: header, Rows: rows, Notes: trimmed(timeSplit(t))})
		}
		if header, rows := kernelCostCells(t, false); rows != nil {
			ht.Tables = append(ht.Tables, htmlTable{Title: kernelCostTitle(s.SyscallEntryNs), Header: header, Rows: rows})
		}
		if header, rows := routeCells(t); rows != nil {
			ht.Tables = append(ht.Tables, htmlTable{Title: routesTitle, Header: header, Rows: rows})
		}
		if header, rows := sourceCells(t); rows != nil {
			ht.Sources = &htmlTable{Title: sourcesTitle, Header: header, Rows: rows}
		}
		if t.Stacks != nil {
			ht.StacksTitle = stacksTitle(t.Stacks, ownTakenOut(t))
			if t.Stacks.Samples == 0 {
				ht.StacksTitle = noStackSamples
			}
			ht.Flames = routeFlames(t.Stacks)
			var notes bytes.Buffer
			writeStackNotes(&notes, t.Stacks)
			ht.StackNotes = strings.Split(strings.TrimSpace(notes.String()), "\n")
			if notes.Len() == 0 {
				ht.StackNotes = nil
			}
		}
		switch {
		case t.CPUHistogram != nil && overlaid:
			series = append(series, histSeries{Name: describe(t), Color: seriesColors[len(series)%len(seriesColors)], Hist: *t.CPUHistogram})
		case t.CPUHistogram != nil:
			figure := histogramFigure(*t.CPUHistogram, t.SampledRequests != nil)
			ht.Histogram = &figure
		case overlaid:
			undrawn = append(undrawn, describe(t)+": "+noHistogram(t))
		default:
			ht.NoHistogram = noHistogram(t)
		}
		page.Targets = append(page.Targets, ht)
	}
	if overlaid {
		figure := htmlFigure{Title: "CPU per request: each target's distribution"}
		if len(series) > 0 {
			figure = overlayFigure(series)
		}
		figure.Notes = undrawn
		page.Distributions = &figure
	}
	page.Differentials = differentialFlames(s.Targets, names)
	if len(page.Differentials) > 0 || slices.ContainsFunc(page.Targets, func(t htmlTarget) bool { return len(t.Flames) > 0 }) {
		page.Script = flameScript
	}
	if s.Overhead != nil {
		lines := overheadLines(s.Overhead, s.DurationS)
		page.OverheadTitle = strings.TrimSuffix(lines[0], ":")
		for _, line := range lines[1:] {
			page.Overhead = append(page.Overhead, strings.TrimSpace(line))
		}
		if w := otherReqprofsWarning(s.Overhead); w != "" {
			page.Warnings = append(page.Warnings, w)
		}
	}
	if len(s.Spread) > 0 {
		header, rows := spreadCells(s.Spread)
		page.Spread = &htmlTable{Title: spreadTitle, Header: header, Rows: rows}
	}
	return page, nil
}

// trimmed is lines without the spaces that indent them on a terminal.
func trimmed(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimSpace(l)
	}
	return out
}

// noHistogram says why t has no histogram to draw.
func noHistogram(t TargetSummary) string {
	switch {
	case t.Requests == 0:
		return "No finished requests to draw."
	case !percentilesKnown(t.SampledRequests):
		return "No histogram: the sample holds no request."
	}
	return "No histogram: the summary was written by a reqprof that made none."
}

// splitChart draws a bar per target of its mean CPU per request, parts
// stacked, all to one scale so that the bars compare, and its legend. A part
// has the same colour in every bar, even where targets are split in
// different parts.
func splitChart(targets []TargetSummary) (htmlChart, []htmlLegend) {
	chart := htmlChart{Width: chartWidth, Height: max(1, len(targets)) * splitRowHeight}
	var legend []htmlLegend
	colors := map[string]string{}
	// The longest bar, as drawn: a summary read from a file can have
	// parts that add up to more than its mean CPU.
	names := columnNames(targets)
	var longest float64
	for _, t := range targets {
		if t.Requests > 0 {
			var sum float64
			for _, p := range cpuParts(t) {
				sum += p.Us
			}
			longest = max(longest, sum)
		}
	}
	for i, t := range targets {
		top := float64(i * splitRowHeight)
		middle := px(top + splitRowHeight/2 + 4)
		// Combined runs can have a label many times: the PID tells them apart.
		chart.Texts = append(chart.Texts, htmlText{X: "0", Y: middle, Anchor: "start", Text: shorten(describe(t), 28)})
		if t.Requests == 0 {
			chart.Texts = append(chart.Texts, htmlText{X: px(splitLabelWidth), Y: middle, Anchor: "start", Text: "no finished requests"})
			continue
		}
		x := float64(splitLabelWidth)
		for _, p := range cpuParts(t) {
			if _, seen := colors[p.Name]; !seen {
				colors[p.Name] = partColors[len(legend)%len(partColors)]
				legend = append(legend, htmlLegend{p.Name, colors[p.Name]})
			}
			width := scaled(p.Us, longest, splitBarWidth)
			chart.Bars = append(chart.Bars, htmlBar{
				Class: "part", X: px(x), Y: px(top + 5), W: px(width), H: px(splitRowHeight - 10),
				Color: colors[p.Name],
				Title: fmt.Sprintf("%s: %s µs %s", names[i], tenths(p.Us), p.Name),
			})
			x += width
		}
		chart.Texts = append(chart.Texts, htmlText{X: px(x + 6), Y: middle, Anchor: "start", Text: tenths(t.CPUUs.Mean) + " µs"})
	}
	return chart, legend
}

// scaled is value's length on a scale where full is length, or 0 for
// nothing to scale by.
func scaled(value, full, length float64) float64 {
	if full <= 0 || value <= 0 {
		return 0
	}
	return value / full * length
}

// px formats a coordinate with one decimal, enough for any screen and the
// same on every machine.
func px(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }

// shorten cuts s to at most n runes, so a long label cannot run into the
// bars; the part's title still has it whole.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; } h3 { font-size: 14px; margin-bottom: 2px; }
h4 { font-size: 13px; font-weight: normal; color: #555; margin: 12px 0 4px; }
.facts, .about, .note { color: #555; }
.warning { color: #a40000; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 3px 8px; white-space: nowrap; }
td:not(:first-child), th:not(:first-child) { text-align: right; }
th { background: #f3f3f3; }
svg text { font: 12px system-ui, sans-serif; fill: #222; }
svg text.tick { fill: #555; }
svg line.axis, svg line.tick { stroke: #555; }
svg line.grid { stroke: #e4e4e4; }
svg.flame { display: block; }
svg.flame text.frame { font-size: 11px; fill: #111; pointer-events: none; }
svg.flame text.on-dark { fill: #fff; }
svg.flame g.frame { cursor: pointer; }
svg.flame rect.frame:hover { stroke: #000; stroke-width: 1; }
svg.flame g.caller rect { fill-opacity: 0.5; }
.flame-bar { margin: 4px 0 12px; min-height: 1.5em; }
.flame-details { font: 12px ui-monospace, monospace; color: #333; }
.legend span { display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 12px; vertical-align: middle; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{if .Facts}}<p class="facts">{{range $i, $f := .Facts}}{{if $i}} · {{end}}{{$f}}{{end}}</p>{{end}}
{{range .Warnings}}<p class="warning">WARNING: {{.}}</p>
{{end}}
<h2>{{.TableTitle}}</h2>
{{template "table" .}}
<h2>Mean CPU per request</h2>
<p class="legend">{{range .Legend}}<span style="background: {{.Color}}"></span>{{.Name}}{{end}}</p>
{{template "chart" .Split}}
{{with .Distributions}}<section class="figure">
<h2 class="chart-title">{{.Title}}</h2>
{{template "figure" .}}
</section>
{{end}}
{{range .Targets}}
<section class="target">
<h3>{{.Name}}</h3>
<p class="about">{{.Process}}: {{.About}}</p>
{{with .Sample}}<p class="about">{{.}}</p>
{{end}}{{range .Tables}}<h4>{{.Title}}</h4>
{{template "table" .}}
{{range .Notes}}<p class="time-split">{{.}}</p>
{{end}}{{end}}{{with .SelfCost}}<p class="self-cost">{{.}}</p>
{{end}}{{range .CPUSeen}}<p class="cpu-seen">{{.}}</p>
{{end}}{{with .Sources}}<h4>{{.Title}}</h4>
{{template "table" .}}
{{end}}{{with .Setup}}<p class="setup">{{.}}</p>
{{end}}{{with .Waits}}<p class="waits">{{.}}</p>
{{end}}{{with .Histogram}}<h4 class="chart-title">{{.Title}}</h4>
{{template "figure" .}}
{{else}}{{with .NoHistogram}}<p>{{.}}</p>
{{end}}{{end}}{{with .StacksTitle}}<h4 class="stacks-title">{{.}}</h4>
{{end}}{{range .Flames}}<section class="flame">
<h4 class="chart-title">{{.Title}}</h4>
{{template "flame" .Chart}}
{{with .Note}}<p class="note">{{.}}</p>
{{end}}{{with .Table}}{{template "table" .}}
{{end}}</section>
{{end}}{{range .StackNotes}}<p class="note">{{.}}</p>
{{end}}</section>
{{end}}
{{range .Differentials}}<section class="differential">
<h2 class="chart-title">Differential flame graph</h2>
<p>{{.Title}}</p>
{{template "flame" .Chart}}
</section>
{{end}}
{{with .OverheadTitle}}<h2>{{.}}</h2>
{{end}}{{range .Overhead}}<p class="overhead">{{.}}</p>
{{end}}
{{with .Spread}}<h2>{{.Title}}</h2>
{{template "table" .}}{{end}}
{{with .Script}}<script>{{.}}</script>
{{end}}</body>
</html>
{{define "table"}}<table>
<tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>{{end}}
{{define "figure"}}{{if .Legend}}<p class="legend">{{range .Legend}}<span style="background: {{.Color}}"></span>{{.Name}}{{end}}</p>
{{end}}{{if .Chart.Width}}{{template "chart" .Chart}}
{{end}}{{range .Notes}}<p class="note">{{.}}</p>
{{end}}{{end}}
{{define "flame"}}<svg xmlns="http://www.w3.org/2000/svg" class="flame" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" data-samples="{{.Samples}}">
{{range .Frames}}<g class="frame" data-from="{{.From}}" data-samples="{{.Samples}}" data-depth="{{.Depth}}"><rect class="frame" x="{{.X}}" y="{{.Y}}" width="{{.BoxW}}" height="{{.H}}" fill="{{.Color}}"><title>{{.Title}}</title></rect><text class="frame{{if .Dark}} on-dark{{end}}" x="{{.TX}}" y="{{.TY}}" data-label="{{.Label}}">{{.Fit}}</text></g>
{{end}}</svg>{{end}}
{{define "chart"}}<svg xmlns="http://www.w3.org/2000/svg"{{with .Class}} class="{{.}}"{{end}} width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}">
{{range .Lines}}<line class="{{.Class}}" x1="{{.X1}}" y1="{{.Y1}}" x2="{{.X2}}" y2="{{.Y2}}"/>
{{end}}{{range .Bars}}<rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="{{.Color}}"{{with .Opacity}} fill-opacity="{{.}}"{{end}}{{if eq .Class "bin"}} data-count="{{.Count}}"{{end}}{{if eq .Class "share"}} data-series="{{.Series}}" data-share="{{.Share}}"{{end}}><title>{{.Title}}</title></rect>
{{end}}{{range .Paths}}<path class="{{.Class}}" d="{{.D}}" fill="none" stroke="{{.Color}}" stroke-width="2" data-series="{{.Series}}"/>
{{end}}{{range .Axes}}<line class="{{.Class}}" x1="{{.X1}}" y1="{{.Y1}}" x2="{{.X2}}" y2="{{.Y2}}"/>
{{end}}{{range .Texts}}<text{{with .Class}} class="{{.}}"{{end}} x="{{.X}}" y="{{.Y}}" text-anchor="{{.Anchor}}"{{with .Transform}} transform="{{.}}"{{end}}>{{.Text}}</text>
{{end}}</svg>{{end}}
`))
