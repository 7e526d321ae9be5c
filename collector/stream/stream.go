package stream

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// Protocol of a request, as the report shows it per route.
type Protocol uint8

const (
	Unknown Protocol = iota
	HTTP1            // "http1"
	H2               // "h2"
	GRPC             // "grpc"
	RESP             // "resp"
	JSONRPC          // "jsonrpc" (raw on the connection, newline-delimited, concatenated, or Content-Length framed LSP-style)
	FastCGI          // "fastcgi"
)

var protocolNames = [...]string{"unknown", "http1", "h2", "grpc", "resp", "jsonrpc", "fastcgi"}

func (p Protocol) String() string {
	if int(p) < len(protocolNames) {
		return protocolNames[p]
	}
	return "Protocol(" + strconv.Itoa(int(p)) + ")"
}

// Request is one request found in the stream.
type Request struct {
	Name     string // the route name, as route.Name would give for it alone
	Protocol Protocol
	// Notification marks a JSON-RPC message with a method and no id, which
	// gets no JSON-RPC response (counted apart by the caller). It is set
	// wherever the message travels; in the body of an HTTP POST the HTTP
	// request still gets an HTTP response.
	Notification bool
	// Response marks a JSON-RPC 2.0 message without a method: a response
	// the client sends to a request of the server's. It gets no answer
	// either.
	Response bool
	// ID is the key of a raw JSON-RPC request's id (IDKey of its text),
	// valid when HasID: its response carries the same.
	ID    uint64
	HasID bool
}

// Errors that stop a Conn; Err wraps one of them with what was found.
var (
	ErrTLS       = errors.New("TLS: named by port")
	ErrUnknown   = errors.New("stream: unknown protocol")
	ErrGap       = errors.New("stream: bytes missing where they are needed")
	ErrMalformed = errors.New("stream: malformed")
	ErrBound     = errors.New("stream: bound exceeded")
	ErrHPACK     = errors.New("stream: HPACK block failed to decode")
)

// Bounds.
const (
	// maxBuffer bounds what a Conn holds of partial messages: the unit it
	// waits to complete (a request head, a line, an HTTP/2 header frame)
	// and the start of the JSON value it is following.
	maxBuffer = 64 << 10
	// maxQueued bounds the requests found and not yet taken by Requests.
	maxQueued = 1 << 16
)

// Conn follows one connection's inbound bytes from its first byte.
type Conn struct {
	port  uint16
	proto Protocol
	st    state
	err   error

	pos uint64 // offset of the next byte expected
	// joined: fed from after the connection's first byte, where HTTP/2
	// frames may come with no preface before them.
	joined bool
	buf    []byte // a partial unit, which ends at pos
	left   uint64 // payload bytes the current state passes over, which a gap may cover
	scan   int    // bytes of the buffered unit already scanned for its end
	mark   int    // start of the line being scanned, in the buffered unit
	need   int    // the buffered unit is known to need at least this many bytes

	// Requests found: names concatenated in names, ready of them visible
	// (the rest wait for the end of the HTTP body that carries them).
	out   []queued
	names []byte
	ready int
	hold  bool

	scratch []byte
	h1      h1State
	h2      *h2State
	resp    respState
	js      framer
	fcgi    fcgiState
}

type queued struct {
	start, end   int
	proto        Protocol
	notification bool
	response     bool
	hasID        bool
	id           uint64
}

// NewConn returns a Conn for a connection on localPort, to be fed from the
// connection's first inbound byte.
func NewConn(localPort uint16) *Conn {
	return NewConnAt(localPort, 0)
}

// NewConnAt returns a Conn to be fed from inbound offset off, which must be
// where a message starts (a Conn that was not Pending stopped at one). The
// protocol is detected again from there, which works for all but HTTP/2,
// whose stream cannot be joined after its preface.
func NewConnAt(localPort uint16, off uint64) *Conn {
	c := &Conn{}
	c.Reset(localPort, off)
	return c
}

// Reset makes c as NewConnAt(localPort, off) would, keeping its buffers.
func (c *Conn) Reset(localPort uint16, off uint64) {
	*c = Conn{
		port:    localPort,
		pos:     off,
		joined:  off > 0,
		buf:     c.buf[:0],
		out:     c.out[:0],
		names:   c.names[:0],
		scratch: c.scratch[:0],
		h1:      h1State{name: c.h1.name[:0]},
		resp:    respState{name: c.resp.name[:0]},
		js:      framer{keep: c.js.keep[:0]},
		fcgi:    fcgiState{open: c.fcgi.open[:0]},
	}
}

// Err is non-nil once the Conn cannot follow the stream; from then on Feed
// ignores everything and Requests returns nothing new. It wraps one of the
// Err* errors.
func (c *Conn) Err() error { return c.err }

// Protocol returns the protocol detected so far.
func (c *Conn) Protocol() Protocol { return c.proto }

// Offset returns the inbound offset of the next byte the Conn expects.
func (c *Conn) Offset() uint64 { return c.pos }

// Buffered returns how many bytes of partial messages the Conn holds; it is
// never more than 64 KiB.
func (c *Conn) Buffered() int { return len(c.buf) + c.held() }

// held is what the Conn keeps beside its buffered unit: the start of a JSON
// message, the values that name FastCGI requests begun.
func (c *Conn) held() int { return len(c.js.keep) + c.fcgi.kept }

// Pending reports whether it holds part of a message (so the caller must
// keep it), or requests not yet taken; a Conn that is not Pending and is
// not H2 holds no state worth keeping between bursts: NewConnAt can take
// over at its Offset.
func (c *Conn) Pending() bool {
	if c.err != nil {
		return false
	}
	if len(c.buf) > 0 || c.left > 0 || len(c.out) > 0 {
		return true
	}
	switch c.st {
	case sDetect, sRESPStart, sLSPHead:
		return false
	case sH1Head:
		return c.h1.upgrade
	case sJSONRaw:
		return c.js.depth > 0 || c.js.inMsg
	case sH2Frame:
		return c.h2.cont != 0
	case sFCGIRecord:
		return len(c.fcgi.open) > 0
	}
	return true
}

func (c *Conn) fail(err error, format string, args ...any) {
	if c.err != nil {
		return
	}
	if format != "" {
		err = fmt.Errorf("%w: "+format, append([]any{err}, args...)...)
	}
	c.err = err
	c.st = sFailed
	c.buf = c.buf[:0]
	c.left = 0
	c.out = c.out[:c.ready] // what was held back is dropped
	c.js.keep = c.js.keep[:0]
	c.fcgi.open, c.fcgi.kept = c.fcgi.open[:0], 0
}

// Feed hands it the bytes b found at inbound offset off (the count of
// bytes the server had read from the connection before them). Bytes before
// the position already consumed are ignored (overlap). A gap (off beyond
// the position) is skipped where the bytes missing are payload the Conn
// does not need (an HTTP/1 body or chunk, an HTTP/2 DATA frame or other
// frame it does not read, a RESP bulk string after the command, an LSP
// body or an HTTP POST body whose single JSON value was being read, which
// is then named by what came before the gap); anywhere else the Conn breaks.
func (c *Conn) Feed(off uint64, b []byte) {
	if c.err != nil || len(b) == 0 {
		return
	}
	switch {
	case off < c.pos:
		if uint64(len(b)) <= c.pos-off {
			return
		}
		b = b[c.pos-off:]
	case off > c.pos:
		if c.gap(off); c.err != nil {
			return
		}
	}
	c.pos += uint64(len(b))
	for c.err == nil && len(b) > 0 {
		if len(c.buf) == 0 {
			c.scan, c.mark, c.need = 0, 0, 0
			n := c.consume(b)
			if c.err == nil && n < len(b) {
				c.keepUnit(b[n:])
			}
			return
		}
		old := len(c.buf)
		take := min(len(b), maxBuffer-old-c.held())
		if take <= 0 {
			c.fail(ErrBound, "more than %d bytes of partial message", maxBuffer)
			return
		}
		c.buf = append(c.buf, b[:take]...)
		if len(c.buf) < c.need {
			b = b[take:]
			continue
		}
		n := c.consume(c.buf)
		if c.err != nil {
			return
		}
		if n >= old {
			// The buffered unit is done; what followed it is read
			// from b again, without copying.
			b = b[n-old:]
			c.releaseBuf()
			continue
		}
		c.buf = c.buf[:copy(c.buf, c.buf[n:])]
		b = b[take:]
	}
	if c.err == nil && len(c.buf) == 0 {
		c.releaseBuf()
	}
}

// Skip tells it that the bytes up to inbound offset end were read from the
// connection but are not to be had: a gap, passed over or breaking the Conn
// as in Feed.
func (c *Conn) Skip(end uint64) {
	if c.err == nil && end > c.pos {
		c.gap(end)
	}
}

// gap passes over the bytes missing up to off, beyond the position, where
// they are payload the Conn does not need, and breaks the Conn elsewhere.
func (c *Conn) gap(off uint64) {
	gap := off - c.pos
	if len(c.buf) > 0 || gap > c.left {
		c.fail(ErrGap, "%d bytes missing at offset %d", gap, c.pos)
		return
	}
	c.left -= gap
	c.pos = off
	if c.js.on {
		c.jsGap()
	}
}

// keepUnit buffers the partial unit rest until more bytes come.
func (c *Conn) keepUnit(rest []byte) {
	if len(rest)+c.held() > maxBuffer {
		c.fail(ErrBound, "more than %d bytes of partial message", maxBuffer)
		return
	}
	c.buf = append(c.buf[:0], rest...)
}

// releaseBuf empties the buffer, letting a large one go.
func (c *Conn) releaseBuf() {
	if cap(c.buf) > 4<<10 {
		c.buf = nil
	} else {
		c.buf = c.buf[:0]
	}
}

// consume reads the units that data holds in full, updating the state,
// and returns how many bytes they took; a partial unit is left, with scan,
// mark and need saying how far it was read.
func (c *Conn) consume(data []byte) int {
	n, idle := 0, 0
	for c.err == nil {
		k, ok := c.step(data[n:])
		if !ok {
			break
		}
		n += k
		c.scan, c.mark, c.need = 0, 0, 0
		if k > 0 {
			idle = 0
		} else if idle++; idle > 8 {
			c.fail(ErrMalformed, "no progress") // a bug; never loop
		}
	}
	return n
}

// state is where the Conn is in the stream.
type state uint8

const (
	sDetect state = iota
	sH1Head
	sH1Body
	sH1ChunkLine
	sH1ChunkData
	sH1ChunkEnd
	sH1Trailers
	sH2Frame
	sH2Payload
	sH2Skip
	sRESPStart
	sRESPBulkLine
	sRESPCommand
	sRESPBulkSkip
	sRESPBulkEnd
	sJSONRaw
	sLSPHead
	sLSPBody
	sFCGIRecord
	sFCGIParams
	sFCGISkip
	sFailed
)

// step reads one unit at the start of data, or changes state without
// reading; ok is false when data does not hold the whole unit.
func (c *Conn) step(data []byte) (n int, ok bool) {
	switch c.st {
	case sDetect:
		return c.detect(data)
	case sH1Head:
		return c.h1Head(data)
	case sH1Body:
		return c.h1Body(data)
	case sH1ChunkLine:
		return c.h1ChunkLine(data)
	case sH1ChunkData:
		return c.h1ChunkData(data)
	case sH1ChunkEnd:
		return c.h1ChunkEnd(data)
	case sH1Trailers:
		return c.h1Trailers(data)
	case sH2Frame:
		return c.h2Frame(data)
	case sH2Payload:
		return c.h2Payload(data)
	case sH2Skip:
		return c.h2Skip(data)
	case sRESPStart:
		return c.respStart(data)
	case sRESPBulkLine:
		return c.respBulkLine(data)
	case sRESPCommand:
		return c.respCommand(data)
	case sRESPBulkSkip:
		return c.respBulkSkip(data)
	case sRESPBulkEnd:
		return c.respBulkEnd(data)
	case sJSONRaw:
		return c.jsonRaw(data)
	case sLSPHead:
		return c.lspHead(data)
	case sLSPBody:
		return c.lspBody(data)
	case sFCGIRecord:
		return c.fcgiRecord(data)
	case sFCGIParams:
		return c.fcgiParams(data)
	case sFCGISkip:
		return c.fcgiSkip(data)
	}
	return 0, false
}

// pass passes over up to c.left bytes of data, a payload the Conn does not
// keep, feeding them to the JSON framer when it is on.
func (c *Conn) pass(data []byte) int {
	n := int(min(c.left, uint64(len(data))))
	if c.js.on {
		c.jsFeed(data[:n])
	}
	c.left -= uint64(n)
	return n
}

// line finds the line at the start of data, at most limit bytes with its
// LF, and returns it without its CR LF (or bare LF) and the bytes it takes.
// ok is false when data holds no whole line; past limit the Conn breaks.
func (c *Conn) line(data []byte, limit int, what string) (line []byte, n int, ok bool) {
	i := indexLF(data, c.scan)
	if i < 0 {
		if len(data) >= limit {
			c.fail(ErrBound, "%s longer than %d bytes", what, limit)
		}
		c.scan = len(data)
		return nil, 0, false
	}
	if i+1 > limit {
		c.fail(ErrBound, "%s longer than %d bytes", what, limit)
		return nil, 0, false
	}
	return trimCR(data[:i]), i + 1, true
}

// indexLF returns the index of the first LF in data at or after from, or -1.
func indexLF(data []byte, from int) int {
	if i := bytes.IndexByte(data[from:], '\n'); i >= 0 {
		return from + i
	}
	return -1
}

func trimCR(line []byte) []byte {
	if len(line) > 0 && line[len(line)-1] == '\r' {
		return line[:len(line)-1]
	}
	return line
}

// emit queues a request named name.
func (c *Conn) emit(name []byte, p Protocol, notification, response bool) {
	if c.err != nil {
		return
	}
	if len(c.out) >= maxQueued {
		c.fail(ErrBound, "more than %d requests not taken", maxQueued)
		return
	}
	start := len(c.names)
	c.names = append(c.names, name...)
	c.out = append(c.out, queued{start: start, end: len(c.names), proto: p, notification: notification, response: response})
	if !c.hold {
		c.ready = len(c.out)
	}
}

// release makes the requests held back visible.
func (c *Conn) release() {
	c.hold = false
	c.ready = len(c.out)
}

// portName appends ":PORT".
func (c *Conn) portName(dst []byte) []byte {
	return strconv.AppendUint(append(dst, ':'), uint64(c.port), 10)
}

// Requests appends to dst the requests whose head became complete since the
// last call, in stream order, and returns it. Requests completed before the
// Conn broke are still returned, once.
func (c *Conn) Requests(dst []Request) []Request {
	return c.RequestsFunc(dst, nil)
}

// RequestsFunc is Requests with each name made by name from its bytes
// (only valid during the call), so that a caller that interns names does
// not allocate: name can look the bytes up with m[string(b)], which Go does
// without a copy, and copy them only when they are new. A nil name copies
// every name into a new string, as Requests does.
func (c *Conn) RequestsFunc(dst []Request, name func([]byte) string) []Request {
	for _, q := range c.out[:c.ready] {
		b := c.names[q.start:q.end]
		var s string
		if name != nil {
			s = name(b)
		} else {
			s = string(b)
		}
		dst = append(dst, Request{Name: s, Protocol: q.proto, Notification: q.notification, Response: q.response, ID: q.id, HasID: q.hasID})
	}
	if c.ready == len(c.out) {
		c.out, c.names = c.out[:0], c.names[:0]
	} else if c.ready > 0 {
		base := c.out[c.ready].start
		n := copy(c.out, c.out[c.ready:])
		c.out = c.out[:n]
		for i := range c.out {
			c.out[i].start -= base
			c.out[i].end -= base
		}
		c.names = c.names[:copy(c.names, c.names[base:])]
	}
	c.ready = 0
	return dst
}
