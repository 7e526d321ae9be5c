package collector

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/reqprof/reqprof/profile"
)

// buildRun reads what the BPF side holds when the window closes, once the
// settle iterators have run, and turns it into profile values with the
// records the collector consumed.
func buildRun(objs *bpfObjects, procs []*process, res consumeResult, meta profile.Meta, startNs, endNs uint64, self *selfRates, gross bool) (profile.Run, error) {
	threads, err := settle(objs)
	if err != nil {
		return profile.Run{}, err
	}
	stats := make([]reqprofTargetStats, len(procs))
	for i, p := range procs {
		var perCPU []reqprofTargetStats
		if err := objs.Stats.Lookup(uint32(i), &perCPU); err != nil {
			return profile.Run{}, fmt.Errorf("reading counters of %d: %w", p.PID, err)
		}
		stats[i] = sumStats(perCPU)
	}
	b := newRunBuilder(procs, res, stats)
	b.threadName = threadName
	b.selfRates, b.gross = self, gross
	var cookie uint64
	var c reqprofConnState
	iter := objs.Conns.Iterate()
	for iter.Next(&cookie, &c) {
		b.addOpenConn(cookie, &c)
	}
	if err := iter.Err(); err != nil {
		return profile.Run{}, fmt.Errorf("reading open connections: %w", err)
	}
	var sk uint64
	var setup reqprofSetupState
	setups := objs.Setups.Iterate()
	for setups.Next(&sk, &setup) {
		b.addOpenSetup(sk, &setup)
	}
	if err := setups.Err(); err != nil {
		return profile.Run{}, fmt.Errorf("reading connections' setups: %w", err)
	}
	b.addThreads(threads, endNs)
	if res.stacks != nil {
		// After addOpenConn: the requests it finishes take their samples.
		b.stacks = res.stacks.result(stats)
	}
	return b.run(meta, startNs, endNs), nil
}

// settle runs the settle iterators of bpf/reqprof.bpf.c, so that what
// threads and connections' tails still hold reaches its destination by the
// programs' own rules, and returns each thread's state as settled. Threads
// go first: a thread in a tail adds to it.
func settle(objs *bpfObjects) ([]threadEntry, error) {
	b, err := runIter(link.IterOptions{Program: objs.SettleThreads})
	if err != nil {
		return nil, fmt.Errorf("settling threads: %w", err)
	}
	threads, err := decodeThreads(b)
	if err != nil {
		return nil, fmt.Errorf("reading threads: %w", err)
	}
	if _, err := runIter(link.IterOptions{Program: objs.SettleConns}); err != nil {
		return nil, fmt.Errorf("settling connections: %w", err)
	}
	return threads, nil
}

// runIter runs an iterator program once and returns what it wrote.
func runIter(opts link.IterOptions) ([]byte, error) {
	it, err := link.AttachIter(opts)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	r, err := it.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// runBuilder turns what the BPF side holds at the window's end, as plain
// values, into profile values: the charging is done by then, and what is
// left is to say which request, finished or not, or which thread, each
// nanosecond belongs to. No BPF is needed to test it.
type runBuilder struct {
	procs   []*process
	res     *consumeResult
	targets []profile.Target
	// open are the served connections open when the window closed.
	open map[uint64]bool
	// openSetups are the setups of accepted connections open when the
	// window closed, by socket address.
	openSetups map[uint64]bool
	// threadName is the name of thread tid of process tgid at the window's
	// end, and false once it is gone; buildRun reads it from /proc.
	threadName func(tgid, tid uint32) (string, bool)
	// stacks are each target's stack samples, with Config.Stacks.
	stacks []*profile.Stacks
	// selfRuns are the runs of reqprof's programs on each target's
	// threads; selfRates what a run costs; gross, Config.Gross. With no
	// rates, no own cost is stated (a run built without BPF).
	selfRuns  []reqprofSelfRuns
	selfRates *selfRates
	gross     bool
}

// newRunBuilder starts from the targets' counters, summed over CPUs, and
// the records consumed.
func newRunBuilder(procs []*process, res consumeResult, stats []reqprofTargetStats) *runBuilder {
	b := &runBuilder{procs: procs, res: &res, targets: make([]profile.Target, len(procs)), open: map[uint64]bool{}, openSetups: map[uint64]bool{}}
	b.selfRuns = make([]reqprofSelfRuns, len(procs))
	for i, p := range procs {
		p.finished, p.kernel = res.finished[i], &res.kernel[i]
		b.targets[i] = targetOf(p, stats[i])
		b.selfRuns[i] = stats[i].ExitedSelf
	}
	if res.droppedChunks > 0 {
		t := &b.targets[0]
		if t.LostBreakdown == nil {
			t.LostBreakdown = map[string]uint64{}
		}
		t.LostEvents += res.droppedChunks
		t.LostBreakdown["chunks_held_over_bound"] = res.droppedChunks
	}
	// Records the collector could not decode are lost events of some
	// target; the first is as good as any to show them on.
	if res.malformed > 0 {
		t := &b.targets[0]
		t.LostEvents += res.malformed
		if t.LostBreakdown == nil {
			t.LostBreakdown = map[string]uint64{}
		}
		t.LostBreakdown["malformed"] = res.malformed
	}
	return b
}

// targetOf is a target as its counters describe it.
func targetOf(p *process, s reqprofTargetStats) profile.Target {
	t := profile.Target{
		PID:                p.PID,
		Comm:               p.comm,
		Label:              p.Label,
		Threads:            int(s.ThreadsSeen),
		UnfinishedNs:       s.DroppedNs,
		UnfinishedRequests: int(s.DroppedRequests + s.StartUnseen),
		UnattributedNs:     s.UnattributedUserNs + s.UnattributedKernelNs + unclaimedPoolNs(s),
		BetweenRequestsNs:  s.BetweenRequestsNs,
		RunqueueNs:         s.RunqueueNs,
		OffCPUNs:           s.OffcpuNs,
		UnseenSwitchIns:    s.UnseenSwitchIns,
		StolenNs:           s.StolenNs,
		LostEvents:         s.LostRecords + s.LostThreads + s.LostConns + s.LostChunks,
		LostBreakdown:      lostBreakdown(s),
		Exited:             p.exited,
		Execd:              p.execd,
		ExecdAfter:         p.execdAfter,
		Goroutines:         p.goroutines,
		Pool:               p.pool,
		PoolJobs:           s.PoolJobsQueued,
		PoolJobsDone:       s.PoolJobsDone,
		PoolNs:             s.PoolNs,
		PoolJobsUnseen:     s.PoolJobsUnseen,
		Runtime:            p.runtime,
		RuntimeFrom:        p.runtimeFrom,
		Role:               p.role,
		RoleFrom:           p.roleFrom,
	}
	if p.schedNsAt >= p.schedNs0 && len(p.members) == 0 && s.ChildrenFollowed == 0 {
		t.SchedCPUNs = p.schedNsAt - p.schedNs0
	}
	return t
}

// unclaimedPoolNs is the CPU of pool jobs held for a request named later
// that none claimed (bpf/pyjobs.h): no request's.
func unclaimedPoolNs(s reqprofTargetStats) uint64 {
	if s.PoolHeldNs < s.PoolClaimedNs {
		return 0 // claimed while held on another CPU: the sums cross
	}
	return s.PoolHeldNs - s.PoolClaimedNs
}

// addOpenConn counts a connection open when the window closed, its tail
// settled. A request whose response was being written is finished: the
// window's end ends it. One still being read, or begun before the window,
// is unfinished: its CPU is attributed but it is no request of the
// distribution.
func (b *runBuilder) addOpenConn(cookie uint64, c *reqprofConnState) {
	r := &c.Rec
	if c.Role != reqprofConnRoleROLE_SERVER || int(r.Target) >= len(b.targets) {
		return
	}
	b.open[cookie] = true
	t := &b.targets[r.Target]
	switch {
	case c.Phase == reqprofConnPhasePHASE_RESPONDING && r.Flags&uint32(reqprofRecordFlagsREQ_START_UNSEEN) == 0:
		// As if emitted now: split into the requests it carried.
		d := decodedOf(r, r.Payload[:min(int(r.PayloadLen), len(r.Payload))])
		d.request.Conn = cookie
		b.res.add(d)
	case c.Phase != reqprofConnPhasePHASE_IDLE:
		t.UnfinishedRequests++
		t.UnfinishedNs += cpuNs(&r.Cost)
	default:
		t.UnfinishedNs += cpuNs(&r.Cost)
	}
}

// addOpenSetup counts the setup of a connection accepted and open when
// the window closed (settled: what its connection's requests took of it
// is gone from it): one that no request had read from yet. Its CPU is
// attributed, but to no finished request.
func (b *runBuilder) addOpenSetup(sk uint64, s *reqprofSetupState) {
	if int(s.Target) >= len(b.targets) {
		return
	}
	b.openSetups[sk] = true
	b.targets[s.Target].UnfinishedNs += cpuNs(&s.Cost)
}

// addThreads counts the time threads were still on a CPU, or held back
// inside a syscall, when the window closed at endNs: no event was left to
// charge it. It goes to the request of the thread's connection if that is
// open, else it is unattributed. Each thread's unattributed CPU is named by
// the thread.
func (b *runBuilder) addThreads(threads []threadEntry, endNs uint64) {
	live := make([][]profile.UnattributedSource, len(b.targets))
	alive := make([]int, len(b.targets)) // threads of each target that had not exited
	for _, th := range threads {
		st := &th.state
		if int(st.Target) >= len(b.targets) {
			continue
		}
		t := &b.targets[st.Target]
		alive[st.Target]++
		addRuns(&b.selfRuns[st.Target], st.Self)
		own := st.Serving.UnattributedNs
		running := st.Clock.HeldNs
		if st.Clock.RunStartNs != 0 && st.Clock.RunStartNs < endNs {
			running += endNs - st.Clock.RunStartNs
		}
		if b.open[st.Serving.Conn] || b.openSetups[st.Serving.SetupSk] {
			t.UnfinishedNs += running
		} else {
			t.UnattributedNs += running
			own += running
		}
		// Debt is time charged beyond the kernel's accounting and not
		// yet paid back. Threads run into it at the end of a slice, most
		// often waiting outside any request, so it is taken from there:
		// from the thread's own unattributed CPU first.
		t.UnattributedNs -= min(st.Clock.DebtNs, t.UnattributedNs)
		own -= min(st.Clock.DebtNs, own)
		if own > 0 {
			live[st.Target] = append(live[st.Target], profile.UnattributedSource{TID: th.tid, Comm: b.name(th), Ns: own, Threads: 1})
		}
	}
	for i := range b.targets {
		t := &b.targets[i]
		t.UnattributedSources = unattributedSources(live[i], t.UnattributedNs, t.Threads-alive[i])
	}
}

// name is th's name at the window's end, or profile.ExitedThreads when it
// has exited since the iterator saw it.
func (b *runBuilder) name(th threadEntry) string {
	if b.threadName != nil {
		if name, ok := b.threadName(th.tgid, th.tid); ok {
			return name
		}
	}
	return profile.ExitedThreads
}

// run is the window's result, every finished request counted.
func (b *runBuilder) run(meta profile.Meta, startNs, endNs uint64) profile.Run {
	carried := b.res.carried()
	for i, p := range b.procs {
		t := &b.targets[i]
		// Bursts whose request had not completed when the window closed.
		t.UnfinishedNs += carried[i]
		if len(b.res.perBurst[i]) > 0 {
			t.PerBurst = b.res.perBurst[i]
		}
		t.Notifications = b.res.messages[i]
		if b.stacks != nil {
			t.Stacks = b.stacks[i]
		}
		t.Finished = p.finished.totals
		t.KernelBreakdown = p.kernel.breakdown()
		t.RouteTotals = p.finished.routeTotals()
		t.Requests = p.finished.sample.kept
		if b.selfRates != nil {
			spread, samples := b.selfRates.spreadOf(b.selfRuns[i])
			t.SelfCost = profile.SelfCost{Measured: true, Kept: b.gross, TotalNs: roundNs(b.selfRates.totalOf(b.selfRuns[i])),
				SpreadNs: roundNs(spread), TimingSamples: samples}
		}
		t.Backends = b.res.backends.of(i)
	}
	return profile.Run{Duration: time.Duration(endNs - startNs), Targets: b.targets, Meta: meta}
}

type threadEntry struct {
	tid, tgid uint32
	state     reqprofThreadState
}

// decodeThreads decodes what settle_threads wrote: each thread as its ids
// (8 bytes: its tid in the low half, its process's tgid in the high) and
// its state.
func decodeThreads(b []byte) ([]threadEntry, error) {
	size := 8 + binary.Size(reqprofThreadState{})
	if len(b)%size != 0 {
		return nil, fmt.Errorf("%d bytes are no whole number of %d-byte entries", len(b), size)
	}
	threads := make([]threadEntry, len(b)/size)
	for i := range threads {
		entry := b[i*size : (i+1)*size]
		ids := binary.NativeEndian.Uint64(entry)
		threads[i].tid, threads[i].tgid = uint32(ids), uint32(ids>>32)
		if _, err := binary.Decode(entry[8:], binary.NativeEndian, &threads[i].state); err != nil {
			return nil, err
		}
	}
	return threads, nil
}

// unattributedSources are a target's unattributed CPU, total, by thread:
// live, each thread that had some, named; what they do not account for
// went to threads that exited in the window (exited of them), and is one
// source. Largest first, ties by name and tid; they add up to total.
func unattributedSources(live []profile.UnattributedSource, total uint64, exited int) []profile.UnattributedSource {
	var sum uint64
	for _, src := range live {
		sum += src.Ns
	}
	sortSources := func() {
		slices.SortFunc(live, func(a, b profile.UnattributedSource) int {
			return cmp.Or(cmp.Compare(b.Ns, a.Ns), cmp.Compare(a.Comm, b.Comm), cmp.Compare(a.TID, b.TID))
		})
	}
	sortSources()
	switch {
	case total > sum:
		live = append(live, profile.UnattributedSource{Comm: profile.ExitedThreads, Ns: total - sum, Threads: max(1, exited)})
		sortSources()
	case sum > total:
		// Debt a thread owed beyond its own unattributed CPU was taken
		// from the target's: take it from the largest sources too.
		excess := sum - total
		for i := range live {
			taken := min(excess, live[i].Ns)
			live[i].Ns -= taken
			excess -= taken
		}
		live = slices.DeleteFunc(live, func(src profile.UnattributedSource) bool { return src.Ns == 0 })
		sortSources()
	}
	if len(live) == 0 {
		return nil
	}
	return live
}

func lostBreakdown(s reqprofTargetStats) map[string]uint64 {
	lost := map[string]uint64{}
	for cause, n := range map[string]uint64{
		"ring_buffer": s.LostRecords, "thread_map_full": s.LostThreads, "conn_map_full": s.LostConns,
		"chunks_ring_buffer": s.LostChunks,
	} {
		if n > 0 {
			lost[cause] = n
		}
	}
	if len(lost) == 0 {
		return nil
	}
	return lost
}

func sumStats(perCPU []reqprofTargetStats) reqprofTargetStats {
	var sum reqprofTargetStats
	for _, s := range perCPU {
		sum.UnattributedUserNs += s.UnattributedUserNs
		sum.UnattributedKernelNs += s.UnattributedKernelNs
		sum.DroppedNs += s.DroppedNs
		sum.DroppedRequests += s.DroppedRequests
		sum.LostRecords += s.LostRecords
		sum.LostThreads += s.LostThreads
		sum.LostConns += s.LostConns
		sum.ThreadsSeen += s.ThreadsSeen
		sum.StartUnseen += s.StartUnseen
		sum.BetweenRequestsNs += s.BetweenRequestsNs
		sum.ChildrenFollowed += s.ChildrenFollowed
		sum.RunqueueNs += s.RunqueueNs
		sum.OffcpuNs += s.OffcpuNs
		sum.Finished += s.Finished
		sum.LostChunks += s.LostChunks
		sum.LostStackSamples += s.LostStackSamples
		sum.StackSamples += s.StackSamples
		addRuns(&sum.ExitedSelf, s.ExitedSelf)
		sum.SetupNs += s.SetupNs
		sum.UnseenSwitchIns += s.UnseenSwitchIns
		sum.StolenNs += s.StolenNs
		sum.PoolJobsQueued += s.PoolJobsQueued
		sum.PoolJobsDone += s.PoolJobsDone
		sum.PoolNs += s.PoolNs
		sum.PoolHeldNs += s.PoolHeldNs
		sum.PoolClaimedNs += s.PoolClaimedNs
		sum.PoolJobsUnseen += s.PoolJobsUnseen
	}
	return sum
}
