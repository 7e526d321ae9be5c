package serve

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/profile"
)

// fakeCollector stands for collector.Run: once attached it hands out a
// request every 100 µs until its window is closed, and loses an event per
// window.
type fakeCollector struct {
	mu      sync.Mutex
	windows [][]collector.Target
}

func (f *fakeCollector) run(ctx context.Context, cfg collector.Config) (profile.Run, error) {
	f.mu.Lock()
	f.windows = append(f.windows, cfg.Targets)
	f.mu.Unlock()
	cfg.OnAttached("reqprof: attached")
	tick := time.NewTicker(100 * time.Microsecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			run := profile.Run{Targets: make([]profile.Target, len(cfg.Targets))}
			run.Targets[0].LostEvents = 1
			return run, nil
		case <-tick.C:
		}
		for t := range cfg.Targets {
			cfg.OnRequest(t, profile.Request{Route: []string{"GET /a", "GET /b"}[i%2], UserNs: 50_000, KernelNs: 20_000, SyscallNs: 20_000, End: time.Duration(i)})
		}
		if i%100 == 0 {
			cfg.OnProgress(collector.Progress{Lost: make([]uint64, len(cfg.Targets))})
		}
	}
}

// series is a scrape's counters and histogram counts and sums, by name and
// labels.
func scrape(t *testing.T, s *Server) map[string]float64 {
	families, err := s.Registry().Gather()
	if err != nil {
		t.Error(err)
		return nil
	}
	out := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "reqprof_") {
			continue
		}
		for _, m := range f.Metric {
			key := f.GetName() + labelsOf(m)
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.Histogram.GetSampleCount())
				out[key+"_sum"] = m.Histogram.GetSampleSum()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			}
		}
	}
	return out
}

func labelsOf(m *dto.Metric) string {
	var parts []string
	for _, l := range m.Label {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

// A --comm target whose process is replaced is attached anew, and goes on
// in the same series: a scrape at any moment, in the middle of the
// replacement too, never sees a counter go down.
func TestReplacedProcessGoesOnInTheSameSeries(t *testing.T) {
	p := newFakeProc(t)
	p.process(100, 1, "calserver", 500)
	var log bytes.Buffer
	var logMu sync.Mutex
	s := New(Options{Specs: []Spec{{Comm: "calserver"}}, Log: lockedWriter{&log, &logMu}})
	fake := &fakeCollector{}
	s.proc, s.run = p.fs(), fake.run
	s.resolveEvery, s.minReattachEvery = 20*time.Millisecond, 50*time.Millisecond

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	prev := map[string]float64{}
	scrapes := 0
	check := func() map[string]float64 {
		now := scrape(t, s)
		for key, v := range now {
			if strings.Contains(key, "_info") || strings.Contains(key, "_up") || strings.Contains(key, "build_info") {
				continue
			}
			if v < 0 || v < prev[key] {
				t.Errorf("scrape %d: %s went from %g to %g", scrapes, key, prev[key], v)
			}
		}
		prev = now
		scrapes++
		return now
	}
	waitFor := func(what string, ok func(map[string]float64) bool) map[string]float64 {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if now := check(); ok(now) {
				return now
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Fatalf("no scrape had %s; the last: %v", what, prev)
		return nil
	}
	requests := `reqprof_requests_total{route=GET /a,target=calserver}`
	waitFor("requests of pid 100", func(m map[string]float64) bool {
		return m[requests] > 50 && m["reqprof_target_info{comm=calserver,pid=100,target=calserver}"] == 1
	})
	p.exit(100)
	p.process(200, 1, "calserver", 900)
	before := prev[requests]
	now := waitFor("requests of pid 200", func(m map[string]float64) bool {
		return m["reqprof_target_info{comm=calserver,pid=200,target=calserver}"] == 1 && m[requests] > before+50
	})
	if now["reqprof_attaches_total{}"] != 2 || now["reqprof_lost_events_total{target=calserver}"] != 1 {
		t.Errorf("attaches %g, lost %g; want 2 and the first window's 1", now["reqprof_attaches_total{}"], now["reqprof_lost_events_total{target=calserver}"])
	}
	if _, old := now["reqprof_target_info{comm=calserver,pid=100,target=calserver}"]; old {
		t.Error("pid 100 still said to be profiled")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(fake.windows) != 2 || fake.windows[0][0].PID != 100 || fake.windows[1][0].PID != 200 {
		t.Errorf("windows %v, want pid 100's then pid 200's", fake.windows)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(log.String(), "--comm calserver is now pid 200: attaching again") {
		t.Errorf("log %q", log.String())
	}
	t.Logf("%d scrapes", scrapes)
}

// With no process to profile, serve waits, and says so once.
func TestWaitsForATarget(t *testing.T) {
	p := newFakeProc(t)
	var log bytes.Buffer
	var logMu sync.Mutex
	s := New(Options{Specs: []Spec{{Port: 8080}}, Log: lockedWriter{&log, &logMu}})
	fake := &fakeCollector{}
	s.proc, s.run = p.fs(), fake.run
	s.resolveEvery, s.minReattachEvery = 10*time.Millisecond, 10*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if log.String() != "reqprof: waiting for a process of --port 8080\n" || len(fake.windows) != 0 {
		t.Errorf("log %q, %d windows", log.String(), len(fake.windows))
	}
}

// Every target a --pid, and every one exited: serve is done.
func TestEndsWhenEveryPIDHasExited(t *testing.T) {
	p := newFakeProc(t)
	s := New(Options{Specs: []Spec{{PID: 100}}})
	s.proc = p.fs()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.Run(ctx); err != nil || ctx.Err() != nil {
		t.Errorf("Run: %v, context %v", err, ctx.Err())
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
