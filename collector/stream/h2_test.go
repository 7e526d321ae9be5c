package stream

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Client writes client traffic the way an HTTP/2 client does, with one
// HPACK encoder for the connection.
type h2Client struct {
	t   testing.TB
	out bytes.Buffer
	fr  *http2.Framer
	hb  bytes.Buffer
	enc *hpack.Encoder
}

func newH2Client(t testing.TB, preface bool) *h2Client {
	c := &h2Client{t: t}
	if preface {
		c.out.WriteString(http2.ClientPreface)
	}
	c.fr = http2.NewFramer(&c.out, nil)
	c.enc = hpack.NewEncoder(&c.hb)
	return c
}

func (c *h2Client) check(err error) {
	if err != nil {
		c.t.Fatal(err)
	}
}

// block encodes header fields, given as name, value pairs.
func (c *h2Client) block(fields ...string) []byte {
	c.hb.Reset()
	for i := 0; i < len(fields); i += 2 {
		c.check(c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]}))
	}
	return bytes.Clone(c.hb.Bytes())
}

func (c *h2Client) headers(p http2.HeadersFrameParam) { c.check(c.fr.WriteHeaders(p)) }

// request sends a request's headers in one frame.
func (c *h2Client) request(sid uint32, endStream bool, fields ...string) {
	c.headers(http2.HeadersFrameParam{StreamID: sid, BlockFragment: c.block(fields...), EndStream: endStream, EndHeaders: true})
}

func (c *h2Client) settings() {
	c.check(c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: 4 << 20},
		http2.Setting{ID: http2.SettingHeaderTableSize, Val: 65536},
	))
	c.check(c.fr.WriteWindowUpdate(0, 1<<30))
}

// browser headers, for a GET as Chrome sends it.
func get(path string) []string {
	return []string{":method", "GET", ":authority", "example.com", ":scheme", "https", ":path", path,
		"user-agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36",
		"accept", "text/html,application/xhtml+xml", "accept-encoding", "gzip, deflate, br", "accept-language", "en-US,en;q=0.9",
		"cookie", "session=" + strings.Repeat("c", 200)}
}

// grpcCall writes a unary gRPC call: headers, then one length-prefixed
// message with END_STREAM.
func (c *h2Client) grpcCall(sid uint32, method string, msg []byte) {
	c.request(sid, false, ":method", "POST", ":scheme", "http", ":path", method, ":authority", "localhost:50051",
		"content-type", "application/grpc", "user-agent", "grpc-go/1.64.0", "te", "trailers", "grpc-timeout", "998m")
	frame := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	copy(frame[5:], msg)
	c.check(c.fr.WriteData(sid, true, frame))
}

func TestH2(t *testing.T) {
	c := newH2Client(t, true)
	c.settings()
	c.request(1, true, get("/")...)
	c.request(3, true, get("/users/123")...) // most fields from the dynamic table now
	c.check(c.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}))

	// A block split over HEADERS and two CONTINUATIONs.
	b := c.block(get("/static/app.js?v=9f86d081884c7d659a2feaa0c55ad015")...)
	c.headers(http2.HeadersFrameParam{StreamID: 5, BlockFragment: b[:3], EndStream: true})
	c.check(c.fr.WriteContinuation(5, false, b[3:10]))
	c.check(c.fr.WriteContinuation(5, true, b[10:]))

	// Padded, with priority.
	c.headers(http2.HeadersFrameParam{StreamID: 7, BlockFragment: c.block(get("/padded")...), EndHeaders: true, EndStream: true,
		PadLength: 17, Priority: http2.PriorityParam{StreamDep: 5, Weight: 200, Exclusive: true}})
	c.check(c.fr.WritePriority(7, http2.PriorityParam{StreamDep: 0, Weight: 16}))

	// A POST with DATA, padded DATA, and trailers.
	c.request(9, false, ":method", "POST", ":scheme", "https", ":authority", "example.com", ":path", "/api/orders/42/items",
		"content-type", "application/json", "content-length", "2000")
	c.check(c.fr.WriteData(9, false, bytes.Repeat([]byte("d"), 1000)))
	c.check(c.fr.WriteDataPadded(9, false, bytes.Repeat([]byte("d"), 1000), make([]byte, 30)))
	c.request(9, true, "x-checksum", "abc") // trailers: no new request
	c.check(c.fr.WriteRSTStream(3, http2.ErrCodeCancel))
	c.check(c.fr.WriteWindowUpdate(9, 5000))

	// Huffman-coded and indexed again, on a table the client grew.
	c.enc.SetMaxDynamicTableSizeLimit(65536)
	c.enc.SetMaxDynamicTableSize(65536)
	c.request(11, true, get("/users/123")...)
	c.request(13, true, ":method", "OPTIONS", ":scheme", "https", ":authority", "example.com", ":path", "*")
	c.request(15, true, ":method", "CONNECT", ":authority", "example.com:443")
	c.request(17, true, ":scheme", "https", ":path", "/no-method")
	c.check(c.fr.WriteRawFrame(0xa, 0, 0, []byte("an extension frame")))
	c.check(c.fr.WriteSettingsAck())
	c.check(c.fr.WriteGoAway(15, http2.ErrCodeNo, []byte("bye")))

	r := checkSplits(t, 8443, c.out.Bytes())
	want(t, "h2", r, H2, nil,
		"GET /", "GET /users/{id}", "GET /static/app.js", "GET /padded", "POST /api/orders/{id}/items",
		"GET /users/{id}", "OPTIONS *", "CONNECT", "h2 :8443")
	if r.proto != H2 {
		t.Errorf("protocol %v", r.proto)
	}
}

func TestGRPC(t *testing.T) {
	c := newH2Client(t, true)
	c.settings()
	c.grpcCall(1, "/helloworld.Greeter/SayHello", []byte("\x0a\x05world"))
	c.grpcCall(3, "/helloworld.Greeter/SayHello", []byte("\x0a\x05again"))
	c.grpcCall(5, "/grpc.health.v1.Health/Check", nil)
	// Too long a method, or an unprintable one, is named as HTTP is.
	c.grpcCall(7, "/pkg.Svc/"+strings.Repeat("M", 200), nil)
	c.grpcCall(9, "/pkg.Svc/M\x01", nil)
	c.request(11, false, ":method", "POST", ":scheme", "http", ":path", "/pkg.Svc/Web", ":authority", "x",
		"content-type", "application/grpc-web+proto")
	r := checkSplits(t, 50051, c.out.Bytes())
	want(t, "gRPC", r, GRPC, nil,
		"/helloworld.Greeter/SayHello", "/helloworld.Greeter/SayHello", "/grpc.health.v1.Health/Check",
		"POST /pkg.Svc/{long}", "POST /pkg.Svc/M\ufffd", "/pkg.Svc/Web")
	if r.proto != H2 {
		t.Errorf("protocol %v", r.proto)
	}
}

func TestH2CUpgrade(t *testing.T) {
	up := "GET /index.html HTTP/1.1\r\nHost: server.example.com\r\nConnection: Upgrade, HTTP2-Settings\r\n" +
		"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
	c := newH2Client(t, true)
	c.settings()
	c.request(3, true, get("/next")...)
	c.request(1, true, "x-late", "1") // stream 1 is the upgrade's: no new request
	stream := append([]byte(up), c.out.Bytes()...)
	r := checkSplits(t, 80, stream)
	if !same(r, result{reqs: []Request{{Name: "GET /index.html", Protocol: HTTP1}, {Name: "GET /next", Protocol: H2}}, proto: H2}) {
		t.Errorf("h2c upgrade: %v", r)
	}

	// A server that declines answers in HTTP/1, and HTTP/1 follows.
	r = checkSplits(t, 80, []byte(up+curlGET("/again")))
	want(t, "declined upgrade", r, HTTP1, nil, "GET /index.html", "GET /again")
}

func TestH2Gaps(t *testing.T) {
	c := newH2Client(t, true)
	c.settings()
	c.grpcCall(1, "/pkg.Svc/Upload", bytes.Repeat([]byte("u"), 10000))
	hs := c.out.Len() + 9 // the HEADERS payload of stream 3
	c.grpcCall(3, "/pkg.Svc/Get", nil)
	s := c.out.Bytes()
	at := bytes.Index(s, []byte("uuuu"))

	k := NewConn(50051)
	k.Feed(0, s[:at+10])
	k.Feed(uint64(at+9000), s[at+9000:])
	if r := k.Requests(nil); k.Err() != nil || len(r) != 2 || r[1].Name != "/pkg.Svc/Get" {
		t.Errorf("gap in DATA: %v %v", r, k.Err())
	}

	for _, cut := range []int{hs - 5, hs + 2} { // a gap in a frame header, and in HPACK
		k = NewConn(50051)
		k.Feed(0, s[:cut])
		k.Feed(uint64(cut+5), s[cut+5:])
		if errKind(k.Err()) != ErrGap {
			t.Errorf("gap at %d: %v", cut, k.Err())
		}
	}
}

func TestH2Broken(t *testing.T) {
	frame := func(typ http2.FrameType, flags http2.Flags, sid uint32, payload []byte) []byte {
		var b bytes.Buffer
		fr := http2.NewFramer(&b, nil)
		if err := fr.WriteRawFrame(typ, flags, sid, payload); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	ok := newH2Client(t, true)
	ok.request(1, true, get("/first")...)
	start := ok.out.String()
	tests := []struct {
		what  string
		bytes []byte
		err   error
	}{
		{"PING of 7 bytes", frame(http2.FramePing, 0, 0, make([]byte, 7)), ErrMalformed},
		{"SETTINGS on a stream", frame(http2.FrameSettings, 0, 1, nil), ErrMalformed},
		{"SETTINGS ACK with a payload", frame(http2.FrameSettings, 1, 0, make([]byte, 6)), ErrMalformed},
		{"HEADERS on stream 0", frame(http2.FrameHeaders, 4, 0, []byte{0x82}), ErrMalformed},
		{"HEADERS on an even stream", frame(http2.FrameHeaders, 4, 2, []byte{0x82}), ErrMalformed},
		{"DATA on stream 0", frame(http2.FrameData, 0, 0, []byte("x")), ErrMalformed},
		{"PUSH_PROMISE", frame(http2.FramePushPromise, 4, 1, make([]byte, 4)), ErrMalformed},
		{"WINDOW_UPDATE of 3 bytes", frame(http2.FrameWindowUpdate, 0, 0, make([]byte, 3)), ErrMalformed},
		{"CONTINUATION alone", frame(http2.FrameContinuation, 4, 3, []byte{0x82}), ErrMalformed},
		{"PING inside a header block", append(frame(http2.FrameHeaders, 0, 3, []byte{0x82}), frame(http2.FramePing, 0, 0, make([]byte, 8))...), ErrMalformed},
		{"CONTINUATION on another stream", append(frame(http2.FrameHeaders, 0, 3, []byte{0x82}), frame(http2.FrameContinuation, 4, 5, []byte{0x84})...), ErrMalformed},
		{"padding past the payload", frame(http2.FrameHeaders, 4|8, 3, []byte{5, 0x82}), ErrMalformed},
		{"padded, no pad length", frame(http2.FrameHeaders, 4|8, 3, nil), ErrMalformed},
		{"priority cut", frame(http2.FrameHeaders, 4|0x20, 3, []byte{0, 0, 0}), ErrMalformed},
		{"HPACK index past the tables", frame(http2.FrameHeaders, 4, 3, []byte{0x80 | 0x7f, 0x7f}), ErrHPACK},
		{"HPACK block cut", frame(http2.FrameHeaders, 4, 3, []byte{0x40, 0x05, 'a'}), ErrHPACK},
		{"HPACK varint overflow", frame(http2.FrameHeaders, 4, 3, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}), ErrHPACK},
		{"HPACK table size over the bound", frame(http2.FrameHeaders, 4, 3, []byte{0x3f, 0xe2, 0xff, 0x03}), ErrHPACK},
		{"HPACK string over the bound", frame(http2.FrameHeaders, 4, 3, append([]byte{0x40, 0x7f, 0x81, 0x80, 0x01}, make([]byte, 16400)...)), ErrHPACK},
		{"header frame over the bound", frame(http2.FrameHeaders, 4, 3, make([]byte, 70000)), ErrBound},
	}
	for _, tt := range tests {
		s := append([]byte(start), tt.bytes...)
		var r result
		if len(s) < 2000 {
			r = checkSplits(t, 443, s)
		} else {
			r = feed(t, 443, s)
		}
		want(t, tt.what, r, H2, tt.err, "GET /first")
	}
	// A second block decoded against the table the broken one left is
	// not reached: the Conn stopped.
}

// The dynamic table must follow every block, trailers included: a field
// indexed in a trailer block names a later request.
func TestH2TableAcrossTrailers(t *testing.T) {
	c := newH2Client(t, true)
	c.request(1, false, get("/a")...)
	c.request(1, true, ":path", "/from-trailers") // not valid in trailers, but indexed all the same
	c.hb.Reset()
	// Index 62 is the newest dynamic entry: the :path the trailers added.
	c.check(c.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"}))
	b := append(bytes.Clone(c.hb.Bytes()), 0x80|62)
	c.headers(http2.HeadersFrameParam{StreamID: 3, BlockFragment: b, EndHeaders: true, EndStream: true})
	r := checkSplits(t, 80, c.out.Bytes())
	want(t, "table across trailers", r, H2, nil, "GET /a", "GET /from-trailers")
}

// A connection joined after its preface: its header blocks cannot be
// decoded, but its frames still say which streams it opened. Each new
// stream is a request named by port; trailers and control frames are not.
func TestH2JoinedAfterPreface(t *testing.T) {
	c := newH2Client(t, true)
	c.settings()
	c.grpcCall(1, "/pkg.Svc/A", []byte("before"))
	joinedAt := c.out.Len()
	c.grpcCall(3, "/pkg.Svc/A", []byte("x"))
	c.check(c.fr.WriteWindowUpdate(0, 1000))
	c.grpcCall(5, "/pkg.Svc/B", []byte("y"))
	c.request(5, true, "grpc-status", "0") // trailers
	c.check(c.fr.WritePing(false, [8]byte{}))
	data := c.out.Bytes()[joinedAt:]

	conn := NewConnAt(50051, uint64(joinedAt))
	conn.Feed(uint64(joinedAt), data)
	got := conn.Requests(nil)
	if conn.Err() != nil || conn.Protocol() != H2 {
		t.Fatalf("err %v, protocol %v", conn.Err(), conn.Protocol())
	}
	if len(got) != 2 || got[0].Name != "h2 :50051" || got[1].Name != "h2 :50051" {
		t.Errorf("requests %+v, want two named h2 :50051", got)
	}
	// Bytes that are no frames, joined the same way, are not taken for them.
	other := NewConnAt(80, 100)
	other.Feed(100, []byte("\x00\x00\x05\x63whatever this is, no frame"))
	if other.Err() == nil {
		t.Errorf("unknown bytes joined mid-stream read as %v", other.Protocol())
	}
}

// Frames with no preface are HTTP/2 only on a connection joined after it
// opened: on one followed from its first byte they are no protocol,
// however the bytes are cut (the first byte alone, the rest after).
func TestFramesWithNoPrefaceFromTheStart(t *testing.T) {
	// An empty DATA frame, flags 0x30, on stream 0x30303030.
	frames := []byte("\x00\x00\x00\x00" + "00000")
	for _, cut := range []int{0, 1, 8} {
		if got := feed(t, 8080, split(frames, cut)...); got.proto == H2 || got.err == nil {
			t.Errorf("cut at %d: protocol %v, error %v; want no protocol", cut, got.proto, got.err)
		}
	}
	joined := NewConnAt(8080, 100)
	joined.Feed(100, frames)
	if joined.Protocol() != H2 {
		t.Errorf("a frame joined mid-stream read as %v (%v)", joined.Protocol(), joined.Err())
	}
}
