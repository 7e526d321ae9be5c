package route

import (
	"bytes"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// maxScheme bounds the URI scheme shown for resources/read.
const maxScheme = 32

// rpcCall is what a possibly truncated JSON-RPC request shows of itself. For
// a key given more than once the first occurrence counts, so a field found
// before a cut is the field of the whole request.
type rpcCall struct {
	jsonrpc2 bool   // "jsonrpc":"2.0" at the top level
	method   string // top-level "method", "" when absent, not a string, or cut
	name     string // params.name, likewise
	scheme   string // scheme of params.uri with its ':', or ""
	batch    bool   // the request is an array, named by its first element
}

// words names the call: its method, then the tool, prompt or resource scheme
// it concerns, then "(batch)"; nil when it is not a JSON-RPC 2.0 request.
func (c rpcCall) words() []string {
	if !c.jsonrpc2 || c.method == "" {
		return nil
	}
	words := []string{c.method}
	switch {
	case (c.method == "tools/call" || c.method == "prompts/get") && c.name != "":
		words = append(words, c.name)
	case c.method == "resources/read" && c.scheme != "":
		words = append(words, c.scheme)
	}
	if c.batch {
		words = append(words, "(batch)")
	}
	return words
}

// rawJSONRPCName names JSON-RPC sent straight on the connection, without
// HTTP; JSON without "jsonrpc":"2.0" is not taken for it.
func rawJSONRPCName(p []byte) (string, bool) {
	s := scanner{b: p}
	if c, ok := s.peek(); !ok || c != '{' && c != '[' {
		return "", false
	}
	call := scanRPC(p)
	if !call.jsonrpc2 {
		return "", false
	}
	words := call.words()
	if len(words) == 0 {
		return "jsonrpc", true
	}
	return join(words[0], words[1:]), true
}

// AppendJSONRPC appends to name, the name so far (empty for JSON-RPC raw on
// the connection, or the HTTP name of the POST that carries it), the words
// that name one JSON-RPC message msg, an object that may be cut anywhere, as
// Name names a call: its method, then the tool, prompt or resource scheme it
// concerns, each after a space (the first without one when name is empty),
// stopping at 128 bytes. A batch is for the caller to split: each element is
// a message of its own. rpc is false, and name returned as is, when msg is
// not a JSON-RPC 2.0 object; method is false, and name returned as is, when
// it has no method found before the cut (a response, or a cut method).
func AppendJSONRPC(name, msg []byte) (_ []byte, rpc, method bool) {
	s := scanner{b: msg}
	if c, ok := s.peek(); !ok || c != '{' {
		return name, false, false
	}
	call := scanRPC(msg)
	if !call.jsonrpc2 {
		return name, false, false
	}
	words := call.words()
	if len(words) == 0 {
		return name, true, false
	}
	return appendJoin(name, words), true, true
}

// JSONKeyIs reports whether the raw (still escaped) content of a JSON string
// decodes to key, as Name reads the keys of a JSON-RPC message.
func JSONKeyIs(raw []byte, key string) bool { return keyIs(raw, key) }

// scanRPC reads the JSON-RPC fields of the object (or of the first object of
// the array) that b holds, keeping whatever comes before b ends or stops
// being JSON.
func scanRPC(b []byte) rpcCall {
	var call rpcCall
	s := scanner{b: b}
	if c, ok := s.peek(); ok && c == '[' {
		call.batch = true
		s.i++
	}
	var seenJSONRPC, seenMethod, seenParams, seenName, seenURI bool
	params := func(key []byte) bool {
		switch {
		case !seenName && keyIs(key, "name"):
			seenName = true
			raw, isString, ok := s.stringValue()
			if isString {
				call.name = word(raw, maxWord, jsonRune)
			}
			return ok
		case !seenURI && keyIs(key, "uri"):
			seenURI = true
			raw, isString, ok := s.stringValue()
			if isString {
				call.scheme = uriScheme(raw, jsonRune)
			}
			return ok
		}
		return s.skipValue()
	}
	s.object(func(key []byte) bool {
		switch {
		case !seenJSONRPC && keyIs(key, "jsonrpc"):
			seenJSONRPC = true
			raw, isString, ok := s.stringValue()
			if isString {
				version, complete := text(raw, len("2.0"), jsonRune)
				call.jsonrpc2 = complete && version == "2.0"
			}
			return ok
		case !seenMethod && keyIs(key, "method"):
			seenMethod = true
			raw, isString, ok := s.stringValue()
			if isString {
				call.method = word(raw, maxWord, jsonRune)
			}
			return ok
		case !seenParams && keyIs(key, "params"):
			seenParams = true
			if c, ok := s.peek(); ok && c == '{' {
				return s.object(params)
			}
		}
		return s.skipValue()
	})
	return call
}

// uriScheme returns the scheme of the URI whose (JSON-escaped or plain) text
// is b, with its ':', or "" when b does not start with one.
func uriScheme(b []byte, next func([]byte) (rune, int)) string {
	start, _ := text(b, maxScheme+1, next)
	if n := schemeLen([]byte(start)); n > 0 && n < len(start) && start[n] == ':' {
		return start[:n+1]
	}
	return ""
}

// keyIs reports whether the raw (still escaped) key decodes to want.
func keyIs(raw []byte, want string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == want // the common case, without decoding
	}
	got, complete := text(raw, len(want), jsonRune)
	return complete && got == want
}

// scanner walks JSON that may end anywhere or be malformed. Its methods report
// ok=false when the text ends, or stops being JSON, before what they read does;
// callers then stop and keep what they found. Nesting is counted, not
// recursed into, so no input can exhaust the stack.
type scanner struct {
	b []byte
	i int
}

// peek skips whitespace and returns the next byte.
func (s *scanner) peek() (byte, bool) {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return s.b[s.i], true
		}
	}
	return 0, false
}

// object walks the members of the object at the next byte, calling member
// with each raw key while the scanner is at the member's value; member must
// read the value and report whether it could.
func (s *scanner) object(member func(key []byte) bool) bool {
	if c, ok := s.peek(); !ok || c != '{' {
		return false
	}
	s.i++
	for {
		if c, ok := s.peek(); ok && c == '}' {
			s.i++
			return true
		}
		key, ok := s.str()
		if !ok {
			return false
		}
		if c, ok := s.peek(); !ok || c != ':' {
			return false
		}
		s.i++
		if !member(key) {
			return false
		}
		c, ok := s.peek()
		if !ok {
			return false
		}
		s.i++
		switch c {
		case ',':
		case '}':
			return true
		default:
			return false
		}
	}
}

// stringValue reads the next value, returning its raw text when it is a string.
func (s *scanner) stringValue() (raw []byte, isString, ok bool) {
	if c, ok := s.peek(); ok && c == '"' {
		raw, ok := s.str()
		return raw, ok, ok
	}
	return nil, false, s.skipValue()
}

// str reads the string at the next byte and returns its content, escapes
// left in.
func (s *scanner) str() ([]byte, bool) {
	if c, ok := s.peek(); !ok || c != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			j++ // the escaped byte cannot end the string
		case '"':
			s.i = j + 1
			return s.b[start:j], true
		}
	}
	s.i = len(s.b)
	return nil, false
}

// skipValue reads past the next value of any kind.
func (s *scanner) skipValue() bool {
	c, ok := s.peek()
	if !ok {
		return false
	}
	switch c {
	case '"':
		_, ok := s.str()
		return ok
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, ok := s.str(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	}
	// A number or literal runs to the next delimiter; one that reaches the
	// end of b may itself be cut.
	start := s.i
	for s.i < len(s.b) && !isDelimiter(s.b[s.i]) {
		s.i++
	}
	return s.i > start && s.i < len(s.b)
}

func isDelimiter(c byte) bool {
	switch c {
	case ',', ':', '{', '}', '[', ']', '"', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// jsonRune decodes the rune at the start of a JSON string's content,
// resolving escapes as encoding/json does: a surrogate that is not half of
// a valid \u pair becomes U+FFFD. A malformed escape is U+FFFD too.
func jsonRune(b []byte) (rune, int) {
	if b[0] != '\\' || len(b) < 2 {
		return utf8.DecodeRune(b)
	}
	switch b[1] {
	case '"', '\\', '/':
		return rune(b[1]), 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r, ok := hex4(b[2:])
		if !ok {
			return utf8.RuneError, 2
		}
		if !utf16.IsSurrogate(r) {
			return r, 6
		}
		if len(b) >= 12 && b[6] == '\\' && b[7] == 'u' {
			if low, ok := hex4(b[8:]); ok {
				if pair := utf16.DecodeRune(r, low); pair != unicode.ReplacementChar {
					return pair, 12
				}
			}
		}
		return unicode.ReplacementChar, 6
	}
	return utf8.RuneError, 2
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		var v byte
		switch {
		case isDigit(c):
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

// RPCFields is what a JSON-RPC message, possibly cut, shows of the top-level
// members that say what it is: its id's raw text, and whether it has a
// method, a result or an error. A member found before a cut counts, so ID
// is whole or nil: an id cut by the end of msg is no id.
type RPCFields struct {
	ID       []byte // the id's JSON text as sent (a string with its quotes), nil when absent or cut
	Method   bool
	Result   bool // "result" or "error": a response
	Complete bool // the object was read to its end
	JSONRPC2 bool
	NullID   bool // "id":null, which answers a request whose id could not be read
}

// ReadRPCFields reads the top-level members of the object msg starts with.
func ReadRPCFields(msg []byte) RPCFields {
	var f RPCFields
	var seenID, seenMethod, seenResult, seenJSONRPC bool
	s := scanner{b: msg}
	f.Complete = s.object(func(key []byte) bool {
		switch {
		case !seenID && keyIs(key, "id"):
			seenID = true
			c, ok := s.peek()
			if !ok {
				return false
			}
			start := s.i
			if !s.skipValue() {
				return false
			}
			switch raw := msg[start:s.i]; {
			case c == '"' || c == '-' || isDigit(c):
				f.ID = raw
			case string(raw) == "null":
				f.NullID = true
			}
			return true
		case !seenMethod && keyIs(key, "method"):
			seenMethod, f.Method = true, true
		case !seenResult && (keyIs(key, "result") || keyIs(key, "error")):
			seenResult, f.Result = true, true
		case !seenJSONRPC && keyIs(key, "jsonrpc"):
			seenJSONRPC = true
			raw, isString, ok := s.stringValue()
			if isString {
				version, complete := text(raw, len("2.0"), jsonRune)
				f.JSONRPC2 = complete && version == "2.0"
			}
			return ok
		}
		return s.skipValue()
	})
	return f
}
