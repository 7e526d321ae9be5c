package report

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
)

// CompareOptions chooses what the targets are set against. The zero value
// sets each against the baseline, the first target, only.
type CompareOptions struct {
	// WithFloor makes Targets[Floor] the floor: a server doing the least a
	// request can cost, such as a bare HTTP server that answers at once, so
	// that what a target spends above it is what its own code costs.
	WithFloor bool
	Floor     int
}

// Comparison sets each target against the baseline, the summary's first
// target, and against the floor if one was chosen. It works from the
// summary's rounded mean CPU per finished request, so that comparing saved
// runs gives the very figures a live run gives.
type Comparison struct {
	BaselinePID int `json:"baseline_pid"`
	FloorPID    int `json:"floor_pid,omitempty"`
	// FloorIndex is the floor's place in the summary's Targets: its PID alone
	// is ambiguous once runs from several hosts, or repeats of one run, are
	// combined.
	FloorIndex *int `json:"floor_index,omitempty"`
	// Targets[i] is about the summary's Targets[i].
	Targets []TargetComparison `json:"targets"`
	// Warnings are reasons the targets may not compare fairly. Never null.
	Warnings []string `json:"warnings"`
}

// TargetComparison is one target against the baseline and the floor. Each
// figure is absent when there is none to give: when the target or the other
// side finished no request, when the baseline's mean is too near 0 for a
// finite ratio (for CPURatio), or without a floor (for AboveFloorUs).
type TargetComparison struct {
	PID   int    `json:"pid"`
	Label string `json:"label,omitempty"`
	// CPURatio is the target's mean CPU per request over the baseline's, to
	// four significant figures.
	CPURatio *float64 `json:"cpu_ratio,omitempty"`
	// CPUDeltaUs is the target's mean CPU per request minus the baseline's.
	CPUDeltaUs *float64 `json:"cpu_delta_us,omitempty"`
	// AboveFloorUs is the target's mean CPU per request minus the floor's.
	AboveFloorUs *float64 `json:"above_floor_us,omitempty"`
}

// maxRequestCountRatio is how far apart two targets' request counts may be
// before their CPU per request is suspect: it changes with load (batching,
// cache warmth, wakeups from idle), so a fair comparison loads each alike.
const maxRequestCountRatio = 10

// Compare sets the targets of s against each other as opts says. It returns
// nil for fewer than two targets, and an error if opts names no target as
// the floor.
func Compare(s Summary, opts CompareOptions) (*Comparison, error) {
	if opts.WithFloor && (opts.Floor < 0 || opts.Floor >= len(s.Targets)) {
		return nil, fmt.Errorf("no target %d to be the floor: there are %d, counted from 0",
			opts.Floor, len(s.Targets))
	}
	return compare(s, opts), nil
}

// compare is Compare for opts already known to suit s.
func compare(s Summary, opts CompareOptions) *Comparison {
	if len(s.Targets) < 2 {
		return nil
	}
	base := s.Targets[0]
	c := &Comparison{
		BaselinePID: base.PID,
		Targets:     make([]TargetComparison, 0, len(s.Targets)),
		Warnings:    comparisonWarnings(s.Targets),
	}
	var floor TargetSummary
	if opts.WithFloor {
		floor = s.Targets[opts.Floor]
		c.FloorPID = floor.PID
		c.FloorIndex = &opts.Floor
	}
	for _, t := range s.Targets {
		tc := TargetComparison{PID: t.PID, Label: t.Label}
		if t.Requests > 0 && base.Requests > 0 {
			tc.CPUDeltaUs = finite(roundTenth(t.CPUUs.Mean - base.CPUUs.Mean))
			if base.CPUUs.Mean > 0 {
				tc.CPURatio = finite(significant(t.CPUUs.Mean/base.CPUUs.Mean, 4))
			}
		}
		if opts.WithFloor && t.Requests > 0 && floor.Requests > 0 {
			tc.AboveFloorUs = finite(roundTenth(t.CPUUs.Mean - floor.CPUUs.Mean))
		}
		c.Targets = append(c.Targets, tc)
	}
	return c
}

// significant rounds x to digits significant figures, to the float64
// nearest that decimal, which JSON then prints as written: 0.03281, not
// 0.032810000000000006.
func significant(x float64, digits int) float64 {
	// A decimal rounded up past the largest float64 parses as ±Inf, its
	// error saying just that.
	rounded, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', digits, 64), 64)
	return rounded
}

// finite is &x, or nil for a figure JSON cannot hold: a summary read from a
// file can have a baseline mean small enough for a ratio to overflow.
func finite(x float64) *float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return nil
	}
	return &x
}

// comparisonWarnings says, in a fixed order, why targets may not compare
// fairly.
func comparisonWarnings(targets []TargetSummary) []string {
	w := []string{}
	fewest, most := -1, -1
	for i, t := range targets {
		if t.Requests == 0 {
			continue
		}
		if fewest < 0 || t.Requests < targets[fewest].Requests {
			fewest = i
		}
		if most < 0 || t.Requests > targets[most].Requests {
			most = i
		}
	}
	// In floats, as ten times a count read from a file can overflow an int.
	if fewest >= 0 && float64(targets[most].Requests) > maxRequestCountRatio*float64(targets[fewest].Requests) {
		w = append(w, fmt.Sprintf(
			"request counts differ more than %dx, from %s for %s to %s for %s: CPU per request changes with load, so load every target alike",
			maxRequestCountRatio,
			groupDigits(strconv.Itoa(targets[fewest].Requests)), describe(targets[fewest]),
			groupDigits(strconv.Itoa(targets[most].Requests)), describe(targets[most])))
	}
	for _, t := range targets {
		if t.Requests == 0 {
			w = append(w, describe(t)+" finished no request: it has no CPU per request to compare")
		}
		if t.Partial {
			reason := "partial result"
			if len(t.Warnings) > 0 {
				reason = strings.Join(t.Warnings, "; ")
			}
			w = append(w, fmt.Sprintf("%s is partial: %s", describe(t), reason))
		}
	}
	return w
}

// columnName heads a target's column: its label, or "PID (comm)".
func columnName(t TargetSummary) string {
	if t.Label != "" {
		return t.Label
	}
	return fmt.Sprintf("%d (%s)", t.PID, t.Comm)
}

// columnNames head the columns of targets, each told apart from the
// others: targets that would share a name get the run each came from
// ("rust-sdk (monday.json)"), or where that does not tell them apart their
// pids, or else their places among the targets ("#3", as --floor counts
// them).
func columnNames(targets []TargetSummary) []string {
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = columnName(t)
	}
	for _, tell := range []func(i int, t TargetSummary) string{
		func(_ int, t TargetSummary) string { return t.Source },
		func(_ int, t TargetSummary) string { return fmt.Sprintf("pid %d", t.PID) },
		func(i int, _ TargetSummary) string { return fmt.Sprintf("#%d", i) },
	} {
		sharing := map[string][]int{}
		for i, n := range names {
			sharing[n] = append(sharing[n], i)
		}
		for _, group := range sharing {
			extras := map[string]bool{}
			for _, i := range group {
				extras[tell(i, targets[i])] = true
			}
			if len(group) < 2 || len(extras) < 2 || extras[""] {
				continue
			}
			for _, i := range group {
				names[i] += " (" + tell(i, targets[i]) + ")"
			}
		}
	}
	return names
}

// buildName says which reqprof took s: "v0.3.0, commit 1a2b3c4d5e6f",
// either alone, or "" when neither is known.
func buildName(s Summary) string {
	switch {
	case s.Version != "" && s.Commit != "":
		return s.Version + ", commit " + s.Commit
	case s.Commit != "":
		return "commit " + s.Commit
	}
	return s.Version
}

// describe names a target in a sentence.
func describe(t TargetSummary) string {
	if t.Label != "" {
		return fmt.Sprintf("%s (pid %d)", t.Label, t.PID)
	}
	return fmt.Sprintf("pid %d (%s)", t.PID, t.Comm)
}

// Source is a saved summary and the name to tell it by, such as its file's.
type Source struct {
	Name    string
	Summary Summary
}

// Combine joins the targets of several summaries into one, in the order
// given, to be compared as if profiled side by side; the first target of
// the first summary is the baseline, and each target's Source is the name
// of the summary it came from, unless it already had one. Runs compare
// fairly only when taken alike, so Warnings says when they were taken on
// different hosts, kernels or reqprof builds (commits, or versions where
// the commits are unknown), and keeps each summary's own warnings,
// prefixed with its name. Host, Kernel, Version, Commit, SyscallEntryNs
// and DurationS are kept where every summary agrees and left empty
// otherwise; StartedAt is the earliest. Each summary's own comparison is
// dropped, as it was against its own baseline: the result is compared
// afresh, with no floor, and has the Spread of the summaries.
func Combine(sources []Source) Summary {
	s := Summary{Targets: []TargetSummary{}}
	runs := make([]Summary, 0, len(sources))
	for _, src := range sources {
		for _, t := range src.Summary.Targets {
			if t.Source == "" {
				t.Source = src.Name
			}
			s.Targets = append(s.Targets, t)
		}
		runs = append(runs, src.Summary)
	}
	for _, field := range []struct {
		value *string
		what  string
		get   func(Summary) string
	}{
		{&s.Host, "hosts", func(s Summary) string { return s.Host }},
		{&s.Kernel, "kernels", func(s Summary) string { return s.Kernel }},
	} {
		value, warning := agreed(sources, field.what, field.get)
		*field.value = value
		if warning != "" {
			s.Warnings = append(s.Warnings, warning)
		}
	}
	// Commits tell builds apart; versions only when no commit is known.
	var commitWarning, versionWarning string
	s.Commit, commitWarning = agreed(sources, "reqprof commits", func(s Summary) string { return s.Commit })
	s.Version, versionWarning = agreed(sources, "reqprof versions", func(s Summary) string { return s.Version })
	s.ReqprofVersion = s.Commit
	if commitWarning != "" {
		s.Warnings = append(s.Warnings, commitWarning)
	} else if versionWarning != "" && s.Commit == "" {
		s.Warnings = append(s.Warnings, versionWarning)
	}
	for _, src := range sources {
		for _, w := range src.Summary.Warnings {
			s.Warnings = append(s.Warnings, src.Name+": "+w)
		}
	}
	s.SyscallEntryNs = agreedOrZero(runs, func(s Summary) uint64 { return s.SyscallEntryNs })
	s.DurationS = agreedOrZero(runs, func(s Summary) float64 { return s.DurationS })
	s.StartedAt = earliestStart(runs)
	s.Comparison = compare(s, CompareOptions{})
	s.Spread = Spread(runs)
	return s
}

// agreed is the value get gives for every source, or "" when they do not
// all give the same known value. When two give different known values it
// also returns a warning naming each source's value.
func agreed(sources []Source, what string, get func(Summary) string) (value, warning string) {
	var known []string
	unknown := false
	for _, src := range sources {
		if v := get(src.Summary); v == "" {
			unknown = true
		} else if !slices.Contains(known, v) {
			known = append(known, v)
		}
	}
	switch {
	case len(known) == 1 && !unknown:
		return known[0], ""
	case len(known) < 2:
		return "", ""
	}
	// Sources grouped by value, in the order the values first appear.
	var values []string
	names := map[string][]string{}
	for _, src := range sources {
		v := orUnknown(get(src.Summary))
		if _, seen := names[v]; !seen {
			values = append(values, v)
		}
		names[v] = append(names[v], src.Name)
	}
	each := make([]string, len(values))
	for i, v := range values {
		each[i] = fmt.Sprintf("%s (%s)", v, strings.Join(names[v], ", "))
	}
	return "", fmt.Sprintf("runs were taken on different %s: %s; their CPU per request may differ for that alone",
		what, strings.Join(each, ", "))
}

// agreedOrZero is the value get gives for every run, or the zero value,
// unknown, when they differ.
func agreedOrZero[T comparable](runs []Summary, get func(Summary) T) T {
	var zero T
	if len(runs) == 0 {
		return zero
	}
	for _, r := range runs {
		if get(r) != get(runs[0]) {
			return zero
		}
	}
	return get(runs[0])
}

// earliestStart is the earliest StartedAt of runs, as written there, or ""
// when none has one that parses.
func earliestStart(runs []Summary) string {
	var earliest string
	var earliestTime time.Time
	for _, r := range runs {
		t, err := time.Parse(time.RFC3339, r.StartedAt)
		if err == nil && (earliest == "" || t.Before(earliestTime)) {
			earliest, earliestTime = r.StartedAt, t
		}
	}
	return earliest
}

// WriteComparison writes for people one table with a column per target of
// s, set against each other as opts says, and then a WARNING line for each
// reason the comparison may mislead. The comparison is worked out afresh
// from s.Targets and opts; s.Comparison is not read. Like WriteTable, the
// output depends on nothing but its arguments.
func WriteComparison(w io.Writer, s Summary, opts CompareOptions) error {
	c, err := Compare(s, opts)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if len(s.Targets) == 0 {
		b.WriteString("no targets\n")
	} else {
		header, rows, err := comparisonCells(s.Targets, c)
		if err != nil {
			return err
		}
		b.WriteString(printable(comparisonTitle(s.Targets, c)) + "\n")
		if err := writeTextTable(&b, header, rows, numbersAlign(len(header))); err != nil {
			return err
		}
	}
	for _, warning := range append(slices.Clone(s.Warnings), comparisonWarnings(s.Targets)...) {
		fmt.Fprintf(&b, "WARNING: %s\n", printable(warning))
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("report: writing comparison: %w", err)
	}
	return nil
}

// comparisonTitle says what the comparison table holds and what it is
// against.
func comparisonTitle(targets []TargetSummary, c *Comparison) string {
	title := "CPU per finished request"
	switch own := ownCosts(targets); {
	case own == len(targets) && own > 0:
		title += ", net of reqprof's own cost"
	case own > 0:
		title += fmt.Sprintf(", net of reqprof's own cost in %d of the %d targets", own, len(targets))
	}
	if c != nil {
		names := columnNames(targets)
		title += "; baseline: " + names[0]
		if c.FloorIndex != nil {
			title += "; floor: " + names[*c.FloorIndex]
		}
	}
	return title
}

// ownCosts is how many of targets have figures net of reqprof's own
// cost: all of one run, or of none, but a comparison of files can mix
// runs made with --gross, or by a reqprof that kept no own cost.
func ownCosts(targets []TargetSummary) int {
	n := 0
	for _, t := range targets {
		if ownTakenOut(t) {
			n++
		}
	}
	return n
}

// topKernelCosts is how many of each target's largest kernel costs the
// comparison shows.
const topKernelCosts = 3

// comparisonCells lays out targets and their comparison c (nil for none) as
// the cells of a table with a column per target, for the terminal and the
// page alike. It fails if c is not about targets.
func comparisonCells(targets []TargetSummary, c *Comparison) (header []string, rows [][]string, err error) {
	if err := checkComparisonOf(targets, c); err != nil {
		return nil, nil, err
	}
	header = append([]string{"per request"}, columnNames(targets)...)
	r := &comparisonRows{targets: targets}
	r.addCPU()
	r.addKernelTop()
	r.addLatency()
	if c != nil {
		r.addAgainst(c)
	}
	return header, r.rows, nil
}

// checkComparisonOf fails if c, when not nil, is not about targets: one
// comparison per target, and a floor among them.
func checkComparisonOf(targets []TargetSummary, c *Comparison) error {
	if c == nil {
		return nil
	}
	if len(c.Targets) != len(targets) {
		return fmt.Errorf("report: comparison of %d targets for a summary of %d", len(c.Targets), len(targets))
	}
	if c.FloorIndex != nil && (*c.FloorIndex < 0 || *c.FloorIndex >= len(targets)) {
		return fmt.Errorf("report: comparison floor %d is not one of %d targets", *c.FloorIndex, len(targets))
	}
	return nil
}

// comparisonRows are the rows of a comparison table, each a figure's name
// and then its cell for each target.
type comparisonRows struct {
	targets []TargetSummary
	rows    [][]string
}

// cellFunc is a row's cell for targets[i], which is t.
type cellFunc func(i int, t TargetSummary) string

// add appends the row of name, a cell per target.
func (r *comparisonRows) add(name string, cell cellFunc) {
	row := []string{name}
	for i, t := range r.targets {
		row = append(row, cell(i, t))
	}
	r.rows = append(r.rows, row)
}

// some says whether has holds for any of the targets.
func (r *comparisonRows) some(has func(TargetSummary) bool) bool {
	return slices.ContainsFunc(r.targets, has)
}

// addCPU appends who each target is, how many requests it finished, and
// its CPU per request.
func (r *comparisonRows) addCPU() {
	// Headed by labels, the columns need their processes said.
	if r.some(func(t TargetSummary) bool { return t.Label != "" }) {
		r.add("process", func(_ int, t TargetSummary) string { return fmt.Sprintf("pid %d (%s)", t.PID, t.Comm) })
	}
	r.add("requests", func(_ int, t TargetSummary) string { return groupDigits(strconv.Itoa(t.Requests)) })
	r.add("req/s", func(_ int, t TargetSummary) string { return tenths(t.RequestsPerS) })
	r.add("cpu µs mean", usCell(func(t TargetSummary) float64 { return t.CPUUs.Mean }))
	r.add("cpu µs p50", percentileUsCell(func(t TargetSummary) float64 { return t.CPUUs.P50 }))
	r.add("cpu µs p99", percentileUsCell(func(t TargetSummary) float64 { return t.CPUUs.P99 }))
	r.add("user µs mean", usCell(func(t TargetSummary) float64 { return t.UserUs.Mean }))
	r.add("kernel µs mean", usCell(func(t TargetSummary) float64 { return t.KernelUs.Mean }))
}

// usCell shows get's µs per request. A finished-nothing target has no CPU
// per request: 0.0 would mislead.
func usCell(get func(TargetSummary) float64) cellFunc {
	return func(_ int, t TargetSummary) string {
		if t.Requests == 0 {
			return "n/a"
		}
		return tenths(get(t))
	}
}

// percentileUsCell is usCell for a percentile, which a target whose sample
// holds no request has not either.
func percentileUsCell(get func(TargetSummary) float64) cellFunc {
	return func(i int, t TargetSummary) string {
		if !percentilesKnown(t.SampledRequests) {
			return "n/a"
		}
		return usCell(get)(i, t)
	}
}

// addKernelTop appends each target's largest kernel costs. Older
// summaries have none: the rows appear only when some target has them.
func (r *comparisonRows) addKernelTop() {
	if !r.some(func(t TargetSummary) bool { return t.KernelBreakdownUs != nil }) {
		return
	}
	for rank := range topKernelCosts {
		r.add(fmt.Sprintf("kernel top %d", rank+1), func(_ int, t TargetSummary) string {
			if t.KernelBreakdownUs == nil {
				return "n/a"
			}
			return topKernelCost(t, rank)
		})
	}
}

// addLatency appends each target's latency. Older summaries have none:
// the rows appear only when some target has it.
func (r *comparisonRows) addLatency() {
	if !r.some(func(t TargetSummary) bool { return t.LatencyUs != nil }) {
		return
	}
	r.add("latency µs mean", latencyCell(func(d Dist) float64 { return d.Mean }))
	r.add("latency µs p99", func(i int, t TargetSummary) string {
		if !percentilesKnown(t.SampledRequests) {
			return "n/a"
		}
		return latencyCell(func(d Dist) float64 { return d.P99 })(i, t)
	})
}

// latencyCell shows get of a target's latency, in µs.
func latencyCell(get func(Dist) float64) cellFunc {
	return func(_ int, t TargetSummary) string {
		if t.LatencyUs == nil {
			return "n/a"
		}
		return tenths(get(*t.LatencyUs))
	}
}

// addAgainst appends each target set against the baseline, and against
// the floor when c has one.
func (r *comparisonRows) addAgainst(c *Comparison) {
	r.add("cpu vs baseline", func(i int, _ TargetSummary) string {
		if i == 0 {
			return "baseline"
		}
		return vsBaseline(c.Targets[i])
	})
	if c.FloorIndex == nil {
		return
	}
	r.add("cpu above floor", func(i int, _ TargetSummary) string {
		if i == *c.FloorIndex {
			return "floor"
		}
		if d := c.Targets[i].AboveFloorUs; d != nil {
			return signedMicros(*d)
		}
		return "n/a"
	})
}

// vsBaseline phrases a target against the baseline: "32.1x, or 2,357.0 µs
// more".
func vsBaseline(tc TargetComparison) string {
	if tc.CPUDeltaUs == nil {
		return "n/a"
	}
	delta := tenths(*tc.CPUDeltaUs) + " µs more"
	if *tc.CPUDeltaUs < 0 {
		delta = tenths(-*tc.CPUDeltaUs) + " µs less"
	}
	if tc.CPURatio == nil {
		return delta
	}
	return ratio(*tc.CPURatio) + ", or " + delta
}

// ratio shows a ratio to three significant figures, or more for a ratio
// of 1,000 or more: "0.0328x", "0.500x", "2.36x", "32.1x", "1,234x".
func ratio(r float64) string {
	decimals := 2
	if r > 0 {
		decimals = max(0, 2-int(math.Floor(math.Log10(r))))
	}
	return groupDigits(strconv.FormatFloat(r, 'f', decimals, 64)) + "x"
}

// signedMicros is "+2,357.0 µs" or "-12.0 µs".
func signedMicros(us float64) string {
	if us >= 0 {
		return "+" + tenths(us) + " µs"
	}
	return tenths(us) + " µs"
}

// numbersAlign aligns a table's first column, of names, left and the rest,
// of figures, right.
func numbersAlign(columns int) []tw.Align {
	align := []tw.Align{tw.AlignLeft}
	for range columns - 1 {
		align = append(align, tw.AlignRight)
	}
	return align
}

// writeTextTable renders a table as table.go does, every cell made
// printable first.
func writeTextTable(w io.Writer, header []string, rows [][]string, align []tw.Align) error {
	config := tw.CellAlignment{PerColumn: align}
	table := tablewriter.NewTable(w,
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignmentConfig(config),
		tablewriter.WithRowAlignmentConfig(config),
	)
	table.Header(printableAll(header))
	printableRows := make([][]string, len(rows))
	for i, r := range rows {
		printableRows[i] = printableAll(r)
	}
	if err := table.Bulk(printableRows); err != nil {
		return fmt.Errorf("report: building table: %w", err)
	}
	if err := table.Render(); err != nil {
		return fmt.Errorf("report: rendering table: %w", err)
	}
	return nil
}

func printableAll(cells []string) []string {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = printable(c)
	}
	return out
}

// WriteSources writes for people which target of Combine(sources) came
// from which source, numbered as CompareOptions.Floor counts them, and
// where and when each source was taken.
func WriteSources(w io.Writer, sources []Source) error {
	var rows [][]string
	for _, src := range sources {
		s := src.Summary
		window := "unknown"
		if s.DurationS > 0 {
			window = tenths(s.DurationS) + " s"
		}
		for _, t := range s.Targets {
			rows = append(rows, []string{
				strconv.Itoa(len(rows)), columnName(t), fmt.Sprintf("pid %d (%s)", t.PID, t.Comm),
				src.Name, orUnknown(s.Host), orUnknown(s.Kernel), orUnknown(s.StartedAt), window,
			})
		}
	}
	var b bytes.Buffer
	if len(rows) == 0 {
		b.WriteString("no targets\n")
	} else {
		align := slices.Repeat([]tw.Align{tw.AlignLeft}, 8)
		align[0], align[7] = tw.AlignRight, tw.AlignRight
		header := []string{"#", "target", "process", "run", "host", "kernel", "started", "window"}
		if err := writeTextTable(&b, header, rows, align); err != nil {
			return err
		}
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("report: writing sources: %w", err)
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
