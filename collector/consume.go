package collector

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/reqprof/reqprof/profile"
)

// consumePollInterval is how often the collector reads finished requests:
// at 50,000 requests/s of about 300 bytes, 25 ms fills well under a tenth
// of the ring buffer.
const consumePollInterval = 25 * time.Millisecond

// consumeBusyBytes is how much one drain of the ring buffer reads for the
// next to follow at once rather than after consumePollInterval: a sixteenth
// of the buffer, read in one go, says it fills faster than the interval
// allows for.
const consumeBusyBytes = 512 << 10

type consumeResult struct {
	finished []*finishedRequests // per target index
	kernel   []kernelTally       // per target index
	names    *routeNames
	bursts   *bursts
	// perBurst counts, per target, requests counted one a burst because
	// their connection's bytes could not be followed, by why.
	perBurst      []map[string]uint64
	droppedChunks uint64 // chunks past the bound held for one connection
	// messages counts, per target, JSON-RPC notifications and responses
	// that came from clients: no requests, their cost shared by the
	// requests in their burst.
	messages []uint64
	// noPayload: no bytes were captured, each burst is a request named
	// by port, as asked.
	noPayload bool
	malformed uint64
	// stacks are the stack samples, with Config.Stacks; nil without.
	stacks *stackSamples
	routes []profile.RouteKey // reused
	err    error
	// onRequest is Config.OnRequest.
	onRequest func(target int, r profile.Request)
	// self takes reqprof's own cost out of each request.
	self     *selfCost
	backends backendUses
	// peers names client calls' peers; clientRoute is reused to name
	// their routes.
	peers       peerNames
	clientRoute []byte
}

// consume reads finished requests until the reader is flushed. Its memory
// is bounded however many finish: it keeps totals and a sample of them,
// reuses one record buffer and interns a bounded number of route names.
// Once the samples are full, decoding allocates only for a route name not
// seen before.
func consume(reader *ringbuf.Reader, targets int, cfg Config, stacks *stackSamples, self *selfCost) consumeResult {
	res := newConsumeResult(targets)
	res.self = self
	res.noPayload, res.onRequest = cfg.NoPayload, cfg.OnRequest
	res.stacks = stacks
	if cfg.NoSample {
		for _, f := range res.finished {
			f.sample.limit = 0
		}
	}
	var rec ringbuf.Record
	// The programs never wake the reader for a record, to spare the
	// servers an interrupt per request, and the reader never waits on the
	// ring buffer in a syscall either: it drains what is there, without
	// blocking, and sleeps on a Go timer. A goroutine parked in a blocking
	// syscall for longer than 10 ms has its P taken back by the runtime's
	// monitor, which then polls every 20 µs for a while: that polling was
	// a sixth of the collector's CPU under load. A deadline long passed
	// makes each wait return at once.
	reader.SetDeadline(time.Unix(0, 1))
	for {
		read := 0
		for {
			err := reader.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if errors.Is(err, ringbuf.ErrFlushed) || errors.Is(err, os.ErrClosed) {
				return res
			}
			if err != nil {
				res.err = fmt.Errorf("reading the request ring buffer: %w", err)
				return res
			}
			read += len(rec.RawSample)
			res.decode(rec.RawSample)
		}
		if read < consumeBusyBytes {
			time.Sleep(consumePollInterval)
		}
	}
}

// decode takes one ring-buffer record of any kind.
func (res *consumeResult) decode(b []byte) {
	kind, err := recordKind(b)
	if err != nil {
		res.malformed++
		return
	}
	switch kind {
	case uint32(reqprofRecordKindRECORD_REQUEST):
		d, err := decodeRecord(b)
		if err != nil {
			res.malformed++
			return
		}
		res.add(d)
	case uint32(reqprofRecordKindRECORD_RESPONSE), uint32(reqprofRecordKindRECORD_READ_MARK):
		d, err := decodeRecordOf(b, kind)
		if err != nil || int(d.target) >= len(res.finished) {
			res.malformed++
			return
		}
		switch {
		case res.noPayload:
		case kind == uint32(reqprofRecordKindRECORD_RESPONSE):
			res.bursts.response(&d)
		default:
			res.bursts.readMark(&d)
		}
	case uint32(reqprofRecordKindRECORD_CHUNK), uint32(reqprofRecordKindRECORD_CLOSED):
		c, err := decodeChunk(b)
		if err != nil || int(c.target) >= len(res.finished) {
			res.malformed++
			return
		}
		if c.closed {
			res.bursts.closed(c.conn)
		} else if res.bursts.chunk(c.conn, c.offset, c.data) {
			res.droppedChunks++
		}
	case uint32(reqprofRecordKindRECORD_BACKEND):
		r, err := decodeBackend(b)
		if err != nil || int(r.Target) >= len(res.finished) {
			res.malformed++
			return
		}
		res.backends.held(r)
	case uint32(reqprofRecordKindRECORD_STACK):
		d, err := decodeStackSample(b)
		if err != nil || res.stacks == nil {
			res.malformed++
			return
		}
		res.stacks.sample(&d)
	default:
		res.malformed++
	}
}

func newConsumeResult(targets int) consumeResult {
	res := consumeResult{
		finished: make([]*finishedRequests, targets),
		kernel:   make([]kernelTally, targets),
		names:    newRouteNames(maxRouteNames),
		perBurst: make([]map[string]uint64, targets),
		backends: newBackendUses(targets),
	}
	res.bursts = newBursts(res.names.internBytes)
	for i := range targets {
		res.finished[i] = newFinishedRequests(maxSampledRequests, uint64(i))
		res.perBurst[i] = map[string]uint64{}
	}
	res.messages = make([]uint64, targets)
	return res
}

// add keeps what is needed of a decoded record; a malformed one, or one
// of a request whose start the programs did not see, is only counted.
func (res *consumeResult) add(d decodedRecord) {
	if int(d.target) >= len(res.finished) || d.flags&uint32(reqprofRecordFlagsREQ_START_UNSEEN) != 0 {
		res.malformed++
		return
	}
	res.kernel[d.target].add(d.kernel, res.self.net(&d.request, d.kernel, d.tail))
	if d.flags&uint32(reqprofRecordFlagsREQ_CLIENT) != 0 {
		d.request.Peer = res.peers.name(*d.peer)
	}
	if res.noPayload {
		d.request.Route = res.routeOf(res.names.name(nil, d.localPort), &d)
		res.finish(d.target, d.request)
		res.stacksFinished(&d, false, d.request.Route)
		res.backendsFinished(&d, d.request.Route)
		return
	}
	s, f := res.bursts.burst(&d)
	if f != nil && f.answers != nil && res.matchByID(&d, s, f) {
		return
	}
	r := d.request
	carried := f != nil && f.carrying
	if carried {
		r = merge(r, f.carry)
		f.carry, f.carrying = profile.Request{}, false
	}
	res.messages[d.target] += uint64(s.messages)
	switch {
	case s.fallback != "":
		r.Route = res.names.intern(res.routeOf(fallbackName(&d), &d))
		r.Protocol = s.protocol.String()
		res.finish(d.target, r)
		res.countPerBurst(d.target, s.fallback)
		res.stacksFinished(&d, carried, r.Route)
		res.backendsFinished(&d, r.Route)
	case s.carried:
		if f == nil {
			f = res.bursts.follow(d.request.Conn)
		}
		f.carry, f.carrying, f.target = r, true, d.target
		// Its samples stay held, for the burst that completes a request.
	default:
		res.routes = res.routes[:0]
		for i, found := range s.requests {
			one := share(r, len(s.requests), i == 0)
			one.Route = res.routeOf(found.Name, &d)
			one.Protocol = found.Protocol.String()
			res.finish(d.target, one)
			res.routes = append(res.routes, one.Key())
		}
		if res.stacks != nil {
			res.stacks.finished(d.request.Conn, uint64(d.request.Start), res.routes, carried)
		}
		if len(res.routes) > 0 {
			res.backendsFinished(&d, res.routes[0].Route)
		}
	}
}

// backendsFinished gives the backend calls of d's burst to its first
// request, named route. A burst that completes no request keeps them for
// the one that does.
func (res *consumeResult) backendsFinished(d *decodedRecord, route string) {
	if d.flags&uint32(reqprofRecordFlagsREQ_BACKENDS) != 0 {
		res.backends.finished(d.target, d.request.Conn, profile.RouteKey{Route: route, Port: d.localPort, Peer: d.request.Peer})
	}
}

// finish counts r as a finished request of target, and hands it on to
// Config.OnRequest.
func (res *consumeResult) finish(target uint32, r profile.Request) {
	res.finished[target].add(r)
	if res.onRequest != nil {
		res.onRequest(int(target), r)
	}
}

// stacksFinished gives the samples held for d's request to its route,
// with those of the bursts it carries when carried.
func (res *consumeResult) stacksFinished(d *decodedRecord, carried bool, route string) {
	if res.stacks == nil {
		return
	}
	res.routes = append(res.routes[:0], profile.RouteKey{Route: route, Port: d.localPort, Peer: d.request.Peer})
	res.stacks.finished(d.request.Conn, uint64(d.request.Start), res.routes, carried)
}

// maxPerBurstReasons bounds the distinct reasons kept per target: they
// come from parsers' errors, which may quote what a peer sent.
const maxPerBurstReasons = 16

func (res *consumeResult) countPerBurst(target uint32, why string) {
	reasons := res.perBurst[target]
	if _, ok := reasons[why]; !ok && len(reasons) >= maxPerBurstReasons {
		why = "other reasons"
	}
	reasons[why]++
}

// carriedNs is, per target, the CPU of bursts still waiting for a request
// to complete when the window closed: part of no finished request.
func (res *consumeResult) carried() []uint64 {
	ns := make([]uint64, len(res.finished))
	for _, f := range res.bursts.conns {
		if f.carrying && int(f.target) < len(ns) {
			ns[f.target] += f.carry.CPUNs()
		}
		if f.answers != nil && int(f.target) < len(ns) {
			ns[f.target] += f.answers.inFlightNs()
		}
	}
	return ns
}
