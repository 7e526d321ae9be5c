package live

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// DefaultTopRoutes is how many of a target's routes the view shows, the
// busiest of the last interval first.
const DefaultTopRoutes = 5

// Frame is one refresh of the live view: what each target finished over
// the last interval.
type Frame struct {
	Elapsed  time.Duration // since the window opened
	Duration time.Duration // the window's length; 0 until stopped
	Interval time.Duration // what the rates and figures are over
	Targets  []FrameTarget
}

// FrameTarget is one target's rows: all its requests, then its busiest
// routes.
type FrameTarget struct {
	Name   string
	Lost   uint64 // events lost so far in the window
	All    Row
	Routes []Row
}

// Row is the figures of a set of requests over the interval.
type Row struct {
	Route     string
	PerSecond float64
	// Per request, in µs: CPU's mean and 99th percentile, and the
	// means of user and kernel time. 0 when none finished.
	MeanUs, P99Us, UserUs, KernelUs float64
}

// FrameOf is the frame of what delta counted over interval; lost[i] is the
// events lost by delta's target i so far.
func FrameOf(delta Snapshot, interval, elapsed, duration time.Duration, lost []uint64, topRoutes int) Frame {
	f := Frame{Elapsed: elapsed, Duration: duration, Interval: interval}
	for i, ts := range delta.Targets {
		ft := FrameTarget{Name: ts.Name, All: rowOf("", ts.Total, interval)}
		if i < len(lost) {
			ft.Lost = lost[i]
		}
		routes := slices.Clone(ts.Routes)
		slices.SortStableFunc(routes, func(a, b RouteSnapshot) int {
			return cmp.Or(cmp.Compare(b.Counts.Requests, a.Counts.Requests), cmp.Compare(a.Route, b.Route))
		})
		for _, r := range routes {
			if len(ft.Routes) == topRoutes || r.Counts.Requests == 0 {
				break
			}
			ft.Routes = append(ft.Routes, rowOf(r.Route, r, interval))
		}
		f.Targets = append(f.Targets, ft)
	}
	return f
}

func rowOf(route string, r RouteSnapshot, interval time.Duration) Row {
	row := Row{Route: route}
	if interval > 0 {
		row.PerSecond = float64(r.Counts.Requests) / interval.Seconds()
	}
	if n := float64(r.Counts.Requests); n > 0 {
		row.MeanUs = float64(r.Counts.CPUNs) / n / 1e3
		row.UserUs = float64(r.Counts.UserNs) / n / 1e3
		row.KernelUs = float64(r.Counts.KernelNs) / n / 1e3
		row.P99Us = r.CPU.Quantile(0.99) / 1e3
	}
	return row
}

// heading is the frame's first line: where the window is.
func (f Frame) heading() string {
	s := "reqprof: " + seconds(f.Elapsed)
	if f.Duration > 0 {
		s += " of " + seconds(f.Duration) + ", " + seconds(max(0, f.Duration-f.Elapsed)) + " left"
	} else {
		s += ", until Ctrl-C"
	}
	return s + "; per request over the last " + seconds(f.Interval)
}

func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 0, 64) + " s"
}

// Table is the frame as a table, for a terminal.
func (f Frame) Table() string {
	var b strings.Builder
	b.WriteString(f.heading() + "\n")
	cols := []string{"target", "route", "req/s", "cpu µs", "p99 µs", "user µs", "kernel µs", "lost"}
	rows := [][]string{cols}
	for _, t := range f.Targets {
		rows = append(rows, append([]string{clip(t.Name, 20)}, t.All.cells("(all)")...))
		rows[len(rows)-1] = append(rows[len(rows)-1], thousands(float64(t.Lost), 0))
		for _, r := range t.Routes {
			rows = append(rows, append(append([]string{""}, r.cells(clip(r.Route, 32))...), ""))
		}
	}
	widths := make([]int, len(cols))
	for _, row := range rows {
		for i, cell := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	for _, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i > 0 {
				line.WriteString("  ")
			}
			if i < 2 { // names left, figures right
				line.WriteString(cell + pad)
			} else {
				line.WriteString(pad + cell)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
	return b.String()
}

func (r Row) cells(name string) []string {
	if r.PerSecond == 0 {
		return []string{name, "0", "", "", "", ""}
	}
	return []string{name, thousands(r.PerSecond, 1), thousands(r.MeanUs, 1), thousands(r.P99Us, 1), thousands(r.UserUs, 1), thousands(r.KernelUs, 1)}
}

// Lines is the frame as plain lines, for a pipe or a log: no escape codes,
// one line per target and per route shown, each saying when.
func (f Frame) Lines() string {
	var b strings.Builder
	when := seconds(f.Elapsed)
	if f.Duration > 0 {
		when += " (" + seconds(max(0, f.Duration-f.Elapsed)) + " left)"
	}
	for _, t := range f.Targets {
		fmt.Fprintf(&b, "reqprof: %s %s: %s, %s events lost\n", when, t.Name, t.All.plain(), thousands(float64(t.Lost), 0))
		for _, r := range t.Routes {
			fmt.Fprintf(&b, "reqprof: %s %s %s: %s\n", when, t.Name, r.Route, r.plain())
		}
	}
	return b.String()
}

func (r Row) plain() string {
	if r.PerSecond == 0 {
		return "0 req/s"
	}
	return fmt.Sprintf("%s req/s, cpu %s µs mean, %s µs p99, user %s µs, kernel %s µs",
		thousands(r.PerSecond, 1), thousands(r.MeanUs, 1), thousands(r.P99Us, 1), thousands(r.UserUs, 1), thousands(r.KernelUs, 1))
}

// clip shortens s to at most n characters, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// thousands formats v with decimals and commas between thousands.
func thousands(v float64, decimals int) string {
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	whole, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(whole, "-")
	whole = strings.TrimPrefix(whole, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteString("." + frac)
	}
	return b.String()
}

// View shows frames on a writer: on a terminal each frame replaces the one
// before; elsewhere each is written as plain lines.
type View struct {
	w        io.Writer
	terminal bool
	width    int // the terminal's columns; 0 if unknown
	shown    int // lines of the frame on the terminal now
}

// NewView shows frames on w, redrawn in place when terminal is true. On a
// terminal of width columns (0: unknown), lines are cut to fit: a line
// that wrapped would throw the redrawing off by one.
func NewView(w io.Writer, terminal bool, width int) *View {
	return &View{w: w, terminal: terminal, width: width}
}

// Show writes f: on a terminal, over the frame before it.
func (v *View) Show(f Frame) error {
	if !v.terminal {
		_, err := io.WriteString(v.w, f.Lines())
		return err
	}
	table := f.Table()
	if v.width > 1 {
		lines := strings.SplitAfter(table, "\n")
		for i, line := range lines {
			if line := strings.TrimSuffix(line, "\n"); utf8.RuneCountInString(line) >= v.width {
				lines[i] = string([]rune(line)[:v.width-1]) + "\n"
			}
		}
		table = strings.Join(lines, "")
	}
	_, err := io.WriteString(v.w, v.erase()+table)
	v.shown = strings.Count(table, "\n")
	return err
}

// Clear takes the frame on the terminal away, so that what follows starts
// where it did.
func (v *View) Clear() error {
	if !v.terminal || v.shown == 0 {
		return nil
	}
	_, err := io.WriteString(v.w, v.erase())
	v.shown = 0
	return err
}

// erase is the escape codes that move the cursor to the start of the
// frame shown and clear the screen below it.
func (v *View) erase() string {
	if v.shown == 0 {
		return ""
	}
	return fmt.Sprintf("\r\x1b[%dA\x1b[J", v.shown)
}
