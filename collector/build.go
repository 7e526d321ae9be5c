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

// Mirrors of the enums in bpf/reqprof.bpf.c.
const (
	phaseIdle       = 0
	phaseReading    = 1
	phaseResponding = 2
	roleServer      = 1
)

// buildRun turns the BPF maps and the decoded records into profile types.
func buildRun(objs *reqprofObjects, procs []*process, names *routeNames, meta profile.Meta, startNs, endNs, malformed uint64) (profile.Run, error) {
	targets := make([]profile.Target, len(procs))
	for i, p := range procs {
		var perCPU []reqprofTargetStats
		if err := objs.Stats.Lookup(uint32(i), &perCPU); err != nil {
			return profile.Run{}, fmt.Errorf("reading counters of %d: %w", p.PID, err)
		}
		s := sumStats(perCPU)
		t := profile.Target{
			PID:                p.PID,
			Comm:               p.comm,
			Label:              p.Label,
			Threads:            int(s.ThreadsSeen),
			UnfinishedNs:       s.DroppedNs,
			UnfinishedRequests: int(s.DroppedRequests + s.StartUnseen),
			UnattributedNs:     s.UnattributedUserNs + s.UnattributedKernelNs,
			BetweenRequestsNs:  s.BetweenRequestsNs,
			RunqueueNs:         s.RunqueueNs,
			OffCPUNs:           s.OffcpuNs,
			LostEvents:         s.LostRecords + s.LostThreads + s.LostConns,
			LostBreakdown:      lostBreakdown(s),
			Exited:             p.exited,
			Goroutines:         p.goroutines,
		}
		if p.schedNsAt >= p.schedNs0 && len(p.members) == 0 && !p.followed(s) {
			t.SchedCPUNs = p.schedNsAt - p.schedNs0
		}
		targets[i] = t
	}
	// Records the collector could not decode are lost events of some
	// target; the first is as good as any to show them on.
	if malformed > 0 {
		targets[0].LostEvents += malformed
		if targets[0].LostBreakdown == nil {
			targets[0].LostBreakdown = map[string]uint64{}
		}
		targets[0].LostBreakdown["malformed"] = malformed
	}

	threads, err := readThreads(objs)
	if err != nil {
		return profile.Run{}, err
	}
	// What threads were charged for a connection and had not yet added to
	// it (they do so when they turn to another, or leave their CPU).
	pendingFor := map[uint64][]*reqprofThreadState{}
	for i := range threads {
		if st := &threads[i].state; st.Dirty != 0 {
			pendingFor[st.Conn] = append(pendingFor[st.Conn], st)
		}
	}

	// Connections open when the window closed. A request whose response
	// was being written is finished: the window's end ends it. One still
	// being read, or begun before the window, is unfinished: its CPU is
	// attributed but it is no request of the distribution.
	openConns := map[uint64]bool{}
	var cookie uint64
	var c reqprofConnState
	iter := objs.Conns.Iterate()
	for iter.Next(&cookie, &c) {
		r := &c.Rec
		if c.Role != roleServer || int(r.Target) >= len(targets) {
			continue
		}
		openConns[cookie] = true
		t := &targets[r.Target]
		for _, st := range pendingFor[cookie] {
			if st.InTail != 0 {
				mergeCost(&c.Tail, &st.Pending)
			} else {
				mergeCost(&r.Cost, &st.Pending)
				mergeWaits(&r.Cost, &st.Pending)
			}
		}
		// What the thread did after the response so far belongs to it.
		t.BetweenRequestsNs += cpuNs(&c.Tail)
		mergeCost(&r.Cost, &c.Tail)
		switch {
		case c.Phase == phaseResponding && r.Flags&recordStartUnseen == 0:
			req := requestOf(r)
			req.Conn = cookie
			req.Route = names.name(r.Payload[:min(int(r.PayloadLen), len(r.Payload))], r.LocalPort)
			procs[r.Target].finished.add(req)
			procs[r.Target].kernel.add(&r.Cost)
		case c.Phase != phaseIdle:
			t.UnfinishedRequests++
			t.UnfinishedNs += cpuNs(&r.Cost)
		default:
			t.UnfinishedNs += cpuNs(&r.Cost)
		}
	}
	if err := iter.Err(); err != nil {
		return profile.Run{}, fmt.Errorf("reading open connections: %w", err)
	}
	for i, p := range procs {
		targets[i].Finished = p.finished.totals
		targets[i].KernelBreakdown = p.kernel.breakdown()
		targets[i].RouteTotals = p.finished.byRoute
		targets[i].Requests = p.finished.sample.kept
	}

	// Time threads were still on a CPU, or held back inside a syscall, when
	// the window closed: no event was left to charge it.
	live := make([][]profile.UnattributedSource, len(targets))
	for _, th := range threads {
		st := &th.state
		if int(st.Target) >= len(targets) {
			continue
		}
		t := &targets[st.Target]
		unattributed := st.UnattributedNs
		if st.Dirty != 0 && !openConns[st.Conn] {
			unattributed += cpuNs(&st.Pending) // its connection closed
			t.UnattributedNs += cpuNs(&st.Pending)
		}
		if unattributed > 0 {
			live[st.Target] = append(live[st.Target], profile.UnattributedSource{TID: th.tid, Ns: unattributed})
		}

		pending := st.HeldNs
		if st.RunStartNs != 0 && st.RunStartNs < endNs {
			pending += endNs - st.RunStartNs
		}
		switch {
		case openConns[st.Conn]:
			t.UnfinishedNs += pending
		default:
			t.UnattributedNs += pending
		}

		// Debt is time charged beyond the kernel's accounting and not
		// yet paid back. Threads run into it at the end of a slice, most
		// often waiting outside any request, so it is taken from there.
		t.UnattributedNs -= min(st.DebtNs, t.UnattributedNs)
	}
	for i := range targets {
		targets[i].UnattributedSources = largestSources(live[i], targets[i].UnattributedNs)
	}
	return profile.Run{Duration: time.Duration(endNs - startNs), Targets: targets, Meta: meta}, nil
}

type threadEntry struct {
	tid   uint32
	state reqprofThreadState
}

// readThreads reads every thread's state. It lives in the tasks (task
// storage), which no key iterates over: a task iterator program writes each
// as its tid (8 bytes) and its state.
func readThreads(objs *reqprofObjects) ([]threadEntry, error) {
	it, err := link.AttachIter(link.IterOptions{Program: objs.DumpThreads})
	if err != nil {
		return nil, fmt.Errorf("reading threads: %w", err)
	}
	defer it.Close()
	r, err := it.Open()
	if err != nil {
		return nil, fmt.Errorf("reading threads: %w", err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading threads: %w", err)
	}
	threads, err := decodeThreads(b)
	if err != nil {
		return nil, fmt.Errorf("reading threads: %w", err)
	}
	return threads, nil
}

// decodeThreads decodes what the task iterator wrote.
func decodeThreads(b []byte) ([]threadEntry, error) {
	size := 8 + binary.Size(reqprofThreadState{})
	if len(b)%size != 0 {
		return nil, fmt.Errorf("%d bytes are no whole number of %d-byte entries", len(b), size)
	}
	threads := make([]threadEntry, len(b)/size)
	for i := range threads {
		entry := b[i*size : (i+1)*size]
		threads[i].tid = uint32(binary.NativeEndian.Uint64(entry))
		if _, err := binary.Decode(entry[8:], binary.NativeEndian, &threads[i].state); err != nil {
			return nil, err
		}
	}
	return threads, nil
}

// maxUnattributedSources is how many threads a report names.
const maxUnattributedSources = 3

// largestSources names the threads with the most unattributed CPU; what no
// live thread accounts for is the threads that exited in the window.
func largestSources(live []profile.UnattributedSource, total uint64) []profile.UnattributedSource {
	var sum uint64
	for _, src := range live {
		sum += src.Ns
	}
	if total > sum {
		live = append(live, profile.UnattributedSource{Comm: "(exited)", Ns: total - sum})
	}
	slices.SortFunc(live, func(a, b profile.UnattributedSource) int { return cmp.Compare(b.Ns, a.Ns) })
	live = live[:min(len(live), maxUnattributedSources)]
	for i := range live {
		if live[i].TID != 0 {
			live[i].Comm = threadComm(live[i].TID)
		}
	}
	return live
}

func lostBreakdown(s reqprofTargetStats) map[string]uint64 {
	lost := map[string]uint64{}
	for cause, n := range map[string]uint64{
		"ring_buffer": s.LostRecords, "thread_map_full": s.LostThreads, "conn_map_full": s.LostConns,
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

// mergeCost adds a tail's CPU to its request's, as settle_tail does in
// bpf/reqprof.bpf.c; the tail's waiting is for the next request.
func mergeCost(into, tail *reqprofCost) {
	into.UserNs += tail.UserNs
	into.SyscallNs += tail.SyscallNs
	into.IrqNs += tail.IrqNs
	into.PageFaults += tail.PageFaults
	into.OtherSyscallNs += tail.OtherSyscallNs
	into.OtherSyscallCalls += tail.OtherSyscallCalls
	for i := range into.SoftirqNs {
		into.SoftirqNs[i] += tail.SoftirqNs[i]
	}
next:
	for _, slot := range tail.Syscalls {
		if slot.Nr == 0 {
			continue
		}
		for i := range into.Syscalls {
			if into.Syscalls[i].Nr == slot.Nr || into.Syscalls[i].Nr == 0 {
				into.Syscalls[i].Nr = slot.Nr
				into.Syscalls[i].Ns += slot.Ns
				into.Syscalls[i].Calls += slot.Calls
				continue next
			}
		}
		into.OtherSyscallNs += slot.Ns
		into.OtherSyscallCalls += slot.Calls
	}
}

// mergeWaits adds what mergeCost leaves out: a tail's waiting is no part of
// the request it follows, but a request's own is.
func mergeWaits(into, from *reqprofCost) {
	into.RunqueueNs += from.RunqueueNs
	into.OffcpuNs += from.OffcpuNs
	into.VoluntarySwitches += from.VoluntarySwitches
	into.InvoluntarySwitches += from.InvoluntarySwitches
}

// followed says whether processes joined the target in the window.
func (p *process) followed(s reqprofTargetStats) bool { return s.ChildrenFollowed > 0 }

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
	}
	return sum
}
