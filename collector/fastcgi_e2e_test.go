package collector_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/internal/testbin"
	"github.com/reqprof/reqprof/internal/testservers/nginxconf"
)

// PHP behind nginx: /light.php, a script of its own, and /items/{id},
// which nginx hands to the front controller index.php. Each burns a loop
// of its own size, and says how long its answer is (the load generator
// reads no chunked body).
var phpScripts = map[string]string{
	"light.php": `<?php
$s = 0;
for ($i = 0; $i < 2000; $i++) { $s += $i % 7; }
$out = "light $s\n";
header("Content-Length: " . strlen($out));
echo $out;
`,
	"index.php": `<?php
$s = 0;
for ($i = 0; $i < 60000; $i++) { $s += $i % 7; }
$out = "item $s\n";
header("Content-Length: " . strlen($out));
echo $out;
`,
}

// phpFPMConfig is php-fpm's configuration: in the foreground, one pool of
// four workers made at start, on a Unix socket in dir, logging each
// request as "METHOD REQUEST_URI STATUS". A worker serves
// one connection at a time, and a connection nginx keeps open holds it: as
// many workers as the load's connections, or nginx waits on connections
// no worker accepts.
func phpFPMConfig(dir string) string {
	return fmt.Sprintf(`[global]
pid = %[1]s/php-fpm.pid
error_log = %[1]s/php-fpm.log
daemonize = no
[app]
listen = %[1]s/php-fpm.sock
pm = static
pm.max_children = 4
access.log = %[1]s/access.log
access.format = "%%m %%{REQUEST_URI}e %%s"
`, dir)
}

// startPHPFPM runs php-fpm (phpScripts) and nginx in front of it, each with its own
// configuration in a new directory, on loopback; it returns php-fpm's
// master, nginx's port and php-fpm's access log.
func startPHPFPM(t *testing.T, keepConn bool) (master, port int, accessLog string) {
	t.Helper()
	return startPHPFPMWith(t, phpScripts, keepConn)
}

// startPHPFPMWith is startPHPFPM serving scripts, by file name.
func startPHPFPMWith(t *testing.T, scripts map[string]string, keepConn bool) (master, port int, accessLog string) {
	t.Helper()
	fpmBin := lookPathOrFail(t, "php-fpm8.2")
	nginxBin := lookPathOrFail(t, "nginx")
	dir := t.TempDir()
	www := filepath.Join(dir, "www")
	if err := os.Mkdir(www, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range scripts {
		if err := os.WriteFile(filepath.Join(www, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fpmConf := filepath.Join(dir, "php-fpm.conf")
	if err := os.WriteFile(fpmConf, []byte(phpFPMConfig(dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	// -n: no php.ini, so that the system's does not change the run; -R:
	// the tests run as root, which php-fpm refuses without it.
	args := []string{"-n", "-F", "-y", fpmConf}
	if os.Geteuid() == 0 {
		args = append(args, "-R")
	}
	fpm := exec.Command(fpmBin, args...)
	fpm.Stderr = os.Stderr
	if err := fpm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = fpm.Process.Signal(syscall.SIGTERM) // the master ends its workers
		_ = fpm.Wait()
	})
	sock := filepath.Join(dir, "php-fpm.sock")
	waitUnixListening(t, sock)

	port = freePort(t)
	conf := nginxconf.Config{Dir: dir, Port: port, FastCGI: "unix:" + sock, Root: www, FastCGIKeepConn: keepConn}.Text()
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	nginx := exec.Command(nginxBin, "-c", confPath, "-p", dir)
	nginx.Stderr = os.Stderr
	if err := nginx.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = nginx.Process.Signal(syscall.SIGTERM)
		_ = nginx.Wait()
	})
	waitListening(t, port)
	return fpm.Process.Pid, port, filepath.Join(dir, "access.log")
}

// waitUnixListening waits until a connection to the Unix socket at path
// is accepted.
func waitUnixListening(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing accepts on %s after 15 s", path)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// accessLogCounts counts php-fpm's access log lines by "METHOD URI STATUS".
func accessLogCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		counts[strings.TrimSpace(sc.Text())]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return counts
}

// readBegunBeforeAttach is why a burst whose first read the programs did
// not see is counted as one request.
const readBegunBeforeAttach = "bytes not captured (a read begun before attach)"

// TestPHPFPMBehindNginx: php-fpm behind nginx, profiled through its master
// with its workers: every request is counted once, as php-fpm's own log
// and the load count them, named by its method and URI (the query
// dropped, the id collapsed; the front controller's requests by the URI
// asked for, not by index.php), with protocol fastcgi. nginx opens a
// connection to php-fpm a request by default; none is then counted per
// burst. Or it keeps them open (fastcgi_keep_conn), and php-fpm reads
// each request's empty STDIN record at the start of the next request's
// burst. The connections it kept from the warm-up each had a worker
// blocked reading at attach: that read's request is counted as one burst,
// named by the socket (no more of them than connections).
func TestPHPFPMBehindNginx(t *testing.T) {
	testbin.RequireBPF(t)
	const conns = 4 // as many as php-fpm's workers
	for _, keep := range []bool{false, true} {
		name := "conn-per-request"
		if keep {
			name = "keep-conn"
		}
		t.Run(name, func(t *testing.T) {
			master, port, accessLog := startPHPFPM(t, keep)
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			paths := []string{"/light.php?id=1", "/items/42"}
			// Workers warmed up, and nginx's kept connections opened,
			// before the window.
			if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: addr, Conns: conns, Requests: 40, Paths: paths}); err != nil {
				t.Fatalf("warm-up load: %v", err)
			}
			before := accessLogCounts(t, accessLog)
			const requests = 2000
			var load loadgen.Result
			w := measureWith(t, []int{master}, true, func() {
				var err error
				if load, err = loadgen.Run(context.Background(), loadgen.Config{Addr: addr, Conns: conns, Requests: requests, Paths: paths}); err != nil {
					t.Fatalf("load: %v", err)
				}
			})
			after := accessLogCounts(t, accessLog)
			target := targetOf(t, w.run, master)
			routes := routeTotals(target)
			unseen := int(target.PerBurst[readBegunBeforeAttach])
			t.Logf("%d requests, %d routes; per burst %v; unattributed %.1f ms of %.1f ms", target.Finished.Requests, len(routes),
				target.PerBurst, float64(target.UnattributedNs)/1e6, float64(target.ProcessNs())/1e6)
			served := 0
			for _, r := range []struct{ path, route string }{
				{"/light.php?id=1", "GET /light.php"},
				{"/items/42", "GET /items/{id}"},
			} {
				got := routes[r.route]
				logged := after["GET "+r.path+" 200"] - before["GET "+r.path+" 200"]
				served += logged
				t.Logf("%s: reqprof %d requests, %.1f µs CPU, %.1f µs latency, %.1f µs blocked each, protocol %q; php-fpm logged %d; the load got %d",
					r.route, got.Requests, meanTotalsUs(got), float64(got.LatencyNs)/float64(max(got.Requests, 1))/1e3,
					float64(got.OffCPUNs)/float64(max(got.Requests, 1))/1e3, got.Protocol, logged, load.PerPath[r.path])
				if logged != load.PerPath[r.path] {
					t.Errorf("%s: php-fpm logged %d requests, the load got %d answers", r.path, logged, load.PerPath[r.path])
				}
				if got.Requests > logged || got.Requests < logged-unseen {
					t.Errorf("%s: reqprof counted %d requests, php-fpm logged %d (%d counted per burst)", r.route, got.Requests, logged, unseen)
				}
				if got.Protocol != "fastcgi" {
					t.Errorf("%s: protocol %q, want fastcgi", r.route, got.Protocol)
				}
			}
			if target.Finished.Requests != served {
				t.Errorf("reqprof counted %d requests in all, php-fpm logged %d", target.Finished.Requests, served)
			}
			named := routes["GET /light.php"].Requests + routes["GET /items/{id}"].Requests
			if named+routes["unix"].Requests != target.Finished.Requests || routes["unix"].Requests != unseen {
				t.Errorf("%d requests, %d named by their URI, %d by the socket; routes %v", target.Finished.Requests, named, routes["unix"].Requests, routes)
			}
			if len(target.PerBurst) > 0 && (!keep || len(target.PerBurst) > 1 || unseen > conns) {
				t.Errorf("requests counted per burst: %v; want none, or with kept connections at most one a connection (%d) whose read began before attach",
					target.PerBurst, conns)
			}
			// index.php's loop is 30 times light.php's: its CPU went with
			// its requests.
			if light, item := meanTotalsUs(routes["GET /light.php"]), meanTotalsUs(routes["GET /items/{id}"]); item <= light {
				t.Errorf("GET /items/{id} %.1f µs a request, GET /light.php %.1f µs: the heavier script is not the costlier", item, light)
			}
		})
	}
}
