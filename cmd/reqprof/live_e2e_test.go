package main

// Root tests of what attach shows while it runs: they load BPF, so they
// need root (under CI=true they fail rather than skip), and tmux.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/internal/testbin"
)

// loadFor sends the demo's MCP call to addr for about d, in batches, and
// returns how many were answered.
func loadFor(t *testing.T, addr string, d time.Duration) int {
	sent := 0
	for start := time.Now(); time.Since(start) < d; {
		res, err := loadgen.Run(context.Background(), loadgen.Config{
			Addr: addr, Conns: 2, Requests: 200, Paths: []string{"/mcp"}, Bodies: []string{demoCall},
		})
		if err != nil {
			t.Errorf("load: %v", err)
			return sent
		}
		sent += res.Requests
	}
	return sent
}

// liveHeading is the first line of a live frame on a terminal.
var liveHeading = regexp.MustCompile(`reqprof: \d+ s of 6 s, \d+ s left; per request over the last \d+ s`)

// TestLiveViewInTmux runs attach on a terminal (tmux) while a server is
// loaded: a table of the last second is redrawn in place each second, and
// taken away when the window closes, before the report.
func TestLiveViewInTmux(t *testing.T) {
	testbin.RequireBPF(t)
	tmux := testbin.LookPath(t, "tmux")
	t.Setenv(asReqprof, "1")
	srv, err := startDemoServer(demoServers[0].args)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	session := fmt.Sprintf("reqprof-live-%d", os.Getpid())
	command := fmt.Sprintf("env %s=1 %s attach --pid %d=lean --duration 6s; echo reqprof-exited; sleep 60", asReqprof, exe, srv.PID())
	if out, err := exec.Command(tmux, "new-session", "-d", "-s", session, "-x", "110", "-y", "50", command).CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v: %s", err, out)
	}
	defer exec.Command(tmux, "kill-session", "-t", session).Run()
	screen := func() string {
		out, err := exec.Command(tmux, "capture-pane", "-p", "-t", session).Output()
		if err != nil {
			t.Fatalf("tmux capture-pane: %v", err)
		}
		return string(out)
	}
	waitScreen := func(what string, within time.Duration, ok func(string) bool) string {
		t.Helper()
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			if s := screen(); ok(s) {
				return s
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("the screen never showed %s:\n%s", what, screen())
		return ""
	}
	waitScreen("attached", 30*time.Second, func(s string) bool { return strings.Contains(s, "attached to") })
	loaded := make(chan int)
	go func() { loaded <- loadFor(t, srv.Addr, 4*time.Second) }()

	// Each frame the screen shows, until two have been seen while the
	// load runs: the table is redrawn in place, never stacked.
	frames := map[string]bool{}
	waitScreen("two frames redrawn in place", 20*time.Second, func(s string) bool {
		headings := liveHeading.FindAllString(s, -1)
		if len(headings) > 1 {
			t.Fatalf("%d frame headings on the screen, want the one frame redrawn in place:\n%s", len(headings), s)
		}
		if len(headings) == 0 || frames[headings[0]] {
			return false
		}
		frames[headings[0]] = true
		for _, want := range []string{"target", "req/s", "cpu µs", "p99 µs", "user µs", "kernel µs", "lost", "lean", "(all)", "tools/call"} {
			if !strings.Contains(s, want) {
				t.Errorf("no %q in the frame:\n%s", want, s)
			}
		}
		return len(frames) == 2
	})
	<-loaded
	s := waitScreen("the report", 30*time.Second, func(s string) bool { return strings.Contains(s, "reqprof-exited") })
	if liveHeading.MatchString(s) || strings.Contains(s, "\x1b") {
		t.Errorf("the last frame was left on the screen:\n%s", s)
	}
	if !strings.Contains(s, "│ cpu") {
		t.Errorf("no report after the window:\n%s", s)
	}
}

// Where stderr is no terminal, the live view is plain lines, no escape
// codes; and --requests logs every request the report counts.
func TestLiveViewPlainAndRequestLog(t *testing.T) {
	testbin.RequireBPF(t)
	t.Setenv(asReqprof, "1")
	srv, err := startDemoServer(demoServers[0].args)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	dir := t.TempDir()
	logPath, jsonPath := filepath.Join(dir, "requests.ndjson"), filepath.Join(dir, "run.json")
	var stdout, stderr lockedBuffer
	done, ended := make(chan int, 1), make(chan struct{})
	go func() {
		done <- run([]string{"attach", "--pid", strconv.Itoa(srv.PID()) + "=lean", "--duration", "3s",
			"--json", jsonPath, "--requests", logPath, "--requests-rate", "1000000"}, &stdout, &stderr)
		close(ended)
	}()
	// The window's 3 s run from the attached line: the load goes inside.
	waitForText(t, &stderr, "reqprof: attached to", 30*time.Second, ended, func() string { return "stderr:\n" + stderr.String() })
	sent := loadFor(t, srv.Addr, 1*time.Second)
	if code := <-done; code != 0 {
		t.Fatalf("attach exited %d: %s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "\x1b") {
		t.Errorf("escape codes where stderr is no terminal: %q", stderr.String())
	}
	if !regexp.MustCompile(`(?m)^reqprof: \d s \(\d s left\) lean: [\d,.]+ req/s, cpu [\d,.]+ µs mean, [\d,.]+ µs p99, user [\d,.]+ µs, kernel [\d,.]+ µs, \d+ events lost$`).MatchString(stderr.String()) {
		t.Errorf("no plain line of the live view in:\n%s", stderr.String())
	}
	var summary struct {
		Targets []struct {
			Requests int `json:"requests"`
		} `json:"targets"`
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil || json.Unmarshal(b, &summary) != nil || len(summary.Targets) != 1 {
		t.Fatalf("reading %s: %v", jsonPath, err)
	}
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	for sc := bufio.NewScanner(f); sc.Scan(); lines++ {
		var r struct {
			Target string  `json:"target"`
			Route  string  `json:"route"`
			CPU    float64 `json:"cpu_us"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Target != "lean" || r.CPU <= 0 {
			t.Fatalf("line %d: %q: %v", lines+1, sc.Text(), err)
		}
	}
	if lines != summary.Targets[0].Requests || lines < sent {
		t.Errorf("%d lines logged, the report counts %d requests, the load sent %d", lines, summary.Targets[0].Requests, sent)
	}
}
