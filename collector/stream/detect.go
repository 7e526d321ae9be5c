package stream

import "github.com/reqprof/reqprof/collector/route"

// h2Preface is what an HTTP/2 client sends first.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// lspHeader starts a Content-Length framed (LSP-style) JSON-RPC message.
const lspHeader = "content-length:"

// detect finds the protocol from the first bytes of the stream. It waits
// until they tell: a prefix of the HTTP/2 preface or of "Content-Length:",
// and the first line of a line-based protocol, must come in whole.
func (c *Conn) detect(data []byte) (int, bool) {
	if len(data) == 0 {
		return 0, false
	}
	if n := leadingSpace(data); n > 0 {
		return n, true
	}
	switch b := data[0]; {
	case b == 0x16:
		if len(data) < 2 {
			return 0, false
		}
		if data[1] == 0x03 {
			c.fail(ErrTLS, "")
		} else {
			c.fail(ErrUnknown, "first bytes %#x %#x", data[0], data[1])
		}
		return 0, false
	case b == '*':
		c.proto, c.st = RESP, sRESPStart
		return 0, true
	case b == '{' || b == '[':
		c.proto, c.st = JSONRPC, sJSONRaw
		c.jsStart(jsRaw)
		return 0, true
	case b == 1: // FastCGI's version
		return c.detectFastCGI(data)
	}
	if n := min(len(data), len(h2Preface)); string(data[:n]) == h2Preface[:n] {
		if n < len(h2Preface) {
			return 0, false
		}
		c.startH2(0)
		return n, true
	}
	if c.joined && h2Frames(data) {
		// HTTP/2 joined after its preface: frames still delimit the
		// streams, but the header compression state is lost.
		c.startH2(0)
		c.h2.blind = true
		return 0, true
	}
	if n := min(len(data), len(lspHeader)); asciiEqualFold(data[:n], lspHeader[:n]) {
		if n < len(lspHeader) {
			return 0, false
		}
		c.proto, c.st = JSONRPC, sLSPHead
		return 0, true
	}
	return c.detectLine(data)
}

// detectLine tells an HTTP/1 request line from an inline Redis command:
// both start with a word of letters, and only the first ends in HTTP/1.x.
func (c *Conn) detectLine(data []byte) (int, bool) {
	if !isLetter(data[0]) {
		c.fail(ErrUnknown, "first byte %#x", data[0])
		return 0, false
	}
	w := 0
	for ; w < len(data) && data[w] != ' ' && data[w] != '\r' && data[w] != '\n'; w++ {
		if !isToken(data[w]) || w == maxMethod {
			c.fail(ErrUnknown, "first word %q", clip(data[:w+1]))
			return 0, false
		}
	}
	line, _, ok := c.line(data, maxHead, "first line")
	if !ok {
		return 0, false
	}
	if _, _, ok := requestLine(line); ok {
		c.proto, c.st = HTTP1, sH1Head
		return 0, true
	}
	if _, ok := route.AppendRedisCommand(nil, data[:w]); ok {
		c.proto, c.st = RESP, sRESPStart
		return 0, true
	}
	c.fail(ErrUnknown, "first line %q", clip(line))
	return 0, false
}

func leadingSpace(data []byte) int {
	n := 0
	for n < len(data) && isSpace(data[n]) {
		n++
	}
	return n
}

func isSpace(b byte) bool  { return b == ' ' || b == '\t' || b == '\r' || b == '\n' }
func isDigit(b byte) bool  { return '0' <= b && b <= '9' }
func isLetter(b byte) bool { return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' }

// isToken reports a tchar of RFC 9110, which methods and header names are
// made of.
func isToken(b byte) bool {
	if isDigit(b) || isLetter(b) {
		return true
	}
	switch b {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// asciiEqualFold reports whether b equals lower, a lowercase ASCII string,
// ignoring case.
func asciiEqualFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i, x := range b {
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if x != lower[i] {
			return false
		}
	}
	return true
}

// clip shortens what an error quotes.
func clip(b []byte) []byte { return b[:min(len(b), 64)] }

// h2Frames reports whether data, taken where a connection was joined after
// it opened, is HTTP/2 client frames: at least one whole frame, each of a
// known type with a length and stream that type allows, chained to the end
// of data or into the last frame's payload.
func h2Frames(data []byte) bool {
	whole := 0
	for len(data) >= 9 {
		f := parseFrameHeader(data)
		length := f.length
		if f.reserved || length > 1<<14 {
			return false // the reserved bit, or past the default frame size
		}
		if known, ok := f.fromClient(); !known || !ok {
			return false
		}
		if 9+length > len(data) {
			break
		}
		whole++
		data = data[9+length:]
	}
	return whole > 0
}
