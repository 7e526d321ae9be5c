// Package serve is reqprof serve: it profiles its targets until stopped,
// attaching anew when a --comm or --port target's process is replaced,
// and exposes what it counts as Prometheus metrics.
//
// Every counter is kept here, in a live.Tally, not in the collector's
// window: a window ends each time the targets are attached anew, and the
// counters go on from where they were. A target's series are labelled by
// its name, not its pid, so that a restarted server goes on in the same
// series (its rate has no gap nor reset, and a redeploy adds no series);
// reqprof_target_info says which pid it is now. Only a restart of reqprof
// itself resets the counters, which Prometheus's rate() handles.
package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/live"
	"github.com/reqprof/reqprof/profile"
)

// Options say what to profile and how to export it.
type Options struct {
	Specs          []Spec
	FollowChildren bool
	CaptureBytes   int
	NoPayload      bool
	// Lite profiles in lite mode (collector.Config.Lite): no program on
	// every syscall of the machine, for a live production host.
	Lite bool
	// Gross keeps reqprof's own cost in the figures (collector.Config.Gross);
	// by default it is taken out, as attach does.
	Gross bool
	// MaxRoutes bounds each target's routes with series of their own
	// (live.DefaultMaxRoutes when 0); the rest are one, live.OtherRoute.
	MaxRoutes int
	// RequestLog, if set, is given every finished request too.
	RequestLog *live.RequestLog
	// Log is where serve says, a line each, when it attaches, what
	// replaced what, and why it waits.
	Log io.Writer
	// Version and Commit label reqprof_build_info.
	Version, Commit string
}

// resolveInterval is how often targets are looked up again: a replaced
// process is profiled within about this long of listening.
const resolveInterval = time.Second

// minReattachInterval spaces attaches: a --comm name matched by processes
// that come and go every few ms (a script run in a loop) must not keep
// reqprof loading its programs over and over.
const minReattachInterval = 2 * time.Second

// Server profiles Options.Specs until its Run's context is done.
type Server struct {
	opts     Options
	tally    *live.Tally
	registry *prometheus.Registry
	proc     *procFS
	// run is collector.Run; tests replace it, and shorten the intervals.
	run                            func(context.Context, collector.Config) (profile.Run, error)
	resolveEvery, minReattachEvery time.Duration

	mu sync.Mutex
	// labels are each spec's label, fixed the first time it finds a
	// process; pidStarts the start time of each --pid's process.
	labels    []string
	pidStarts []uint64
	// Of the session running now: its process per collector index and
	// their labels, and which of them are alive.
	current []sessionTarget
	// lost is per label: events lost by finished sessions, and lostNow
	// per collector index, by the one running.
	lost    map[string]uint64
	lostNow []uint64
	// bpfNs is the programs' estimated run time over finished sessions,
	// bpfNow over the one running.
	bpfNs, bpfNow uint64
	bpfKnown      bool
	attaches      uint64
}

// sessionTarget is one of a session's collector targets.
type sessionTarget struct {
	spec  int // index in Options.Specs
	label string
	inst  instance // for a cgroup, its first process
	key   string   // what identifies it across resolutions
	gone  bool     // its process exited since
}

// New is a Server for opts, its metrics registered and no target attached
// yet.
func New(opts Options) *Server {
	s := &Server{
		opts:         opts,
		tally:        live.NewTally(opts.MaxRoutes),
		registry:     prometheus.NewRegistry(),
		proc:         newProcFS("/proc", os.Getpid()),
		run:          collector.Run,
		resolveEvery: resolveInterval, minReattachEvery: minReattachInterval,
		labels:    make([]string, len(opts.Specs)),
		pidStarts: make([]uint64, len(opts.Specs)),
		lost:      map[string]uint64{},
	}
	for i, spec := range opts.Specs {
		if spec.Label != "" {
			s.labels[i] = spec.Label
			s.tally.Declare(spec.Label)
		}
	}
	s.registry.MustRegister(exporter{s}, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return s
}

// Handler serves /metrics, and a line saying so at /.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "reqprof serve: CPU per request, as Prometheus metrics at /metrics\n")
	})
	return mux
}

// Registry is the registry /metrics serves.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Run profiles the targets until ctx is done, attaching again whenever a
// target's process is replaced, and waiting while none has a process. It
// returns nil once ctx is done, or when every target is a --pid whose
// process has exited; an error when the collector cannot run.
func (s *Server) Run(ctx context.Context) error {
	var lastAttach time.Time
	waiting := false
	for ctx.Err() == nil {
		p := s.plan()
		if len(p) == 0 {
			if s.onlyPIDs() {
				s.logf("reqprof: every target has exited")
				return nil
			}
			if !waiting {
				s.logf("reqprof: waiting for a process of %s", s.specList())
				waiting = true
			}
			sleep(ctx, s.resolveEvery)
			continue
		}
		waiting = false
		if wait := s.minReattachEvery - time.Since(lastAttach); wait > 0 {
			sleep(ctx, wait)
			continue // and look again: the process may be gone by now
		}
		lastAttach = time.Now()
		if err := s.session(ctx, p); err != nil {
			if errors.Is(err, collector.ErrNoProcess) {
				// A process exited between being found and attached.
				continue
			}
			return err
		}
	}
	return nil
}

// plan finds each spec's processes now: the collector targets of a new
// session.
func (s *Server) plan() []sessionTarget {
	var p []sessionTarget
	seen := map[int]bool{}
	for i, spec := range s.opts.Specs {
		for _, inst := range s.resolve(i) {
			if seen[inst.PID] {
				continue // found by two specs: the first has it
			}
			seen[inst.PID] = true
			t := sessionTarget{spec: i, inst: inst, key: inst.key()}
			if spec.Cgroup != "" {
				t.key = "cgroup"
			}
			p = append(p, t)
		}
	}
	if len(p) > collector.MaxTargets {
		s.logf("reqprof: %d processes found, profiling the first %d", len(p), collector.MaxTargets)
		p = p[:collector.MaxTargets]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range p {
		spec := &p[i]
		if s.labels[spec.spec] == "" {
			s.labels[spec.spec] = s.defaultLabel(spec.spec, spec.inst)
		}
		spec.label = s.labels[spec.spec]
	}
	return p
}

// defaultLabel names a spec given no label: by the name it looks for, its
// cgroup, or its process's command name.
func (s *Server) defaultLabel(spec int, inst instance) string {
	sp := s.opts.Specs[spec]
	switch {
	case sp.Comm != "":
		return sp.Comm
	case sp.Cgroup != "":
		return sp.Cgroup
	}
	return inst.Comm
}

// resolve is spec i's processes now; a --cgroup's is its first, as the
// collector takes it.
func (s *Server) resolve(i int) []instance {
	spec := s.opts.Specs[i]
	switch {
	case spec.Cgroup != "":
		if cgroupHasProcesses(spec.Cgroup) {
			return []instance{{Comm: spec.Cgroup}}
		}
		return nil
	case spec.Comm != "":
		found, err := s.proc.byComm(spec.Comm, s.opts.FollowChildren)
		if err != nil {
			s.logf("reqprof: looking for %s: %v", spec, err)
		}
		return found
	case spec.Port != 0:
		found, err := s.proc.byPort(spec.Port, s.opts.FollowChildren)
		if err != nil {
			s.logf("reqprof: looking for %s: %v", spec, err)
		}
		return found
	}
	s.mu.Lock()
	start := s.pidStarts[i]
	s.mu.Unlock()
	found := s.proc.byPID(spec.PID, start)
	if len(found) > 0 && start == 0 {
		s.mu.Lock()
		s.pidStarts[i] = found[0].Start
		s.mu.Unlock()
	}
	return found
}

// onlyPIDs says whether every spec is a --pid, which no process can come
// back as once it has exited.
func (s *Server) onlyPIDs() bool {
	for _, spec := range s.opts.Specs {
		if spec.PID == 0 {
			return false
		}
	}
	return true
}

func (s *Server) specList() string {
	var parts []string
	for _, spec := range s.opts.Specs {
		parts = append(parts, spec.String())
	}
	return strings.Join(parts, ", ")
}

// session profiles the processes of p in one collector window, until ctx
// is done, every one of them exits, or a new process turns up for a
// --comm, --port or --cgroup target, which the next session takes.
func (s *Server) session(ctx context.Context, p []sessionTarget) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	targets := make([]collector.Target, len(p))
	names := make([]string, len(p))
	for i, t := range p {
		targets[i] = collector.Target{PID: t.inst.PID, Label: t.label}
		if spec := s.opts.Specs[t.spec]; spec.Cgroup != "" {
			targets[i] = collector.Target{Cgroup: spec.Cgroup, Label: t.label}
		}
		names[i] = t.label
	}
	s.tally.Bind(names)
	onRequest := s.tally.Add
	if l := s.opts.RequestLog; l != nil {
		l.Bind(names)
		onRequest = func(target int, r profile.Request) {
			s.tally.Add(target, r)
			l.Add(target, r)
		}
	}
	cfg := collector.Config{
		Targets:        targets,
		CaptureBytes:   s.opts.CaptureBytes,
		NoPayload:      s.opts.NoPayload,
		Lite:           s.opts.Lite,
		Gross:          s.opts.Gross,
		FollowChildren: s.opts.FollowChildren,
		OnRequest:      onRequest,
		OnProgress:     s.progress,
		NoSample:       true, // the tally has what serve exports
		OnAttached: func(line string) {
			s.attached(p)
			s.logf("%s", line)
		},
	}
	type outcome struct {
		run profile.Run
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		run, err := s.run(sctx, cfg)
		done <- outcome{run, err}
	}()
	tick := time.NewTicker(s.resolveEvery)
	defer tick.Stop()
	for {
		select {
		case o := <-done:
			s.ended(p, o.run, o.err == nil)
			return o.err
		case <-tick.C:
			if why := s.replaced(p); why != "" {
				s.logf("reqprof: %s: attaching again", why)
				cancel()
			}
		}
	}
}

// replaced says, when it is so, which spec has a process the session p
// does not profile; meanwhile it notes which of p's processes exited.
func (s *Server) replaced(p []sessionTarget) string {
	covered := map[int]map[string]bool{}
	for _, t := range p {
		if covered[t.spec] == nil {
			covered[t.spec] = map[string]bool{}
		}
		covered[t.spec][t.key] = true
	}
	why := ""
	for i, spec := range s.opts.Specs {
		if spec.PID != 0 || (spec.Cgroup != "" && covered[i] != nil) {
			continue // a pid never comes back; a cgroup's new members are added by the collector
		}
		for _, inst := range s.resolve(i) {
			key := inst.key()
			if spec.Cgroup != "" {
				key = "cgroup"
			}
			if !covered[i][key] && why == "" {
				why = fmt.Sprintf("%s has a new process", spec)
				if inst.PID != 0 {
					why = fmt.Sprintf("%s is now pid %d", spec, inst.PID)
				}
			}
		}
	}
	s.mu.Lock()
	for i := range s.current {
		t := &s.current[i]
		if !t.gone && t.inst.PID != 0 && len(s.proc.byPID(t.inst.PID, t.inst.Start)) == 0 {
			t.gone = true
		}
	}
	s.mu.Unlock()
	return why
}

// attached notes that p's processes are profiled from now on.
func (s *Server) attached(p []sessionTarget) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current = slices.Clone(p)
	s.lostNow = make([]uint64, len(p))
	s.bpfNow = 0
	s.attaches++
}

// progress takes the collector's figures of the running session; each only
// grows within it.
func (s *Server) progress(p collector.Progress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, n := range p.Lost {
		if i < len(s.lostNow) {
			s.lostNow[i] = max(s.lostNow[i], n)
		}
	}
	if p.Overhead.Measured {
		s.bpfKnown = true
		s.bpfNow = max(s.bpfNow, collector.BPFNsEstimate(p.Overhead))
	}
}

// ended folds a finished session's figures into the totals. Its result's
// lost events are the final count, with what only the window's end tells
// (records the collector could not read).
func (s *Server) ended(p []sessionTarget, run profile.Run, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, t := range p {
		lost := uint64(0)
		if i < len(s.lostNow) {
			lost = s.lostNow[i]
		}
		if ok && i < len(run.Targets) {
			lost = max(lost, run.Targets[i].LostEvents)
		}
		s.lost[t.label] += lost
	}
	if ok && run.Overhead.Measured {
		s.bpfKnown = true
		s.bpfNow = max(s.bpfNow, collector.BPFNsEstimate(run.Overhead))
	}
	s.bpfNs += s.bpfNow
	s.bpfNow, s.lostNow, s.current = 0, nil, nil
}

// exported is what a scrape reads of the server's state, beyond the tally.
type exported struct {
	lost      map[string]uint64     // by label, finished sessions' and the running one's
	processes map[string][]instance // by label, the processes profiled now
	bpfNs     uint64
	bpfKnown  bool
	attaches  uint64
}

func (s *Server) state() exported {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := exported{
		lost: make(map[string]uint64, len(s.lost)), processes: map[string][]instance{},
		bpfNs: s.bpfNs + s.bpfNow, bpfKnown: s.bpfKnown, attaches: s.attaches,
	}
	for label, n := range s.lost {
		e.lost[label] = n
	}
	for i, t := range s.current {
		if i < len(s.lostNow) {
			e.lost[t.label] += s.lostNow[i]
		}
		if !t.gone {
			inst := t.inst
			if inst.PID == 0 { // a cgroup: no one pid stands for it
				inst.Comm = "cgroup"
			}
			e.processes[t.label] = append(e.processes[t.label], inst)
		}
	}
	return e
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.Log != nil {
		fmt.Fprintf(s.opts.Log, format+"\n", args...)
	}
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// ParsePort reads a --port value: a TCP port, 1 to 65535.
func ParsePort(s string) (int, error) {
	port, err := strconv.Atoi(s)
	if err != nil || port < 1 || port > 65535 {
		return 0, errors.New("not a TCP port: want 1 to 65535")
	}
	return port, nil
}
