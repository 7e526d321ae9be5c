package report

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

type goldenCase struct {
	name string
	run  Run
}

// requestsOneTo200 are 200 requests whose CPU is 1 µs, 2 µs, ... 200 µs,
// split 65% user and 35% kernel, so every figure can be checked by hand.
func requestsOneTo200() []Request {
	var reqs []Request
	for i := uint64(1); i <= 200; i++ {
		reqs = append(reqs, Request{
			TID:      4243,
			Conn:     0xffff888100000000 + i%4,
			Start:    time.Duration(i) * 50 * time.Millisecond,
			End:      time.Duration(i)*50*time.Millisecond + 2*time.Millisecond,
			UserNs:   650 * i,
			KernelNs: 350 * i,
			BytesIn:  78,
			BytesOut: 100 + 40*(i%2), // alternately 100 and 140: mean 120
		})
	}
	return reqs
}

func goldenCases() []goldenCase {
	return []goldenCase{
		{"one_target", Run{
			Duration: 10 * time.Second,
			Targets: []Target{{
				PID: 4242, Comm: "uvicorn", Threads: 4,
				Requests:           requestsOneTo200(),
				UnfinishedRequests: 2, UnfinishedNs: 3_500_000,
				UnattributedNs: 1_234_567, BetweenRequestsNs: 234_567,
				SchedCPUNs: 24_900_000,
			}},
		}},
		{"two_targets_partial", Run{
			Duration: 2500 * time.Millisecond,
			// Out of PID order: the summary keeps the given order.
			Targets: []Target{
				{
					PID: 111, Comm: "server", Label: "rust-sdk", Threads: 2,
					Requests: []Request{
						{UserNs: 120_000, KernelNs: 30_000, BytesIn: 300, BytesOut: 1_500},
						{UserNs: 80_000, KernelNs: 20_000, BytesIn: 300, BytesOut: 1_500},
						{UserNs: 300_000, KernelNs: 100_000, BytesIn: 310, BytesOut: 1_520},
						{UserNs: 95_000, KernelNs: 5_000, BytesIn: 290, BytesOut: 1_480},
					},
					UnattributedNs: 3_250_000,
					SchedCPUNs:     5_000_000, // reqprof saw 80%
					LostEvents:     17,
				},
				{
					PID: 99, Comm: "calserver", Label: "go-sdk", Threads: 9,
					Requests: []Request{
						{UserNs: 40_000, KernelNs: 60_000, BytesIn: 64, BytesOut: 2_048},
						{UserNs: 45_500, KernelNs: 61_000, BytesIn: 64, BytesOut: 2_048},
						{UserNs: 39_000, KernelNs: 58_000, BytesIn: 64, BytesOut: 2_048},
					},
					UnattributedNs: 1_496_500,
					SchedCPUNs:     1_800_000, // reqprof saw 100%
					Exited:         true,
				},
			},
		}},
		{"zero_requests", Run{
			Duration: 5 * time.Second,
			Targets: []Target{{
				PID: 7, Comm: "idle", Threads: 1,
				UnattributedNs: 2_000_000,
			}},
		}},
	}
}

// TestGolden checks the table and JSON of each case against
// testdata/NAME.{table,json}.golden, and that the JSON reads back as the
// summary it was written from.
func TestGolden(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			s := Summarize(c.run)
			var table, js bytes.Buffer
			if err := WriteTable(&table, s); err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(&js, s); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, c.name+".table.golden", table.Bytes())
			checkGolden(t, c.name+".json.golden", js.Bytes())

			back, err := ReadJSON(&js)
			if err != nil {
				t.Fatalf("ReadJSON of WriteJSON's output: %v", err)
			}
			if !reflect.DeepEqual(back, s) {
				t.Errorf("read back %+v\nwant %+v", back, s)
			}
		})
	}
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./report -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test ./report -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// tablewriter switches to East Asian character widths when LANG or
// RUNEWIDTH_EASTASIAN says so, once per process; no table may change.
func TestGoldenUnderEastAsianLocale(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestGolden(|Comparison|Combined)$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "LANG=ja_JP.UTF-8", "LC_ALL=ja_JP.UTF-8", "RUNEWIDTH_EASTASIAN=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("TestGolden under a Japanese locale: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestGolden ")) ||
		!bytes.Contains(out, []byte("--- PASS: TestGoldenComparison ")) ||
		!bytes.Contains(out, []byte("--- PASS: TestGoldenCombined ")) {
		t.Fatalf("TestGolden did not run under a Japanese locale:\n%s", out)
	}
}
