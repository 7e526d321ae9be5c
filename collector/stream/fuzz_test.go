package stream

import (
	"bytes"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/http2"

	"github.com/reqprof/reqprof/collector/route"
)

// fuzzConn checks what must hold for any stream: no panic; never more
// than 64 KiB buffered; names printable and bounded; the same result
// however the stream is cut into Feeds, and with bytes fed twice; and a
// gap anywhere either passed over or breaking the Conn, never a panic.
func fuzzConn(t *testing.T, port uint16, data []byte, cut1, cut2 uint32) {
	whole := feed(t, port, data)
	for _, r := range whole.reqs {
		checkName(t, r.Name)
	}
	if len(data) == 0 {
		return
	}
	i, j := int(cut1%uint32(len(data)+1)), int(cut2%uint32(len(data)+1))
	if i > j {
		i, j = j, i
	}
	if got := feed(t, port, data[:i], data[i:j], data[j:]); !same(got, whole) {
		t.Fatalf("cut at %d and %d:\n got %v\nwant %v", i, j, got, whole)
	}

	// Overlap: bytes fed again are ignored.
	c := NewConn(port)
	var reqs []Request
	c.Feed(0, data[:j])
	reqs = c.Requests(reqs)
	c.Feed(uint64(i), data[i:])
	reqs = c.Requests(reqs)
	c.Feed(0, data)
	if got := (result{c.Requests(reqs), c.Err(), c.Protocol()}); !same(got, whole) {
		t.Fatalf("overlap at %d..%d:\n got %v\nwant %v", i, j, got, whole)
	}

	// A gap: data[i:j] missing.
	c = NewConn(port)
	c.Feed(0, data[:i])
	c.Feed(uint64(j), data[j:])
	if c.Buffered() > maxBuffer {
		t.Fatalf("buffers %d bytes", c.Buffered())
	}
	for _, r := range c.Requests(nil) {
		checkName(t, r.Name)
	}
	if c.Err() != nil && c.Pending() {
		t.Fatal("a broken Conn is pending")
	}
}

func checkName(t *testing.T, name string) {
	if name == "" || len(name) > maxName || !utf8.ValidString(name) {
		t.Fatalf("name %q", name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			t.Fatalf("name %q holds unprintable %U", name, r)
		}
	}
}

func FuzzConnHTTP1(f *testing.F) {
	for _, s := range []string{
		curlGET("/api/v1/users/12345") + curlGET("/b?x=1"),
		post("/mcp", mcpToolsCall) + post("/mcp", "["+mcpToolsList+","+mcpInitNote+"]"),
		chunked("/mcp", mcpToolsCall, 10, 20),
		chunked("/upload", strings.Repeat("x", 300), 100),
		"GET /index.html HTTP/1.1\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n" + http2.ClientPreface + "\x00\x00\x00\x04\x00\x00\x00\x00\x00",
		"GET / HTTP/1.0\nContent-Length: 3\n\nabcOPTIONS * HTTP/1.1\r\n\r\n",
		"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\n",
	} {
		f.Add([]byte(s), uint32(len(s)/3), uint32(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint32) {
		fuzzConn(t, 8080, data, cut1, cut2)
	})
}

// h2Seeds are client streams written by x/net/http2's Framer.
func h2Seeds(t testing.TB) [][]byte {
	c := newH2Client(t, true)
	c.settings()
	c.request(1, true, get("/users/123")...)
	c.request(3, true, get("/users/456")...)
	b := c.block(get("/static/app.js")...)
	c.headers(http2.HeadersFrameParam{StreamID: 5, BlockFragment: b[:4], EndStream: true})
	c.check(c.fr.WriteContinuation(5, true, b[4:]))
	c.headers(http2.HeadersFrameParam{StreamID: 7, BlockFragment: c.block(get("/p")...), EndHeaders: true, PadLength: 3,
		Priority: http2.PriorityParam{StreamDep: 1, Weight: 7}})
	c.check(c.fr.WriteDataPadded(7, false, []byte("body"), make([]byte, 4)))
	c.request(7, true, "x-trailer", "1")
	c.check(c.fr.WritePing(false, [8]byte{}))
	seeds := [][]byte{bytes.Clone(c.out.Bytes())}

	g := newH2Client(t, true)
	g.settings()
	g.grpcCall(1, "/helloworld.Greeter/SayHello", []byte("\x0a\x05world"))
	g.grpcCall(3, "/grpc.health.v1.Health/Check", nil)
	g.check(g.fr.WriteRSTStream(3, http2.ErrCodeCancel))
	g.check(g.fr.WriteGoAway(3, 0, nil))
	seeds = append(seeds, bytes.Clone(g.out.Bytes()))
	return seeds
}

func FuzzConnH2(f *testing.F) {
	for _, s := range h2Seeds(f) {
		f.Add(s, uint32(len(s)/3), uint32(len(s)/2))
		f.Add(s[len(http2.ClientPreface):], uint32(7), uint32(40))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint32) {
		// Frames after the preface, so the fuzzer works on frames.
		if !bytes.HasPrefix(data, []byte(http2.ClientPreface)) {
			data = append([]byte(http2.ClientPreface), data...)
		}
		fuzzConn(t, 8443, data, cut1, cut2)
	})
}

func FuzzConnRESP(f *testing.F) {
	for _, s := range []string{
		command("SET", "user:1", "alice") + command("GET", "user:1") + command("JSON.GET", "doc", "$"),
		"*0\r\n*-1\r\n" + command("PING") + "PING\r\nset k v\r\n\r\n",
		command("SET", "k", "\x00\r\n\xff") + command(strings.Repeat("A", 40), "x"),
	} {
		f.Add([]byte(s), uint32(len(s)/3), uint32(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint32) {
		fuzzConn(t, 6379, data, cut1, cut2)
	})
}

func FuzzConnJSONRPC(f *testing.F) {
	for _, s := range []string{
		ethBlockNumber + "\n" + ethChainID + "\n" + mcpInitNote + mcpResponse,
		"[" + ethBlockNumber + "," + mcpInitNote + "]\n[]\n[1,\"x\",[2],{}]",
		`{"id":"a\"}]{[","jsonrpc":"2.0","x":["}",{"y":"\\"}],"m\u0065thod":"ping"}`,
		lsp(hover, true) + lsp(didChange, false) + lsp("["+ethChainID+"]", false),
	} {
		f.Add([]byte(s), uint32(len(s)/3), uint32(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint32) {
		fuzzConn(t, 7000, data, cut1, cut2)
	})
}

func FuzzConnFastCGI(f *testing.F) {
	for _, s := range nginxCaptures(f) {
		f.Add(s, uint32(len(s)/3), uint32(len(s)/2))
	}
	pairsA := fcgiPairs(nginxParams("GET", "/a/1?x=1")...)
	pairsB := fcgiPairs(nginxParams("PUT", "/b/2")...)
	for _, s := range []string{
		fcgiRec(route.FastCGITypeGetValues, 0, fcgiPairs("FCGI_MPXS_CONNS", ""), 0) +
			fcgiBegin(1) + fcgiBegin(2) + fcgiRec(route.FastCGITypeParams, 2, pairsB[:20], 0) + fcgiRec(route.FastCGITypeParams, 1, pairsA, 5) +
			fcgiRec(route.FastCGITypeStdin, 2, "early", 3) + fcgiRec(route.FastCGITypeParams, 2, pairsB[20:], 0) +
			fcgiRec(route.FastCGITypeParams, 2, "", 0) + fcgiRec(route.FastCGITypeAbortRequest, 1, "", 0),
		fcgiReq(1, strings.Repeat("b", 300), "REQUEST_METHOD", "POST", "SCRIPT_NAME", "/s", strings.Repeat("N", 130), "v") +
			fcgiReq(1, "", "REQUEST_METHOD", "GET", "REQUEST_URI", "/"+strings.Repeat("u", 200)),
	} {
		f.Add([]byte(s), uint32(len(s)/3), uint32(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint32) {
		// Records from the start, so the fuzzer works on records.
		if len(data) < 8 || data[0] != 1 || data[1] != route.FastCGITypeBeginRequest {
			data = append([]byte(fcgiBegin(1)), data...)
		}
		fuzzConn(t, 9000, data, cut1, cut2)
	})
}
