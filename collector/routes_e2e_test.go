package collector_test

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/profile"
)

func byRoute(requests []profile.Request) map[string][]profile.Request {
	routes := map[string][]profile.Request{}
	for _, r := range requests {
		routes[r.Route] = append(routes[r.Route], r)
	}
	return routes
}

// checkRoutes profiles a calibrated server whose routes burn different CPU
// and checks each route's count and mean CPU against the server's own.
func checkRoutes(t *testing.T, cfg loadgen.Config, names map[string]string, args ...string) {
	t.Helper()
	srv := startCalserver(t, args...)
	cfg.Addr = srv.addr
	var load loadgen.Result
	w := measure(t, []int{srv.pid()}, func() {
		var err error
		if load, err = loadgen.Run(context.Background(), cfg); err != nil {
			t.Fatalf("load: %v", err)
		}
	})
	truth := srv.stop(t)
	routes := byRoute(targetOf(t, w.run, srv.pid()).Requests)
	for serverKey, route := range names {
		want, got := truth.Routes[serverKey], routes[route]
		if len(got) != int(want.Requests) || want.Requests == 0 {
			t.Errorf("%q: reqprof counted %d, the server served %d", route, len(got), want.Requests)
			continue
		}
		cpu := meanCPUUs(got)
		t.Logf("%q: %d requests, reqprof %.1f µs, server %.1f µs (%+.2f%%)", route, len(got), cpu, want.MeanCPUMicros(), 100*(cpu/want.MeanCPUMicros()-1))
		if !within(cpu, want.MeanCPUMicros(), 0.03) {
			t.Errorf("%q: mean cpu %.1f µs, the server measured %.1f µs: more than 3%% apart", route, cpu, want.MeanCPUMicros())
		}
	}
	if len(routes) != len(names) {
		t.Errorf("routes %v, want exactly %v", keys(routes), names)
	}
	if load.Requests != cfg.Requests {
		t.Errorf("load got %d responses of %d", load.Requests, cfg.Requests)
	}
}

func keys(m map[string][]profile.Request) []string {
	var k []string
	for name := range m {
		k = append(k, name)
	}
	return k
}

// TestRoutesOfHTTPPaths: two paths with different, known CPU.
func TestRoutesOfHTTPPaths(t *testing.T) {
	checkRoutes(t,
		loadgen.Config{Conns: 4, Requests: 1200, Paths: []string{"/a?user=7", "/b"}},
		map[string]string{"/a": "GET /a", "/b": "GET /b"},
		"--model", "epoll", "--route", "/a=200us", "--route", "/b=1ms")
}

// TestRoutesOfJSONRPCMethods: MCP-style JSON-RPC over HTTP POST, two
// methods with different CPU, named by method (and tool).
func TestRoutesOfJSONRPCMethods(t *testing.T) {
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	checkRoutes(t,
		loadgen.Config{Conns: 4, Requests: 1200, Paths: []string{"/mcp", "/mcp"}, Bodies: []string{call, list}},
		map[string]string{"tools/call add": "POST /mcp tools/call add", "tools/list": "POST /mcp tools/list"},
		"--model", "threads", "--route", "tools/call add=200us", "--route", "tools/list=1ms")
}

// TestRedisCommands: redis-server from Debian under redis-benchmark: GET and
// SET are named and counted.
func TestRedisCommands(t *testing.T) {
	testbin.RequireBPF(t)
	server, bench := lookPathOrFail(t, "redis-server"), lookPathOrFail(t, "redis-benchmark")
	port := freePort(t)
	cmd := exec.Command(server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	waitListening(t, port)

	const perCommand = 20000
	var out []byte
	w := measure(t, []int{cmd.Process.Pid}, func() {
		var err error
		out, err = exec.Command(bench, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-t", "get,set",
			"-n", strconv.Itoa(perCommand), "-c", "8", "-q").CombinedOutput()
		if err != nil {
			t.Fatalf("redis-benchmark: %v\n%s", err, out)
		}
	})
	if !regexp.MustCompile(`GET: [\d.]+ requests per second`).Match(out) {
		t.Fatalf("redis-benchmark did not run GET:\n%s", out)
	}
	routes := byRoute(targetOf(t, w.run, cmd.Process.Pid).Requests)
	for _, command := range []string{"GET", "SET"} {
		got := len(routes[command])
		t.Logf("%s: %d requests, %.1f µs cpu each", command, got, meanCPUUs(routes[command]))
		if !within(float64(got), perCommand, 0.01) {
			t.Errorf("%s: counted %d, redis-benchmark sent %d: more than 1%% apart", command, got, perCommand)
		}
	}
}
