package report

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
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
	writeOverhead(&b, s.Overhead)
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
	if line := selfCostLine(t); line != "" {
		b.WriteString(line + "\n")
	}
	writeClients(b, t)
	writeBackends(b, t)
	if err := writeStacks(b, t.Stacks); err != nil {
		return err
	}

	b.WriteString(cpuSeenLine(t) + "\n")
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
	if err := writeTextTable(b, header, rows, numbersAlign(len(header))); err != nil {
		return err
	}
	if line := sampleNote(t, "percentiles"); line != "" {
		b.WriteString(line + "\n")
	}
	if line := timeSplit(t); line != "" {
		b.WriteString(line + "\n")
	}
	if line := setupLine(t); line != "" {
		b.WriteString(line + "\n")
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

// cpuSeenLine sets all the CPU reqprof saw t's threads use, attributed to
// requests or not, against the kernel's own accounting.
func cpuSeenLine(t TargetSummary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CPU seen: %s ms = attributed %s ms%s",
		ms(t.ProcessCPUUs), ms(t.AttributedCPUUs), share(t.AttributedCPUUs, t.ProcessCPUUs))
	if t.BetweenRequestsCPUUs > 0 {
		fmt.Fprintf(&b, " (of which %s ms in the server's loop after responses)", ms(t.BetweenRequestsCPUUs))
	}
	fmt.Fprintf(&b, " + unattributed %s ms%s", ms(t.UnattributedCPUUs), share(t.UnattributedCPUUs, t.ProcessCPUUs))
	if t.SchedCPUUs > 0 {
		seen, own := t.ProcessCPUUs, ""
		if t.SeenCPUUs > 0 {
			seen = t.SeenCPUUs
		}
		if seen > t.ProcessCPUUs {
			own = fmt.Sprintf(", %s ms of it its own cost", ms(seen-t.ProcessCPUUs))
		}
		fmt.Fprintf(&b, "; kernel accounting %s ms (reqprof saw %.2f%%%s)",
			ms(t.SchedCPUUs), 100*seen/t.SchedCPUUs, own)
	}
	if t.AllInPerRequestUs > 0 {
		fmt.Fprintf(&b, "; all-in %s µs per request", tenths(t.AllInPerRequestUs))
	}
	if t.StealUs > 0 {
		fmt.Fprintf(&b, "; hypervisor steal left out %s ms", ms(t.StealUs))
	}
	return b.String()
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
	return fmt.Sprintf("threads waited, in requests or not: %s ms on a run queue, %s ms blocked",
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

// timePart is a part of a request's wall time.
type timePart struct {
	name string
	us   float64
}

// timeSplit says where a mean request's wall time went, as shares of its
// mean latency, or "" when the summary has no latency. Wall time its
// thread spent neither on it, nor waiting for a CPU or blocked while
// serving it, is unaccounted: such as serving other requests meanwhile.
func timeSplit(t TargetSummary) string {
	if t.LatencyUs == nil || t.RunqueueUs == nil || t.OffCPUUs == nil || t.LatencyUs.Mean <= 0 {
		return ""
	}
	latency := t.LatencyUs.Mean
	parts := []timePart{
		{"user", t.UserUs.Mean}, {"kernel", t.KernelUs.Mean},
		{"run-queue", t.RunqueueUs.Mean}, {"blocked", t.OffCPUUs.Mean},
	}
	var accounted float64
	for _, p := range parts {
		accounted += p.us
	}
	// Below 0.05 µs the remainder is the parts' rounding.
	if rest := latency - accounted; rest >= 0.05 {
		parts = append(parts, timePart{"unaccounted", rest})
	}
	shares := make([]string, len(parts))
	for i, p := range parts {
		shares[i] = fmt.Sprintf("%s %.1f%%", p.name, 100*p.us/latency)
	}
	return "where the time went: " + strings.Join(shares, " + ") + " of " + tenths(latency) + " µs mean latency"
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
func writeOverhead(b *bytes.Buffer, o *OverheadSummary) {
	if o == nil {
		return
	}
	b.WriteString("\nreqprof's own cost: " + overheadText(o) + "\n")
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

// overheadText says what reqprof itself cost, for the terminal and the
// page alike.
func overheadText(o *OverheadSummary) string {
	var b bytes.Buffer
	if o.BPFCPUUs == nil {
		reason := o.BPFUnknown
		if reason == "" {
			reason = "no BPF statistics"
		}
		fmt.Fprintf(&b, "BPF run time unknown (%s)", reason)
	} else {
		writeBPFCost(&b, o)
	}
	fmt.Fprintf(&b, "; collector %s ms CPU, %s MB peak memory", ms(o.CollectorCPUUs), tenths(o.CollectorMaxRSSMB))
	return b.String()
}

// writeBPFCost says what the programs cost, and from which statistics.
func writeBPFCost(b *bytes.Buffer, o *OverheadSummary) {
	fmt.Fprintf(b, "BPF %s ms", ms(*o.BPFCPUUs))
	sampled := o.BPFStatsSampledS != nil && o.BPFStatsSampledRequests != nil
	if sampled {
		fmt.Fprintf(b, " over the window, scaled from BPF statistics kept %s s of it", tenths(*o.BPFStatsSampledS))
	}
	var notes []string
	switch {
	case o.BPFNsPerRequest != nil && sampled:
		n := *o.BPFStatsSampledRequests
		fmt.Fprintf(b, " = %s ns per request finished meanwhile", tenths(*o.BPFNsPerRequest))
		notes = append(notes, groupDigits(strconv.FormatUint(n, 10))+" "+plural(int(min(n, 2)), "request", "requests"))
	case o.BPFNsPerRequest != nil:
		fmt.Fprintf(b, " = %s ns per finished request", tenths(*o.BPFNsPerRequest))
	case sampled:
		notes = append(notes, "no request finished meanwhile")
	}
	if o.BPFNsPerRun != nil {
		notes = append(notes, tenths(*o.BPFNsPerRun)+" ns per program run")
	}
	if len(notes) > 0 {
		fmt.Fprintf(b, " (%s)", strings.Join(notes, "; "))
	}
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

// selfCostLine says what reqprof's own cost was in a target's requests,
// and whether it was taken out of their figures.
func selfCostLine(t TargetSummary) string {
	c := t.SelfCostUs
	if c == nil || t.Requests == 0 {
		return ""
	}
	if c.TakenOut {
		return fmt.Sprintf("reqprof's own cost taken out: %.2f µs per request (--gross to keep it)", c.PerRequest)
	}
	return fmt.Sprintf("reqprof's own cost kept in (--gross): %.2f µs per request", c.PerRequest)
}
