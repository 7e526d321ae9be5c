package collector_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/internal/testservers/calclient"
	"github.com/reqprof/reqprof/internal/testservers/grpcserver"
	"github.com/reqprof/reqprof/profile"
)

// calClient is a calclient process: it has opened its connections and
// waits for SIGUSR1 to make its calls.
type calClient struct {
	cmd *exec.Cmd
	out *bufio.Reader
}

func startCalclient(t *testing.T, args ...string) *calClient {
	t.Helper()
	bin := buildCmd(t, "github.com/reqprof/reqprof/internal/testservers/calclient/cmd/calclient")
	cmd := exec.Command(bin, args...)
	// Its stdin is /dev/null: a pipe there would make it a stdio server.
	c := &calClient{cmd: cmd, out: startReady(t, cmd)}
	return c
}

func (c *calClient) pid() int { return c.cmd.Process.Pid }

// calls makes its calls and returns what it measured of them.
func (c *calClient) calls(t *testing.T) calclient.Stats {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		t.Fatalf("calclient: %v", err)
	}
	var s calclient.Stats
	if err := json.Unmarshal([]byte(line), &s); err != nil {
		t.Fatalf("calclient printed %q: %v", line, err)
	}
	return s
}

// clientCalls are the finished requests of target that are client calls,
// by route, and checks that it has no other.
func clientCalls(t *testing.T, target profile.Target) map[profile.RouteKey]profile.Totals {
	t.Helper()
	for key, sum := range target.RouteTotals {
		if key.Peer == "" {
			t.Errorf("route %q (%d requests) is no client call", key.Route, sum.Requests)
		}
	}
	return target.RouteTotals
}

// TestGoHTTPClientCalls profiles Go's net/http client calling nginx on 4
// keep-alive connections, a process that serves nothing: its role is
// detected, each call is a request named with its method, path and peer,
// the calls are counted as the client counted them (within 1%), reqprof's
// all-in CPU per call (all it saw over the calls: the report's "all-in")
// is within 10% of the client's own process CPU per call, at least 80% of
// that CPU is attributed, and the calls' mean CPU is the client's own CPU
// per call less its sysmon thread's (which runs no goroutine: 5 to 9% of
// the client's CPU on a quiet machine, 12% on a loaded one).
func TestGoHTTPClientCalls(t *testing.T) {
	testbin.RequireBPF(t)
	nginxBin := lookPathOrFail(t, "nginx")
	_, port := startNginx(t, nginxBin, 1)
	peer := fmt.Sprintf("127.0.0.1:%d", port)
	const calls = 20000
	client := startCalclient(t, "--kind", "nethttp", "--addr", peer, "--conns", "4", "--calls", strconv.Itoa(calls), "--path", "/hello")
	var stats calclient.Stats
	// Go's sysmon runs no goroutine and makes no call: reqprof leaves its
	// CPU unattributed, as a server's (LIMITS.md).
	sysmon := goSysmonThread(t, client.pid())
	var sysmonNs uint64
	w := measure(t, []int{client.pid()}, func() {
		before := threadCPUNs(t, client.pid(), sysmon)
		stats = client.calls(t)
		sysmonNs = threadCPUNs(t, client.pid(), sysmon) - before
	})
	target := targetOf(t, w.run, client.pid())
	if target.Role != profile.RoleClient || target.RoleFrom != collector.RoleDetected {
		t.Errorf("role %q (%s), want client detected", target.Role, target.RoleFrom)
	}
	routes := clientCalls(t, target)
	want := profile.RouteKey{Route: "GET /hello -> " + peer, Peer: peer}
	if routes[want].Requests == 0 {
		t.Errorf("no calls on route %q: %v", want.Route, routes)
	}
	got := target.Finished.Requests
	perCall := float64(stats.ProcessCPUNs-sysmonNs) / float64(stats.Calls) / 1e3
	mean := meanFinishedCPUUs(target)
	t.Logf("sysmon (tid %d): %.1f ms, %.1f%% of the client's CPU; reqprof's unattributed %.1f ms", sysmon, float64(sysmonNs)/1e6,
		100*float64(sysmonNs)/float64(stats.ProcessCPUNs), float64(target.UnattributedNs)/1e6)
	attributed := float64(target.Finished.CPUNs+target.UnfinishedNs) / float64(w.schedCPU[client.pid()])
	t.Logf("net/http client: %d calls, reqprof %d; CPU per call: own %.1f µs, reqprof %.1f µs; attributed %.1f%% of %.1f ms; latency mean %.1f µs",
		stats.Calls, got, perCall, mean, 100*attributed, float64(w.schedCPU[client.pid()])/1e6,
		float64(target.Finished.LatencyNs)/float64(max(got, 1))/1e3)
	t.Logf("unattributed %.1f ms: %+v; between calls %.1f ms; setup %.1f ms; unfinished %d (%.1f ms)", float64(target.UnattributedNs)/1e6, target.UnattributedSources,
		float64(target.BetweenRequestsNs)/1e6, float64(target.Finished.SetupNs)/1e6, target.UnfinishedRequests, float64(target.UnfinishedNs)/1e6)
	if !within(float64(got), float64(stats.Calls), 0.01) {
		t.Errorf("calls: reqprof %d, the client %d: off by more than 1%%", got, stats.Calls)
	}
	if !within(mean, perCall, 0.10) {
		t.Errorf("CPU per call: reqprof %.1f µs, the client's own %.1f µs (less sysmon's): off by more than 10%%", mean, perCall)
	}
	allIn, ownAllIn := float64(target.ProcessNs())/float64(max(got, 1))/1e3, float64(stats.ProcessCPUNs)/float64(stats.Calls)/1e3
	t.Logf("all-in CPU per call: reqprof %.1f µs, the client's process %.1f µs", allIn, ownAllIn)
	if !within(allIn, ownAllIn, 0.10) {
		t.Errorf("all-in CPU per call: reqprof %.1f µs, the client's process %.1f µs: off by more than 10%%", allIn, ownAllIn)
	}
	if attributed < 0.80 {
		t.Errorf("attributed %.1f%% of the client's CPU, want at least 80%%", 100*attributed)
	}
}

// TestCalibratedClientCalls: a client whose every ns on its calling
// threads is a call's (raw HTTP/1.1 on 4 connections, a calibrated burn
// after each answer) measures its threads' CPU per call; reqprof's is
// within 3% of it.
func TestCalibratedClientCalls(t *testing.T) {
	testbin.RequireBPF(t)
	nginxBin := lookPathOrFail(t, "nginx")
	_, port := startNginx(t, nginxBin, 1)
	peer := fmt.Sprintf("127.0.0.1:%d", port)
	// Under nginx's 1000 calls a connection, after which it closes it.
	const calls = 3600
	client := startCalclient(t, "--kind", "raw", "--addr", peer, "--conns", "4", "--calls", strconv.Itoa(calls),
		"--path", "/calibrated", "--burn", "200us")
	var stats calclient.Stats
	w := measure(t, []int{client.pid()}, func() { stats = client.calls(t) })
	target := targetOf(t, w.run, client.pid())
	routes := clientCalls(t, target)
	route := profile.RouteKey{Route: "GET /calibrated -> " + peer, Peer: peer}
	sum := routes[route]
	own := float64(stats.CallThreadsCPUNs) / float64(stats.Calls) / 1e3
	mean := float64(sum.CPUNs) / float64(max(sum.Requests, 1)) / 1e3
	t.Logf("calibrated client: %d calls, reqprof %d on %q; CPU per call: own %.1f µs, reqprof %.1f µs (user %.1f, kernel %.1f)",
		stats.Calls, sum.Requests, route.Route, own, mean,
		float64(sum.UserNs)/float64(max(sum.Requests, 1))/1e3, float64(sum.KernelNs)/float64(max(sum.Requests, 1))/1e3)
	if !within(float64(sum.Requests), float64(stats.Calls), 0.01) {
		t.Errorf("calls: reqprof %d, the client %d", sum.Requests, stats.Calls)
	}
	if !within(mean, own, 0.03) {
		t.Errorf("CPU per call: reqprof %.1f µs, the client's own %.1f µs: off by more than 3%%", mean, own)
	}
	if !strings.HasPrefix(route.Route, "GET ") {
		t.Errorf("route %q", route.Route)
	}
	_ = time.Second
}

// TestMCPClientAndItsServers attaches to the MCP Go SDK's client alone,
// following its children: the mcpserver --compare driver, which spawns the
// server over stdio (CommandTransport) and over streamable HTTP, and calls
// both. In one target, the client's calls (over the stdio pipes, and over
// TCP) are requests of their own, named by their JSON-RPC method and
// peer, each counted as made, and each server's requests as it answered
// them; the target has both ends, with their sum.
func TestMCPClientAndItsServers(t *testing.T) {
	testbin.RequireBPF(t)
	bin := buildCmd(t, "github.com/reqprof/reqprof/internal/testservers/mcpserver/cmd/mcpserver")
	const calls = 200 // of each tool on each server
	cmd := exec.Command(bin, "--compare", "--calls", strconv.Itoa(calls), "--light", "100us", "--heavy", "400us", "--linger", "1m")
	cmd.Stderr = os.Stderr
	// In a process group of its own, killed whole: killing the driver alone
	// left the HTTP server it started running after every test run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	out := bufio.NewReader(stdout)
	readUntil := func(prefix string) string {
		t.Helper()
		for {
			line, err := out.ReadString('\n')
			if err != nil {
				t.Fatalf("mcpserver --compare: %v", err)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		}
	}
	pids := readUntil("stdio server pid")
	var stdioPID, httpPID int
	var endpoint string
	if _, err := fmt.Sscanf(pids, "stdio server pid %d; http server pid %d at %s", &stdioPID, &httpPID, &endpoint); err != nil {
		t.Fatalf("%q: %v", pids, err)
	}
	readUntil("calling at SIGUSR1")
	w := measureConfig(t, []int{cmd.Process.Pid}, func(cfg *collector.Config) { cfg.FollowChildren = true }, func() {
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		readUntil("servers up for")
	})
	target := targetOf(t, w.run, cmd.Process.Pid)
	httpPeer := strings.TrimPrefix(strings.TrimSuffix(strings.TrimSpace(endpoint), "/mcp"), "http://")
	routes := map[string]profile.Totals{}
	var names []string
	for key, sum := range target.RouteTotals {
		routes[key.Route] = sum
		names = append(names, fmt.Sprintf("%s (%d)", key.Route, sum.Requests))
	}
	t.Logf("role %s (%s); routes %q", target.Role, target.RoleFrom, names)
	if target.Role != profile.RoleBoth {
		t.Errorf("role %q, want both: a client with the servers it spawned", target.Role)
	}
	mean := func(name string) float64 {
		s := routes[name]
		return float64(s.CPUNs) / float64(max(s.Requests, 1)) / 1e3
	}
	for _, tool := range []string{"light", "heavy"} {
		for _, name := range []string{
			"tools/call " + tool + " -> stdio",                 // the client's calls over the pipes
			"tools/call " + tool,                               // the stdio server's requests
			"POST /mcp tools/call " + tool + " -> " + httpPeer, // the client's calls over TCP
			"POST /mcp tools/call " + tool,                     // the HTTP server's requests
		} {
			if got := routes[name].Requests; got != calls {
				t.Errorf("%q: %d, want the %d made", name, got, calls)
			}
		}
		t.Logf("%s: stdio client %.1f µs a call + server %.1f µs = %.1f; http client %.1f µs + server %.1f µs = %.1f", tool,
			mean("tools/call "+tool+" -> stdio"), mean("tools/call "+tool), mean("tools/call "+tool+" -> stdio")+mean("tools/call "+tool),
			mean("POST /mcp tools/call "+tool+" -> "+httpPeer), mean("POST /mcp tools/call "+tool),
			mean("POST /mcp tools/call "+tool+" -> "+httpPeer)+mean("POST /mcp tools/call "+tool))
	}
	var client, server uint64
	for key, sum := range target.RouteTotals {
		if key.Peer != "" {
			client += sum.CPUNs
		} else {
			server += sum.CPUNs
		}
	}
	if client == 0 || server == 0 {
		t.Errorf("client calls' CPU %d ns, servers' requests' %d ns: want both", client, server)
	}
	attributed := float64(target.AttributedNs()) / float64(target.ProcessNs())
	t.Logf("attributed %.1f%% of the client's and its servers' CPU", 100*attributed)
	if attributed < 0.80 {
		t.Errorf("attributed %.1f%%, want at least 80%%", 100*attributed)
	}
}

// TestGRPCClientCalls profiles grpc-go's client calling the grpc-go test
// server on 2 connections opened in the window: each call is a request
// named by its method path and peer, counted as the client made them.
func TestGRPCClientCalls(t *testing.T) {
	testbin.RequireBPF(t)
	bin := buildCmd(t, "github.com/reqprof/reqprof/internal/testservers/grpcserver/cmd/grpcserver")
	srv, err := calserver.Spawn(exec.Command(bin, "--light", "20us", "--heavy", "20us"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	const calls = 4000
	client := startCalclient(t, "--kind", "grpc", "--addr", srv.Addr, "--conns", "2", "--calls", strconv.Itoa(calls))
	var stats calclient.Stats
	w := measure(t, []int{client.pid()}, func() { stats = client.calls(t) })
	target := targetOf(t, w.run, client.pid())
	routes := clientCalls(t, target)
	key := profile.RouteKey{Route: grpcserver.Methods.Light + " -> " + srv.Addr, Peer: srv.Addr}
	got := routes[key]
	perCall := float64(stats.ProcessCPUNs) / float64(stats.Calls) / 1e3
	t.Logf("grpc client: %d calls, reqprof %d on %q (protocol %s), %.1f µs a call, the client's own %.1f µs; per burst %v; routes %v",
		stats.Calls, got.Requests, key.Route, got.Protocol, meanTotalsUs(got), perCall, target.PerBurst, len(routes))
	if got.Requests != calls {
		t.Errorf("calls: reqprof %d on %q, the client made %d", got.Requests, key.Route, calls)
	}
	if got.Protocol != "grpc" {
		t.Errorf("protocol %q, want grpc", got.Protocol)
	}
}

// TestClientCallingItself: a process that serves HTTP and calls itself on
// loopback (a proxy's shape, and a connection to its own port), given
// --role both: each call is counted once as a call, named with its peer,
// and each request once as a request served, and the two are told apart.
// Detected, it is a server: its calls are no requests.
func TestClientCallingItself(t *testing.T) {
	testbin.RequireBPF(t)
	const calls = 4000
	for _, role := range []string{profile.RoleBoth, ""} {
		client := startCalclient(t, "--serve-self", "--kind", "nethttp", "--conns", "2", "--calls", strconv.Itoa(calls), "--path", "/self")
		var stats calclient.Stats
		w := measureConfig(t, []int{client.pid()}, func(cfg *collector.Config) { cfg.Role = role }, func() { stats = client.calls(t) })
		target := targetOf(t, w.run, client.pid())
		var called, served profile.Totals
		var peer string
		names := map[string]int{}
		for key, sum := range target.RouteTotals {
			names[key.Route] = sum.Requests
			if key.Peer != "" {
				called.Merge(sum)
				peer = key.Peer
			} else {
				served.Merge(sum)
			}
		}
		t.Logf("--role %q: %s (%s); %d calls made; calls %d (%.1f µs), served %d (%.1f µs); routes %v",
			role, target.Role, target.RoleFrom, stats.Calls, called.Requests, meanTotalsUs(called), served.Requests, meanTotalsUs(served), names)
		if uint64(served.Requests) != stats.Calls {
			t.Errorf("--role %q: %d requests served, %d calls made", role, served.Requests, stats.Calls)
		}
		if served.Requests > 0 && names["GET /self"] != served.Requests {
			t.Errorf("--role %q: requests served are not all GET /self: %v", role, names)
		}
		if role == "" {
			if target.Role != profile.RoleServer || called.Requests != 0 {
				t.Errorf("detected: role %q, %d calls: want a server's, none", target.Role, called.Requests)
			}
			continue
		}
		if target.Role != profile.RoleBoth || uint64(called.Requests) != stats.Calls {
			t.Errorf("--role both: role %q, %d calls counted, %d made", target.Role, called.Requests, stats.Calls)
		}
		if names["GET /self -> "+peer] != called.Requests {
			t.Errorf("calls not all named GET /self -> %s: %v", peer, names)
		}
	}
}

// TestAsyncioClientCalls: an asyncio client's 4 connections' calls
// interleave on its one loop thread; each connection's task burns a CPU
// of its own after each answer (100, 200, 300, 400 µs, in a loop
// calibrated on the thread's clock, with no syscall: a syscall ends a
// task's piece of the loop's iteration). With the asyncio model
// (detected), each call's CPU is its task's: see checkAsyncioClient.
func TestAsyncioClientCalls(t *testing.T) {
	checkAsyncioClient(t, "raw", 3200)
}

// TestAiohttpClientCalls: the same calls made with aiohttp's client
// (Debian's), its pool of 4 keep-alive connections shared by the tasks,
// as an application makes them.
func TestAiohttpClientCalls(t *testing.T) {
	checkAsyncioClient(t, "aiohttp", 3200)
}

// checkAsyncioClient runs internal/testservers/calclient/asyncio_client.py with --lib
// lib against nginx: the calls are counted as the client counted them
// (within 1%), each path's mean CPU is above the path before's by more
// than half the difference of their burns (some 100 µs), the all-in CPU per call is
// within 10% of the client's own CPU per call (process CPU, one thread),
// and at least 80% of its CPU is attributed.
func checkAsyncioClient(t *testing.T, lib string, calls int) {
	t.Helper()
	testbin.RequireBPF(t)
	python := lookPathOrFail(t, debianPython)
	nginxBin := lookPathOrFail(t, "nginx")
	_, port := startNginx(t, nginxBin, 1)
	peer := fmt.Sprintf("127.0.0.1:%d", port)
	// calls stays under nginx's 1000 a connection.
	cmd := exec.Command(python, "../internal/testservers/calclient/asyncio_client.py", "--lib", lib, "--addr", peer, "--conns", "4",
		"--calls", strconv.Itoa(calls), "--burn-us", "100")
	out := startReady(t, cmd)
	var stats struct {
		Calls        uint64 `json:"calls"`
		ProcessCPUNs uint64 `json:"process_cpu_ns"`
		Paths        map[string]struct {
			Calls  int    `json:"calls"`
			BurnNs uint64 `json:"burn_ns"` // one call's, timed during the calls
		} `json:"paths"`
	}
	w := measure(t, []int{cmd.Process.Pid}, func() {
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("%s client: %v", lib, err)
		}
		if err := json.Unmarshal([]byte(line), &stats); err != nil {
			t.Fatalf("%s client printed %q: %v", lib, line, err)
		}
	})
	target := targetOf(t, w.run, cmd.Process.Pid)
	routes := clientCalls(t, target)
	route := func(path string) profile.Totals {
		return routes[profile.RouteKey{Route: "GET " + path + " -> " + peer, Peer: peer}]
	}
	base, baseBurn := route("/c0"), float64(stats.Paths["/c0"].BurnNs)/1e3
	got := target.Finished.Requests
	perCall := float64(stats.ProcessCPUNs) / float64(stats.Calls) / 1e3
	attributed := float64(target.Finished.CPUNs+target.UnfinishedNs) / float64(w.schedCPU[cmd.Process.Pid])
	t.Logf("%s client (runtime %s, %s): %d calls, reqprof %d; CPU per call: own %.1f µs, reqprof %.1f µs; attributed %.1f%%; interleaved %d ns",
		lib, target.Runtime, target.RuntimeFrom, stats.Calls, got, perCall, meanFinishedCPUUs(target), 100*attributed, target.Finished.InterleavedNs)
	// Each path's calls burn a step (some 100 µs) more than the path
	// before's: its mean is above that path's by more than half the step
	// when the split follows the tasks (a piece given to the wrong task
	// blurs the steps, or inverts them). The burns are the client's own
	// timing of them during the calls: taken before the calls, as they
	// were until 2026-12-06, they missed what the calls burnt by up to a
	// fifth when the host's pace changed in between.
	prev, prevBurn := base, baseBurn
	for i := 1; i < 4; i++ {
		path := fmt.Sprintf("/c%d", i)
		r, own := route(path), stats.Paths[path]
		burn := float64(own.BurnNs) / 1e3
		diff := meanTotalsUs(r) - meanTotalsUs(base)
		t.Logf("%s: %d calls, %.1f µs a call, %.1f above /c0; its burn %.1f above /c0's", path, r.Requests, meanTotalsUs(r), diff, burn-baseBurn)
		if step, burnStep := meanTotalsUs(r)-meanTotalsUs(prev), burn-prevBurn; step < burnStep/2 {
			t.Errorf("%s: its calls' CPU %.1f µs above the path before's, whose burn is %.1f µs less", path, step, burnStep)
		}
		prev, prevBurn = r, burn
	}
	if target.Runtime != "asyncio" {
		t.Errorf("runtime %q, want asyncio detected", target.Runtime)
	}
	if !within(float64(got), float64(stats.Calls), 0.01) {
		t.Errorf("calls: reqprof %d, the client %d", got, stats.Calls)
	}
	if !within(meanFinishedCPUUs(target), perCall, 0.10) {
		t.Errorf("CPU per call: reqprof %.1f µs, the client's own %.1f µs: more than 10%% off", meanFinishedCPUUs(target), perCall)
	}
	if attributed < 0.80 {
		t.Errorf("attributed %.1f%% of the client's CPU, want at least 80%%", 100*attributed)
	}
}

// threadCPUNs is a thread's CPU (sum_exec_runtime) from its schedstat.
func threadCPUNs(t *testing.T, pid, tid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseUint(strings.Fields(string(b))[0], 10, 64)
	if err != nil {
		t.Fatalf("schedstat %q: %v", b, err)
	}
	return ns
}
