package collector_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/internal/testservers/stackservers"
	"github.com/reqprof/reqprof/profile"
)

// Interpreted routes: internal/testservers/stackservers' servers, in Python, PHP and
// JavaScript, each with two routes that burn their CPU in functions of
// their own, light (2 ms a request) and heavy (4 ms). Each route's
// samples must be under its own function (at least 80% of them, kernel
// samples included: a thread in a syscall is still in its function) and
// hardly ever under the other's (at most 2%), and every request served
// counted under its route.

// Burns of the interpreted routes, in µs a request.
const (
	interpLightUs = 2000
	interpHeavyUs = 4000
)

// interpRoute is one route of an interpreted server: its path and what
// its function is called in a frame (which matches).
type interpRoute struct {
	path     string
	function func(profile.Frame) bool
	name     string
}

// servedRequests is what internal/stackservers' servers print on SIGTERM.
type servedRequests struct {
	Requests map[string]uint64 `json:"requests"`
}

// profileInterpRoutes warms srv up with 40 requests of each route before
// the window (a JIT compiles what it runs often: a function's first calls
// are interpreted), then loads it with requests split between /light and
// /heavy over conns connections, sampling stacks, and returns the window
// and the server's own counts of what the window saw.
func profileInterpRoutes(t *testing.T, srv *calserver.Process, requests, conns int) (window, map[string]uint64) {
	t.Helper()
	const warm = 40
	if _, err := loadgen.Run(context.Background(), loadgen.Config{
		Addr: srv.Addr, Conns: 2, Requests: 2 * warm, Paths: []string{"/light", "/heavy"},
	}); err != nil {
		t.Fatalf("warm-up load: %v", err)
	}
	w := measureConfig(t, []int{srv.PID()}, func(cfg *collector.Config) { cfg.Stacks = true }, func() {
		if _, err := loadgen.Run(context.Background(), loadgen.Config{
			Addr: srv.Addr, Conns: conns, Requests: requests, Paths: []string{"/light", "/heavy"},
		}); err != nil {
			t.Fatalf("load: %v", err)
		}
	})
	var served servedRequests
	if err := srv.StopInto(&served); err != nil {
		t.Fatal(err)
	}
	for path := range served.Requests {
		served.Requests[path] -= warm
	}
	return w, served.Requests
}

// checkInterpRoutes checks each route's samples are under its own
// function (≥80%) and not the other's (≤2%), and its requests counted.
func checkInterpRoutes(t *testing.T, st *profile.Stacks, target profile.Target, served map[string]uint64, routes []interpRoute) {
	t.Helper()
	if st == nil {
		t.Fatal("no stacks in the run")
	}
	t.Logf("notes %q, lost %v", st.Notes, st.Lost)
	for i, r := range routes {
		other := routes[1-i]
		name := "GET " + r.path
		if got := routeRequests(target, name); uint64(got) != served[r.path] {
			t.Errorf("%s: %d requests reqprof finished, the server served %d", name, got, served[r.path])
		}
		var all, own, others uint64
		var outside []string           // the stacks of most samples not under its function
		for _, s := range st.Samples { // most samples first
			if s.Route.Route != name {
				continue
			}
			all += s.Count
			if underFunction(st, s, r.function) {
				own += s.Count
			} else if len(outside) < 3 {
				outside = append(outside, stackText(st, s))
			}
			if underFunction(st, s, other.function) {
				others += s.Count
			}
		}
		example := strings.Join(outside, "; ")
		if all == 0 {
			t.Errorf("%s: no samples", name)
			continue
		}
		ownShare, otherShare := float64(own)/float64(all), float64(others)/float64(all)
		t.Logf("%s: %d samples, %.1f%% under %s, %.1f%% under %s; most not under it: %s", name, all, 100*ownShare, r.name, 100*otherShare, other.name, example)
		if ownShare < 0.80 {
			t.Errorf("%s: %.1f%% of its samples under %s, want at least 80%%", name, 100*ownShare, r.name)
		}
		if otherShare > 0.02 {
			t.Errorf("%s: %.1f%% of its samples under %s, want at most 2%%", name, 100*otherShare, other.name)
		}
	}
}

// underFunction says whether a frame of a sample's stack is the
// function's.
func underFunction(st *profile.Stacks, s profile.StackSample, function func(profile.Frame) bool) bool {
	for _, i := range s.Frames {
		if function(st.Frames[i]) {
			return true
		}
	}
	return false
}

// stackText is a sample's stack, its 8 innermost frames, for the log.
func stackText(st *profile.Stacks, s profile.StackSample) string {
	var names []string
	for _, i := range s.Frames[:min(len(s.Frames), 8)] {
		names = append(names, st.Frames[i].Name())
	}
	return fmt.Sprintf("%d× %s", s.Count, strings.Join(names, " < "))
}

// jsFunction matches V8's name of a JavaScript function in its perf map:
// "JS:" then a tier mark ("^" Sparkplug, "*" optimized, "~" interpreted,
// or none), the function's name and its place.
func jsFunction(name string) func(profile.Frame) bool {
	return func(f profile.Frame) bool {
		rest, ok := strings.CutPrefix(f.Function, "JS:")
		if !ok || f.Module != profile.JITModule {
			return false
		}
		return strings.HasPrefix(strings.TrimLeft(rest, "^*~+"), name+" ")
	}
}

// TestStacksNodeRoutes: Node 20 run with --perf-basic-prof names its
// compiled JavaScript in /tmp/perf-PID.map, and V8 keeps frame pointers
// through it: each route's samples are under its own JavaScript function.
func TestStacksNodeRoutes(t *testing.T) {
	testbin.RequireBPF(t)
	// In a directory of its own: --perf-basic-prof has V8 write a log
	// file there too.
	srv := startScriptServerIn(t, t.TempDir(), "node", []string{"--perf-basic-prof"}, "stackservers", "routes.js",
		fmt.Sprint(interpLightUs), fmt.Sprint(interpHeavyUs))
	t.Cleanup(func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", srv.PID())) })
	w, served := profileInterpRoutes(t, srv, 800, 2)
	target := targetOf(t, w.run, srv.PID())
	checkInterpRoutes(t, target.Stacks, target, served, []interpRoute{
		{"/light", jsFunction("lightWork"), "lightWork"},
		{"/heavy", jsFunction("heavyWork"), "heavyWork"},
	})
}

// pyFunction matches a Python function's frame by its qualified name.
func pyFunction(name string) func(profile.Frame) bool {
	return func(f profile.Frame) bool { return f.Module == profile.PythonModule && f.Function == name }
}

// pythonInterpreters are the CPython builds the Python routes run on:
// Debian's 3.11 and pyenv's, each release reqprof reads.
var pythonInterpreters = []struct{ name, path string }{
	{"debian-3.11", "/usr/bin/python3.11"},
	{"pyenv-3.10", "/root/.pyenv/versions/3.10.13/bin/python3.10"},
	{"pyenv-3.12", "/root/.pyenv/versions/3.12.1/bin/python3.12"},
	{"pyenv-3.13", "/root/.pyenv/versions/3.13.0/bin/python3.13"},
}

// The Python routes' burns, in µs a request: http.server's own Python
// (parsing the request, writing the response) takes some 400 µs a request
// besides.
const (
	pythonLightUs = 4000
	pythonHeavyUs = 8000
)

// TestStacksPythonRoutes: a threaded http.server, each connection on a
// thread of its own, whose routes burn in light_work and heavy_work: each
// route's samples are under its own Python function, on every CPython
// release reqprof reads, from Debian's build without debug information
// to pyenv's. One connection: two threads contending for the GIL wake
// each other, which hands each the other's request (see the report).
func TestStacksPythonRoutes(t *testing.T) {
	testbin.RequireBPF(t)
	for _, py := range pythonInterpreters {
		t.Run(py.name, func(t *testing.T) {
			srv := startScriptServer(t, py.path, nil, "stackservers", "routes.py",
				fmt.Sprint(pythonLightUs), fmt.Sprint(pythonHeavyUs))
			w, served := profileInterpRoutes(t, srv, 400, 1)
			target := targetOf(t, w.run, srv.PID())
			checkInterpRoutes(t, target.Stacks, target, served, []interpRoute{
				{"/light", pyFunction("light_work"), "light_work"},
				{"/heavy", pyFunction("heavy_work"), "heavy_work"},
			})
		})
	}
}

// TestStacksUnknownPHPEngine: a PHP whose engine reqprof does not know
// (Debian's php8.2 with its build id changed to name an API of 2099) is
// sampled with its native frames only, and one note names what could not
// be read; no frame is taken for a PHP function.
func TestStacksUnknownPHPEngine(t *testing.T) {
	testbin.RequireBPF(t)
	orig, err := os.ReadFile(lookPathOrFail(t, "php8.2"))
	if err != nil {
		t.Fatal(err)
	}
	const known, unknown = "\x00API20220829,NTS\x00", "\x00API20990101,NTS\x00"
	if strings.Count(string(orig), known) != 1 {
		t.Fatalf("php8.2 names its engine %d times, want once", strings.Count(string(orig), known))
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "php8.2")
	if err := os.WriteFile(bin, []byte(strings.Replace(string(orig), known, unknown, 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("php/testdata/spin.php")
	if err != nil {
		t.Fatal(err)
	}
	// -n: no php.ini, no extension, which would refuse the engine.
	cmd := exec.Command(bin, "-n", script)
	startReady(t, cmd)
	w := measureConfig(t, []int{cmd.Process.Pid}, func(cfg *collector.Config) { cfg.Stacks = true }, func() {
		waitCPU(t, cmd.Process.Pid, 500*time.Millisecond)
	})
	st := targetOf(t, w.run, cmd.Process.Pid).Stacks
	if st == nil {
		t.Fatal("no stacks")
	}
	var samples, inExecutor uint64
	for _, s := range st.Samples {
		samples += s.Count
		for _, i := range s.Frames {
			f := st.Frames[i]
			if f.Interpreted() {
				t.Fatalf("a PHP frame read with no layout known: %+v", f)
			}
			if f.Function == "execute_ex" {
				inExecutor += s.Count
				break
			}
		}
	}
	var noted []string
	for _, n := range st.Notes {
		if strings.Contains(n, "API 20990101") {
			noted = append(noted, n)
		}
	}
	t.Logf("%d samples, %d in execute_ex; notes %q", samples, inExecutor, st.Notes)
	if len(noted) != 1 || !strings.Contains(noted[0], "not known") {
		t.Errorf("notes %q, want one saying API 20990101's layout is not known", st.Notes)
	}
	if samples == 0 || inExecutor == 0 {
		t.Errorf("%d samples, %d of them in execute_ex: want its native frames", samples, inExecutor)
	}
}

// waitCPU waits until process pid has spent d more of CPU, within 30 s.
func waitCPU(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	start, err := collector.ProcessCPUNs(pid)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		now, err := collector.ProcessCPUNs(pid)
		if err != nil {
			t.Fatal(err)
		}
		if now-start >= uint64(d) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d spent %v of CPU in 30 s, want %v", pid, time.Duration(now-start), d)
		}
	}
}

// TestStacksPHPCLI: Debian's PHP CLI spinning in a method that a closure
// calls from array_map (two invocations of the executor, the closure's
// within array_map's C frame): nearly every sample reads, innermost
// first, Worker::heavy_work, {closure}, array_map, outer, {main}.
func TestStacksPHPCLI(t *testing.T) {
	testbin.RequireBPF(t)
	script, err := filepath.Abs("php/testdata/spin.php")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(lookPathOrFail(t, "php8.2"), "-n", script)
	startReady(t, cmd)
	w := measureConfig(t, []int{cmd.Process.Pid}, func(cfg *collector.Config) { cfg.Stacks = true }, func() {
		waitCPU(t, cmd.Process.Pid, 500*time.Millisecond)
	})
	st := targetOf(t, w.run, cmd.Process.Pid).Stacks
	if st == nil {
		t.Fatal("no stacks")
	}
	want := []string{"Worker::heavy_work", "{closure}", "array_map", "outer", "{main}"}
	var samples, whole uint64
	var other string
	for _, s := range st.Samples {
		samples += s.Count
		var php []string
		for _, i := range s.Frames {
			if f := st.Frames[i]; f.Module == profile.PHPModule {
				php = append(php, f.Function)
			}
		}
		if slices.Equal(php, want) {
			whole += s.Count
		} else if other == "" {
			other = stackText(st, s)
		}
	}
	t.Logf("%d samples, %d with the script's whole stack; notes %q; one without: %s", samples, whole, st.Notes, other)
	if samples == 0 || float64(whole) < 0.9*float64(samples) {
		t.Errorf("%d of %d samples read %q, want at least 90%%", whole, samples, want)
	}
}

// TestStacksPHPFPMRoutes: php-fpm behind nginx (each with its own
// configuration, in a directory of the test's), every path handed to
// internal/testservers/stackservers' routes.php: each route, named from
// its FastCGI params, has its samples under its own PHP function, in
// php-fpm's workers, whose layout reqprof takes from the stripped binary's
// exported executor_globals and its engine's API.
func TestStacksPHPFPMRoutes(t *testing.T) {
	testbin.RequireBPF(t)
	master, port, accessLog := startPHPFPMWith(t, map[string]string{"index.php": stackservers.PHP}, false)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	paths := []string{"/light", "/heavy"}
	// Each worker warmed up (its first request sets its engine up) before
	// the window.
	if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: addr, Conns: 4, Requests: 40, Paths: paths}); err != nil {
		t.Fatalf("warm-up load: %v", err)
	}
	before := accessLogCounts(t, accessLog)
	w := measureConfig(t, []int{master}, func(cfg *collector.Config) { cfg.Stacks, cfg.FollowChildren = true, true }, func() {
		if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: addr, Conns: 2, Requests: 800, Paths: paths}); err != nil {
			t.Fatalf("load: %v", err)
		}
	})
	after := accessLogCounts(t, accessLog)
	served := map[string]uint64{}
	for _, path := range paths {
		served[path] = uint64(after["GET "+path+" 200"] - before["GET "+path+" 200"])
	}
	target := targetOf(t, w.run, master)
	checkInterpRoutes(t, target.Stacks, target, served, []interpRoute{
		{"/light", phpFunction("light_work"), "light_work"},
		{"/heavy", phpFunction("heavy_work"), "heavy_work"},
	})
}

// phpFunction matches a PHP function's frame by its name.
func phpFunction(name string) func(profile.Frame) bool {
	return func(f profile.Frame) bool { return f.Module == profile.PHPModule && f.Function == name }
}

// TestStacksUnknownPython: a CPython whose layout reqprof does not know
// (pyenv's 3.9) is sampled with its native frames only, and one note
// names the release; no frame is taken for a Python function.
func TestStacksUnknownPython(t *testing.T) {
	testbin.RequireBPF(t)
	const python39 = "/root/.pyenv/versions/3.9.18/bin/python3.9"
	cmd := exec.Command(lookPathOrFail(t, python39), "-c", "import sys\nprint('ready', flush=True)\nwhile True: sum(i * i for i in range(1000))")
	startReady(t, cmd)
	w := measureConfig(t, []int{cmd.Process.Pid}, func(cfg *collector.Config) { cfg.Stacks = true }, func() {
		waitCPU(t, cmd.Process.Pid, 500*time.Millisecond)
	})
	st := targetOf(t, w.run, cmd.Process.Pid).Stacks
	if st == nil {
		t.Fatal("no stacks")
	}
	var samples, inLoop uint64
	for _, s := range st.Samples {
		samples += s.Count
		for _, i := range s.Frames {
			f := st.Frames[i]
			if f.Interpreted() {
				t.Fatalf("a Python frame read with no layout known: %+v", f)
			}
			if f.Function == "_PyEval_EvalFrameDefault" {
				inLoop += s.Count
				break
			}
		}
	}
	var noted []string
	for _, n := range st.Notes {
		if strings.Contains(n, "Python 3.9") {
			noted = append(noted, n)
		}
	}
	t.Logf("%d samples, %d in _PyEval_EvalFrameDefault; notes %q", samples, inLoop, st.Notes)
	if len(noted) != 1 || !strings.Contains(noted[0], "not known") {
		t.Errorf("notes %q, want one saying Python 3.9's layout is not known", st.Notes)
	}
	if samples == 0 || inLoop == 0 {
		t.Errorf("%d samples, %d of them in _PyEval_EvalFrameDefault: want its native frames", samples, inLoop)
	}
}
