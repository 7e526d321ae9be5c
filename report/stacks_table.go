package report

import (
	"bytes"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/reqprof/reqprof/profile"
)

// A terminal shows at most this many routes' hot paths and functions of
// each; the JSON, the page and the pprof file have the rest.
const (
	maxStackTableRoutes    = 8
	maxStackTableFunctions = 8
	maxFunctionNameRunes   = 60
)

// stacksTitle says what hot-path tables hold. ownTakenOut: the mean cpu
// the shares are valued at is net of reqprof's own cost, which the
// samples catch all the same.
func stacksTitle(s *StacksSummary, ownTakenOut bool) string {
	title := fmt.Sprintf("where the CPU goes, from %s stack samples at %d Hz a CPU: "+
		"µs per request, a function's share of its route's samples times the route's mean cpu; "+
		"self: sampled in it, total: with it on the stack",
		groupDigits(strconv.FormatUint(s.Samples, 10)), s.Hz)
	if ownTakenOut {
		title += "; the samples catch reqprof's own programs too (bpf_ frames), which the mean cpu leaves out"
	}
	return title
}

// noStackSamples says a target sampled for its stacks had none: its
// threads were never on a CPU when its clock ticked.
const noStackSamples = "stacks: no samples of this target's threads"

// writeStacks writes a target's hot paths, one table per route.
func writeStacks(b *bytes.Buffer, s *StacksSummary, ownTakenOut bool) error {
	if s == nil {
		return nil
	}
	if s.Samples == 0 {
		b.WriteString(noStackSamples + "\n")
		writeStackNotes(b, s)
		return nil
	}
	b.WriteString(stacksTitle(s, ownTakenOut) + "\n")
	shown := 0
	for _, r := range s.Routes {
		pseudo := r.CPUUsPerRequest == nil
		if !pseudo {
			if shown == maxStackTableRoutes {
				continue
			}
			shown++
		}
		b.WriteString(routeStacksLine(r) + "\n")
		header, rows := hotFunctionCells(r)
		if err := writeTextTable(b, header, rows, numbersAlign(len(header))); err != nil {
			return err
		}
	}
	if more := countRequestRoutes(s.Routes) - shown; more > 0 {
		fmt.Fprintf(b, "(%d more %s with samples: in --json, --html and --pprof)\n", more, plural(more, "route", "routes"))
	}
	writeStackNotes(b, s)
	return nil
}

func countRequestRoutes(routes []RouteStacks) int {
	n := 0
	for _, r := range routes {
		if r.CPUUsPerRequest != nil {
			n++
		}
	}
	return n
}

// routeStacksLine heads a route's table: what its figures rest on.
func routeStacksLine(r RouteStacks) string {
	samples := groupDigits(strconv.FormatUint(r.Samples, 10)) + " " + plural(int(min(r.Samples, 2)), "sample", "samples")
	kernel := fmt.Sprintf("%.1f%% in the kernel", 100*r.KernelShare)
	if r.CPUUsPerRequest == nil {
		what := "threads serving no request"
		if r.Route == profile.UnfinishedRequest {
			what = "requests not among the finished (begun before the window, or not finished in it)"
		}
		return fmt.Sprintf("%s, %s: %s, %s ms of CPU, %s; figures in ms", printable(r.Route), what, samples, tenths(*r.CPUMs), kernel)
	}
	line := fmt.Sprintf("%s: %s %s, %s, %s µs per request, %s", printable(shorten(r.Route, maxRouteNameRunes)),
		groupDigits(strconv.Itoa(r.Requests)), plural(r.Requests, "request", "requests"), samples, tenths(*r.CPUUsPerRequest), kernel)
	if r.Samples < minTrustedSamples {
		line += fmt.Sprintf(" (under %d samples: rough)", minTrustedSamples)
	}
	return line
}

// minTrustedSamples is how many samples a route needs before its shares
// are said without a caution: at 100, a share's standard error is at most
// 5 points.
const minTrustedSamples = 100

func hotFunctionCells(r RouteStacks) (header []string, rows [][]string) {
	unit := "µs"
	if r.CPUUsPerRequest == nil {
		unit = "ms"
	}
	var selfShare float64
	for i, f := range r.Functions {
		if i == maxStackTableFunctions {
			break
		}
		selfShare += f.SelfShare
		rows = append(rows, []string{
			shortFunction(f.Function), moduleName(f), tenths(f.Self), tenths(f.Total),
			fmt.Sprintf("%.1f%%", 100*f.SelfShare),
		})
	}
	if rest := len(r.Functions) - maxStackTableFunctions; rest > 0 || selfShare < 0.9995 {
		rows = append(rows, []string{"(the rest)", "", "", "", fmt.Sprintf("%.1f%%", max(0, 100*(1-selfShare)))})
	}
	return []string{"function", "in", "self " + unit, "total " + unit, "self share"}, rows
}

// shortFunction is a function's name without its Go import path
// ("net/http.(*conn).serve" is "http.(*conn).serve"), cut to fit.
func shortFunction(name string) string {
	// The import path ends at the last slash before the first dot after
	// it; a slash inside brackets (generics) or parentheses is no path's.
	if i := strings.IndexAny(name, "[("); i >= 0 {
		if j := strings.LastIndex(name[:i], "/"); j >= 0 {
			name = name[j+1:]
		}
	} else if j := strings.LastIndex(name, "/"); j >= 0 && !strings.HasPrefix(name, "/") {
		name = name[j+1:]
	}
	return shorten(name, maxFunctionNameRunes)
}

// moduleName is where a function is: the kernel, or its binary's name.
func moduleName(f HotFunction) string {
	switch {
	case f.Kernel && f.Module == profile.KernelModule:
		return "kernel"
	case f.Kernel:
		return "kernel " + f.Module
	case f.Module == "":
		return ""
	}
	return shorten(path.Base(f.Module), 24)
}

func writeStackNotes(b *bytes.Buffer, s *StacksSummary) {
	for _, n := range s.Notes {
		fmt.Fprintf(b, "stacks: %s\n", printable(n))
	}
	if len(s.Lost) > 0 {
		var parts []string
		for _, why := range slices.Sorted(maps.Keys(s.Lost)) {
			parts = append(parts, fmt.Sprintf("%s %s", groupDigits(strconv.FormatUint(s.Lost[why], 10)), why))
		}
		fmt.Fprintf(b, "stacks: samples lost: %s\n", strings.Join(parts, ", "))
	}
}
