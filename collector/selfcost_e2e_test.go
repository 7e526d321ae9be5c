package collector_test

import (
	"context"
	"testing"
	"time"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/report"
)

// TestNetFiguresLeaveOutOwnCost runs the calibrated server with the
// figures net of reqprof's own cost (the default). The server's own clock
// (its thread's CPU clock from the read that brings a request to the read
// that brings the next) counts what reqprof's programs cost its thread
// inside that span, as the gross figures do: so the net mean is the
// server's own less the stated own cost per request, and net plus that
// cost is the server's own. Each request is 200 µs of work, as in
// TestCPUPerRequestMatchesServer.
func TestNetFiguresLeaveOutOwnCost(t *testing.T) {
	for _, model := range []string{"threads", "epoll"} {
		t.Run(model, func(t *testing.T) {
			burn := 200 * time.Microsecond
			const requests = 2000
			srv := startCalserver(t, "--model", model, "--burn", burn.String())
			w := measureConfig(t, []int{srv.pid()}, func(cfg *collector.Config) { cfg.Gross = false }, func() {
				if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: srv.addr, Conns: 2, Requests: requests}); err != nil {
					t.Fatalf("load: %v", err)
				}
			})
			truth := srv.stop(t)
			target := targetOf(t, w.run, srv.pid())
			if int(truth.Requests) != requests || target.Finished.Requests != requests {
				t.Fatalf("server served %d, reqprof counted %d, want %d", truth.Requests, target.Finished.Requests, requests)
			}
			if !target.SelfCost.Measured || target.SelfCost.Kept {
				t.Fatalf("own cost %+v: want measured and taken out", target.SelfCost)
			}
			net := meanFinishedCPUUs(target)
			self := float64(target.Finished.SelfNs) / float64(requests) / 1e3
			server := truth.MeanCPUMicros()
			t.Logf("cpu per request: net %.2f µs, own cost %.2f µs, gross %.2f µs; server's own %.2f µs, less the own cost %.2f µs (%+.2f%%)",
				net, self, net+self, server, server-self, 100*(net/(server-self)-1))
			// The own cost is there to take out: a syscall tracepoint's
			// entry and run at every syscall, some 100 ns each.
			if self < 0.5 || self > 0.5*server {
				t.Errorf("own cost %.2f µs per request of the server's %.2f µs: not a measured cost", self, server)
			}
			if !within(net, server-self, 0.03) {
				t.Errorf("net %.2f µs per request, the server's own %.2f µs less the own cost %.2f µs is %.2f µs: more than 3%% apart",
					net, server, self, server-self)
			}
			if !within(net+self, server, 0.03) {
				t.Errorf("net %.2f plus own cost %.2f µs, the server's own %.2f µs: more than 3%% apart", net, self, server)
			}
			// Its uncertainty is stated: the calibration's standard error
			// at least, and never as large as the estimate itself.
			c := target.SelfCost
			t.Logf("own cost over all threads %.1f ms ± %.2f ms (%d samples of the programs' run time)", float64(c.TotalNs)/1e6, float64(c.SpreadNs)/1e6, c.TimingSamples)
			if c.SpreadNs == 0 || c.SpreadNs >= c.TotalNs/2 {
				t.Errorf("own cost %d ns ± %d ns: want a stated spread under half the estimate", c.TotalNs, c.SpreadNs)
			}
		})
	}
}

// TestNetRunIsWhole: the kernel's accounting of a target includes
// reqprof's own cost in its threads, so a run whose requests' figures are
// net of it adds it back before setting what it saw against the kernel's:
// on a server of the shortest requests (no burn: own cost 8 to 11% of its CPU in the runs made) the
// run is whole, not labelled partial.
func TestNetRunIsWhole(t *testing.T) {
	srv := startCalserver(t, "--model", "epoll", "--burn", "0s")
	w := measureConfig(t, []int{srv.pid()}, func(cfg *collector.Config) { cfg.Gross = false }, func() {
		if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: srv.addr, Conns: 2, Requests: 4000}); err != nil {
			t.Fatalf("load: %v", err)
		}
	})
	srv.stop(t)
	s := report.Summarize(w.run).Targets[0]
	t.Logf("seen %.1f ms of it own cost %.1f ms, net %.1f ms; kernel %.1f ms", s.SeenCPUUs/1e3, (s.SeenCPUUs-s.ProcessCPUUs)/1e3, s.ProcessCPUUs/1e3, s.SchedCPUUs/1e3)
	if s.SeenCPUUs-s.ProcessCPUUs < 0.05*s.SchedCPUUs {
		t.Errorf("own cost taken out %.1f µs of %.1f µs: under 5%%, too little to tell the check by", s.SeenCPUUs-s.ProcessCPUUs, s.SchedCPUUs)
	}
	if s.Partial {
		t.Errorf("net run labelled partial: %q", s.Warnings)
	}
}
