package stream

import (
	"bytes"

	"github.com/reqprof/reqprof/collector/route"
)

const (
	// maxHead bounds an HTTP/1 request head (request line and headers),
	// the first line of a connection, and a trailer or LSP header line.
	maxHead = 64 << 10
	// maxChunkLine bounds a chunk-size line with its extensions, as Go's
	// net/http does.
	maxChunkLine = 4 << 10
	// maxMethod bounds an HTTP method, and the first word of a line-based
	// protocol.
	maxMethod = 32
)

type h1State struct {
	name    []byte // the HTTP name of the request being read
	post    bool
	length  int64 // Content-Length, -1 when none
	te      bool  // Transfer-Encoding was given
	chunked bool  // ... and chunked is its last coding
	h2c     bool  // the request asks to upgrade to h2c
	upgrade bool  // the last request asked for h2c: the HTTP/2 preface may follow
	calls   int   // JSON-RPC messages its body held
}

// h1Head reads a request head: the request line, headers and the blank
// line that ends them, after any blank lines. Lines end in CR LF or LF.
func (c *Conn) h1Head(data []byte) (int, bool) {
	if len(data) == 0 {
		return 0, false
	}
	if c.scan == 0 {
		if c.h1.upgrade {
			// An Upgrade: h2c request was answered with 101 if the
			// client's next bytes are the HTTP/2 preface.
			n := min(len(data), len(h2Preface))
			if string(data[:n]) == h2Preface[:n] {
				if n < len(h2Preface) {
					return 0, false
				}
				c.h1.upgrade = false
				c.startH2(1) // the upgrade request was stream 1
				return n, true
			}
			c.h1.upgrade = false
		}
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
		c.h1 = h1State{name: c.h1.name[:0], length: -1}
	}
	for {
		i := indexLF(data, c.scan)
		if i < 0 || i+1 > maxHead {
			if i >= 0 || len(data) >= maxHead {
				c.fail(ErrBound, "request head longer than %d bytes", maxHead)
				return 0, false
			}
			if c.mark == 0 && !methodPrefix(data) {
				// Not waiting for a line that cannot be a request's.
				c.fail(ErrMalformed, "request line %q", clip(data))
				return 0, false
			}
			c.scan = len(data)
			return 0, false
		}
		line := trimCR(data[c.mark:i])
		first := c.mark == 0
		c.scan, c.mark = i+1, i+1
		switch {
		case first:
			method, target, ok := requestLine(line)
			if !ok {
				c.fail(ErrMalformed, "request line %q", clip(line))
				return 0, false
			}
			c.h1.name = route.AppendRequestName(c.h1.name[:0], method, target)
			c.h1.post = string(method) == "POST"
		case len(line) == 0:
			c.h1HeadDone()
			return i + 1, true
		case !c.h1Header(line):
			return 0, false
		}
	}
}

// methodPrefix reports whether data, the start of a request line, starts
// as one does: with a method, or the start of one.
func methodPrefix(data []byte) bool {
	for i, b := range data {
		switch {
		case b == ' ':
			return i > 0
		case !isToken(b) || i == maxMethod:
			return false
		}
	}
	return true
}

// requestLine splits "METHOD target HTTP/1.x".
func requestLine(line []byte) (method, target []byte, ok bool) {
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || sp > maxMethod {
		return nil, nil, false
	}
	method, rest := line[:sp], line[sp+1:]
	for _, b := range method {
		if !isToken(b) {
			return nil, nil, false
		}
	}
	sp = bytes.IndexByte(rest, ' ')
	if sp <= 0 {
		return nil, nil, false
	}
	target, version := rest[:sp], rest[sp+1:]
	if len(version) != len("HTTP/1.1") || string(version[:7]) != "HTTP/1." || !isDigit(version[7]) {
		return nil, nil, false
	}
	return method, target, true
}

// h1Header reads the header fields that frame the body or upgrade the
// connection.
func (c *Conn) h1Header(line []byte) bool {
	if line[0] == ' ' || line[0] == '\t' {
		return true // obsolete folding: more of a value not read
	}
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		c.fail(ErrMalformed, "header line %q", clip(line))
		return false
	}
	name := line[:colon]
	switch len(name) {
	case len("content-length"), len("transfer-encoding"), len("upgrade"):
	default:
		return true
	}
	value := bytes.Trim(line[colon+1:], " \t")
	switch {
	case asciiEqualFold(name, "content-length"):
		n, ok := parseDecimal(value)
		if !ok || c.h1.length >= 0 && n != c.h1.length {
			c.fail(ErrMalformed, "Content-Length %q", clip(value))
			return false
		}
		c.h1.length = n
	case asciiEqualFold(name, "transfer-encoding"):
		c.h1.te = true
		last := value
		if i := bytes.LastIndexByte(value, ','); i >= 0 {
			last = bytes.Trim(value[i+1:], " \t")
		}
		c.h1.chunked = asciiEqualFold(last, "chunked")
	case asciiEqualFold(name, "upgrade"):
		for token := range bytes.SplitSeq(value, []byte(",")) {
			if asciiEqualFold(bytes.Trim(token, " \t"), "h2c") {
				c.h1.h2c = true
			}
		}
	}
	return true
}

// parseDecimal reads a Content-Length: 1 to 18 digits.
func parseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, d := range b {
		if !isDigit(d) {
			return 0, false
		}
		n = n*10 + int64(d-'0')
	}
	return n, true
}

// h1HeadDone starts the body the head announced, or ends the request.
func (c *Conn) h1HeadDone() {
	switch {
	case c.h1.te && !c.h1.chunked:
		c.fail(ErrMalformed, "Transfer-Encoding does not end in chunked")
		return
	case c.h1.chunked:
		c.st = sH1ChunkLine
	case c.h1.length > 0:
		c.st, c.left = sH1Body, uint64(c.h1.length)
	default:
		c.h1Done()
		return
	}
	c.hold = true
	if c.h1.post {
		c.jsStart(jsHTTP)
	}
}

// h1Done ends a request whose body, if any, came in whole: it counts once,
// or once per JSON-RPC message its body held.
func (c *Conn) h1Done() {
	if c.js.on {
		c.jsFinish()
	}
	if c.h1.calls == 0 {
		c.emit(c.h1.name, HTTP1, false, false)
	}
	c.release()
	c.h1.upgrade = c.h1.h2c
	c.st = sH1Head
}

func (c *Conn) h1Body(data []byte) (int, bool) {
	n := c.pass(data)
	if c.err != nil {
		return n, false
	}
	if c.left == 0 {
		c.h1Done()
		return n, true
	}
	return n, n > 0
}

func (c *Conn) h1ChunkLine(data []byte) (int, bool) {
	if len(data) == 0 {
		return 0, false
	}
	line, n, ok := c.line(data, maxChunkLine, "chunk-size line")
	if !ok {
		return 0, false
	}
	size, ok := parseChunkSize(line)
	if !ok {
		c.fail(ErrMalformed, "chunk-size line %q", clip(line))
		return 0, false
	}
	if size == 0 {
		if c.js.on {
			c.jsFinish() // the trailers are no part of the body
		}
		c.st = sH1Trailers
		return n, true
	}
	c.st, c.left = sH1ChunkData, size
	return n, true
}

// parseChunkSize reads the hex size that starts a chunk-size line; what
// follows it must be nothing, or whitespace or the ';' of an extension.
func parseChunkSize(line []byte) (uint64, bool) {
	var size uint64
	i := 0
	for ; i < len(line); i++ {
		var d byte
		switch b := line[i]; {
		case isDigit(b):
			d = b - '0'
		case 'a' <= b && b <= 'f':
			d = b - 'a' + 10
		case 'A' <= b && b <= 'F':
			d = b - 'A' + 10
		default:
			goto end
		}
		if i == 15 {
			return 0, false
		}
		size = size<<4 | uint64(d)
	}
end:
	if i == 0 || i < len(line) && line[i] != ';' && line[i] != ' ' && line[i] != '\t' {
		return 0, false
	}
	return size, true
}

func (c *Conn) h1ChunkData(data []byte) (int, bool) {
	n := c.pass(data)
	if c.err != nil {
		return n, false
	}
	if c.left == 0 {
		c.st = sH1ChunkEnd
		return n, true
	}
	return n, n > 0
}

// h1ChunkEnd reads the CR LF after a chunk's data.
func (c *Conn) h1ChunkEnd(data []byte) (int, bool) {
	n, ok := c.crlf(data, "chunk data")
	if ok {
		c.st = sH1ChunkLine
	}
	return n, ok
}

// crlf reads a line end: CR LF, or a bare LF.
func (c *Conn) crlf(data []byte, after string) (int, bool) {
	switch {
	case len(data) == 0:
		return 0, false
	case data[0] == '\n':
		return 1, true
	case data[0] == '\r' && len(data) == 1:
		return 0, false
	case data[0] == '\r' && data[1] == '\n':
		return 2, true
	}
	c.fail(ErrMalformed, "%s not followed by CR LF", after)
	return 0, false
}

// h1Trailers reads the trailer lines after the last chunk, up to the blank
// line that ends the request.
func (c *Conn) h1Trailers(data []byte) (int, bool) {
	if len(data) == 0 {
		return 0, false
	}
	line, n, ok := c.line(data, maxHead, "trailer line")
	if !ok {
		return 0, false
	}
	if len(line) == 0 {
		c.h1Done()
	}
	return n, true
}
