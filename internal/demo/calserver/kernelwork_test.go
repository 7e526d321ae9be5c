package calserver

import (
	"context"
	"testing"

	"github.com/reqprof/reqprof/internal/demo/loadgen"
)

// TestKernelWorkCounted: the /dev/null writes and the getppid() calls a
// request makes are timed apart, each block in its own figure.
func TestKernelWorkCounted(t *testing.T) {
	const requests, writes, calls = 200, 10, 30
	srv, err := Start(Config{Model: Epoll, DevNullWrites: writes, DevNullBytes: 64, GetppidCalls: calls})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := loadgen.Run(context.Background(), loadgen.Config{Addr: srv.Addr(), Conns: 2, Requests: requests}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	st := srv.Stats()
	if st.Requests != requests || st.GetppidCalls != requests*calls {
		t.Fatalf("%d requests, %d getppid calls; want %d and %d", st.Requests, st.GetppidCalls, requests, requests*calls)
	}
	if st.DevNullCPUNs == 0 || st.GetppidCPUNs == 0 || st.DevNullLoopUserNs <= 0 {
		t.Errorf("/dev/null writes %d ns, getppid calls %d ns, loop %.1f ns a round: want all measured", st.DevNullCPUNs, st.GetppidCPUNs, st.DevNullLoopUserNs)
	}
	// Neither block's time is part of the other's, and both are the requests'.
	if st.DevNullCPUNs+st.GetppidCPUNs > st.CPUNs {
		t.Errorf("writes %d ns + getppid %d ns exceed the requests' CPU %d ns", st.DevNullCPUNs, st.GetppidCPUNs, st.CPUNs)
	}
}
