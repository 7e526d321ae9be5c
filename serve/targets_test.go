package serve

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeProc is a /proc of made-up processes.
type fakeProc struct {
	t    *testing.T
	root string
}

func newFakeProc(t *testing.T) *fakeProc {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := &fakeProc{t: t, root: root}
	p.write("net/tcp", "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n")
	return p
}

func (p *fakeProc) write(name, content string) {
	p.t.Helper()
	path := filepath.Join(p.root, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// process adds a process; socketInodes are the sockets its descriptors
// hold.
func (p *fakeProc) process(pid, parent int, comm string, start uint64, socketInodes ...int) {
	p.t.Helper()
	dir := strconv.Itoa(pid)
	p.write(dir+"/comm", comm+"\n")
	p.write(dir+"/stat", fmt.Sprintf("%d (%s) S %d %d %d 0 -1 4194560 1 0 0 0 5 3 0 0 20 0 4 0 %d 1000 100", pid, comm, parent, pid, pid, start))
	for i, inode := range socketInodes {
		if err := os.MkdirAll(filepath.Join(p.root, dir, "fd"), 0o755); err != nil {
			p.t.Fatal(err)
		}
		if err := os.Symlink(fmt.Sprintf("socket:[%d]", inode), filepath.Join(p.root, dir, "fd", strconv.Itoa(3+i))); err != nil {
			p.t.Fatal(err)
		}
	}
}

func (p *fakeProc) exit(pid int) {
	if err := os.RemoveAll(filepath.Join(p.root, strconv.Itoa(pid))); err != nil {
		p.t.Fatal(err)
	}
}

// listen makes socket inode listen on port.
func (p *fakeProc) listen(port, inode int) {
	b, _ := os.ReadFile(filepath.Join(p.root, "net/tcp"))
	line := fmt.Sprintf("   0: 0100007F:%04X 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 %d 1 0000000000000000 100 0 0 10 0\n", port, inode)
	p.write("net/tcp", string(b)+line)
}

func (p *fakeProc) fs() *procFS { return newProcFS(p.root, 1) }

func pidsOf(found []instance) []int {
	var pids []int
	for _, i := range found {
		pids = append(pids, i.PID)
	}
	return pids
}

func TestParseStat(t *testing.T) {
	st, err := parseStat("42 (a (weird) name) S 7 42 42 0 -1 4194560 1 0 0 0 5 3 0 0 20 0 4 0 123456 1000 100")
	if err != nil || st.comm != "a (weird) name" || st.parent != 7 || st.start != 123456 || st.kernel {
		t.Errorf("%+v, %v", st, err)
	}
	st, err = parseStat("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 2 0 0")
	if err != nil || !st.kernel {
		t.Errorf("kthreadd: %+v, %v", st, err)
	}
	for _, bad := range []string{"", "42 (x) S 1", "42 x) S", "42 (x) S a 1 1 0 -1 0 1 0 0 0 5 3 0 0 20 0 4 0 z 1 1"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestFindByComm(t *testing.T) {
	p := newFakeProc(t)
	p.process(100, 1, "nginx", 500)
	p.process(101, 100, "nginx", 510) // a worker of 100
	p.process(102, 100, "nginx", 505)
	p.process(200, 1, "nginx", 400) // another master, older
	p.process(300, 1, "nginx-exporter", 300)
	p.process(400, 1, "averyveryverylo", 300) // the kernel keeps 15 bytes of a name
	p.process(1, 0, "nginx", 1)               // reqprof itself: never a target
	found, _ := p.fs().byComm("nginx", false)
	if got := pidsOf(found); fmt.Sprint(got) != "[200 100 102 101]" {
		t.Errorf("every nginx, oldest first: %v", got)
	}
	found, _ = p.fs().byComm("nginx", true)
	if got := pidsOf(found); fmt.Sprint(got) != "[200 100]" {
		t.Errorf("nginx masters, their children followed: %v", got)
	}
	found, _ = p.fs().byComm("averyveryverylongname", false)
	if got := pidsOf(found); fmt.Sprint(got) != "[400]" {
		t.Errorf("a long name: %v", got)
	}
}

func TestFindByPort(t *testing.T) {
	p := newFakeProc(t)
	p.listen(8080, 5555)
	p.listen(9090, 6666)
	p.process(100, 1, "api", 500, 17, 5555)
	p.process(101, 100, "api", 510, 5555) // a pre-fork child holding the same socket
	p.process(200, 1, "metrics", 400, 6666)
	found, err := p.fs().byPort(8080, false)
	if got := pidsOf(found); err != nil || fmt.Sprint(got) != "[100 101]" {
		t.Errorf("port 8080: %v, %v", got, err)
	}
	found, _ = p.fs().byPort(8080, true)
	if got := pidsOf(found); fmt.Sprint(got) != "[100]" || found[0].Comm != "api" {
		t.Errorf("port 8080, children followed: %+v", found)
	}
	if found, _ := p.fs().byPort(7070, false); len(found) != 0 {
		t.Errorf("port 7070: %+v", found)
	}
}

// A pid is its process only while it runs: another process given the pid
// later is not it.
func TestFindByPIDNotReused(t *testing.T) {
	p := newFakeProc(t)
	p.process(100, 1, "api", 500)
	first := p.fs().byPID(100, 0)
	if len(first) != 1 || first[0].Start != 500 {
		t.Fatalf("%+v", first)
	}
	p.exit(100)
	p.process(100, 1, "other", 900)
	if again := p.fs().byPID(100, first[0].Start); len(again) != 0 {
		t.Errorf("pid 100 reused by %+v taken for the process that had it", again)
	}
}

func TestSpecString(t *testing.T) {
	for spec, want := range map[Spec]string{
		{PID: 42}: "--pid 42", {Comm: "nginx"}: "--comm nginx", {Port: 8080}: "--port 8080", {Cgroup: "/sys/fs/cgroup/x"}: "--cgroup /sys/fs/cgroup/x",
	} {
		if got := spec.String(); got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
	if !strings.HasPrefix((Spec{PID: 1, Label: "x"}).String(), "--pid") {
		t.Error("label in the flag")
	}
}

// Lookups remember what they read, and still find a process renamed, or
// one that took over a port, within fullScanEvery lookups.
func TestLookupsRemember(t *testing.T) {
	p := newFakeProc(t)
	fs := p.fs()
	p.process(100, 1, "sh", 500) // a wrapper that execs the server later
	for range 2 {
		if found, _ := fs.byComm("api", false); len(found) != 0 {
			t.Fatalf("found %+v", found)
		}
	}
	p.write("100/comm", "api\n")
	seen := 0
	for i := range fullScanEvery {
		if found, _ := fs.byComm("api", false); len(found) == 1 {
			seen = i + 1
			break
		}
	}
	if seen == 0 {
		t.Errorf("a process renamed not found within %d lookups", fullScanEvery)
	}

	p.listen(8080, 5555)
	p.process(200, 1, "web", 600, 5555)
	if found, _ := fs.byPort(8080, false); fmt.Sprint(pidsOf(found)) != "[200]" {
		t.Fatalf("port 8080: %+v", found)
	}
	p.exit(200) // replaced by a process holding the same socket
	p.process(201, 1, "web", 700, 5555)
	if found, _ := fs.byPort(8080, false); fmt.Sprint(pidsOf(found)) != "[201]" {
		t.Errorf("port 8080 after its process was replaced: %+v", found)
	}
}

// BenchmarkLookups is a second's lookups of a --comm and a --port target
// on this machine's /proc.
func BenchmarkLookups(b *testing.B) {
	fs := newProcFS("/proc", os.Getpid())
	for b.Loop() {
		fs.byComm("calserver", false)
		fs.byPort(22, false)
	}
}

// sock_diag finds what /proc/net/tcp lists: a socket listening here.
func TestDiagFindsAListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	fromDiag := map[string]bool{}
	if err := diagListeningInodes(port, fromDiag); err != nil {
		t.Fatal(err)
	}
	fromFile := map[string]bool{}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := listeningInodes(f, port, fromFile); err != nil {
		t.Fatal(err)
	}
	if len(fromDiag) != 1 || fmt.Sprint(fromDiag) != fmt.Sprint(fromFile) {
		t.Errorf("sock_diag says %v, /proc/net/tcp %v", fromDiag, fromFile)
	}
	found, err := newProcFS("/proc", 0).byPort(port, false)
	if err != nil || len(found) != 1 || found[0].PID != os.Getpid() {
		t.Errorf("port %d held by %+v (%v), want this test", port, found, err)
	}
}
