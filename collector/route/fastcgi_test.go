package route

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fcgiLen is a params length as a client encodes it: one byte below 128,
// else four; long forces four.
func fcgiLen(n int, long bool) string {
	if n < 128 && !long {
		return string([]byte{byte(n)})
	}
	return string(binary.BigEndian.AppendUint32(nil, uint32(n)|1<<31))
}

func fcgiPairs(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(fcgiLen(len(kv[i]), false) + fcgiLen(len(kv[i+1]), false) + kv[i] + kv[i+1])
	}
	return b.String()
}

func fcgiRec(typ byte, id uint16, content string) string {
	h := []byte{1, typ, byte(id >> 8), byte(id), byte(len(content) >> 8), byte(len(content)), 0, 0}
	return string(h) + content
}

// fcgiStart is a request's records up to the end of its params.
func fcgiStart(id uint16, kv ...string) string {
	return fcgiRec(FastCGITypeBeginRequest, id, "\x00\x01\x00\x00\x00\x00\x00\x00") +
		fcgiRec(FastCGITypeParams, id, fcgiPairs(kv...)) + fcgiRec(FastCGITypeParams, id, "")
}

func TestFastCGIParams(t *testing.T) {
	tests := []struct {
		what   string
		params string
		want   string
	}{
		{"method and URI", fcgiPairs("REQUEST_METHOD", "GET", "REQUEST_URI", "/items/42?x=1"), "GET /items/{id}"},
		{"the URI before SCRIPT_NAME", fcgiPairs("SCRIPT_NAME", "/index.php", "REQUEST_URI", "/u/9", "REQUEST_METHOD", "DELETE"), "DELETE /u/{id}"},
		{"SCRIPT_NAME without a URI", fcgiPairs("REQUEST_METHOD", "GET", "SCRIPT_NAME", "/ping"), "GET /ping"},
		{"an empty URI", fcgiPairs("REQUEST_METHOD", "GET", "REQUEST_URI", "", "SCRIPT_NAME", "/ping"), "GET /ping"},
		{"the last value sent", fcgiPairs("REQUEST_METHOD", "GET", "REQUEST_URI", "/a", "REQUEST_METHOD", "POST"), "POST /a"},
		{"names near the wanted ones", fcgiPairs("REQUEST_METHO", "GET", "REQUEST_URIS", "/x", "request_uri", "/y", "REQUEST_METHOD", "PUT",
			"REQUEST_URI", "/z"), "PUT /z"},
		{"four-byte lengths", fcgiLen(14, true) + fcgiLen(3, true) + "REQUEST_METHODGET" + fcgiLen(11, false) + fcgiLen(200, false) +
			"REQUEST_URI/" + strings.Repeat("z", 199), "GET /{long}"},
		{"a 2 GiB name passed over", fcgiLen(1<<31-1, false) + fcgiLen(0, false) + "abc", "fastcgi :9000"},
		{"no method", fcgiPairs("REQUEST_URI", "/a"), "fastcgi :9000"},
		{"no path", fcgiPairs("REQUEST_METHOD", "GET"), "fastcgi :9000"},
		{"a target that is no path", fcgiPairs("REQUEST_METHOD", "CONNECT", "REQUEST_URI", "h:443"), "CONNECT"},
		{"a URI longer than kept", fcgiPairs("REQUEST_METHOD", "GET", "REQUEST_URI", "/a/"+strings.Repeat("b", MaxFastCGIValue)), "GET /a/{cut}"},
		{"bytes that do not print", fcgiPairs("REQUEST_METHOD", "G\x00T", "REQUEST_URI", "/\xff"), "G\ufffdT /\ufffd"},
	}
	for _, tt := range tests {
		var p FastCGIParams
		for i := range len(tt.params) { // a byte at a time
			p.Write([]byte{tt.params[i]})
		}
		if got := string(p.AppendName(nil, 9000)); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.what, got, tt.want)
		}
		// Whole, after a Reset, the same.
		p.Reset()
		p.Write([]byte(tt.params))
		if got := string(p.AppendName([]byte("x"), 9000)); got != "x"+tt.want {
			t.Errorf("%s, whole: %q, want %q", tt.what, got, "x"+tt.want)
		}
	}
}

// nginxGET is what php-fpm read of a GET from curl through nginx 1.22.1
// (stream/testdata, recorded with strace).
func nginxGET(t testing.TB) string {
	b, err := os.ReadFile(filepath.Join("..", "stream", "testdata", "fastcgi", "nginx-get.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestNameFastCGI(t *testing.T) {
	get := nginxGET(t)
	stdin := fcgiRec(FastCGITypeStdin, 1, "")
	tests := []struct {
		what, payload, want string
	}{
		{"nginx's GET, whole", get, "GET /light.php"},
		{"nginx's GET, the first 256 bytes", get[:256], "GET /light.php"},
		{"cut before REQUEST_URI", get[:strings.Index(get, "REQUEST_URI")], "fastcgi :0"},
		{"cut inside REQUEST_URI's value", get[:strings.Index(get, "/light.php?")+3], "GET /{cut}"},
		{"the last request's STDIN first (a kept connection)", stdin + fcgiStart(1, "REQUEST_METHOD", "GET", "REQUEST_URI", "/b/7"), "GET /b/{id}"},
		{"SCRIPT_NAME only once the params ended", fcgiStart(1, "REQUEST_METHOD", "GET", "SCRIPT_NAME", "/s"), "GET /s"},
		{"SCRIPT_NAME, cut", fcgiStart(1, "REQUEST_METHOD", "GET", "SCRIPT_NAME", "/s")[:40], "fastcgi :0"},
		{"aborted", fcgiStart(1, "REQUEST_METHOD", "GET", "REQUEST_URI", "/a")[:30] + fcgiRec(FastCGITypeAbortRequest, 1, ""), "fastcgi :0"},
		{"no BEGIN_REQUEST", stdin + stdin, "fastcgi :0"},
		{"a server's record", "\x01\x06\x00\x01\x00\x00\x00\x00", ":0"},
		{"version 2", "\x02\x01\x00\x01\x00\x08\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00", ":0"},
	}
	for _, tt := range tests {
		if got := Name([]byte(tt.payload), 0); got != tt.want {
			t.Errorf("%s: Name = %q, want %q", tt.what, got, tt.want)
		}
	}
	// Cut anywhere, a request is named as whole, by its port, or with
	// its URI cut.
	for n := range len(get) {
		got := Name([]byte(get[:n]), 0)
		if got != "GET /light.php" && got != "fastcgi :0" && got != ":0" && !strings.HasSuffix(got, "{cut}") {
			t.Errorf("cut at %d: %q", n, got)
		}
	}
}

// fcgiReference decodes a whole params stream the plain way: the values
// naming a request, the last of each, at most MaxFastCGIValue bytes, and
// whether the stream ended between pairs.
func fcgiReference(b []byte) (values [namingParams]string, cut [namingParams]bool, whole bool) {
	length := func() (int, bool) {
		if len(b) == 0 {
			return 0, false
		}
		if b[0] < 0x80 {
			n := int(b[0])
			b = b[1:]
			return n, true
		}
		if len(b) < 4 {
			return 0, false
		}
		n := int(binary.BigEndian.Uint32(b) &^ (1 << 31))
		b = b[4:]
		return n, true
	}
	for len(b) > 0 {
		nameLen, ok1 := length()
		valueLen, ok2 := length()
		if !ok1 || !ok2 || len(b) < nameLen {
			return values, cut, false
		}
		name := string(b[:nameLen])
		b = b[nameLen:]
		value := b[:min(len(b), valueLen)]
		b = b[len(value):]
		for i, want := range namingParamNames {
			if name == want {
				values[i] = string(value[:min(len(value), MaxFastCGIValue)])
				cut[i] = valueLen > MaxFastCGIValue
			}
		}
		if len(value) < valueLen {
			return values, cut, false
		}
	}
	return values, cut, true
}

// FuzzFastCGIParams checks the params decoder against fcgiReference, fed
// whole and cut in three, and that any params are named printably.
func FuzzFastCGIParams(f *testing.F) {
	get := nginxGET(f)
	f.Add([]byte(get[24:24+0x1fc]), uint16(3), uint16(200))
	f.Add([]byte(fcgiPairs("REQUEST_METHOD", "GET", "REQUEST_URI", "/a/1", "SCRIPT_NAME", "/i.php")), uint16(1), uint16(20))
	f.Add([]byte(fcgiLen(14, true)+fcgiLen(3, true)+"REQUEST_METHODGET"), uint16(2), uint16(9))
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint16) {
		var whole FastCGIParams
		whole.Write(data)
		values, cut, between := fcgiReference(data)
		for i := range namingParams {
			if string(whole.values[i]) != values[i] || (whole.cut&(1<<i) != 0) != cut[i] {
				t.Fatalf("%s: %q (cut %v), want %q (cut %v)", namingParamNames[i], whole.values[i], whole.cut&(1<<i) != 0, values[i], cut[i])
			}
		}
		if whole.Between() != between {
			t.Fatalf("between pairs %v, want %v", whole.Between(), between)
		}
		i, j := min(int(cut1), len(data)), min(int(cut2), len(data))
		if i > j {
			i, j = j, i
		}
		var parts FastCGIParams
		parts.Write(data[:i])
		parts.Write(data[i:j])
		parts.Write(data[j:])
		for _, complete := range []bool{true, false} {
			name := string(whole.appendName(nil, 9000, complete))
			if got := string(parts.appendName(nil, 9000, complete)); got != name {
				t.Fatalf("cut at %d and %d: %q, whole %q", i, j, got, name)
			}
			printableName(t, "name", name, maxName)
		}
		if whole.Kept() > namingParams*MaxFastCGIValue {
			t.Fatalf("keeps %d bytes", whole.Kept())
		}
	})
}
