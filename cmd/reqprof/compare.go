package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/reqprof/reqprof/report"
)

// compare sets side by side the targets of runs saved with --json, in the
// order given: the first target of the first file is the baseline. It says
// where the runs may not compare, and how much each target's CPU per request
// moved between runs when a label recurs.
func compare(args []string, stdout, stderr io.Writer) error {
	c := newCommand("compare", "reqprof compare [flags] RUN.json...",
		"Sets the targets of runs saved with attach --json side by side, in the order given: "+
			"the first target of the first file is the baseline. It warns when the runs were taken "+
			"on different hosts, kernels or reqprof builds, and gives the run-to-run spread of a label that recurs. "+
			"Flags may come before or after the files.")
	floor := c.String("floor", "", "`N|LABEL` the floor, a bare server the others are measured above: its number, counted from 0 over all files' targets, or its label")
	jsonPath := c.String("json", "", "`FILE` also write the combined result as JSON to FILE (-: to stdout, instead of the tables)")
	htmlPath := c.String("html", "", "`FILE` also write the combined result as a self-contained page to FILE")
	paths, err := parseInterspersed(c.FlagSet, args)
	if err := c.checkParse(err, stdout); err != nil {
		return err
	}
	for _, out := range []struct{ flag, path string }{{"--json", *jsonPath}, {"--html", *htmlPath}} {
		if err := checkOutput(out.flag, out.path); err != nil {
			return err
		}
	}
	if len(paths) == 0 {
		return badInput("compare needs a run saved with attach --json FILE")
	}

	sources := make([]report.Source, 0, len(paths))
	for _, path := range paths {
		s, err := readSummary(path)
		if err != nil {
			return err
		}
		sources = append(sources, report.Source{Name: path, Summary: s})
	}
	combined := report.Combine(sources)
	var opts report.CompareOptions
	if *floor != "" {
		if opts.Floor, err = findFloor(*floor, combined.Targets); err != nil {
			return inputError{err}
		}
		opts.WithFloor = true
	}
	if combined.Comparison, err = report.Compare(combined, opts); err != nil {
		return err
	}

	if *jsonPath != "-" {
		if err := writeComparisonTables(stdout, sources, combined, opts); err != nil {
			return err
		}
	}
	if *htmlPath != "" {
		if err := writeFile(*htmlPath, func(w io.Writer) error { return report.WriteHTML(w, combined) }); err != nil {
			return err
		}
	}
	switch *jsonPath {
	case "":
		return nil
	case "-":
		return report.WriteJSON(stdout, combined)
	}
	return writeFile(*jsonPath, func(w io.Writer) error { return report.WriteJSON(w, combined) })
}

// parseInterspersed parses flags wherever they are among the positional
// arguments, which it returns in order: people add --floor after the files
// as often as before. Everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// readSummary reads the run saved in path. Its errors name the file and
// what is wrong with it, in one line.
func readSummary(path string) (report.Summary, error) {
	f, err := os.Open(path)
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return report.Summary{}, badInput("%s: %v", path, pathErr.Err)
	}
	if err != nil {
		return report.Summary{}, badInput("%s: %v", path, err)
	}
	defer f.Close()
	s, err := report.ReadJSON(f)
	if errors.As(err, &pathErr) {
		return report.Summary{}, badInput("%s: %v", path, pathErr.Err)
	}
	if err != nil {
		return report.Summary{}, badInput("%s: %v", path, err)
	}
	return s, nil
}

// findFloor is the index of the target that spec names: a number counts
// from 0 over all targets, anything else must be the label of exactly one.
func findFloor(spec string, targets []report.TargetSummary) (int, error) {
	if n, err := strconv.Atoi(spec); err == nil {
		if n < 0 || n >= len(targets) {
			return 0, fmt.Errorf("--floor %d: there are %d targets, counted from 0", n, len(targets))
		}
		return n, nil
	}
	var found []int
	var labels []string
	for i, t := range targets {
		if t.Label == spec {
			found = append(found, i)
		}
		if t.Label != "" {
			labels = append(labels, strconv.Quote(t.Label))
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return 0, fmt.Errorf("--floor %q: no target has that label (labels: %s)", spec, strings.Join(labels, ", "))
	}
	return 0, fmt.Errorf("--floor %q: %d targets have that label: give the floor's number instead", spec, len(found))
}

// writeComparisonTables prints which target came from where, the
// comparison, and the run-to-run spread when a target recurs.
func writeComparisonTables(w io.Writer, sources []report.Source, combined report.Summary, opts report.CompareOptions) error {
	if err := report.WriteSources(w, sources); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := report.WriteComparison(w, combined, opts); err != nil {
		return err
	}
	if len(combined.Spread) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	return report.WriteSpread(w, combined.Spread)
}

// writeFile creates path and has write fill it.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
