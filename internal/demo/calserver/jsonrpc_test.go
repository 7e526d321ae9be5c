package calserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/reqprof/reqprof/internal/demo/loadgen"
)

func TestParseRPC(t *testing.T) {
	for _, tc := range []struct {
		body    string
		key, id string // key "" means not JSON-RPC
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`, "tools/call add", "1"},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, "tools/list", "2"},
		{`{"method":"tools/call","params":{"arguments":{"name":"evil"},"name":"add"},"id":"x","jsonrpc":"2.0"}`, "tools/call add", `"x"`},
		{" {\n \"jsonrpc\" : \"2.0\" , \"method\" : \"ping\" }\n", "ping", ""},
		{`{"jsonrpc":"2.0","m\u0065thod":"tools\/call","params":{"name":"\u00e9t\u00E9 \ud83d\ude00"}}`, "tools/call été 😀", ""},
		{`{"jsonrpc":"2.0","method":"prompts/get","params":{"name":"p"},"id":null}`, "prompts/get p", "null"},
		{`{"jsonrpc":"2.0","method":"resources/list","params":{"name":"ignored"}}`, "resources/list", ""},
		{`{"jsonrpc":"2.0","method":"tools/call","params":{"name":7}}`, "tools/call", ""},
		{`{"jsonrpc":"2.0","method":"first","method":"second"}`, "first", ""},
		{`{"jsonrpc":"2.0","id":{"a":["}",{"b":"\\"}]},"method":"m"}`, "m", `{"a":["}",{"b":"\\"}]}`},
		{`{"jsonrpc":"1.0","method":"ping"}`, "", ""},
		{`{"jsonrpc":"2.0","method":42}`, "", ""},
		{`{"jsonrpc":"2.0"}`, "", ""},
		{`[{"jsonrpc":"2.0","method":"a"}]`, "", ""},
		{`{"jsonrpc":"2.0","method":"a"`, "", ""},
		{`{"jsonrpc":"2.0","method":"a"} x`, "", ""},
		{`{"jsonrpc":"2.0","method":"a",}`, "", ""},
		{`{"name":"x"}`, "", ""},
		{``, "", ""},
	} {
		call, ok := parseRPC([]byte(tc.body))
		var c conn
		key := ""
		if ok {
			key = string(c.rpcKey(call))
		}
		if key != tc.key || ok && string(call.id) != tc.id {
			t.Errorf("parseRPC(%s): key %q id %s ok %v; want key %q id %s", tc.body, key, call.id, ok, tc.key, tc.id)
		}
	}
}

func TestTakeRequest(t *testing.T) {
	s := &Server{response: []byte(response), byKey: map[string]*route{}, fallback: &route{name: DefaultRoute}}
	for _, key := range []string{"/a", "tools/call add", "tools/list"} {
		s.byKey[key] = &route{name: key}
	}
	rpc := `{"jsonrpc":"2.0","id":"q","method":"tools/call","params":{"name":"add"}}`
	partial := `{"jsonrpc":"2.0","method":"tools/list","id":3`
	in := "GET /a?x=1 HTTP/1.1\r\nHost: x\r\n\r\n" +
		"POST /mcp HTTP/1.1\r\ncontent-LENGTH: " + fmt.Sprint(len(rpc)) + "\r\n\r\n" + rpc +
		"POST /mcp HTTP/1.1\r\nContent-Length: 4\r\n\r\n{}{}" +
		"POST /b HTTP/1.1\r\nContent-Length: " + fmt.Sprint(len(partial)+1) + "\r\n\r\n" + partial // one byte short
	var c conn
	c.n = copy(c.buf[:], in)
	var got []string
	for {
		r, err := c.takeRequest(s)
		if err != nil {
			t.Fatal(err)
		}
		if r == nil {
			break
		}
		got = append(got, r.name+" -> "+string(c.response))
	}
	want := []string{
		"/a -> " + response,
		"tools/call add -> HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 38\r\n\r\n" + `{"jsonrpc":"2.0","id":"q","result":{}}`,
		"* -> " + response,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
	c.buf[c.n] = '}'
	c.n++
	if r, err := c.takeRequest(s); err != nil || r == nil || r.name != "tools/list" {
		t.Errorf("completed body: route %v, %v; want tools/list", r, err)
	}
	if c.n != 0 {
		t.Errorf("%d bytes left over", c.n)
	}

	for _, bad := range []string{
		"POST / HTTP/1.1\r\nContent-Length: 99999\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nX-Long: " + strings.Repeat("y", maxHead) + "\r\n\r\n",
	} {
		var c conn
		c.n = copy(c.buf[:], bad)
		if _, err := c.takeRequest(s); err == nil {
			t.Errorf("takeRequest(%.60q) took it", bad)
		}
	}
}

// TestTakeRequestAllocs checks that routing a JSON-RPC request does not
// allocate, so that the ground truth runs without the garbage collector.
func TestTakeRequestAllocs(t *testing.T) {
	s := &Server{response: []byte(response), byKey: map[string]*route{}, fallback: &route{name: DefaultRoute}}
	s.byKey["tools/call add"] = &route{name: "tools/call add"}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`
	req := "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
	c := new(conn)
	allocs := testing.AllocsPerRun(1000, func() {
		c.n = copy(c.buf[:], req)
		if r, err := c.takeRequest(s); err != nil || r.name != "tools/call add" {
			t.Fatalf("route %v, %v", r, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per JSON-RPC request; want 0", allocs)
	}
}

func TestJSONRPCRoutes(t *testing.T) {
	const requests = 2000
	bodies := []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		"",
	}
	burns := map[string]time.Duration{"tools/call add": 200 * time.Microsecond, "tools/list": 400 * time.Microsecond, "/a": 100 * time.Microsecond}
	for _, model := range []Model{Threads, Epoll} {
		t.Run(string(model), func(t *testing.T) {
			srv, err := Start(Config{Model: model, Routes: burns})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			res, err := loadgen.Run(context.Background(), loadgen.Config{
				Addr: srv.Addr(), Conns: 8, Requests: requests,
				Paths: []string{"/mcp", "/mcp", "/a"}, Bodies: bodies,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Close(); err != nil {
				t.Fatal(err)
			}
			st := srv.Stats()
			if st.Requests != requests {
				t.Errorf("server saw %d requests; want %d", st.Requests, requests)
			}
			for i, key := range []string{"tools/call add", "tools/list", "/a"} {
				got := st.Routes[key]
				if got.Requests != uint64(res.PerRequest[i]) {
					t.Errorf("%s: server saw %d requests, loadgen got %d answers", key, got.Requests, res.PerRequest[i])
				}
				if want := float64(burns[key].Microseconds()); got.MeanCPUMicros() < 0.8*want {
					t.Errorf("%s: mean CPU %.1f µs; want at least 0.8 × %v", key, got.MeanCPUMicros(), burns[key])
				}
			}
			if n := st.Routes[DefaultRoute].Requests; n != 0 {
				t.Errorf("%d requests fell to the default route", n)
			}
		})
	}
}

func TestJSONRPCResponse(t *testing.T) {
	srv, err := Start(Config{Model: Epoll})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"jsonrpc":"2.0","method":"ping","id":"a b"}`
	// Head and body in separate writes: the request completes on the second.
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nContent-Length: %d\r\n\r\n", len(body))
	time.Sleep(20 * time.Millisecond)
	io.WriteString(c, body)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	head := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		head += line
		if line == "\r\n" {
			break
		}
	}
	want := `{"jsonrpc":"2.0","id":"a b","result":{}}`
	if !strings.Contains(head, "Content-Type: application/json\r\n") || !strings.Contains(head, fmt.Sprintf("Content-Length: %d\r\n", len(want))) {
		t.Errorf("head %q", head)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != want {
		t.Errorf("body %q, %v; want %q", got, err, want)
	}
}

func BenchmarkTakeRequest(b *testing.B) {
	s := &Server{response: []byte(response), byKey: map[string]*route{}, fallback: &route{name: DefaultRoute}}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`
	for name, req := range map[string]string{
		"GET":     "GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
		"JSONRPC": "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body,
	} {
		b.Run(name, func(b *testing.B) {
			c := new(conn)
			for b.Loop() {
				c.n = copy(c.buf[:], req)
				if _, err := c.takeRequest(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
