package collector

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// burstRecord is a burst of conn as the ring buffer sends it: its first
// capture bytes of data in the payload, the rest in chunks sent before it.
type burstRecord struct {
	conn      uint64
	streamOff uint64
	data      string
	userNs    uint64
	tailNs    uint64 // of userNs, after its last write
	startNs   uint64
	target    uint32
	unsent    int // bytes the burst read after data that the programs did not send
	// unseen: the first bytes of data came in a read begun before the
	// window, whose buffer the programs never saw: no payload, and the
	// rest in chunks.
	unseen int
}

const testCapture = 64

func (b burstRecord) records(t *testing.T) [][]byte {
	t.Helper()
	payload := b.data[:min(len(b.data), testCapture)]
	from := len(payload) // where the chunks start
	if b.unseen > 0 {
		payload, from = "", b.unseen
	}
	in := reqprofRequestRecord{
		Conn: b.conn, StreamOff: b.streamOff, StartNs: b.startNs + 1, EndNs: b.startNs + 2, Target: b.target,
		LocalPort: 8080, PayloadLen: uint16(len(payload)), BytesIn: uint64(len(b.data) + b.unsent),
	}
	in.Cost.UserNs = b.userNs
	in.Tail.CpuNs = b.tailNs
	copy(in.Payload[:], payload)
	var out [][]byte
	for off := from; off < len(b.data); off += 100 {
		in.Flags |= uint32(reqprofRecordFlagsREQ_CHUNKED)
		end := min(off+100, len(b.data))
		out = append(out, chunkRecordBytes(t, reqprofRecordKindRECORD_CHUNK, b.target, b.conn, b.streamOff+uint64(off), b.data[off:end]))
	}
	return append(out, recordBytes(t, in))
}

// consumeBursts feeds bursts, in order, to one target's consumer.
func consumeBursts(t *testing.T, bursts ...burstRecord) *consumeResult {
	t.Helper()
	res := newConsumeResult(1)
	for _, b := range bursts {
		for _, rec := range b.records(t) {
			res.decode(rec)
		}
	}
	if res.malformed != 0 {
		t.Fatalf("%d records malformed", res.malformed)
	}
	return &res
}

func routeCounts(f *finishedRequests) map[string]int {
	counts := map[string]int{}
	for key, sum := range f.byRoute {
		counts[key.Route+" "+sum.Protocol] += sum.Requests
	}
	return counts
}

func get(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }

func TestBurstOfPipelinedRequests(t *testing.T) {
	burst := strings.Repeat(get("/a")+get("/b"), 8) // 16 requests, past the capture: chunks carry the rest
	res := consumeBursts(t, burstRecord{conn: 1, data: burst, userNs: 16_001, tailNs: 1_601})
	got := res.finished[0]
	if c := routeCounts(got); c["GET /a http1"] != 8 || c["GET /b http1"] != 8 || got.totals.Requests != 16 {
		t.Errorf("routes %v, want 8 of GET /a and 8 of GET /b, over http1", c)
	}
	// The burst's CPU is shared out, none lost, and so is its tail, after
	// every one of its requests' last byte.
	if got.totals.UserNs != 16_001 || got.totals.TailNs != 1_601 {
		t.Errorf("user ns %d in all, %d of it in tails; want the burst's 16,001 and 1,601", got.totals.UserNs, got.totals.TailNs)
	}
	if len(res.perBurst[0]) != 0 {
		t.Errorf("counted per burst: %v", res.perBurst[0])
	}
}

// A request split over two bursts counts once, in the burst that completes
// it, with the first burst's cost.
func TestBurstCarriesHalfARequest(t *testing.T) {
	req := get("/split")
	res := consumeBursts(t,
		burstRecord{conn: 7, data: req[:10], userNs: 300, tailNs: 30, startNs: 100},
		burstRecord{conn: 7, streamOff: 10, data: req[10:], userNs: 700, tailNs: 70, startNs: 200},
	)
	got := res.finished[0]
	if got.totals.Requests != 1 || got.totals.UserNs != 1_000 || routeCounts(got)["GET /split http1"] != 1 {
		t.Errorf("totals %+v, routes %v: want one GET /split of 1,000 ns", got.totals, routeCounts(got))
	}
	// The first burst's tail came before the request's last byte.
	if got.totals.TailNs != 70 {
		t.Errorf("tail %d ns, want the last burst's 70", got.totals.TailNs)
	}
	if r := got.sample.kept[0]; r.Start != 101 {
		t.Errorf("it starts at %v, want where its first burst did", r.Start)
	}
	// Nothing is carried any more: the window's end finds no unfinished CPU.
	if carried := res.carried()[0]; carried != 0 {
		t.Errorf("%d ns still carried", carried)
	}
	// A half request when the window closes is unfinished CPU.
	res = consumeBursts(t, burstRecord{conn: 7, data: req[:10], userNs: 300})
	if res.finished[0].totals.Requests != 0 || res.carried()[0] != 300 {
		t.Errorf("%d requests, %d ns carried; want none, and 300", res.finished[0].totals.Requests, res.carried()[0])
	}
}

// Bytes that cannot be followed count one request a burst, and why.
func TestBurstFallsBack(t *testing.T) {
	tls := "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
	res := consumeBursts(t,
		burstRecord{conn: 1, data: tls, userNs: 10},
		burstRecord{conn: 1, streamOff: uint64(len(tls)), data: "\x17\x03\x03\x00\x20encrypted", userNs: 10},
		burstRecord{conn: 2, data: "", userNs: 10}, // nothing captured
	)
	got := res.finished[0]
	if got.totals.Requests != 3 {
		t.Errorf("%d requests, want one a burst", got.totals.Requests)
	}
	if res.perBurst[0]["TLS"] != 2 || res.perBurst[0]["bytes not captured (a read begun before attach)"] != 1 {
		t.Errorf("per burst %v", res.perBurst[0])
	}
	if c := routeCounts(got); c["tls :8080 unknown"] != 1 {
		t.Errorf("routes %v: the first burst named tls", c)
	}
}

// HTTP/2: the preface and streams over several bursts; a burst of control
// frames only passes its cost to the next streams.
func TestBurstsOfHTTP2Streams(t *testing.T) {
	var out, hb bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, nil)
	enc := hpack.NewEncoder(&hb)
	headers := func(sid uint32, path string) {
		hb.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", path}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: sid, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	fr.WriteSettings()
	headers(1, "/a")
	headers(3, "/b")
	first := out.String()
	out.Reset()
	fr.WriteWindowUpdate(0, 100)
	second := out.String()
	out.Reset()
	headers(5, "/a")
	third := out.String()

	res := consumeBursts(t,
		burstRecord{conn: 9, data: first, userNs: 200},
		burstRecord{conn: 9, streamOff: uint64(len(first)), data: second, userNs: 50},
		burstRecord{conn: 9, streamOff: uint64(len(first) + len(second)), data: third, userNs: 100},
	)
	got := res.finished[0]
	if c := routeCounts(got); c["GET /a h2"] != 2 || c["GET /b h2"] != 1 {
		t.Errorf("routes %v, want two GET /a and one GET /b, over h2", c)
	}
	if got.totals.UserNs != 350 {
		t.Errorf("user ns %d, want all three bursts' 350", got.totals.UserNs)
	}
	// The connection's close lets its state go.
	res.decode(chunkRecordBytes(t, reqprofRecordKindRECORD_CLOSED, 0, 9, 0, ""))
	if len(res.bursts.conns) != 0 {
		t.Errorf("%d connections held after the close", len(res.bursts.conns))
	}
}

// Raw JSON-RPC: a batch is one request a call; a notification is none.
func TestBurstOfJSONRPCBatch(t *testing.T) {
	batch := `[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add"}}]` + "\n"
	res := consumeBursts(t, burstRecord{conn: 3, data: batch, userNs: 90})
	got := res.finished[0]
	if c := routeCounts(got); c["tools/list jsonrpc"] != 1 || c["tools/call add jsonrpc"] != 1 || got.totals.Requests != 2 {
		t.Errorf("routes %v, want tools/list and tools/call add", c)
	}
	if res.messages[0] != 1 || got.totals.UserNs != 90 {
		t.Errorf("%d notifications, %d user ns; want 1, and all 90 ns on the two calls", res.messages[0], got.totals.UserNs)
	}
}

// The connections followed are bounded: past the bound the less recently
// used half is let go.
func TestBurstsBoundConnections(t *testing.T) {
	b := newBursts(func(n []byte) string { return string(n) })
	for conn := range uint64(maxFollowedConns + 10) {
		b.follow(conn + 1)
	}
	if len(b.conns) > maxFollowedConns || len(b.conns) < maxFollowedConns/2 {
		t.Errorf("%d connections followed, bound %d", len(b.conns), maxFollowedConns)
	}
	if _, ok := b.conns[1]; ok {
		t.Error("the least recently used connection was kept")
	}
	if _, ok := b.conns[maxFollowedConns+10]; !ok {
		t.Error("the most recently used connection was let go")
	}
	if dropped := b.chunk(5, 0, make([]byte, maxHeldChunkBytes+1)); !dropped {
		t.Error("a chunk past the bound held for a connection was kept")
	}
}

// fcgiRecord is a FastCGI record as a client writes it, unpadded.
func fcgiRecord(typ byte, id uint16, content string) string {
	return string([]byte{1, typ, byte(id >> 8), byte(id), byte(len(content) >> 8), byte(len(content)), 0, 0}) + content
}

// fcgiRequest is a request of id with these params, in one record, and no
// body, as nginx sends a GET.
func fcgiRequest(id uint16, params ...string) string {
	var p strings.Builder
	for i := 0; i+1 < len(params); i += 2 {
		p.WriteString(string([]byte{byte(len(params[i])), byte(len(params[i+1]))}) + params[i] + params[i+1])
	}
	return fcgiRecord(1, id, "\x00\x01\x00\x00\x00\x00\x00\x00") + fcgiRecord(4, id, p.String()) + fcgiRecord(4, id, "") + fcgiRecord(5, id, "")
}

// FastCGI: a request a connection (nginx's default) and requests of a
// connection kept open (fastcgi_keep_conn, where php-fpm reads the last
// request's empty STDIN at the start of the next burst) are each counted
// and named by their params; params longer than what the programs send,
// or a burst whose first read began before attach, count one request a
// burst, named from the bytes that came, and the stream is followed again
// from the next burst.
func TestBurstsOfFastCGI(t *testing.T) {
	filler := strings.Repeat("v", 100)
	a := fcgiRequest(1, "REQUEST_METHOD", "GET", "REQUEST_URI", "/light.php?id=1", "X", filler)
	b := fcgiRequest(1, "REQUEST_METHOD", "GET", "SCRIPT_NAME", "/heavy.php", "X", filler)
	// Its method and URI within the payload (testCapture bytes).
	short := fcgiRequest(1, "REQUEST_METHOD", "GET", "REQUEST_URI", "/x?1", "X", filler)
	stdin := fcgiRecord(5, 1, "")
	bursts := []burstRecord{
		{conn: 1, data: a, userNs: 100},
		{conn: 2, data: b, userNs: 100},
		{conn: 3, data: a[:len(a)-len(stdin)], userNs: 100},
		{conn: 3, streamOff: uint64(len(a) - len(stdin)), data: stdin + b, userNs: 100},
		{conn: 4, data: short[:80], unsent: len(short) - 80, userNs: 100},
	}
	// Attached while a worker was blocked reading a kept connection: that
	// burst's first read is unseen, its later ones sent as chunks.
	bursts = append(bursts,
		burstRecord{conn: 5, data: stdin + a, unseen: len(stdin) + 8, userNs: 100},
		burstRecord{conn: 5, streamOff: uint64(len(stdin) + len(a)), data: b, userNs: 100})
	res := newConsumeResult(1)
	for i, burst := range bursts {
		for _, rec := range burst.records(t) {
			res.decode(rec)
		}
		if i == len(bursts)-1 || bursts[i+1].conn != burst.conn {
			res.decode(chunkRecordBytes(t, reqprofRecordKindRECORD_CLOSED, 0, burst.conn, 0, ""))
		}
	}
	got := res.finished[0]
	if c := routeCounts(got); c["GET /light.php fastcgi"] != 2 || c["GET /heavy.php fastcgi"] != 3 || c["GET /x fastcgi"] != 1 ||
		c[":8080 unknown"] != 1 || got.totals.Requests != 7 {
		t.Errorf("routes %v, want two GET /light.php, three GET /heavy.php and a GET /x, over fastcgi, and one burst by port", c)
	}
	if got.totals.UserNs != 700 {
		t.Errorf("user ns %d, want all seven bursts' 700", got.totals.UserNs)
	}
	if len(res.perBurst[0]) != 2 || res.perBurst[0]["bytes missing where needed"] != 1 || res.perBurst[0]["bytes not captured (a read begun before attach)"] != 1 {
		t.Errorf("per burst %v, want the burst whose params went past what was sent and the one whose first read was unseen", res.perBurst[0])
	}
}
