package collector

import (
	"fmt"
	"io"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/reqprof/reqprof/profile"
)

// overheadMeter measures what reqprof costs over a window: the run time of
// its BPF programs, and the collector's own CPU and memory.
//
// The kernel keeps the programs' run time only while BPF_ENABLE_STATS is
// held, at the price of two clock reads in every program run: on this VM
// some 50 ns a run, more than half of what the programs cost a target's
// syscall, and a target's threads pay it and are charged for it. So they
// are kept a tenth of the time, and the run time per request is their run
// time over the requests finished meanwhile; the programs time their own
// runs in a target's context meanwhile too (timing_self), for the cost
// taken out of the figures. Turning the statistics on or off patches the
// kernel's code (a static key), which stops every CPU: 5.7 ms of the
// collector's CPU for each on and off on the test VM, 4% of all it spent
// under load when they were turned every 2 s. So they are kept one poll in
// statsPeriod until the samples have seen statsEnoughRequests finish
// (load may start any time after attaching, and an idle sample costs no
// run), and from then on statsPolls in statsPolls*statsPeriod: turned
// every 10 s. The first sample is the window's second poll, not its first,
// so that a short window runs as any other part of a long one. The syscall
// entry cost charged to each syscall is switched with them, as it is
// calibrated both ways.
type overheadMeter struct {
	objs    *bpfObjects
	progs   []*ebpf.Program
	targets int

	supported        bool   // the kernel keeps statistics
	entryNs          uint64 // syscall entry cost, calibrated without statistics
	entryNsWithStats uint64 // and with them

	stats                 io.Closer // held while statistics are kept
	statsSince            time.Time
	polls                 int // since the window opened
	ns0, runs0, finished0 uint64

	schedule statsSchedule

	sampled         time.Duration
	bpfNs           uint64
	bpfRuns         uint64
	sampledFinished uint64 // requests the targets finished while statistics were kept

	opened time.Time
	cpuNs0 uint64

	// onProgress is Config.OnProgress, called every progressPolls polls.
	onProgress func(Progress)

	// reqprof's own cost in the targets' context (selfcost.go): what
	// entering a program run costs, measured as the programs are
	// attached; the syscall tracepoints' runs timed at calibration; the
	// timings kept since, and the rule that uses them.
	entryPerRunNs float64
	entrySpreadNs float64 // entryPerRunNs's standard error
	poolEntryNs   float64 // set once pool probes are attached
	calibratedRun [selfKinds]float64
	timed, timed0 [selfKinds]reqprofSelfTiming
	sampleRunNs   [][selfKinds]float64 // each sample's rates (selfRates.sampleRunNs)
	self          *selfCost
}

// statsPeriod is how many polls make one period of the statistics, kept
// for one of them; once the samples have seen statsEnoughRequests finish,
// a sample lasts statsPolls polls and its period is as many times longer.
const (
	statsPeriod         = 10
	statsPolls          = 5
	statsEnoughRequests = 10_000
)

// statsSchedule is when the statistics are kept, in polls: when the next
// sample begins and how many polls it lasts, and when the one kept ends.
type statsSchedule struct {
	from, length, until int
}

// newStatsSchedule begins the first sample at the window's first poll.
func newStatsSchedule() statsSchedule { return statsSchedule{from: 1, length: 1} }

// begins says whether a sample begins at poll, none being kept, and marks
// it begun; one that cannot be kept is tried again a period on.
func (s *statsSchedule) begins(poll int) bool {
	if poll < s.from {
		return false
	}
	s.until, s.from = poll+s.length, poll+statsPeriod
	return true
}

// ends says whether the sample kept ends at poll.
func (s *statsSchedule) ends(poll int) bool { return poll >= s.until }

// ended places the next sample after one that ended at poll, the samples so
// far having seen sampledFinished requests finish: nine times its length
// later, so that no stretch keeps them more than a tenth of the time.
func (s *statsSchedule) ended(poll int, sampledFinished uint64) {
	s.length = 1
	if sampledFinished >= statsEnoughRequests {
		s.length = statsPolls
	}
	s.from = poll + (statsPeriod-1)*s.length
}

func newOverheadMeter(objs *bpfObjects, targets int) *overheadMeter {
	return &overheadMeter{objs: objs, targets: targets, progs: objs.programs(), schedule: newStatsSchedule()}
}

// calibrate measures the syscall entry cost without statistics and with
// them, the programs attached and enabled, and sets the first.
func (m *overheadMeter) calibrate() error {
	if m.objs.lite {
		// No syscall tracepoint to calibrate: only whether the kernel
		// keeps statistics.
		closer, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err == nil {
			m.supported = true
			closer.Close()
		}
		return nil
	}
	var err error
	if m.entryNs, err = calibrateSyscallEntry(m.objs); err != nil {
		return err
	}
	if err := m.calibrateRuns(); err != nil {
		return err
	}
	closer, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err == nil {
		m.supported = true
		m.entryNsWithStats, err = m.calibrateWithStats()
		closer.Close()
		if err != nil {
			return err
		}
	}
	return m.setEntry(m.entryNs)
}

// calibrateWithStats is the entry cost while statistics are kept, as the
// window keeps them (keepStats): the programs time their own runs then,
// and the clock reads and the update that costs, before and after their
// cuts, are entry cost too. Calibrated without the timing, a server's
// write row in a tight loop of /dev/null writes came out 96.4% of its
// own measure (15 windows, the load half in a period); with it, 99.2%
// (20 windows). The timings so far are noted again after it, as the
// window's do not include them.
func (m *overheadMeter) calibrateWithStats() (uint64, error) {
	if err := m.objs.TimingSelf.Set(uint32(1)); err != nil {
		return 0, fmt.Errorf("timing the programs: %w", err)
	}
	ns, err := calibrateSyscallEntry(m.objs)
	m.objs.TimingSelf.Set(uint32(0))
	if err != nil {
		return 0, err
	}
	if m.timed0, err = m.timings(); err != nil {
		return 0, err
	}
	m.timed = m.timed0
	return ns, nil
}

// calibrateRuns times the syscall tracepoints' runs on the calibrating
// thread, what the rates start from until the window's own runs are
// timed, and notes the timings so far, which the window's do not include.
func (m *overheadMeter) calibrateRuns() error {
	if err := m.objs.TimingSelf.Set(uint32(1)); err != nil {
		return fmt.Errorf("timing the programs: %w", err)
	}
	_, err := measureSyscallEntry(m.objs)
	m.objs.TimingSelf.Set(uint32(0))
	if err != nil {
		return err
	}
	timed, err := m.timings()
	if err != nil {
		return err
	}
	for _, k := range []reqprofSelfKind{reqprofSelfKindSELF_SYS_ENTER, reqprofSelfKindSELF_SYS_EXIT} {
		if t := timed[k]; t.Runs > 0 {
			m.calibratedRun[k] = float64(t.Ns) / float64(t.Runs)
		}
	}
	m.timed0, m.timed = timed, timed
	return nil
}

// timings are the programs' timed runs so far, by kind, summed over CPUs.
func (m *overheadMeter) timings() ([selfKinds]reqprofSelfTiming, error) {
	var sum [selfKinds]reqprofSelfTiming
	for k := range selfKinds {
		var perCPU []reqprofSelfTiming
		if err := m.objs.SelfTimings.Lookup(uint32(k), &perCPU); err != nil {
			return sum, fmt.Errorf("reading the programs' timings: %w", err)
		}
		for _, t := range perCPU {
			sum[k].Ns += t.Ns
			sum[k].Runs += t.Runs
		}
	}
	return sum, nil
}

// startRates are the rates before any of the window's runs are timed.
func (m *overheadMeter) startRates() *selfRates {
	return &selfRates{entryNs: m.entryPerRunNs, entrySpreadNs: m.entrySpreadNs, poolEntryNs: m.poolEntryNs, runNs: m.calibratedRun}
}

// updateRates sets the rates from the runs timed in the window, by kind;
// a kind with none timed keeps what calibration gave it.
func (m *overheadMeter) updateRates() {
	if m.self == nil {
		return
	}
	timed, err := m.timings()
	if err != nil {
		return
	}
	rates := m.startRates()
	for k := range selfKinds {
		runs, ns := timed[k].Runs-m.timed0[k].Runs, timed[k].Ns-m.timed0[k].Ns
		if runs > 0 {
			rates.runNs[k] = float64(ns) / float64(runs)
		}
	}
	// This sample's own rates: the programs time their runs only while
	// a sample is kept, so its runs are those since the last one's end.
	previous := m.timed
	sample := rates.runNs
	var any bool
	for k := range selfKinds {
		if runs := timed[k].Runs - previous[k].Runs; runs > 0 {
			sample[k] = float64(timed[k].Ns-previous[k].Ns) / float64(runs)
			any = true
		}
	}
	if any {
		m.sampleRunNs = append(m.sampleRunNs, sample)
	}
	rates.sampleRunNs = m.sampleRunNs
	m.timed = timed
	m.self.rates.Store(rates)
}

// selfRates are the rates as they stand.
func (m *overheadMeter) selfRates() *selfRates {
	if m.self == nil {
		return m.startRates()
	}
	return m.self.rates.Load()
}

func (m *overheadMeter) setEntry(ns uint64) error {
	if err := m.objs.SyscallOverheadNs.Set(ns); err != nil {
		return fmt.Errorf("setting the syscall entry cost: %w", err)
	}
	return nil
}

// open starts the measurement as the window opens.
func (m *overheadMeter) open() {
	m.opened = time.Now()
	m.cpuNs0, _ = selfUsage()
}

// poll is called at each of the window's polls.
func (m *overheadMeter) poll() {
	m.polls++
	switch {
	case m.stats != nil:
		if m.schedule.ends(m.polls) {
			m.dropStats() // counts the sample's finished requests
			m.schedule.ended(m.polls, m.sampledFinished)
		}
	case m.schedule.begins(m.polls):
		m.keepStats()
	}
	if m.onProgress != nil && m.polls%progressPolls == 0 {
		m.onProgress(m.progress())
	}
}

// progress is what the window has lost and cost so far.
func (m *overheadMeter) progress() Progress {
	p := Progress{Elapsed: time.Since(m.opened), Lost: make([]uint64, m.targets), Overhead: m.sofar()}
	for i := range m.targets {
		var perCPU []reqprofTargetStats
		if m.objs.Stats.Lookup(uint32(i), &perCPU) == nil {
			s := sumStats(perCPU)
			p.Lost[i] = s.LostRecords + s.LostThreads + s.LostConns + s.LostChunks
		}
	}
	return p
}

func (m *overheadMeter) keepStats() {
	if !m.supported {
		return
	}
	closer, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return
	}
	// The entry cost goes up with the statistics, before their first run.
	if m.setEntry(m.entryNsWithStats) != nil {
		closer.Close()
		return
	}
	ns, runs, ok := m.bpfTotals()
	if !ok {
		closer.Close()
		m.setEntry(m.entryNs)
		return
	}
	m.objs.TimingSelf.Set(uint32(1))
	m.stats, m.statsSince, m.ns0, m.runs0, m.finished0 = closer, time.Now(), ns, runs, m.finished()
}

func (m *overheadMeter) dropStats() {
	if m.stats == nil {
		return
	}
	ns, runs, ok := m.bpfTotals()
	finished := m.finished()
	if ok && ns >= m.ns0 && runs >= m.runs0 && finished >= m.finished0 {
		m.sampled += time.Since(m.statsSince)
		m.bpfNs += ns - m.ns0
		m.bpfRuns += runs - m.runs0
		m.sampledFinished += finished - m.finished0
	}
	m.objs.TimingSelf.Set(uint32(0))
	m.stats.Close()
	m.stats = nil
	m.setEntry(m.entryNs)
	m.updateRates()
}

// finished is how many requests the targets have finished so far, by the
// programs' count: those finished while the statistics are kept are what
// their run time is divided by, whatever the load did in the rest of the
// window.
func (m *overheadMeter) finished() uint64 {
	var sum uint64
	for i := range m.targets {
		var perCPU []reqprofTargetStats
		if m.objs.Stats.Lookup(uint32(i), &perCPU) == nil {
			sum += sumStats(perCPU).Finished
		}
	}
	return sum
}

func (m *overheadMeter) bpfTotals() (ns, runs uint64, ok bool) {
	for _, p := range m.progs {
		st, err := p.Stats()
		if err != nil {
			return 0, 0, false
		}
		ns += uint64(st.Runtime)
		runs += st.RunCount
	}
	return ns, runs, true
}

// close ends the measurement and says what it found: the programs' run
// time while the statistics were kept, and the requests finished meanwhile.
func (m *overheadMeter) close() profile.Overhead {
	m.dropStats()
	return m.sofar()
}

// sofar is what the window has cost up to now, the BPF figures from the
// statistics kept until the last sample ended.
func (m *overheadMeter) sofar() profile.Overhead {
	var o profile.Overhead
	if cpuNs, maxRSSKB := selfUsage(); cpuNs >= m.cpuNs0 {
		o.CollectorCPUNs = cpuNs - m.cpuNs0
		o.CollectorMaxRSSKB = maxRSSKB
	}
	switch {
	case !m.supported:
		o.BPFUnknown = "the kernel keeps no BPF statistics"
		return o
	case m.sampled <= 0:
		o.BPFUnknown = fmt.Sprintf("window too short: BPF statistics are first kept after %v", pollInterval)
		return o
	}
	o.Measured = true
	o.BPFNs, o.BPFRuns = m.bpfNs, m.bpfRuns
	if window := time.Since(m.opened); window > m.sampled {
		o.BPFSampled, o.BPFSampledRequests, o.BPFWindow = m.sampled, m.sampledFinished, window
	}
	return o
}

// selfUsage is this process's CPU (user + system) and peak resident memory.
func selfUsage() (cpuNs, maxRSSKB uint64) {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return uint64(ru.Utime.Nano() + ru.Stime.Nano()), uint64(ru.Maxrss)
}
