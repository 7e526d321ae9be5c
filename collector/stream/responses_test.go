package stream

import (
	"slices"
	"testing"
)

func key(id string) uint64 { return IDKey([]byte(id)) }

// write feeds r one write, captured up to headMax bytes.
func write(r *Responses, off *uint64, data string, headMax int) ([]uint64, bool) {
	head := []byte(data)
	if len(head) > headMax {
		head = head[:headMax]
	}
	ids, unread := r.Write(*off, uint64(len(data)), head, nil)
	*off += uint64(len(data))
	return ids, unread
}

func TestResponsesByID(t *testing.T) {
	long := `{"jsonrpc":"2.0","id":"x","result":{"text":"` + string(make([]byte, 0)) + stringsRepeat("a", 600) + `"}}` + "\n"
	for _, tc := range []struct {
		name   string
		writes []string
		want   [][]string // ids per write
		unread []bool
	}{
		{"one a line", []string{`{"jsonrpc":"2.0","id":2,"result":{}}` + "\n", `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"},
			[][]string{{"2"}, {"1"}}, []bool{false, false}},
		{"two in one write, reversed", []string{`{"jsonrpc":"2.0","id":"b","result":1}` + "\n" + `{"jsonrpc":"2.0","id":"a","error":{"code":1}}` + "\n"},
			[][]string{{`"b"`, `"a"`}}, []bool{false}},
		{"line split over writes", []string{`{"jsonrpc":"2.0","id":7,`, `"result":{}}` + "\n", `{"jsonrpc":"2.0","id":8,"result":{}}` + "\n"},
			[][]string{{"7"}, nil, {"8"}}, []bool{false, true, false}},
		{"newline apart", []string{`{"jsonrpc":"2.0","id":3,"result":{}}`, "\n", `{"jsonrpc":"2.0","id":4,"result":{}}`},
			[][]string{{"3"}, nil, {"4"}}, []bool{false, false, false}},
		{"server notification", []string{`{"jsonrpc":"2.0","method":"notifications/progress","params":{}}` + "\n", `{"jsonrpc":"2.0","id":5,"result":{}}` + "\n"},
			[][]string{nil, {"5"}}, []bool{false, false}},
		{"long response cut", []string{long, `{"jsonrpc":"2.0","id":9,"result":{}}` + "\n"},
			[][]string{{`"x"`}, {"9"}}, []bool{false, false}},
		{"id after a long result", []string{`{"jsonrpc":"2.0","result":"` + stringsRepeat("b", 300) + `","id":1}` + "\n"},
			[][]string{nil}, []bool{true}},
		{"batch", []string{`[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{}}]` + "\n"},
			[][]string{{"1", "2"}}, []bool{false}},
		{"LSP, header and body apart", []string{"Content-Length: 36\r\n\r\n", `{"jsonrpc":"2.0","id":1,"result":{}}`, "Content-Length: 36\r\n\r\n" + `{"jsonrpc":"2.0","id":2,"result":{}}`},
			[][]string{nil, {"1"}, {"2"}}, []bool{false, false, false}},
		{"LSP whole", []string{"Content-Length: 36\r\n\r\n" + `{"jsonrpc":"2.0","id":1,"result":{}}` + "Content-Length: 36\r\n\r\n" + `{"jsonrpc":"2.0","id":2,"result":{}}`},
			[][]string{{"1", "2"}}, []bool{false}},
		{"not JSON", []string{"hello\n"}, [][]string{nil}, []bool{true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Responses
			var off uint64
			for i, w := range tc.writes {
				ids, unread := write(&r, &off, w, 256)
				var want []uint64
				for _, id := range tc.want[i] {
					want = append(want, key(id))
				}
				if !slices.Equal(ids, want) || unread != tc.unread[i] {
					t.Errorf("write %d %q: ids %v unread %v, want %v unread %v", i, w, ids, unread, tc.want[i], tc.unread[i])
				}
			}
		})
	}
}

// A lost record (a gap in the offsets) leaves the position unknown until a
// write starts a message.
func TestResponsesAfterGap(t *testing.T) {
	var r Responses
	msg := `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"
	r.Write(0, uint64(len(msg)), []byte(msg), nil)
	ids, unread := r.Write(uint64(2*len(msg)), uint64(len(msg)), []byte(msg), nil)
	if !slices.Equal(ids, []uint64{key("1")}) || unread {
		t.Errorf("after a gap: %v %v", ids, unread)
	}
	ids, unread = r.Write(uint64(4*len(msg)), 5, []byte(`"id":`), nil)
	if len(ids) != 0 || !unread {
		t.Errorf("a gap into the middle of a message: %v %v", ids, unread)
	}
}

func stringsRepeat(s string, n int) string {
	b := make([]byte, 0, len(s)*n)
	for range n {
		b = append(b, s...)
	}
	return string(b)
}

func FuzzResponses(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`+"\n"), uint16(256), uint16(10))
	f.Add([]byte("Content-Length: 36\r\n\r\n"+`{"jsonrpc":"2.0","id":1,"result":{}}`), uint16(20), uint16(30))
	f.Add([]byte(`[{"jsonrpc":"2.0","id":"a","result":{}},{"jsonrpc":"2.0","id":2,"error":{}}]`), uint16(40), uint16(7))
	f.Fuzz(func(t *testing.T, data []byte, headMax, split uint16) {
		var r Responses
		var off uint64
		for len(data) > 0 {
			n := min(len(data), int(split)+1)
			head := data[:min(n, int(headMax))]
			ids, _ := r.Write(off, uint64(n), head, nil)
			if len(ids) > n {
				t.Fatalf("%d ids from a write of %d bytes", len(ids), n)
			}
			off += uint64(n)
			data = data[n:]
		}
	})
}

// A malformed record may say anything: a length past int's range, an
// offset at the end of uint64's. Write reads what it was given and no more.
func TestResponsesOutOfRangeWrites(t *testing.T) {
	head := []byte(`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n")
	for _, w := range []struct{ off, length uint64 }{
		{0, 1<<63 + 12345},
		{^uint64(0) - 5, uint64(len(head))},
		{^uint64(0) - 5, ^uint64(0)},
	} {
		var r Responses
		ids, _ := r.Write(w.off, w.length, head, nil)
		if len(ids) > 1 {
			t.Errorf("write at %d of %d bytes: %d ids from one response", w.off, w.length, len(ids))
		}
		r.Write(w.off+w.length, 10, head[:10], nil) // and the next, wherever it lands
	}
}
