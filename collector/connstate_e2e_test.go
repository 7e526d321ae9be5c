package collector_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/testbin"
)

// connEntries counts the entries of the connection map of the collector
// this test process runs (one at a time: the tests of this package run in
// turn).
func connEntries(t *testing.T) int {
	t.Helper()
	name, err := collector.ConnsMapName()
	if err != nil {
		t.Fatal(err)
	}
	held, err := collector.ObjectsHeldBy(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	count, found := 0, 0
	for _, id := range held.Maps {
		m, err := ebpf.NewMapFromID(ebpf.MapID(id))
		if err != nil {
			continue // closed since
		}
		info, err := m.Info()
		if err != nil || info.Name != name {
			m.Close()
			continue
		}
		found++
		var key uint64
		for err = m.NextKey(nil, &key); err == nil; err = m.NextKey(key, &key) {
			count++
		}
		m.Close()
		if !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatalf("reading the connection map: %v", err)
		}
	}
	if found != 1 {
		t.Fatalf("this process holds %d maps named %q, want 1", found, name)
	}
	return count
}

// waitConnEntries waits until the connection map holds want entries, for
// up to two seconds, and returns what it holds then.
func waitConnEntries(t *testing.T, want int) int {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		n := connEntries(t)
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// getClosing sends one request on a connection of its own that asks the
// server to close it, and reads its response up to the server's close.
func getClosing(t *testing.T, port int) {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	response, err := io.ReadAll(c) // up to the server's FIN
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(response), "HTTP/1.1 200") {
		t.Fatalf("response %q", response)
	}
}

// TestIdleLoopEndsItsLastClosedConnection: nginx, one process, answers
// requests on connections of their own and closes each; then no more come.
// A connection closed by the thread serving it ends once that thread turns
// to other work, and an event loop waiting for events has: its state goes
// and its last request is sent at once. It used to be held until the
// loop's next connection, for ever when none came (the last connection of
// make bench's churn phase, left in the map).
func TestIdleLoopEndsItsLastClosedConnection(t *testing.T) {
	for _, lite := range []bool{false, true} {
		t.Run(fmt.Sprintf("lite=%v", lite), func(t *testing.T) {
			testbin.RequireBPF(t)
			pid, port := startNginx(t, lookPathOrFail(t, "nginx"), 0)
			const requests = 5
			var left int
			w := measureConfig(t, []int{pid}, func(cfg *collector.Config) { cfg.Lite = lite }, func() {
				for range requests {
					getClosing(t, port)
				}
				left = waitConnEntries(t, 0)
			})
			target := targetOf(t, w.run, pid)
			t.Logf("requests %d (unfinished %d); connection states left with the loop idle: %d",
				target.Finished.Requests, target.UnfinishedRequests, left)
			if left != 0 {
				t.Errorf("%d connection states left 2 s after the last connection closed, with nginx idle: want 0", left)
			}
			if target.Finished.Requests != requests {
				t.Errorf("reqprof counted %d requests, sent %d", target.Finished.Requests, requests)
			}
		})
	}
}

// listenBacklog reads the accept queue of the TCP listener on port from
// /proc/net/tcp: a listener's rx_queue there is its accept backlog.
func listenBacklog(t *testing.T, port int) int {
	t.Helper()
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	local := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local_address rem_address st tx_queue:rx_queue ...
		if len(fields) < 5 || !strings.HasSuffix(fields[1], local) || fields[3] != "0A" {
			continue
		}
		_, rx, _ := strings.Cut(fields[4], ":")
		n, err := strconv.ParseUint(rx, 16, 32)
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	t.Fatalf("no TCP listener on port %d", port)
	return 0
}

// sockets are the sockets pid holds open, by inode.
func sockets(t *testing.T, pid int) map[string]bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:") {
			held[target] = true
		}
	}
	return held
}

// newSockets counts the sockets pid holds that are not in before.
func newSockets(t *testing.T, pid int, before map[string]bool) int {
	t.Helper()
	n := 0
	for inode := range sockets(t, pid) {
		if !before[inode] {
			n++
		}
	}
	return n
}

// sendAndReset connects to port, sends a request and resets the
// connection (SO_LINGER 0: the close sends RST), without waiting for an
// answer.
func sendAndReset(t *testing.T, port int) {
	t.Helper()
	c, err := net.DialTCP("tcp", nil, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestConnectionResetBeforeReadLeavesNoState: clients send a request and
// reset their connection before nginx reads it (nginx is stopped
// meanwhile). nginx then accepts each, reads its request (the bytes that
// arrived before the reset are still read), fails to answer and closes
// it. The reset closed the socket before any of its operations was
// traced, so its close found no state to end, and the close syscall
// changes its state no more: a state made by the read would never go.
// Every read of such a connection used to leave one (83 to 97 of 100
// connections reset so under nginx); none must be left.
func TestConnectionResetBeforeReadLeavesNoState(t *testing.T) {
	testbin.RequireBPF(t)
	pid, port := startNginx(t, lookPathOrFail(t, "nginx"), 0)
	const resets = 20
	before := sockets(t, pid)
	var left, backlog, open int
	w := measure(t, []int{pid}, func() {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		for range resets {
			sendAndReset(t, port)
		}
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// nginx is done with them once it has accepted all and closed
		// all: its accept queue empty, and none of its sockets new.
		deadline := time.Now().Add(5 * time.Second)
		for {
			backlog, open = listenBacklog(t, port), newSockets(t, pid, before)
			if backlog == 0 && open == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		left = connEntries(t)
	})
	target := targetOf(t, w.run, pid)
	t.Logf("%d connections reset before their request was read: %d connection states left; requests %d, unfinished %d",
		resets, left, target.Finished.Requests, target.UnfinishedRequests)
	if backlog != 0 || open != 0 {
		t.Fatalf("nginx did not accept and close every connection within 5 s: %d in its accept queue, %d open", backlog, open)
	}
	if left != 0 {
		t.Errorf("%d connection states left after nginx closed every connection: want 0", left)
	}
}

// socketsPerCall is a target that, on SIGUSR1, makes calls calls each over
// a socket of its own: a UDP datagram to udpAddr and its answer (a DNS
// lookup's shape), then a Unix stream connection to unixPath, one request
// and its answer, closed. It prints "ready" first and "done" after, then
// waits for events as an idle loop does (a thread that closed a connection
// ends it when it turns to other work or waits so).
const socketsPerCall = `
import select, signal, socket, sys
udp_host, udp_port = sys.argv[1].rsplit(":", 1)
unix_path, calls = sys.argv[2], int(sys.argv[3])
signal.signal(signal.SIGUSR1, lambda *a: None)
print("ready", flush=True)
signal.pause()
for _ in range(calls):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"q", (udp_host, int(udp_port)))
    u.recvfrom(64)
    u.close()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(unix_path)
    s.sendall(b"GET / HTTP/1.1\r\nHost: u\r\n\r\n")
    s.recv(64)
    s.close()
print("done", flush=True)
select.select([], [], [], 3600)  # idle, as a loop waiting for events
`

// TestSocketsWithoutTracedCloseLeaveNoState: a target's datagram sockets
// and its outbound Unix streams have no TCP state change to end them. A
// datagram socket gets no state (it never carries a request), and an
// outbound Unix stream's goes at its close: a target making a lookup or
// a Unix connection per call used to leave a state for each, for good,
// until the map was full.
func TestSocketsWithoutTracedCloseLeaveNoState(t *testing.T) {
	// As a client (found by itself: it serves nothing) its Unix streams'
	// calls are requests; as a server's (--role server) they are backend
	// calls.
	for _, role := range []string{"", "server"} {
		t.Run("role="+role, func(t *testing.T) { checkSocketsLeaveNoState(t, role) })
	}
}

func checkSocketsLeaveNoState(t *testing.T, role string) {
	testbin.RequireBPF(t)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = udp.WriteTo(buf[:n], from)
		}
	}()
	unixPath := filepath.Join(t.TempDir(), "backend.sock")
	ln, err := net.Listen("unix", unixPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 256)
				if _, err := c.Read(buf); err == nil {
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
				}
			}()
		}
	}()
	const calls = 50
	cmd := exec.Command(lookPathOrFail(t, "python3"), "-c", socketsPerCall, udp.LocalAddr().String(), unixPath, strconv.Itoa(calls))
	out := startReady(t, cmd)
	var left int
	w := measureConfig(t, []int{cmd.Process.Pid}, func(cfg *collector.Config) { cfg.Role = role }, func() {
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		if line, err := out.ReadString('\n'); err != nil || line != "done\n" {
			t.Fatalf("target: %q, %v", line, err)
		}
		left = waitConnEntries(t, 0)
	})
	target := targetOf(t, w.run, cmd.Process.Pid)
	t.Logf("%d calls over a datagram socket and a Unix stream each: %d connection states left; role %s, calls counted %d, backends %+v",
		calls, left, target.Role, target.Finished.Requests, target.Backends)
	if left != 0 {
		t.Errorf("%d connection states left after %d datagram sockets and %d Unix streams closed: want 0", left, calls, calls)
	}
}
