package collector

import (
	"testing"
	"time"

	"github.com/reqprof/reqprof/collector/stream"
	"github.com/reqprof/reqprof/profile"
)

func call(name, id string) stream.Request {
	return stream.Request{Name: name, Protocol: stream.JSONRPC, ID: stream.IDKey([]byte(id)), HasID: true}
}

// written holds a write of response msg at off, taken when the burst
// (started at start) had cost cpuNs so far.
func written(b *bursts, start time.Duration, off uint64, msg string, cpuNs uint64, at time.Duration) uint64 {
	head := []byte(msg)[:min(len(msg), int(reqprofLimitsRESPONSE_HEAD))] // as the programs capture it
	d := decodedRecord{streamOff: off, payload: head,
		request: profile.Request{Conn: 1, Start: start, End: at, UserNs: cpuNs, BytesOut: uint64(len(msg))}}
	b.response(&d)
	return off + uint64(len(msg))
}

func resp(id string) string { return `{"jsonrpc":"2.0","id":` + id + `,"result":{}}` + "\n" }

func byRoute(done []profile.Request) map[string]profile.Request {
	m := map[string]profile.Request{}
	for _, r := range done {
		m[r.Route] = r
	}
	return m
}

func identity(s string) string { return s }

// Two calls read together, answered in reverse order: each takes the CPU
// up to its own response, and ends at it.
func TestAnsweredInReverseOrder(t *testing.T) {
	b := newBursts(nil)
	var off uint64
	off = written(b, 100, off, resp("2"), 300, 400) // the fast one, first
	off = written(b, 100, off, resp("1"), 1300, 1500)
	f := b.conns[1]
	burst := profile.Request{Conn: 1, Start: 100, End: 1500, UserNs: 1350, TailNs: 40, TailSelfNs: 4}
	done, unmatched := f.answers.burst(burst, []stream.Request{call("tools/call slow", "1"), call("tools/call fast", "2")}, nil, identity)
	if len(unmatched) != 0 || len(done) != 2 {
		t.Fatalf("done %v, unmatched %v", done, unmatched)
	}
	got := byRoute(done)
	fast, slow := got["tools/call fast"], got["tools/call slow"]
	if fast.CPUNs() != 300 || fast.End != 400 || fast.Start != 100 {
		t.Errorf("fast: %d ns, %v..%v; want 300 ns, 100..400", fast.CPUNs(), fast.Start, fast.End)
	}
	// The tail after the last response (50 ns) goes with it; of that,
	// the burst's tail (40 ns) came after its last byte, which the 10 ns
	// of the write's own end did not.
	if slow.CPUNs() != 1050 || slow.End != 1500 {
		t.Errorf("slow: %d ns, ends %v; want 1050 ns at 1500", slow.CPUNs(), slow.End)
	}
	if slow.TailNs != 40 || slow.TailSelfNs != 4 || fast.TailNs != 0 {
		t.Errorf("tails: slow %d ns (own cost %d), fast %d ns; want 40 (4) and 0", slow.TailNs, slow.TailSelfNs, fast.TailNs)
	}
}

// A slow call read first stays in flight over a burst that answers a fast
// one read later; a server notification's piece goes to the next response.
func TestSlowAnsweredAfterFast(t *testing.T) {
	b := newBursts(nil)
	var off uint64
	// Burst 1 reads the slow call; its first write is a progress notification.
	off = written(b, 100, off, `{"jsonrpc":"2.0","method":"notifications/progress","params":{}}`+"\n", 20, 150)
	f := b.conns[1]
	done, _ := f.answers.burst(profile.Request{Conn: 1, Start: 100, End: 150, UserNs: 30}, []stream.Request{call("slow", `"s"`)}, nil, identity)
	if len(done) != 0 {
		t.Fatalf("burst 1 ended %v", done)
	}
	// Burst 2 reads the fast call and answers it.
	off = written(b, 200, off, resp("7"), 100, 300)
	done, _ = f.answers.burst(profile.Request{Conn: 1, Start: 200, End: 300, UserNs: 100}, []stream.Request{call("fast", "7")}, nil, identity)
	if len(done) != 1 || done[0].Route != "fast" || done[0].CPUNs() != 130 {
		t.Fatalf("burst 2: %+v, want fast with 130 ns (30 carried)", done)
	}
	// Burst 3 reads nothing new and answers the slow call.
	written(b, 400, off, resp(`"s"`), 500, 900)
	done, _ = f.answers.burst(profile.Request{Conn: 1, Start: 400, End: 900, UserNs: 500}, nil, nil, identity)
	if len(done) != 1 || done[0].Route != "slow" || done[0].CPUNs() != 500 || done[0].Start != 100 || done[0].End != 900 {
		t.Fatalf("burst 3: %+v, want slow with 500 ns, 100..900", done)
	}
	if len(f.answers.calls) != 0 || f.answers.inFlightNs() != 0 {
		t.Errorf("left in flight: %v, %d ns", f.answers.calls, f.answers.inFlightNs())
	}
}

// A response whose id is not among the bytes seen ends every call in flight
// at its burst, counted.
func TestUnreadResponseFallsBack(t *testing.T) {
	b := newBursts(nil)
	long := `{"jsonrpc":"2.0","result":{"text":"` + string(make([]byte, 300)) + `"},"id":1}` + "\n"
	written(b, 100, 0, long, 400, 500)
	f := b.conns[1]
	done, unmatched := f.answers.burst(profile.Request{Conn: 1, Start: 100, End: 500, UserNs: 400}, []stream.Request{call("a", "1"), call("b", "2")}, nil, identity)
	if len(done) != 2 || unmatched[unmatchedResponse] != 2 || done[0].CPUNs()+done[1].CPUNs() != 400 {
		t.Fatalf("done %+v, unmatched %v", done, unmatched)
	}
}

// marked holds a read mark: a read of the burst started at start begins at
// input offset off, when the burst had cost cpuNs so far.
func marked(b *bursts, start time.Duration, off uint64, cpuNs uint64, at time.Duration) {
	d := decodedRecord{streamOff: off, request: profile.Request{Conn: 1, Start: start, End: at, UserNs: cpuNs}}
	b.readMark(&d)
}

// A slow call read and set aside, then a light one read in the same burst
// and answered first: what ran up to the second read is the slow call's,
// not the light one's, which takes only what ran from its read to its
// response.
func TestSetAsideCallKeepsItsReading(t *testing.T) {
	b := newBursts(nil)
	slowLine := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}` + "\n"
	marked(b, 100, uint64(len(slowLine)), 40, 200) // the slow call read, parsed, set aside: 40 ns
	var off uint64
	off = written(b, 100, off, resp("2"), 140, 300) // the light one: 100 ns from its read
	written(b, 100, off, resp("1"), 640, 900)       // the slow one, later: 500 ns
	f := b.conns[1]
	done, unmatched := f.answers.burst(profile.Request{Conn: 1, Start: 100, End: 950, UserNs: 650},
		[]stream.Request{call("slow", "1"), call("light", "2")}, []int{1}, identity)
	if len(unmatched) != 0 || len(done) != 2 {
		t.Fatalf("done %v, unmatched %v", done, unmatched)
	}
	got := byRoute(done)
	if light := got["light"]; light.CPUNs() != 100 {
		t.Errorf("light: %d ns, want 100 (from its read to its response)", light.CPUNs())
	}
	// 40 before the light call's read, 500 to its response, 10 of tail.
	if slow := got["slow"]; slow.CPUNs() != 550 {
		t.Errorf("slow: %d ns, want 550", slow.CPUNs())
	}
	if f.answers.inFlightNs() != 0 {
		t.Errorf("%d ns left in flight", f.answers.inFlightNs())
	}
}

// A read mark before any call is complete (a call read in two pieces)
// sets nothing aside: its piece goes to the response that follows.
func TestReadMarkInsideACall(t *testing.T) {
	b := newBursts(nil)
	marked(b, 100, 10, 30, 150)
	written(b, 100, 0, resp("1"), 130, 300)
	f := b.conns[1]
	done, _ := f.answers.burst(profile.Request{Conn: 1, Start: 100, End: 300, UserNs: 130},
		[]stream.Request{call("a", "1")}, []int{0}, identity)
	if len(done) != 1 || done[0].CPUNs() != 130 {
		t.Fatalf("done %+v, want a with 130 ns", done)
	}
}

// A burst's bytes are fed up to each read mark first: the calls complete
// before the mark are counted, whatever of the next call came before it.
func TestReadMarksCountCallsReadBefore(t *testing.T) {
	b := newBursts(nil)
	slow := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}` + "\n"
	light := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"light"}}` + "\n"
	third := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"light"}}` + "\n"
	in := slow + light + third
	start := time.Duration(100)
	marked(b, start, uint64(len(slow)), 40, 200)         // light's read
	marked(b, start, uint64(len(slow+light)+5), 60, 250) // a read in the third call
	d := decodedRecord{streamOff: 0, payload: []byte(in), flags: uint32(reqprofRecordFlagsREQ_STDIO),
		request: profile.Request{Conn: 1, Start: start, End: 300, UserNs: 90}}
	s, _ := b.burst(&d)
	if len(s.requests) != 3 || len(s.readBefore) != 2 || s.readBefore[0] != 1 || s.readBefore[1] != 2 {
		t.Fatalf("%d requests, read before the marks %v; want 3 and [1 2]", len(s.requests), s.readBefore)
	}
}
