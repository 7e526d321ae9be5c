// Package mcpserver is an MCP server built with the official MCP Go SDK
// (github.com/modelcontextprotocol/go-sdk), served over stdio, MCP's
// default transport: its client starts it and speaks JSON-RPC on its stdin
// and stdout. Its tools "light" and "heavy" burn a known amount of CPU, and
// it counts the calls it answered, written to stderr as one JSON line when
// its client goes away.
package mcpserver

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reqprof/reqprof/internal/calserver"
)

// Stats is what the server answered, and what each tool's burn cost by
// its thread's CPU clock, mean per call.
type Stats struct {
	Calls  map[string]uint64  `json:"calls"`
	BurnUs map[string]float64 `json:"burn_us"`
}

// Main serves over stdio until its client closes stdin.
func Main(args []string) int {
	fs := flag.NewFlagSet("mcpserver", flag.ContinueOnError)
	light := fs.Duration("light", 50*time.Microsecond, "CPU the light tool burns")
	heavy := fs.Duration("heavy", 200*time.Microsecond, "CPU the heavy tool burns")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "reqprof-test", Version: "1"}, nil)
	var calls, burned [2]atomic.Uint64
	for i, tool := range []struct {
		name string
		burn time.Duration
	}{{"light", *light}, {"heavy", *heavy}} {
		iterations := calserver.IterationsFor(tool.burn)
		mcp.AddTool(server, &mcp.Tool{Name: tool.name, Description: "burns CPU"},
			func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
				// On one thread, so that its CPU clock measures the burn.
				runtime.LockOSThread()
				start := calserver.ThreadCPU()
				calserver.Burn(iterations)
				burned[i].Add(uint64(calserver.ThreadCPU() - start))
				runtime.UnlockOSThread()
				calls[i].Add(1)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
			})
	}
	err := server.Run(context.Background(), &mcp.StdioTransport{})
	stats := Stats{Calls: map[string]uint64{}, BurnUs: map[string]float64{}}
	for i, name := range []string{"light", "heavy"} {
		stats.Calls[name] = calls[i].Load()
		if n := calls[i].Load(); n > 0 {
			stats.BurnUs[name] = float64(burned[i].Load()) / float64(n) / 1e3
		}
	}
	json.NewEncoder(os.Stderr).Encode(stats)
	if err != nil && err.Error() != "EOF" {
		fmt.Fprintln(os.Stderr, err)
	}
	return 0
}
