package stream

import (
	"strings"

	"github.com/reqprof/reqprof/collector/route"
	"golang.org/x/net/http2/hpack"
)

const (
	// maxHeaderBlock bounds an HTTP/2 header block: a HEADERS frame's
	// payload and the CONTINUATION frames that carry the rest of it.
	maxHeaderBlock = 64 << 10
	// maxHeaderString bounds a header name or value, decoded.
	maxHeaderString = 16 << 10
	// maxTableSize bounds the HPACK dynamic table a client may ask for,
	// up to what a server may have allowed it in SETTINGS.
	maxTableSize = 64 << 10
	// initialTableSize is HPACK's dynamic table size until the client
	// changes it.
	initialTableSize = 4096
)

// HTTP/2 frame types and flags (RFC 9113, section 6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

type h2State struct {
	dec *hpack.Decoder // one per connection: its dynamic table spans every block
	// blind: joined after the preface, header blocks cannot be decoded
	// (their dynamic table began before): streams are counted by their
	// frames and named by port.
	blind bool
	last  uint32 // the highest stream the client opened
	cont  uint32 // the stream whose header block awaits CONTINUATION, or 0

	// The HEADERS or CONTINUATION frame whose payload is read.
	typ, flags byte
	sid        uint32
	length     int

	// The header block being decoded.
	block   int  // its bytes so far
	capture bool // it opens a stream: keep what names the request
	method  []byte
	path    []byte
	grpc    bool
	seen    uint8 // which of method, path and content-type came
}

const (
	seenMethod = 1 << iota
	seenPath
	seenType
)

func (c *Conn) startH2(last uint32) {
	h := &h2State{last: last}
	h.dec = hpack.NewDecoder(initialTableSize, h.field)
	h.dec.SetAllowedMaxDynamicTableSize(maxTableSize)
	h.dec.SetMaxStringLength(maxHeaderString)
	c.h2 = h
	c.proto, c.st = H2, sH2Frame
}

// field keeps the first :method, :path and content-type of a block that
// opens a stream.
func (h *h2State) field(f hpack.HeaderField) {
	switch {
	case f.Name == ":method" && h.seen&seenMethod == 0:
		h.seen |= seenMethod
		h.method = append(h.method[:0], f.Value...)
	case f.Name == ":path" && h.seen&seenPath == 0:
		h.seen |= seenPath
		h.path = append(h.path[:0], f.Value...)
	case f.Name == "content-type" && h.seen&seenType == 0:
		h.seen |= seenType
		h.grpc = strings.HasPrefix(f.Value, "application/grpc")
	}
}

// h2Frame reads a frame header and checks what a client may send.
func (c *Conn) h2Frame(data []byte) (int, bool) {
	if len(data) < 9 {
		c.need = 9
		return 0, false
	}
	h := c.h2
	f := parseFrameHeader(data)
	length, typ, flags, sid := f.length, f.typ, f.flags, f.sid
	if h.cont != 0 && (typ != frameContinuation || sid != h.cont) {
		c.fail(ErrMalformed, "frame type %d on stream %d inside the header block of stream %d", typ, sid, h.cont)
		return 0, false
	}
	if known, ok := f.fromClient(); known && !ok {
		c.fail(ErrMalformed, "frame type %d, length %d, on stream %d", typ, length, sid)
		return 0, false
	}
	if typ == frameHeaders || typ == frameContinuation {
		switch {
		case typ == frameContinuation && h.cont == 0:
			c.fail(ErrMalformed, "CONTINUATION without HEADERS")
			return 0, false
		case length > maxHeaderBlock:
			c.fail(ErrBound, "header frame of %d bytes", length)
			return 0, false
		}
		h.typ, h.flags, h.sid, h.length = typ, flags, sid, length
		c.st = sH2Payload
		return 9, true
	}
	// Any other frame, and unknown types, pass unread.
	c.left = uint64(length)
	c.st = sH2Skip
	return 9, true
}

// frameHeader is an HTTP/2 frame's 9-byte header.
type frameHeader struct {
	length     int
	typ, flags byte
	sid        uint32 // the reserved bit cleared
	reserved   bool
}

// parseFrameHeader reads the header at the start of data, 9 bytes or more.
func parseFrameHeader(data []byte) frameHeader {
	return frameHeader{
		length:   int(data[0])<<16 | int(data[1])<<8 | int(data[2]),
		typ:      data[3],
		flags:    data[4],
		sid:      (uint32(data[5])<<24 | uint32(data[6])<<16 | uint32(data[7])<<8 | uint32(data[8])) &^ (1 << 31),
		reserved: data[5]&0x80 != 0,
	}
}

// fromClient says whether a client may send a frame of this type on this
// stream with this length (RFC 9113, section 6); known is false for a type
// the RFC does not define, which a reader passes over unread.
func (f frameHeader) fromClient() (known, ok bool) {
	switch f.typ {
	case frameData:
		return true, f.sid != 0
	case frameHeaders:
		return true, f.sid%2 == 1
	case frameContinuation:
		return true, f.sid != 0
	case framePriority:
		return true, f.sid != 0 && f.length == 5
	case frameRSTStream:
		return true, f.sid != 0 && f.length == 4
	case frameSettings:
		return true, f.sid == 0 && f.length%6 == 0 && (f.flags&flagAck == 0 || f.length == 0)
	case framePushPromise:
		return true, false // servers push, clients do not
	case framePing:
		return true, f.sid == 0 && f.length == 8
	case frameGoAway:
		return true, f.sid == 0 && f.length >= 8
	case frameWindowUpdate:
		return true, f.length == 4
	}
	return false, true
}

func (c *Conn) h2Skip(data []byte) (int, bool) {
	n := c.pass(data)
	if c.left == 0 {
		c.st = sH2Frame
		return n, true
	}
	return n, n > 0
}

// h2Payload decodes the header block fragment of a HEADERS or CONTINUATION
// frame, and counts a request when a block that opens a stream ends.
func (c *Conn) h2Payload(data []byte) (int, bool) {
	h := c.h2
	if len(data) < h.length {
		c.need = h.length
		return 0, false
	}
	p := data[:h.length]
	if h.typ == frameHeaders {
		pad := 0
		if h.flags&flagPadded != 0 {
			if len(p) < 1 {
				c.fail(ErrMalformed, "padded HEADERS without its pad length")
				return 0, false
			}
			pad, p = int(p[0]), p[1:]
		}
		if h.flags&flagPriority != 0 {
			if len(p) < 5 {
				c.fail(ErrMalformed, "HEADERS too short for its priority")
				return 0, false
			}
			p = p[5:]
		}
		if pad > len(p) {
			c.fail(ErrMalformed, "HEADERS padding longer than its payload")
			return 0, false
		}
		p = p[:len(p)-pad]
		// Trailers, and blocks on streams already open, are decoded
		// for HPACK's sake only.
		h.capture = h.sid > h.last
		if h.capture {
			h.last = h.sid
		}
		h.block, h.seen, h.grpc = 0, 0, false
		h.dec.SetEmitEnabled(h.capture)
	}
	h.block += len(p)
	if h.block > maxHeaderBlock {
		c.fail(ErrBound, "header block longer than %d bytes", maxHeaderBlock)
		return 0, false
	}
	if h.blind {
		if h.flags&flagEndHeaders == 0 {
			h.cont = h.sid
		} else if h.cont = 0; h.capture {
			c.scratch = c.portName(append(c.scratch[:0], "h2 "...))
			c.emit(c.scratch, H2, false, false)
		}
		c.st = sH2Frame
		return h.length, true
	}
	if _, err := h.dec.Write(p); err != nil {
		c.fail(ErrHPACK, "%v", err)
		return 0, false
	}
	if h.flags&flagEndHeaders != 0 {
		if err := h.dec.Close(); err != nil {
			c.fail(ErrHPACK, "%v", err)
			return 0, false
		}
		h.cont = 0
		if h.capture {
			c.h2Request()
		}
	} else {
		h.cont = h.sid
	}
	c.st = sH2Frame
	return h.length, true
}

// h2Request names the request of a stream from its header block.
func (c *Conn) h2Request() {
	h := c.h2
	var method, path []byte
	if h.seen&seenMethod != 0 {
		method = h.method
	}
	if h.seen&seenPath != 0 {
		path = h.path
	}
	name, p := c.scratch[:0], H2
	if h.grpc {
		p = GRPC
	}
	switch {
	case h.grpc && grpcMethod(path):
		name = append(name, path...)
	case len(method) == 0:
		name = c.portName(append(name, "h2 "...))
	default:
		name = route.AppendRequestName(name, method, path)
	}
	c.scratch = name
	c.emit(name, p, false, false)
}

// grpcMethod reports a gRPC path that can be the name as it is: printable
// ASCII without spaces, starting with '/', within a name's bounds.
func grpcMethod(path []byte) bool {
	if len(path) < 2 || len(path) > maxName || path[0] != '/' {
		return false
	}
	for _, b := range path {
		if b <= ' ' || b > '~' {
			return false
		}
	}
	return true
}

// maxName is route's bound on a name.
const maxName = 128
