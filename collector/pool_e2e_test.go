package collector_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/reqprof/reqprof/internal/demo/loadgen"
)

// TestWorkerPool: an epoll I/O thread reads each request and hands it,
// with a futex wake, to a pool of worker threads that burn its CPU and write
// its response. reqprof follows the request along the wakeup: the worker's
// CPU and the reader's share land on the request, not in unattributed.
func TestWorkerPool(t *testing.T) {
	for _, workers := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("%dworkers", workers), func(t *testing.T) {
			const requests = 4000
			srv := startCalserver(t, "--model", "pool", "--workers", fmt.Sprint(workers), "--burn", "200us")
			w := measure(t, []int{srv.pid()}, func() {
				// Fewer connections than workers: jobs wait for a woken worker.
				if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: srv.addr, Conns: 2, Requests: requests}); err != nil {
					t.Fatalf("load: %v", err)
				}
			})
			truth := srv.stop(t)
			target := targetOf(t, w.run, srv.pid())
			if len(target.Requests) != requests || int(truth.Requests) != requests {
				t.Fatalf("reqprof counted %d requests, server %d, want %d", len(target.Requests), truth.Requests, requests)
			}
			got, want := meanCPUUs(target.Requests), truth.MeanCPUMicros()
			unattributed := float64(target.UnattributedNs) / float64(target.ProcessNs())
			t.Logf("cpu per request: reqprof %.1f µs, server %.1f µs (reader %.1f + worker %.1f) (%+.2f%%); unattributed %.1f%%",
				got, want, truth.MeanIOCPUMicros(), truth.MeanWorkerCPUMicros(), 100*(got/want-1), 100*unattributed)
			if !within(got, want, 0.05) {
				t.Errorf("mean cpu per request %.1f µs, server measured %.1f µs: more than 5%% apart", got, want)
			}
			t.Logf("largest unattributed sources: %+v (pid %d)", target.UnattributedSources, srv.pid())
			if unattributed > 0.10 {
				t.Errorf("unattributed %.1f%% of the process CPU under steady load, want below 10%%", 100*unattributed)
			}
		})
	}
}
