package collector

import (
	"time"

	"github.com/reqprof/reqprof/collector/stream"
	"github.com/reqprof/reqprof/profile"
)

// On a stdio channel the programs also send a record at each write: its
// first bytes, and the cost of the burst so far (RECORD_RESPONSE). A
// JSON-RPC call then ends at the response that carries its id, not at the
// server's next write, so that calls answered out of order, or a slow call
// answered after a fast one read later, each end at their own response.
//
// The CPU of a burst is cut at its writes into pieces: a piece, the CPU from
// the previous response to this write, is the work of the responses the
// write carries (shared among them when it carries several); a write that
// answers no call in flight (a notification of the server's, a log line)
// passes its piece on to the next response. What follows the last response
// of a burst (the server's loop, up to its next read) goes with it, as a
// tail goes with the request it follows. This is exact for a server that
// works on one call at a time in any order; for one that works on calls in
// parallel threads, a piece holds what the others did meanwhile.
//
// A call read and set aside (one that waits on another service) keeps what
// the server spent on it before it read more: the programs also send a
// mark at each read that goes on with a burst (RECORD_READ_MARK), with
// the cost up to that read, and the piece up to a mark is shared by the
// calls read before it and not answered yet (none: it waits for the next
// response, as before). A call answered first then takes its own reading
// and parsing, not those of a call read before it.
//
// Where a response cannot be matched (its id not among the bytes seen, a
// write lost), the calls in flight end at that burst, as a direction
// change would end them, and are counted with why.

// maxCallsInFlight bounds the calls kept waiting for their response on
// one channel; past it the oldest ends where it is, counted as not matched.
const maxCallsInFlight = 4096

// unmatchedReason is why calls were ended by a burst rather than by their
// response.
const (
	unmatchedResponse = "JSON-RPC response whose id was not read"
	unmatchedBound    = "over a bound"
	unmatchedNoID     = "JSON-RPC call without an id read"
)

// answering is what the collector keeps of a stdio channel's responses.
type answering struct {
	out   stream.Responses
	marks []heldMark // of the burst whose record has not come
	ids   []uint64   // the ids the writes carry, by heldMark.from/to
	calls []inFlight // read, not answered yet, in the order read
	carry profile.Request
	// sequence numbers the calls as read: the calls read before a mark
	// are those numbered below a bound.
	sequence uint64
}

// heldMark is a write's response record, or a read mark, held until its
// burst's record comes.
type heldMark struct {
	start, end time.Duration // the burst's start; the write's or read's
	cost       profile.Request
	// A read mark: inOff is where the read starts in the input.
	read  bool
	inOff uint64
	// A write: its length, and its ids in answering.ids.
	length   uint64
	from, to int
	unread   bool
}

type inFlight struct {
	id       uint64
	route    string
	protocol string
	start    time.Duration
	seq      uint64
	own      profile.Request // pieces up to read marks after it
}

// readMark holds a read mark until its burst's record comes.
func (b *bursts) readMark(d *decodedRecord) {
	f := b.follow(d.request.Conn)
	f.target = d.target
	if f.answers == nil {
		f.answers = &answering{}
	}
	f.answers.marks = append(f.answers.marks, heldMark{start: d.request.Start, end: d.request.End,
		cost: d.request, read: true, inOff: d.streamOff})
}

// readOffsets appends to dst where the reads marked in the burst started
// at start begin, in the order read.
func (a *answering) readOffsets(dst []uint64, start time.Duration) []uint64 {
	for _, m := range a.marks {
		if m.read && m.start == start {
			dst = append(dst, m.inOff)
		}
	}
	return dst
}

// response holds a write's record until its burst's record comes.
func (b *bursts) response(d *decodedRecord) {
	f := b.follow(d.request.Conn)
	f.target = d.target
	if f.answers == nil {
		f.answers = &answering{}
	}
	a := f.answers
	from := len(a.ids)
	var unread bool
	a.ids, unread = a.out.Write(d.streamOff, d.request.BytesOut, d.payload, a.ids)
	a.marks = append(a.marks, heldMark{
		start: d.request.Start, end: d.request.End, cost: d.request, length: d.request.BytesOut,
		from: from, to: len(a.ids), unread: unread,
	})
}

// inFlightNs is the CPU of pieces waiting for a response: part of no
// finished request.
func (a *answering) inFlightNs() uint64 {
	ns := a.carry.CPUNs()
	for _, c := range a.calls {
		ns += c.own.CPUNs()
	}
	return ns
}

// matchByID ends the calls a stdio burst answered, by id; false when the
// burst is not one of them (not JSON-RPC, or its bytes not followed), for
// the burst model to count.
func (res *consumeResult) matchByID(d *decodedRecord, s split, f *followed) bool {
	if channelName(d.flags) != "stdio" || s.fallback != "" || s.protocol != stream.JSONRPC {
		return false
	}
	if f.carrying { // from before the channel's responses were followed
		f.answers.carry = plusCost(f.answers.carry, f.carry)
		f.carry, f.carrying = profile.Request{}, false
	}
	res.messages[d.target] += uint64(s.messages)
	done, unmatched := f.answers.burst(d.request, s.requests, s.readBefore, res.names.intern)
	res.routes = res.routes[:0]
	for _, r := range done {
		res.finish(d.target, r)
		res.routes = append(res.routes, profile.RouteKey{Route: r.Route, Port: d.localPort})
	}
	for why, n := range unmatched {
		for range n {
			res.countPerBurst(d.target, why)
		}
	}
	if res.stacks != nil && len(res.routes) > 0 {
		res.stacks.finished(d.request.Conn, uint64(d.request.Start), res.routes, false)
	}
	return true
}

// burst takes a burst's record r (its whole cost), the calls read in it
// and, for each of its read marks, how many of them were read before it;
// it returns the calls answered in it, each with its share of the pieces,
// and how many were ended otherwise, by why.
func (a *answering) burst(r profile.Request, requests []stream.Request, readBefore []int, intern func(string) string) (done []profile.Request, unmatched map[string]int) {
	count := func(why string) {
		if unmatched == nil {
			unmatched = map[string]int{}
		}
		unmatched[why]++
	}
	noID := false
	firstSeq := a.sequence // of this burst's first call
	for _, q := range requests {
		if !q.HasID {
			noID = true
		}
		a.calls = append(a.calls, inFlight{id: q.ID, route: localName(q.Name, "stdio"), protocol: q.Protocol.String(),
			start: r.Start, seq: a.sequence})
		a.sequence++
	}
	reads := 0
	template := r
	var prev profile.Request
	var written uint64
	last := -1 // where the calls the burst's last response ended start in done
	unread := noID
	for _, w := range a.marks {
		if w.start != r.Start {
			continue // of a burst whose record never came
		}
		// Each figure only grows: a snapshot holds at least the one before
		// and at most the whole burst. One that says otherwise (a
		// malformed record) is brought within, so that the pieces add up
		// to the burst's cost and no more.
		w.cost = costWithin(w.cost, prev, r)
		piece := costDiff(w.cost, prev)
		prev = w.cost
		if w.read {
			read := 0
			if reads < len(readBefore) {
				read = readBefore[reads]
			}
			reads++
			a.setAside(piece, firstSeq+uint64(read))
			continue
		}
		piece.BytesOut = w.length
		written += w.length
		a.carry = plusCost(a.carry, piece)
		first := len(done)
		for _, id := range a.ids[w.from:w.to] {
			for i, c := range a.calls {
				if c.id == id {
					done = append(done, plusCost(a.ended(template, c, w.end), c.own))
					a.calls = append(a.calls[:i], a.calls[i+1:]...)
					break
				}
			}
		}
		if n := len(done) - first; n > 0 {
			for i := range n {
				done[first+i] = plusCost(done[first+i], share(a.carry, n, i == 0))
			}
			a.carry, last = profile.Request{}, first
		}
		unread = unread || w.unread
	}
	a.marks, a.ids = a.marks[:0], a.ids[:0]
	tail := costDiff(r, prev)
	tail.BytesOut = r.BytesOut - min(r.BytesOut, written)
	if last >= 0 {
		// The burst's tail, after its last write, is after these calls'
		// response: theirs, as a tail is its request's.
		tail.TailNs, tail.TailSelfNs = min(r.TailNs, tail.CPUNs()), r.TailSelfNs
		n := len(done) - last
		for i := range n {
			part := share(tail, n, i == 0)
			done[last+i] = plusCost(done[last+i], part)
			done[last+i].TailNs += part.TailNs
			done[last+i].TailSelfNs += part.TailSelfNs
		}
	} else {
		// Carried to the call answered next: within its latency.
		a.carry = plusCost(a.carry, tail)
	}
	over := max(0, len(a.calls)-maxCallsInFlight)
	if unread || over > 0 {
		// Calls that may have been answered unseen end here, as the burst
		// model ends them, sharing what waits for a response.
		ending := a.calls[:over]
		why := unmatchedBound
		if unread {
			ending, why = a.calls, unmatchedResponse
			if noID {
				why = unmatchedNoID
			}
		}
		for i, c := range ending {
			one := plusCost(a.ended(template, c, r.End), c.own)
			done = append(done, plusCost(one, share(a.carry, len(ending), i == 0)))
			count(why)
		}
		if len(ending) > 0 {
			a.carry = profile.Request{}
		}
		a.calls = a.calls[:copy(a.calls, a.calls[len(ending):])]
	}
	for i := range done {
		done[i].Route = intern(done[i].Route)
	}
	return done, unmatched
}

// setAside shares piece, what ran up to a read mark, among the calls in
// flight numbered below readBefore (read before the mark); with none, it
// waits for the next response.
func (a *answering) setAside(piece profile.Request, readBefore uint64) {
	n := 0
	for _, c := range a.calls {
		if c.seq < readBefore {
			n++
		}
	}
	if n == 0 {
		a.carry = plusCost(a.carry, piece)
		return
	}
	i := 0
	for k := range a.calls {
		if a.calls[k].seq < readBefore {
			a.calls[k].own = plusCost(a.calls[k].own, share(piece, n, i == 0))
			i++
		}
	}
}

// ended is call c as a request answered at end, its identity from the
// burst's record, its cost still to be given.
func (a *answering) ended(template profile.Request, c inFlight, end time.Duration) profile.Request {
	r := zeroCost(template)
	r.Route, r.Protocol = c.route, c.protocol
	r.Start, r.FirstWrite, r.End = c.start, end, end
	if r.End < r.Start {
		r.End, r.FirstWrite = r.Start, r.Start
	}
	return r
}

// zeroCost is r's identity and times, without its costs.
func zeroCost(r profile.Request) profile.Request {
	return profile.Request{TID: r.TID, Conn: r.Conn, Route: r.Route, Protocol: r.Protocol, Port: r.Port,
		Start: r.Start, FirstWrite: r.FirstWrite, End: r.End}
}

// plusCost is a with b's costs added; a's identity and times are kept.
func plusCost(a, b profile.Request) profile.Request {
	a.UserNs += b.UserNs
	a.SyscallNs += b.SyscallNs
	a.SoftirqNs += b.SoftirqNs
	a.IrqNs += b.IrqNs
	a.KernelNs = a.SyscallNs + a.SoftirqNs + a.IrqNs
	a.RunqueueNs += b.RunqueueNs
	a.OffCPUNs += b.OffCPUNs
	a.PageFaults += b.PageFaults
	a.VoluntarySwitches += b.VoluntarySwitches
	a.InvoluntarySwitches += b.InvoluntarySwitches
	a.BytesIn += b.BytesIn
	a.BytesOut += b.BytesOut
	return a
}

// costWithin is a's costs, each brought within lo's and hi's (lo's where
// they cross); a's identity is kept.
func costWithin(a, lo, hi profile.Request) profile.Request {
	in := func(v, l, h uint64) uint64 { return max(l, min(v, h)) }
	in32 := func(v, l, h uint32) uint32 { return max(l, min(v, h)) }
	a.UserNs = in(a.UserNs, lo.UserNs, hi.UserNs)
	a.SyscallNs = in(a.SyscallNs, lo.SyscallNs, hi.SyscallNs)
	a.SoftirqNs = in(a.SoftirqNs, lo.SoftirqNs, hi.SoftirqNs)
	a.IrqNs = in(a.IrqNs, lo.IrqNs, hi.IrqNs)
	a.KernelNs = a.SyscallNs + a.SoftirqNs + a.IrqNs
	a.RunqueueNs = in(a.RunqueueNs, lo.RunqueueNs, hi.RunqueueNs)
	a.OffCPUNs = in(a.OffCPUNs, lo.OffCPUNs, hi.OffCPUNs)
	a.PageFaults = in32(a.PageFaults, lo.PageFaults, hi.PageFaults)
	a.VoluntarySwitches = in32(a.VoluntarySwitches, lo.VoluntarySwitches, hi.VoluntarySwitches)
	a.InvoluntarySwitches = in32(a.InvoluntarySwitches, lo.InvoluntarySwitches, hi.InvoluntarySwitches)
	a.BytesIn = in(a.BytesIn, lo.BytesIn, hi.BytesIn)
	return a
}

// costDiff is the cost of a beyond b, a later snapshot of the same burst
// (each figure only grows; one read while another CPU added is clamped).
func costDiff(a, b profile.Request) profile.Request {
	d := func(x, y uint64) uint64 { return x - min(x, y) }
	d32 := func(x, y uint32) uint32 { return x - min(x, y) }
	var r profile.Request
	r.UserNs = d(a.UserNs, b.UserNs)
	r.SyscallNs = d(a.SyscallNs, b.SyscallNs)
	r.SoftirqNs = d(a.SoftirqNs, b.SoftirqNs)
	r.IrqNs = d(a.IrqNs, b.IrqNs)
	r.KernelNs = r.SyscallNs + r.SoftirqNs + r.IrqNs
	r.RunqueueNs = d(a.RunqueueNs, b.RunqueueNs)
	r.OffCPUNs = d(a.OffCPUNs, b.OffCPUNs)
	r.PageFaults = d32(a.PageFaults, b.PageFaults)
	r.VoluntarySwitches = d32(a.VoluntarySwitches, b.VoluntarySwitches)
	r.InvoluntarySwitches = d32(a.InvoluntarySwitches, b.InvoluntarySwitches)
	r.BytesIn = d(a.BytesIn, b.BytesIn)
	return r
}
