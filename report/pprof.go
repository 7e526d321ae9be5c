package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	pprof "github.com/google/pprof/profile"

	"github.com/reqprof/reqprof/profile"
)

// Labels every pprof sample carries, so that `go tool pprof -tagfocus
// route=...` shows one route, and -tagfocus mode=kernel the kernel's part.
const (
	pprofTarget = "target"
	pprofRoute  = "route"
	pprofMode   = "mode"
)

// WritePprof writes the stack samples of runs (the windows of one
// reqprof run) as one pprof profile: samples and CPU nanoseconds of each
// stack, labelled with its target, its route (as by groups requests) and
// its mode, user or kernel. It fails when no target has stack samples.
func WritePprof(w io.Writer, runs []profile.Run, by GroupBy) error {
	p, err := pprofOf(runs, by)
	if err != nil {
		return err
	}
	if err := p.Write(w); err != nil {
		return fmt.Errorf("report: writing the pprof profile: %w", err)
	}
	return nil
}

// pprofBuilder interns a profile's mappings, functions and locations.
type pprofBuilder struct {
	p         *pprof.Profile
	mappings  map[pprofMappingKey]*pprof.Mapping
	functions map[pprofFunctionKey]*pprof.Function
	locations map[profile.Frame]*pprof.Location
}

type pprofFunctionKey struct {
	name, file string
	startLine  int
}

type pprofMappingKey struct {
	file                 string
	start, limit, offset uint64
	buildID              string
}

func pprofOf(runs []profile.Run, by GroupBy) (*pprof.Profile, error) {
	b := &pprofBuilder{
		p: &pprof.Profile{
			SampleType:        []*pprof.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
			PeriodType:        &pprof.ValueType{Type: "cpu", Unit: "nanoseconds"},
			DefaultSampleType: "cpu",
		},
		mappings:  map[pprofMappingKey]*pprof.Mapping{},
		functions: map[pprofFunctionKey]*pprof.Function{},
		locations: map[profile.Frame]*pprof.Location{},
	}
	sampled := false
	for i, run := range runs {
		if i == 0 && !run.Meta.StartedAt.IsZero() {
			b.p.TimeNanos = run.Meta.StartedAt.UnixNano()
		}
		b.p.DurationNanos += int64(run.Duration)
		for _, t := range run.Targets {
			if t.Stacks == nil {
				continue
			}
			sampled = true
			b.p.Period = int64(t.Stacks.PeriodNs)
			b.addTarget(t, by)
		}
	}
	if !sampled {
		return nil, fmt.Errorf("report: no stack samples to write (profile with --stacks)")
	}
	if err := b.p.CheckValid(); err != nil {
		return nil, fmt.Errorf("report: building the pprof profile: %w", err)
	}
	return b.p, nil
}

func (b *pprofBuilder) addTarget(t profile.Target, by GroupBy) {
	st := t.Stacks
	target := targetName(t)
	for _, note := range st.Notes {
		b.p.Comments = append(b.p.Comments, target+": "+note)
	}
	for _, sample := range st.Samples {
		locs := make([]*pprof.Location, len(sample.Frames))
		for i, index := range sample.Frames {
			locs[i] = b.location(st.Frames[index])
		}
		mode := "user"
		if sample.Kernel {
			mode = "kernel"
		}
		b.p.Sample = append(b.p.Sample, &pprof.Sample{
			Location: locs,
			Value:    []int64{int64(sample.Count), int64(sample.Count * st.PeriodNs)},
			Label: map[string][]string{
				pprofTarget: {target},
				pprofRoute:  {stackRoute(sample.Route, by, nil)},
				pprofMode:   {mode},
			},
		})
	}
}

// targetName names a target in labels and folded stacks: its label, else
// its command and pid.
func targetName(t profile.Target) string {
	if t.Label != "" {
		return t.Label
	}
	return t.Comm + " (" + strconv.Itoa(t.PID) + ")"
}

func (b *pprofBuilder) location(f profile.Frame) *pprof.Location {
	if loc, ok := b.locations[f]; ok {
		return loc
	}
	loc := &pprof.Location{ID: uint64(len(b.p.Location) + 1), Address: f.Address, Mapping: b.mapping(f)}
	if f.Function != "" {
		loc.Line = []pprof.Line{{Function: b.function(f.Function, f.File, f.FunctionLine), Line: int64(f.Line)}}
	} else {
		// pprof shows a location without a function by its address: a
		// name says where it is ("libfoo.so+0x1a2b").
		loc.Line = []pprof.Line{{Function: b.function(f.Name(), "", 0)}}
	}
	b.p.Location = append(b.p.Location, loc)
	b.locations[f] = loc
	return loc
}

// function is the profile's function of that name in file, beginning at
// startLine (0 when unknown).
func (b *pprofBuilder) function(name, file string, startLine int) *pprof.Function {
	key := pprofFunctionKey{name, file, startLine}
	if fn, ok := b.functions[key]; ok {
		return fn
	}
	fn := &pprof.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: name, Filename: file, StartLine: int64(startLine)}
	b.p.Function = append(b.p.Function, fn)
	b.functions[key] = fn
	return fn
}

func (b *pprofBuilder) mapping(f profile.Frame) *pprof.Mapping {
	if f.Module == "" || f.Interpreted() {
		return nil // an interpreted function is no place in a file mapped
	}
	key := pprofMappingKey{file: f.Module, start: f.MappingStart, limit: f.MappingLimit, offset: f.MappingOffset, buildID: f.BuildID}
	if m, ok := b.mappings[key]; ok {
		return m
	}
	m := &pprof.Mapping{
		ID: uint64(len(b.p.Mapping) + 1), Start: f.MappingStart, Limit: f.MappingLimit, Offset: f.MappingOffset,
		File: f.Module, BuildID: f.BuildID, HasFunctions: true,
	}
	b.p.Mapping = append(b.p.Mapping, m)
	b.mappings[key] = m
	return m
}

// WriteFolded writes the stack samples of runs as folded stacks, the
// format flame graph tools read: a line per stack, its frames root first
// separated by ";", then a space and its samples. The route is the root
// frame; with several targets, the target's name comes above it. Kernel
// frames end in "_[k]". Lines are sorted, so the output depends on the
// samples only.
func WriteFolded(w io.Writer, runs []profile.Run, by GroupBy) error {
	counts := map[string]uint64{}
	targets := map[string]bool{}
	for _, run := range runs {
		for _, t := range run.Targets {
			if t.Stacks != nil {
				targets[targetName(t)] = true
			}
		}
	}
	if len(targets) == 0 {
		return fmt.Errorf("report: no stack samples to write (profile with --stacks)")
	}
	var line strings.Builder
	for _, run := range runs {
		for _, t := range run.Targets {
			if t.Stacks == nil {
				continue
			}
			folded, _ := foldStacks(t.Stacks, func(key profile.RouteKey) string { return stackRoute(key, by, nil) }, 0)
			for _, f := range folded {
				line.Reset()
				if len(targets) > 1 {
					line.WriteString(foldedFrame(targetName(t)) + ";")
				}
				line.WriteString(foldedFrame(f.Route))
				for _, name := range f.Frames {
					line.WriteString(";" + foldedFrame(name))
				}
				counts[line.String()] += f.Samples
			}
		}
	}
	lines := make([]string, 0, len(counts))
	for l := range counts {
		lines = append(lines, l)
	}
	slices.SortFunc(lines, func(a, b string) int { return cmp.Compare(a, b) })
	var out strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&out, "%s %d\n", l, counts[l])
	}
	if _, err := io.WriteString(w, out.String()); err != nil {
		return fmt.Errorf("report: writing folded stacks: %w", err)
	}
	return nil
}

// foldedFrame is a name as one frame of a folded line: no ";" (which
// separates frames) and nothing unprintable.
func foldedFrame(name string) string {
	return strings.ReplaceAll(printable(name), ";", ":")
}
