package report

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/reqprof/reqprof/profile"
)

// A target's calls as a client (profile.Request.Peer set) are routes of
// their own, named with their peer; these say so per target and per peer,
// and, for a target with both ends of an exchange (a client and the server
// it spawned, followed as one target; a proxy), what a call and a request
// cost together.

// PeerSummary is what a client's calls to one peer cost: counts and
// means from the exact totals.
type PeerSummary struct {
	Peer  string  `json:"peer"`
	Calls int     `json:"calls"`
	CPUUs float64 `json:"cpu_us"` // mean CPU per call, all in
	// LatencyUs is the mean from a call's first write to its answer's
	// last read.
	LatencyUs float64 `json:"latency_us"`
}

// EndsSummary is a target's two ends side by side: its calls as a
// client and the requests it served, each's mean CPU, and their sum,
// what one call costs at both ends when each call is a request served.
type EndsSummary struct {
	ClientCalls    int     `json:"client_calls"`
	ClientCPUUs    float64 `json:"client_cpu_us"`
	ServerRequests int     `json:"server_requests"`
	ServerCPUUs    float64 `json:"server_cpu_us"`
	SumCPUUs       float64 `json:"sum_cpu_us"`
}

// summarizePeers sums a target's client calls per peer, most calls first;
// nil when it made none.
func summarizePeers(totals map[profile.RouteKey]profile.Totals) []PeerSummary {
	byPeer := map[string]*profile.Totals{}
	for key, sum := range totals {
		if key.Peer == "" {
			continue
		}
		p := byPeer[key.Peer]
		if p == nil {
			p = &profile.Totals{}
			byPeer[key.Peer] = p
		}
		p.Merge(sum)
	}
	peers := slices.SortedFunc(maps.Keys(byPeer), func(a, b string) int {
		return cmp.Or(cmp.Compare(byPeer[b].Requests, byPeer[a].Requests), cmp.Compare(a, b))
	})
	var out []PeerSummary
	for _, peer := range peers {
		t := byPeer[peer]
		out = append(out, PeerSummary{Peer: peer, Calls: t.Requests,
			CPUUs: perRequestUs(t.CPUNs, t.Requests), LatencyUs: perRequestUs(t.LatencyNs, t.Requests)})
	}
	return out
}

// summarizeEnds is a target's two ends, when it has both.
func summarizeEnds(totals map[profile.RouteKey]profile.Totals) *EndsSummary {
	var client, server profile.Totals
	for key, sum := range totals {
		if key.Peer != "" {
			client.Merge(sum)
		} else {
			server.Merge(sum)
		}
	}
	if client.Requests == 0 || server.Requests == 0 {
		return nil
	}
	e := &EndsSummary{
		ClientCalls: client.Requests, ClientCPUUs: perRequestUs(client.CPUNs, client.Requests),
		ServerRequests: server.Requests, ServerCPUUs: perRequestUs(server.CPUNs, server.Requests),
	}
	e.SumCPUUs = roundTenth(e.ClientCPUUs + e.ServerCPUUs)
	return e
}

// roleMeanings say in a few words what a role does with a target's
// outbound connections.
var roleMeanings = map[string]string{
	profile.RoleClient: "each call on an outbound connection is a request of its own, from its first write to its answer's last read, named with its peer",
	profile.RoleBoth:   "it serves requests, and each call on an outbound connection is a request of its own, named with its peer",
	profile.RoleServer: "outbound connections are backends of the requests it serves",
}

// writeClients says a target's role, when it makes calls, its calls per
// peer, and its two ends side by side.
func writeClients(b *bytes.Buffer, t TargetSummary) {
	if t.Role == "" || (t.Role == profile.RoleServer && t.RoleFrom != "--role") {
		return
	}
	fmt.Fprintf(b, "role: %s (%s): %s\n", printable(t.Role), printable(t.RoleFrom), roleMeanings[t.Role])
	for _, p := range t.Peers {
		fmt.Fprintf(b, "calls to %s: %s, %s µs CPU a call, %s µs latency\n", printable(p.Peer),
			groupDigits(fmt.Sprint(p.Calls)), tenths(p.CPUUs), tenths(p.LatencyUs))
	}
	if e := t.Ends; e != nil {
		fmt.Fprintf(b, "both ends: client %s µs a call (%s calls) + server %s µs a request (%s requests) = %s µs\n",
			tenths(e.ClientCPUUs), groupDigits(fmt.Sprint(e.ClientCalls)), tenths(e.ServerCPUUs),
			groupDigits(fmt.Sprint(e.ServerRequests)), tenths(e.SumCPUUs))
	}
}
