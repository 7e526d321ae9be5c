package collector

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAppendClientRoute(t *testing.T) {
	for _, c := range []struct{ name, peer, want string }{
		{"GET /users/{id}", "127.0.0.1:9400", "GET /users/{id} -> 127.0.0.1:9400"},
		{"tools/call add", "stdio", "tools/call add -> stdio"},
		{":0", "[::1]:6379", "call -> [::1]:6379"},
		{"tls :0", "10.0.0.2:443", "tls -> 10.0.0.2:443"},
		{"h2 :0", "127.0.0.1:50051", "h2 -> 127.0.0.1:50051"},
	} {
		if got := string(appendClientRoute(nil, c.name, c.peer)); got != c.want {
			t.Errorf("appendClientRoute(%q, %q) = %q, want %q", c.name, c.peer, got, c.want)
		}
	}
	// Reused without allocating once it has grown.
	buf := appendClientRoute(nil, "GET /a", "127.0.0.1:1")
	if n := testing.AllocsPerRun(100, func() { buf = appendClientRoute(buf[:0], "GET /b", "127.0.0.1:2") }); n != 0 {
		t.Errorf("%v allocations a route", n)
	}
}

func TestPeerNames(t *testing.T) {
	var names peerNames
	v4 := reqprofBackendPeer{Port: 9400, Family: afINET}
	copy(v4.Addr[:], []byte{127, 0, 0, 1})
	if got := names.name(v4); got != "127.0.0.1:9400" {
		t.Errorf("IPv4 peer %q", got)
	}
	if got := names.name(reqprofBackendPeer{}); got != "stdio" {
		t.Errorf("a pipe's peer %q, want stdio", got)
	}
	if got := names.name(reqprofBackendPeer{Family: afUNIX}); got != "unix" {
		t.Errorf("a Unix socket's peer %q", got)
	}
	for port := range maxPeers {
		names.name(reqprofBackendPeer{Port: uint16(port), Family: afINET6})
	}
	if got := names.name(reqprofBackendPeer{Port: 1, Family: afINET6, Addr: [16]byte{1}}); got != otherPeers {
		t.Errorf("past the bound: %q, want %q", got, otherPeers)
	}
	if got := names.name(v4); got != "127.0.0.1:9400" {
		t.Errorf("a peer named before the bound: %q", got)
	}
}

func TestListeningInode(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 5151 1 0000000000000000 20 4 30 10 -1
`
	path := filepath.Join(t.TempDir(), "tcp")
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		inodes map[uint64]bool
		want   bool
	}{
		{map[uint64]bool{4242: true}, true},  // its listener
		{map[uint64]bool{5151: true}, false}, // a connection it made, not listening
		{map[uint64]bool{9999: true}, false}, // another process's
	} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := listeningInode(f, c.inodes); got != c.want {
			t.Errorf("inodes %v: %v, want %v", c.inodes, got, c.want)
		}
		f.Close()
	}
}

func TestValidRole(t *testing.T) {
	for role, want := range map[string]bool{"": true, "client": true, "server": true, "both": true, "proxy": false, "Client": false} {
		if got := ValidRole(role); got != want {
			t.Errorf("ValidRole(%q) = %v", role, got)
		}
	}
}

// A client's call arrives as a burst record with REQ_CLIENT and its peer:
// it is named from its bytes, with its peer, a route of its own; pipelined
// calls are split as a server's requests are.
func TestClientCallRecords(t *testing.T) {
	res := newConsumeResult(1)
	call := func(conn uint64, data string, peer reqprofBackendPeer) {
		in := reqprofRequestRecord{Conn: conn, StartNs: 10, FirstWriteNs: 20, EndNs: 30, PayloadLen: uint16(len(data)),
			BytesOut: uint64(len(data)), Flags: uint32(reqprofRecordFlagsREQ_CLIENT), Peer: peer}
		in.Cost.UserNs = 6000
		copy(in.Payload[:], data)
		res.decode(recordBytes(t, in))
	}
	nginx := reqprofBackendPeer{Port: 9400, Family: afINET}
	copy(nginx.Addr[:], []byte{127, 0, 0, 1})
	call(1, get("/a"), nginx)
	call(1, get("/a")+get("/b"), nginx) // pipelined: two calls
	call(2, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add"}}`+"\n", reqprofBackendPeer{})
	if res.malformed != 0 {
		t.Fatalf("%d records malformed", res.malformed)
	}
	got := map[string]int{}
	for key, sum := range res.finished[0].byRoute {
		got[key.Route+" | "+key.Peer] += sum.Requests
	}
	want := map[string]int{
		"GET /a -> 127.0.0.1:9400 | 127.0.0.1:9400": 2,
		"GET /b -> 127.0.0.1:9400 | 127.0.0.1:9400": 1,
		"tools/call add -> stdio | stdio":           1,
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%q: %d calls, want %d (all: %v)", k, got[k], n, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("routes %v, want %v", got, want)
	}
	if total := res.finished[0].totals.CPUNs; total != 3*6000 {
		t.Errorf("CPU of the calls %d ns, want the records' %d", total, 3*6000)
	}
}
