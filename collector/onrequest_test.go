package collector

import (
	"strings"
	"testing"

	"github.com/reqprof/reqprof/live"
	"github.com/reqprof/reqprof/profile"
)

// Config.OnRequest sees every request the window's totals count, split
// as they are: each of a pipelined burst's requests with its share of
// the burst's CPU, and one counted per burst where bytes cannot be
// followed; a burst that completes none is handed on only when one does.
func TestOnRequestSeesEveryFinishedRequest(t *testing.T) {
	res := newConsumeResult(2)
	var seen []profile.Request
	var targets []int
	res.onRequest = func(target int, r profile.Request) {
		seen = append(seen, r)
		targets = append(targets, target)
	}
	bursts := []burstRecord{
		{conn: 1, data: strings.Repeat(get("/a")+get("/b"), 2), userNs: 4_003, target: 1},
		{conn: 2, data: "GET /half HTTP/1.1\r\n", userNs: 500},                      // carried: no request yet
		{conn: 2, data: "Host: x\r\n\r\n", userNs: 700, startNs: 10, streamOff: 20}, // completes it
		{conn: 3, data: "\x16\x03\x01\x00\x05hello", userNs: 900},                   // TLS: one per burst
	}
	for _, b := range bursts {
		for _, rec := range b.records(t) {
			res.decode(rec)
		}
	}
	var sum profile.Totals
	for _, r := range seen {
		sum.Add(r)
	}
	want := res.finished[0].totals
	want.Merge(res.finished[1].totals)
	if sum != want {
		t.Errorf("OnRequest saw %+v\nthe totals count %+v", sum, want)
	}
	if len(seen) != 6 || sum.UserNs != 4_003+500+700+900 {
		t.Errorf("OnRequest saw %d requests of %d ns user, want 6 of %d", len(seen), sum.UserNs, 4_003+500+700+900)
	}
	for i, target := range targets[:4] {
		if target != 1 || seen[i].Route != []string{"GET /a", "GET /b"}[i%2] {
			t.Errorf("request %d: target %d route %q", i, target, seen[i].Route)
		}
	}
}

// BenchmarkConsumeRecord is what the collector spends on one finished
// request, a keep-alive GET, from its ring-buffer record to its totals:
// as attach runs it, and as serve does with its hook counting each request
// for Prometheus. The difference is what serving metrics adds.
func BenchmarkConsumeRecord(b *testing.B) {
	var records [][]byte
	for i, path := range []string{"/users/1", "/orders", "/health", "/users/2"} {
		records = append(records, burstRecord{conn: uint64(i + 1), data: get(path), userNs: 50_000}.records(&testing.T{})...)
	}
	for _, c := range []struct {
		name string
		hook func(*consumeResult)
	}{
		{"attach", func(*consumeResult) {}},
		{"serve", func(res *consumeResult) {
			tally := live.NewTally(0)
			tally.Bind([]string{"api"})
			res.onRequest = tally.Add
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			res := newConsumeResult(1)
			c.hook(&res)
			for i := 0; b.Loop(); i++ {
				res.decode(records[i%len(records)])
			}
		})
	}
}
