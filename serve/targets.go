package serve

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Spec is one target as it was asked for: a process by pid, every process
// of a cgroup, the processes of a command name, or the process listening
// on a port. A command name and a port are looked up again as processes
// come and go, so that a redeployed server goes on being profiled.
type Spec struct {
	PID    int
	Cgroup string
	Comm   string
	Port   int
	// Label names the target in every series; empty: the process's
	// command name (--pid, --port), the name asked for (--comm), or the
	// cgroup directory.
	Label string
}

// String is the spec as its flag says it.
func (s Spec) String() string {
	switch {
	case s.Cgroup != "":
		return "--cgroup " + s.Cgroup
	case s.Comm != "":
		return "--comm " + s.Comm
	case s.Port != 0:
		return "--port " + strconv.Itoa(s.Port)
	}
	return "--pid " + strconv.Itoa(s.PID)
}

// commLen is the longest command name the kernel keeps (TASK_COMM_LEN-1):
// a longer name given to --comm matches the processes whose name is its
// first 15 bytes.
const commLen = 15

// maxProcessesPerSpec bounds the processes one --comm or --port target
// takes: the collector profiles at most collector.MaxTargets processes
// (or cgroups) at once.
const maxProcessesPerSpec = 32

// instance is one process a spec found.
type instance struct {
	PID   int
	Start uint64 // its start time, in clock ticks since boot: a pid reused later has another
	Comm  string
}

// key tells instances apart across resolutions: a pid and its start time.
func (i instance) key() string { return strconv.Itoa(i.PID) + "@" + strconv.FormatUint(i.Start, 10) }

// procFS reads processes from a /proc: the real one, or a tree a test
// made. serve looks its targets up every second, so it remembers what it
// read: a process's name once it has read the same one twice, and which
// processes hold a port's sockets while the port's listening sockets stay
// the same; all of it is read afresh every fullScanEvery lookups.
type procFS struct {
	root  string
	self  int // reqprof's own pid, never a target
	comms map[int]*knownComm
	ports map[int]*knownPort
	scans int // lookups so far, for the full ones
}

// fullScanEvery is how many lookups (seconds) apart every name is read
// again, and every port's holders looked for again: a process renamed
// after its first two seconds (exec from a wrapper script, prctl) is found
// within that long.
const fullScanEvery = 10

type knownComm struct {
	comm string
	same int // consecutive reads that gave it
}

type knownPort struct {
	inodes map[string]bool
	found  []instance
}

func newProcFS(root string, self int) *procFS {
	return &procFS{root: root, self: self, comms: map[int]*knownComm{}, ports: map[int]*knownPort{}}
}

// stat is what /proc/PID/stat says of a process that matters here.
type stat struct {
	comm   string
	parent int
	start  uint64
	kernel bool // a kernel thread: no user space to profile
}

// pfKthread is the kernel's PF_KTHREAD flag.
const pfKthread = 0x00200000

func (p *procFS) stat(pid int) (stat, error) {
	b, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return stat{}, err
	}
	return parseStat(string(b))
}

// parseStat reads /proc/PID/stat: "pid (comm) state ppid ...", the
// command name in parentheses possibly holding both, so fields are
// counted from the last ')'.
func parseStat(line string) (stat, error) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return stat{}, errors.New("malformed stat")
	}
	fields := strings.Fields(line[end+1:])
	// fields[0] is the state (field 3); flags are field 9, starttime 22.
	if len(fields) < 20 {
		return stat{}, errors.New("malformed stat")
	}
	parent, err1 := strconv.Atoi(fields[1])
	flags, err2 := strconv.ParseUint(fields[6], 10, 64)
	start, err3 := strconv.ParseUint(fields[19], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return stat{}, fmt.Errorf("malformed stat: %w", err)
	}
	return stat{comm: line[open+1 : end], parent: parent, start: start, kernel: flags&pfKthread != 0}, nil
}

// pids lists the processes.
func (p *procFS) pids() ([]int, error) {
	entries, err := os.ReadDir(p.root)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != p.self {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// byPID is the process pid, if it runs and, when start is not 0, is the
// one that started then (not another given its pid since).
func (p *procFS) byPID(pid int, start uint64) []instance {
	st, err := p.stat(pid)
	if err != nil || st.kernel || (start != 0 && st.start != start) {
		return nil
	}
	return []instance{{PID: pid, Start: st.start, Comm: st.comm}}
}

// byComm is the processes named comm.
func (p *procFS) byComm(comm string, rootsOnly bool) ([]instance, error) {
	if len(comm) > commLen {
		comm = comm[:commLen]
	}
	pids, err := p.pids()
	if err != nil {
		return nil, err
	}
	p.scans++
	full := p.scans%fullScanEvery == 0
	listed := make(map[int]bool, len(pids))
	found := map[int]stat{}
	for _, pid := range pids {
		listed[pid] = true
		if p.commOf(pid, full) != comm {
			continue
		}
		if st, err := p.stat(pid); err == nil && !st.kernel {
			found[pid] = st
		}
	}
	for pid := range p.comms {
		if !listed[pid] {
			delete(p.comms, pid)
		}
	}
	return pick(found, rootsOnly), nil
}

// commOf is pid's name: read from /proc/PID/comm, a few bytes, unless it
// read the same twice before and this is no full scan.
func (p *procFS) commOf(pid int, full bool) string {
	known := p.comms[pid]
	if known != nil && known.same >= 2 && !full {
		return known.comm
	}
	b, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	comm := strings.TrimSuffix(string(b), "\n")
	switch {
	case known == nil:
		p.comms[pid] = &knownComm{comm: comm, same: 1}
	case known.comm == comm:
		known.same++
	default:
		known.comm, known.same = comm, 1
	}
	return comm
}

// byPort is the processes holding a socket listening on TCP port, in
// reqprof's own network namespace. Their descriptors are looked through
// (every process's, a few ms) only when the port's listening sockets have
// changed, one of the processes found has exited, or at a full scan.
func (p *procFS) byPort(port int, rootsOnly bool) ([]instance, error) {
	inodes, err := p.listening(port)
	if err != nil {
		return nil, err
	}
	if len(inodes) == 0 {
		delete(p.ports, port)
		return nil, nil
	}
	p.scans++
	if known := p.ports[port]; known != nil && p.scans%fullScanEvery != 0 && maps.Equal(known.inodes, inodes) && p.allRun(known.found) {
		return known.found, nil
	}
	pids, err := p.pids()
	if err != nil {
		return nil, err
	}
	found := map[int]stat{}
	for _, pid := range pids {
		if !p.holdsSocket(pid, inodes) {
			continue
		}
		if st, err := p.stat(pid); err == nil && !st.kernel {
			found[pid] = st
		}
	}
	picked := pick(found, rootsOnly)
	p.ports[port] = &knownPort{inodes: inodes, found: picked}
	return picked, nil
}

// listening is the inodes of the sockets listening on port: asked of the
// kernel (sock_diag) for the real /proc, read from ROOT/net/tcp for a tree
// a test made, or where sock_diag is refused.
func (p *procFS) listening(port int) (map[string]bool, error) {
	inodes := map[string]bool{}
	if p.root == "/proc" {
		if err := diagListeningInodes(port, inodes); err == nil {
			return inodes, nil
		}
	}
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join(p.root, "net", name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		err = listeningInodes(f, port, inodes)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return inodes, nil
}

// allRun says whether every one of found still runs.
func (p *procFS) allRun(found []instance) bool {
	for _, inst := range found {
		if len(p.byPID(inst.PID, inst.Start)) == 0 {
			return false
		}
	}
	return true
}

// holdsSocket says whether one of pid's descriptors is one of the socket
// inodes ("socket:[INODE]").
func (p *procFS) holdsSocket(pid int, inodes map[string]bool) bool {
	dir := filepath.Join(p.root, strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
			return true
		}
	}
	return false
}

// tcpListen is TCP_LISTEN as /proc/net/tcp prints it.
const tcpListen = "0A"

// listeningInodes adds the inodes of the sockets /proc/net/tcp lists as
// listening on port: "sl local_address rem_address st tx:rx tr:when
// retrnsmt uid timeout inode ...", addresses as HEXIP:HEXPORT.
func listeningInodes(r io.Reader, port int, into map[string]bool) error {
	sc := bufio.NewScanner(r)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != tcpListen {
			continue
		}
		_, portHex, ok := strings.Cut(fields[1], ":")
		if !ok {
			return fmt.Errorf("malformed local address %q", fields[1])
		}
		if n, err := strconv.ParseUint(portHex, 16, 16); err == nil && int(n) == port {
			into[fields[9]] = true
		}
	}
	return sc.Err()
}

// pick orders found processes oldest first, keeps only those whose parent
// is not one of them when rootsOnly (their children are followed), and at
// most maxProcessesPerSpec.
func pick(found map[int]stat, rootsOnly bool) []instance {
	var out []instance
	for pid, st := range found {
		if _, parentFound := found[st.parent]; rootsOnly && parentFound {
			continue
		}
		out = append(out, instance{PID: pid, Start: st.start, Comm: st.comm})
	}
	slices.SortFunc(out, func(a, b instance) int { return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.PID, b.PID)) })
	if len(out) > maxProcessesPerSpec {
		out = out[:maxProcessesPerSpec]
	}
	return out
}

// cgroupHasProcesses says whether a cgroup v2 directory holds a process.
func cgroupHasProcesses(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	return err == nil && len(strings.TrimSpace(string(b))) > 0
}
