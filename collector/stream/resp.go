package stream

import (
	"bytes"

	"github.com/reqprof/reqprof/collector/route"
)

const (
	// maxRESPLine bounds an array or bulk length line ("*3\r\n").
	maxRESPLine = 32
	// maxArgs and maxBulk are Redis's own bounds on a command's arguments
	// and a bulk string's length.
	maxArgs = 1 << 20
	maxBulk = 512 << 20
	// maxInline bounds an inline command line, as Redis does.
	maxInline = 64 << 10
	// maxCommand is route's bound on a command name: a longer first
	// argument is no command and is passed over.
	maxCommand = 32
)

type respState struct {
	name  []byte // the name of the command being read
	args  int    // its arguments still to read
	first bool   // the next argument is the command
	size  int    // the command's length
}

// respStart reads the "*N" that starts a command, or an inline command.
func (c *Conn) respStart(data []byte) (int, bool) {
	if len(data) == 0 {
		return 0, false
	}
	if data[0] != '*' {
		return c.respInline(data)
	}
	n, count, ok := c.respLength(data, "array length")
	if !ok {
		return 0, false
	}
	if count <= 0 {
		return n, true // Redis reads "*0" and "*-1" as no command
	}
	if count > maxArgs {
		c.fail(ErrBound, "command of %d arguments", count)
		return 0, false
	}
	c.resp.args, c.resp.first = int(count), true
	c.st = sRESPBulkLine
	return n, true
}

// respLength reads a "*N\r\n" or "$N\r\n" line, which must end in CR LF.
func (c *Conn) respLength(data []byte, what string) (n int, v int64, ok bool) {
	line, n, ok := c.line(data, maxRESPLine, what)
	if !ok {
		return 0, 0, false
	}
	digits := line[1:]
	neg := len(digits) > 0 && digits[0] == '-'
	if neg {
		digits = digits[1:]
	}
	if data[n-2] != '\r' || len(digits) == 0 || len(digits) > 10 {
		c.fail(ErrMalformed, "%s %q", what, clip(line))
		return 0, 0, false
	}
	for _, d := range digits {
		if !isDigit(d) {
			c.fail(ErrMalformed, "%s %q", what, clip(line))
			return 0, 0, false
		}
		v = v*10 + int64(d-'0')
	}
	if neg {
		v = -v
	}
	return n, v, true
}

// respBulkLine reads the "$N" that starts an argument.
func (c *Conn) respBulkLine(data []byte) (int, bool) {
	if len(data) == 0 {
		return 0, false
	}
	if data[0] != '$' {
		c.fail(ErrMalformed, "argument starting with %q, not a bulk string", data[0])
		return 0, false
	}
	n, size, ok := c.respLength(data, "bulk length")
	if !ok {
		return 0, false
	}
	if size < 0 || size > maxBulk {
		c.fail(ErrMalformed, "bulk length %d", size)
		return 0, false
	}
	if c.resp.first {
		if size <= maxCommand {
			c.resp.size = int(size)
			c.st = sRESPCommand
			return n, true
		}
		c.resp.name = c.portName(c.resp.name[:0])
	}
	c.left = uint64(size)
	c.st = sRESPBulkSkip
	return n, true
}

// respCommand reads the first argument, which names the command.
func (c *Conn) respCommand(data []byte) (int, bool) {
	size := c.resp.size
	if len(data) < size+2 {
		c.need = size + 2
		return 0, false
	}
	if data[size] != '\r' || data[size+1] != '\n' {
		c.fail(ErrMalformed, "bulk string not followed by CR LF")
		return 0, false
	}
	name, ok := route.AppendRedisCommand(c.resp.name[:0], data[:size])
	if !ok {
		name = c.portName(name[:0])
	}
	c.resp.name = name
	c.respArg()
	return size + 2, true
}

func (c *Conn) respBulkSkip(data []byte) (int, bool) {
	n := c.pass(data)
	if c.left == 0 {
		c.st = sRESPBulkEnd
		return n, true
	}
	return n, n > 0
}

func (c *Conn) respBulkEnd(data []byte) (int, bool) {
	if len(data) < 2 {
		c.need = 2
		return 0, false
	}
	if data[0] != '\r' || data[1] != '\n' {
		c.fail(ErrMalformed, "bulk string not followed by CR LF")
		return 0, false
	}
	c.respArg()
	return 2, true
}

// respArg ends an argument, and the command after its last.
func (c *Conn) respArg() {
	c.resp.first = false
	c.resp.args--
	if c.resp.args > 0 {
		c.st = sRESPBulkLine
		return
	}
	c.emit(c.resp.name, RESP, false, false)
	c.st = sRESPStart
}

// respInline reads an inline command: a line, named by its first word as
// route names it. A blank line is no command.
func (c *Conn) respInline(data []byte) (int, bool) {
	line, n, ok := c.line(data, maxInline, "inline command")
	if !ok {
		return 0, false
	}
	if len(bytes.Trim(line, " \t\r")) == 0 {
		return n, true
	}
	raw := data[:n-1] // route takes the word up to a space, CR or LF
	word := raw
	if i := bytes.IndexAny(raw, " \r"); i >= 0 {
		word = raw[:i]
	}
	name, ok := route.AppendRedisCommand(c.resp.name[:0], word)
	if !ok {
		name = c.portName(name[:0])
	}
	c.resp.name = name
	c.emit(name, RESP, false, false)
	return n, true
}
