package report

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/reqprof/reqprof/profile"
)

// BackendSummary is what a target's (or a route's) requests did with one
// backend, a peer of its outbound connections, per request: calls, time
// waiting from each call's first write to its answer's last read, bytes.
type BackendSummary struct {
	Peer            string  `json:"peer"`
	CallsPerRequest float64 `json:"calls_per_request"`
	WaitUs          float64 `json:"wait_us"`
	BytesIn         float64 `json:"bytes_in"`
	BytesOut        float64 `json:"bytes_out"`
}

// runtimeMeanings say how each runtime's threads were taken to resume a
// request whose backend answered.
var runtimeMeanings = map[string]string{
	"node":    "a backend's answer resumes its request at once",
	"asyncio": "a write claims the loop's CPU since its last read, write or poll; a call is the woken task's due first",
	"threads": "a request's thread reads its backend's answers",
	"go":      "goroutines followed",
}

// summarizeBackends sums the backends of the routes keep takes, by peer,
// per request of requests.
func summarizeBackends(backends []profile.Backend, requests int, keep func(profile.RouteKey) bool) []BackendSummary {
	if requests == 0 {
		return nil
	}
	byPeer := map[string]*profile.Backend{}
	var peers []string
	for _, b := range backends {
		if !keep(b.Route) {
			continue
		}
		sum := byPeer[b.Peer]
		if sum == nil {
			sum = &profile.Backend{Peer: b.Peer}
			byPeer[b.Peer] = sum
			peers = append(peers, b.Peer)
		}
		sum.Calls += b.Calls
		sum.WaitNs += b.WaitNs
		sum.BytesIn += b.BytesIn
		sum.BytesOut += b.BytesOut
	}
	if len(peers) == 0 {
		return nil
	}
	sort.Strings(peers)
	n := float64(requests)
	out := make([]BackendSummary, 0, len(peers))
	for _, peer := range peers {
		sum := byPeer[peer]
		out = append(out, BackendSummary{
			Peer:            peer,
			CallsPerRequest: float64(sum.Calls) / n,
			WaitUs:          float64(sum.WaitNs) / n / 1e3,
			BytesIn:         float64(sum.BytesIn) / n,
			BytesOut:        float64(sum.BytesOut) / n,
		})
	}
	return out
}

// interleavedShare is the share of totals' CPU that is estimated, in
// percent; 0 when none is.
func interleavedShare(t profile.Totals) float64 {
	if t.CPUNs == 0 {
		return 0
	}
	return 100 * float64(t.InterleavedNs) / float64(t.CPUNs)
}

// writeBackends says how backends' answers were followed, what the
// target's requests and each route's waited on, and how much of their CPU
// is estimated.
func writeBackends(b *bytes.Buffer, t TargetSummary) {
	if t.Runtime != "" && (len(t.Backends) > 0 || t.Interleaved > 0 || t.RuntimeFrom == "--runtime") {
		fmt.Fprintf(b, "runtime: %s (%s): %s\n", printable(t.Runtime), printable(t.RuntimeFrom), runtimeMeanings[t.Runtime])
	}
	for _, be := range t.Backends {
		fmt.Fprintf(b, "backend %s: %s calls a request, %s µs waiting, %s B in, %s B out\n", printable(be.Peer),
			hundredths(be.CallsPerRequest), tenths(be.WaitUs), tenths(be.BytesIn), tenths(be.BytesOut))
	}
	for _, r := range t.Routes {
		for _, be := range r.Backends {
			fmt.Fprintf(b, "  %s → %s: %s calls a request, %s µs waiting\n", printable(r.Route), printable(be.Peer),
				hundredths(be.CallsPerRequest), tenths(be.WaitUs))
		}
	}
	if t.Interleaved > 0 {
		fmt.Fprintf(b, "interleaved: %s%% of requests' CPU is estimated: which request it served could not be told (a loop of a runtime reqprof has no model of, see --runtime, or jobs queued to a pool)\n",
			tenths(t.Interleaved))
		for _, r := range t.Routes {
			if r.Interleaved > 0 {
				fmt.Fprintf(b, "  %s: %s%%\n", printable(r.Route), tenths(r.Interleaved))
			}
		}
	}
}
