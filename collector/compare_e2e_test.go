package collector_test

import (
	"context"
	"sync"
	"testing"

	"github.com/reqprof/reqprof/internal/demo/loadgen"
	"github.com/reqprof/reqprof/report"
)

// TestCompareTwoServersWithFloor attaches to three calibrated servers in one
// run: two "SDKs" at 100 µs and 400 µs a request and a bare floor. The ratio
// reqprof reports matches the servers' own ratio, and the floor subtraction
// their own difference.
func TestCompareTwoServersWithFloor(t *testing.T) {
	const requests = 1000
	burns := []string{"100us", "400us", "0s"} // baseline, other, floor
	var servers []*server
	var pids []int
	for _, burn := range burns {
		s := startCalserver(t, "--model", "epoll", "--burn", burn)
		servers = append(servers, s)
		pids = append(pids, s.pid())
	}
	w := measure(t, pids, func() {
		var wg sync.WaitGroup
		for _, s := range servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: s.addr, Conns: 2, Requests: requests}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	})
	var truth []float64
	for _, s := range servers {
		truth = append(truth, s.stop(t).MeanCPUMicros())
	}
	summary := report.Summarize(w.run)
	cmp, err := report.Compare(summary, report.CompareOptions{WithFloor: true, Floor: 2})
	if err != nil || cmp == nil {
		t.Fatalf("comparison: %v %v", cmp, err)
	}
	other := cmp.Targets[1]
	if other.CPURatio == nil || other.AboveFloorUs == nil {
		t.Fatalf("no ratio or floor figure in %+v", other)
	}
	wantRatio := truth[1] / truth[0]
	t.Logf("ratio reqprof %.3f, servers %.3f; above floor reqprof %.1f µs, servers %.1f µs",
		*other.CPURatio, wantRatio, *other.AboveFloorUs, truth[1]-truth[2])
	if !within(*other.CPURatio, wantRatio, 0.03) {
		t.Errorf("ratio %.3f, the servers' own %.3f: more than 3%% apart", *other.CPURatio, wantRatio)
	}
	if !within(*other.AboveFloorUs, truth[1]-truth[2], 0.05) {
		t.Errorf("%.1f µs above the floor, the servers' own difference %.1f µs: more than 5%% apart", *other.AboveFloorUs, truth[1]-truth[2])
	}
}
