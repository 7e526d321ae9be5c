package route

import "bytes"

// maxCommand bounds a Redis command name; the longest built-in ones are
// about 20 bytes.
const maxCommand = 32

var crlf = []byte("\r\n")

// redisName names a Redis request by its command: the first bulk string of a
// RESP array, or the first word of an inline command line.
func redisName(p []byte) (string, bool) {
	if len(p) > 0 && p[0] == '*' {
		return respCommand(p[1:])
	}
	end := bytes.IndexAny(p, " \r\n")
	if end < 0 {
		return "", false
	}
	return command(p[:end])
}

// respCommand reads "N\r\n$len\r\nCMD" (the array's '*' already read); the
// command's own CRLF may lie past the cut, its length says where it ends.
func respCommand(p []byte) (string, bool) {
	n, p, ok := respLength(p)
	if !ok || n < 1 || len(p) == 0 || p[0] != '$' {
		return "", false
	}
	size, p, ok := respLength(p[1:])
	if !ok || size > len(p) {
		return "", false
	}
	return command(p[:size])
}

// respLength reads a decimal length and its CRLF. Nine digits are more than
// any length in a captured payload and cannot overflow an int.
func respLength(p []byte) (n int, rest []byte, ok bool) {
	i := 0
	for ; i < len(p) && isDigit(p[i]); i++ {
		if i == 9 {
			return 0, nil, false
		}
		n = n*10 + int(p[i]-'0')
	}
	if i == 0 || !bytes.HasPrefix(p[i:], crlf) {
		return 0, nil, false
	}
	return n, p[i+len(crlf):], true
}

// command returns a command name uppercased, if c looks like one: a letter,
// then letters or the '.', '_', '-' of module and compound commands
// ("JSON.GET", "GEORADIUS_RO", "RESTORE-ASKING").
func command(c []byte) (string, bool) {
	name, ok := AppendRedisCommand(nil, c)
	return string(name), ok
}

// AppendRedisCommand appends to dst the Redis command c uppercased, as Name
// names a RESP array by its first bulk string and an inline command by its
// first word, and reports whether c looks like a command (1 to 32 letters,
// '.', '_' or '-', starting with a letter); dst is returned as is when not.
func AppendRedisCommand(dst, c []byte) ([]byte, bool) {
	if len(c) == 0 || len(c) > maxCommand || !isLetter(c[0]) {
		return dst, false
	}
	for _, b := range c {
		if !isLetter(b) && b != '.' && b != '_' && b != '-' {
			return dst, false
		}
	}
	for _, b := range c {
		if 'a' <= b && b <= 'z' {
			b -= 'a' - 'A'
		}
		dst = append(dst, b)
	}
	return dst, true
}
