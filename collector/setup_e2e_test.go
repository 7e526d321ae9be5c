package collector_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/profile"
	"github.com/reqprof/reqprof/report"
)

// pythonHTTPServer is a Python standard-library HTTP server that answers
// every GET with a short body and, speaking HTTP/1.0, closes the
// connection after each response. Its argument says how it serves a
// connection: "threading" makes a thread for each (ThreadingHTTPServer),
// "forking" forks a process for each (socketserver.ForkingMixIn).
const pythonHTTPServer = `
import http.server, socketserver, sys

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

class Forking(socketserver.ForkingMixIn, http.server.HTTPServer):
    pass

kind = {"threading": http.server.ThreadingHTTPServer, "forking": Forking}[sys.argv[1]]
server = kind(("127.0.0.1", 0), Handler)
print("listening on 127.0.0.1:%d" % server.server_address[1], flush=True)
server.serve_forever()
`

// startPythonServer runs pythonHTTPServer serving as kind says.
func startPythonServer(t *testing.T, kind string) *calserver.Process {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is needed for the connection-per-request tests")
		}
		t.Skip("no python3")
	}
	cmd := exec.Command(python, "-c", pythonHTTPServer, kind)
	cmd.Stderr = os.Stderr
	p, err := calserver.Spawn(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// loadConnPerRequest sends requests on a connection of their own each,
// from conns clients at once.
func loadConnPerRequest(t *testing.T, addr string, conns, requests int) {
	t.Helper()
	res, err := loadgen.Run(context.Background(), loadgen.Config{Addr: addr, Conns: conns, Requests: requests, ConnPerRequest: true})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if res.Requests != requests {
		t.Fatalf("load got %d responses, want %d", res.Requests, requests)
	}
}

// summaryOf is target's summary as the report shows it.
func summaryOf(run profile.Run, target profile.Target) report.TargetSummary {
	return report.Summarize(profile.Run{Duration: run.Duration, Targets: []profile.Target{target}}).Targets[0]
}

// TestConnectionSetupThreadPerConnection: a Python ThreadingHTTPServer
// speaking HTTP/1.0 accepts, makes a thread, and closes for every request.
// The accept, the thread until it reads its connection, and the close and
// the thread's exit are the request's: unattributed CPU was 39% of the
// process's before they were; it must be under 10%, and every request
// counted.
func TestConnectionSetupThreadPerConnection(t *testing.T) {
	srv := startPythonServer(t, "threading")
	const requests = 600
	w := measure(t, []int{srv.PID()}, func() { loadConnPerRequest(t, srv.Addr, 2, requests) })
	target := targetOf(t, w.run, srv.PID())
	summary := summaryOf(w.run, target)
	unattributed := float64(target.UnattributedNs) / float64(target.ProcessNs())
	t.Logf("requests %d (unfinished %d); cpu per request %.1f µs of which setup %.1f µs; unattributed %.1f%% of %.1f ms; sources %v",
		target.Finished.Requests, target.UnfinishedRequests, summary.CPUUs.Mean, summary.SetupUs,
		100*unattributed, float64(target.ProcessNs())/1e6, target.UnattributedSources)
	if target.Finished.Requests != requests {
		t.Errorf("reqprof counted %d requests (and %d unfinished), load generator %d", target.Finished.Requests, target.UnfinishedRequests, requests)
	}
	if unattributed >= 0.10 {
		t.Errorf("unattributed CPU is %.1f%% of the process's: want under 10%%", 100*unattributed)
	}
	if summary.SetupUs <= 0 || summary.SetupUs >= summary.CPUUs.Mean {
		t.Errorf("connection setup %.1f µs per request, of %.1f µs: want a part of it", summary.SetupUs, summary.CPUUs.Mean)
	}
	t.Logf("kernel per request: %v", summary.KernelBreakdownCalls)
	checkCallsPerRequest(t, target, requests, "accept4", "clone3")
}

// checkCallsPerRequest checks that each of syscalls was charged to the
// requests about once a request: the connection's setup is theirs. A
// request's cost names its first eight syscalls and counts the rest
// together as other, and the thread or process made for a connection
// may add its own to the setup before its maker adds the accept and the
// clone or fork: a few of these can be among the other syscalls.
func checkCallsPerRequest(t *testing.T, target profile.Target, requests int, syscalls ...string) {
	t.Helper()
	for _, name := range syscalls {
		var calls uint64
		for cause, cost := range target.KernelBreakdown {
			if cause.Kind == profile.CauseSyscall && cause.Name == name {
				calls += cost.Calls
			}
		}
		if calls < uint64(requests)*9/10 {
			t.Errorf("%d %s calls named in %d requests: want about one a request", calls, name, requests)
		}
	}
}

// TestConnectionSetupCalibrated: the calibrated server makes a thread for
// each connection and closes it after its response. Every request is
// counted; its connection's setup is added to it, apart from which its
// CPU is within 3% of what the server measured of it on its own thread's
// clock (the read that starts it to the next read, which here is none).
// The process's CPU per request is logged beside them: it holds the Go
// runtime's own threads (sysmon, the thread that makes threads for
// locked goroutines), which serve no connection.
func TestConnectionSetupCalibrated(t *testing.T) {
	const burn = 200 * time.Microsecond
	const requests = 1500
	srv := startCalserver(t, "--model", "threads", "--close", "--burn", burn.String())
	w := measure(t, []int{srv.pid()}, func() { loadConnPerRequest(t, srv.addr, 2, requests) })
	truth := srv.stop(t)
	target := targetOf(t, w.run, srv.pid())
	summary := summaryOf(w.run, target)
	if truth.Requests != requests {
		t.Fatalf("server served %d requests, want %d", truth.Requests, requests)
	}
	allIn := meanFinishedCPUUs(target)
	setup := float64(target.Finished.SetupNs) / float64(target.Finished.Requests) / 1e3
	process := float64(w.schedCPU[srv.pid()]) / float64(truth.Requests) / 1e3
	got, want := allIn-setup, truth.MeanCPUMicros()
	t.Logf("requests %d (unfinished %d); all-in cpu per request %.1f µs = setup %.1f + request %.1f µs, server %.1f µs (%+.2f%%); process cpu per request %.1f µs; unattributed %.1f ms, sources %v",
		target.Finished.Requests, target.UnfinishedRequests, allIn, setup, got, want, 100*(got/want-1), process,
		float64(target.UnattributedNs)/1e6, target.UnattributedSources)
	if target.Finished.Requests != requests {
		t.Errorf("reqprof counted %d requests (and %d unfinished), server %d", target.Finished.Requests, target.UnfinishedRequests, truth.Requests)
	}
	if !within(got, want, 0.03) {
		t.Errorf("cpu per request less its setup %.1f µs, server measured %.1f µs: more than 3%% apart", got, want)
	}
	if summary.SetupUs <= 0 {
		t.Errorf("connection setup %.1f µs per request: want some", summary.SetupUs)
	}
	checkCallsPerRequest(t, target, requests, "accept4")
}

// TestConnectionSetupForking: a Python server that forks a process for
// each connection, its children followed. Every request is counted, and
// the setup (the accept, the fork, the child until it reads, the close
// and the child's exit) is shown.
func TestConnectionSetupForking(t *testing.T) {
	srv := startPythonServer(t, "forking")
	const requests = 300
	w := measureConfig(t, []int{srv.PID()}, func(cfg *collector.Config) { cfg.FollowChildren = true },
		func() { loadConnPerRequest(t, srv.Addr, 2, requests) })
	target := targetOf(t, w.run, srv.PID())
	summary := summaryOf(w.run, target)
	unattributed := float64(target.UnattributedNs) / float64(target.ProcessNs())
	t.Logf("requests %d (unfinished %d); cpu per request %.1f µs of which setup %.1f µs; unattributed %.1f%% of %.1f ms; sources %v",
		target.Finished.Requests, target.UnfinishedRequests, summary.CPUUs.Mean, summary.SetupUs,
		100*unattributed, float64(target.ProcessNs())/1e6, target.UnattributedSources)
	if target.Finished.Requests != requests {
		t.Errorf("reqprof counted %d requests (and %d unfinished), load generator %d", target.Finished.Requests, target.UnfinishedRequests, requests)
	}
	if summary.SetupUs <= 0 || summary.SetupUs >= summary.CPUUs.Mean {
		t.Errorf("connection setup %.1f µs per request, of %.1f µs: want a part of it", summary.SetupUs, summary.CPUUs.Mean)
	}
	t.Logf("kernel per request: %v", summary.KernelBreakdownCalls)
	checkCallsPerRequest(t, target, requests, "accept4", "clone")
}
