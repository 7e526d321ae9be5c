package report

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// TableOptions choose what WriteTableWith shows. The zero value is what
// WriteTable shows.
type TableOptions struct {
	// AllSyscalls shows every cause of kernel time, instead of folding the
	// long tail into one row.
	AllSyscalls bool
}

// WriteTable writes s for people: one block per target, blocks separated by
// a blank line. The output depends only on s, never on the terminal or the
// locale, so it can be compared byte for byte.
func WriteTable(w io.Writer, s Summary) error {
	return WriteTableWith(w, s, TableOptions{})
}

// WriteTableWith is WriteTable showing what opts says.
func WriteTableWith(w io.Writer, s Summary, opts TableOptions) error {
	var b bytes.Buffer
	if len(s.Targets) == 0 {
		b.WriteString("no targets\n")
	}
	for i, t := range s.Targets {
		if i > 0 {
			b.WriteString("\n")
		}
		if err := writeTarget(&b, t, s, opts); err != nil {
			return err
		}
	}
	writeOverhead(&b, s.Overhead, s.DurationS)
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("report: writing table: %w", err)
	}
	return nil
}

func writeTarget(b *bytes.Buffer, t TargetSummary, s Summary, opts TableOptions) error {
	fmt.Fprintf(b, "pid %d (%s)", t.PID, printable(t.Comm))
	if t.Label != "" {
		fmt.Fprintf(b, " %q", t.Label)
	}
	fmt.Fprintf(b, " — %s %s in %s s (%s req/s)\n",
		groupDigits(strconv.Itoa(t.Requests)), plural(t.Requests, "request", "requests"),
		tenths(s.DurationS), tenths(t.RequestsPerS))
	if t.Goroutines != "" {
		fmt.Fprintf(b, "Go: goroutines %s\n", printable(t.Goroutines))
	}
	if p := t.Pool; p != nil {
		fmt.Fprintf(b, "runtime pool: %s", printable(p.Status))
		if p.JobsQueued > 0 {
			fmt.Fprintf(b, "; %s jobs queued by requests, %s handed back while their request was open, %s ms of pool threads' CPU charged to them",
				groupDigits(strconv.FormatUint(p.JobsQueued, 10)), groupDigits(strconv.FormatUint(p.JobsDone, 10)), tenths(p.CPUUs/1000))
		}
		if p.JobsUnseen > 0 {
			fmt.Fprintf(b, "; %s jobs taken by a pool thread without a hand-off seen (a thread that took its next job before it slept): each charged to the next response left without its job, flagged estimated (interleaved)",
				groupDigits(strconv.FormatUint(p.JobsUnseen, 10)))
		}
		b.WriteString("\n")
	}
	if s.Lite != nil {
		fmt.Fprintf(b, "lite mode: user/kernel split estimated (±%g points of the kernel share), no syscall rows\n", s.Lite.SplitPrecisionPoints)
	}

	if t.Requests == 0 {
		b.WriteString("no finished requests\n")
	} else if err := writeRequestFigures(b, t, s.SyscallEntryNs, opts); err != nil {
		return err
	}
	if line := selfCostLine(t, s.Overhead, s.DurationS); line != "" {
		b.WriteString(line + "\n")
	}
	writeClients(b, t)
	writeBackends(b, t)
	if err := writeStacks(b, t.Stacks, ownTakenOut(t)); err != nil {
		return err
	}

	for _, line := range cpuSeenLines(t) {
		b.WriteString(line + "\n")
	}
	if header, rows := sourceCells(t); rows != nil {
		b.WriteString(sourcesTitle + "\n")
		if err := writeTextTable(b, header, rows, numbersAlign(len(header))); err != nil {
			return err
		}
	}
	if line := waitsLine(t); line != "" {
		b.WriteString(line + "\n")
	}

	if t.Requests > 0 {
		fmt.Fprintf(b, "bytes per request: in %s, out %s\n",
			groupDigits(strconv.FormatFloat(t.BytesInPerRequest, 'f', 0, 64)),
			groupDigits(strconv.FormatFloat(t.BytesOutPerRequest, 'f', 0, 64)))
	}
	if t.UnfinishedRequests > 0 || t.UnfinishedCPUUs > 0 {
		fmt.Fprintf(b, "unfinished requests: %s, %s ms of CPU (attributed, not in the distributions)\n",
			groupDigits(strconv.Itoa(t.UnfinishedRequests)), ms(t.UnfinishedCPUUs))
	}

	writePerBurst(b, t.PerBurst)
	if t.Notifications > 0 {
		fmt.Fprintf(b, "JSON-RPC notifications (no requests; their CPU shared by the requests read with them): %s\n",
			groupDigits(strconv.FormatUint(t.Notifications, 10)))
	}
	for _, w := range t.Warnings {
		fmt.Fprintf(b, "WARNING: %s\n", printable(w))
	}
	// A summary read from a file may say it is partial without saying why.
	if t.Partial && len(t.Warnings) == 0 {
		b.WriteString("WARNING: partial result\n")
	}
	return nil
}

// writeRequestFigures writes what t's finished requests cost: the
// distributions, where their time went, and their kernel costs and routes
// where the summary has them.
func writeRequestFigures(b *bytes.Buffer, t TargetSummary, syscallEntryNs uint64, opts TableOptions) error {
	header, rows := distCells(t)
	b.WriteString(distTitle + "\n")
	if err := writeTextTable(b, header, rows, numbersAlign(len(header))); err != nil {
		return err
	}
	if line := sampleNote(t, "percentiles"); line != "" {
		b.WriteString(line + "\n")
	}
	for _, line := range timeSplit(t) {
		b.WriteString(line + "\n")
	}
	if t.TimeSplitUs == nil {
		if line := setupLine(t); line != "" {
			b.WriteString(line + "\n")
		}
	}
	if t.PageFaultsPerRequest != nil && t.CtxSwitchesPerRequest != nil {
		fmt.Fprintf(b, "per request: %s page faults; %s voluntary and %s involuntary context switches\n",
			tenths(*t.PageFaultsPerRequest),
			tenths(t.CtxSwitchesPerRequest.Voluntary), tenths(t.CtxSwitchesPerRequest.Involuntary))
	}
	if header, rows := kernelCostCells(t, opts.AllSyscalls); rows != nil {
		b.WriteString(kernelCostTitle(syscallEntryNs) + "\n")
		if err := writeTextTable(b, header, rows, numbersAlign(len(header))); err != nil {
			return err
		}
	}
	if header, rows := routeCells(t); rows != nil {
		b.WriteString(routesTitle + "\n")
		if err := writeTextTable(b, header, rows, numbersAlign(len(header))); err != nil {
			return err
		}
	}
	return nil
}

// setupLine says how much of a request's CPU was its connection's setup
// and teardown; "" when none was (connections opened before the window,
// or kept open across requests and not closed in it).
func setupLine(t TargetSummary) string {
	if t.Requests == 0 || t.SetupUs <= 0 {
		return ""
	}
	return fmt.Sprintf("connection setup µs per request: %s of the %s µs mean cpu (accept, the thread or process made for the connection, close)",
		tenths(t.SetupUs), tenths(t.CPUUs.Mean))
}

// cpuSeenLines say how all the CPU reqprof saw t's threads use went,
// attributed to requests or not, and set it against the kernel's own
// accounting of the process.
func cpuSeenLines(t TargetSummary) []string {
	seen, own := t.ProcessCPUUs, 0.0
	if t.SeenCPUUs > t.ProcessCPUUs {
		seen, own = t.SeenCPUUs, t.SeenCPUUs-t.ProcessCPUUs
	}
	var b strings.Builder
	b.WriteString("CPU of the process over the window")
	if own > 0 {
		b.WriteString(", net of reqprof's own")
	}
	fmt.Fprintf(&b, ": %s ms = attributed to requests %s ms%s + unattributed %s ms%s",
		ms(t.ProcessCPUUs), ms(t.AttributedCPUUs), share(t.AttributedCPUUs, t.ProcessCPUUs),
		ms(t.UnattributedCPUUs), share(t.UnattributedCPUUs, t.ProcessCPUUs))
	if t.AllInPerRequestUs > 0 {
		fmt.Fprintf(&b, "; all-in %s µs per request finished", tenths(t.AllInPerRequestUs))
	}
	if t.StealUs > 0 {
		fmt.Fprintf(&b, "; hypervisor steal left out %s ms", ms(t.StealUs))
	}
	lines := []string{b.String()}
	if t.SchedCPUUs > 0 {
		check := fmt.Sprintf("against the kernel's accounting of the process (its CPU clock), %s ms: ", ms(t.SchedCPUUs))
		if own > 0 {
			// Each to 0.1 ms first, so that the sum holds as shown.
			net, own := math.Round(t.ProcessCPUUs/100)*100, math.Round(own/100)*100
			check += fmt.Sprintf("%s ms + reqprof's own %s ms = %s ms, ", ms(net), ms(own), ms(net+own))
		} else {
			check += fmt.Sprintf("reqprof saw %s ms, ", ms(seen))
		}
		lines = append(lines, check+fmt.Sprintf("%.1f%%", 100*seen/t.SchedCPUUs))
	}
	return lines
}

// sourcesTitle says what a table of unattributed sources holds.
const sourcesTitle = "unattributed CPU by thread name, largest first"

// sourceCells lays out where t's unattributed CPU went as the cells of a
// table with a row per thread name, for the terminal and the page alike;
// no rows when the summary does not say.
func sourceCells(t TargetSummary) (header []string, rows [][]string) {
	for _, src := range t.UnattributedSources {
		name := src.Thread
		if src.Names > 0 {
			name = fmt.Sprintf("other (%d names)", src.Names)
		}
		rows = append(rows, []string{name, groupDigits(strconv.Itoa(src.Threads)),
			hundredths(src.CPUMs), fmt.Sprintf("%.1f%%", 100*src.Share)})
	}
	if rows == nil {
		return nil, nil
	}
	return []string{"thread", "threads", "ms", "share"}, rows
}

// waitsLine says how long t's threads waited over the window, in requests
// or not; "" when the summary does not say.
func waitsLine(t TargetSummary) string {
	if t.RunqueueTotalUs == nil || t.OffCPUTotalUs == nil {
		return ""
	}
	return fmt.Sprintf("the process's threads waited over the window, in requests or not: %s ms on a run queue, %s ms blocked",
		ms(*t.RunqueueTotalUs), ms(*t.OffCPUTotalUs))
}

// distCells lays out t's distributions per finished request as the cells
// of a table with a row each, for the terminal and the page alike.
func distCells(t TargetSummary) (header []string, rows [][]string) {
	known := percentilesKnown(t.SampledRequests)
	rows = [][]string{
		distRow("cpu", t.CPUUs, known),
		distRow("user", t.UserUs, known),
		distRow("kernel", t.KernelUs, known),
	}
	for _, d := range []struct {
		name string
		dist *Dist
	}{
		{"run-queue", t.RunqueueUs}, {"blocked", t.OffCPUUs}, {"first byte", t.FirstByteUs}, {"latency", t.LatencyUs},
	} {
		if d.dist != nil {
			rows = append(rows, distRow(d.name, *d.dist, known))
		}
	}
	return []string{"µs", "mean", "p50", "p90", "p99", "max"}, rows
}

// distTitle says what the distributions hold.
const distTitle = "µs per finished request"

// timeSplit says where a mean request's CPU and wall time went, as two
// sums under a title, or nothing when the summary has no latency. A
// summary that does not tell apart the CPU after a request's last byte
// gets only its waits: its CPU is no part of its latency alone. self is
// reqprof's own cost per request, when it was taken out.
func timeSplit(t TargetSummary) []string {
	if t.LatencyUs == nil || t.RunqueueUs == nil || t.OffCPUUs == nil || t.LatencyUs.Mean <= 0 {
		return nil
	}
	sp := t.TimeSplitUs
	if sp == nil {
		return []string{fmt.Sprintf("where the time went: of the %s µs mean latency, %s µs on a run queue and %s µs blocked "+
			"(this run does not tell the CPU after a request's last byte apart from the CPU before it)",
			tenths(t.LatencyUs.Mean), tenths(t.RunqueueUs.Mean), tenths(t.OffCPUUs.Mean))}
	}
	cpu := fmt.Sprintf("  cpu %s = %s from its first read to its last write + %s after it (its thread's loop until it turned to other work)",
		tenths(sp.CPUUs), tenths(sp.ReadToWriteUs), tenths(sp.AfterResponseUs))
	if sp.SetupUs > 0 {
		cpu += fmt.Sprintf(" + %s connection setup (accept, the thread or process made for the connection, close)", tenths(sp.SetupUs))
	}
	latency := fmt.Sprintf("  latency %s = those %s on a CPU", tenths(sp.LatencyUs), tenths(sp.ReadToWriteUs))
	if sp.OwnCostReadToWrite > 0 {
		latency += fmt.Sprintf(" + reqprof's programs %s", tenths(sp.OwnCostReadToWrite))
		if c := t.SelfCostUs; c != nil && c.TakenOut {
			latency += fmt.Sprintf(" (of its %s taken out of cpu)", smallUs(c.PerRequest))
		}
	}
	latency += fmt.Sprintf(" + run-queue %s + blocked %s", tenths(sp.RunqueueUs), tenths(sp.BlockedUs))
	// The parts are rounded so that the rest is a whole number of tenths.
	switch {
	case sp.UnaccountedUs >= 0.05:
		latency += fmt.Sprintf(" + %s unaccounted (its thread at other work, or the CPU held by the hypervisor)", tenths(sp.UnaccountedUs))
	case sp.UnaccountedUs <= -0.05:
		latency += fmt.Sprintf(" - %s outside the latency (the first read runs before its first byte, the last write returns after its last)",
			tenths(-sp.UnaccountedUs))
	}
	return []string{"where the time went, µs per request (means):", cpu, latency}
}

func distRow(name string, d Dist, known bool) []string {
	return []string{name, tenths(d.Mean), percentile(d.P50, known), percentile(d.P90, known), percentile(d.P99, known), tenths(d.Max)}
}

// sampleNote says that what (the percentiles, say) come from a sample of
// t's requests, and how large; "" when they come from every request, or
// there were none.
func sampleNote(t TargetSummary, what string) string {
	if t.SampledRequests == nil || t.Requests == 0 {
		return ""
	}
	return fmt.Sprintf("%s from a uniform sample of %s of %s %s", what,
		groupDigits(strconv.Itoa(*t.SampledRequests)), groupDigits(strconv.Itoa(t.Requests)),
		plural(t.Requests, "request", "requests"))
}

// ms formats a µs figure as ms.
func ms(us float64) string { return tenths(us / 1000) }

// share is " (12.3%)", part's share of whole, or "" when whole is zero.
func share(part, whole float64) string {
	if whole == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.1f%%)", 100*part/whole)
}

func tenths(x float64) string { return groupDigits(strconv.FormatFloat(x, 'f', 1, 64)) }

// smallUs formats a figure in µs to a tenth, or under 1 µs to a
// hundredth, where a tenth would hide most of it.
func smallUs(x float64) string {
	if x < 1 {
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
	return tenths(x)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// groupDigits puts a comma between each group of three digits of a decimal
// number's integer part: "-1234567.5" becomes "-1,234,567.5".
func groupDigits(number string) string {
	sign, digits := "", number
	if strings.HasPrefix(digits, "-") {
		sign, digits = "-", digits[1:]
	}
	whole, fraction, _ := strings.Cut(digits, ".")
	if fraction != "" {
		fraction = "." + fraction
	}
	var grouped strings.Builder
	for i, d := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			grouped.WriteByte(',')
		}
		grouped.WriteRune(d)
	}
	return sign + grouped.String() + fraction
}

// printable replaces control characters, so a process that puts terminal
// escape sequences in its comm cannot play them on the reader's terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return unicode.ReplacementChar
	}, s)
}

// writeOverhead is the footer that says what reqprof itself cost.
func writeOverhead(b *bytes.Buffer, o *OverheadSummary, windowS float64) {
	if o == nil {
		return
	}
	b.WriteString("\n")
	for _, line := range overheadLines(o, windowS) {
		b.WriteString(line + "\n")
	}
	if w := otherReqprofsWarning(o); w != "" {
		b.WriteString("WARNING: " + w + "\n")
	}
}

// otherReqprofsWarning says that other reqprofs' programs ran on the
// targets' threads too, when they did.
func otherReqprofsWarning(o *OverheadSummary) string {
	switch {
	case o.OtherReqprofs == 1:
		return "another reqprof was loaded during the window: the targets' threads ran its programs too, and their CPU figures include that cost"
	case o.OtherReqprofs > 1:
		return fmt.Sprintf("%d other reqprofs were loaded during the window: the targets' threads ran their programs too, and their CPU figures include that cost", o.OtherReqprofs)
	}
	return ""
}

// overheadLines say what reqprof itself cost the whole machine over a
// window of windowS seconds (0: unknown), under a title line, for the
// terminal and the page alike.
func overheadLines(o *OverheadSummary, windowS float64) []string {
	title := "reqprof's own cost on the whole machine"
	if windowS > 0 {
		title += " over the " + tenths(windowS) + " s window"
	}
	return []string{title + ":", "  " + bpfCostText(o),
		fmt.Sprintf("  its collector (user space): %s ms of CPU, %s MB peak memory", ms(o.CollectorCPUUs), tenths(o.CollectorMaxRSSMB))}
}

// bpfCostText says what the programs cost, and from which statistics.
func bpfCostText(o *OverheadSummary) string {
	const what = "its BPF programs, for every process's events on every CPU (not only the targets')"
	if o.BPFCPUUs == nil {
		reason := o.BPFUnknown
		if reason == "" {
			reason = "no BPF statistics"
		}
		return fmt.Sprintf("%s: run time unknown (%s)", what, reason)
	}
	var b strings.Builder
	b.WriteString(what)
	sampled := o.BPFStatsSampledS != nil && o.BPFStatsSampledRequests != nil
	if sampled {
		fmt.Fprintf(&b, ", timed over %s s of the window", tenths(*o.BPFStatsSampledS))
	}
	b.WriteString(": ")
	var parts []string
	switch {
	case o.BPFNsPerRequest != nil && sampled:
		n := *o.BPFStatsSampledRequests
		parts = append(parts, fmt.Sprintf("%s µs per request finished meanwhile (%s %s)", smallUs(*o.BPFNsPerRequest/1000),
			groupDigits(strconv.FormatUint(n, 10)), plural(int(min(n, 2)), "request", "requests")))
	case o.BPFNsPerRequest != nil:
		parts = append(parts, fmt.Sprintf("%s µs per request finished", smallUs(*o.BPFNsPerRequest/1000)))
	case sampled:
		parts = append(parts, "no request finished meanwhile")
	}
	if o.BPFNsPerRun != nil {
		parts = append(parts, tenths(*o.BPFNsPerRun)+" ns a program run")
	}
	total := ms(*o.BPFCPUUs) + " ms of CPU over the whole window"
	if sampled {
		total += ", scaled by time"
	}
	parts = append(parts, total)
	b.WriteString(strings.Join(parts, "; "))
	return b.String()
}

// writePerBurst says how many requests were counted one per burst of their
// connection, and why, most first.
func writePerBurst(b *bytes.Buffer, perBurst map[string]uint64) {
	if len(perBurst) == 0 {
		return
	}
	reasons := slices.SortedFunc(maps.Keys(perBurst), func(x, y string) int {
		return cmp.Or(cmp.Compare(perBurst[y], perBurst[x]), strings.Compare(x, y))
	})
	var total uint64
	parts := make([]string, len(reasons))
	for i, why := range reasons {
		total += perBurst[why]
		parts[i] = fmt.Sprintf("%s: %s", printable(why), groupDigits(strconv.FormatUint(perBurst[why], 10)))
	}
	fmt.Fprintf(b, "counted one per burst of their connection, its bytes not followed: %s %s (%s)\n",
		groupDigits(strconv.FormatUint(total, 10)), plural(int(total), "request", "requests"), strings.Join(parts, "; "))
}

// ownTakenOut says t's figures are net of reqprof's own cost.
func ownTakenOut(t TargetSummary) bool { return t.SelfCostUs != nil && t.SelfCostUs.TakenOut }

// selfCostLine says what reqprof's own cost was in a target's requests,
// whether it was taken out of their figures, and what it rests on: each
// run of its programs counted, costed at the time measured for its kind
// (while the BPF statistics were kept, o's sample of a window of windowS
// seconds); with the spread the collector stated, when it did.
func selfCostLine(t TargetSummary, o *OverheadSummary, windowS float64) string {
	c := t.SelfCostUs
	if c == nil || t.Requests == 0 {
		return ""
	}
	cost := smallUs(c.PerRequest)
	basis := "its programs' run time in this process's threads: each run counted, costed at the time measured for its kind"
	// A run saved by a build that stated no spread has neither figure.
	stated := c.PerRequestSpread > 0 || c.TimingSamples > 0
	if stated {
		cost += " ± " + smallUs(c.PerRequestSpread)
	}
	switch {
	case o == nil || o.BPFCPUUs == nil:
	case o.BPFStatsSampledS != nil && windowS > 0:
		basis += fmt.Sprintf(" over %s s of the %s s window", tenths(*o.BPFStatsSampledS), tenths(windowS))
	case o.BPFStatsSampledS != nil:
		basis += fmt.Sprintf(" over %s s of the window", tenths(*o.BPFStatsSampledS))
	default:
		basis += " over the whole window"
	}
	switch {
	case !stated:
	case c.TimingSamples >= 2:
		basis += fmt.Sprintf("; ± is one standard error, from the calibration of a program's entry and the spread of %d samples of its run time", c.TimingSamples)
	default:
		basis += "; ± is one standard error of the calibration of a program's entry alone: its run time was timed in fewer than two samples, so their spread is not known"
	}
	if c.TakenOut {
		return fmt.Sprintf("reqprof's own cost, taken out of the figures above: %s µs per request (%s); --gross keeps it in", cost, basis)
	}
	return fmt.Sprintf("reqprof's own cost, kept in the figures above (--gross): %s µs per request (%s)", cost, basis)
}
