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
//
// With --out-of-order it answers as a server that serves calls concurrently
// does, on one thread (an event loop): the calls of one read are answered
// last first, and a call to tool "slow" waits --wait (as for a call to
// another service) before it burns, while the calls read meanwhile are
// answered. It then says its CPU per call by tool: each call's from its
// parsing to its response written, plus its share of the read it came in.
package stdioserver

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/reqprof/reqprof/internal/demo/calserver"
)

// Stats is what the server did, written to stderr as one JSON line.
type Stats struct {
	Requests      uint64  `json:"requests"`
	Notifications uint64  `json:"notifications"`
	MeanCPUUs     float64 `json:"mean_cpu_us"` // per request, read to response written
	// With --out-of-order: calls and mean CPU per call, by tool.
	Calls map[string]uint64  `json:"calls,omitempty"`
	CPUUs map[string]float64 `json:"cpu_us,omitempty"`
	// With --out-of-order: the serving thread's CPU given to no call (its
	// start, its last tail, the instants between two reads of its clock).
	UnassignedUs float64 `json:"unassigned_us,omitempty"`
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
	outOfOrder := fs.Bool("out-of-order", false, "answer the calls of a read last first, and tool slow after --wait")
	slow := fs.Duration("slow", 400*time.Microsecond, "CPU tools/call slow burns, with --out-of-order")
	wait := fs.Duration("wait", 2*time.Millisecond, "how long tools/call slow waits before it burns, with --out-of-order")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	burn := map[string]uint64{"light": calserver.IterationsFor(*light), "heavy": calserver.IterationsFor(*heavy),
		"slow": calserver.IterationsFor(*slow)}
	if *outOfOrder {
		return serveOutOfOrder(burn, *wait)
	}
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
