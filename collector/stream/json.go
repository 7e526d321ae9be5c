package stream

import (
	"bytes"

	"github.com/reqprof/reqprof/collector/route"
)

// keepJSON bounds what is kept of a JSON-RPC message that spans Feeds, or
// is cut by a gap, to be named: its first 16 KiB. A message that comes
// whole in one Feed is named from the same 16 KiB, without a copy.
const keepJSON = 16 << 10

type jsMode uint8

const (
	jsRaw  jsMode = iota // JSON-RPC raw on the connection: values one after another
	jsHTTP               // the body of an HTTP POST: one value
	jsLSP                // the body of a Content-Length framed message: one value
)

// framer follows JSON byte by byte, without recursion or buffering beyond
// keep, to find the messages it holds: each top-level object, or each
// element of a top-level array (a batch). It does not check that the JSON
// is valid, only where values start and end.
type framer struct {
	on       bool
	mode     jsMode
	done     bool // a body's value ended, or the body is no JSON: the rest is not read
	depth    int  // nesting depth, 0 between top-level values
	batch    bool // the top-level value is an array
	elements int  // messages in the batch so far
	messages int  // messages in the body so far
	inStr    bool
	esc      bool

	// The message being read.
	inMsg    bool
	msgDepth int  // depth its value starts at: 0, or 1 in a batch
	kind     byte // its first byte, or '0' for a number or literal
	keep     []byte
	kept     bool // keep holds its start: it began in an earlier call

	// Its top-level keys, when it is an object.
	expectKey bool
	inKey     bool
	key       [16]byte
	keyLen    int
	hasID     bool
	hasMethod bool
}

func (c *Conn) jsStart(mode jsMode) {
	c.js = framer{on: true, mode: mode, keep: c.js.keep[:0]}
}

// jsFinish ends a body: a message it cut short is named from what came.
// It returns how many messages the body held.
func (c *Conn) jsFinish() int {
	j := &c.js
	if !j.done && j.inMsg {
		c.jsMessage(j.keep)
	}
	messages := j.messages
	keep := j.keep[:0]
	if cap(keep) > 4<<10 {
		keep = nil
	}
	*j = framer{keep: keep}
	return messages
}

// jsGap notes that bytes of a body went missing: a single message is named
// from what came before them; a batch cannot be followed any further.
func (c *Conn) jsGap() {
	j := &c.js
	switch {
	case j.done:
	case j.batch:
		c.fail(ErrGap, "bytes missing inside a JSON-RPC batch")
	case j.inMsg:
		c.jsMessage(j.keep)
		j.done = true
	default:
		j.done = true
	}
}

func (c *Conn) jsonRaw(data []byte) (int, bool) {
	if len(data) == 0 {
		return 0, false
	}
	c.jsFeed(data)
	return len(data), true
}

// jsFeed reads data, the next bytes of the JSON.
func (c *Conn) jsFeed(data []byte) {
	j := &c.js
	if j.done {
		return
	}
	from := 0 // where the message being read starts in data, or 0
	for i := 0; i < len(data); i++ {
		b := data[i]
		if j.inStr {
			if !j.inKey && !j.esc {
				// The inside of a string, quickly.
				k := i
				for k < len(data) && data[k] != '"' && data[k] != '\\' {
					k++
				}
				if k == len(data) {
					break
				}
				i, b = k, data[k]
			}
			switch {
			case j.esc:
				j.esc = false
				j.keyByte(b)
			case b == '\\':
				j.esc = true
				j.keyByte(b)
			case b == '"':
				j.inStr = false
				if j.inKey {
					j.endKey()
				}
				if j.inMsg && j.kind == '"' {
					c.jsEnd(data, from, i+1)
				}
			default:
				j.keyByte(b)
			}
			continue
		}
		if j.inMsg && j.kind == '0' {
			if !isJSONDelimiter(b) {
				continue
			}
			c.jsEnd(data, from, i)
		}
		switch b {
		case ' ', '\t', '\r', '\n', ':':
		case '"':
			j.inStr = true
			switch {
			case j.inMsg:
				if j.kind == '{' && j.depth == j.msgDepth+1 && j.expectKey {
					j.inKey, j.keyLen, j.expectKey = true, 0, false
				}
			case j.batch && j.depth == 1:
				from = i
				j.begin('"', 1)
			default:
				c.jsNotJSON()
				return
			}
		case '{', '[':
			switch {
			case j.depth == 0 && b == '[':
				j.batch, j.elements = true, 0
			case j.depth == 0:
				from = i
				j.begin(b, 0)
			case j.batch && j.depth == 1 && !j.inMsg:
				from = i
				j.begin(b, 1)
			}
			j.depth++
		case '}', ']':
			if j.depth == 0 {
				c.jsNotJSON()
				return
			}
			j.depth--
			if j.inMsg && j.depth == j.msgDepth {
				c.jsEnd(data, from, i+1)
			}
			if j.depth > 0 {
				break
			}
			if j.batch && j.elements == 0 && j.mode != jsHTTP {
				// An empty batch gets an error response.
				j.kind, j.hasID, j.hasMethod = '[', false, false
				c.jsMessage(data[i : i+1])
			}
			j.batch = false
			if j.mode != jsRaw {
				j.done = true
				return
			}
		case ',':
			if j.inMsg && j.kind == '{' && j.depth == j.msgDepth+1 {
				j.expectKey = true
			}
		default:
			switch {
			case j.depth == 0:
				c.jsNotJSON()
				return
			case j.batch && j.depth == 1 && !j.inMsg:
				from = i
				j.begin('0', 1)
			}
		}
		if c.err != nil {
			return
		}
	}
	if j.inMsg {
		j.keepMore(data[from:])
		j.kept = true
	}
}

// begin starts a message whose value starts with kind at depth.
func (j *framer) begin(kind byte, depth int) {
	j.inMsg, j.kind, j.msgDepth = true, kind, depth
	j.keep, j.kept = j.keep[:0], false
	j.expectKey = kind == '{'
	j.hasID, j.hasMethod = false, false
}

// keepMore keeps b, up to keepJSON bytes of the message.
func (j *framer) keepMore(b []byte) {
	j.keep = append(j.keep, b[:min(len(b), keepJSON-len(j.keep))]...)
}

func (j *framer) keyByte(b byte) {
	if j.inKey {
		if j.keyLen < len(j.key) {
			j.key[j.keyLen] = b
		}
		j.keyLen++
	}
}

func (j *framer) endKey() {
	j.inKey = false
	if j.keyLen > len(j.key) {
		return
	}
	switch key := j.key[:j.keyLen]; {
	case route.JSONKeyIs(key, "id"):
		j.hasID = true
	case route.JSONKeyIs(key, "method"):
		j.hasMethod = true
	}
}

// jsEnd ends the message that ends at data[end] (exclusive).
func (c *Conn) jsEnd(data []byte, from, end int) {
	j := &c.js
	var msg []byte
	if j.kept {
		j.keepMore(data[:end])
		msg = j.keep
	} else {
		msg = data[from:min(end, from+keepJSON)]
	}
	c.jsMessage(msg)
	j.inMsg, j.kept, j.keep = false, false, j.keep[:0]
}

// jsNotJSON handles a byte that cannot be there: on the connection the
// stream is lost; in a body, the body is simply not JSON-RPC.
func (c *Conn) jsNotJSON() {
	if c.js.mode == jsRaw {
		c.fail(ErrMalformed, "not JSON")
		return
	}
	c.js.done = true
}

// jsMessage counts the message msg (possibly cut to its start) as a request.
// In an HTTP body only JSON-RPC 2.0 messages count, each named after the
// HTTP request; raw, every message counts, named as route names it alone.
func (c *Conn) jsMessage(msg []byte) {
	j := &c.js
	j.messages++
	if j.batch {
		j.elements++
	}
	var rpc, method bool
	name := c.scratch[:0]
	if j.mode == jsHTTP {
		name = append(name, c.h1.name...)
		if j.kind == '{' {
			name, rpc, _ = route.AppendJSONRPC(name, msg)
		}
		if rpc {
			c.h1.calls++
			c.emit(name, HTTP1, j.hasMethod && !j.hasID, !j.hasMethod)
		}
	} else {
		if j.kind == '{' {
			name, rpc, method = route.AppendJSONRPC(name, msg)
		}
		switch {
		case !rpc:
			name = c.portName(name[:0])
		case !method:
			name = append(name, "jsonrpc"...)
		}
		queued := len(c.out)
		c.emit(name, JSONRPC, rpc && j.hasMethod && !j.hasID, rpc && !j.hasMethod)
		if rpc && j.hasMethod && j.hasID && len(c.out) > queued {
			// A call: its response is matched to it by id.
			if f := route.ReadRPCFields(msg); f.ID != nil {
				q := &c.out[len(c.out)-1]
				q.hasID, q.id = true, IDKey(f.ID)
			}
		}
	}
	c.scratch = name
	j.hasID, j.hasMethod = false, false
}

// IDKey is the key a JSON-RPC id's text (as sent: a string with its
// quotes) is matched by: its FNV-1a hash, so that keeping it costs no
// allocation. A response echoes its request's id as the request spelled it.
func IDKey(id []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range id {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h
}

func isJSONDelimiter(b byte) bool {
	switch b {
	case ',', ':', '{', '}', '[', ']', '"', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// lspHead reads the header lines of a Content-Length framed message.
func (c *Conn) lspHead(data []byte) (int, bool) {
	if len(data) == 0 {
		return 0, false
	}
	if c.scan == 0 {
		switch data[0] {
		case '\n':
			return 1, true
		case '\r':
			if len(data) < 2 {
				return 0, false
			}
			if data[1] == '\n' {
				return 2, true
			}
		}
		c.h1.length = -1
	}
	for {
		i := indexLF(data, c.scan)
		if i < 0 || i+1 > maxHead {
			if i >= 0 || len(data) >= maxHead {
				c.fail(ErrBound, "message header longer than %d bytes", maxHead)
				return 0, false
			}
			c.scan = len(data)
			return 0, false
		}
		line := trimCR(data[c.mark:i])
		c.scan, c.mark = i+1, i+1
		if len(line) == 0 {
			if c.h1.length < 0 {
				c.fail(ErrMalformed, "message header without Content-Length")
				return 0, false
			}
			c.hold = true
			c.jsStart(jsLSP)
			c.st, c.left = sLSPBody, uint64(c.h1.length)
			return i + 1, true
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			c.fail(ErrMalformed, "header line %q", clip(line))
			return 0, false
		}
		if asciiEqualFold(line[:colon], "content-length") {
			n, ok := parseDecimal(bytes.Trim(line[colon+1:], " \t"))
			if !ok || c.h1.length >= 0 && n != c.h1.length {
				c.fail(ErrMalformed, "Content-Length %q", clip(line))
				return 0, false
			}
			c.h1.length = n
		}
	}
}

// lspBody passes over the message body, feeding it to the framer; at its
// end the messages it held are counted (a body with none, one named by
// port).
func (c *Conn) lspBody(data []byte) (int, bool) {
	n := c.pass(data)
	if c.err != nil {
		return n, false
	}
	if c.left > 0 {
		return n, n > 0
	}
	if c.jsFinish() == 0 {
		c.emit(c.portName(c.scratch[:0]), JSONRPC, false, false)
	}
	c.release()
	c.st = sLSPHead
	return n, true
}
