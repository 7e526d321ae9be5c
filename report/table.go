package report

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
)

// WriteTable writes s for people: one block per target, blocks separated by
// a blank line. The output depends only on s, never on the terminal or the
// locale, so it can be compared byte for byte.
func WriteTable(w io.Writer, s Summary) error {
	var b bytes.Buffer
	if len(s.Targets) == 0 {
		b.WriteString("no targets\n")
	}
	for i, t := range s.Targets {
		if i > 0 {
			b.WriteString("\n")
		}
		if err := writeTarget(&b, t, s.DurationS); err != nil {
			return err
		}
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("report: writing table: %w", err)
	}
	return nil
}

func writeTarget(b *bytes.Buffer, t TargetSummary, durationS float64) error {
	fmt.Fprintf(b, "pid %d (%s)", t.PID, printable(t.Comm))
	if t.Label != "" {
		fmt.Fprintf(b, " %q", t.Label)
	}
	fmt.Fprintf(b, " — %s %s in %s s (%s req/s)\n",
		groupDigits(strconv.Itoa(t.Requests)), plural(t.Requests, "request", "requests"),
		tenths(durationS), tenths(t.RequestsPerS))

	if t.Requests == 0 {
		b.WriteString("no finished requests\n")
	} else if err := writeDistTable(b, t); err != nil {
		return err
	}

	fmt.Fprintf(b, "CPU seen: %s ms = attributed %s ms%s + unattributed %s ms%s",
		ms(t.ProcessCPUUs),
		ms(t.AttributedCPUUs), share(t.AttributedCPUUs, t.ProcessCPUUs),
		ms(t.UnattributedCPUUs), share(t.UnattributedCPUUs, t.ProcessCPUUs))
	if t.BetweenRequestsCPUUs > 0 {
		fmt.Fprintf(b, ", of which between requests %s ms", ms(t.BetweenRequestsCPUUs))
	}
	if t.SchedCPUUs > 0 {
		fmt.Fprintf(b, "; kernel accounting %s ms (reqprof saw %.2f%%)",
			ms(t.SchedCPUUs), 100*t.ProcessCPUUs/t.SchedCPUUs)
	}
	b.WriteString("\n")

	if t.Requests > 0 {
		fmt.Fprintf(b, "bytes per request: in %s, out %s\n",
			groupDigits(strconv.FormatFloat(t.BytesInPerRequest, 'f', 0, 64)),
			groupDigits(strconv.FormatFloat(t.BytesOutPerRequest, 'f', 0, 64)))
	}
	if t.UnfinishedRequests > 0 || t.UnfinishedCPUUs > 0 {
		fmt.Fprintf(b, "unfinished requests: %s, %s ms of CPU (attributed, not in the distributions)\n",
			groupDigits(strconv.Itoa(t.UnfinishedRequests)), ms(t.UnfinishedCPUUs))
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

func writeDistTable(w io.Writer, t TargetSummary) error {
	// Columns of numbers read best right-aligned, under right-aligned heads.
	align := tw.CellAlignment{PerColumn: []tw.Align{
		tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight,
	}}
	table := tablewriter.NewTable(w,
		// Keep heads as written: lower case, like the JSON keys.
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignmentConfig(align),
		tablewriter.WithRowAlignmentConfig(align),
	)
	table.Header("µs", "mean", "p50", "p90", "p99", "max")
	rows := [][]string{
		distRow("cpu", t.CPUUs),
		distRow("user", t.UserUs),
		distRow("kernel", t.KernelUs),
	}
	if err := table.Bulk(rows); err != nil {
		return fmt.Errorf("report: building table: %w", err)
	}
	if err := table.Render(); err != nil {
		return fmt.Errorf("report: rendering table: %w", err)
	}
	return nil
}

func distRow(name string, d Dist) []string {
	return []string{name, tenths(d.Mean), tenths(d.P50), tenths(d.P90), tenths(d.P99), tenths(d.Max)}
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
