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
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/profile"
	"github.com/reqprof/reqprof/report"
)

// commands are what the top help lists, each with what it does.
var commands = []struct{ name, does string }{
	{"attach", "profile running processes: CPU per request, user and kernel, by route"},
	{"serve", "profile until stopped and serve Prometheus metrics, following restarts"},
	{"demo", "start two bundled servers, load them alike and compare them"},
	{"compare", "set runs saved with --json side by side"},
	{"version", "print reqprof's version and the commit it was built from"},
}

// writeUsage writes the top help: the commands, one line each.
func writeUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString("usage: reqprof COMMAND [flags]\n\n")
	b.WriteString("reqprof tells how many microseconds of CPU each request costs a live server.\n\n")
	b.WriteString("commands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.does)
	}
	b.WriteString("\n" + wrap("reqprof COMMAND --help shows what a command does and its flags. "+
		"attach and demo need root (or CAP_BPF and CAP_PERFMON) and a kernel with BTF.", 0, helpWidth) + "\n")
	io.WriteString(w, b.String())
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs reqprof with args and returns its exit code: 0, 1 when it
// failed while running, 2 when it was given what it cannot run with (bad
// flags or files, no such process, no privileges, a kernel it cannot run
// on). Every error is one line on stderr.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		writeUsage(stderr)
		return 2
	}
	var err error
	switch args[0] {
	case "attach":
		err = attach(args[1:], stdout, stderr)
	case "serve":
		err = serveCommand(args[1:], stdout, stderr)
	case "demo":
		err = demo(args[1:], stdout, stderr)
	case "compare":
		err = compare(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		if len(args) > 1 {
			err = badInput("%s takes no arguments", args[0])
			break
		}
		ver, rev := thisBuild()
		writeVersion(stdout, ver, rev)
	case demoServerCommand:
		nameDemoServer()
		return calserver.Main(args[1:])
	case demoLoadCommand:
		return demoLoad(args[1:], stderr)
	case "-h", "--help", "-help":
		writeUsage(stdout)
	case "help":
		if len(args) > 1 && args[1] != "help" {
			return run([]string{args[1], "--help"}, stdout, stderr)
		}
		writeUsage(stdout)
	default:
		err = badInput("unknown command %q (reqprof --help lists them)", args[0])
	}
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, errorLine(err))
	return exitCode(err)
}

// errorLine is err as the one line reqprof prints: "reqprof: " and the
// error, unless the error already starts with reqprof's name.
func errorLine(err error) string {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	if strings.HasPrefix(msg, "reqprof ") {
		return msg
	}
	return "reqprof: " + msg
}

// exitCode is 2 for an error in what reqprof was given or where it runs,
// and 1 for any other.
func exitCode(err error) int {
	var input inputError
	if errors.As(err, &input) || errors.Is(err, collector.ErrNoProcess) || errors.Is(err, collector.ErrUnsupported) {
		return 2
	}
	return 1
}

// pidFlags collects repeated --pid PID[=LABEL].
type pidFlags []collector.Target

func (p *pidFlags) String() string { return "" }

func (p *pidFlags) Set(v string) error {
	pidText, label, _ := strings.Cut(v, "=")
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return errors.New("not a process id: want PID or PID=LABEL")
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
	duration    time.Duration
	jsonPath    string
	htmlPath    string
	groupBy     string
	allSyscalls bool
	capture     captureFlags
	gross       bool
	lite        bool
	runtime     string
	role        string
	stacks      bool
	stackHz     int
	pprofPath   string
	foldedPath  string
	// attach's alone, set by its flags.
	followChildren bool
	stdio          collector.StdioMode
}

// register defines the flags on c; duration says what --duration 0 does.
func (o *outputFlags) register(c *command, duration string) {
	c.DurationVar(&o.duration, "duration", 0, "`DURATION` how long to profile, such as 10s or 2m; 0: "+duration)
	c.StringVar(&o.jsonPath, "json", "", "`FILE` also write the result as JSON to FILE (-: to stdout, instead of the tables)")
	c.StringVar(&o.htmlPath, "html", "", "`FILE` also write the result as a self-contained page to FILE")
	c.StringVar(&o.groupBy, "group-by", "route", "`route|port|none` how requests are grouped")
	c.BoolVar(&o.allSyscalls, "syscalls", false, "show every syscall in the kernel cost table instead of folding the tail")
	o.capture.register(c)
	c.BoolVar(&o.gross, "gross", false, "keep reqprof's own cost in the figures as observed; by default what its programs cost in each request's context is taken out (and stated)")
	c.BoolVar(&o.lite, "lite", false, liteUsage)
	c.StringVar(&o.runtime, "runtime", "", "how a target resumes a request whose backend answered: "+collector.RuntimeNames+" (default: detected per target)")
	c.StringVar(&o.role, "role", "", "`client|server|both` what a target's outbound connections are: client (each call on them a request of its own, named with its peer), server (backends of the requests it serves), both (a proxy); default: client when it serves nothing, else server")
	c.BoolVar(&o.stacks, "stacks", false, "also sample the targets' on-CPU stacks, user and kernel, each sample with its request's route: where inside a request its CPU goes")
	c.IntVar(&o.stackHz, "stack-hz", collector.DefaultStackHz, fmt.Sprintf("`HZ` stack samples a second on each CPU, 1 to %d (with --stacks)", collector.MaxStackHz))
	c.StringVar(&o.pprofPath, "pprof", "", "`FILE` write the stack samples as a pprof profile, labelled by target, route and mode (implies --stacks)")
	c.StringVar(&o.foldedPath, "folded", "", "`FILE` write the stack samples as folded stacks, the route as the root frame, for flame graph tools (implies --stacks)")
}

func (o *outputFlags) validate() error {
	if err := o.capture.validate(); err != nil {
		return err
	}
	if _, ok := collector.Runtimes[o.runtime]; o.runtime != "" && !ok {
		return badInput("--runtime %q: want one of %s", o.runtime, collector.RuntimeNames)
	}
	if !collector.ValidRole(o.role) {
		return badInput("--role %q: want client, server or both", o.role)
	}
	if o.duration < 0 {
		return badInput("--duration %v: want 0 or more", o.duration)
	}
	if _, err := report.ParseGroupBy(o.groupBy); err != nil {
		return inputError{err}
	}
	if o.stackHz < 1 || o.stackHz > collector.MaxStackHz {
		return badInput("--stack-hz %d: want 1 to %d", o.stackHz, collector.MaxStackHz)
	}
	if o.pprofPath == "-" || o.foldedPath == "-" {
		return badInput("--pprof and --folded write to a file, not to stdout")
	}
	if o.pprofPath != "" || o.foldedPath != "" {
		o.stacks = true
	}
	for _, f := range []struct{ flag, path string }{{"--json", o.jsonPath}, {"--html", o.htmlPath}, {"--pprof", o.pprofPath}, {"--folded", o.foldedPath}} {
		if err := checkOutput(f.flag, f.path); err != nil {
			return err
		}
	}
	return nil
}

// checkOutput fails when the file flag names could not be created in its
// directory: said at the start, not after the whole window was profiled.
func checkOutput(flag, path string) error {
	if path == "" || path == "-" {
		return nil
	}
	dir := filepath.Dir(path)
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return badInput("%s %s: no directory %s to write it in", flag, path, dir)
	}
	return nil
}

// config is the collector's Config for a window over targets: the one
// place the commands that profile and report fill it, from their flags,
// with onAttached to call once it is attached and w (if any) to hand
// what it finds while it runs. Its defaults and derived fields are the
// collector's to decide.
func (o *outputFlags) config(targets []collector.Target, onAttached func(line string), w *watcher) collector.Config {
	cfg := collector.Config{
		Targets:        targets,
		Duration:       o.duration,
		CaptureBytes:   o.capture.bytes,
		NoPayload:      o.capture.none,
		Gross:          o.gross,
		Lite:           o.lite,
		Runtime:        o.runtime,
		Role:           o.role,
		Stacks:         o.stacks,
		StackHz:        o.stackHz,
		FollowChildren: o.followChildren,
		Stdio:          o.stdio,
		OnAttached:     onAttached,
	}
	if w != nil {
		cfg.OnRequest, cfg.OnProgress = w.onRequest(), w.onProgress()
	}
	return cfg
}

// captureFlags are --capture-bytes and --no-payload, alike for every
// command that names requests from their bytes.
type captureFlags struct {
	bytes int
	none  bool
}

func (f *captureFlags) register(c *command) {
	// 512 by default: an MCP request's JSON-RPC method usually starts past
	// byte 256, behind the HTTP headers.
	c.IntVar(&f.bytes, "capture-bytes", collector.MaxCaptureBytes,
		fmt.Sprintf("`N` bytes of each request to read for naming it, 1 to %d; they never leave reqprof", collector.MaxCaptureBytes))
	c.BoolVar(&f.none, "no-payload", false, "capture no request bytes: requests are named by port only")
}

func (f *captureFlags) validate() error {
	if f.bytes < 1 || f.bytes > collector.MaxCaptureBytes {
		return badInput("--capture-bytes %d: want 1 to %d", f.bytes, collector.MaxCaptureBytes)
	}
	return nil
}

// followChildrenUsage and cgroupUsage are --follow-children's and
// --cgroup's help, the same for attach and serve.
const (
	followChildrenUsage = "also profile each target's child processes, present and future (pre-fork servers: give the master)"
	cgroupUsage         = "`DIR[=LABEL]` every process of this cgroup v2 directory, as one target (repeatable)"
)

// liteUsage is --lite's help, the same for attach and serve.
const liteUsage = "lite mode, for live production hosts: no program on every syscall of the machine; " +
	"CPU per request, latency, waits and routes stay, the user/kernel split is estimated, " +
	"no syscall rows, no connection setup, no stdio requests"

// attachSynopsis is the first line of attach --help.
const attachSynopsis = "reqprof attach --pid PID[=LABEL] [--pid ...] [flags]"

func attach(args []string, stdout, stderr io.Writer) error {
	c := newCommand("attach", attachSynopsis,
		"Profiles running processes, charging every nanosecond their threads spend on a CPU "+
			"to the request being served, until --duration passes, SIGINT/SIGTERM arrives (a second one exits at once, without a report), or every target exits. "+
			"With several targets, the first is the baseline the others are compared with. "+
			"Needs root (or CAP_BPF and CAP_PERFMON) and a kernel with BTF.")
	var pids, floor pidFlags
	var cgroups cgroupFlags
	var out outputFlags
	c.Var(&pids, "pid", "`PID[=LABEL]` process to profile (repeatable; the first is the baseline)")
	c.Var(&cgroups, "cgroup", cgroupUsage)
	c.BoolVar(&out.followChildren, "follow-children", false, followChildrenUsage)
	stdio := c.String("stdio", "auto", "`auto|on|off` requests on a target's stdin, answered on its stdout (MCP's stdio transport): auto when stdin is a pipe, FIFO or socket; never a terminal")
	c.Var(&floor, "floor", "`PID[=LABEL]` a bare server, profiled too: the others' CPU is also shown above its own")
	repeat := c.Int("repeat", 1, "`N` profile N windows in a row and report the spread between them (needs --duration)")
	out.register(c, "until Ctrl-C or every target exits")
	showLive := c.Bool("live", true, "show each second's requests/s and CPU per request on stderr while profiling: a table redrawn in place on a terminal, plain lines elsewhere")
	var logFlags requestLogFlags
	logFlags.register(c)
	if err := c.parse(args, stdout); err != nil {
		return err
	}
	if c.NArg() > 0 {
		return badInput("unexpected argument %q (attach takes flags only)", c.Arg(0))
	}
	pids = append(pids, cgroups...)
	if len(pids) == 0 {
		return badInput("attach needs --pid PID or --cgroup DIR")
	}
	if len(floor) > 1 {
		return badInput("--floor takes one process")
	}
	if *repeat < 1 {
		return badInput("--repeat %d: want at least 1", *repeat)
	}
	var ok bool
	out.stdio, ok = map[string]collector.StdioMode{"auto": collector.StdioAuto, "on": collector.StdioOn, "off": collector.StdioOff}[*stdio]
	if !ok {
		return badInput("--stdio %q: want auto, on or off", *stdio)
	}
	if *repeat > 1 && out.duration == 0 {
		return badInput("--repeat needs --duration for each window")
	}
	if err := out.validate(); err != nil {
		return err
	}
	if err := logFlags.validate(); err != nil {
		return err
	}
	targets := append(pids, floor...)
	seen := map[int]bool{}
	for _, t := range targets {
		if t.PID != 0 && seen[t.PID] {
			return badInput("pid %d given twice", t.PID)
		}
		seen[t.PID] = true
	}
	if err := checkHost(); err != nil {
		return err
	}

	requestLog, closeLog, err := logFlags.open(false)
	if err != nil {
		return err
	}
	w := newWatcher(targets, *showLive, out.duration, requestLog, stderr)

	cfg := out.config(targets, func(line string) {
		fmt.Fprintln(stderr, line)
		w.opened()
	}, w)

	ctx, stop := interruptible(stderr)
	defer stop()
	var runs []profile.Run
	for i := range *repeat {
		run, err := collector.Run(ctx, cfg)
		w.closed()
		if err != nil {
			closeLog(stderr)
			return err
		}
		runs = append(runs, run)
		if ctx.Err() != nil && i+1 < *repeat {
			fmt.Fprintf(stderr, "reqprof: interrupted after %d of %d windows\n", i+1, *repeat)
			break
		}
	}
	if err := closeLog(stderr); err != nil {
		return err
	}
	return writeReport(runs, out, len(floor) > 0, stdout)
}

// interruptible returns a context that the first SIGINT or SIGTERM
// cancels: the window ends early and its report is written. A second one
// while that finishes exits at once, without the report, with 128 plus the
// signal's number (130 for SIGINT), as a shell reports a process a signal
// ended. The programs go with the process: the kernel detaches them.
func interruptible(stderr io.Writer) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-signals:
		case <-done:
			return
		}
		cancel()
		select {
		case sig := <-signals:
			number := sig.(syscall.Signal)
			fmt.Fprintf(stderr, "reqprof: %s again: exiting at once, without a report\n", unix.SignalName(number))
			os.Exit(128 + int(number))
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(signals)
		close(done)
		cancel()
	}
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
	ver, rev := thisBuild()
	for i, run := range runs {
		run.Meta.Version, run.Meta.Commit = ver, rev
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
	if out.pprofPath != "" {
		if err := writeFile(out.pprofPath, func(w io.Writer) error { return report.WritePprof(w, runs, groupBy) }); err != nil {
			return err
		}
	}
	if out.foldedPath != "" {
		if err := writeFile(out.foldedPath, func(w io.Writer) error { return report.WriteFolded(w, runs, groupBy) }); err != nil {
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
