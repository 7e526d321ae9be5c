package stream

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/collector/route"
)

// lsp frames a message as the Language Server Protocol does.
func lsp(body string, contentType bool) string {
	h := fmt.Sprintf("Content-Length: %d\r\n", len(body))
	if contentType {
		h += "Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n"
	}
	return h + "\r\n" + body
}

const (
	ethBlockNumber = `{"jsonrpc":"2.0","method":"eth_blockNumber","params":[],"id":1}`
	ethChainID     = `{"jsonrpc":"2.0","method":"eth_chainId","params":[],"id":2}`
	didChange      = `{"jsonrpc":"2.0","method":"textDocument/didChange","params":{"textDocument":{"uri":"file:///a.go","version":2},` +
		`"contentChanges":[{"text":"package main\n\nfunc main() {\n\t\"}\"\n}\n"}]}}`
	hover = `{"jsonrpc":"2.0","id":7,"method":"textDocument/hover","params":{"textDocument":{"uri":"file:///a.go"},"position":{"line":3,"character":5}}}`
)

func TestJSONRPC(t *testing.T) {
	tests := []struct {
		what   string
		stream string
		want   []Request
	}{
		{"newline-delimited", ethBlockNumber + "\n" + ethChainID + "\n" + mcpToolsCall + "\n", []Request{
			{Name: "eth_blockNumber", Protocol: JSONRPC}, {Name: "eth_chainId", Protocol: JSONRPC},
			{Name: "tools/call add", Protocol: JSONRPC}}},
		{"concatenated", ethBlockNumber + ethChainID + "\r\n\t " + mcpInitNote, []Request{
			{Name: "eth_blockNumber", Protocol: JSONRPC}, {Name: "eth_chainId", Protocol: JSONRPC},
			{Name: "notifications/initialized", Protocol: JSONRPC, Notification: true}}},
		{"batches", "[" + ethBlockNumber + "," + ethChainID + "]\n[ " + mcpInitNote + " , " + mcpResponse + " ]\n[]\n" + ethChainID,
			[]Request{
				{Name: "eth_blockNumber", Protocol: JSONRPC}, {Name: "eth_chainId", Protocol: JSONRPC},
				{Name: "notifications/initialized", Protocol: JSONRPC, Notification: true},
				{Name: "jsonrpc", Protocol: JSONRPC, Response: true},
				{Name: ":7000", Protocol: JSONRPC}, // the empty batch, answered with an error
				{Name: "eth_chainId", Protocol: JSONRPC}}},
		{"batch elements that are not objects", `[1, "two", null, [3], {"jsonrpc":"1.0","method":"old"}, true]`, []Request{
			{Name: ":7000", Protocol: JSONRPC}, {Name: ":7000", Protocol: JSONRPC}, {Name: ":7000", Protocol: JSONRPC},
			{Name: ":7000", Protocol: JSONRPC}, {Name: ":7000", Protocol: JSONRPC}, {Name: ":7000", Protocol: JSONRPC}}},
		{"not JSON-RPC 2.0", `{"type":"subscribe","channel":"ticker"}`, []Request{{Name: ":7000", Protocol: JSONRPC}}},
		{"strings holding brackets and escapes", `{"id":"a\"}]{[","jsonrpc":"2.0","x":["}",{"y":"\\"}],"method":"ping"}`,
			[]Request{{Name: "ping", Protocol: JSONRPC}}},
		{"escaped keys", `{"jsonrpc":"2.0","m\u0065thod":"ping","\u0069d":1}{"jsonrpc":"2.0","method":"n","params":{"id":1}}`,
			[]Request{{Name: "ping", Protocol: JSONRPC}, {Name: "n", Protocol: JSONRPC, Notification: true}}},
		{"id null is no notification", `{"jsonrpc":"2.0","method":"m","id":null}`, []Request{{Name: "m", Protocol: JSONRPC}}},
		{"a value not complete", ethBlockNumber + `{"jsonrpc":"2.0","method":"x"`, []Request{{Name: "eth_blockNumber", Protocol: JSONRPC}}},
	}
	for _, tt := range tests {
		r := checkSplits(t, 7000, []byte(tt.stream))
		if w := (result{reqs: tt.want, proto: JSONRPC}); !same(r, w) {
			t.Errorf("%s:\n got %v\nwant %v", tt.what, r, w)
		}
	}
}

func TestJSONRPCNamesAsRoute(t *testing.T) {
	for _, s := range []string{
		mcpToolsCall, mcpToolsList, mcpResponse, ethChainID, hover, didChange,
		`{"jsonrpc":"2.0","method":"tools\/call","params":{"name":"\u00e9t\u00E9 \ud83d\ude00"}}`,
		`{"jsonrpc":"2.0","method":"` + strings.Repeat("m", 49) + `"}`,
		`{"type":"subscribe"}`,
	} {
		r := feed(t, 7000, []byte(s))
		if r.err != nil || len(r.reqs) != 1 {
			t.Errorf("%q: %v", s, r)
			continue
		}
		if got, want := r.reqs[0].Name, route.Name([]byte(s), 7000); got != want {
			t.Errorf("%q: named %q, route.Name says %q", s, got, want)
		}
	}
}

func TestLSP(t *testing.T) {
	stream := lsp(hover, true) + lsp(didChange, false) + lsp("["+ethBlockNumber+","+ethChainID+"]", false) +
		lsp(mcpResponse, false) + lsp("not json", false) + lsp("", false) + "\r\n" + lsp(hover, false)
	r := checkSplits(t, 7000, []byte(stream))
	w := result{proto: JSONRPC, reqs: []Request{
		{Name: "textDocument/hover", Protocol: JSONRPC},
		{Name: "textDocument/didChange", Protocol: JSONRPC, Notification: true},
		{Name: "eth_blockNumber", Protocol: JSONRPC}, {Name: "eth_chainId", Protocol: JSONRPC},
		{Name: "jsonrpc", Protocol: JSONRPC, Response: true},
		{Name: ":7000", Protocol: JSONRPC}, {Name: ":7000", Protocol: JSONRPC},
		{Name: "textDocument/hover", Protocol: JSONRPC},
	}}
	if !same(r, w) {
		t.Errorf("LSP:\n got %v\nwant %v", r, w)
	}

	// A large didOpen, its body partly missing: named from its start.
	big := `{"jsonrpc":"2.0","method":"textDocument/didOpen","params":{"textDocument":{"uri":"file:///big.go","text":"` +
		strings.Repeat("x", 200000) + `"}}}`
	s := []byte(lsp(big, false) + lsp(hover, false))
	at := bytes.Index(s, []byte("xxx"))
	c := NewConn(7000)
	c.Feed(0, s[:at+1000])
	c.Feed(uint64(at+150000), s[at+150000:])
	got := c.Requests(nil)
	if c.Err() != nil || len(got) != 2 || got[0].Name != "textDocument/didOpen" || !got[0].Notification || got[1].Name != "textDocument/hover" {
		t.Errorf("gap in an LSP body: %v %v", got, c.Err())
	}
	if c.Buffered() != 0 {
		t.Errorf("holds %d bytes after a whole message", c.Buffered())
	}

	for _, tt := range []struct {
		what, stream string
	}{
		{"no Content-Length", "Content-Length: 2\r\n\r\n{}Content-Type: x\r\n\r\n"},
		{"bad Content-Length", "Content-Length: x\r\n\r\n"},
		{"header without colon", "Content-Length: 2\r\nfoo\r\n\r\n{}"},
	} {
		r := checkSplits(t, 7000, []byte(tt.stream))
		if errKind(r.err) != ErrMalformed {
			t.Errorf("%s: %v", tt.what, r)
		}
	}
}

func TestJSONRPCBroken(t *testing.T) {
	for _, tt := range []struct {
		what, stream string
		names        []string
	}{
		{"garbage between values", ethChainID + "\nxyz", []string{"eth_chainId"}},
		{"a top-level string", ethChainID + `"x"`, []string{"eth_chainId"}},
		{"a closing bracket at the top", ethChainID + "}", []string{"eth_chainId"}},
	} {
		r := checkSplits(t, 7000, []byte(tt.stream))
		want(t, tt.what, r, JSONRPC, ErrMalformed, tt.names...)
	}
	// Raw on the connection, a gap cannot be passed over.
	s := []byte(ethBlockNumber + ethChainID)
	c := NewConn(7000)
	c.Feed(0, s[:10])
	c.Feed(20, s[20:])
	if errKind(c.Err()) != ErrGap {
		t.Errorf("gap in raw JSON: %v", c.Err())
	}
	// Deep nesting costs no stack.
	deep := `{"jsonrpc":"2.0","method":"deep","params":` + strings.Repeat("[", 1<<20) + strings.Repeat("]", 1<<20) + "}"
	if r := feed(t, 7000, []byte(deep)); r.err != nil || len(r.reqs) != 1 || r.reqs[0].Name != "deep" {
		t.Errorf("deep nesting: %v", r)
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		what   string
		stream string
		proto  Protocol
		err    error
	}{
		{"TLS ClientHello", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", Unknown, ErrTLS},
		{"PostgreSQL SSLRequest", "\x00\x00\x00\x08\x04\xd2\x16\x2f", Unknown, ErrUnknown},
		{"binary", "\x16\x01", Unknown, ErrUnknown},
		{"a word of what no method is made of", "HELLO\x00 x\r\n", Unknown, ErrUnknown},
		{"a line no protocol starts", "12 x\r\n", Unknown, ErrUnknown},
		{"a first word that is no command", "GE_T1 x\r\n", Unknown, ErrUnknown},
		{"leading blank lines", "\r\n\r\nGET / HTTP/1.1\r\n\r\n", HTTP1, nil},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", H2, nil},
		{"HTTP/2 preface cut", "PRI * HTTP/2.0\r\n", Unknown, nil},
		{"POST is no preface", "POST / HTTP/1.1\r\n\r\n", HTTP1, nil},
		{"Content-Length framed", "content-length: 2\r\n\r\n{}", JSONRPC, nil},
		{"CONNECT is not Content-Length", "CONNECT a:1 HTTP/1.1\r\n\r\n", HTTP1, nil},
		{"RESP", "*1\r\n$4\r\nPING\r\n", RESP, nil},
		{"inline RESP", "PING\r\n", RESP, nil},
		{"JSON", ` [{}]`, JSONRPC, nil},
		{"nothing yet", "", Unknown, nil},
		{"spaces only", "  \r\n", Unknown, nil},
	}
	for _, tt := range tests {
		r := checkSplits(t, 80, []byte(tt.stream))
		if r.proto != tt.proto || errKind(r.err) != tt.err {
			t.Errorf("%s: %v, want %v and %v", tt.what, r, tt.proto, tt.err)
		}
	}
	if got := feed(t, 443, []byte("\x16\x03\x01")).err; got == nil || got.Error() != "TLS: named by port" {
		t.Errorf("TLS error: %v", got)
	}
}

// The requests not yet taken are bounded.
func TestQueueBound(t *testing.T) {
	c := NewConn(6379)
	ping := []byte("PING\r\n")
	var off uint64
	for range maxQueued + 1 {
		c.Feed(off, ping)
		off += uint64(len(ping))
	}
	if errKind(c.Err()) != ErrBound {
		t.Errorf("%d requests not taken: %v", maxQueued+1, c.Err())
	}
	if r := c.Requests(nil); len(r) != maxQueued {
		t.Errorf("%d requests returned, want the %d found before the bound", len(r), maxQueued)
	}
	if r := c.Requests(nil); len(r) != 0 {
		t.Errorf("then %d more", len(r))
	}
}

func TestProtocolString(t *testing.T) {
	for p, want := range map[Protocol]string{Unknown: "unknown", HTTP1: "http1", H2: "h2", GRPC: "grpc", RESP: "resp", JSONRPC: "jsonrpc", 42: "Protocol(42)"} {
		if p.String() != want {
			t.Errorf("%d: %q", p, p.String())
		}
	}
}

// A call's id is read so that its response can be matched to it: as the
// client spelled it, in raw JSON-RPC and in an LSP body; notifications,
// client responses and ids cut or null have none.
func TestJSONRPCIDs(t *testing.T) {
	stream := `{"jsonrpc":"2.0","id":1,"method":"a"}` + "\n" +
		`{"jsonrpc":"2.0","method":"b","\u0069d":"x\"y"}` + "\n" +
		`{"jsonrpc":"2.0","method":"n"}` + "\n" +
		`{"jsonrpc":"2.0","id":null,"method":"c"}` + "\n" +
		`{"jsonrpc":"2.0","id":9,"result":{}}` + "\n" +
		"Content-Length: 40\r\n\r\n" + `{"jsonrpc":"2.0","id":-3.5,"method":"d"}`
	r := feed(t, 0, []byte(stream))
	type idOf struct {
		name  string
		id    string
		hasID bool
	}
	want := []idOf{{"a", "1", true}, {"b", `"x\"y"`, true}, {"n", "", false}, {"c", "", false}, {"jsonrpc", "", false}}
	if len(r.reqs) != len(want) {
		t.Fatalf("got %v", r)
	}
	for i, w := range want {
		got := r.reqs[i]
		if got.Name != w.name || got.HasID != w.hasID || w.hasID && got.ID != IDKey([]byte(w.id)) {
			t.Errorf("request %d: %+v, want %s with id %q (%v)", i, got, w.name, w.id, w.hasID)
		}
	}
	lsp := feed(t, 0, []byte("Content-Length: 40\r\n\r\n"+`{"jsonrpc":"2.0","id":-3.5,"method":"d"}`))
	if len(lsp.reqs) != 1 || !lsp.reqs[0].HasID || lsp.reqs[0].ID != IDKey([]byte("-3.5")) {
		t.Errorf("LSP: %+v", lsp.reqs)
	}
}
