package route

import (
	"bytes"
	"unicode/utf8"
)

const (
	maxSegments = 8
	maxSegment  = 64
	maxPath     = 80
)

var httpMethods = [...]string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"}

// httpName names an HTTP/1.x request by its request line and, for a POST,
// the JSON-RPC call in its body.
func httpName(p []byte) (string, bool) {
	method, rest := httpMethod(p)
	if method == "" {
		return "", false
	}
	target, cut := rest, true
	if end := bytes.IndexAny(rest, " \r\n"); end >= 0 {
		// A line that ends without a version is HTTP/0.9 or a text
		// protocol sharing the verb (Redis "GET key"), not HTTP/1.x.
		if rest[end] != ' ' || !isHTTP1Version(rest[end+1:]) {
			return "", false
		}
		target, cut = rest[:end], false
	}
	name, ok, isPath := appendRequest(make([]byte, 0, maxName), []byte(method), target, cut)
	if !ok {
		return "", false
	}
	if method == "POST" && isPath {
		name = appendJoin(name, scanRPC(httpBody(p)).words())
	}
	return string(name), true
}

// maxMethod bounds the method shown in a name; longer ones become {long}.
// The methods Name recognises are all shorter.
const maxMethod = 32

// AppendRequestName appends to dst the name of an HTTP request with this
// method and (complete) request-target, as Name names a request line:
// "GET /users/{id}" for an origin-form or absolute-form target, "OPTIONS *",
// or the method alone for any other target (CONNECT's host:port, or none).
// Name only recognises the methods listed in the package doc; this shows any
// method as printable text, or {long} beyond 32 bytes.
func AppendRequestName(dst, method, target []byte) []byte {
	dst, _, _ = appendRequest(dst, method, target, false)
	return dst
}

// appendRequest appends the name of a request line whose target may be cut;
// ok is false when a cut target does not look like one, isPath when the
// target is a path (origin or absolute form).
func appendRequest(dst, method, target []byte, cut bool) (_ []byte, ok, isPath bool) {
	mark := len(dst)
	dst = appendWord(dst, method, maxMethod, utf8.DecodeRune)
	if string(target) == "*" {
		return append(dst, " *"...), true, false
	}
	path, isPath := requestPath(target)
	if !isPath {
		// A cut line gives no version to vouch that this is HTTP, and its
		// target does not look like one either.
		if cut {
			return dst[:mark], false, false
		}
		return dst, true, false
	}
	// The cut only clips the path when no query or fragment followed it.
	cut = cut && indexQuery(target) < 0
	return appendPath(append(dst, ' '), path, cut), true, true
}

// httpMethod returns the known method that p starts with, followed by a
// space, and what follows the space.
func httpMethod(p []byte) (string, []byte) {
	for _, m := range httpMethods {
		if len(p) > len(m) && string(p[:len(m)]) == m && p[len(m)] == ' ' {
			return m, p[len(m)+1:]
		}
	}
	return "", nil
}

// isHTTP1Version reports whether v starts with "HTTP/1.", or is a prefix of
// it that the cut left.
func isHTTP1Version(v []byte) bool {
	const version = "HTTP/1."
	n := min(len(v), len(version))
	return string(v[:n]) == version[:n]
}

// requestPath returns the path of an origin-form ("/path?q") or
// absolute-form ("http://host/path?q") target, query and fragment dropped;
// ok is false for any other target.
func requestPath(target []byte) (path []byte, ok bool) {
	if len(target) > 0 && target[0] == '/' {
		path = target
	} else if n := schemeLen(target); n > 0 && bytes.HasPrefix(target[n:], []byte("://")) {
		authorityAndPath := target[n+3:]
		if start := bytes.IndexAny(authorityAndPath, "/?#"); start >= 0 {
			path = authorityAndPath[start:]
		}
	} else {
		return nil, false
	}
	if end := indexQuery(path); end >= 0 {
		path = path[:end]
	}
	return path, true
}

// indexQuery returns the index of the first '?' or '#' in b, or -1.
func indexQuery(b []byte) int {
	for i, c := range b {
		if c == '?' || c == '#' {
			return i
		}
	}
	return -1
}

// schemeLen returns the length of the URI scheme (RFC 3986: a letter, then
// letters, digits, '+', '-' or '.') that s starts with, or 0.
func schemeLen(s []byte) int {
	for i, c := range s {
		switch {
		case isLetter(c):
		case i > 0 && (isDigit(c) || c == '+' || c == '-' || c == '.'):
		default:
			return i
		}
	}
	return len(s)
}

// appendPath appends a path ("" is "/") rendered segment by segment,
// collapsing identifiers and stopping at maxSegments or maxPath. When cut,
// the last segment may be partial and is shown as {cut}.
func appendPath(dst, path []byte, cut bool) []byte {
	const more = "/{more}"
	base := len(dst)
	segments := bytes.TrimPrefix(path, []byte("/"))
	for n := 0; ; n++ {
		segment, rest, found := segments, []byte(nil), false
		if i := bytes.IndexByte(segments, '/'); i >= 0 {
			segment, rest, found = segments[:i], segments[i+1:], true
		}
		mark := len(dst)
		dst = append(dst, '/')
		if found || !cut {
			dst = appendSegment(dst, segment)
		} else {
			dst = append(dst, "{cut}"...)
		}
		if n == maxSegments || len(dst)-base > maxPath {
			return append(dst[:mark], more...)
		}
		if !found {
			return dst
		}
		segments = rest
	}
}

func appendSegment(dst, segment []byte) []byte {
	if isID(segment) {
		return append(dst, "{id}"...)
	}
	return appendWord(dst, segment, maxSegment, utf8.DecodeRune)
}

// isID reports a segment that identifies an entity rather than a route.
func isID(s []byte) bool {
	return len(s) > 0 && every(s, isDigit) ||
		isUUID(s) ||
		len(s) >= 16 && every(s, isHex) ||
		len(s) >= 16 && every(s, isTokenByte) && some(s, isDigit) && some(s, isLetter)
}

// isUUID reports the 8-4-4-4-12 hex form, in either case.
func isUUID(s []byte) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return false
			}
		} else if !isHex(c) {
			return false
		}
	}
	return true
}

// httpBody returns what follows the header block, or nil when the headers
// run past the end of p.
func httpBody(p []byte) []byte {
	_, body, found := bytes.Cut(p, []byte("\r\n\r\n"))
	if !found {
		return nil
	}
	return body
}

func every(s []byte, is func(byte) bool) bool {
	for _, c := range s {
		if !is(c) {
			return false
		}
	}
	return true
}

func some(s []byte, is func(byte) bool) bool {
	for _, c := range s {
		if is(c) {
			return true
		}
	}
	return false
}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isHex(c byte) bool    { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// isTokenByte is the base64url alphabet, which random tokens and ULIDs use.
func isTokenByte(c byte) bool { return isDigit(c) || isLetter(c) || c == '-' || c == '_' }
