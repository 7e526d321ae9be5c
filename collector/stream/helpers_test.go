package stream

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// result is what a Conn made of a stream.
type result struct {
	reqs  []Request
	err   error
	proto Protocol
}

func (r result) String() string {
	var b strings.Builder
	for _, q := range r.reqs {
		fmt.Fprintf(&b, "%q/%v", q.Name, q.Protocol)
		if q.Notification {
			b.WriteString("/notification")
		}
		if q.Response {
			b.WriteString("/response")
		}
		b.WriteString(" ")
	}
	fmt.Fprintf(&b, "proto=%v err=%v", r.proto, r.err)
	return b.String()
}

// errKind is the Err* sentinel err wraps, or err itself.
func errKind(err error) error {
	for _, kind := range []error{ErrTLS, ErrUnknown, ErrGap, ErrMalformed, ErrBound, ErrHPACK} {
		if errors.Is(err, kind) {
			return kind
		}
	}
	return err
}

// same reports whether two results agree: the same requests, protocol and
// kind of error.
func same(a, b result) bool {
	return slices.Equal(withoutIDs(a.reqs), withoutIDs(b.reqs)) && a.proto == b.proto && errKind(a.err) == errKind(b.err)
}

// feed runs parts, consecutive pieces of one stream, through a new Conn,
// taking its requests after each, and checks the buffering bound.
func feed(t testing.TB, port uint16, parts ...[]byte) result {
	t.Helper()
	c := NewConn(port)
	var off uint64
	var reqs []Request
	for _, p := range parts {
		c.Feed(off, p)
		off += uint64(len(p))
		if n := c.Buffered(); n > maxBuffer {
			t.Fatalf("buffers %d bytes", n)
		}
		reqs = c.Requests(reqs)
	}
	return result{reqs, c.Err(), c.Protocol()}
}

// split cuts data at the given offsets.
func split(data []byte, at ...int) [][]byte {
	var parts [][]byte
	prev := 0
	for _, i := range at {
		parts = append(parts, data[prev:i])
		prev = i
	}
	return append(parts, data[prev:])
}

// checkSplits checks that data cut at any byte into two Feeds, or fed a
// byte at a time, gives what one Feed gives, and returns that.
func checkSplits(t *testing.T, port uint16, data []byte) result {
	t.Helper()
	whole := feed(t, port, data)
	for i := 1; i < len(data); i++ {
		if got := feed(t, port, split(data, i)...); !same(got, whole) {
			t.Fatalf("cut at %d of %q:\n got %v\nwant %v", i, data, got, whole)
		}
	}
	bytewise := make([][]byte, len(data))
	for i := range data {
		bytewise[i] = data[i : i+1]
	}
	if got := feed(t, port, bytewise...); !same(got, whole) {
		t.Fatalf("a byte at a time:\n got %v\nwant %v", got, whole)
	}
	return whole
}

// names lists the requests' names.
func names(reqs []Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Name)
	}
	return out
}

// want checks a result's names, protocol of every request, and error.
func want(t *testing.T, what string, r result, p Protocol, err error, wantNames ...string) {
	t.Helper()
	if errKind(r.err) != err {
		t.Errorf("%s: error %v, want %v", what, r.err, err)
	}
	if got := names(r.reqs); !slices.Equal(got, wantNames) {
		t.Errorf("%s: names\n got %q\nwant %q", what, got, wantNames)
	}
	for _, q := range r.reqs {
		if q.Protocol != p {
			t.Errorf("%s: %q is %v, want %v", what, q.Name, q.Protocol, p)
		}
	}
}

// withoutIDs is reqs without their JSON-RPC ids, which TestJSONRPCIDs checks.
func withoutIDs(reqs []Request) []Request {
	out := slices.Clone(reqs)
	for i := range out {
		out[i].ID, out[i].HasID = 0, false
	}
	return out
}
