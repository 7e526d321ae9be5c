package stream

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/reqprof/reqprof/collector/route"
)

// command encodes a RESP command as clients send it: an array of bulk
// strings.
func command(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

func TestRESPPipeline(t *testing.T) {
	var b strings.Builder
	var wantNames []string
	for i := range 8 {
		b.WriteString(command("SET", fmt.Sprintf("user:%d", i), strings.Repeat("v", i*10)))
		b.WriteString(command("get", fmt.Sprintf("user:%d", i)))
		wantNames = append(wantNames, "SET", "GET")
	}
	r := checkSplits(t, 6379, []byte(b.String()))
	want(t, "16 pipelined commands", r, RESP, nil, wantNames...)
}

func TestRESP(t *testing.T) {
	tests := []struct {
		what   string
		stream string
		names  []string
	}{
		{"module and compound commands", command("JSON.GET", "doc", "$") + command("GEORADIUS_RO", "k") + command("CLIENT", "SETNAME", "x"),
			[]string{"JSON.GET", "GEORADIUS_RO", "CLIENT"}},
		{"empty and binary arguments", command("SET", "", "\x00\r\n\xff") + command("PING"), []string{"SET", "PING"}},
		{"no command: a number", command("123", "x"), []string{":6379"}},
		{"no command: too long", command(strings.Repeat("A", 33), "x") + command("GET", "k"), []string{":6379", "GET"}},
		{"empty arrays are no command", "*0\r\n*-1\r\n" + command("PING"), []string{"PING"}},
		{"inline commands", "PING\r\nset k v\r\n\r\n   \r\nGET k\n" + command("DEL", "k"), []string{"PING", "SET", "GET", "DEL"}},
		{"inline line that is no command", "PING\r\n12 x\r\n", []string{"PING", ":6379"}},
		{"HTTP/0.9 is a word and a line", "GET /\r\n", []string{"GET"}},
		{"a command not complete", command("SET", "k", "v")[:20], nil},
	}
	for _, tt := range tests {
		r := checkSplits(t, 6379, []byte(tt.stream))
		want(t, tt.what, r, RESP, nil, tt.names...)
	}
}

// Each command alone gets the name route.Name gives its bytes.
func TestRESPNamesAsRoute(t *testing.T) {
	for _, s := range []string{
		command("GET", "user1"), command("set", "user1", "alice"), command("JSON.GET", "doc", "$"),
		command("\x00\x01\x02\x03"), command("hello", "3"), "PING\r\n", "get user1\r\n", "GET /user1\r\n",
	} {
		r := feed(t, 6379, []byte(s))
		if r.err != nil || len(r.reqs) != 1 {
			t.Errorf("%q: %v", s, r)
			continue
		}
		if got, want := r.reqs[0].Name, route.Name([]byte(s), 6379); got != want {
			t.Errorf("%q: named %q, route.Name says %q", s, got, want)
		}
	}
}

func TestRESPBroken(t *testing.T) {
	tests := []struct {
		what   string
		stream string
		err    error
		names  []string
	}{
		{"argument not a bulk string", "*2\r\n$3\r\nGET\r\n:1\r\n", ErrMalformed, nil},
		{"bulk without CR LF", "*1\r\n$4\r\nPINGxx", ErrMalformed, nil},
		{"length without CR", "*1\n$4\r\nPING\r\n", ErrMalformed, nil},
		{"negative bulk", "*1\r\n$-1\r\n", ErrMalformed, nil},
		{"bad digits", command("PING") + "*1x\r\n", ErrMalformed, []string{"PING"}},
		{"too many arguments", "*1048577\r\n", ErrBound, nil},
		{"bulk too long", "*1\r\n$536870913\r\n", ErrMalformed, nil},
		{"length line too long", "*" + strings.Repeat("0", 40) + "\r\n", ErrBound, nil},
		{"inline line too long", "PING " + strings.Repeat("x", 70<<10), ErrBound, nil},
	}
	for _, tt := range tests {
		var r result
		if len(tt.stream) < 4096 {
			r = checkSplits(t, 6379, []byte(tt.stream))
		} else {
			r = feed(t, 6379, []byte(tt.stream))
		}
		want(t, tt.what, r, RESP, tt.err, tt.names...)
	}
}

func TestRESPGaps(t *testing.T) {
	value := strings.Repeat("v", 100000)
	s := []byte(command("SET", "big", value) + command("GET", "big"))
	at := bytes.Index(s, []byte("vvv"))
	c := NewConn(6379)
	c.Feed(0, s[:at+10])
	c.Feed(uint64(at+90000), s[at+90000:])
	if r := c.Requests(nil); c.Err() != nil || len(r) != 2 || r[0].Name != "SET" || r[1].Name != "GET" {
		t.Errorf("gap in a value: %v %v", r, c.Err())
	}
	// A gap over the command.
	c = NewConn(6379)
	c.Feed(0, s[:8])
	c.Feed(12, s[12:])
	if errKind(c.Err()) != ErrGap {
		t.Errorf("gap in the command: %v", c.Err())
	}
}
