package collector

import (
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
	other.Role = reqprofConnRoleROLE_OTHER
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
	if len(got.UnattributedSources) == 0 || got.UnattributedSources[0].Ns != 455 || got.UnattributedSources[0].Comm != "(exited)" {
		t.Errorf("unattributed sources %+v: want the exited threads' 455 ns first", got.UnattributedSources)
	}
	if got.LostEvents != 3 || got.LostBreakdown["malformed"] != 2 || got.LostBreakdown["ring_buffer"] != 1 {
		t.Errorf("lost %d %v, want 3: 1 ring buffer, 2 malformed", got.LostEvents, got.LostBreakdown)
	}
	if got.SchedCPUNs != 800 || got.Threads != 3 || got.BetweenRequestsNs != 40 || got.Label != "srv" {
		t.Errorf("target %+v", got)
	}
}
