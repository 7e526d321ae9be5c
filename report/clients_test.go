package report

import (
	"testing"
	"time"

	"github.com/reqprof/reqprof/profile"
)

// clientCalls are n calls to peer named route (as the collector names
// them, "NAME -> PEER"), of userNs + kernelNs CPU each, the answer read
// latency after the call's first write.
func clientCalls(n int, route, peer string, userNs, kernelNs uint64, latency time.Duration) []profile.Request {
	reqs := make([]profile.Request, n)
	for i := range reqs {
		r := profile.Request{Route: route + " -> " + peer, Peer: peer, Protocol: "jsonrpc",
			UserNs: userNs + uint64(i%5)*1_000, KernelNs: kernelNs, BytesOut: 140, BytesIn: 310}
		r.Start = time.Duration(i) * time.Millisecond
		r.FirstWrite = r.Start + latency - 10*time.Microsecond
		r.End = r.Start + latency
		reqs[i] = r
	}
	return reqs
}

// clientAndServerRun is an MCP client and the server it spawned, followed
// as one target: its calls to the server, and the server's requests.
func clientAndServerRun() profile.Run {
	reqs := clientCalls(40, "tools/call add", "127.0.0.1:9400", 30_000, 10_000, 900*time.Microsecond)
	reqs = append(reqs, clientCalls(10, "initialize", "127.0.0.1:9400", 80_000, 20_000, 2*time.Millisecond)...)
	for _, r := range steadyRequests(50, 120_000, 30_000, 5_000) {
		reqs = append(reqs, r)
	}
	return profile.Run{Duration: 5 * time.Second, Targets: []profile.Target{{
		PID: 4100, Comm: "mcp-client", Threads: 3, Role: profile.RoleBoth, RoleFrom: "--role",
		Requests: reqs,
	}}}
}

// twoClientsRun is two client SDKs calling the same server.
func twoClientsRun() profile.Run {
	return profile.Run{Meta: benchMeta, Duration: 10 * time.Second, Targets: []profile.Target{
		{PID: 5101, Comm: "client", Label: "go-sdk", Threads: 4, Role: profile.RoleClient, RoleFrom: "detected",
			Requests: clientCalls(1000, "tools/call add", "127.0.0.1:9400", 25_000, 15_000, 300*time.Microsecond)},
		{PID: 5102, Comm: "python3", Label: "python-sdk", Threads: 2, Role: profile.RoleClient, RoleFrom: "detected",
			Requests: clientCalls(900, "tools/call add", "127.0.0.1:9400", 400_000, 60_000, 1200*time.Microsecond)},
	}}
}

func TestClientSummary(t *testing.T) {
	s := Summarize(clientAndServerRun())
	target := s.Targets[0]
	if len(target.Peers) != 1 || target.Peers[0].Peer != "127.0.0.1:9400" || target.Peers[0].Calls != 50 {
		t.Fatalf("peers %+v, want 50 calls to 127.0.0.1:9400", target.Peers)
	}
	e := target.Ends
	if e == nil || e.ClientCalls != 50 || e.ServerRequests != 50 {
		t.Fatalf("ends %+v, want 50 calls and 50 requests", e)
	}
	if e.SumCPUUs != roundTenth(e.ClientCPUUs+e.ServerCPUUs) {
		t.Errorf("sum %v of %v and %v", e.SumCPUUs, e.ClientCPUUs, e.ServerCPUUs)
	}
	roles := map[string]string{}
	for _, r := range target.Routes {
		roles[r.Route] = r.Role + " " + r.Peer
	}
	if roles["tools/call add -> 127.0.0.1:9400"] != "client 127.0.0.1:9400" || roles["POST /mcp tools/call add"] != " " {
		t.Errorf("routes' roles and peers: %q", roles)
	}
	// Grouped by port, the calls are grouped by their peer.
	byPort := SummarizeWith(clientAndServerRun(), SummarizeOptions{GroupBy: GroupByPort})
	names := map[string]int{}
	for _, r := range byPort.Targets[0].Routes {
		names[r.Route] = r.Requests
	}
	if names["calls -> 127.0.0.1:9400"] != 50 || names[":8080"] != 50 {
		t.Errorf("by port: %v", names)
	}
}
