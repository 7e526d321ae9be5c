package live

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./live -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test ./live -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// liveFrame is a second of two targets: lean serving two routes, heavy
// three past the two shown, and an idle one.
func liveFrame() Frame {
	tally := NewTally(0)
	tally.Bind([]string{"lean", "heavy-with-a-long-name-cut-short", "idle"})
	before := tally.Snapshot()
	for i := range 3200 {
		tally.Add(0, request("tools/call", uint64(50_000+i%100*100), 28_000))
	}
	for range 89 {
		tally.Add(0, request("GET /health", 9_000, 3_000))
	}
	for i := range 1200 {
		route := []string{"tools/call", "tools/list", "GET /a-path-long-enough-to-be-cut-in-the-table"}[i%3]
		tally.Add(1, request(route, uint64(200_000+i), 60_000))
	}
	return FrameOf(tally.Snapshot().Sub(before), time.Second, 12*time.Second, 30*time.Second, []uint64{0, 17}, 2)
}

func TestFrameTable(t *testing.T) { golden(t, "frame-table", liveFrame().Table()) }
func TestFrameLines(t *testing.T) { golden(t, "frame-lines", liveFrame().Lines()) }

func TestFrameUntilStopped(t *testing.T) {
	f := liveFrame()
	f.Duration = 0
	if got := strings.SplitN(f.Table(), "\n", 2)[0]; got != "reqprof: 12 s, until Ctrl-C; per request over the last 1 s" {
		t.Errorf("heading %q", got)
	}
	if got := strings.SplitN(f.Lines(), "\n", 2)[0]; !strings.HasPrefix(got, "reqprof: 12 s lean: ") {
		t.Errorf("first line %q", got)
	}
}

// On a terminal each frame replaces the one before, and Clear takes the
// last away; elsewhere frames are plain lines, no escape codes.
func TestViewRedrawsOnlyOnATerminal(t *testing.T) {
	var term, pipe bytes.Buffer
	f := liveFrame()
	tv, pv := NewView(&term, true, 60), NewView(&pipe, false, 0)
	for range 2 {
		tv.Show(f)
		pv.Show(f)
	}
	tv.Clear()
	lines := strings.Count(f.Table(), "\n")
	if !strings.Contains(term.String(), "\r\x1b["+itoa(lines)+"A\x1b[J") || !strings.HasSuffix(term.String(), "\r\x1b["+itoa(lines)+"A\x1b[J") {
		t.Errorf("terminal output does not move up %d lines and clear: %q", lines, term.String())
	}
	for _, line := range strings.Split(term.String(), "\n") {
		plain := line
		if i := strings.LastIndex(line, "\x1b[J"); i >= 0 {
			plain = line[i+len("\x1b[J"):]
		}
		if len([]rune(plain)) >= 60 {
			t.Errorf("a line of %d characters on a terminal of 60: %q", len([]rune(plain)), plain)
		}
	}
	if strings.Contains(pipe.String(), "\x1b") || pipe.String() != f.Lines()+f.Lines() {
		t.Errorf("pipe output %q, want the frame's lines twice", pipe.String())
	}
}

func itoa(n int) string { return thousands(float64(n), 0) }
