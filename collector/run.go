package collector

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/reqprof/reqprof/collector/symbols"
	"github.com/reqprof/reqprof/profile"
)

// pollInterval is how often the collector checks that targets are alive and
// picks up ports they started listening on.
const pollInterval = 200 * time.Millisecond

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
	s.stackHz = cfg.StackHz
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
	s.overhead.entryPerRunNs, s.overhead.entrySpreadNs = entryPerRun(bare, measureSyscallLoop())
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

// countOthers notes how many other reqprof instances are loaded now.
// Counting them lists every BPF program of the host, which needs
// CAP_SYS_ADMIN: without it, none are seen.
func (s *session) countOthers() {
	if n, err := LoadedInstances(); err == nil {
		s.others = max(s.others, n-1)
	}
}

// portsRefreshInterval is how often listening ports are looked up again.
const portsRefreshInterval = 2 * time.Second
