package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/live"
	"github.com/reqprof/reqprof/serve"
)

// serveSynopsis is the first line of serve --help.
const serveSynopsis = "reqprof serve --pid PID|--cgroup DIR|--comm NAME|--port N [...] [flags]"

// defaultListen is where serve's metrics are, unless --listen says.
const defaultListen = ":9742"

// specFlags collects the repeated target flags of serve, each NAME[=LABEL].
type specFlags struct {
	specs *[]serve.Spec
	kind  string // pid, cgroup, comm, port
}

func (f specFlags) String() string { return "" }

func (f specFlags) Set(v string) error {
	value, label, _ := strings.Cut(v, "=")
	spec := serve.Spec{Label: label}
	switch f.kind {
	case "pid":
		pid, err := strconv.Atoi(value)
		if err != nil || pid <= 0 {
			return errors.New("not a process id: want PID or PID=LABEL")
		}
		spec.PID = pid
	case "cgroup":
		if value == "" {
			return errors.New("empty cgroup directory")
		}
		spec.Cgroup = value
	case "comm":
		if value == "" {
			return errors.New("empty command name")
		}
		spec.Comm = value
	case "port":
		port, err := serve.ParsePort(value)
		if err != nil {
			return err
		}
		spec.Port = port
	}
	*f.specs = append(*f.specs, spec)
	return nil
}

func serveCommand(args []string, stdout, stderr io.Writer) error {
	c := newCommand("serve", serveSynopsis,
		"Profiles its targets until SIGINT/SIGTERM and serves what it counts as Prometheus metrics at --listen's /metrics: "+
			"requests, a histogram of CPU per request, user and kernel CPU, latency, by target and route. "+
			"A --comm or --port target is looked up again every second, so that a restarted server goes on being profiled, "+
			"in the same series. Needs root (or CAP_BPF and CAP_PERFMON) and a kernel with BTF.")
	var specs []serve.Spec
	c.Var(specFlags{&specs, "pid"}, "pid", "`PID[=LABEL]` a process to profile (repeatable)")
	c.Var(specFlags{&specs, "cgroup"}, "cgroup", cgroupUsage)
	c.Var(specFlags{&specs, "comm"}, "comm", "`NAME[=LABEL]` the processes of this command name, looked up again as they restart (repeatable)")
	c.Var(specFlags{&specs, "port"}, "port", "`N[=LABEL]` the process listening on TCP port N here, looked up again as it restarts (repeatable)")
	listen := c.String("listen", defaultListen, "`ADDR` where to serve /metrics")
	followChildren := c.Bool("follow-children", false, followChildrenUsage)
	maxRoutes := c.Int("max-routes", live.DefaultMaxRoutes, "`N` routes of each target with series of their own; the rest are one, route=\""+live.OtherRoute+"\"")
	var logFlags requestLogFlags
	logFlags.register(c)
	var capture captureFlags
	capture.register(c)
	lite := c.Bool("lite", false, liteUsage)
	gross := c.Bool("gross", false, "keep reqprof's own cost in the figures as observed; by default what its programs cost in each request's context is taken out")
	if err := c.parse(args, stdout); err != nil {
		return err
	}
	if c.NArg() > 0 {
		return badInput("unexpected argument %q (serve takes flags only)", c.Arg(0))
	}
	if len(specs) == 0 {
		return badInput("serve needs a target: --pid PID, --cgroup DIR, --comm NAME or --port N")
	}
	if len(specs) > collector.MaxTargets {
		return badInput("%d targets, at most %d", len(specs), collector.MaxTargets)
	}
	if *maxRoutes < 1 {
		return badInput("--max-routes %d: want at least 1", *maxRoutes)
	}
	if err := capture.validate(); err != nil {
		return err
	}
	if err := logFlags.validate(); err != nil {
		return err
	}
	for _, spec := range specs {
		// A pid names one process, which cannot come later: one that is
		// not there is a mistake, as for attach. A name or a port may.
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", spec.PID)); spec.PID != 0 && err != nil {
			return badInput("no process with pid %d", spec.PID)
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return badInput("--listen %s: %s", *listen, listenProblem(err))
	}
	defer ln.Close()
	if err := checkHost(); err != nil {
		return err
	}
	requestLog, closeLog, err := logFlags.open(true)
	if err != nil {
		return err
	}

	ver, rev := thisBuild()
	srv := serve.New(serve.Options{
		Specs: specs, FollowChildren: *followChildren, CaptureBytes: capture.bytes, NoPayload: capture.none, Lite: *lite, Gross: *gross,
		MaxRoutes: *maxRoutes, RequestLog: requestLog, Log: stderr, Version: ver, Commit: rev,
	})
	httpServer := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	httpDone := make(chan error, 1)
	go func() { httpDone <- httpServer.Serve(ln) }()
	fmt.Fprintf(stderr, "reqprof: serving metrics at http://%s/metrics\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runErr := srv.Run(ctx)
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	httpServer.Shutdown(shutdown)
	if err := <-httpDone; runErr == nil && err != nil && !errors.Is(err, http.ErrServerClosed) {
		runErr = fmt.Errorf("serving metrics: %w", err)
	}
	return errors.Join(runErr, closeLog(stderr))
}

// listenProblem says in a few words why a listen failed: "address already
// in use", not the whole chain of the net package's wrapping.
func listenProblem(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}

// requestLogFlags are --requests and --requests-rate, of attach and serve.
type requestLogFlags struct {
	path string
	rate int
}

func (f *requestLogFlags) register(c *command) {
	c.StringVar(&f.path, "requests", "", "`FILE` also write each finished request to FILE as a line of JSON, at most --requests-rate lines a second")
	c.IntVar(&f.rate, "requests-rate", live.DefaultLogRate, "`N` lines a second --requests writes at most; past it requests are counted as dropped")
}

func (f *requestLogFlags) validate() error {
	if f.rate < 1 {
		return badInput("--requests-rate %d: want at least 1", f.rate)
	}
	return checkOutput("--requests", f.path)
}

// open opens the log, appending to the file for serve (which may be
// restarted) or replacing it for attach; closeLog writes what is held,
// and says on w how many lines were dropped.
func (f *requestLogFlags) open(appendToFile bool) (l *live.RequestLog, closeLog func(w io.Writer) error, err error) {
	if f.path == "" {
		return nil, func(io.Writer) error { return nil }, nil
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if appendToFile {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	file, err := os.OpenFile(f.path, flags, 0o644)
	if err != nil {
		return nil, nil, badInput("--requests %s: %v", f.path, errors.Unwrap(err))
	}
	l = live.NewRequestLog(file, f.rate)
	return l, func(w io.Writer) error {
		err := l.Close()
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		written, dropped := l.Counts()
		if dropped > 0 {
			fmt.Fprintf(w, "reqprof: %s: %s written, %s dropped past %s a second\n", f.path,
				count(int(written), "request", "requests"), strconv.FormatUint(dropped, 10), strconv.Itoa(f.rate))
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
		return nil
	}, nil
}
