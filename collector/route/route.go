package route

import (
	"bytes"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// maxName bounds every name, whatever the payload.
const maxName = 128

// maxWord bounds a name part taken from JSON (method, tool or prompt name);
// A2A's longest methods are about 35 bytes.
const maxWord = 48

var http2Preface = []byte("PRI * HTTP/2.0")

// Name returns the route name of a request from the first bytes read from its connection
// (payload, possibly truncated at any byte) and the connection's local port.
func Name(payload []byte, localPort uint16) string {
	port := ":" + strconv.Itoa(int(localPort))
	switch {
	case isTLS(payload):
		return "tls " + port
	case bytes.HasPrefix(payload, http2Preface):
		return "h2 " + port
	}
	if name, ok := fastCGIName(payload, localPort); ok {
		return name
	}
	if name, ok := httpName(payload); ok {
		return name
	}
	if name, ok := rawJSONRPCName(payload); ok {
		return name
	}
	if name, ok := redisName(payload); ok {
		return name
	}
	return port
}

// isTLS reports a TLS handshake record, which is how every TLS connection
// starts (the ClientHello).
func isTLS(p []byte) bool {
	return len(p) >= 2 && p[0] == 0x16 && p[1] == 0x03
}

// join appends words to name, each after a space, stopping at the first word
// that would make the name longer than maxName.
func join(name string, words []string) string {
	return string(appendJoin([]byte(name), words))
}

// appendJoin appends words to name (the whole name so far), each after a
// space (the first without one when name is empty), stopping at the first
// word that would make the name longer than maxName.
func appendJoin(name []byte, words []string) []byte {
	for _, w := range words {
		sep := 1
		if len(name) == 0 {
			sep = 0
		}
		if len(name)+sep+len(w) > maxName {
			break
		}
		if sep == 1 {
			name = append(name, ' ')
		}
		name = append(name, w...)
	}
	return name
}

// text returns b decoded rune by rune with next, every rune that would not
// print replaced by U+FFFD, cut to at most limit bytes; complete is false
// when it had to be cut.
func text(b []byte, limit int, next func([]byte) (rune, int)) (s string, complete bool) {
	out, complete := appendText(make([]byte, 0, limit), b, limit, next)
	return string(out), complete
}

// appendText appends to dst what text returns.
func appendText(dst, b []byte, limit int, next func([]byte) (rune, int)) (_ []byte, complete bool) {
	end := len(dst) + limit
	for len(b) > 0 {
		if c := b[0]; ' ' <= c && c <= '~' && c != '\\' {
			// Printable ASCII, which both decoders return as it is.
			if len(dst) == end {
				return dst, false
			}
			dst = append(dst, c)
			b = b[1:]
			continue
		}
		r, size := next(b)
		if !unicode.IsPrint(r) {
			r = utf8.RuneError
		}
		if len(dst)+utf8.RuneLen(r) > end {
			return dst, false
		}
		dst = utf8.AppendRune(dst, r)
		b = b[size:]
	}
	return dst, true
}

// word is a name part: b as printable text, or {long} when that would take
// more than limit bytes.
func word(b []byte, limit int, next func([]byte) (rune, int)) string {
	return string(appendWord(nil, b, limit, next))
}

// appendWord appends to dst what word returns.
func appendWord(dst, b []byte, limit int, next func([]byte) (rune, int)) []byte {
	mark := len(dst)
	dst, complete := appendText(dst, b, limit, next)
	if !complete {
		return append(dst[:mark], "{long}"...)
	}
	return dst
}
