package collector

import (
	"errors"
	"math"

	"github.com/reqprof/reqprof/collector/stream"
	"github.com/reqprof/reqprof/profile"
)

// The programs send one record per burst of a connection: from the first
// bytes read after a response to the last bytes written before the next
// read. A burst may carry several requests (HTTP/1.1 and Redis pipelining,
// a JSON-RPC batch, HTTP/2 streams) or part of one. bursts turns records
// into the requests they carried: a burst's bytes (its payload and the
// chunks sent before it) go through the connection's stream.Conn, and the
// burst's cost is shared out equally among the requests whose head it
// completed. A burst that completed none (an HTTP/2 WINDOW_UPDATE, the
// first half of a request) passes its cost on to the next one that does.
//
// Where the bytes cannot be followed (TLS, an unknown protocol, HTTP/2
// joined after its connection opened, a malformed frame), each burst is
// one request, as the programs counted it, and the target counts how many
// were counted that way and why.

// maxFollowedConns bounds the connections whose stream state the
// collector keeps between bursts; past it the least recently used is let go
// (its next burst then starts a stream of its own, or is counted as one).
const maxFollowedConns = 16384

// maxHeldChunkBytes bounds the bytes of chunks held for one connection
// while its burst's record has not arrived; past it chunks are dropped,
// leaving a gap the stream parser skips where it can.
const maxHeldChunkBytes = 256 << 10

// followed is what the collector keeps of one connection between bursts.
type followed struct {
	conn   *stream.Conn
	chunks []heldChunk // of the burst whose record has not arrived yet
	held   int         // their bytes
	// carry is the cost of bursts that completed no request, for the
	// next that does.
	carry    profile.Request
	carrying bool
	target   uint32
	used     uint64 // for letting the least recently used go
	// failed says why its bytes cannot be followed, once they could not:
	// its bursts count one request each from then on.
	failed string
	// answers follows a stdio channel's responses, to end each JSON-RPC
	// call at the response with its id (responses.go).
	answers *answering
}

type heldChunk struct {
	offset uint64
	data   []byte
}

// bursts follows connections' streams for one run.
type bursts struct {
	conns map[uint64]*followed
	clock uint64
	names func([]byte) string // interns a request's name
	found []stream.Request    // reused
	// requests backs a split's requests, reused: a split is read before
	// the next burst is parsed.
	requests []stream.Request
	scratch  *stream.Conn // parses a burst of a connection not followed
	// reads and readBefore back the read marks of a burst, reused.
	reads      []uint64
	readBefore []int
}

func newBursts(names func([]byte) string) *bursts {
	return &bursts{conns: map[uint64]*followed{}, names: names}
}

// chunk holds bytes sent ahead of their burst's record.
func (b *bursts) chunk(conn, offset uint64, data []byte) (dropped bool) {
	f := b.follow(conn)
	if f == nil || f.held+len(data) > maxHeldChunkBytes {
		return true
	}
	f.chunks = append(f.chunks, heldChunk{offset: offset, data: append([]byte(nil), data...)})
	f.held += len(data)
	return false
}

// closed lets a connection go.
func (b *bursts) closed(conn uint64) { delete(b.conns, conn) }

// follow is conn's state, made if need be.
func (b *bursts) follow(conn uint64) *followed {
	b.clock++
	if f, ok := b.conns[conn]; ok {
		f.used = b.clock
		return f
	}
	if len(b.conns) >= maxFollowedConns {
		b.evict()
	}
	f := &followed{used: b.clock}
	b.conns[conn] = f
	return f
}

// evict lets the less recently used half of the connections go, so that
// its walk of the map is paid once per maxFollowedConns/2 new connections,
// not for each: a server with a connection per request brings thousands a
// second.
func (b *bursts) evict() {
	threshold := b.clock - min(b.clock, maxFollowedConns/2)
	for k, f := range b.conns {
		if f.used < threshold {
			delete(b.conns, k)
		}
	}
	for k := range b.conns {
		if len(b.conns) < maxFollowedConns {
			break
		}
		delete(b.conns, k) // all were recent: any will do
	}
}

// split is what one burst carried.
type split struct {
	requests []stream.Request // with at least one, the burst's cost is shared among them
	// messages that are no requests: JSON-RPC notifications and the
	// client's responses, which get no answer.
	messages int
	carried  bool // none completed: its cost waits for the next burst's
	// fallback, when the stream cannot be followed: the burst is one
	// request, named from its payload, and why.
	fallback string
	protocol stream.Protocol
	// For each read marked in the burst (a stdio channel's), how many of
	// requests were complete before it.
	readBefore []int
}

// burst splits one burst record of a connection, and returns the state
// kept of the connection, if any.
func (b *bursts) burst(d *decodedRecord) (split, *followed) {
	f := b.conns[d.request.Conn]
	chunked := d.flags&uint32(reqprofRecordFlagsREQ_CHUNKED) != 0
	if len(d.payload) == 0 {
		// Read into a buffer the programs never saw (the read began
		// before the window): one request, as counted, whatever later
		// reads of the burst sent as chunks (php-fpm reads a request a
		// record at a time, the first read blocked at attach on a
		// connection nginx keeps). The stream starts again where the next
		// burst does.
		if f != nil {
			f.conn, f.chunks, f.held = nil, nil, 0
		}
		return split{fallback: "bytes not captured (a read begun before attach)"}, f
	}
	if f == nil && !chunked {
		// The common case: a connection with nothing held, a burst whose
		// bytes all came in its payload, which starts a message. Parsed
		// with a scratch Conn, kept only if the stream has state to carry
		// into the next burst.
		if b.scratch == nil {
			b.scratch = stream.NewConnAt(d.localPort, d.streamOff)
		} else {
			b.scratch.Reset(d.localPort, d.streamOff)
		}
		s := b.parse(b.scratch, d, nil, nil)
		switch {
		case s.fallback != "":
			f = b.follow(d.request.Conn)
			f.failed, f.target = s.fallback, d.target
		case b.scratch.Pending() || b.scratch.Protocol() == stream.H2:
			f = b.follow(d.request.Conn)
			f.conn, f.target = b.scratch, d.target
			b.scratch = nil
		}
		return s, f
	}
	if f == nil {
		// Its chunks were dropped at the bound.
		f = b.follow(d.request.Conn)
	}
	f.used, f.target = b.clock, d.target
	chunks := f.chunks
	f.chunks, f.held = nil, 0
	if f.failed != "" {
		return split{fallback: f.failed}, f
	}
	if f.conn == nil {
		f.conn = stream.NewConnAt(d.localPort, d.streamOff)
	}
	var reads []uint64
	if f.answers != nil {
		reads = f.answers.readOffsets(b.reads[:0], d.request.Start)
		b.reads = reads
	}
	s := b.parse(f.conn, d, chunks, reads)
	if err := f.conn.Err(); err != nil {
		// Kept for its reason, not its bytes.
		f.failed, f.conn = fallbackReason(err, d.streamOff), nil
	}
	return s, f
}

// parse feeds conn a burst's bytes: its payload, then its chunks. Bytes
// the programs read but did not send leave a gap that the next burst's
// offset shows. reads are where the reads marked in the burst start, in
// order: the bytes before each are fed first, to count the requests
// complete before it.
func (b *bursts) parse(conn *stream.Conn, d *decodedRecord, chunks []heldChunk, reads []uint64) split {
	s := split{requests: b.requests[:0], readBefore: b.readBefore[:0]}
	b.found = b.found[:0]
	taken := 0 // of b.found, sorted into s
	take := func() {
		b.found = conn.RequestsFunc(b.found, b.names)
		for _, r := range b.found[taken:] {
			if r.Protocol == stream.JSONRPC && (r.Notification || r.Response) {
				s.messages++
				continue
			}
			s.requests = append(s.requests, r)
		}
		taken = len(b.found)
	}
	for _, at := range reads {
		feedBefore(conn, d, chunks, at)
		take()
		s.readBefore = append(s.readBefore, len(s.requests))
	}
	feedBefore(conn, d, chunks, math.MaxUint64)
	if conn.Protocol() == stream.FastCGI {
		// A FastCGI server answers a request only once its params have
		// ended, so a burst never ends inside them unless bytes it read
		// were not sent (params past the capture and chunks): the gap is
		// taken now, breaking the Conn, and the burst counts as one
		// request, named from its first bytes, rather than passing its
		// CPU on to a next burst that a connection closed after its one
		// request never has.
		sent := d.request.BytesIn
		if d.flags&uint32(reqprofRecordFlagsREQ_CLIENT) != 0 {
			sent = d.request.BytesOut // a client's call: the bytes it wrote
		}
		conn.Skip(d.streamOff + sent)
	}
	take()
	s.protocol = conn.Protocol()
	b.requests, b.readBefore = s.requests, s.readBefore
	switch {
	case len(s.requests) > 0:
		// Complete before any break: the next burst falls back.
	case conn.Err() != nil:
		s.fallback = fallbackReason(conn.Err(), d.streamOff)
	default:
		s.carried = true
	}
	return s
}

// feedBefore feeds conn the burst's bytes (its payload, then its chunks)
// that lie before offset limit; bytes fed already are passed over by Feed.
func feedBefore(conn *stream.Conn, d *decodedRecord, chunks []heldChunk, limit uint64) {
	feed := func(off uint64, data []byte) {
		if off >= limit {
			return
		}
		if uint64(len(data)) > limit-off {
			data = data[:limit-off]
		}
		conn.Feed(off, data)
	}
	feed(d.streamOff, d.payload)
	for _, c := range chunks {
		if c.offset < d.streamOff {
			continue // of a burst whose record never came (it began before the window)
		}
		feed(c.offset, c.data)
	}
}

// fallbackReason says, in a few words a report can group by, why a
// connection's bytes could not be followed.
func fallbackReason(err error, streamOff uint64) string {
	switch {
	case errors.Is(err, stream.ErrTLS):
		return "TLS"
	case errors.Is(err, stream.ErrUnknown) && streamOff > 0:
		return "protocol not recognised (connection joined after it opened)"
	case errors.Is(err, stream.ErrUnknown):
		return "protocol not recognised"
	case errors.Is(err, stream.ErrHPACK):
		return "HTTP/2 header block not decodable"
	case errors.Is(err, stream.ErrGap):
		return "bytes missing where needed"
	case errors.Is(err, stream.ErrBound):
		return "over a bound"
	}
	return "malformed"
}

// share is one of n equal shares of a request's cost; the first share
// takes the remainders, so that the shares sum to the whole.
func share(r profile.Request, n int, first bool) profile.Request {
	if n <= 1 {
		return r
	}
	u := uint64(n)
	part := func(v uint64) uint64 {
		if first {
			return v/u + v%u
		}
		return v / u
	}
	part32 := func(v uint32) uint32 { return uint32(part(uint64(v))) }
	r.UserNs = part(r.UserNs)
	r.SelfNs = part(r.SelfNs)
	r.SyscallNs = part(r.SyscallNs)
	r.SoftirqNs = part(r.SoftirqNs)
	r.IrqNs = part(r.IrqNs)
	r.KernelNs = r.SyscallNs + r.SoftirqNs + r.IrqNs
	r.RunqueueNs = part(r.RunqueueNs)
	r.OffCPUNs = part(r.OffCPUNs)
	r.PageFaults = part32(r.PageFaults)
	r.VoluntarySwitches = part32(r.VoluntarySwitches)
	r.InvoluntarySwitches = part32(r.InvoluntarySwitches)
	r.BytesIn = part(r.BytesIn)
	r.BytesOut = part(r.BytesOut)
	r.SetupNs = part(r.SetupNs)
	r.TailNs = part(r.TailNs)
	r.TailSelfNs = part(r.TailSelfNs)
	return r
}

// merge adds a carried burst's cost to r, which then starts where the
// carried one did: the carried burst's tail is in r's latency, no tail.
func merge(r, carried profile.Request) profile.Request {
	r.UserNs += carried.UserNs
	r.SelfNs += carried.SelfNs
	r.SyscallNs += carried.SyscallNs
	r.SoftirqNs += carried.SoftirqNs
	r.IrqNs += carried.IrqNs
	r.KernelNs += carried.KernelNs
	r.RunqueueNs += carried.RunqueueNs
	r.OffCPUNs += carried.OffCPUNs
	r.PageFaults += carried.PageFaults
	r.VoluntarySwitches += carried.VoluntarySwitches
	r.InvoluntarySwitches += carried.InvoluntarySwitches
	r.BytesIn += carried.BytesIn
	r.BytesOut += carried.BytesOut
	r.SetupNs += carried.SetupNs
	if carried.Start < r.Start {
		r.Start = carried.Start
	}
	return r
}
