package route

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode"
	"unicode/utf8"
)

// printableName reports what every name must be: printable UTF-8, not empty,
// and within maxName bytes.
func printableName(t *testing.T, what, s string, limit int) {
	t.Helper()
	if len(s) > limit {
		t.Fatalf("%s %q is %d bytes, more than %d", what, s, len(s), limit)
	}
	if !utf8.ValidString(s) {
		t.Fatalf("%s %q is not UTF-8", what, s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			t.Fatalf("%s %q holds unprintable %U", what, s, r)
		}
	}
}

func FuzzName(f *testing.F) {
	for _, tt := range nameTests {
		f.Add([]byte(tt.payload), tt.port)
		f.Add([]byte(capture(tt.payload)), tt.port)
	}
	get := nginxGET(f)
	f.Add([]byte(get), uint16(0))
	f.Add([]byte(get[:256]), uint16(9000))
	f.Fuzz(func(t *testing.T, payload []byte, port uint16) {
		name := Name(payload, port)
		if name == "" {
			t.Fatalf("Name(%q) is empty", payload)
		}
		printableName(t, "name", name, maxName)
		if again := Name(payload, port); again != name {
			t.Fatalf("Name(%q) = %q, then %q", payload, name, again)
		}
	})
}

func FuzzJSONMethod(f *testing.F) {
	for _, body := range []string{
		mcpInitialize, mcpToolsList, mcpToolsCall, mcpPromptsGet, mcpResourceGet, a2aMessageSend, a2aTasksGet,
		`[{"jsonrpc":"2.0","method":"a","id":1},{"jsonrpc":"2.0","method":"b","id":2}]`,
		`{"id":"a\"}]{[","jsonrpc":"2.0","x":["}",{"y":"\\"}],"method":"t\u00e9\ud83d\ude00"}`,
		`{"jsonrpc":"2.0","m\u0065thod":"ping","params":{"uri":"ui://widget"}}`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		call := scanRPC(b)
		printableName(t, "method", call.method, maxWord)
		printableName(t, "name", call.name, maxWord)
		printableName(t, "scheme", call.scheme, maxScheme+1)
		if again := scanRPC(b); again != call {
			t.Fatalf("scanRPC(%q) = %+v, then %+v", b, call, again)
		}
		// A cut can only lose fields, never change them.
		for n := range len(b) {
			cut := scanRPC(b[:n])
			if cut.jsonrpc2 && !call.jsonrpc2 || cut.batch && !call.batch ||
				cut.method != "" && cut.method != call.method ||
				cut.name != "" && cut.name != call.name ||
				cut.scheme != "" && cut.scheme != call.scheme {
				t.Fatalf("scanRPC(%q) = %+v, but the whole %q gives %+v", b[:n], cut, b, call)
			}
		}
		if json.Valid(b) {
			if want := decodeRPC(t, b); call != want {
				t.Fatalf("scanRPC(%q) = %+v, encoding/json reads %+v", b, call, want)
			}
		}
	})
}

// decodeRPC reads valid JSON the way scanRPC means to, with encoding/json:
// the first occurrence of each key counts.
func decodeRPC(t *testing.T, b []byte) rpcCall {
	var call rpcCall
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if tok == json.Delim('[') {
		call.batch = true
		tok, err = dec.Token()
	}
	if err != nil || tok != json.Delim('{') {
		return call
	}
	firstStrings(t, dec, func(key string, value *string) {
		switch key {
		case "jsonrpc":
			call.jsonrpc2 = value != nil && *value == "2.0"
		case "method":
			if value != nil {
				call.method = word([]byte(*value), maxWord, utf8.DecodeRune)
			}
		}
	}, func(key string, raw json.RawMessage) {
		if key != "params" || raw[0] != '{' {
			return
		}
		params := json.NewDecoder(bytes.NewReader(raw))
		if _, err := params.Token(); err != nil {
			t.Fatal(err)
		}
		firstStrings(t, params, func(key string, value *string) {
			switch {
			case key == "name" && value != nil:
				call.name = word([]byte(*value), maxWord, utf8.DecodeRune)
			case key == "uri" && value != nil:
				call.scheme = uriScheme([]byte(*value), utf8.DecodeRune)
			}
		}, func(string, json.RawMessage) {})
	})
	return call
}

// firstStrings walks the members of the object dec has entered and calls
// str for the first member of each key, with its string value or nil, and
// other with the first member of each key, raw.
func firstStrings(t *testing.T, dec *json.Decoder, str func(key string, value *string), other func(key string, raw json.RawMessage)) {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		key := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		var value *string
		if raw[0] == '"' {
			value = new(string)
			if err := json.Unmarshal(raw, value); err != nil {
				t.Fatal(err)
			}
		}
		str(key, value)
		other(key, raw)
	}
}
