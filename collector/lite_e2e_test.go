package collector_test

import (
	"context"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/internal/demo/calserver"
	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/profile"
	"github.com/reqprof/reqprof/report"
)

// TestLiteMode profiles the calibrated server in lite mode (no program on
// the syscall, interrupt or fault tracepoints), after a full window on the
// same kind of server under the same load: every request counted, the CPU per
// request within 3% of the server's own clock (gross, as that clock sees
// it), and the kernel share of the estimated user/kernel split within
// profile.LiteSplitPrecisionPoints of the full window's.
func TestLiteMode(t *testing.T) {
	for _, model := range []string{"threads", "epoll"} {
		t.Run(model, func(t *testing.T) {
			const requests = 2000
			// A server each: its own clock's figure is over its window.
			window := func(lite bool) (profile.Target, calserver.Stats) {
				srv := startCalserver(t, "--model", model, "--burn", (200 * time.Microsecond).String())
				w := measureConfig(t, []int{srv.pid()}, func(cfg *collector.Config) { cfg.Lite = lite }, func() {
					// Lite mode holds no program on the syscall
					// tracepoints, not even one loaded empty.
					held, err := collector.ObjectsHeldBy(os.Getpid())
					if err != nil {
						t.Fatalf("listing held BPF objects: %v", err)
					}
					if holds := slices.Contains(held.ProgramNames, "on_sys_enter"); holds == lite {
						t.Errorf("lite %v: reqprof holds on_sys_enter: %v", lite, holds)
					}
					if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: srv.addr, Conns: 2, Requests: requests}); err != nil {
						t.Fatalf("load: %v", err)
					}
				})
				truth := srv.stop(t)
				if w.run.Lite != lite {
					t.Fatalf("run says lite %v, want %v", w.run.Lite, lite)
				}
				target := targetOf(t, w.run, srv.pid())
				if int(truth.Requests) != requests || target.Finished.Requests != requests {
					t.Fatalf("lite %v: server served %d, reqprof counted %d, want %d", lite, truth.Requests, target.Finished.Requests, requests)
				}
				return target, truth
			}
			full, fullTruth := window(false)
			lite, truth := window(true)
			if len(lite.KernelBreakdown) != 0 {
				t.Errorf("lite kernel breakdown has %d rows, want none", len(lite.KernelBreakdown))
			}
			server := truth.MeanCPUMicros()
			got := meanFinishedCPUUs(lite)
			share := func(target profile.Target) float64 {
				s := report.Summarize(profile.Run{Targets: []profile.Target{target}}).Targets[0]
				return 100 * s.KernelUs.Mean / (s.UserUs.Mean + s.KernelUs.Mean)
			}
			fullShare, liteShare := share(full), share(lite)
			t.Logf("cpu per request: lite %.2f µs, server's own %.2f µs (%+.2f%%); full %.2f µs, server's own %.2f µs; kernel share: lite %.1f%%, full %.1f%% (%+.1f points)",
				got, server, 100*(got/server-1), meanFinishedCPUUs(full), fullTruth.MeanCPUMicros(), liteShare, fullShare, liteShare-fullShare)
			if !within(got, server, 0.03) {
				t.Errorf("lite: mean cpu per request %.2f µs, server measured %.2f µs: more than 3%% apart", got, server)
			}
			if d := math.Abs(liteShare - fullShare); d > profile.LiteSplitPrecisionPoints {
				t.Errorf("lite kernel share %.1f%%, full %.1f%%: %.1f points apart, more than the stated %v",
					liteShare, fullShare, d, profile.LiteSplitPrecisionPoints)
			}
		})
	}
}
