package live

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/reqprof/reqprof/profile"
)

func TestRequestLogLines(t *testing.T) {
	var out bytes.Buffer
	l := NewRequestLog(&out, 10)
	l.wallOffset = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano() - int64(100*time.Second)
	l.Bind([]string{"api", `we"ird`})
	l.Add(0, profile.Request{
		Route: "GET /users/{id}", Start: 100 * time.Second, End: 100*time.Second + 83_500,
		UserNs: 52_800, KernelNs: 28_112, RunqueueNs: 5_100, BytesIn: 312, BytesOut: 210,
	})
	l.Add(1, profile.Request{Route: "\x00\xff\"é", Start: 101 * time.Second, End: 101 * time.Second})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	golden(t, "requests", out.String())
	for sc := bufio.NewScanner(&out); sc.Scan(); {
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Errorf("%q is no JSON: %v", sc.Text(), err)
		}
	}
}

// Past the rate, lines are dropped, counted, and said in the log.
func TestRequestLogCapsItsRate(t *testing.T) {
	var out bytes.Buffer
	l := NewRequestLog(&out, 100)
	l.Bind([]string{"api"})
	for i := range 1000 { // 250 a second over 4 seconds
		end := 10*time.Second + time.Duration(i)*4*time.Millisecond
		l.Add(0, profile.Request{Route: "GET /", Start: end, End: end})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	written, dropped := l.Counts()
	if written != 400 || dropped != 600 {
		t.Errorf("%d written, %d dropped; want 400 and 600", written, dropped)
	}
	lines, droppedSaid := 0, 0
	for sc := bufio.NewScanner(&out); sc.Scan(); {
		var v struct {
			Dropped int `json:"dropped"`
		}
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(sc.Text(), `"dropped"`) {
			droppedSaid += v.Dropped
		} else {
			lines++
		}
	}
	if lines != 400 || droppedSaid != 600 {
		t.Errorf("the log has %d lines of requests and says %d dropped; want 400 and 600", lines, droppedSaid)
	}
}

func TestAppendMicros(t *testing.T) {
	for ns, want := range map[uint64]string{0: "0", 999: "0.999", 1000: "1", 80_910: "80.91", 1_234_567: "1234.567"} {
		if got := string(appendMicros(nil, ns)); got != want {
			t.Errorf("%d ns: %q, want %q", ns, got, want)
		}
	}
}

func BenchmarkRequestLogAdd(b *testing.B) {
	l := NewRequestLog(discard{}, 1<<30)
	defer l.Close()
	l.Bind([]string{"api"})
	r := profile.Request{Route: "GET /users/{id}", UserNs: 52_800, KernelNs: 28_112}
	for i := 0; b.Loop(); i++ {
		r.End = time.Duration(i) * 1000
		l.Add(0, r)
	}
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

func TestAppendTimeIsRFC3339Nano(t *testing.T) {
	l := &RequestLog{}
	for _, ns := range []int64{0, 1, 1_500_000_000, 1735787045_123456789, 1735787045_100000000, 1735787046_000000001} {
		want := time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
		if got := string(l.appendTime(nil, ns)); got != want {
			t.Errorf("%d: %q, want %q", ns, got, want)
		}
	}
}
