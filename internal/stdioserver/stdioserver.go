// Package stdioserver is a JSON-RPC server on stdin and stdout, as MCP's
// stdio transport is: a client starts it, writes one request a line to its
// stdin and reads one response a line from its stdout. It measures its own
// CPU per request, from reading a request to writing its response, by its
// thread's CPU clock, so that a profiler's figure can be checked against
// it; it says what it measured on stderr when stdin ends.
//
// Methods: "tools/call" with params.name "light" or "heavy" burns the
// light or heavy cost; any other method answers at once. A message with no
// id is a notification: no answer.
package stdioserver

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/reqprof/reqprof/internal/calserver"
)

// Stats is what the server did, written to stderr as one JSON line.
type Stats struct {
	Requests      uint64  `json:"requests"`
	Notifications uint64  `json:"notifications"`
	MeanCPUUs     float64 `json:"mean_cpu_us"` // per request, read to response written
}

type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name string `json:"name"`
	} `json:"params"`
}

// Main serves until stdin ends.
func Main(args []string) int {
	fs := flag.NewFlagSet("stdioserver", flag.ContinueOnError)
	light := fs.Duration("light", 50*time.Microsecond, "CPU tools/call light burns")
	heavy := fs.Duration("heavy", 200*time.Microsecond, "CPU tools/call heavy burns")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	burn := map[string]uint64{"light": calserver.IterationsFor(*light), "heavy": calserver.IterationsFor(*heavy)}
	// One thread reads, works and writes: its CPU clock is the server's
	// cost of each request.
	runtime.LockOSThread()
	in := bufio.NewReader(os.Stdin)
	var stats Stats
	var total time.Duration
	for {
		start := calserver.ThreadCPU()
		line, err := in.ReadBytes('\n')
		if err != nil {
			break
		}
		var m message
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		if len(m.ID) == 0 {
			stats.Notifications++
			continue
		}
		if m.Method == "tools/call" {
			calserver.Burn(burn[m.Params.Name])
		}
		out := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"ok"}]}}`+"\n", m.ID)
		if _, err := os.Stdout.WriteString(out); err != nil {
			break
		}
		total += calserver.ThreadCPU() - start
		stats.Requests++
	}
	if stats.Requests > 0 {
		stats.MeanCPUUs = float64(total.Nanoseconds()) / float64(stats.Requests) / 1e3
	}
	json.NewEncoder(os.Stderr).Encode(stats)
	return 0
}
