package collector_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/internal/testservers/gohttp"
	"github.com/reqprof/reqprof/internal/testservers/grpcserver"
	"github.com/reqprof/reqprof/profile"
)

// Requests that a burst of one connection does not delimit: HTTP/2 streams
// in flight at once, gRPC calls, HTTP/1.1 and Redis pipelining. Each is
// counted against the load generator's or the server's own count, named,
// and given its protocol.

// routeTotals is a target's exact totals by route name, over every port.
func routeTotals(target profile.Target) map[string]profile.Totals {
	out := map[string]profile.Totals{}
	for key, sum := range target.TotalsByRoute() {
		o := out[key.Route]
		o.Merge(sum)
		out[key.Route] = o
	}
	return out
}

func meanTotalsUs(sum profile.Totals) float64 {
	if sum.Requests == 0 {
		return 0
	}
	return float64(sum.CPUNs) / float64(sum.Requests) / 1e3
}

// TestHTTP2Streams loads a Go h2c server (prior knowledge) with h2load, two
// connections of eight streams in flight each, on two routes, one burning
// four times the other's CPU. Every stream is one request, named by its
// :method and :path, with protocol h2, counted exactly; the overall mean is
// the process's CPU per request.
func TestHTTP2Streams(t *testing.T) {
	testbin.RequireBPF(t)
	h2load := lookPathOrFail(t, "h2load")
	bin := buildCmd(t, "github.com/reqprof/reqprof/internal/testservers/gohttp/cmd/gohttp")
	cmd := exec.Command(bin, "--h2c", "--route", "/light=100us", "--route", "/heavy=400us")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	srv, err := calserver.Spawn(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)

	const streams = 6000
	var out []byte
	// Go's sysmon runs on the first thread the runtime makes, serves no
	// request and is left unattributed, named (docs/LIMITS.md): its CPU,
	// by the kernel's clock, is not the streams'. On this VM it took 3 to
	// 10 ms of a run, and up to 135 ms in CI (it polls every 20 µs while
	// the server's threads keep going in and out of syscalls).
	sysmon := goSysmonThread(t, srv.PID())
	var sysmonNs uint64
	w := measure(t, []int{srv.PID()}, func() {
		sysmon0 := threadCPUNs(t, srv.PID(), sysmon)
		defer func() { sysmonNs = threadCPUNs(t, srv.PID(), sysmon) - sysmon0 }()
		out, err = exec.Command(h2load, "-n", strconv.Itoa(streams), "-c", "2", "-m", "8",
			"http://"+srv.Addr+"/light", "http://"+srv.Addr+"/heavy").CombinedOutput()
		if err != nil {
			t.Fatalf("h2load: %v\n%s", err, out)
		}
	})
	var truth gohttp.Stats
	if err := srv.StopInto(&truth); err != nil {
		t.Fatal(err)
	}
	succeeded := h2loadSucceeded(t, out)
	target := targetOf(t, w.run, srv.PID())
	routes := routeTotals(target)
	t.Logf("h2load: %d succeeded; server: %v; per burst: %v", succeeded, truth.Requests, target.PerBurst)
	total := 0
	for _, path := range []string{"/light", "/heavy"} {
		got := routes["GET "+path]
		total += got.Requests
		if uint64(got.Requests) != truth.Requests[path] {
			t.Errorf("GET %s: reqprof counted %d streams, the server served %d", path, got.Requests, truth.Requests[path])
		}
		if got.Protocol != "h2" {
			t.Errorf("GET %s: protocol %q, want h2", path, got.Protocol)
		}
	}
	if total != succeeded {
		t.Errorf("reqprof counted %d streams, h2load %d succeeded", total, succeeded)
	}
	if len(target.PerBurst) > 0 {
		t.Errorf("requests counted per burst: %v", target.PerBurst)
	}
	// All-in: every request's CPU, with the connection's framing shared
	// out, against the process's CPU per request by the kernel's clock,
	// less sysmon's.
	perRequest := float64(w.schedCPU[srv.PID()]-sysmonNs) / float64(succeeded) / 1e3
	attributed := float64(target.AttributedNs()) / float64(total) / 1e3
	t.Logf("CPU per stream: reqprof %.1f µs attributed (mean of finished %.1f), process %.1f µs; /heavy %.1f, /light %.1f: difference %.1f, handlers' own %.1f",
		attributed, meanFinishedCPUUs(target), perRequest, meanTotalsUs(routes["GET /heavy"]), meanTotalsUs(routes["GET /light"]),
		meanTotalsUs(routes["GET /heavy"])-meanTotalsUs(routes["GET /light"]), truth.BurnUs["/heavy"]-truth.BurnUs["/light"])
	t.Logf("unattributed %.1f ms, by thread %v; sysmon (thread %d) ran %.1f ms by the kernel's clock",
		float64(target.UnattributedNs)/1e6, target.UnattributedSources, sysmon, float64(sysmonNs)/1e6)
	if named := unattributedOf(target, sysmon); float64(named) < 0.9*float64(sysmonNs) {
		t.Errorf("sysmon's thread %d: %.1f ms unattributed, named; it ran %.1f ms", sysmon, float64(named)/1e6, float64(sysmonNs)/1e6)
	}
	if !within(meanFinishedCPUUs(target), perRequest, 0.05) {
		t.Errorf("mean CPU per stream %.1f µs, the process used %.1f µs per stream: more than 5%% apart", meanFinishedCPUUs(target), perRequest)
	}
}

// goSysmonThread is the thread a Go process's runtime makes first, for
// sysmon (runtime.main starts it before anything else): the lowest tid
// after the process's own.
func goSysmonThread(t *testing.T, pid int) int {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	first := 0
	for _, task := range tasks {
		if tid, err := strconv.Atoi(task.Name()); err == nil && tid != pid && (first == 0 || tid < first) {
			first = tid
		}
	}
	if first == 0 {
		t.Fatalf("process %d has no thread but its first", pid)
	}
	return first
}

// unattributedOf is what target's unattributed CPU names thread tid for.
func unattributedOf(target profile.Target, tid int) uint64 {
	for _, src := range target.UnattributedSources {
		if int(src.TID) == tid {
			return src.Ns
		}
	}
	return 0
}

// h2loadSucceeded reads "requests: N total, N started, N done, N succeeded".
func h2loadSucceeded(t *testing.T, out []byte) int {
	t.Helper()
	m := regexp.MustCompile(`requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("h2load said:\n%s", out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestGRPCCalls calls a grpc-go server's unary and server-streaming methods,
// eight calls in flight on each of two connections: each call is one
// request, named by its method path, with protocol grpc. A connection that
// was open and busy before reqprof attached cannot be followed (its header
// compression state began before): its calls are counted per burst, and
// the target says so.
func TestGRPCCalls(t *testing.T) {
	testbin.RequireBPF(t)
	bin := buildCmd(t, "github.com/reqprof/reqprof/internal/testservers/grpcserver/cmd/grpcserver")
	srv, err := calserver.Spawn(exec.Command(bin, "--light", "50us", "--heavy", "200us", "--messages", "4"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	methods := []string{grpcserver.Methods.Light, grpcserver.Methods.Heavy, grpcserver.Methods.Stream}
	const calls = 6000
	var made map[string]uint64
	w := measure(t, []int{srv.PID()}, func() {
		made, err = grpcserver.Load(context.Background(), srv.Addr, 2, 8, calls, methods)
		if err != nil {
			t.Fatalf("load: %v", err)
		}
	})
	var truth grpcserver.Stats
	if err := srv.StopInto(&truth); err != nil {
		t.Fatal(err)
	}
	target := targetOf(t, w.run, srv.PID())
	routes := routeTotals(target)
	for _, m := range methods {
		got := routes[m]
		t.Logf("%s: reqprof %d calls, %.1f µs each; client %d, server %d", m, got.Requests, meanTotalsUs(got), made[m], truth.Calls[m])
		if uint64(got.Requests) != made[m] || made[m] != truth.Calls[m] {
			t.Errorf("%s: reqprof counted %d calls, the client made %d, the server served %d", m, got.Requests, made[m], truth.Calls[m])
		}
		if got.Protocol != "grpc" {
			t.Errorf("%s: protocol %q, want grpc", m, got.Protocol)
		}
	}
	if len(target.PerBurst) > 0 {
		t.Errorf("requests counted per burst: %v", target.PerBurst)
	}
}

// TestGRPCJoinedMidStream attaches to a gRPC server whose client connection
// is already open: its header compression state began before, so its
// calls cannot be named, but its frames still delimit them: each call is
// counted, named by port, and nothing is merged.
func TestGRPCJoinedMidStream(t *testing.T) {
	testbin.RequireBPF(t)
	bin := buildCmd(t, "github.com/reqprof/reqprof/internal/testservers/grpcserver/cmd/grpcserver")
	srv, err := calserver.Spawn(exec.Command(bin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	methods := []string{grpcserver.Methods.Light, grpcserver.Methods.Heavy}
	client, err := grpcserver.Dial(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := grpcserver.LoadOn(context.Background(), client, 1, 10, methods); err != nil {
		t.Fatal(err)
	}
	const calls = 2000
	w := measure(t, []int{srv.PID()}, func() {
		if _, err := grpcserver.LoadOn(context.Background(), client, 8, calls, methods); err != nil {
			t.Fatalf("load: %v", err)
		}
	})
	target := targetOf(t, w.run, srv.PID())
	_, port, _ := strings.Cut(srv.Addr, ":")
	routes := routeTotals(target)
	got := routes["h2 :"+port]
	for name, sum := range routes {
		t.Logf("route %q: %d requests, protocol %q", name, sum.Requests, sum.Protocol)
	}
	t.Logf("per burst %v", target.PerBurst)
	if got.Requests != calls || target.Finished.Requests != calls {
		t.Errorf("%d calls counted as h2 :%s, %d requests in all; want the %d calls made", got.Requests, port, target.Finished.Requests, calls)
	}
	if len(target.PerBurst) > 0 {
		t.Errorf("requests counted per burst: %v", target.PerBurst)
	}
}

// TestHTTP1Pipelined sends sixteen requests in each write to a Go net/http
// server, which reads them in one read: each is a request, named.
func TestHTTP1Pipelined(t *testing.T) {
	testbin.RequireBPF(t)
	bin := buildCmd(t, "github.com/reqprof/reqprof/internal/testservers/gohttp/cmd/gohttp")
	cmd := exec.Command(bin, "--route", "/a=20us", "--route", "/b=80us")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	srv, err := calserver.Spawn(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	const requests = 16000
	var res loadgen.Result
	w := measure(t, []int{srv.PID()}, func() {
		res, err = loadgen.Run(context.Background(), loadgen.Config{
			Addr: srv.Addr, Conns: 4, Requests: requests, Paths: []string{"/a", "/b"}, Pipeline: 16,
		})
		if err != nil {
			t.Fatalf("load: %v", err)
		}
	})
	var truth gohttp.Stats
	if err := srv.StopInto(&truth); err != nil {
		t.Fatal(err)
	}
	target := targetOf(t, w.run, srv.PID())
	routes := routeTotals(target)
	if len(target.PerBurst) > 0 {
		t.Errorf("requests counted per burst: %v", target.PerBurst)
	}
	for _, path := range []string{"/a", "/b"} {
		got := routes["GET "+path]
		t.Logf("GET %s: reqprof %d, load %d, server %d; %.1f µs each", path, got.Requests, res.PerPath[path], truth.Requests[path], meanTotalsUs(got))
		if got.Requests != res.PerPath[path] || uint64(got.Requests) != truth.Requests[path] {
			t.Errorf("GET %s: reqprof counted %d, the load got %d answers, the server served %d", path, got.Requests, res.PerPath[path], truth.Requests[path])
		}
		if got.Protocol != "http1" {
			t.Errorf("GET %s: protocol %q, want http1", path, got.Protocol)
		}
	}
	perRequest := float64(w.schedCPU[srv.PID()]) / float64(res.Requests) / 1e3
	t.Logf("CPU per request: reqprof %.1f µs, process %.1f µs", meanFinishedCPUUs(target), perRequest)
}

// TestRedisPipelined runs redis-benchmark with sixteen commands in flight
// per connection against Debian's redis-server: each SET and GET is a
// request, named by its command, as redis's own command statistics count.
func TestRedisPipelined(t *testing.T) {
	testbin.RequireBPF(t)
	redisServer := lookPathOrFail(t, "redis-server")
	bench := lookPathOrFail(t, "redis-benchmark")
	port := freePort(t)
	cmd := exec.Command(redisServer, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitListening(t, port)

	before := redisCommandCalls(t, addr)
	const n = 80000
	w := measure(t, []int{cmd.Process.Pid}, func() {
		out, err := exec.Command(bench, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-P", "16", "-n", strconv.Itoa(n), "-c", "4", "-t", "set,get", "-q").CombinedOutput()
		if err != nil {
			t.Fatalf("redis-benchmark: %v\n%s", err, out)
		}
	})
	after := redisCommandCalls(t, addr)
	target := targetOf(t, w.run, cmd.Process.Pid)
	routes := routeTotals(target)
	for _, command := range []string{"SET", "GET"} {
		served := after[strings.ToLower(command)] - before[strings.ToLower(command)]
		got := routes[command]
		t.Logf("%s: reqprof %d, redis %d; %.2f µs each", command, got.Requests, served, meanTotalsUs(got))
		if uint64(got.Requests) != served {
			t.Errorf("%s: reqprof counted %d, redis served %d", command, got.Requests, served)
		}
		if got.Protocol != "resp" {
			t.Errorf("%s: protocol %q, want resp", command, got.Protocol)
		}
	}
}

// redisCommandCalls reads INFO commandstats: calls per command.
func redisCommandCalls(t *testing.T, addr string) map[string]uint64 {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "INFO commandstats\r\n")
	r := bufio.NewReader(c)
	header, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(header, "$") {
		t.Fatalf("INFO: %q %v", header, err)
	}
	size, _ := strconv.Atoi(strings.TrimSpace(header[1:]))
	body := make([]byte, size+2)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatal(err)
	}
	calls := map[string]uint64{}
	for _, line := range strings.Split(string(body), "\r\n") {
		// cmdstat_get:calls=80000,usec=...
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseUint(strings.SplitN(rest, ",", 2)[0], 10, 64)
		calls[name] = n
	}
	return calls
}

// TestUnixSocket serves the calibrated server on a Unix socket, as app
// servers behind a local proxy do: the same request model as TCP, counts
// exact, CPU per request within 3% of the server's own.
func TestUnixSocket(t *testing.T) {
	for _, model := range []string{"threads", "epoll"} {
		t.Run(model, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "calserver.sock")
			srv := startCalserverAt(t, "unix:"+path, "--model", model, "--burn", "200us")
			const requests = 2000
			w := measure(t, []int{srv.pid()}, func() {
				if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: srv.addr, Conns: 8, Requests: requests}); err != nil {
					t.Fatalf("load: %v", err)
				}
			})
			truth := srv.stop(t)
			target := targetOf(t, w.run, srv.pid())
			routes := routeTotals(target)
			got, want := meanFinishedCPUUs(target), truth.MeanCPUMicros()
			t.Logf("%d requests (routes %d), %.1f µs each, the server %.1f µs (%+.2f%%); unattributed %.1f ms; per burst %v",
				target.Finished.Requests, len(routes), got, want, 100*(got/want-1), float64(target.UnattributedNs)/1e6, target.PerBurst)
			if target.Finished.Requests != requests || routes["GET /"].Requests != requests {
				t.Errorf("counted %d requests, %d of them GET /; want %d", target.Finished.Requests, routes["GET /"].Requests, requests)
			}
			if !within(got, want, 0.03) {
				t.Errorf("mean CPU per request %.1f µs, the server measured %.1f µs: more than 3%% apart", got, want)
			}
		})
	}
}

// asgiApp is a plain ASGI application: no framework, so that Debian's
// uvicorn alone runs it.
const asgiApp = `
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain"), (b"content-length", b"3")]})
    await send({"type": "http.response.body", "body": b"ok\n"})
`

// TestUvicornOnUnixSocket profiles Debian's uvicorn serving on a Unix
// socket, as it does behind a local proxy: every request counted, named by
// its path, its CPU seen.
func TestUvicornOnUnixSocket(t *testing.T) {
	testbin.RequireBPF(t)
	uvicorn := lookPathOrFail(t, "uvicorn")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "app.py"), []byte(asgiApp), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "uvicorn.sock")
	cmd := exec.Command(uvicorn, "--uds", sock, "--app-dir", dir, "--log-level", "warning", "--no-access-log", "app:app")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(15 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("uvicorn did not listen on its socket within 15 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	const requests = 3000
	var res loadgen.Result
	w := measure(t, []int{cmd.Process.Pid}, func() {
		var err error
		res, err = loadgen.Run(context.Background(), loadgen.Config{Addr: "unix:" + sock, Conns: 4, Requests: requests, Paths: []string{"/items/42", "/health"}})
		if err != nil {
			t.Fatalf("load: %v", err)
		}
	})
	target := targetOf(t, w.run, cmd.Process.Pid)
	routes := routeTotals(target)
	t.Logf("routes: items %d, health %d; %.1f µs per request; attributed %.1f%% of %.1f ms; per burst %v",
		routes["GET /items/{id}"].Requests, routes["GET /health"].Requests, meanFinishedCPUUs(target),
		100*float64(target.AttributedNs())/float64(target.ProcessNs()), float64(target.ProcessNs())/1e6, target.PerBurst)
	if routes["GET /items/{id}"].Requests != res.PerPath["/items/42"] || routes["GET /health"].Requests != res.PerPath["/health"] {
		t.Errorf("counted %d and %d, the load got %v", routes["GET /items/{id}"].Requests, routes["GET /health"].Requests, res.PerPath)
	}
	if target.AttributedNs()*10 < target.ProcessNs()*9 {
		t.Errorf("attributed %.1f%% of the process's CPU, want 90%% or more", 100*float64(target.AttributedNs())/float64(target.ProcessNs()))
	}
}

// TestStdioJSONRPC drives a JSON-RPC server over its stdin and stdout, as
// an MCP client drives a server it spawned: each call is a request, named by
// its method and tool, notifications are counted apart, and CPU per request
// is the server's own within 3%.
func TestStdioJSONRPC(t *testing.T) {
	testbin.RequireBPF(t)
	bin := buildCmd(t, "github.com/reqprof/reqprof/internal/testservers/stdioserver/cmd/stdioserver")
	cmd := exec.Command(bin, "--light", "100us", "--heavy", "400us")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	responses := bufio.NewReader(stdout)
	call := func(id int, tool string) {
		fmt.Fprintf(stdin, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{}}}`+"\n", id, tool)
		if _, err := responses.ReadBytes('\n'); err != nil {
			t.Fatalf("call %d: %v", id, err)
		}
	}
	const calls = 1000
	w := measure(t, []int{cmd.Process.Pid}, func() {
		for i := range calls {
			call(i, []string{"light", "heavy"}[i%2])
			if i%100 == 0 {
				fmt.Fprint(stdin, `{"jsonrpc":"2.0","method":"notifications/progress","params":{}}`+"\n")
			}
		}
	})
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	var truth struct {
		Requests      uint64  `json:"requests"`
		Notifications uint64  `json:"notifications"`
		MeanCPUUs     float64 `json:"mean_cpu_us"`
	}
	if err := json.Unmarshal(stderr.Bytes(), &truth); err != nil {
		t.Fatalf("the server said %q: %v", stderr.String(), err)
	}
	target := targetOf(t, w.run, cmd.Process.Pid)
	routes := routeTotals(target)
	light, heavy := routes["tools/call light"], routes["tools/call heavy"]
	got := meanFinishedCPUUs(target)
	t.Logf("light %d (%.1f µs), heavy %d (%.1f µs); notifications %d; mean %.1f µs, the server %.1f µs (%+.2f%%); per burst %v; routes %d",
		light.Requests, meanTotalsUs(light), heavy.Requests, meanTotalsUs(heavy), target.Notifications, got, truth.MeanCPUUs,
		100*(got/truth.MeanCPUUs-1), target.PerBurst, len(routes))
	if light.Requests != calls/2 || heavy.Requests != calls/2 || uint64(target.Finished.Requests) != truth.Requests {
		t.Errorf("counted %d light and %d heavy calls (%d requests), the server answered %d", light.Requests, heavy.Requests, target.Finished.Requests, truth.Requests)
	}
	if light.Protocol != "jsonrpc" {
		t.Errorf("protocol %q, want jsonrpc", light.Protocol)
	}
	if target.Notifications != truth.Notifications {
		t.Errorf("%d notifications counted, the server got %d", target.Notifications, truth.Notifications)
	}
	if !within(got, truth.MeanCPUUs, 0.03) {
		t.Errorf("mean CPU per request %.1f µs, the server measured %.1f µs: more than 3%% apart", got, truth.MeanCPUUs)
	}
}

// TestMCPServerOverStdio profiles an MCP server built with the official Go
// SDK, spawned by the SDK's client over stdio as MCP's default transport
// has it: every tools/call is a request named by its tool, counted as the
// server counted them, and the two tools' CPU differs by what they burn.
func TestMCPServerOverStdio(t *testing.T) {
	testbin.RequireBPF(t)
	bin := buildCmd(t, "github.com/reqprof/reqprof/internal/testservers/mcpserver/cmd/mcpserver")
	cmd := exec.Command(bin, "--light", "100us", "--heavy", "400us")
	// One P: the SDK runs each call's handler in a goroutine of its own
	// that never touches stdio, and with two Ps it may run on a thread that
	// was not handed the call, where its CPU is no request's (docs/LIMITS.md,
	// Go servers): the tools' difference then came out 0 to 17% over.
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "reqprof-test-client", Version: "1"}, nil)
	ctx := context.Background()
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	const calls = 1000
	w := measure(t, []int{cmd.Process.Pid}, func() {
		for i := range calls {
			name := []string{"light", "heavy"}[i%2]
			if _, err := session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}}); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
	})
	session.Close()
	cmd.Wait()
	var truth struct {
		Calls  map[string]uint64  `json:"calls"`
		BurnUs map[string]float64 `json:"burn_us"`
	}
	lines := bytes.Split(bytes.TrimSpace(stderr.Bytes()), []byte("\n"))
	if err := json.Unmarshal(lines[len(lines)-1], &truth); err != nil {
		t.Fatalf("the server said %q: %v", stderr.String(), err)
	}
	target := targetOf(t, w.run, cmd.Process.Pid)
	routes := routeTotals(target)
	light, heavy := routes["tools/call light"], routes["tools/call heavy"]
	attributed := float64(target.AttributedNs()) / float64(target.ProcessNs())
	burnDiff := truth.BurnUs["heavy"] - truth.BurnUs["light"]
	t.Logf("light %d (%.1f µs), heavy %d (%.1f µs): %.1f apart, the tools' burns %.1f apart by their own clock; attributed %.1f%%; per burst %v; routes %d",
		light.Requests, meanTotalsUs(light), heavy.Requests, meanTotalsUs(heavy), meanTotalsUs(heavy)-meanTotalsUs(light),
		burnDiff, 100*attributed, target.PerBurst, len(routes))
	if uint64(light.Requests) != truth.Calls["light"] || uint64(heavy.Requests) != truth.Calls["heavy"] || light.Requests != calls/2 {
		t.Errorf("counted %d light and %d heavy calls, the server answered %v", light.Requests, heavy.Requests, truth.Calls)
	}
	if d := meanTotalsUs(heavy) - meanTotalsUs(light); !within(d, burnDiff, 0.1) {
		t.Errorf("heavy costs %.1f µs more than light, the tools' burns %.1f µs apart: more than 10%% off", d, burnDiff)
	}
	// The SDK runs each call's handler in a goroutine that never reads or
	// writes stdio; on another thread its CPU is the request's only where
	// that thread was handed it (docs/LIMITS.md, Go servers).
	if attributed < 0.75 {
		t.Errorf("%.1f%% of the server's CPU attributed, want 75%% or more", 100*attributed)
	}
}

// TestStdioOutOfOrder drives the stdio server as a concurrent server is
// driven: two calls written at once, which it answers last first, and a
// slow call that waits while a call written after it is answered. Each call
// ends at the response with its id: counts exact, and the heavy and slow
// tools' mean CPU within 3% of the server's own, which counts by the rule
// reqprof keeps (the loop after a call, up to the next read, is that
// call's). The slow call keeps what ran up to the light call's read (its
// reading, parsing and the wait for more input), by the read mark there;
// without the marks the light call took it, some 40 µs, and came out +6.5
// to +16.5%. The light call, answered first of a pair read together, takes
// the whole read the server shares, and the server's own clock reads (a
// syscall each, on every boundary) fall on the other side of a boundary
// than reqprof's cuts: it came out −1.6 to −2.7% in 7 runs, and is held
// to 6%.
func TestStdioOutOfOrder(t *testing.T) {
	testbin.RequireBPF(t)
	bin := buildCmd(t, "github.com/reqprof/reqprof/internal/testservers/stdioserver/cmd/stdioserver")
	cmd := exec.Command(bin, "--out-of-order", "--light", "100us", "--heavy", "300us", "--slow", "400us", "--wait", "5ms")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	responses := bufio.NewReader(stdout)
	callLine := func(id int, tool string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{}}}`+"\n", id, tool)
	}
	// readIDs reads n responses and returns their ids in the order written.
	readIDs := func(n int) []int {
		var ids []int
		for range n {
			line, err := responses.ReadBytes('\n')
			if err != nil {
				t.Fatal(err)
			}
			var m struct{ ID int }
			json.Unmarshal(line, &m)
			ids = append(ids, m.ID)
		}
		return ids
	}
	const rounds = 400
	var reversed, overtaken int
	w := measure(t, []int{cmd.Process.Pid}, func() {
		id := 0
		for i := range rounds {
			if i%2 == 0 {
				// Two calls in one write: answered last first.
				io.WriteString(stdin, callLine(id, "heavy")+callLine(id+1, "light"))
				if got := readIDs(2); got[0] == id+1 {
					reversed++
				}
			} else {
				// A slow call, then a light one while it waits.
				io.WriteString(stdin, callLine(id, "slow"))
				time.Sleep(200 * time.Microsecond)
				io.WriteString(stdin, callLine(id+1, "light"))
				if got := readIDs(2); got[0] == id+1 {
					overtaken++
				}
			}
			id += 2
		}
	})
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	var truth struct {
		Requests   uint64             `json:"requests"`
		Calls      map[string]uint64  `json:"calls"`
		CPUUs      map[string]float64 `json:"cpu_us"`
		Unassigned float64            `json:"unassigned_us"`
	}
	if err := json.Unmarshal(stderr.Bytes(), &truth); err != nil {
		t.Fatalf("the server said %q: %v", stderr.String(), err)
	}
	target := targetOf(t, w.run, cmd.Process.Pid)
	routes := routeTotals(target)
	t.Logf("answered out of order: %d of %d pairs read together, %d of %d slow calls overtaken; per burst %v; the server's thread ran %.1f µs for no call",
		reversed, rounds/2, overtaken, rounds/2, target.PerBurst, truth.Unassigned)
	for _, tool := range []string{"light", "heavy", "slow"} {
		got := routes["tools/call "+tool]
		t.Logf("%s: %d calls, %.1f µs; the server %d, %.1f µs (%+.2f%%)", tool, got.Requests, meanTotalsUs(got),
			truth.Calls[tool], truth.CPUUs[tool], 100*(meanTotalsUs(got)/truth.CPUUs[tool]-1))
		if uint64(got.Requests) != truth.Calls[tool] {
			t.Errorf("%s: counted %d calls, the server answered %d", tool, got.Requests, truth.Calls[tool])
		}
		bound := 0.03
		if tool == "light" {
			bound = 0.06
		}
		if !within(meanTotalsUs(got), truth.CPUUs[tool], bound) {
			t.Errorf("%s: %.1f µs a call, the server measured %.1f µs: more than %.0f%% apart", tool, meanTotalsUs(got), truth.CPUUs[tool], 100*bound)
		}
	}
	if reversed < rounds/2*9/10 || overtaken < rounds/4 {
		t.Errorf("the server answered out of order only %d and %d times of %d", reversed, overtaken, rounds/2)
	}
}
