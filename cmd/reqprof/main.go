// Command reqprof tells how many microseconds of CPU each request costs a
// live server, split into user and kernel time.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/calserver"
	"github.com/reqprof/reqprof/profile"
	"github.com/reqprof/reqprof/report"
)

const usage = `usage:
  reqprof attach --pid PID[=LABEL] [--pid ...] [--cgroup DIR[=LABEL]] [--follow-children]
                 [--floor PID[=LABEL]] [--duration 10s] [--repeat N] [--json FILE|-] [--html FILE]
                 [--group-by route|port|none] [--syscalls] [--no-payload]
  reqprof demo   [--json FILE|-] [--html FILE]
` + compareUsage + `

attach profiles running processes until --duration passes, SIGINT/SIGTERM
arrives, or every target exits; with several --pid, the first is the
baseline the others are compared with. demo starts two bundled servers doing
the same work with different machinery, loads them and compares them. compare
sets runs saved with --json side by side. attach and demo need root (or
CAP_BPF and CAP_PERFMON) and a kernel with BTF; run with --help for all flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "attach":
		err = attach(args[1:], stdout, stderr)
	case "demo":
		err = demo(args[1:], stdout, stderr)
	case "compare":
		err = compare(args[1:], stdout, stderr)
	case demoServerCommand:
		return calserver.Main(args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = fmt.Errorf("unknown command %q (try reqprof --help)", args[0])
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "reqprof: %v\n", err)
		return 1
	}
	return 0
}

// pidFlags collects repeated --pid PID[=LABEL].
type pidFlags []collector.Target

func (p *pidFlags) String() string { return "" }

func (p *pidFlags) Set(v string) error {
	pidText, label, _ := strings.Cut(v, "=")
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return fmt.Errorf("not a pid: %q", pidText)
	}
	*p = append(*p, collector.Target{PID: pid, Label: label})
	return nil
}

// cgroupFlags collects repeated --cgroup DIR[=LABEL].
type cgroupFlags []collector.Target

func (c *cgroupFlags) String() string { return "" }

func (c *cgroupFlags) Set(v string) error {
	dir, label, _ := strings.Cut(v, "=")
	if dir == "" {
		return errors.New("empty cgroup directory")
	}
	*c = append(*c, collector.Target{Cgroup: dir, Label: label})
	return nil
}

// outputFlags are shared by every command that profiles and reports.
type outputFlags struct {
	duration     time.Duration
	jsonPath     string
	htmlPath     string
	groupBy      string
	allSyscalls  bool
	captureBytes int
	noPayload    bool
}

func (o *outputFlags) register(fs *flag.FlagSet, defaultDuration time.Duration) {
	fs.DurationVar(&o.duration, "duration", defaultDuration, "how long to profile (0: until Ctrl-C or every target exits)")
	fs.StringVar(&o.jsonPath, "json", "", "also write the result as JSON to this file (- for stdout, instead of the tables)")
	fs.StringVar(&o.htmlPath, "html", "", "also write the result as a self-contained page to this file")
	fs.StringVar(&o.groupBy, "group-by", "route", "group requests by route, port or none")
	fs.BoolVar(&o.allSyscalls, "syscalls", false, "show every syscall in the kernel cost table instead of folding the tail")
	// 512 by default: an MCP request's JSON-RPC method usually starts past
	// byte 256, behind the HTTP headers.
	fs.IntVar(&o.captureBytes, "capture-bytes", collector.MaxCaptureBytes,
		fmt.Sprintf("bytes of each request to read for naming it (1 to %d); they never leave reqprof", collector.MaxCaptureBytes))
	fs.BoolVar(&o.noPayload, "no-payload", false, "capture no request bytes: requests are named by port only")
}

func (o *outputFlags) validate() error {
	if o.captureBytes < 1 || o.captureBytes > collector.MaxCaptureBytes {
		return fmt.Errorf("--capture-bytes %d: want 1 to %d", o.captureBytes, collector.MaxCaptureBytes)
	}
	_, err := report.ParseGroupBy(o.groupBy)
	return err
}

func (o *outputFlags) config(targets []collector.Target) collector.Config {
	return collector.Config{
		Targets:      targets,
		Duration:     o.duration,
		CaptureBytes: o.captureBytes,
		NoPayload:    o.noPayload,
	}
}

func attach(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("attach", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var pids, floor pidFlags
	var out outputFlags
	fs.Var(&pids, "pid", "process to profile, PID or PID=LABEL (repeatable; the first is the baseline)")
	fs.Var(&floor, "floor", "a bare server, PID or PID=LABEL, profiled too: the others' CPU is also shown above its own")
	repeat := fs.Int("repeat", 1, "profile N windows in a row and report the spread between them")
	followChildren := fs.Bool("follow-children", false, "also profile each target's child processes, present and future (pre-fork servers: give the master)")
	var cgroups cgroupFlags
	fs.Var(&cgroups, "cgroup", "profile every process of this cgroup v2 directory as one target, CGROUP or CGROUP=LABEL (repeatable)")
	out.register(fs, 0)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	pids = append(pids, cgroups...)
	if len(pids) == 0 {
		return errors.New("attach needs --pid PID or --cgroup DIR")
	}
	if len(floor) > 1 {
		return errors.New("--floor takes one process")
	}
	if *repeat < 1 {
		return fmt.Errorf("--repeat %d: want at least 1", *repeat)
	}
	if *repeat > 1 && out.duration == 0 {
		return errors.New("--repeat needs --duration for each window")
	}
	if err := out.validate(); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	targets := append(pids, floor...)
	var runs []profile.Run
	for i := range *repeat {
		cfg := out.config(targets)
		cfg.FollowChildren = *followChildren || len(cgroups) > 0
		cfg.OnAttached = func(line string) { fmt.Fprintln(stderr, line) }
		run, err := collector.Run(ctx, cfg)
		if err != nil {
			return err
		}
		runs = append(runs, run)
		if ctx.Err() != nil && i+1 < *repeat {
			fmt.Fprintf(stderr, "reqprof: interrupted after %d of %d windows\n", i+1, *repeat)
			break
		}
	}
	return writeReport(runs, out, len(floor) > 0, stdout)
}

// writeReport prints the tables (unless JSON goes to stdout), then writes
// JSON and HTML where asked. With several targets it adds the comparison;
// with several runs, the spread between them. A floor is the last target.
func writeReport(runs []profile.Run, out outputFlags, withFloor bool, stdout io.Writer) error {
	groupBy, err := report.ParseGroupBy(out.groupBy)
	if err != nil {
		return err
	}
	var sources []report.Source
	for i, run := range runs {
		run.Meta.ReqprofVersion = version()
		sources = append(sources, report.Source{
			Name:    fmt.Sprintf("run %d", i+1),
			Summary: report.SummarizeWith(run, report.SummarizeOptions{GroupBy: groupBy}),
		})
	}
	summary := sources[0].Summary
	if len(sources) > 1 {
		summary = report.Combine(sources)
	}
	var opts report.CompareOptions
	if withFloor {
		opts = report.CompareOptions{WithFloor: true, Floor: len(summary.Targets) - 1}
	}
	if summary.Comparison, err = report.Compare(summary, opts); err != nil {
		return err
	}

	if out.jsonPath != "-" {
		if err := writeTables(stdout, sources, summary, opts, out.allSyscalls); err != nil {
			return err
		}
	}
	if out.htmlPath != "" {
		if err := writeFile(out.htmlPath, func(w io.Writer) error { return report.WriteHTML(w, summary) }); err != nil {
			return err
		}
	}
	switch out.jsonPath {
	case "":
		return nil
	case "-":
		return report.WriteJSON(stdout, summary)
	}
	return writeFile(out.jsonPath, func(w io.Writer) error { return report.WriteJSON(w, summary) })
}

// version is the VCS revision reqprof was built from, when Go recorded it.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	revision, modified := "", false
	for _, setting := range info.Settings {
		switch setting.Key {
		case "vcs.revision":
			revision = setting.Value
		case "vcs.modified":
			modified = setting.Value == "true"
		}
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	if revision != "" && modified {
		revision += "-dirty"
	}
	return revision
}

func writeTables(w io.Writer, sources []report.Source, summary report.Summary, opts report.CompareOptions, allSyscalls bool) error {
	if len(sources) > 1 {
		return writeComparisonTables(w, sources, summary, opts)
	}
	if err := report.WriteTableWith(w, summary, report.TableOptions{AllSyscalls: allSyscalls}); err != nil {
		return err
	}
	if len(summary.Targets) < 2 {
		return nil
	}
	fmt.Fprintln(w)
	return report.WriteComparison(w, summary, opts)
}
