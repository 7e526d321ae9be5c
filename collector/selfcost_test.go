package collector

import (
	"math"
	"testing"

	"github.com/reqprof/reqprof/profile"
)

// testRates: entering a run costs 20 ns; a sys_enter run 50, a sys_exit
// 70, a socket operation's 200, a switch's 300, a wake-up's 100, an
// interrupt hook's 40, a page fault's 30.
func testRates() *selfRates {
	r := &selfRates{entryNs: 20}
	r.runNs[reqprofSelfKindSELF_SYS_ENTER] = 50
	r.runNs[reqprofSelfKindSELF_SYS_EXIT] = 70
	r.runNs[reqprofSelfKindSELF_SOCK] = 200
	r.runNs[reqprofSelfKindSELF_SWITCH] = 300
	r.runNs[reqprofSelfKindSELF_WAKE] = 100
	r.runNs[reqprofSelfKindSELF_INTERRUPT] = 40
	r.runNs[reqprofSelfKindSELF_FAULT] = 30
	return r
}

func testCost() *reqprofCost {
	var c reqprofCost
	c.Syscalls[0] = reqprofSyscallSlot{Nr: 45 + 1, Calls: 2, Ns: 3000} // recvfrom
	c.Syscalls[1] = reqprofSyscallSlot{Nr: 20 + 1, Calls: 1, Ns: 2000} // writev
	c.OtherSyscallCalls, c.OtherSyscallNs = 1, 500
	c.SyscallNs = 5500
	c.UserNs = 4000
	c.SoftirqNs[3] = 900 // NET_RX
	c.IrqNs = 100
	c.SockOps = 3
	c.Wakeups = 1
	c.VoluntarySwitches = 1
	c.InvoluntarySwitches = 1
	c.PageFaults = 2
	c.Interrupts = 1
	return &c
}

func TestSelfSplitCountsEachRunAtItsCost(t *testing.T) {
	split := testRates().splitOf(testCost())
	// 4 syscalls × (70 + 90), 3 socket operations × 220, a wake-up 120,
	// a voluntary switch 320.
	if want := 4.0*160 + 3*220 + 120 + 320; split.syscallNs != want {
		t.Errorf("in syscalls %v ns, want %v", split.syscallNs, want)
	}
	// 2 faults × 50, an involuntary switch 320.
	if want := 2.0*50 + 320; split.userNs != want {
		t.Errorf("in user time %v ns, want %v", split.userNs, want)
	}
	// One interrupt: its entry's and exit's hooks, 60 each.
	if want := 120.0; split.interruptNs != want {
		t.Errorf("in interrupts %v ns, want %v", split.interruptNs, want)
	}
}

func TestNetTakesOwnCostOutOfEachPart(t *testing.T) {
	c := testCost()
	r := requestOf(&reqprofRequestRecord{Cost: *c})
	self := newSelfCost(false)
	self.rates.Store(testRates())
	took := self.net(&r, c, nil)
	if r.SelfNs != 1740+420+120 {
		t.Errorf("SelfNs %d, want %d", r.SelfNs, 1740+420+120)
	}
	if r.SyscallNs != 5500-1740 || r.UserNs != 4000-420 {
		t.Errorf("syscall %d user %d, want %d and %d", r.SyscallNs, r.UserNs, 5500-1740, 4000-420)
	}
	if r.SoftirqNs != 900-120 || r.IrqNs != 100 {
		t.Errorf("softirq %d irq %d: the interrupts' part comes off softirq time first", r.SoftirqNs, r.IrqNs)
	}
	if r.KernelNs != r.SyscallNs+r.SoftirqNs+r.IrqNs {
		t.Errorf("kernel %d is not its parts' sum", r.KernelNs)
	}
	if took.syscallNs != 1740 || took.interruptNs != 120 {
		t.Errorf("took %+v", took)
	}
}

// The tail's own runs are costed as the whole's, switches aside (a tail
// passes none to its request), and come out of the tail: what is left is
// part of the net CPU, as the tail was part of the gross.
func TestNetTakesTheTailsOwnCostOutOfIt(t *testing.T) {
	c := testCost()
	// Of the request's runs, its tail had a syscall, a socket operation
	// and a fault: 160 + 220 + 50 ns.
	tail := reqprofTailCost{CpuNs: 3000, Syscalls: 1, SockOps: 1, PageFaults: 1}
	for _, gross := range []bool{false, true} {
		r := requestOf(&reqprofRequestRecord{Cost: *c, Tail: tail})
		self := newSelfCost(gross)
		self.rates.Store(testRates())
		self.net(&r, c, &tail)
		wantTail := uint64(3000 - 430)
		if gross {
			wantTail = 3000
		}
		if r.TailSelfNs != 430 || r.TailNs != wantTail {
			t.Errorf("gross %v: tail %d ns, its own cost %d; want %d and 430", gross, r.TailNs, r.TailSelfNs, wantTail)
		}
	}
	// A tail that says more than its request had stays within it.
	tail.CpuNs = 1 << 40
	r := requestOf(&reqprofRequestRecord{Cost: *c, Tail: tail})
	self := newSelfCost(false)
	self.rates.Store(testRates())
	self.net(&r, c, &tail)
	if r.TailNs > r.CPUNs() || r.TailSelfNs > r.SelfNs {
		t.Errorf("tail %d ns of %d, own cost %d of %d: more than the whole", r.TailNs, r.CPUNs(), r.TailSelfNs, r.SelfNs)
	}
}

func TestNetNeverGoesBelowZero(t *testing.T) {
	c := testCost()
	c.SyscallNs, c.UserNs, c.SoftirqNs[3], c.IrqNs = 100, 10, 50, 30
	r := requestOf(&reqprofRequestRecord{Cost: *c})
	self := newSelfCost(false)
	self.rates.Store(testRates())
	took := self.net(&r, c, nil)
	if r.CPUNs() != 0 {
		t.Errorf("net CPU %d, want 0: more own cost than time", r.CPUNs())
	}
	if took.syscallNs != 100 || took.interruptNs != 80 {
		t.Errorf("took %+v, want all there was", took)
	}
}

func TestGrossKeepsTheFiguresAndStatesTheCost(t *testing.T) {
	c := testCost()
	r := requestOf(&reqprofRequestRecord{Cost: *c})
	before := r
	self := newSelfCost(true)
	self.rates.Store(testRates())
	if took := self.net(&r, c, nil); took != (taken{}) {
		t.Errorf("gross took %+v", took)
	}
	before.SelfNs = 2280
	if r != before {
		t.Errorf("gross changed the request: %+v, want %+v", r, before)
	}
}

func TestBreakdownRowsLoseWhatWasTaken(t *testing.T) {
	c := testCost()
	r := requestOf(&reqprofRequestRecord{Cost: *c})
	self := newSelfCost(false)
	self.rates.Store(testRates())
	var tally kernelTally
	tally.add(c, self.net(&r, c, nil))
	var syscalls, interrupts uint64
	for cause, cost := range tally.breakdown() {
		if cause.Kind == profile.CauseSyscall {
			syscalls += cost.Ns
		} else {
			interrupts += cost.Ns
		}
	}
	if syscalls != r.SyscallNs || interrupts != r.SoftirqNs+r.IrqNs {
		t.Errorf("rows sum to %d in syscalls and %d in interrupts, the request's net %d and %d",
			syscalls, interrupts, r.SyscallNs, r.SoftirqNs+r.IrqNs)
	}
}

func TestTotalCountsEveryRunOfTheThreads(t *testing.T) {
	runs := reqprofSelfRuns{Syscalls: 10, SockOps: 2, Switches: 3, Wakeups: 1, Interrupts: 1, Faults: 4}
	want := 10.0*160 + 2*220 + 3*320 + 120 + 2*60 + 4*50
	if got := testRates().totalOf(runs); got != want {
		t.Errorf("total %v ns, want %v", got, want)
	}
}

func TestScaleDownKeepsProportionsAndSum(t *testing.T) {
	a, b, c := uint64(600), uint64(300), uint64(100)
	scaleDown([]*uint64{&a, &b, &c}, 500)
	if a+b+c != 500 || a != 300 || b != 150 || c != 50 {
		t.Errorf("rows %d %d %d after taking 500 of 1000", a, b, c)
	}
	scaleDown([]*uint64{&a, &b, &c}, 10000)
	if a+b+c != 0 {
		t.Errorf("rows %d %d %d after taking more than there was", a, b, c)
	}
}

// The statistics are kept one poll in ten until the samples have seen
// enough requests finish, then five in fifty: never more than a tenth of
// any stretch, turned on and off a fifth as often once the rates are known.
func TestStatsSampleCadence(t *testing.T) {
	const polls = 1000
	var kept [polls + 1]bool
	turned := 0
	var seen uint64
	schedule, sampling := newStatsSchedule(), false
	for poll := 1; poll <= polls; poll++ {
		// As overheadMeter.poll does.
		switch {
		case sampling:
			if schedule.ends(poll) {
				sampling = false
				schedule.ended(poll, seen)
			}
		case schedule.begins(poll):
			sampling = true
			turned++
		}
		if sampling {
			kept[poll] = true
			seen += 1000 // requests finished a poll while kept
		}
	}
	if !kept[1] || kept[2] || !kept[11] {
		t.Errorf("first samples: polls 1, 2, 11 kept %v %v %v, want the first and the eleventh", kept[1], kept[2], kept[11])
	}
	most := 0
	for start := 1; start+50 <= polls+1; start++ {
		n := 0
		for _, k := range kept[start : start+50] {
			if k {
				n++
			}
		}
		most = max(most, n)
	}
	if most > 5 {
		t.Errorf("kept %d polls in some 50, want at most 5", most)
	}
	// 10 samples of one poll see 10,000 requests (by poll 91), then one
	// every 50 polls from poll 137.
	if want := 10 + (polls-137)/50 + 1; turned != want {
		t.Errorf("turned on %d times in %d polls, want %d", turned, polls, want)
	}
}

// The spread of the whole's own cost: the entry cost's standard error
// once for every run entered (a pool probe's trap is calibrated apart),
// and the standard error of what each sample's rates make of the runs.
func TestSpreadAddsEntryAndSampleErrors(t *testing.T) {
	r := testRates()
	r.entrySpreadNs = 2
	runs := reqprofSelfRuns{Syscalls: 10, SockOps: 5, Interrupts: 1, PoolProbes: 3}
	// Entered: 10 sys_enter + 10 sys_exit + 5 socket + 2 interrupt hooks.
	if got, samples := r.spreadOf(runs); math.Abs(got-27*2) > 1e-9 || samples != 0 {
		t.Errorf("with no samples: spread %v over %d samples, want %v over 0", got, samples, 27*2.0)
	}
	// Two samples whose rates differ only in the socket run: 200 and 240.
	a, b := r.runNs, r.runNs
	a[reqprofSelfKindSELF_SOCK], b[reqprofSelfKindSELF_SOCK] = 200, 240
	r.sampleRunNs = [][selfKinds]float64{a, b}
	// Totals 5*200 and 5*240 apart by 200: standard deviation 141.42,
	// standard error 100; with the entry's 54 in quadrature.
	want := math.Sqrt(54*54 + 100*100)
	if got, samples := r.spreadOf(runs); math.Abs(got-want) > 1e-9 || samples != 2 {
		t.Errorf("spread %v over %d samples, want %v over 2", got, samples, want)
	}
}

// What entering a program costs is half a syscall's rise, with the
// standard error of the two means behind it.
func TestEntryPerRunFromMeans(t *testing.T) {
	ns, spread := entryPerRun([]float64{300, 310, 290}, []float64{400, 420, 380})
	if ns != 50 {
		t.Errorf("entry %v ns, want 50", ns)
	}
	// Bare: sd 10, se 10/√3; attached: sd 20, se 20/√3; half their sum in quadrature.
	want := math.Sqrt(100.0/3+400.0/3) / 2
	if math.Abs(spread-want) > 1e-9 {
		t.Errorf("spread %v ns, want %v", spread, want)
	}
	if ns, _ := entryPerRun([]float64{400}, []float64{390}); ns != 0 {
		t.Errorf("attached cheaper than bare: entry %v ns, want 0", ns)
	}
}
