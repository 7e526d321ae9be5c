package stream

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/collector/route"
)

// fcgiRec is a FastCGI record as a client writes it.
func fcgiRec(typ byte, id uint16, content string, padding int) string {
	h := []byte{1, typ, byte(id >> 8), byte(id), byte(len(content) >> 8), byte(len(content)), byte(padding), 0}
	return string(h) + content + strings.Repeat("\x00", padding)
}

// fcgiBegin is a BEGIN_REQUEST for the responder role, keeping the
// connection.
func fcgiBegin(id uint16) string {
	return fcgiRec(route.FastCGITypeBeginRequest, id, "\x00\x01\x01\x00\x00\x00\x00\x00", 0)
}

// fcgiLen is a name or value length: one byte below 128, else four.
func fcgiLen(n int) string {
	if n < 128 {
		return string([]byte{byte(n)})
	}
	return string([]byte{byte(n>>24) | 0x80, byte(n >> 16), byte(n >> 8), byte(n)})
}

// fcgiPairs encodes name-value pairs, given one after another.
func fcgiPairs(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(fcgiLen(len(kv[i])) + fcgiLen(len(kv[i+1])) + kv[i] + kv[i+1])
	}
	return b.String()
}

// fcgiReq is a whole request as nginx sends it: BEGIN_REQUEST, its
// params in one record (padded to 8 bytes), the empty PARAMS, the body in
// STDIN records and the empty STDIN.
func fcgiReq(id uint16, body string, kv ...string) string {
	params := fcgiPairs(kv...)
	s := fcgiBegin(id) + fcgiRec(route.FastCGITypeParams, id, params, (8-len(params)%8)%8) + fcgiRec(route.FastCGITypeParams, id, "", 0)
	if body != "" {
		s += fcgiRec(route.FastCGITypeStdin, id, body, (8-len(body)%8)%8)
	}
	return s + fcgiRec(route.FastCGITypeStdin, id, "", 0)
}

// nginxParams are the params nginx's fastcgi_params sends, in its order,
// for a request to uri.
func nginxParams(method, uri string) []string {
	script, query, _ := strings.Cut(uri, "?")
	return []string{"QUERY_STRING", query, "REQUEST_METHOD", method, "CONTENT_TYPE", "", "CONTENT_LENGTH", "",
		"SCRIPT_NAME", script, "REQUEST_URI", uri, "DOCUMENT_URI", script, "DOCUMENT_ROOT", "/srv/www",
		"SERVER_PROTOCOL", "HTTP/1.1", "GATEWAY_INTERFACE", "CGI/1.1", "SERVER_SOFTWARE", "nginx/1.22.1",
		"REMOTE_ADDR", "127.0.0.1", "REMOTE_PORT", "40000", "SERVER_ADDR", "127.0.0.1", "SERVER_PORT", "80",
		"SERVER_NAME", "", "REDIRECT_STATUS", "200", "SCRIPT_FILENAME", "/srv/www" + script, "HTTP_HOST", "localhost"}
}

// nginxCaptures are what php-fpm 8.2 read of three connections from
// nginx 1.22.1 (strace -e read,recvfrom -xx of its worker): a GET from
// curl, a GET with a browser's headers to a path whose script does not
// exist, and a form POST. Each ends with the empty STDIN php-fpm reads
// after its response.
func nginxCaptures(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, name := range []string{"nginx-get", "nginx-get-browser", "nginx-post"} {
		b, err := os.ReadFile(filepath.Join("testdata", "fastcgi", name+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

func TestFastCGINginxCaptures(t *testing.T) {
	caps := nginxCaptures(t)
	for name, wantName := range map[string]string{
		"nginx-get":         "GET /light.php",
		"nginx-get-browser": "GET /items/{id}/heavy.php",
		"nginx-post":        "POST /heavy.php",
	} {
		want(t, name, checkSplits(t, 9000, caps[name]), FastCGI, nil, wantName)
	}
	// One after another, as requests of one connection kept open.
	all := append(append(bytes.Clone(caps["nginx-get"]), caps["nginx-get-browser"]...), caps["nginx-post"]...)
	want(t, "three in a row", feed(t, 0, all), FastCGI, nil, "GET /light.php", "GET /items/{id}/heavy.php", "POST /heavy.php")
}

func TestFastCGIStreams(t *testing.T) {
	const P = route.FastCGITypeParams
	long := "/" + strings.Repeat("x", 300)
	pairsAB := fcgiPairs(nginxParams("GET", "/a/1?x=1")...)
	pairsB := fcgiPairs(nginxParams("PUT", "/b/2")...)
	tests := []struct {
		what  string
		data  string
		err   error
		names []string
	}{
		{"nginx, keeping the connection", fcgiReq(1, "", nginxParams("GET", "/users/42?page=2")...) +
			fcgiReq(1, strings.Repeat("b", 5000), nginxParams("POST", "/upload")...),
			nil, []string{"GET /users/{id}", "POST /upload"}},
		{"params over several records, a pair across two",
			fcgiBegin(1) + fcgiRec(P, 1, pairsAB[:7], 1) + fcgiRec(P, 1, pairsAB[7:40], 0) + fcgiRec(P, 1, pairsAB[40:], 3) + fcgiRec(P, 1, "", 0),
			nil, []string{"GET /a/{id}"}},
		{"four-byte lengths", fcgiReq(1, "", "X_LONG_VALUE", strings.Repeat("v", 200), strings.Repeat("N", 130), "x",
			"REQUEST_METHOD", "GET", "REQUEST_URI", long+"?q=1"), nil, []string{"GET /{long}"}},
		{"SCRIPT_NAME without a URI", fcgiReq(1, "", "REQUEST_METHOD", "GET", "SCRIPT_NAME", "/status"), nil, []string{"GET /status"}},
		{"SCRIPT_NAME with an empty URI", fcgiReq(1, "", "REQUEST_METHOD", "GET", "REQUEST_URI", "", "SCRIPT_NAME", "/index.php"),
			nil, []string{"GET /index.php"}},
		{"the last of a param sent", fcgiReq(1, "", "REQUEST_METHOD", "GET", "REQUEST_URI", "/first", "REQUEST_URI", "/second"),
			nil, []string{"GET /second"}},
		{"no method", fcgiReq(1, "", "REQUEST_URI", "/a"), nil, []string{"fastcgi :9000"}},
		{"no params", fcgiReq(1, ""), nil, []string{"fastcgi :9000"}},
		{"an absolute URI, an asterisk", fcgiReq(1, "", "REQUEST_METHOD", "GET", "REQUEST_URI", "http://h/p/7#f") +
			fcgiReq(1, "", "REQUEST_METHOD", "OPTIONS", "REQUEST_URI", "*"), nil, []string{"GET /p/{id}", "OPTIONS *"}},
		{"a URI longer than what is kept", fcgiReq(1, "", "REQUEST_METHOD", "GET", "REQUEST_URI", "/a/"+strings.Repeat("y", 9000)+"/z"),
			nil, []string{"GET /a/{cut}"}},
		{"multiplexed, named in the order their params end",
			fcgiBegin(1) + fcgiBegin(2) + fcgiRec(P, 2, pairsB[:20], 0) + fcgiRec(P, 1, pairsAB, 0) +
				fcgiRec(route.FastCGITypeStdin, 2, "early", 3) + fcgiRec(P, 2, pairsB[20:], 0) + fcgiRec(P, 2, "", 0) + fcgiRec(P, 1, "", 0),
			nil, []string{"PUT /b/{id}", "GET /a/{id}"}},
		{"aborted before its params end: never served", fcgiBegin(3) + fcgiRec(P, 3, pairsAB, 0) + fcgiRec(route.FastCGITypeAbortRequest, 3, "", 0) +
			fcgiRec(P, 3, "", 0) + fcgiReq(4, "", nginxParams("GET", "/ok")...), nil, []string{"GET /ok"}},
		{"aborted after: counted", fcgiReq(3, "", nginxParams("GET", "/slow")...) + fcgiRec(route.FastCGITypeAbortRequest, 3, "", 0),
			nil, []string{"GET /slow"}},
		{"begun again before its params end", fcgiBegin(1) + fcgiRec(P, 1, pairsB, 0) + fcgiReq(1, "", nginxParams("GET", "/again")...),
			nil, []string{"GET /again"}},
		{"a GET_VALUES query first, and an unknown management record",
			fcgiRec(route.FastCGITypeGetValues, 0, fcgiPairs("FCGI_MPXS_CONNS", ""), 0) + fcgiRec(0x7f, 0, "xy", 6) +
				fcgiReq(1, "", nginxParams("GET", "/")...), nil, []string{"GET /"}},
		{"params of a request not begun", fcgiRec(route.FastCGITypeGetValues, 0, "", 0) + fcgiRec(P, 5, pairsAB, 0) + fcgiRec(P, 5, "", 0),
			nil, nil},
		{"STDIN with a filter's DATA", fcgiReq(1, "in", nginxParams("GET", "/f")...) + fcgiRec(route.FastCGITypeData, 1, "data", 4),
			nil, []string{"GET /f"}},
		{"params that end inside a pair", fcgiBegin(1) + fcgiRec(P, 1, pairsAB[:9], 0) + fcgiRec(P, 1, "", 0),
			ErrMalformed, nil},
		{"a record of version 2", fcgiReq(1, "", nginxParams("GET", "/a")...) + "\x02" + fcgiRec(P, 1, "", 0)[1:],
			ErrMalformed, []string{"GET /a"}},
		{"a server's record", fcgiReq(1, "", nginxParams("GET", "/a")...) + fcgiRec(route.FastCGITypeStdout, 1, "Status: 200\r\n\r\n", 0),
			ErrMalformed, []string{"GET /a"}},
		{"STDIN on request 0", fcgiBegin(1) + fcgiRec(route.FastCGITypeStdin, 0, "", 0), ErrMalformed, nil},
		{"a connection that starts with STDIN", fcgiRec(route.FastCGITypeStdin, 1, "", 0), ErrUnknown, nil},
		{"BEGIN_REQUEST on request 0", fcgiRec(route.FastCGITypeBeginRequest, 0, "\x00\x01\x00\x00\x00\x00\x00\x00", 0), ErrUnknown, nil},
	}
	for _, tt := range tests {
		r := checkSplits(t, 9000, []byte(tt.data))
		want(t, tt.what, r, FastCGI, tt.err, tt.names...)
		if tt.err != ErrUnknown && r.proto != FastCGI {
			t.Errorf("%s: protocol %v", tt.what, r.proto)
		}
	}
}

// A connection joined after it opened is FastCGI from any record a client
// sends: php-fpm keeping nginx's connection reads the last request's empty
// STDIN first, in the read that starts the next burst.
func TestFastCGIJoined(t *testing.T) {
	req := fcgiReq(1, "", nginxParams("GET", "/next")...)
	stdin := fcgiRec(route.FastCGITypeStdin, 1, "", 0)
	c := NewConnAt(0, 4096)
	c.Feed(4096, []byte(stdin+req))
	want(t, "joined", result{c.Requests(nil), c.Err(), c.Protocol()}, FastCGI, nil, "GET /next")

	c = NewConnAt(0, 4096)
	c.Feed(4096, []byte("\x01\x06\x00\x01\x00\x00\x00\x00")) // a server's STDOUT
	if errKind(c.Err()) != ErrUnknown {
		t.Errorf("joined at a server's record: %v", c.Err())
	}
}

// Bytes missing from a body are passed over; from params, they break the
// Conn, at once when Skip says they were read.
func TestFastCGIGaps(t *testing.T) {
	body := strings.Repeat("b", 1000)
	first := fcgiReq(1, body, nginxParams("POST", "/up")...)
	second := fcgiReq(1, "", nginxParams("GET", "/after")...)
	data := first + second
	at := strings.Index(data, body)
	c := NewConn(0)
	c.Feed(0, []byte(data[:at+10]))
	c.Feed(uint64(at+900), []byte(data[at+900:]))
	want(t, "gap in a body", result{c.Requests(nil), c.Err(), c.Protocol()}, FastCGI, nil, "POST /up", "GET /after")

	at = strings.Index(data, "REQUEST_URI")
	c = NewConn(0)
	c.Feed(0, []byte(data[:at]))
	if !c.Pending() {
		t.Error("not pending inside params")
	}
	c.Skip(uint64(at + 20))
	want(t, "params past what was sent", result{c.Requests(nil), c.Err(), c.Protocol()}, FastCGI, ErrGap)
	if c.Pending() {
		t.Error("a broken Conn is pending")
	}

	c = NewConn(0)
	c.Feed(0, []byte(second))
	c.Skip(uint64(len(second)))
	if reqs := c.Requests(nil); len(reqs) != 1 || c.Err() != nil || c.Pending() {
		t.Errorf("a whole request then nothing missing: %d requests, err %v, pending %v", len(reqs), c.Err(), c.Pending())
	}
}

// The values kept of requests begun and not named stay within the bounds.
func TestFastCGIBounds(t *testing.T) {
	var b strings.Builder
	for id := range maxFastCGIOpen + 1 {
		b.WriteString(fcgiBegin(uint16(id + 1)))
	}
	r := feed(t, 0, []byte(b.String()))
	want(t, "too many begun", r, FastCGI, ErrBound)

	// Requests multiplexed with long URIs, 8 KiB kept of each.
	b.Reset()
	uri := fcgiPairs("REQUEST_URI", "/"+strings.Repeat("u", 20000))
	for id := range 10 {
		b.WriteString(fcgiBegin(uint16(id+1)) + fcgiRec(route.FastCGITypeParams, uint16(id+1), uri, 0))
	}
	r = feed(t, 0, []byte(b.String()))
	want(t, "too much kept", r, FastCGI, ErrBound)
}
