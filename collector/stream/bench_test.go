package stream

import (
	"strings"
	"testing"
)

// benchRequest is a keep-alive GET as a load generator sends it: 170 bytes.
var benchRequest = []byte("GET /api/v1/users/12345/orders?limit=20 HTTP/1.1\r\nHost: localhost:8080\r\n" +
	"User-Agent: wrk/4.2.0\r\nAccept: application/json\r\nConnection: keep-alive\r\n\r\n")

// The common case: one request per burst, in one Feed, named into a new
// string.
func BenchmarkSingleHTTP1(b *testing.B) {
	c := NewConn(8080)
	var off uint64
	var reqs []Request
	b.SetBytes(int64(len(benchRequest)))
	b.ReportAllocs()
	for b.Loop() {
		c.Feed(off, benchRequest)
		off += uint64(len(benchRequest))
		reqs = c.Requests(reqs[:0])
		if len(reqs) != 1 {
			b.Fatal(reqs, c.Err())
		}
	}
}

// The same with the caller interning names: no allocation at all.
func BenchmarkSingleHTTP1Interned(b *testing.B) {
	c := NewConn(8080)
	interned := map[string]string{}
	intern := func(n []byte) string {
		if s, ok := interned[string(n)]; ok {
			return s
		}
		s := string(n)
		interned[s] = s
		return s
	}
	var off uint64
	var reqs []Request
	b.SetBytes(int64(len(benchRequest)))
	b.ReportAllocs()
	for b.Loop() {
		c.Feed(off, benchRequest)
		off += uint64(len(benchRequest))
		reqs = c.RequestsFunc(reqs[:0], intern)
		if len(reqs) != 1 {
			b.Fatal(reqs, c.Err())
		}
	}
}

// A request split over two Feeds, which is buffered.
func BenchmarkSplitHTTP1(b *testing.B) {
	c := NewConn(8080)
	var off uint64
	var reqs []Request
	b.ReportAllocs()
	for b.Loop() {
		c.Feed(off, benchRequest[:60])
		c.Feed(off+60, benchRequest[60:])
		off += uint64(len(benchRequest))
		reqs = c.Requests(reqs[:0])
	}
}

func BenchmarkPipelinedRESP(b *testing.B) {
	var s strings.Builder
	for range 16 {
		s.WriteString(command("GET", "user:12345"))
	}
	p := []byte(s.String())
	c := NewConn(6379)
	var off uint64
	var reqs []Request
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		c.Feed(off, p)
		off += uint64(len(p))
		reqs = c.Requests(reqs[:0])
	}
}

func BenchmarkRawJSONRPC(b *testing.B) {
	p := []byte(mcpToolsCall + "\n")
	c := NewConn(7000)
	var off uint64
	var reqs []Request
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		c.Feed(off, p)
		off += uint64(len(p))
		reqs = c.Requests(reqs[:0])
	}
}

func BenchmarkH2Request(b *testing.B) {
	cl := newH2Client(b, true)
	cl.settings()
	cl.request(1, true, get("/users/1")...)
	start := cl.out.Len()
	cl.request(3, true, get("/users/2")...)
	p := cl.out.Bytes()
	c := NewConn(8443)
	c.Feed(0, p[:start])
	off := uint64(start)
	one := p[start:]
	var reqs []Request
	b.ReportAllocs()
	for i := uint32(3); b.Loop(); i += 2 {
		one[5], one[6], one[7], one[8] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		c.Feed(off, one)
		off += uint64(len(one))
		reqs = c.Requests(reqs[:0])
	}
}

// A request as nginx sends it to php-fpm (a curl GET, 552 bytes, its
// params 508), one a connection: a Conn reset for each, as the collector
// reuses its scratch Conn.
func BenchmarkFastCGIRequest(b *testing.B) {
	p := nginxCaptures(b)["nginx-get"]
	c := NewConn(0)
	var reqs []Request
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		c.Reset(0, 0)
		c.Feed(0, p)
		reqs = c.Requests(reqs[:0])
		if len(reqs) != 1 {
			b.Fatal(reqs, c.Err())
		}
	}
}
