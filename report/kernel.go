package report

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/reqprof/reqprof/profile"
)

// breakdownPerRequest turns a target's kernel time by cause, summed over
// its n > 0 finished requests, into means per request: the µs of every
// cause, and the calls of every cause that counts them. Each is nil when
// it would be empty, as an empty map is absent from the JSON, whose keys
// are the causes' names.
func breakdownPerRequest(sums map[profile.Cause]profile.KernelCost, n int) (us, calls map[string]float64) {
	for cause, c := range sums {
		if c.Ns == 0 && c.Calls == 0 {
			continue
		}
		if us == nil {
			us = map[string]float64{}
		}
		us[cause.String()] = roundTenth(float64(c.Ns) / float64(n) / 1000)
		if c.Calls > 0 {
			if calls == nil {
				calls = map[string]float64{}
			}
			// A syscall made once in a hundred requests still shows.
			calls[cause.String()] = roundHundredth(float64(c.Calls) / float64(n))
		}
	}
	return us, calls
}

// roundHundredth rounds to two decimal places, printing as cleanly as
// roundTenth.
func roundHundredth(x float64) float64 { return math.Round(x*100) / 100 }

// Names kernel cost tables give two rows that would both read "other": a
// request's syscalls of kinds past those its record has room to name
// ("syscall:other" in the JSON), and the smallest causes folded into one row.
const (
	otherSyscallsCause = "syscall:other"
	otherSyscallsRow   = "other syscalls"
	foldedRowFormat    = "(rest: %d causes)"
)

// causeRow is how a table shows the cause named cause in the JSON.
func causeRow(cause string) string {
	if cause == otherSyscallsCause {
		return otherSyscallsRow
	}
	return cause
}

// kernelCost is one row of a kernel cost table: a cause, or the causes
// folded into one.
type kernelCost struct {
	cause string
	us    float64 // mean per request
	calls float64 // mean per request
	// counted is whether calls was measured: never for softirqs and irqs.
	counted bool
}

// A folded table keeps the largest causes until they make up
// foldCoveragePercent of the kernel time, or there are maxKernelRows of
// them, and folds the rest into one row: the long tail is one syscall
// made now and then, each too small to matter.
const (
	foldCoveragePercent = 95
	maxKernelRows       = 10
)

// kernelCosts are t's kernel costs per request, largest first and ties by
// name, with the tail folded unless all; and the kernel time they add up
// to, from which each row's share is taken.
func kernelCosts(t TargetSummary, all bool) (rows []kernelCost, totalUs float64) {
	for _, cause := range slices.Sorted(maps.Keys(t.KernelBreakdownUs)) {
		calls, counted := t.KernelBreakdownCalls[cause]
		rows = append(rows, kernelCost{cause: causeRow(cause), us: t.KernelBreakdownUs[cause], calls: calls, counted: counted})
	}
	// Stable, so that ties stay in the order of their names.
	slices.SortStableFunc(rows, func(a, b kernelCost) int { return cmp.Compare(b.us, a.us) })
	for _, r := range rows {
		totalUs += r.us
	}
	if all {
		return rows, totalUs
	}
	kept := len(rows)
	var covered float64
	for i, r := range rows {
		if i == maxKernelRows || covered >= totalUs*foldCoveragePercent/100 {
			kept = i
			break
		}
		covered += r.us
	}
	// Folding a single cause would hide its name and save no row.
	if kept >= len(rows)-1 {
		return rows, totalUs
	}
	folded := kernelCost{cause: fmt.Sprintf(foldedRowFormat, len(rows)-kept)}
	for _, r := range rows[kept:] {
		folded.us += r.us
		folded.calls += r.calls
		folded.counted = folded.counted || r.counted
	}
	return append(rows[:kept], folded), totalUs
}

// kernelCostCells lays out t's kernel costs as the cells of a table with a
// row per cause, for the terminal and the page alike; no rows when t has
// no kernel time by cause.
func kernelCostCells(t TargetSummary, all bool) (header []string, rows [][]string) {
	costs, totalUs := kernelCosts(t, all)
	if t.Requests == 0 || totalUs <= 0 {
		return nil, nil
	}
	for _, c := range costs {
		calls := ""
		if c.counted {
			calls = hundredths(c.calls)
		}
		rows = append(rows, []string{c.cause, tenths(c.us), calls, fmt.Sprintf("%.1f%%", 100*c.us/totalUs)})
	}
	return []string{"kernel cost", "µs", "calls", "share"}, rows
}

// kernelCostTitle says what kernel cost tables hold, and what each syscall
// includes when the run measured it.
func kernelCostTitle(syscallEntryNs uint64) string {
	title := "kernel cost per request, by cause"
	if syscallEntryNs > 0 {
		title += fmt.Sprintf("; each syscall includes %s ns of entry and exit", groupDigits(strconv.FormatUint(syscallEntryNs, 10)))
	}
	return title
}

// topKernelCost phrases t's rank-th largest kernel cost (from 0) for the
// comparison: "syscall:write 12.3 µs"; "" when it has fewer causes.
func topKernelCost(t TargetSummary, rank int) string {
	costs, _ := kernelCosts(t, true)
	if rank >= len(costs) {
		return ""
	}
	return costs[rank].cause + " " + tenths(costs[rank].us) + " µs"
}

func hundredths(x float64) string { return groupDigits(strconv.FormatFloat(x, 'f', 2, 64)) }
