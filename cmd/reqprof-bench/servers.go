package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/testservers/nginxconf"
	"github.com/reqprof/reqprof/internal/testservers/stackservers"
)

// calserverCommand makes the bench's own binary run the calibrated server.
const calserverCommand = "calserver"

// gohttpCommand makes it run the Go net/http server.
const gohttpCommand = "gohttp"

// server is a process under load, started by the bench.
type server struct {
	name string
	cmd  *exec.Cmd
	addr string // 127.0.0.1:PORT
	// h2 servers are loaded with h2load, streams in flight on each
	// connection, rather than with wrk.
	h2 bool
	// path is what requests ask for ("/" when empty), and script a wrk
	// script making each request (a GET of path when empty).
	path, script string
	// burnsIn is the function its requests burn in, as a stack sample
	// names it, for a server whose route burns in one of its own.
	burnsIn string
}

func (s *server) pid() int { return s.cmd.Process.Pid }

func (s *server) url() string {
	if s.path == "" {
		return "http://" + s.addr + "/"
	}
	return "http://" + s.addr + s.path
}

// stop ends the server; SIGTERM lets the calibrated server close its
// connections itself.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

func startNginx(bin, parent string, connections int, fileLimit uint64) (*server, error) {
	dir, err := os.MkdirTemp(parent, "nginx-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := nginxconf.Config{Dir: dir, Port: port, Connections: connections + fileMargin, FileLimit: fileLimit}.Text()
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-c", confPath, "-p", dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting nginx: %w", err)
	}
	s := &server{name: "nginx", cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	if err := waitListening(s.addr); err != nil {
		s.stop()
		return nil, fmt.Errorf("nginx: %w", err)
	}
	return s, nil
}

// freePort is a port nothing listens on now; nginx takes it just after.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitListening(addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("nothing listens on %s after 10 s", addr)
}

// startCalserver runs the calibrated server's epoll model: one thread serves
// every connection, as nginx's worker does.
func startCalserver(burn time.Duration) (*server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, calserverCommand, "--model", "epoll", "--burn", burn.String(), "--listen", "127.0.0.1:0")
	cmd.Stderr = os.Stderr
	p, err := calserver.Spawn(cmd)
	if err != nil {
		return nil, err
	}
	return &server{name: calserverName(burn), cmd: cmd, addr: p.Addr}, nil
}

// calserverName names the calibrated server's rows, burning burn a request.
func calserverName(burn time.Duration) string {
	return fmt.Sprintf("calserver, %d µs burn", burn.Microseconds())
}

// stacksBurn is the calibrated server's burn in the run with --stacks:
// requests long enough to be sampled. stacksName names that run's row.
const (
	stacksBurn = 50 * time.Microsecond
	stacksFlag = "--stacks"
)

var stacksName = runName(calserverName(stacksBurn), stacksFlag)

// pythonRoutesBurn is what each request of the Python server burns in
// heavy_work, and pythonStacksName names its run with --stacks.
const pythonRoutesBurn = 500 * time.Microsecond

var pythonStacksName = runName(fmt.Sprintf("python3 http.server, %d µs in heavy_work", pythonRoutesBurn.Microseconds()), stacksFlag)

// startPythonRoutes runs internal/stackservers' Python server on Debian's
// python3, its requests (GET /heavy) burning in heavy_work, a thread a
// connection (http.server's ThreadingHTTPServer).
func startPythonRoutes(dir string) (*server, error) {
	script, err := stackservers.Write(dir, "routes.py", stackservers.Python)
	if err != nil {
		return nil, err
	}
	us := fmt.Sprint(pythonRoutesBurn.Microseconds())
	cmd := exec.Command("/usr/bin/python3", script, us, us)
	cmd.Stderr = os.Stderr
	p, err := calserver.Spawn(cmd)
	if err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(pythonStacksName, ", "+stacksFlag)
	return &server{name: name, cmd: cmd, addr: p.Addr, path: "/heavy", burnsIn: "heavy_work"}, nil
}

// startGoHTTP starts the Go net/http server over HTTP/1.1, one route that
// burns nothing.
func startGoHTTP() (*server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, gohttpCommand, "--route", "/=0s", "--listen", "127.0.0.1:0")
	cmd.Stderr = os.Stderr
	p, err := calserver.Spawn(cmd)
	if err != nil {
		return nil, err
	}
	return &server{name: goHTTPName, cmd: cmd, addr: p.Addr}, nil
}

// goHTTPName names the Go net/http server's HTTP/1.1 rows.
const goHTTPName = "Go net/http"

// startH2 starts the Go net/http server speaking HTTP/2 without TLS, one
// route that burns nothing: what reqprof costs per stream.
func startH2() (*server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, gohttpCommand, "--h2c", "--route", "/=0s", "--listen", "127.0.0.1:0")
	cmd.Stderr = os.Stderr
	p, err := calserver.Spawn(cmd)
	if err != nil {
		return nil, err
	}
	return &server{name: fmt.Sprintf("Go net/http, h2c, %d streams on each of 2 connections", overheadConns/2), cmd: cmd, addr: p.Addr, h2: true}, nil
}
