package calserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/reqprof/reqprof/internal/demo/loadgen"
)

func TestPool(t *testing.T) {
	const requests = 2000
	burns := map[string]time.Duration{"/a": 100 * time.Microsecond, "/b": 200 * time.Microsecond}
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprint(workers, "workers"), func(t *testing.T) {
			srv, err := Start(Config{Model: Pool, Workers: workers, Routes: burns})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			res, err := loadgen.Run(context.Background(), loadgen.Config{
				Addr: srv.Addr(), Conns: 8, Requests: requests, Paths: []string{"/a", "/b"},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Close(); err != nil {
				t.Fatal(err)
			}
			st := srv.Stats()
			if st.Requests != requests || res.Requests != requests {
				t.Errorf("server saw %d requests, loadgen got %d answers; want %d", st.Requests, res.Requests, requests)
			}
			if st.IOCPUNs == 0 || st.WorkerCPUNs == 0 || st.CPUNs != st.IOCPUNs+st.WorkerCPUNs {
				t.Errorf("CPU %d ns = I/O thread %d + workers %d; want both parts and their sum", st.CPUNs, st.IOCPUNs, st.WorkerCPUNs)
			}
			for _, key := range []string{"/a", "/b"} {
				got := st.Routes[key]
				if got.Requests != uint64(res.PerPath[key]) {
					t.Errorf("%s: server saw %d requests, loadgen got %d answers", key, got.Requests, res.PerPath[key])
				}
				if want := float64(burns[key].Microseconds()); got.MeanWorkerCPUMicros() < 0.8*want {
					t.Errorf("%s: mean worker CPU %.1f µs; want at least 0.8 × %v", key, got.MeanWorkerCPUMicros(), burns[key])
				}
			}
			// Every worker sleeps on the queue before the first request.
			if st.FutexWaits < uint64(workers) || st.FutexWoken > st.FutexWakes {
				t.Errorf("%d FUTEX_WAITs, %d FUTEX_WAKEs waking %d; want at least %d waits and no more woken than wakes",
					st.FutexWaits, st.FutexWakes, st.FutexWoken, workers)
			}
			t.Logf("mean CPU %.1f µs: I/O thread %.2f µs, worker %.1f µs; %d FUTEX_WAKEs woke %d, %d FUTEX_WAITs",
				st.MeanCPUMicros(), st.MeanIOCPUMicros(), st.MeanWorkerCPUMicros(), st.FutexWakes, st.FutexWoken, st.FutexWaits)
		})
	}
}

// TestPoolPipelined sends requests in one write: the I/O thread must queue
// each only once the response to the one before is out, so that responses
// come back whole and in order, however many workers there are.
func TestPoolPipelined(t *testing.T) {
	srv, err := Start(Config{Model: Pool, Workers: 4, Burn: 50 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const requests = 50
	var batch strings.Builder
	for i := range requests {
		// The id tells responses apart: out of order, they would not match.
		body := fmt.Sprintf(`{"jsonrpc":"2.0","method":"ping","id":%d}`, i)
		fmt.Fprintf(&batch, "POST /mcp HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	if _, err := io.WriteString(c, batch.String()); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	for i := range requests {
		want := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{}}`, i)
		head := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(want))
		got := make([]byte, len(head)+len(want))
		if _, err := io.ReadFull(r, got); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if string(got) != head+want {
			t.Fatalf("response %d: %q; want %q", i, got, head+want)
		}
	}
	c.Close()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if st := srv.Stats(); st.Requests != requests {
		t.Errorf("server saw %d requests; want %d", st.Requests, requests)
	}
}
