package stream

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/collector/route"
)

// curlGET is a GET as curl sends it.
func curlGET(path string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: localhost:8080\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n"
}

// post is a POST with a Content-Length body, as an MCP client sends it.
func post(path, body string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: localhost:3000\r\nUser-Agent: curl/8.5.0\r\n" +
		"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
}

// chunked is a POST whose body goes in chunks of the given sizes, with a
// chunk extension and a trailer.
func chunked(path, body string, sizes ...int) string {
	var b strings.Builder
	b.WriteString("POST " + path + " HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n")
	for _, n := range sizes {
		n = min(n, len(body))
		fmt.Fprintf(&b, "%x;ext=1\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	if body != "" {
		fmt.Fprintf(&b, "%X\r\n%s\r\n", len(body), body)
	}
	b.WriteString("0\r\nX-Checksum: abc\r\n\r\n")
	return b.String()
}

const (
	mcpToolsList = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	mcpToolsCall = `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`
	mcpInitNote  = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	mcpResponse  = `{"jsonrpc":"2.0","id":"s-1","result":{"action":"accept"}}`
)

func TestHTTP1Pipelined(t *testing.T) {
	var b strings.Builder
	var wantNames []string
	for i := range 16 {
		b.WriteString(curlGET(fmt.Sprintf("/api/v1/users/%d/orders?page=%d", 1000+i, i)))
		wantNames = append(wantNames, "GET /api/v1/users/{id}/orders")
	}
	r := checkSplits(t, 8080, []byte(b.String()))
	want(t, "16 pipelined GETs", r, HTTP1, nil, wantNames...)
}

func TestHTTP1Bodies(t *testing.T) {
	tests := []struct {
		what   string
		stream string
		names  []string
	}{
		{"POST with Content-Length", post("/v1/payments", `{"amount":1200,"method":"card"}`) + curlGET("/health"),
			[]string{"POST /v1/payments", "GET /health"}},
		{"chunked", chunked("/upload/9f86d081884c7d659a2feaa0c55ad015", strings.Repeat("x", 100), 7, 30) + curlGET("/"),
			[]string{"POST /upload/{id}", "GET /"}},
		{"chunked without trailers, hex in capitals",
			"PUT /blob HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n" + curlGET("/a"),
			[]string{"PUT /blob", "GET /a"}},
		{"GET with a body", "GET /search HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello" + curlGET("/b"),
			[]string{"GET /search", "GET /b"}},
		{"empty lines between requests", curlGET("/a") + "\r\n\r\n" + curlGET("/b") + "\n",
			[]string{"GET /a", "GET /b"}},
		{"bare LF", "GET /a HTTP/1.0\nHost: x\n\nPOST /b HTTP/1.0\nContent-Length: 2\n\nhiDELETE /c/7 HTTP/1.1\n\n",
			[]string{"GET /a", "POST /b", "DELETE /c/{id}"}},
		{"other methods and targets", "OPTIONS * HTTP/1.1\r\n\r\nCONNECT example.com:443 HTTP/1.1\r\n\r\n",
			[]string{"OPTIONS *", "CONNECT"}},
		{"a method route does not list", "PROPFIND /dav/x HTTP/1.1\r\nDepth: 1\r\n\r\n", []string{"PROPFIND /dav/x"}},
		{"repeated equal Content-Length", "POST /a HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nhi",
			[]string{"POST /a"}},
		{"chunked wins over Content-Length", "POST /a HTTP/1.1\r\nContent-Length: 99\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
			[]string{"POST /a"}},
		{"waiting for the body", post("/mcp", mcpToolsList)[:len(post("/mcp", mcpToolsList))-1], nil},
	}
	for _, tt := range tests {
		r := checkSplits(t, 8080, []byte(tt.stream))
		want(t, tt.what, r, HTTP1, nil, tt.names...)
	}
}

// Each request alone gets the name route.Name gives its bytes.
func TestHTTP1NamesAsRoute(t *testing.T) {
	for _, req := range []string{
		curlGET("/search?q=cpu+time&page=2"),
		curlGET("/api/v1/users/12345/orders/3F2B8C1E-9d4a-4e7b-8c6f-1a2b3c4d5e6f"),
		curlGET("/invites/01ARZ3NDEKTSV4RRFFQ69G5FAV/accept/dGhpc2lzYXRva2VuMTIz"),
		curlGET("http://example.com:8080/items/42?x=1"),
		curlGET("/caf\xe9/a\x01b/\u202e"),
		curlGET("/a/b/c/d/e/f/g/h/i/j"),
		curlGET("/" + strings.Repeat("abcdefghijklmnopqrstuvwxyz/", 5)),
		curlGET("/search/" + strings.Repeat("xy", 40) + "/x"),
		post("/mcp", mcpToolsCall),
		post("/mcp", `{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"file:///project/src/main.rs"}}`),
		post("/mcp", `{"jsonrpc":"2.0","id":4,"method":"prompts/get","params":{"name":"code_review"}}`),
		post("/messages?sessionId=a1b2", mcpToolsList),
		post("/mcp", mcpResponse),
		post("/v1/payments", `{"amount":1200,"method":"card"}`),
		"PUT /mcp HTTP/1.1\r\nContent-Length: 4\r\n\r\n" + `{"a"`[:4],
		"HEAD https://example.com HTTP/1.1\r\n\r\n",
	} {
		r := feed(t, 3000, []byte(req))
		if r.err != nil || len(r.reqs) != 1 {
			t.Errorf("%q: %v", req, r)
			continue
		}
		if got, want := r.reqs[0].Name, route.Name([]byte(req), 3000); got != want {
			t.Errorf("%q: named %q, route.Name says %q", req, got, want)
		}
	}
}

func TestHTTP1JSONRPC(t *testing.T) {
	batch := `[` + mcpToolsList + `, ` + mcpToolsCall + `,` + mcpInitNote + `,` + mcpResponse + `]`
	tests := []struct {
		what   string
		stream string
		want   []Request
	}{
		{"one call", post("/mcp", mcpToolsCall), []Request{{Name: "POST /mcp tools/call add", Protocol: HTTP1}}},
		{"a batch: one request per call", post("/mcp", batch), []Request{
			{Name: "POST /mcp tools/list", Protocol: HTTP1},
			{Name: "POST /mcp tools/call add", Protocol: HTTP1},
			{Name: "POST /mcp notifications/initialized", Protocol: HTTP1, Notification: true},
			{Name: "POST /mcp", Protocol: HTTP1, Response: true},
		}},
		{"a batch in chunks", chunked("/mcp", batch, 10, 1, 50, 3), []Request{
			{Name: "POST /mcp tools/list", Protocol: HTTP1},
			{Name: "POST /mcp tools/call add", Protocol: HTTP1},
			{Name: "POST /mcp notifications/initialized", Protocol: HTTP1, Notification: true},
			{Name: "POST /mcp", Protocol: HTTP1, Response: true},
		}},
		{"a notification", post("/mcp", mcpInitNote), []Request{
			{Name: "POST /mcp notifications/initialized", Protocol: HTTP1, Notification: true}}},
		{"an empty batch", post("/mcp", `[]`), []Request{{Name: "POST /mcp", Protocol: HTTP1}}},
		{"a batch of what is not JSON-RPC", post("/rest", `[{"a":1},2,"x",[3]]`), []Request{{Name: "POST /rest", Protocol: HTTP1}}},
		{"JSON-RPC and more in a batch", post("/rpc", `[{"a":1},`+mcpToolsList+`,7]`), []Request{{Name: "POST /rpc tools/list", Protocol: HTTP1}}},
		{"not JSON", post("/form", `a=1&b={"jsonrpc":"2.0","method":"x"}`), []Request{{Name: "POST /form", Protocol: HTTP1}}},
		{"JSON-RPC outside a POST is not read", fmt.Sprintf("PUT /mcp HTTP/1.1\r\nContent-Length: %d\r\n\r\n", len(mcpToolsList)) + mcpToolsList,
			[]Request{{Name: "PUT /mcp", Protocol: HTTP1}}},
		{"cut JSON named by what came", post("/mcp", mcpToolsCall[:60]), []Request{{Name: "POST /mcp tools/call", Protocol: HTTP1}}},
		{"what follows the value is not read", post("/mcp", mcpToolsList+` {"jsonrpc":"2.0","method":"x"}`),
			[]Request{{Name: "POST /mcp tools/list", Protocol: HTTP1}}},
	}
	for _, tt := range tests {
		r := checkSplits(t, 3000, []byte(tt.stream+curlGET("/next")))
		wantReqs := append(tt.want, Request{Name: "GET /next", Protocol: HTTP1})
		if !same(r, result{reqs: wantReqs, proto: HTTP1}) {
			t.Errorf("%s:\n got %v\nwant %v", tt.what, r, result{reqs: wantReqs, proto: HTTP1})
		}
	}
}

// A message longer than what is kept is named from its start; its id is
// seen wherever it is.
func TestHTTP1LongJSONRPC(t *testing.T) {
	big := strings.Repeat("x", 40<<10)
	call := `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"write","arguments":{"text":"` + big + `"}},"id":9}`
	note := `{"jsonrpc":"2.0","method":"textDocument/didOpen","params":{"text":"` + big + `"}}`
	late := `{"jsonrpc":"2.0","params":{"text":"` + big + `"},"method":"late"}`
	stream := post("/mcp", call) + post("/mcp", note) + post("/mcp", late)
	for _, parts := range [][][]byte{{[]byte(stream)}, split([]byte(stream), 100, 5000, 30000, 50000, 90000)} {
		r := feed(t, 3000, parts...)
		wantReqs := []Request{
			{Name: "POST /mcp tools/call write", Protocol: HTTP1},
			{Name: "POST /mcp textDocument/didOpen", Protocol: HTTP1, Notification: true},
			{Name: "POST /mcp", Protocol: HTTP1, Notification: true}, // its method lies past what is kept
		}
		if !same(r, result{reqs: wantReqs, proto: HTTP1}) {
			t.Errorf("got %v\nwant %v", r, wantReqs)
		}
	}
}

// Gaps: bytes missing inside a body are passed over; inside a head they
// break the Conn.
func TestHTTP1Gaps(t *testing.T) {
	body := strings.Repeat("b", 10000)
	s := []byte(post("/upload", body) + curlGET("/after"))
	bodyAt := bytes.Index(s, []byte(body))

	c := NewConn(80)
	c.Feed(0, s[:bodyAt+100])
	c.Feed(uint64(bodyAt+9000), s[bodyAt+9000:]) // 8900 bytes of body missing
	if r := c.Requests(nil); c.Err() != nil || len(r) != 2 || r[0].Name != "POST /upload" || r[1].Name != "GET /after" {
		t.Errorf("gap in a body: %v %v", r, c.Err())
	}

	// A gap that ends exactly where the body does.
	c = NewConn(80)
	c.Feed(0, s[:bodyAt])
	end := bodyAt + len(body)
	c.Feed(uint64(end), s[end:])
	if r := c.Requests(nil); c.Err() != nil || len(r) != 2 {
		t.Errorf("gap to the end of a body: %v %v", r, c.Err())
	}

	// A gap running past the body breaks.
	c = NewConn(80)
	c.Feed(0, s[:bodyAt])
	c.Feed(uint64(end+1), s[end+1:])
	if errKind(c.Err()) != ErrGap {
		t.Errorf("gap past a body: %v", c.Err())
	}

	// A gap in chunk data is passed over, not in a chunk-size line.
	ch := []byte(chunked("/up", strings.Repeat("c", 5000), 3000) + curlGET("/after"))
	at := bytes.Index(ch, []byte("ccc"))
	c = NewConn(80)
	c.Feed(0, ch[:at+10])
	c.Feed(uint64(at+2000), ch[at+2000:])
	if r := c.Requests(nil); c.Err() != nil || len(r) != 2 {
		t.Errorf("gap in chunk data: %v %v", r, c.Err())
	}
	c = NewConn(80)
	c.Feed(0, ch[:at-3])
	c.Feed(uint64(at+10), ch[at+10:])
	if errKind(c.Err()) != ErrGap {
		t.Errorf("gap across a chunk-size line: %v", c.Err())
	}

	// A gap inside the headers.
	g := []byte(curlGET("/x") + curlGET("/y"))
	c = NewConn(80)
	c.Feed(0, g[:20])
	c.Feed(30, g[30:])
	if errKind(c.Err()) != ErrGap || c.Pending() {
		t.Errorf("gap in a head: %v", c.Err())
	}
	c.Feed(0, g)
	if r := c.Requests(nil); len(r) != 0 {
		t.Errorf("a broken Conn found %v", r)
	}

	// Overlap is ignored.
	c = NewConn(80)
	c.Feed(0, g[:30])
	c.Feed(10, g[10:50])
	c.Feed(0, g[:50])
	c.Feed(50, g[50:])
	if r := c.Requests(nil); c.Err() != nil || len(r) != 2 || r[1].Name != "GET /y" {
		t.Errorf("overlap: %v %v", r, c.Err())
	}

	// A JSON-RPC body cut by a gap is named from what came before it; a
	// batch cannot be followed through one.
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"x":"` + strings.Repeat("y", 5000) + `"}}}`
	for _, tt := range []struct {
		body string
		err  error
		name string
	}{
		{big, nil, "POST /mcp tools/call add"},
		{"[" + big + "]", ErrGap, ""},
	} {
		s := []byte(post("/mcp", tt.body) + curlGET("/after"))
		at := bytes.Index(s, []byte("yyy"))
		c := NewConn(80)
		c.Feed(0, s[:at])
		c.Feed(uint64(at+100), s[at+100:])
		r := c.Requests(nil)
		if errKind(c.Err()) != tt.err || tt.err == nil && (len(r) != 2 || r[0].Name != tt.name) {
			t.Errorf("gap in JSON body %.20q: %v %v", tt.body, r, c.Err())
		}
	}
}

func TestHTTP1Broken(t *testing.T) {
	tests := []struct {
		what   string
		stream string
		err    error
		names  []string
	}{
		{"garbage after a request", curlGET("/a") + "\x00\x01\x02\r\n\r\n", ErrMalformed, []string{"GET /a"}},
		{"no colon", "GET / HTTP/1.1\r\nHost\r\n\r\n", ErrMalformed, nil},
		{"bad Content-Length", "POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", ErrMalformed, nil},
		{"two Content-Lengths", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", ErrMalformed, nil},
		{"unknown coding last", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", ErrMalformed, nil},
		{"bad chunk size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", ErrMalformed, nil},
		{"chunk size overflow", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n", ErrMalformed, nil},
		{"chunk data too long", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", ErrMalformed, nil},
		{"HTTP/2 preface without upgrade", curlGET("/a") + "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", ErrMalformed, []string{"GET /a"}},
		{"websocket after upgrade", "GET /chat HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58",
			ErrMalformed, []string{"GET /chat"}},
		{"head too long", "GET / HTTP/1.1\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("p", 1000)+"\r\n", 70) + "\r\n", ErrBound, nil},
		{"first line too long", "GET /" + strings.Repeat("a", 70<<10), ErrBound, nil},
		{"method too long", strings.Repeat("A", 40) + " / HTTP/1.1\r\n\r\n", ErrUnknown, nil},
	}
	for _, tt := range tests {
		var r result
		if len(tt.stream) < 4096 {
			r = checkSplits(t, 80, []byte(tt.stream))
		} else {
			r = feed(t, 80, []byte(tt.stream))
			if s := feed(t, 80, split([]byte(tt.stream), 100, 40000)...); !same(s, r) {
				t.Errorf("%s: split %v, whole %v", tt.what, s, r)
			}
		}
		want(t, tt.what, r, HTTP1, tt.err, tt.names...)
	}
}

// A head that ends right at the bound is read; one byte more is not.
func TestHTTP1HeadBound(t *testing.T) {
	head := func(n int) []byte {
		h := "GET / HTTP/1.1\r\nX-Pad: "
		return []byte(h + strings.Repeat("p", n-len(h)-4) + "\r\n\r\n")
	}
	for _, tt := range []struct {
		n   int
		err error
	}{{maxHead, nil}, {maxHead + 1, ErrBound}} {
		h := head(tt.n)
		for _, parts := range [][][]byte{{h}, split(h, 10), split(h, len(h)-1), split(h, 1000, 30000, len(h)-2)} {
			if r := feed(t, 80, parts...); errKind(r.err) != tt.err {
				t.Errorf("head of %d bytes in %d parts: %v", tt.n, len(parts), r.err)
			}
		}
	}
}

func TestPending(t *testing.T) {
	s := []byte(post("/mcp", mcpToolsList))
	c := NewConn(80)
	if c.Pending() {
		t.Error("a new Conn is pending")
	}
	c.Feed(0, s[:10])
	if !c.Pending() {
		t.Error("half a request line is not pending")
	}
	c.Feed(10, s[10:len(s)-5])
	if !c.Pending() || len(c.Requests(nil)) != 0 {
		t.Error("waiting for the body")
	}
	c.Feed(uint64(len(s)-5), s[len(s)-5:])
	if !c.Pending() {
		t.Error("a request not taken is pending")
	}
	if r := c.Requests(nil); len(r) != 1 || c.Pending() {
		t.Errorf("after the body: %v, pending %v", r, c.Pending())
	}
	// Not pending: another Conn can take over where it stopped.
	d := NewConnAt(80, c.Offset())
	g := []byte(curlGET("/a/1"))
	d.Feed(c.Offset(), g)
	if r := d.Requests(nil); len(r) != 1 || r[0].Name != "GET /a/{id}" {
		t.Errorf("taking over: %v %v", r, d.Err())
	}
}

func TestRequestsFunc(t *testing.T) {
	c := NewConn(80)
	interned := map[string]string{}
	intern := func(b []byte) string {
		if s, ok := interned[string(b)]; ok {
			return s
		}
		s := string(b)
		interned[s] = s
		return s
	}
	s := []byte(curlGET("/a/1") + curlGET("/a/2"))
	c.Feed(0, s)
	r := c.RequestsFunc(nil, intern)
	if len(r) != 2 || r[0].Name != "GET /a/{id}" || len(interned) != 1 {
		t.Errorf("%v %v", r, interned)
	}
	if r := c.Requests(nil); len(r) != 0 {
		t.Errorf("requests returned twice: %v", r)
	}
}
