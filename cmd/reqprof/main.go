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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/report"
	"github.com/reqprof/reqprof/testdata/calserver"
)

const usage = `usage:
  reqprof attach --pid PID[=LABEL] [--pid ...] [--duration 10s] [--json FILE|-]
  reqprof demo   [--duration 3s] [--json FILE|-]

attach profiles running processes until --duration passes, SIGINT/SIGTERM
arrives, or every target exits; demo starts a bundled server, loads it and
profiles it. Both need root (or CAP_BPF and CAP_PERFMON) and a kernel with BTF.
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

// outputFlags are shared by every command that profiles and reports.
type outputFlags struct {
	duration     time.Duration
	jsonPath     string
	captureBytes int
	noPayload    bool
}

func (o *outputFlags) register(fs *flag.FlagSet, defaultDuration time.Duration) {
	fs.DurationVar(&o.duration, "duration", defaultDuration, "how long to profile (0: until Ctrl-C or every target exits)")
	fs.StringVar(&o.jsonPath, "json", "", "also write the result as JSON to this file (- for stdout)")
	// 512 by default: an MCP request's JSON-RPC method usually starts past
	// byte 256, behind the HTTP headers.
	fs.IntVar(&o.captureBytes, "capture-bytes", collector.MaxCaptureBytes,
		fmt.Sprintf("bytes of each request to read for naming it (at most %d); they never leave reqprof", collector.MaxCaptureBytes))
	fs.BoolVar(&o.noPayload, "no-payload", false, "capture no request bytes: requests are named by port only")
}

func attach(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("attach", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var pids pidFlags
	var out outputFlags
	fs.Var(&pids, "pid", "process to profile, PID or PID=LABEL (repeatable)")
	out.register(fs, 0)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if len(pids) == 0 {
		return errors.New("attach needs --pid PID")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	result, err := collector.Run(ctx, collector.Config{
		Targets:      pids,
		Duration:     out.duration,
		CaptureBytes: out.captureBytes,
		NoPayload:    out.noPayload,
		OnAttached:   func(line string) { fmt.Fprintln(stderr, line) },
	})
	if err != nil {
		return err
	}
	return writeReport(result, out.jsonPath, stdout)
}

// writeReport prints the table, unless JSON goes to stdout, and the JSON.
func writeReport(result report.Run, jsonPath string, stdout io.Writer) error {
	summary := report.Summarize(result)
	if jsonPath != "-" {
		if err := report.WriteTable(stdout, summary); err != nil {
			return err
		}
	}
	switch jsonPath {
	case "":
		return nil
	case "-":
		return report.WriteJSON(stdout, summary)
	}
	f, err := os.Create(jsonPath)
	if err != nil {
		return err
	}
	if err := report.WriteJSON(f, summary); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
