package stream

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http2"
)

// Streams with units near the bounds, cut at random places into many
// Feeds, give what one Feed gives.
func TestLargeSplits(t *testing.T) {
	bigValue := strings.Repeat("v", 70000)
	var batch strings.Builder
	batch.WriteString("[")
	for i := range 500 {
		if i > 0 {
			batch.WriteString(",")
		}
		batch.WriteString(mcpToolsCall)
	}
	batch.WriteString("]")
	longCall := `{"jsonrpc":"2.0","method":"write","params":{"text":"` + strings.Repeat("t", 20000) + `"},"id":1}`

	h2 := newH2Client(t, true)
	h2.settings()
	// Bytes whose Huffman codes are long go as they are: a 32 KiB block.
	b := h2.block(append(get("/big"), "x-big", strings.Repeat("\x01", 16000), "x-big2", strings.Repeat("\x02", 16000))...)
	h2.headers(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:20000], EndStream: true})
	h2.check(h2.fr.WriteContinuation(1, false, b[20000:30000]))
	h2.check(h2.fr.WriteContinuation(1, true, b[30000:]))
	h2.check(h2.fr.WriteData(1, true, bytes.Repeat([]byte("d"), 100000)))
	h2.request(3, true, get("/after")...)

	streams := []struct {
		what string
		data string
		n    int // requests expected
	}{
		{"HTTP/1", "GET / HTTP/1.1\r\nX-Pad: " + strings.Repeat("p", 60000) + "\r\n\r\n" +
			chunked("/mcp", batch.String(), 1000, 3, 20000) + post("/mcp", longCall) + post("/x", bigValue) + curlGET("/end"), 504},
		{"h2", h2.out.String(), 2},
		{"RESP", command("SET", "k", bigValue) + "PING " + strings.Repeat("x", 60000) + "\r\n" + command("GET", "k"), 3},
		{"JSON-RPC", batch.String() + "\n" + longCall + "\n" + ethChainID, 502},
		{"LSP", lsp(batch.String(), true) + lsp(longCall, false), 501},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range streams {
		data := []byte(s.data)
		whole := feed(t, 80, data)
		if whole.err != nil || len(whole.reqs) != s.n {
			t.Errorf("%s: %d requests, error %v", s.what, len(whole.reqs), whole.err)
		}
		for range 30 {
			cuts := make([]int, 1+rng.IntN(40))
			for i := range cuts {
				cuts[i] = rng.IntN(len(data) + 1)
			}
			slices.Sort(cuts)
			if got := feed(t, 80, split(data, cuts...)...); !same(got, whole) {
				t.Fatalf("%s cut at %v:\n got %.300v\nwant %.300v", s.what, cuts, got, whole)
			}
		}
	}
}

func TestH2BlockBound(t *testing.T) {
	h2 := newH2Client(t, true)
	h2.enc.SetMaxDynamicTableSizeLimit(0)
	var fields []string
	for i := range 5 {
		fields = append(fields, "x-big-"+string(rune('a'+i)), strings.Repeat("\x01", 15000))
	}
	b := h2.block(append(get("/big"), fields...)...) // more than 64 KiB over its frames
	h2.headers(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:16384]})
	for rest := b[16384:]; len(rest) > 0; {
		n := min(len(rest), 16384)
		h2.check(h2.fr.WriteContinuation(1, n == len(rest), rest[:n]))
		rest = rest[n:]
	}
	r := feed(t, 80, h2.out.Bytes())
	if errKind(r.err) != ErrBound || len(b) <= maxHeaderBlock {
		t.Errorf("a block of %d bytes: %v", len(b), r)
	}
}
