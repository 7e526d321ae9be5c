// Package collector loads reqprof's BPF programs, attaches them to the
// target processes' scheduler, syscall and socket tracepoints, and decodes
// what they measured into profile types. It is the only package that knows
// about BPF.
package collector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/reqprof/reqprof/collector/symbols"
	"github.com/reqprof/reqprof/profile"
)

// Target is one process to profile, or every process of a cgroup.
type Target struct {
	PID    int
	Label  string // optional name shown in reports
	Cgroup string // a cgroup v2 directory instead of PID: all its processes, as one target
}

// Config says what to profile and for how long.
type Config struct {
	Targets []Target
	// Duration bounds the window; zero means until ctx is done or every
	// target has exited.
	Duration time.Duration
	// OnAttached, if set, is called once every program is attached and
	// counting, with a one-line description, so load can start after it.
	OnAttached func(line string)
	// CaptureBytes is how many bytes of each request's first read are
	// captured to name it (route, RPC method); 0 means MaxCaptureBytes.
	// The bytes never leave the collector: only the derived name does.
	CaptureBytes int
	// NoPayload captures nothing: requests are named by port only.
	NoPayload bool
	// Gross keeps reqprof's own cost in the figures as observed: by
	// default what its programs cost in a request's context is taken out
	// of its CPU, user/kernel split and kernel breakdown. Either way it
	// is measured and stated (profile.Target.SelfCost, Request.SelfNs).
	Gross bool
	// Lite attaches no program to the syscall, interrupt and page fault
	// tracepoints, which run on every syscall of the machine: a mode for
	// live production hosts. A socket operation is a request's boundary;
	// CPU per request, latency, waits and routes stay exact; the
	// user/kernel split is estimated from the kernel's tick accounting;
	// there is no kernel breakdown, no page fault count, no connection
	// setup, and no stdio requests (profile.Run.Lite).
	Lite bool
	// Stacks samples the targets' threads' stacks on each CPU, StackHz
	// times a second (DefaultStackHz when 0), each sample with the request
	// it ran for: profile.Target.Stacks.
	Stacks  bool
	StackHz int
	// FollowChildren adds each target's child processes, present and
	// future, to it: a pre-fork server (nginx, gunicorn, PHP-FPM) is
	// profiled through its master.
	FollowChildren bool
	// Stdio says whether requests on a target's stdin, answered on its
	// stdout, are followed (MCP's stdio transport): by default when stdin
	// is a pipe, FIFO or socket.
	Stdio StdioMode
	// OnRequest, if set, is handed each finished request as it is
	// counted, with its target's index in Targets, so that a caller can
	// keep figures while the window runs (reqprof serve, the live view).
	// It is called from the goroutine that reads the ring buffer, up to
	// some 150,000 times a second: it must be quick and never block, or
	// records are lost. The request's strings are interned: they may be
	// kept.
	OnRequest func(target int, r profile.Request)
	// Runtime names how every target resumes a request whose backend
	// answered (a key of Runtimes); "" detects it per target.
	Runtime string
	// Role says what every target's outbound connections are: "client"
	// or "both" (each call on them a request of its own, named with its
	// peer), "server" (backends of the requests it serves); "" detects it
	// per target (a client when it serves nothing). See Roles.
	Role string
	// OnProgress, if set, is called about once a second while the window
	// is open with what the collector knows so far besides finished
	// requests (see Progress).
	OnProgress func(Progress)
	// NoSample keeps no sample of the finished requests (the result's
	// Requests are empty, its totals exact), for a caller that takes its
	// figures from OnRequest: the sample is some 15 MB a target.
	NoSample bool
}

// StdioMode says when a target's stdin and stdout carry requests.
type StdioMode int

const (
	StdioAuto StdioMode = iota // when stdin is a pipe, FIFO or socket
	StdioOn                    // unless stdin is a terminal
	StdioOff
)

// pollInterval is how often the collector checks that targets are alive and
// picks up ports they started listening on.
const pollInterval = 200 * time.Millisecond

// consumePollInterval is how often the collector reads finished requests:
// at 50,000 requests/s of about 300 bytes, 25 ms fills well under a tenth
// of the ring buffer.
const consumePollInterval = 25 * time.Millisecond

// consumeBusyBytes is how much one drain of the ring buffer reads for the
// next to follow at once rather than after consumePollInterval: a sixteenth
// of the buffer, read in one go, says it fills faster than the interval
// allows for.
const consumeBusyBytes = 512 << 10

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

// Run profiles the targets for one window and returns what it measured.
// Errors are one line each, ready to show to a user.
func Run(ctx context.Context, cfg Config) (profile.Run, error) {
	procs, err := openTargets(cfg.Targets)
	if err != nil {
		return profile.Run{}, err
	}
	defer func() {
		for _, p := range procs {
			unix.Close(p.pidfd)
		}
	}()
	if err := Preflight(); err != nil {
		return profile.Run{}, err
	}
	s, err := start(cfg, procs)
	if err != nil {
		return profile.Run{}, err
	}
	defer s.close()
	return s.profile(ctx, cfg)
}

// session is reqprof loaded, attached and calibrated, for one window over
// procs.
type session struct {
	objs     *bpfObjects
	procs    []*process
	reader   *ringbuf.Reader
	links    []link.Link
	sampler  *sampler // with Config.Stacks
	stackHz  int
	overhead *overheadMeter
	// others is the most other reqprof instances seen loaded while the
	// window was open.
	others int
}

// start loads and attaches the programs, and measures the syscall entry
// cost with them enabled and no target registered yet.
func start(cfg Config, procs []*process) (*session, error) {
	objs, err := load(cfg.bpfConfig(), cfg.Stacks)
	if err != nil {
		return nil, err
	}
	s := &session{objs: objs, procs: procs}
	if cfg.Stacks {
		s.stackHz = cmp.Or(cfg.StackHz, DefaultStackHz)
	}
	if err := s.attach(); err != nil {
		s.close()
		return nil, err
	}
	s.overhead.onProgress = cfg.OnProgress
	return s, nil
}

func (s *session) attach() error {
	if err := refreshListenPorts(s.objs, s.procs); err != nil {
		return err
	}
	var err error
	if s.reader, err = ringbuf.NewReader(s.objs.Requests); err != nil {
		return fmt.Errorf("opening the request ring buffer: %w", err)
	}
	// What a program run costs to enter: a syscall loop before the
	// programs are attached, and after, while they are not yet enabled
	// (each run returns at once).
	bare := measureSyscallLoop()
	if s.links, err = attachAll(s.objs); err != nil {
		return err
	}
	s.overhead = newOverheadMeter(s.objs, len(s.procs))
	s.overhead.entryPerRunNs = entryPerRun(bare, measureSyscallLoop())
	if s.stackHz > 0 {
		if s.stackHz > MaxStackHz {
			return fmt.Errorf("stack sampling at %d Hz, at most %d", s.stackHz, MaxStackHz)
		}
		if s.sampler, err = openSampler(s.objs.SampleStack, s.stackHz); err != nil {
			return err
		}
		s.overhead.progs = append(s.overhead.progs, s.objs.SampleStack)
	}
	return enableAndCalibrate(s.objs, s.overhead)
}

// detach detaches every program: no event is charged, and no stack
// sampled, after it.
func (s *session) detach() {
	s.sampler.close()
	s.sampler = nil
	for _, l := range s.links {
		l.Close()
	}
	s.links = nil
}

func (s *session) close() {
	s.detach()
	if s.reader != nil {
		s.reader.Close()
	}
	s.objs.Close()
}

// profile opens the window, waits for its end, and reads what it measured.
func (s *session) profile(ctx context.Context, cfg Config) (profile.Run, error) {
	var stacks *stackSamples
	if s.stackHz > 0 {
		// Symbols are read before the window opens: read at a stack's
		// first sample, a large binary's would hold up the ring buffer.
		sym := symbols.New(symbols.Options{})
		// Interpreters too: the programs read a process's interpreter
		// frames from when its layout is given them (a process seen
		// later, at its first sample).
		interp := newInterpreters(s.objs.InterpLayouts)
		defer interp.close()
		for _, p := range s.procs {
			for _, pid := range append([]int{p.PID}, p.members...) {
				sym.Preload(pid)
				interp.add(pid)
			}
		}
		stacks = newStackSamples(len(s.procs), s.stackHz, sym)
		stacks.interp = interp
	}
	consumed := make(chan consumeResult, 1)
	s.overhead.self = newSelfCost(cfg.Gross)
	s.overhead.self.rates.Store(s.overhead.startRates())
	go func() { consumed <- consume(s.reader, len(s.procs), cfg, stacks, s.overhead.self) }()

	// Open the window: each target's threads count from its opening, when
	// its CPU clock is read.
	meta := hostMeta(s.overhead.entryNs)
	s.overhead.open()
	defer s.overhead.dropStats() // on a return before the window closes
	if err := prepareTargets(s.objs, s.procs, cfg); err != nil {
		return profile.Run{}, err
	}
	// Once each target's processes are known, and before the window
	// opens: a job queued in the window unseen would leave its request
	// without its pool work.
	s.attachPools()
	startNs, err := openWindow(s.objs, s.procs, cfg.Stdio)
	if err != nil {
		return profile.Run{}, err
	}
	s.countOthers()
	if cfg.OnAttached != nil {
		cfg.OnAttached(attachedLine(s.procs))
	}

	s.waitWindow(ctx, cfg.Duration, startNs)

	endNs, cost, err := s.closeWindow(startNs)
	if err != nil {
		return profile.Run{}, err
	}
	cost.OtherInstances = s.others
	res := <-consumed
	if res.err != nil {
		return profile.Run{}, res.err
	}
	run, err := buildRun(s.objs, s.procs, res, meta, startNs, endNs, s.overhead.selfRates(), cfg.Gross)
	run.Overhead = cost
	if cfg.Lite {
		// Its kernel time is an estimate of no syscall: no rows.
		run.Lite = true
		for i := range run.Targets {
			run.Targets[i].KernelBreakdown = nil
		}
	}
	return run, err
}

// attachPools follows the pools of the targets that run libuv or CPython and,
// if any were, calibrates what a probe's run costs, to take it out of the
// figures (without it, what the probes' traps cost stays in them).
func (s *session) attachPools() {
	links := attachPools(s.objs, s.procs)
	if len(links) == 0 {
		return
	}
	s.links = append(s.links, links...)
	if ns, err := calibratePoolEntry(s.objs.OnUvAsyncSend); err == nil {
		s.overhead.poolEntryNs = ns
		s.overhead.updateRates()
	}
}

// closeWindow reads the process clocks and stops counting at the same
// instant, so both accountings cover the same time, sees whether the
// targets exited or exec'd since the last poll, detaches the programs and
// drains the ring buffer.
func (s *session) closeWindow(startNs uint64) (endNs uint64, cost profile.Overhead, err error) {
	// The clocks are read right before the programs stop, not after the
	// work below: a target's CPU in between would be the kernel's alone.
	clocks := make([]uint64, len(s.procs))
	clockErrs := make([]error, len(s.procs))
	for i, p := range s.procs {
		clocks[i], clockErrs[i] = ProcessCPUNs(p.PID)
	}
	if err := s.objs.Enabled.Set(uint32(0)); err != nil {
		return 0, cost, fmt.Errorf("disabling the programs: %w", err)
	}
	endNs = monotonicNs()
	cost = s.overhead.close()
	for i, p := range s.procs {
		if !p.exited && p.poll(time.Duration(endNs-startNs)) != targetExited && clockErrs[i] == nil {
			p.schedNsAt = clocks[i]
		}
	}
	s.countOthers()
	s.detach()
	if err := s.reader.Flush(); err != nil {
		return 0, cost, fmt.Errorf("draining the request ring buffer: %w", err)
	}
	return endNs, cost, nil
}

// chunkBytes is how many bytes of a request beyond its capture the
// programs send on, so that requests pipelined behind its first are
// counted and named (HTTP/2 connections send every byte): enough for 16
// pipelined requests of 500 bytes, a copy of 1 to 2 µs for a request that
// brings that much or more.
const chunkBytes = 8192

// bpfConfig is what the programs are fixed with before load.
func (cfg Config) bpfConfig() reqprofConfig {
	bc := reqprofConfig{CaptureBytes: uint32(MaxCaptureBytes), ChunkBytes: chunkBytes}
	switch {
	case cfg.NoPayload:
		bc.CaptureBytes, bc.ChunkBytes = 0, 0
	case cfg.CaptureBytes > 0:
		bc.CaptureBytes = uint32(cfg.CaptureBytes)
	}
	if cfg.FollowChildren {
		bc.FollowChildren = 1
	}
	if cfg.Lite {
		bc.Lite = 1
	}
	if testHideSwitchIns {
		bc.HideSwitchIns = 1
	}
	return bc
}

// testHideSwitchIns, when set by a test, has the programs see no switch-in
// of a target's thread, as where the kernel runs no tracepoint for a switch.
var testHideSwitchIns bool

// Values of targets_generation: each change of the targets map voids what
// the programs cached about which task is a target.
const (
	generationNoTargets   = 1 // enabled, for the calibration
	generationCalibrating = 3 // the collector's own process is a target
	generationChanged     = 4 // and up: targets registered or forgotten
)

// enableAndCalibrate starts the programs with no target registered and
// measures the syscall entry cost on a thread of the collector.
func enableAndCalibrate(objs *bpfObjects, overhead *overheadMeter) error {
	if err := objs.TargetsGeneration.Set(uint32(generationNoTargets)); err != nil {
		return fmt.Errorf("enabling the programs: %w", err)
	}
	if err := objs.Enabled.Set(uint32(1)); err != nil {
		return fmt.Errorf("enabling the programs: %w", err)
	}
	return overhead.calibrate()
}

// testHookTargetRegistered, when set by a test, runs between a target's
// registration and its opening: where the collector may lose its CPU.
var testHookTargetRegistered func()

// prepareTargets does what takes time before the window opens (reading
// each binary for its Go layout, listing children), so that the targets
// open close together.
func prepareTargets(objs *bpfObjects, procs []*process, cfg Config) error {
	for i, p := range procs {
		if err := p.setRuntime(objs, i, cfg.Runtime); err != nil {
			return fmt.Errorf("setting the runtime of target %d: %w", p.PID, err)
		}
		if err := p.prepare(objs, cfg.FollowChildren); err != nil {
			return err
		}
		if err := p.setRole(objs, i, cfg.Role, cfg.Stdio); err != nil {
			return err
		}
	}
	return nil
}

// openWindow registers and opens the targets (prepared), and reads each
// one's CPU clock at its opening.
func openWindow(objs *bpfObjects, procs []*process, stdio StdioMode) (startNs uint64, err error) {
	// Each target is registered, then opened: its threads' time counts
	// from the opening (none before it, whenever the programs first see
	// them), and its CPU clock is read at the opening.
	startNs = monotonicNs()
	var opened [reqprofLimitsMAX_TARGETS]uint64
	for i, p := range procs {
		if err := p.register(objs, i); err != nil {
			return 0, err
		}
		if err := bumpTargetsGeneration(objs); err != nil {
			return 0, err
		}
		if testHookTargetRegistered != nil {
			testHookTargetRegistered()
		}
		opened[i] = monotonicNs()
		if err := objs.TargetOpenedNs.Set(opened); err != nil {
			return 0, fmt.Errorf("opening the window of target %d: %w", p.PID, err)
		}
		p.schedNs0, _ = ProcessCPUNs(p.PID)
		p.schedNsAt = p.schedNs0
		// Gone already: what was read by its pid may be another's.
		p.exited = hasExited(p.pidfd)
	}
	channels := 0
	for _, p := range procs {
		if p.exited {
			continue
		}
		for _, pid := range append([]int{p.PID}, p.members...) {
			n, err := registerStdio(objs, pid, stdio)
			if err != nil {
				return 0, err
			}
			channels += n
		}
		n, err := registerClientPipes(objs, p.clientPipes)
		if err != nil {
			return 0, err
		}
		channels += n
	}
	if err := objs.StdioChannels.Set(uint32(channels)); err != nil {
		return 0, fmt.Errorf("registering stdio channels: %w", err)
	}
	return startNs, nil
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

func openTargets(targets []Target) ([]*process, error) {
	if len(targets) == 0 {
		return nil, errors.New("no target: give --pid PID")
	}
	if len(targets) > maxTargets-1 { // one index is the collector's own, to calibrate
		return nil, fmt.Errorf("%d targets, at most %d", len(targets), maxTargets-1)
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

func attachedLine(procs []*process) string {
	var parts []string
	threads := 0
	for _, p := range procs {
		part := fmt.Sprintf("%d (%s)", p.PID, p.comm)
		if p.goroutines != "" {
			part += ", Go: goroutines " + p.goroutines
		}
		if p.pool != PoolNone {
			part += ", runtime pool: " + p.pool
		}
		parts = append(parts, part)
		threads += threadCount(p.PID)
	}
	noun := "threads"
	if threads == 1 {
		noun = "thread"
	}
	return fmt.Sprintf("reqprof: attached to %s, %d %s", strings.Join(parts, ", "), threads, noun)
}

// waitWindow returns when the duration passes, ctx is done, or every target
// has exited. Meanwhile it notes exits, execs and new listening ports.
func (s *session) waitWindow(ctx context.Context, duration time.Duration, startNs uint64) {
	var deadline <-chan time.Time
	if duration > 0 {
		timer := time.NewTimer(duration)
		defer timer.Stop()
		deadline = timer.C
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	portsRead := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-deadline:
			return
		case <-tick.C:
		}
		s.overhead.poll()
		if s.pollTargets(time.Duration(monotonicNs()-startNs)) == 0 {
			return
		}
		// Best effort: a port opened during the window is picked up here.
		// Not at every tick: /proc/PID/net/tcp lists every socket of the
		// namespace, and reading it costs milliseconds on a busy host.
		// Nor are other reqprofs looked for at every tick: that lists
		// every BPF program of the host.
		if time.Since(portsRead) >= portsRefreshInterval {
			_ = refreshListenPorts(s.objs, s.procs)
			s.countOthers()
			portsRead = time.Now()
		}
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

// countOthers notes how many other reqprof instances are loaded now.
// Counting them lists every BPF program of the host, which needs
// CAP_SYS_ADMIN: without it, none are seen.
func (s *session) countOthers() {
	if n, err := LoadedInstances(); err == nil {
		s.others = max(s.others, n-1)
	}
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

// portsRefreshInterval is how often listening ports are looked up again.
const portsRefreshInterval = 2 * time.Second

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

type consumeResult struct {
	finished []*finishedRequests // per target index
	kernel   []kernelTally       // per target index
	names    *routeNames
	bursts   *bursts
	// perBurst counts, per target, requests counted one a burst because
	// their connection's bytes could not be followed, by why.
	perBurst      []map[string]uint64
	droppedChunks uint64 // chunks past the bound held for one connection
	// messages counts, per target, JSON-RPC notifications and responses
	// that came from clients: no requests, their cost shared by the
	// requests in their burst.
	messages []uint64
	// noPayload: no bytes were captured, each burst is a request named
	// by port, as asked.
	noPayload bool
	malformed uint64
	// stacks are the stack samples, with Config.Stacks; nil without.
	stacks *stackSamples
	routes []profile.RouteKey // reused
	err    error
	// onRequest is Config.OnRequest.
	onRequest func(target int, r profile.Request)
	// self takes reqprof's own cost out of each request.
	self     *selfCost
	backends backendUses
	// peers names client calls' peers; clientRoute is reused to name
	// their routes.
	peers       peerNames
	clientRoute []byte
}

// consume reads finished requests until the reader is flushed. Its memory
// is bounded however many finish: it keeps totals and a sample of them,
// reuses one record buffer and interns a bounded number of route names.
// Once the samples are full, decoding allocates only for a route name not
// seen before.
func consume(reader *ringbuf.Reader, targets int, cfg Config, stacks *stackSamples, self *selfCost) consumeResult {
	res := newConsumeResult(targets)
	res.self = self
	res.noPayload, res.onRequest = cfg.NoPayload, cfg.OnRequest
	res.stacks = stacks
	if cfg.NoSample {
		for _, f := range res.finished {
			f.sample.limit = 0
		}
	}
	var rec ringbuf.Record
	// The programs never wake the reader for a record, to spare the
	// servers an interrupt per request, and the reader never waits on the
	// ring buffer in a syscall either: it drains what is there, without
	// blocking, and sleeps on a Go timer. A goroutine parked in a blocking
	// syscall for longer than 10 ms has its P taken back by the runtime's
	// monitor, which then polls every 20 µs for a while: that polling was
	// a sixth of the collector's CPU under load. A deadline long passed
	// makes each wait return at once.
	reader.SetDeadline(time.Unix(0, 1))
	for {
		read := 0
		for {
			err := reader.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if errors.Is(err, ringbuf.ErrFlushed) || errors.Is(err, os.ErrClosed) {
				return res
			}
			if err != nil {
				res.err = fmt.Errorf("reading the request ring buffer: %w", err)
				return res
			}
			read += len(rec.RawSample)
			res.decode(rec.RawSample)
		}
		if read < consumeBusyBytes {
			time.Sleep(consumePollInterval)
		}
	}
}

// decode takes one ring-buffer record of any kind.
func (res *consumeResult) decode(b []byte) {
	kind, err := recordKind(b)
	if err != nil {
		res.malformed++
		return
	}
	switch kind {
	case uint32(reqprofRecordKindRECORD_REQUEST):
		d, err := decodeRecord(b)
		if err != nil {
			res.malformed++
			return
		}
		res.add(d)
	case uint32(reqprofRecordKindRECORD_RESPONSE), uint32(reqprofRecordKindRECORD_READ_MARK):
		d, err := decodeRecordOf(b, kind)
		if err != nil || int(d.target) >= len(res.finished) {
			res.malformed++
			return
		}
		switch {
		case res.noPayload:
		case kind == uint32(reqprofRecordKindRECORD_RESPONSE):
			res.bursts.response(&d)
		default:
			res.bursts.readMark(&d)
		}
	case uint32(reqprofRecordKindRECORD_CHUNK), uint32(reqprofRecordKindRECORD_CLOSED):
		c, err := decodeChunk(b)
		if err != nil || int(c.target) >= len(res.finished) {
			res.malformed++
			return
		}
		if c.closed {
			res.bursts.closed(c.conn)
		} else if res.bursts.chunk(c.conn, c.offset, c.data) {
			res.droppedChunks++
		}
	case uint32(reqprofRecordKindRECORD_BACKEND):
		r, err := decodeBackend(b)
		if err != nil || int(r.Target) >= len(res.finished) {
			res.malformed++
			return
		}
		res.backends.held(r)
	case uint32(reqprofRecordKindRECORD_STACK):
		d, err := decodeStackSample(b)
		if err != nil || res.stacks == nil {
			res.malformed++
			return
		}
		res.stacks.sample(&d)
	default:
		res.malformed++
	}
}

func newConsumeResult(targets int) consumeResult {
	res := consumeResult{
		finished: make([]*finishedRequests, targets),
		kernel:   make([]kernelTally, targets),
		names:    newRouteNames(maxRouteNames),
		perBurst: make([]map[string]uint64, targets),
		backends: newBackendUses(targets),
	}
	res.bursts = newBursts(res.names.internBytes)
	for i := range targets {
		res.finished[i] = newFinishedRequests(maxSampledRequests, uint64(i))
		res.perBurst[i] = map[string]uint64{}
	}
	res.messages = make([]uint64, targets)
	return res
}

// add keeps what is needed of a decoded record; a malformed one, or one
// of a request whose start the programs did not see, is only counted.
func (res *consumeResult) add(d decodedRecord) {
	if int(d.target) >= len(res.finished) || d.flags&uint32(reqprofRecordFlagsREQ_START_UNSEEN) != 0 {
		res.malformed++
		return
	}
	res.kernel[d.target].add(d.kernel, res.self.net(&d.request, d.kernel))
	if d.flags&uint32(reqprofRecordFlagsREQ_CLIENT) != 0 {
		d.request.Peer = res.peers.name(*d.peer)
	}
	if res.noPayload {
		d.request.Route = res.routeOf(res.names.name(nil, d.localPort), &d)
		res.finish(d.target, d.request)
		res.stacksFinished(&d, false, d.request.Route)
		res.backendsFinished(&d, d.request.Route)
		return
	}
	s, f := res.bursts.burst(&d)
	if f != nil && f.answers != nil && res.matchByID(&d, s, f) {
		return
	}
	r := d.request
	carried := f != nil && f.carrying
	if carried {
		r = merge(r, f.carry)
		f.carry, f.carrying = profile.Request{}, false
	}
	res.messages[d.target] += uint64(s.messages)
	switch {
	case s.fallback != "":
		r.Route = res.names.intern(res.routeOf(fallbackName(&d), &d))
		r.Protocol = s.protocol.String()
		res.finish(d.target, r)
		res.countPerBurst(d.target, s.fallback)
		res.stacksFinished(&d, carried, r.Route)
		res.backendsFinished(&d, r.Route)
	case s.carried:
		if f == nil {
			f = res.bursts.follow(d.request.Conn)
		}
		f.carry, f.carrying, f.target = r, true, d.target
		// Its samples stay held, for the burst that completes a request.
	default:
		res.routes = res.routes[:0]
		for i, found := range s.requests {
			one := share(r, len(s.requests), i == 0)
			one.Route = res.routeOf(found.Name, &d)
			one.Protocol = found.Protocol.String()
			res.finish(d.target, one)
			res.routes = append(res.routes, one.Key())
		}
		if res.stacks != nil {
			res.stacks.finished(d.request.Conn, uint64(d.request.Start), res.routes, carried)
		}
		if len(res.routes) > 0 {
			res.backendsFinished(&d, res.routes[0].Route)
		}
	}
}

// backendsFinished gives the backend calls of d's burst to its first
// request, named route. A burst that completes no request keeps them for
// the one that does.
func (res *consumeResult) backendsFinished(d *decodedRecord, route string) {
	if d.flags&uint32(reqprofRecordFlagsREQ_BACKENDS) != 0 {
		res.backends.finished(d.target, d.request.Conn, profile.RouteKey{Route: route, Port: d.localPort, Peer: d.request.Peer})
	}
}

// routeOf is the route of a request of d named name: a client's call
// with its peer, a request of a Unix socket or stdio channel with it.
func (res *consumeResult) routeOf(name string, d *decodedRecord) string {
	if d.request.Peer != "" {
		res.clientRoute = appendClientRoute(res.clientRoute[:0], name, d.request.Peer)
		return res.names.internBytes(res.clientRoute)
	}
	if channel := channelName(d.flags); channel != "" {
		return res.names.intern(localName(name, channel))
	}
	return name
}

// finish counts r as a finished request of target, and hands it on to
// Config.OnRequest.
func (res *consumeResult) finish(target uint32, r profile.Request) {
	res.finished[target].add(r)
	if res.onRequest != nil {
		res.onRequest(int(target), r)
	}
}

// stacksFinished gives the samples held for d's request to its route,
// with those of the bursts it carries when carried.
func (res *consumeResult) stacksFinished(d *decodedRecord, carried bool, route string) {
	if res.stacks == nil {
		return
	}
	res.routes = append(res.routes[:0], profile.RouteKey{Route: route, Port: d.localPort, Peer: d.request.Peer})
	res.stacks.finished(d.request.Conn, uint64(d.request.Start), res.routes, carried)
}

// maxPerBurstReasons bounds the distinct reasons kept per target: they
// come from parsers' errors, which may quote what a peer sent.
const maxPerBurstReasons = 16

func (res *consumeResult) countPerBurst(target uint32, why string) {
	reasons := res.perBurst[target]
	if _, ok := reasons[why]; !ok && len(reasons) >= maxPerBurstReasons {
		why = "other reasons"
	}
	reasons[why]++
}

// carriedNs is, per target, the CPU of bursts still waiting for a request
// to complete when the window closed: part of no finished request.
func (res *consumeResult) carried() []uint64 {
	ns := make([]uint64, len(res.finished))
	for _, f := range res.bursts.conns {
		if f.carrying && int(f.target) < len(ns) {
			ns[f.target] += f.carry.CPUNs()
		}
		if f.answers != nil && int(f.target) < len(ns) {
			ns[f.target] += f.answers.inFlightNs()
		}
	}
	return ns
}
