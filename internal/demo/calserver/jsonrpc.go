package calserver

import (
	"unicode/utf16"
	"unicode/utf8"
)

// rpcCall is what the server needs of a JSON-RPC 2.0 request body: the
// top-level "method" and params."name" as raw string contents (between the
// quotes, escapes not yet decoded), and the raw "id" value. Its slices point
// into the body. Only the first of repeated keys counts.
type rpcCall struct {
	method []byte // nil if absent or not a string
	name   []byte // params."name"; nil if absent or not a string
	id     []byte // nil if absent
}

// parseRPC reads body as a JSON-RPC 2.0 request: a JSON object with
// "jsonrpc":"2.0" and a string "method". It does not allocate. The scan checks
// JSON's structure (objects, arrays, strings) but not the spelling of numbers
// and literals; a batch (an array) is not a request here.
func parseRPC(body []byte) (rpcCall, bool) {
	var call rpcCall
	var seenVersion, seenMethod, seenID, seenParams, version2 bool
	s := jsonScanner{b: body}
	ok := s.object(func(key []byte) bool {
		switch {
		case !seenVersion && keyIs(key, "jsonrpc"):
			seenVersion = true
			if s.peek() == '"' {
				v, ok := s.str()
				version2 = ok && keyIs(v, "2.0")
				return ok
			}
		case !seenMethod && keyIs(key, "method"):
			seenMethod = true
			if s.peek() == '"' {
				var ok bool
				call.method, ok = s.str()
				return ok
			}
		case !seenID && keyIs(key, "id"):
			seenID = true
			start := s.i
			if !s.skipValue() {
				return false
			}
			call.id = s.b[start:s.i]
			return true
		case !seenParams && keyIs(key, "params"):
			seenParams = true
			if s.peek() == '{' {
				seenName := false
				return s.object(func(key []byte) bool {
					if !seenName && keyIs(key, "name") {
						seenName = true
						if s.peek() == '"' {
							var ok bool
							call.name, ok = s.str()
							return ok
						}
					}
					return s.skipValue()
				})
			}
		}
		return s.skipValue()
	})
	s.space()
	if !ok || s.i != len(s.b) || !version2 || call.method == nil {
		return rpcCall{}, false
	}
	return call, true
}

// jsonScanner walks JSON text without building anything.
type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek is the next byte after white space, or 0 at the end.
func (s *jsonScanner) peek() byte {
	s.space()
	if s.i == len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// object scans an object, calling member with each key once the scanner is
// at the key's value; member must consume the value.
func (s *jsonScanner) object(member func(key []byte) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		if s.peek() != '"' {
			return false
		}
		key, ok := s.str()
		if !ok || s.peek() != ':' {
			return false
		}
		s.i++
		s.space()
		if !member(key) {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// str scans a string at s.i and returns its raw contents.
func (s *jsonScanner) str() ([]byte, bool) {
	s.i++ // the opening quote
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\':
			s.i += 2
		case c < 0x20:
			return nil, false
		default:
			s.i++
		}
	}
	return nil, false
}

// skipValue scans any value. Containers are matched by depth alone: the
// bracket kinds are not paired up.
func (s *jsonScanner) skipValue() bool {
	depth := 0
	for {
		switch c := s.peek(); c {
		case 0:
			return false
		case '"':
			if _, ok := s.str(); !ok {
				return false
			}
		case '{', '[':
			s.i++
			depth++
			continue
		case '}', ']':
			if depth == 0 {
				return false
			}
			s.i++
			depth--
		case ',', ':':
			if depth == 0 {
				return false
			}
			s.i++
			continue
		default: // a number or a literal
			start := s.i
			for s.i < len(s.b) && isScalarByte(s.b[s.i]) {
				s.i++
			}
			if s.i == start {
				return false
			}
		}
		if depth == 0 {
			return true
		}
	}
}

func isScalarByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '+' || c == '.'
}

// keyIs reports whether the raw string contents decode to want.
func keyIs(raw []byte, want string) bool {
	if !hasEscape(raw) {
		return string(raw) == want
	}
	var buf [64]byte
	return string(appendUnescaped(buf[:0], raw)) == want
}

func hasEscape(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' {
			return true
		}
	}
	return false
}

// appendUnescaped appends raw string contents to dst with JSON escapes
// decoded; a malformed escape or a lone surrogate becomes U+FFFD.
func appendUnescaped(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		if i+1 == len(raw) {
			return utf8.AppendRune(dst, utf8.RuneError)
		}
		e := raw[i+1]
		i += 2
		switch e {
		case '"', '\\', '/':
			dst = append(dst, e)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(raw[i:])
			if !ok {
				dst = utf8.AppendRune(dst, utf8.RuneError)
				continue
			}
			i += 4
			if utf16.IsSurrogate(r) {
				lo, ok := rune(0), false
				if i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					lo, ok = hex4(raw[i+2:])
				}
				if pair := utf16.DecodeRune(r, lo); ok && pair != utf8.RuneError {
					r = pair
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			dst = utf8.AppendRune(dst, utf8.RuneError)
		}
	}
	return dst
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
