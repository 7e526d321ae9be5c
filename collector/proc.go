package collector

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNoProcess is what Run's error wraps when a target names no process:
// a pid that is none, or a cgroup directory that cannot be read or holds
// none.
var ErrNoProcess = errors.New("no such process")

// noProcess is the error for a pid that names no process.
func noProcess(pid int) error {
	return setupError{fmt.Sprintf("no process with pid %d", pid), ErrNoProcess}
}

// setupError is an error the user must fix before reqprof can run, which
// says so by wrapping one of the errors callers test for.
type setupError struct {
	msg  string
	kind error
}

func (e setupError) Error() string { return e.msg }
func (e setupError) Unwrap() error { return e.kind }

// processComm is the target's command name, as ps shows it.
func processComm(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if errors.Is(err, os.ErrNotExist) {
		return "", noProcess(pid)
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// threadCount is how many threads the process has now.
func threadCount(pid int) int {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	return len(entries)
}

// ProcessCPUNs reads the process's CPU clock: the scheduler's own
// nanosecond sum over all its threads, live and exited, the same figure
// CLOCK_PROCESS_CPUTIME_ID gives the process itself.
func ProcessCPUNs(pid int) (uint64, error) {
	// MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) from the kernel's
	// include/linux/posix-timers.h.
	clock := int32((^pid)<<3 | 2)
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, fmt.Errorf("reading CPU clock of %d: %w", pid, err)
	}
	return uint64(ts.Nano()), nil
}

// monotonicNs is the clock bpf_ktime_get_ns reads.
func monotonicNs() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// listeningPorts returns the TCP ports in LISTEN state in the network
// namespace of pid. A connection whose local port is one of them was
// accepted: it serves requests. Any other connection (to a database, say)
// is the target acting as a client, and starts no request.
func listeningPorts(pid int) (map[uint16]bool, error) {
	ports := map[uint16]bool{}
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "net", name))
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6 in this kernel or namespace
		}
		if err != nil {
			return nil, err
		}
		err = parseListeningPorts(f, ports)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/net/%s: %w", pid, name, err)
		}
	}
	return ports, nil
}

// tcpListen is TCP_LISTEN as /proc/net/tcp prints it.
const tcpListen = "0A"

// parseListeningPorts reads the /proc/net/tcp format: a header line, then
// "sl local_address rem_address st ...", addresses as HEXIP:HEXPORT.
func parseListeningPorts(f io.Reader, ports map[uint16]bool) error {
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] != tcpListen {
			continue
		}
		_, portHex, ok := strings.Cut(fields[1], ":")
		if !ok {
			return fmt.Errorf("malformed local address %q", fields[1])
		}
		port, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil {
			return fmt.Errorf("malformed port in %q", fields[1])
		}
		ports[uint16(port)] = true
	}
	return sc.Err()
}

// descendants lists the processes below pid in the process tree, from
// /proc/*/stat's parent field.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		if parent, ok := parentOf(string(b)); ok {
			children[parent] = append(children[parent], child)
		}
	}
	var found []int
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		found = append(found, children[next]...)
		queue = append(queue, children[next]...)
	}
	return found
}

// parentOf reads the parent pid from a /proc/PID/stat line. The command name
// (second field) may hold spaces and parentheses: fields are counted from
// the last ')'.
func parentOf(stat string) (int, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 2 {
		return 0, false
	}
	parent, err := strconv.Atoi(fields[1])
	return parent, err == nil
}

// cgroupProcs lists the processes of a cgroup (v2), from its cgroup.procs.
func cgroupProcs(path string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	var pids []int
	for _, field := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(field)
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: malformed cgroup.procs", path)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// threadName is the name of thread tid of process tgid, and false once it
// is gone. Read under its process, a tid reused by another process since
// cannot lend it another's name.
func threadName(tgid, tid uint32) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", tgid, tid))
	if err != nil {
		return "", false
	}
	return strings.TrimSuffix(string(b), "\n"), true
}

// listeningUnixPaths are the paths of the Unix stream sockets pid listens
// on: those of /proc/PID/net/unix that are listening and whose inode is
// one of pid's own descriptors (the table lists the whole namespace's).
func listeningUnixPaths(pid int) ([]string, error) {
	inodes, err := socketInodes(pid)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "net", "unix"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseListeningUnix(f, inodes)
}

// socketInodes are the inodes of pid's socket descriptors.
func socketInodes(pid int) (map[uint64]bool, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	inodes := map[uint64]bool{}
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(inode, "]"), 10, 64); err == nil {
				inodes[n] = true
			}
		}
	}
	return inodes, nil
}

// Flags and type of a listening stream socket in /proc/net/unix.
const (
	unixAcceptCon = "00010000" // __SO_ACCEPTCON
	unixStream    = "0001"     // SOCK_STREAM
)

// parseListeningUnix reads the /proc/net/unix format: a header line, then
// "Num RefCount Protocol Flags Type St Inode Path", keeping the paths of
// listening stream sockets whose inode is in inodes. An abstract socket's
// path is printed with a leading '@' for its NUL.
func parseListeningUnix(r io.Reader, inodes map[uint64]bool) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Scan() // header
	var paths []string
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[3] != unixAcceptCon || fields[4] != unixStream {
			continue
		}
		inode, err := strconv.ParseUint(fields[6], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed inode %q", fields[6])
		}
		if inodes[inode] {
			paths = append(paths, strings.Join(fields[7:], " "))
		}
	}
	return paths, sc.Err()
}

// image identifies the program a process runs. An exec sets each field
// anew, and nothing else changes them: the executable's file, and where
// its code, stack and arguments lie, which address randomisation moves at
// each exec, even of the same binary with the same arguments.
type image struct {
	dev, ino                                 uint64
	startCode, endCode, startStack, argStart uint64
}

// imageOf reads the image of pid from /proc. The executable is read
// between two reads of the stat file, which must agree: else the process
// exec'd meanwhile, and the two parts would be of different programs.
func imageOf(pid int) (image, error) {
	statPath := fmt.Sprintf("/proc/%d/stat", pid)
	var img image
	for range 3 {
		before, err := os.ReadFile(statPath)
		if err != nil {
			return image{}, err
		}
		var st unix.Stat_t
		if err := unix.Stat(fmt.Sprintf("/proc/%d/exe", pid), &st); err != nil {
			return image{}, err
		}
		after, err := os.ReadFile(statPath)
		if err != nil {
			return image{}, err
		}
		img = image{dev: st.Dev, ino: st.Ino}
		var again image
		if err := parseImage(string(before), &img); err != nil {
			return image{}, fmt.Errorf("%s: %w", statPath, err)
		}
		if err := parseImage(string(after), &again); err != nil {
			return image{}, fmt.Errorf("%s: %w", statPath, err)
		}
		again.dev, again.ino = img.dev, img.ino
		if again == img {
			if img.startCode == 0 {
				return image{}, errMidExec
			}
			return img, nil
		}
	}
	return image{}, errMidExec
}

// errMidExec is imageOf's error for a process in the middle of an exec,
// or of several: the kernel sets where the new program's code lies last,
// after its stack and arguments, so a process's image is whole once that
// is set. (A process started with fork and exec may be seen so just after
// the exec call returned to its parent.)
var errMidExec = errors.New("in the middle of an exec")

// parseImage reads startcode, endcode, startstack and arg_start (fields
// 26, 27, 28 and 48 of proc(5)) from a /proc/PID/stat line, counting from
// the last ')' as parentOf does.
func parseImage(stat string, img *image) error {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return errors.New("no command name")
	}
	fields := strings.Fields(stat[i+1:]) // fields[0] is field 3
	field := func(n int) (uint64, error) {
		if n-3 >= len(fields) {
			return 0, fmt.Errorf("%d fields, no field %d", len(fields)+2, n)
		}
		return strconv.ParseUint(fields[n-3], 10, 64)
	}
	for _, f := range []struct {
		n   int
		dst *uint64
	}{{26, &img.startCode}, {27, &img.endCode}, {28, &img.startStack}, {48, &img.argStart}} {
		v, err := field(f.n)
		if err != nil {
			return err
		}
		*f.dst = v
	}
	return nil
}

// exePath is the path of the executable pid runs, or "a new program"
// when it cannot be read.
func exePath(pid int) string {
	path, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return "a new program"
	}
	return strings.TrimSuffix(path, " (deleted)")
}

// carriesRequests reports whether descriptor fd of pid can carry requests
// from a peer: a pipe, a FIFO or a socket.
func carriesRequests(pid, fd int) bool {
	link, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", strconv.Itoa(fd)))
	if err != nil {
		return false
	}
	if strings.HasPrefix(link, "pipe:") || strings.HasPrefix(link, "socket:") {
		return true
	}
	info, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid), "fd", strconv.Itoa(fd)))
	return err == nil && info.Mode()&os.ModeNamedPipe != 0
}

// isTerminal reports whether descriptor fd of pid is a terminal: a user
// typing, never a client's requests.
func isTerminal(pid, fd int) bool {
	link, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", strconv.Itoa(fd)))
	return err == nil && (strings.HasPrefix(link, "/dev/pts/") || strings.HasPrefix(link, "/dev/tty") || link == "/dev/console")
}
