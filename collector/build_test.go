package collector

import (
	"reflect"
	"slices"
	"testing"

	"github.com/reqprof/reqprof/profile"
)

// serverConn is an open served connection of target 0 in phase, whose
// request cost userNs of user time.
func serverConn(phase reqprofConnPhase, userNs uint64, payload string) *reqprofConnState {
	c := &reqprofConnState{Phase: phase, Role: reqprofConnRoleROLE_SERVER}
	c.Rec.Cost.UserNs = userNs
	c.Rec.StartNs, c.Rec.EndNs = 1000, 5000
	c.Rec.LocalPort = 8080
	c.Rec.PayloadLen = uint16(copy(c.Rec.Payload[:], payload))
	return c
}

// What the BPF side holds at the window's end, as plain values, becomes
// finished and unfinished requests and unattributed CPU by the rules the
// collector keeps: the charging itself was done in BPF.
func TestRunBuilderClassifiesTheWindowsEnd(t *testing.T) {
	procs := []*process{{Target: Target{PID: 10, Label: "srv"}, comm: "srv", schedNs0: 100, schedNsAt: 900}}
	res := newConsumeResult(1)
	stats := []reqprofTargetStats{{
		ThreadsSeen: 3, DroppedNs: 50, DroppedRequests: 1, StartUnseen: 2,
		UnattributedUserNs: 300, UnattributedKernelNs: 200, BetweenRequestsNs: 40, LostRecords: 1,
	}}
	res.malformed = 2
	b := newRunBuilder(procs, res, stats)

	b.addOpenConn(1, serverConn(reqprofConnPhasePHASE_RESPONDING, 700, "GET /users/42 HTTP/1.1\r\n\r\n"))
	b.addOpenConn(2, serverConn(reqprofConnPhasePHASE_READING, 30, ""))
	b.addOpenConn(3, serverConn(reqprofConnPhasePHASE_IDLE, 20, ""))
	unseen := serverConn(reqprofConnPhasePHASE_RESPONDING, 10, "")
	unseen.Rec.Flags = uint32(reqprofRecordFlagsREQ_START_UNSEEN)
	b.addOpenConn(4, unseen)
	other := serverConn(reqprofConnPhasePHASE_RESPONDING, 999, "")
	other.Role = reqprofConnRoleROLE_OUTBOUND
	b.addOpenConn(5, other)
	outOfRange := serverConn(reqprofConnPhasePHASE_RESPONDING, 999, "")
	outOfRange.Rec.Target = 7
	b.addOpenConn(6, outOfRange)

	var onOpen, onClosed, noConn threadEntry
	onOpen.state.Serving.Conn = 2
	onOpen.state.Clock.RunStartNs = 9_000 // on a CPU when the window closed at 10,000
	onOpen.state.Clock.HeldNs = 5
	onClosed.state.Serving.Conn = 99
	onClosed.state.Clock.HeldNs = 60
	onClosed.state.Serving.UnattributedNs = 80
	noConn.state.Clock.DebtNs = 25
	b.addThreads([]threadEntry{onOpen, onClosed, noConn}, 10_000)

	run := b.run(profile.Meta{Host: "h"}, 2_000, 10_000)
	if len(run.Targets) != 1 || run.Duration != 8_000 || run.Meta.Host != "h" {
		t.Fatalf("run %+v", run)
	}
	got := run.Targets[0]
	if got.Finished.Requests != 1 || got.Finished.UserNs != 700 || len(got.Requests) != 1 {
		t.Fatalf("finished %+v, requests %+v: want the responding connection's request alone", got.Finished, got.Requests)
	}
	if r := got.Requests[0]; r.Route != "GET /users/{id}" || r.Conn != 1 || r.Port != 8080 {
		t.Errorf("finished request %+v: want GET /users/{id} on connection 1, port 8080", r)
	}
	// Dropped before the window's end (50), the reading and idle
	// connections (30 + 20), the one begun before the window (10), and the
	// thread still on a CPU for the reading connection (1,000 + 5).
	if want := uint64(50 + 30 + 20 + 10 + 1005); got.UnfinishedNs != want {
		t.Errorf("unfinished %d ns, want %d", got.UnfinishedNs, want)
	}
	// 1 dropped + 2 begun before the window, by the counters, the reading
	// connection and the one answering a request begun before the window;
	// an idle connection has no request.
	if got.UnfinishedRequests != 5 {
		t.Errorf("unfinished requests %d, want 5", got.UnfinishedRequests)
	}
	// The counters' 500, the held time of the thread whose connection
	// closed (60), less the debt still owed (25).
	if want := uint64(500 + 60 - 25); got.UnattributedNs != want {
		t.Errorf("unattributed %d ns, want %d", got.UnattributedNs, want)
	}
	// The thread whose connection closed had 80 ns of its own and the 60
	// it held (with no names to read, it is named as exited); the rest of
	// the counters' went to threads gone since.
	wantSources := []profile.UnattributedSource{
		{Comm: profile.ExitedThreads, Ns: 535 - 140, Threads: 1},
		{Comm: profile.ExitedThreads, Ns: 140, Threads: 1},
	}
	if !reflect.DeepEqual(got.UnattributedSources, wantSources) {
		t.Errorf("unattributed sources %+v, want %+v", got.UnattributedSources, wantSources)
	}
	if got.LostEvents != 3 || got.LostBreakdown["malformed"] != 2 || got.LostBreakdown["ring_buffer"] != 1 {
		t.Errorf("lost %d %v, want 3: 1 ring buffer, 2 malformed", got.LostEvents, got.LostBreakdown)
	}
	if got.SchedCPUNs != 800 || got.Threads != 3 || got.BetweenRequestsNs != 40 || got.Label != "srv" {
		t.Errorf("target %+v", got)
	}
}

// Each thread's unattributed CPU is named by the thread, read under its
// process at the window's end: a thread gone by then is named as exited,
// and what no thread still alive accounts for went to the threads that
// exited in the window, as many as were seen and are no longer there.
func TestRunBuilderNamesUnattributedSources(t *testing.T) {
	procs := []*process{{Target: Target{PID: 10}, comm: "srv"}, {Target: Target{PID: 20}, comm: "idle"}}
	stats := []reqprofTargetStats{{ThreadsSeen: 6, UnattributedUserNs: 900, UnattributedKernelNs: 100}, {ThreadsSeen: 1}}
	b := newRunBuilder(procs, newConsumeResult(2), stats)
	names := map[[2]uint32]string{{10, 11}: "worker", {10, 12}: "worker", {10, 13}: "gc"}
	var asked [][2]uint32
	b.threadName = func(tgid, tid uint32) (string, bool) {
		asked = append(asked, [2]uint32{tgid, tid})
		name, ok := names[[2]uint32{tgid, tid}]
		return name, ok
	}
	thread := func(tid, unattributedNs, debtNs uint64) threadEntry {
		th := threadEntry{tid: uint32(tid), tgid: 10}
		th.state.Serving.UnattributedNs = unattributedNs
		th.state.Clock.DebtNs = debtNs
		return th
	}
	running := thread(12, 200, 0)
	running.state.Clock.RunStartNs = 9_950 // on a CPU, serving nothing, when the window closed
	b.addThreads([]threadEntry{
		thread(11, 300, 0), running, thread(13, 100, 40),
		thread(14, 50, 0), // exited since the iterator saw it
		thread(15, 0, 0),  // no unattributed CPU: not named
	}, 10_000)
	got := b.run(profile.Meta{}, 0, 10_000).Targets

	// 1,000 ns counted, 50 more still running, 40 owed: 1,010, of which
	// living threads account for 300 + 250 + 60 + 50.
	if got[0].UnattributedNs != 1_010 {
		t.Fatalf("unattributed %d ns, want 1,010", got[0].UnattributedNs)
	}
	want := []profile.UnattributedSource{
		{Comm: profile.ExitedThreads, Ns: 350, Threads: 1},
		{TID: 11, Comm: "worker", Ns: 300, Threads: 1},
		{TID: 12, Comm: "worker", Ns: 250, Threads: 1},
		{TID: 13, Comm: "gc", Ns: 60, Threads: 1},
		{TID: 14, Comm: profile.ExitedThreads, Ns: 50, Threads: 1},
	}
	if !reflect.DeepEqual(got[0].UnattributedSources, want) {
		t.Errorf("sources %+v\nwant %+v", got[0].UnattributedSources, want)
	}
	if got[1].UnattributedSources != nil {
		t.Errorf("a target without unattributed CPU has sources %+v", got[1].UnattributedSources)
	}
	if len(asked) != 4 || asked[0] != [2]uint32{10, 11} {
		t.Errorf("names asked for %v: want the four threads with unattributed CPU, by their process and tid", asked)
	}
}

// Sources add up to the target's unattributed CPU: threads that exited
// have what the living do not account for, as many threads as exited;
// debt taken from the target beyond a thread's own is taken from the
// largest sources.
func TestUnattributedSourcesAddUp(t *testing.T) {
	live := []profile.UnattributedSource{{TID: 2, Comm: "b", Ns: 10, Threads: 1}, {TID: 1, Comm: "a", Ns: 30, Threads: 1}}
	got := unattributedSources(slices.Clone(live), 100, 3)
	want := []profile.UnattributedSource{{Comm: profile.ExitedThreads, Ns: 60, Threads: 3}, live[1], live[0]}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sources %+v, want %+v", got, want)
	}
	got = unattributedSources(slices.Clone(live), 35, 0)
	want = []profile.UnattributedSource{{TID: 1, Comm: "a", Ns: 25, Threads: 1}, {TID: 2, Comm: "b", Ns: 10, Threads: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sources over a smaller total %+v, want %+v", got, want)
	}
	if got := unattributedSources(slices.Clone(live), 0, 0); got != nil {
		t.Errorf("sources of no unattributed CPU: %+v", got)
	}
}
