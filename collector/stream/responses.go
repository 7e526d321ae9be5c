package stream

import (
	"bytes"

	"github.com/reqprof/reqprof/collector/route"
)

// Responses follows what a server writes on a JSON-RPC channel (stdio),
// seen as the first bytes of each write, to tell which responses, by id,
// each write carries. Messages are newline-delimited JSON (MCP's stdio) or
// Content-Length framed (LSP); a batch of responses is an array. Where a
// message starts is known from the previous one's end: a message whose end
// falls past the bytes seen (a long response cut, a lost record) leaves
// the position unknown until a write starts with a message's first bytes
// ({"jsonrpc" or Content-Length:), which servers write whole.
type Responses struct {
	next     uint64 // offset the next write is expected at
	started  bool
	known    bool   // boundary is where the next message starts
	boundary uint64 // in the output stream
	// An LSP body whose header came in an earlier write: it starts at
	// bodyAt, and its id is still to be read.
	bodyPending bool
	bodyAt      uint64
}

// Write reads a write of length bytes at offset off of the output, of which
// head are the first, and appends to ids the keys (IDKey) of the responses
// it carries. unread says it may carry a response whose id could not be
// read: a message cut before its id, or bytes where a message may start
// that are not one.
func (r *Responses) Write(off, length uint64, head []byte, ids []uint64) (_ []uint64, unread bool) {
	// In uint64: a length past int's range (a malformed record) would turn
	// negative as an int.
	if uint64(len(head)) > length {
		head = head[:length]
	}
	if !r.started || off != r.next {
		r.started, r.known, r.bodyPending = true, false, false
	}
	r.next = off + length
	if r.bodyPending && r.known && r.bodyAt == off && r.boundary > off {
		r.bodyPending = false
		ids, unread = responseOf(head[:min(uint64(len(head)), r.boundary-off)], ids, unread)
	}
	if !r.known || r.boundary < off {
		if !startsMessage(head) {
			return ids, true
		}
		r.known, r.boundary = true, off
	}
	end := off + uint64(len(head))
	for r.known && r.boundary < end {
		p := head[r.boundary-off:]
		skip := skipSpace(p)
		if skip == len(p) {
			r.boundary += uint64(skip)
			if end < off+length {
				// Spaces up to what was seen: where the next message starts is not.
				r.known = false
			}
			break
		}
		p = p[skip:]
		var n uint64
		var ok bool
		var body uint64
		ids, n, body, ok, unread = readResponse(p, ids, unread)
		if body > 0 {
			r.bodyPending, r.bodyAt = true, r.boundary+uint64(skip)+body
		}
		if !ok {
			// Its end is not known: nor is where the next message starts.
			r.known = false
			return ids, unread
		}
		r.boundary += uint64(skip) + n
	}
	if r.known && r.boundary < off+length && r.boundary >= end {
		// The rest of the write was not seen, and a message starts in it.
		r.known = false
		unread = true
	}
	return ids, unread
}

// startsMessage says whether b begins as a server's message does.
func startsMessage(b []byte) bool {
	b = b[skipSpace(b):]
	return bytes.HasPrefix(b, []byte(`{"jsonrpc"`)) || bytes.HasPrefix(b, []byte(`[{"jsonrpc"`)) ||
		len(b) >= 15 && asciiEqualFold(b[:15], "content-length:")
}

func skipSpace(b []byte) int {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// readResponse reads the message p starts with (possibly cut): its length
// in the stream when known (ok), and the ids of the responses in it. body
// is where an LSP body that p ends before starts, for the next write.
func readResponse(p []byte, ids []uint64, unread bool) (_ []uint64, n, body uint64, ok, _ bool) {
	switch {
	case p[0] == '{' || p[0] == '[':
		end, whole := jsonValueEnd(p)
		ids, unread = responseOf(p[:end], ids, unread)
		return ids, uint64(end), 0, whole, unread
	case p[0] == 'C' || p[0] == 'c':
		start, length, ok := lspHeaderOf(p)
		if !ok {
			return ids, 0, 0, false, true
		}
		b := p[start:]
		if uint64(len(b)) > length {
			b = b[:length]
		}
		if len(b) == 0 && length > 0 {
			return ids, uint64(start) + length, uint64(start), true, unread
		}
		ids, unread = responseOf(b, ids, unread)
		return ids, uint64(start) + length, 0, true, unread
	}
	return ids, 0, 0, false, true
}

// responseOf adds the ids of msg, an object or a batch of them, when
// they are responses.
func responseOf(msg []byte, ids []uint64, unread bool) ([]uint64, bool) {
	msg = msg[skipSpace(msg):]
	if len(msg) > 0 && msg[0] == '[' {
		return batchOf(msg, ids, unread)
	}
	return objectResponse(msg, ids, unread)
}

func objectResponse(msg []byte, ids []uint64, unread bool) ([]uint64, bool) {
	f := route.ReadRPCFields(msg)
	switch {
	case f.Method:
		// A request or notification of the server's own.
	case f.ID != nil:
		ids = append(ids, IDKey(f.ID))
	case f.NullID && f.Result:
		// Answers a request it could not read: no call of ours.
	default:
		unread = true
	}
	return ids, unread
}

// batchOf adds the ids of the responses in an array of them.
func batchOf(b []byte, ids []uint64, unread bool) ([]uint64, bool) {
	i := 1
	for {
		i += skipSpace(b[min(i, len(b)):])
		if i >= len(b) {
			return ids, true // cut
		}
		switch b[i] {
		case ']':
			return ids, unread
		case ',':
			i++
			continue
		case '{':
			end, whole := jsonValueEnd(b[i:])
			ids, unread = objectResponse(b[i:i+end], ids, unread)
			if !whole {
				return ids, true
			}
			i += end
		default:
			return ids, true
		}
	}
}

// jsonValueEnd is where the object or array p starts with ends (just past
// it), or len(p) and false when p ends first.
func jsonValueEnd(p []byte) (int, bool) {
	depth, inStr, esc := 0, false, false
	for i, b := range p {
		switch {
		case inStr && esc:
			esc = false
		case inStr && b == '\\':
			esc = true
		case inStr && b == '"':
			inStr = false
		case inStr:
		case b == '"':
			inStr = true
		case b == '{' || b == '[':
			depth++
		case b == '}' || b == ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		}
	}
	return len(p), false
}

// lspHeaderOf reads a Content-Length header block: where the body starts
// and its length.
func lspHeaderOf(p []byte) (body int, length uint64, ok bool) {
	haveLength := false
	for pos := 0; ; {
		i := bytes.IndexByte(p[pos:], '\n')
		if i < 0 || pos+i+1 > maxHead {
			return 0, 0, false
		}
		line := trimCR(p[pos : pos+i])
		pos += i + 1
		if len(line) == 0 {
			return pos, length, haveLength
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return 0, 0, false
		}
		if asciiEqualFold(line[:colon], "content-length") {
			n, ok := parseDecimal(bytes.Trim(line[colon+1:], " \t"))
			if !ok || n < 0 {
				return 0, 0, false
			}
			length, haveLength = uint64(n), true
		}
	}
}
