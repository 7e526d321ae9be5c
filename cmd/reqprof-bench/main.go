// Command reqprof-bench measures, from a real run on this machine, what
// reqprof costs the servers it profiles and how far it scales. It prints the
// results as Markdown tables and can write them to a file (make bench writes
// docs/BENCHMARKS.md). It needs root, nginx, wrk and h2load; all traffic stays on
// 127.0.0.1.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/testservers/gohttp"
	"github.com/reqprof/reqprof/internal/testservers/mcpserver"
)

// settings are the bench's flags.
type settings struct {
	reqprof     string
	markdown    string
	rounds      int
	round       time.Duration
	step        time.Duration
	connections int
	hold        time.Duration
	churn       time.Duration
	// netOnly runs only the rows of the net-CPU goals and prints those
	// goals, writing no Markdown.
	netOnly bool
	// liteOnly runs only the lite-mode rows and prints their goals.
	liteOnly bool
}

// quickValues are the --quick defaults: every phase still runs, shorter.
var quickValues = map[string]string{
	"rounds": "2",
	"round":  "2s",
	"step":   "2s",
	"hold":   "6s",
	"churn":  "10s",
}

func main() {
	// The bench re-runs its own binary as the calibrated server, so that
	// the server is a process of its own, like any server reqprof attaches to.
	if len(os.Args) > 1 && os.Args[1] == calserverCommand {
		os.Exit(calserver.Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == gohttpCommand {
		os.Exit(gohttp.Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == mcpserverCommand {
		os.Exit(mcpserver.Main(os.Args[2:]))
	}
	s, err := parseSettings(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err == nil {
		err = run(s)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "reqprof-bench: %v\n", err)
		os.Exit(1)
	}
}

func parseSettings(args []string) (settings, error) {
	fs := flag.NewFlagSet("reqprof-bench", flag.ContinueOnError)
	var s settings
	fs.StringVar(&s.reqprof, "reqprof", "", "reqprof binary to measure (default: go build ./cmd/reqprof into a temporary directory)")
	fs.StringVar(&s.markdown, "markdown", "", "also write the results as Markdown to this file")
	quick := fs.Bool("quick", false, "shorter rounds and phases, for a check in about two minutes; explicit flags still apply")
	fs.IntVar(&s.rounds, "rounds", 5, "overhead rounds per server, each one run detached and one attached")
	fs.DurationVar(&s.round, "round", 5*time.Second, "load per overhead run")
	fs.DurationVar(&s.step, "step", 4*time.Second, "load per step of the request-rate ladder")
	fs.IntVar(&s.connections, "connections", 10000, "concurrent connections of the many-connections phase")
	fs.DurationVar(&s.hold, "hold", 15*time.Second, "how long the many connections stay open, sending requests")
	fs.DurationVar(&s.churn, "churn", 60*time.Second, "length of the connection-per-request phase")
	fs.BoolVar(&s.netOnly, "net-only", false, "run only nginx, the calibrated server at 0 µs and the Go net/http server, and print their net-CPU goals")
	fs.BoolVar(&s.liteOnly, "lite-only", false, "run only nginx and the Go net/http server, detached, attached and attached --lite, and print the lite goals")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *quick {
		explicit := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
		for name, value := range quickValues {
			if !explicit[name] {
				if err := fs.Set(name, value); err != nil {
					return s, err
				}
			}
		}
	}
	if s.rounds < 1 || s.connections < 1 {
		return s, errors.New("--rounds and --connections must be at least 1")
	}
	for _, d := range []time.Duration{s.round, s.step, s.hold, s.churn} {
		if d < time.Second {
			return s, errors.New("every duration must be at least 1s")
		}
	}
	return s, nil
}

func run(s settings) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: reqprof loads BPF programs and the bench reads their statistics")
	}
	tools, err := findTools()
	if err != nil {
		return err
	}
	fileLimit, err := raiseFileLimit(s.connections)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "reqprof-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if s.reqprof == "" {
		s.reqprof = filepath.Join(dir, "reqprof")
		build := exec.Command("go", "build", "-o", s.reqprof, "./cmd/reqprof")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building reqprof (run from the module root, or give --reqprof): %w", err)
		}
	}
	b := &bench{settings: s, tools: tools, dir: dir, fileLimit: fileLimit, host: describeHost(tools)}
	if s.liteOnly {
		if err := b.runLite(); err != nil {
			return err
		}
		var w strings.Builder
		w.WriteString(table([]string{"Goal", "Target", "Measured", "Met"}, b.liteGoals()))
		b.writeOverhead(&w)
		fmt.Print(w.String())
		return nil
	}
	if s.netOnly {
		if err := b.runNet(); err != nil {
			return err
		}
		var w strings.Builder
		w.WriteString(table([]string{"Goal", "Target", "Measured", "Met"}, b.netGoals()))
		b.writeOverhead(&w)
		fmt.Print(w.String())
		return nil
	}
	if err := b.runAll(); err != nil {
		return err
	}
	doc := b.markdown()
	fmt.Print(doc)
	if s.markdown == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.markdown), 0o755); err != nil {
		return err
	}
	return os.WriteFile(s.markdown, []byte(doc), 0o644)
}

// tools are the programs the bench runs besides reqprof.
type tools struct {
	nginx, wrk, h2load string
}

func findTools() (tools, error) {
	var t tools
	var missing []string
	for _, tool := range []struct {
		name string
		path *string
	}{{"nginx", &t.nginx}, {"wrk", &t.wrk}, {"h2load", &t.h2load}} {
		path, err := lookPath(tool.name)
		if err != nil {
			missing = append(missing, tool.name)
		}
		*tool.path = path
	}
	if len(missing) > 0 {
		return t, fmt.Errorf("%s not installed (make deps installs them)", strings.Join(missing, ", "))
	}
	return t, nil
}

// lookPath also looks in the sbin directories, where Debian puts nginx and
// which a non-login PATH may lack.
func lookPath(name string) (string, error) {
	if path, err := exec.LookPath(name); err == nil {
		return path, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// fileMargin is the descriptors a process needs besides one per connection.
const fileMargin = 1024

// raiseFileLimit raises the open-file limit to its hard limit, which an
// unprivileged (or capability-less) root cannot pass, and returns it. The
// many-connections client holds a descriptor per connection, and so does
// nginx, which inherits the limit: syscall.Setrlimit makes child processes
// inherit it, where Go otherwise restores the original soft limit in them.
func raiseFileLimit(connections int) (uint64, error) {
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		return 0, err
	}
	if limit.Max < uint64(connections+fileMargin) {
		return 0, fmt.Errorf("the open-file hard limit, %d, is too low for %d connections: lower --connections", limit.Max, connections)
	}
	limit.Cur = limit.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		return 0, fmt.Errorf("raising the open-file limit to %d: %w", limit.Max, err)
	}
	return limit.Max, nil
}
