package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/live"
	"github.com/reqprof/reqprof/profile"
)

// watcher is what attach does with requests while its windows run: the
// live view on stderr and the request log, each if asked.
type watcher struct {
	tally   *live.Tally
	monitor *live.Monitor
	log     *live.RequestLog
}

// newWatcher sets up the live view (when showLive) and the request log
// (when l is not nil) for targets, named as the view shows them.
func newWatcher(targets []collector.Target, showLive bool, duration time.Duration, l *live.RequestLog, stderr io.Writer) *watcher {
	w := &watcher{log: l}
	names := viewNames(targets)
	if showLive {
		w.tally = live.NewTally(0)
		w.tally.Bind(names)
		terminal, width := terminalOf(stderr)
		w.monitor = live.NewMonitor(w.tally, live.NewView(stderr, terminal, width), duration, live.DefaultTopRoutes)
	}
	if l != nil {
		l.Bind(names)
	}
	return w
}

// onRequest is what is handed each finished request: the live view's
// tally, the request log, both, or nothing (nil).
func (w *watcher) onRequest() func(target int, r profile.Request) {
	switch {
	case w.tally != nil && w.log != nil:
		return func(target int, r profile.Request) {
			w.tally.Add(target, r)
			w.log.Add(target, r)
		}
	case w.tally != nil:
		return w.tally.Add
	case w.log != nil:
		return w.log.Add
	}
	return nil
}

// onProgress is what is handed the collector's progress each second: the
// live view's count of what was lost, or nothing (nil).
func (w *watcher) onProgress() func(collector.Progress) {
	if w.monitor == nil {
		return nil
	}
	return func(p collector.Progress) { w.monitor.SetLost(p.Lost) }
}

// opened starts the view as a window opens; closed stops it and takes it
// off a terminal.
func (w *watcher) opened() {
	if w.monitor != nil {
		w.monitor.Start()
	}
}

func (w *watcher) closed() {
	if w.monitor != nil {
		w.monitor.Stop()
	}
}

// viewNames names each target as the view and the log show it: its label,
// else its command name and pid (or its cgroup), unique among them.
func viewNames(targets []collector.Target) []string {
	names := make([]string, len(targets))
	seen := map[string]bool{}
	for i, t := range targets {
		name := t.Label
		switch {
		case name != "":
		case t.Cgroup != "":
			name = t.Cgroup
		default:
			name = fmt.Sprint(t.PID)
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", t.PID)); err == nil {
				name = strings.TrimSpace(string(b)) + " " + name
			}
		}
		for base, n := name, 2; seen[name]; n++ {
			name = fmt.Sprintf("%s #%d", base, n)
		}
		seen[name] = true
		names[i] = name
	}
	return names
}

// terminalOf says whether w is a terminal, and its width in columns (0
// when unknown).
func terminalOf(w io.Writer) (terminal bool, width int) {
	f, ok := w.(*os.File)
	if !ok {
		return false, 0
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return false, 0
	}
	if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil {
		width = int(ws.Col)
	}
	return true, width
}
