// Package collector loads reqprof's BPF programs, attaches them to the
// target processes' scheduler, syscall and socket tracepoints, and decodes
// what they measured into profile types. It is the only package that knows
// about BPF.
package collector

import (
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
	// FollowChildren adds each target's child processes, present and
	// future, to it: a pre-fork server (nginx, gunicorn, PHP-FPM) is
	// profiled through its master.
	FollowChildren bool
	// OnRequest, if set, is handed each finished request as it is
	// counted, with its target's index in Targets, so that a caller can
	// keep figures while the window runs (reqprof serve, the live view).
	// It is called from the goroutine that reads the ring buffer, up to
	// some 150,000 times a second: it must be quick and never block, or
	// records are lost. The request's strings are interned: they may be
	// kept.
	OnRequest func(target int, r profile.Request)
	// OnProgress, if set, is called about once a second while the window
	// is open with what the collector knows so far besides finished
	// requests (see Progress).
	OnProgress func(Progress)
	// NoSample keeps no sample of the finished requests (the result's
	// Requests are empty, its totals exact), for a caller that takes its
	// figures from OnRequest: the sample is some 15 MB a target.
	NoSample bool
}

// pollInterval is how often the collector checks that targets are alive and
// picks up ports they started listening on.
const pollInterval = 200 * time.Millisecond

// consumePollInterval is how often the collector reads finished requests
// when the programs do not wake it: at 50,000 requests/s of about 300 bytes,
// 25 ms fills well under a quarter of the ring buffer, where they do.
const consumePollInterval = 25 * time.Millisecond

// process is a target as the collector tracks it during the window.
type process struct {
	Target
	comm      string
	pidfd     int
	exited    bool
	schedNs0  uint64 // kernel CPU clock at the window's start
	schedNsAt uint64 // its latest reading
	// members are its processes besides PID: children or cgroup members.
	// The kernel's CPU clock is per process, so a target of several has
	// no single figure to compare with.
	members    []int
	goroutines string // how a Go process's goroutines are followed; "" if it is none
	finished   *finishedRequests
	kernel     *kernelTally
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
	overhead *overheadMeter
}

// start loads and attaches the programs, and measures the syscall entry
// cost with them enabled and no target registered yet.
func start(cfg Config, procs []*process) (*session, error) {
	objs, err := load(cfg.bpfConfig())
	if err != nil {
		return nil, err
	}
	s := &session{objs: objs, procs: procs}
	if err := s.attach(); err != nil {
		s.close()
		return nil, err
	}
	s.overhead.onProgress = cfg.OnProgress
	return s, nil
}

func (s *session) attach() error {
	if err := refreshListenPorts(s.objs.ListenPorts, s.procs); err != nil {
		return err
	}
	var err error
	if s.reader, err = ringbuf.NewReader(s.objs.Requests); err != nil {
		return fmt.Errorf("opening the request ring buffer: %w", err)
	}
	if s.links, err = attachAll(s.objs); err != nil {
		return err
	}
	s.overhead = newOverheadMeter(s.objs, len(s.procs))
	return enableAndCalibrate(s.objs, s.overhead)
}

// detach detaches every program: no event is charged after it.
func (s *session) detach() {
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
	consumed := make(chan consumeResult, 1)
	go func() { consumed <- consume(s.reader, len(s.procs), cfg) }()

	// Open the window: a target's threads seen first after this have run
	// since enable_ns; its CPU clock is read at the same instant.
	meta := hostMeta(s.overhead.entryNs)
	s.overhead.open()
	defer s.overhead.dropStats() // on a return before the window closes
	startNs, err := openWindow(s.objs, s.procs, cfg.FollowChildren)
	if err != nil {
		return profile.Run{}, err
	}
	if cfg.OnAttached != nil {
		cfg.OnAttached(attachedLine(s.procs))
	}

	waitWindow(ctx, cfg.Duration, s.objs, s.procs, s.overhead)

	endNs, cost, err := s.closeWindow()
	if err != nil {
		return profile.Run{}, err
	}
	res := <-consumed
	if res.err != nil {
		return profile.Run{}, res.err
	}
	run, err := buildRun(s.objs, s.procs, res, meta, startNs, endNs)
	run.Overhead = cost
	return run, err
}

// closeWindow stops counting, then reads the process clocks at the same
// instant so both accountings cover the same time, detaches the programs
// and drains the ring buffer.
func (s *session) closeWindow() (endNs uint64, cost profile.Overhead, err error) {
	if err := s.objs.Enabled.Set(uint32(0)); err != nil {
		return 0, cost, fmt.Errorf("disabling the programs: %w", err)
	}
	endNs = monotonicNs()
	cost = s.overhead.close()
	for _, p := range s.procs {
		if ns, err := ProcessCPUNs(p.PID); err == nil && !p.exited {
			p.schedNsAt = ns
		}
	}
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
	return bc
}

// Values of targets_generation: each change of the targets map voids what
// the programs cached about which task is a target.
const (
	generationNoTargets   = 1 // enabled, for the calibration
	generationTargets     = 2 // the window is open
	generationCalibrating = 3 // the collector's own process is a target
)

// enableAndCalibrate starts the programs with no target registered and
// measures the syscall entry cost on a thread of the collector.
func enableAndCalibrate(objs *bpfObjects, overhead *overheadMeter) error {
	if err := objs.TargetsGeneration.Set(uint32(generationNoTargets)); err != nil {
		return fmt.Errorf("enabling the programs: %w", err)
	}
	if err := objs.EnableNs.Set(monotonicNs()); err != nil {
		return fmt.Errorf("enabling the programs: %w", err)
	}
	if err := objs.Enabled.Set(uint32(1)); err != nil {
		return fmt.Errorf("enabling the programs: %w", err)
	}
	return overhead.calibrate()
}

// openWindow registers the targets: a target's threads seen first after
// this have run since the window's start, and each target's CPU clock is
// read at the same instant.
func openWindow(objs *bpfObjects, procs []*process, followChildren bool) (startNs uint64, err error) {
	startNs = monotonicNs()
	if err := objs.EnableNs.Set(startNs); err != nil {
		return 0, fmt.Errorf("setting the window start: %w", err)
	}
	for i, p := range procs {
		p.schedNs0, _ = ProcessCPUNs(p.PID)
		p.schedNsAt = p.schedNs0
		if err := p.register(objs, i, followChildren); err != nil {
			return 0, err
		}
	}
	if err := objs.TargetsGeneration.Set(uint32(generationTargets)); err != nil {
		return 0, fmt.Errorf("registering targets: %w", err)
	}
	return startNs, nil
}

func openTargets(targets []Target) ([]*process, error) {
	if len(targets) == 0 {
		return nil, errors.New("no target: give --pid PID")
	}
	if len(targets) > maxTargets-1 { // one index is the collector's own, to calibrate
		return nil, fmt.Errorf("%d targets, at most %d", len(targets), maxTargets-1)
	}
	seen := map[int]bool{}
	var procs []*process
	for _, t := range targets {
		var members []int
		if t.Cgroup != "" {
			pids, err := cgroupProcs(t.Cgroup)
			if err != nil {
				return nil, setupError{err.Error(), ErrNoProcess}
			}
			if len(pids) == 0 {
				return nil, setupError{fmt.Sprintf("cgroup %s has no process", t.Cgroup), ErrNoProcess}
			}
			t.PID, members = pids[0], pids[1:]
			if t.Label == "" {
				t.Label = t.Cgroup
			}
		}
		if t.PID <= 0 {
			return nil, fmt.Errorf("invalid pid %d", t.PID)
		}
		if seen[t.PID] {
			return nil, fmt.Errorf("pid %d given twice", t.PID)
		}
		seen[t.PID] = true
		comm, err := processComm(t.PID)
		if err != nil {
			return nil, err
		}
		fd, err := unix.PidfdOpen(t.PID, 0)
		if errors.Is(err, unix.ESRCH) {
			return nil, noProcess(t.PID)
		}
		if err != nil {
			return nil, fmt.Errorf("opening process %d: %w", t.PID, err)
		}
		procs = append(procs, &process{Target: t, comm: comm, pidfd: fd, members: members})
	}
	return procs, nil
}

// register puts a target's processes into the targets map: its own, its
// members, and with children followed, its descendants now (the programs
// add later ones as they fork).
func (p *process) register(objs *bpfObjects, index int, followChildren bool) error {
	pids := append([]int{p.PID}, p.members...)
	if followChildren {
		for _, pid := range pids {
			pids = append(pids, descendants(pid)...)
		}
	}
	for i, pid := range pids {
		goroutines, err := addProcess(objs, pid, index, ebpf.UpdateAny)
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

// addProcess makes pid one of target index's processes, and says how its
// goroutines are followed if it is a Go process (else ""). A Go process's
// layout goes in first, so that its threads find it from their first event.
func addProcess(objs *bpfObjects, pid, index int, flags ebpf.MapUpdateFlags) (goroutines string, err error) {
	layout, err := goLayoutOf(pid)
	switch {
	case err == nil:
		value := reqprofGoLayout{TlsOffset: layout.gTLSOffset, GoidOffset: layout.goidOffset}
		if err := objs.GoLayouts.Update(uint32(pid), &value, ebpf.UpdateAny); err != nil {
			return "", err
		}
		goroutines = GoroutinesFollowed
	case !errors.Is(err, errNotGo):
		goroutines = "not followed: " + err.Error()
	}
	return goroutines, objs.Targets.Update(uint32(pid), uint32(index), flags)
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
// has exited. Meanwhile it notes exits and new listening ports.
func waitWindow(ctx context.Context, duration time.Duration, objs *bpfObjects, procs []*process, overhead *overheadMeter) {
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
		overhead.poll()
		alive := 0
		for i, p := range procs {
			p.refreshCgroup(objs, i)
			if p.exited {
				continue
			}
			if hasExited(p.pidfd) {
				p.exited = true
				continue
			}
			alive++
			if ns, err := ProcessCPUNs(p.PID); err == nil {
				p.schedNsAt = ns
			}
		}
		if alive == 0 {
			return
		}
		// Best effort: a port opened during the window is picked up here.
		// Not at every tick: /proc/PID/net/tcp lists every socket of the
		// namespace, and reading it costs milliseconds on a busy host.
		if time.Since(portsRead) >= portsRefreshInterval {
			_ = refreshListenPorts(objs.ListenPorts, procs)
			portsRead = time.Now()
		}
	}
}

// portsRefreshInterval is how often listening ports are looked up again.
const portsRefreshInterval = 2 * time.Second

func hasExited(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

func refreshListenPorts(ports *ebpf.Map, procs []*process) error {
	for _, p := range procs {
		if p.exited {
			continue
		}
		found, err := listeningPorts(p.PID)
		if err != nil {
			return fmt.Errorf("reading listening ports of %d: %w", p.PID, err)
		}
		for port := range found {
			if err := ports.Put(port, uint8(1)); err != nil {
				return fmt.Errorf("registering port %d: %w", port, err)
			}
		}
	}
	return nil
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
	err       error
	// onRequest is Config.OnRequest.
	onRequest func(target int, r profile.Request)
}

// consume reads finished requests until the reader is flushed. Its memory
// is bounded however many finish: it keeps totals and a sample of them,
// reuses one record buffer and interns a bounded number of route names.
// Once the samples are full, decoding allocates only for a route name not
// seen before.
func consume(reader *ringbuf.Reader, targets int, cfg Config) consumeResult {
	res := newConsumeResult(targets)
	res.noPayload, res.onRequest = cfg.NoPayload, cfg.OnRequest
	if cfg.NoSample {
		for _, f := range res.finished {
			f.sample.limit = 0
		}
	}
	var rec ringbuf.Record
	// The programs wake the reader only when the buffer fills up, to spare
	// the servers an interrupt per request: it polls meanwhile. A deadline
	// matters only once the buffer is empty, so it is renewed when it
	// passes, not for every record (reading the clock was as dear as
	// decoding one).
	reader.SetDeadline(time.Now().Add(consumePollInterval))
	for {
		err := reader.ReadInto(&rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			reader.SetDeadline(time.Now().Add(consumePollInterval))
			continue
		}
		if errors.Is(err, ringbuf.ErrFlushed) || errors.Is(err, os.ErrClosed) {
			return res
		}
		if err != nil {
			res.err = fmt.Errorf("reading the request ring buffer: %w", err)
			return res
		}
		res.decode(rec.RawSample)
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
	res.kernel[d.target].add(d.kernel)
	if res.noPayload {
		d.request.Route = res.names.name(nil, d.localPort)
		res.finish(d.target, d.request)
		return
	}
	s := res.bursts.burst(&d)
	f := res.bursts.conns[d.request.Conn]
	r := d.request
	if f != nil && f.carrying {
		r = merge(r, f.carry)
		f.carry, f.carrying = profile.Request{}, false
	}
	res.messages[d.target] += uint64(s.messages)
	switch {
	case s.fallback != "":
		r.Route = res.names.intern(fallbackName(&d))
		r.Protocol = s.protocol.String()
		res.finish(d.target, r)
		res.countPerBurst(d.target, s.fallback)
	case s.carried:
		if f == nil {
			f = res.bursts.follow(d.request.Conn)
		}
		f.carry, f.carrying, f.target = r, true, d.target
	default:
		for i, found := range s.requests {
			one := share(r, len(s.requests), i == 0)
			one.Route = found.Name
			one.Protocol = found.Protocol.String()
			res.finish(d.target, one)
		}
	}
}

// finish counts r as a finished request of target, and hands it on to
// Config.OnRequest.
func (res *consumeResult) finish(target uint32, r profile.Request) {
	res.finished[target].add(r)
	if res.onRequest != nil {
		res.onRequest(int(target), r)
	}
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
	}
	return ns
}
