package collector

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// process is a target as the collector tracks it during the window.
type process struct {
	Target
	comm  string
	pidfd int
	// image is the program it ran when last polled; imageKnown is false
	// until it could be read, and an exec before that goes unseen.
	image      image
	imageKnown bool
	exited     bool
	// forgotten: its pid is out of the targets map, once it has exited,
	// so that no process given the pid later is taken for it.
	forgotten bool
	// execd is the program it exec'd during the window, first seen
	// execdAfter into it; "" if none.
	execd      string
	execdAfter time.Duration
	schedNs0   uint64 // kernel CPU clock at the window's start
	schedNsAt  uint64 // its latest reading
	// members are its processes besides PID: children or cgroup members.
	// The kernel's CPU clock is per process, so a target of several has
	// no single figure to compare with.
	members    []int
	goroutines string // how a Go process's goroutines are followed; "" if it is none
	pool       string // how its runtime's pool is followed (PoolFollowed), or why not; PoolNone if it has none
	// runtime is how its threads resume a request whose backend answered
	// (a name in Runtimes), and runtimeFrom how it was chosen.
	runtime, runtimeFrom string
	// role is what its outbound connections are (a profile.Role*
	// value), and roleFrom how it was chosen.
	role, roleFrom string
	// clientPipes are its processes' ends of the stdio of a server it
	// spawned, found at the window's opening.
	clientPipes []clientPipe
	finished    *finishedRequests
	kernel      *kernelTally
}

func openTargets(targets []Target) ([]*process, error) {
	if len(targets) == 0 {
		return nil, errors.New("no target: give --pid PID")
	}
	if len(targets) > MaxTargets {
		return nil, fmt.Errorf("%d targets, at most %d", len(targets), MaxTargets)
	}
	var procs []*process
	fail := func(err error) ([]*process, error) {
		for _, p := range procs {
			unix.Close(p.pidfd)
		}
		return nil, err
	}
	seen := map[int]bool{}
	for _, t := range targets {
		var members []int
		if t.Cgroup != "" {
			pids, err := cgroupProcs(t.Cgroup)
			if err != nil {
				return fail(setupError{err.Error(), ErrNoProcess})
			}
			if len(pids) == 0 {
				return fail(setupError{fmt.Sprintf("cgroup %s has no process", t.Cgroup), ErrNoProcess})
			}
			t.PID, members = pids[0], pids[1:]
			if t.Label == "" {
				t.Label = t.Cgroup
			}
		}
		if t.PID <= 0 {
			return fail(fmt.Errorf("invalid pid %d", t.PID))
		}
		if seen[t.PID] {
			return fail(fmt.Errorf("pid %d given twice", t.PID))
		}
		seen[t.PID] = true
		p, err := openProcess(t)
		if err != nil {
			return fail(err)
		}
		p.members = members
		procs = append(procs, p)
	}
	return procs, nil
}

// openProcess holds the process t.PID names now by a pidfd, and reads its
// name and image. The pidfd goes first: read by pid, they are this
// process's only if it still runs after the reads.
func openProcess(t Target) (*process, error) {
	fd, err := unix.PidfdOpen(t.PID, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil, noProcess(t.PID)
	}
	if err != nil {
		return nil, fmt.Errorf("opening process %d: %w", t.PID, err)
	}
	p := &process{Target: t, pidfd: fd}
	p.comm, err = processComm(t.PID)
	if err == nil {
		p.image, err = imageOf(t.PID)
		p.imageKnown = err == nil
		err = nil
	}
	if err == nil && hasExited(fd) {
		err = noProcess(t.PID)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return p, nil
}

// prepare finds a target's processes: its own, its members, and with
// children followed, its descendants now (the programs add later ones as
// they fork); and gives the programs each one's Go layout.
func (p *process) prepare(objs *bpfObjects, followChildren bool) error {
	pids := append([]int{p.PID}, p.members...)
	if followChildren {
		for _, pid := range pids {
			pids = append(pids, descendants(pid)...)
		}
	}
	for i, pid := range pids {
		goroutines, err := setGoLayout(objs, pid)
		if err != nil {
			return fmt.Errorf("registering target %d: %w", pid, err)
		}
		if i == 0 {
			p.goroutines = goroutines
		}
	}
	if len(pids) > 1 {
		p.members = pids[1:]
	}
	return nil
}

// register makes p's processes, as prepare found them, target index.
func (p *process) register(objs *bpfObjects, index int) error {
	for _, pid := range append([]int{p.PID}, p.members...) {
		if err := objs.Targets.Update(uint32(pid), uint32(index), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("registering target %d: %w", pid, err)
		}
	}
	return nil
}

// addProcess makes pid one of target index's processes, and says how its
// goroutines are followed if it is a Go process (else ""). A Go process's
// layout goes in first, so that its threads find it from their first event.
func addProcess(objs *bpfObjects, pid, index int, flags ebpf.MapUpdateFlags) (goroutines string, err error) {
	if goroutines, err = setGoLayout(objs, pid); err != nil {
		return "", err
	}
	return goroutines, objs.Targets.Update(uint32(pid), uint32(index), flags)
}

// setGoLayout gives the programs the layout of pid's binary if it is a Go
// binary, and takes away any other, and says how its goroutines are
// followed (else "").
func setGoLayout(objs *bpfObjects, pid int) (goroutines string, err error) {
	layout, err := goLayoutOf(pid)
	if err == nil {
		value := reqprofGoLayout{TlsOffset: layout.gTLSOffset, GoidOffset: layout.goidOffset}
		return GoroutinesFollowed, objs.GoLayouts.Update(uint32(pid), &value, ebpf.UpdateAny)
	}
	if !errors.Is(err, errNotGo) {
		goroutines = "not followed: " + err.Error()
	}
	if err := objs.GoLayouts.Delete(uint32(pid)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return "", err
	}
	return goroutines, nil
}

// GoroutinesFollowed is what a Go target's report says when its goroutines
// are followed.
const GoroutinesFollowed = "followed"

func goLayoutOf(pid int) (goLayout, error) {
	exe, err := os.Open(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return goLayout{}, errNotGo // gone, or no binary to read: threads only
	}
	defer exe.Close()
	return readGoLayout(exe)
}

// refreshCgroup adds processes that joined a cgroup target since.
func (p *process) refreshCgroup(objs *bpfObjects, index int) {
	if p.Cgroup == "" {
		return
	}
	pids, err := cgroupProcs(p.Cgroup)
	if err != nil {
		return
	}
	for _, pid := range pids {
		var known uint32
		if objs.Targets.Lookup(uint32(pid), &known) == nil {
			continue
		}
		_, _ = addProcess(objs, pid, index, ebpf.UpdateNoExist)
	}
	if len(pids) > 1 {
		p.members = pids
	}
}

// pollTargets notes, at into the window, which targets have exited or
// exec'd, and returns how many still run. An exited target's pid leaves
// the targets map a poll after its exit is seen: by then its last thread
// has left its CPU for good, and a process that gets the pid later is
// never taken for it.
func (s *session) pollTargets(at time.Duration) (alive int) {
	for i, p := range s.procs {
		p.refreshCgroup(s.objs, i)
		if p.exited {
			s.forget(p)
			continue
		}
		switch p.poll(at) {
		case targetExited:
			continue
		case targetExecd:
			// Its new binary is Go or not, with its own layout.
			if goroutines, err := setGoLayout(s.objs, p.PID); err == nil {
				p.goroutines = goroutines
			}
		}
		alive++
	}
	return alive
}

// forget takes an exited target's pid out of the targets map, once.
func (s *session) forget(p *process) {
	if p.forgotten {
		return
	}
	p.forgotten = true
	_ = s.objs.Targets.Delete(uint32(p.PID))
	_ = s.objs.GoLayouts.Delete(uint32(p.PID))
	_ = bumpTargetsGeneration(s.objs)
	if testHookTargetForgotten != nil {
		testHookTargetForgotten(p.PID)
	}
}

// testHookTargetForgotten, when set by a test, runs once an exited
// target's pid has left the programs' targets.
var testHookTargetForgotten func(pid int)

// bumpTargetsGeneration voids the answers CPUs cached about which task is
// a target, after the targets map changed.
func bumpTargetsGeneration(objs *bpfObjects) error {
	var generation uint32
	if err := objs.TargetsGeneration.Get(&generation); err != nil {
		return fmt.Errorf("registering targets: %w", err)
	}
	if err := objs.TargetsGeneration.Set(max(generation+1, generationChanged)); err != nil {
		return fmt.Errorf("registering targets: %w", err)
	}
	return nil
}

// targetChange is what a poll found of a target.
type targetChange int

const (
	targetRunning targetChange = iota // the same program, still running
	targetExecd                       // another program since the last poll
	targetExited
)

// poll reads the target's CPU clock and notes, at into the window, whether
// it exec'd or exited since the last poll. What it reads by pid it keeps
// only if the pidfd says the process still ran after the reads: once a
// process has exited and been reaped, its pid may be another's.
func (p *process) poll(at time.Duration) targetChange {
	ns, clockErr := ProcessCPUNs(p.PID)
	img, imgErr := imageOf(p.PID)
	execd := imgErr == nil && p.imageKnown && img != p.image
	var path string
	if execd {
		path = exePath(p.PID)
	}
	if hasExited(p.pidfd) {
		p.exited = true
		return targetExited
	}
	if clockErr == nil {
		p.schedNsAt = ns
	}
	if imgErr == nil && !p.imageKnown {
		// Unknown at the start (caught in the middle of an exec): the
		// program it runs now is the one it exec'd then.
		p.image, p.imageKnown = img, true
	}
	if !execd {
		return targetRunning
	}
	p.image = img
	if p.execd == "" {
		p.execd, p.execdAfter = path, at
	}
	return targetExecd
}

func hasExited(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

func refreshListenPorts(objs *bpfObjects, procs []*process) error {
	for _, p := range procs {
		if p.exited {
			continue
		}
		found, err := listeningPorts(p.PID)
		if hasExited(p.pidfd) {
			continue // what was read may be of another process's namespace
		}
		if err != nil {
			return fmt.Errorf("reading listening ports of %d: %w", p.PID, err)
		}
		for port := range found {
			if err := objs.ListenPorts.Put(port, uint8(1)); err != nil {
				return fmt.Errorf("registering port %d: %w", port, err)
			}
		}
		paths, err := listeningUnixPaths(p.PID)
		if err != nil {
			return fmt.Errorf("reading the Unix sockets %d listens on: %w", p.PID, err)
		}
		for _, path := range paths {
			if err := objs.ListenUnix.Put(unixPathKey(path), uint8(1)); err != nil {
				return fmt.Errorf("registering Unix socket %s: %w", path, err)
			}
		}
		if len(paths) > 0 {
			if err := objs.WatchUnix.Set(uint32(1)); err != nil {
				return fmt.Errorf("watching Unix sockets: %w", err)
			}
		}
	}
	return nil
}

// unixPathKey is a listening path as the programs read it from the
// kernel: a filesystem path's bytes (its NUL is the padding's first), or
// an abstract name ('@' in /proc) after a NUL.
func unixPathKey(path string) reqprofUnixPath {
	var key reqprofUnixPath
	at := 0
	if abstract, ok := strings.CutPrefix(path, "@"); ok {
		path, at = abstract, 1
	}
	for i := 0; i < len(path) && at+i < len(key.Path); i++ {
		key.Path[at+i] = int8(path[i])
	}
	return key
}

// registerStdio makes pid's stdin and stdout one channel of requests when
// they can carry them: stdin a pipe, FIFO or socket (MCP's stdio
// transport: a client that spawned the server speaks to it there), not a
// terminal, /dev/null or a file. The programs start the channel only at a
// read of stdin, so a server that logs to a piped stdout and never reads
// stdin has none. It returns the descriptors registered.
func registerStdio(objs *bpfObjects, pid int, mode StdioMode) (int, error) {
	if mode == StdioOff {
		return 0, nil
	}
	if !carriesRequests(pid, 0) && mode != StdioOn || isTerminal(pid, 0) {
		return 0, nil
	}
	cookie := stdioCookie(pid)
	for _, fd := range []uint32{0, 1} {
		if err := objs.StdioFds.Put(reqprofStdioKey{Tgid: uint32(pid), Fd: fd}, cookie); err != nil {
			return 0, fmt.Errorf("registering the stdio of %d: %w", pid, err)
		}
	}
	return 2, nil
}

// stdioCookie stands for a process's stdio channel where a socket's
// cookie would: socket cookies count up from 1, never near the top bit.
func stdioCookie(pid int) uint64 { return 1<<63 | uint64(pid) }
