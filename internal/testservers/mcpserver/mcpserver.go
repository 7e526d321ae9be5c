// Package mcpserver is an MCP server built with the official MCP Go SDK
// (github.com/modelcontextprotocol/go-sdk). It serves over stdio, MCP's
// default transport, where its client starts it and speaks JSON-RPC on its
// stdin and stdout, or with --http over the SDK's streamable HTTP handler.
// Its tools "light" and "heavy" burn a known amount of CPU, and it counts
// the calls it answered, written to stderr as one JSON line when it ends:
// over stdio when its client goes away, over HTTP at SIGTERM or SIGINT.
//
// With --compare it is instead a client that runs the same server twice,
// once over each transport, and calls both alike (see Pair), so that one
// profiling run sets the two side by side.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reqprof/reqprof/internal/demo/calserver"
)

// Tools are the server's tools, in the order Stats and the driver use.
var Tools = []string{"light", "heavy"}

// Stats is what the server answered, and what each tool's burn cost by
// its thread's CPU clock: the mean per call, and each call's, in the order
// the calls were answered, to set against each call's CPU in reqprof's
// figures (a client that makes one call at a time sees them answered in
// the order it made them).
type Stats struct {
	Calls   map[string]uint64   `json:"calls"`
	BurnUs  map[string]float64  `json:"burn_us"`
	BurnsNs map[string][]uint64 `json:"burns_ns"`
}

// heldLine is what a server started with --hold writes to stderr, with its
// pid, once it waits for SIGUSR1.
const heldLine = "held"

// listeningLine starts what a server over HTTP writes to stdout once it
// accepts connections: "listening on http://ADDR/mcp".
const listeningLine = "listening on "

// Main serves over stdio until its client closes stdin, or over HTTP until
// SIGTERM or SIGINT; with --compare it drives two servers instead.
func Main(args []string) int {
	fs := flag.NewFlagSet("mcpserver", flag.ContinueOnError)
	light := fs.Duration("light", 50*time.Microsecond, "CPU the light tool burns")
	heavy := fs.Duration("heavy", 200*time.Microsecond, "CPU the heavy tool burns")
	lightRounds := fs.Uint64("light-rounds", 0, "rounds of the burn loop the light tool runs (0: as many as --light takes here)")
	heavyRounds := fs.Uint64("heavy-rounds", 0, "rounds of the burn loop the heavy tool runs (0: as many as --heavy takes here)")
	httpAddr := fs.String("http", "", "serve over streamable HTTP on this address (such as 127.0.0.1:0) instead of stdio, at /mcp")
	hold := fs.Bool("hold", false, "over stdio, read nothing until SIGUSR1 (so that a profiler attached first sees the handshake)")
	compare := fs.Bool("compare", false, "drive this server twice, over stdio and over HTTP, with the same calls")
	calls := fs.Int("calls", 1000, "with --compare: calls of each tool made on each server")
	delay := fs.Duration("delay", 0, "with --compare: start calling after this long, or at SIGUSR1 if sooner (0: at SIGUSR1 only)")
	linger := fs.Duration("linger", 0, "with --compare: keep both servers up this long after the calls, or until SIGINT or SIGTERM")
	procs := fs.Int("procs", 1, "with --compare: GOMAXPROCS of both servers")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "mcpserver: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *compare {
		return runCompare(CompareOptions{Light: *light, Heavy: *heavy, Calls: *calls, Delay: *delay, Linger: *linger, Procs: *procs})
	}
	if *lightRounds == 0 {
		*lightRounds = calserver.IterationsFor(*light)
	}
	if *heavyRounds == 0 {
		*heavyRounds = calserver.IterationsFor(*heavy)
	}
	server, stats := newServer(*lightRounds, *heavyRounds)
	var err error
	if *httpAddr != "" {
		err = serveHTTP(server, *httpAddr)
	} else {
		if *hold {
			release := make(chan os.Signal, 1)
			signal.Notify(release, syscall.SIGUSR1)
			fmt.Fprintln(os.Stderr, heldLine, os.Getpid())
			<-release
			signal.Stop(release)
		}
		err = server.Run(context.Background(), &mcp.StdioTransport{})
		if err != nil && (errors.Is(err, io.EOF) || err.Error() == "EOF") {
			err = nil
		}
	}
	json.NewEncoder(os.Stderr).Encode(stats())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// newServer builds the server with its tools, which run the burn loop
// light and heavy rounds, and a function that reads what they have
// answered so far.
func newServer(light, heavy uint64) (*mcp.Server, func() Stats) {
	server := mcp.NewServer(&mcp.Implementation{Name: "reqprof-test", Version: "1"}, nil)
	var mu sync.Mutex
	var burns [2][]uint64 // each answered call's burn, ns
	for i, iterations := range []uint64{light, heavy} {
		mcp.AddTool(server, &mcp.Tool{Name: Tools[i], Description: "burns CPU"},
			func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
				// On one thread, so that its CPU clock measures the burn.
				runtime.LockOSThread()
				start := calserver.ThreadCPU()
				calserver.Burn(iterations)
				burn := uint64(calserver.ThreadCPU() - start)
				runtime.UnlockOSThread()
				mu.Lock()
				burns[i] = append(burns[i], burn)
				mu.Unlock()
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
			})
	}
	return server, func() Stats {
		stats := Stats{Calls: map[string]uint64{}, BurnUs: map[string]float64{}, BurnsNs: map[string][]uint64{}}
		mu.Lock()
		defer mu.Unlock()
		for i, name := range Tools {
			stats.Calls[name] = uint64(len(burns[i]))
			stats.BurnsNs[name] = slices.Clone(burns[i])
			if len(burns[i]) > 0 {
				var sum uint64
				for _, b := range burns[i] {
					sum += b
				}
				stats.BurnUs[name] = float64(sum) / float64(len(burns[i])) / 1e3
			}
		}
		return stats
	}
}

// serveHTTP serves server at /mcp with the SDK's streamable HTTP handler,
// as the SDK sets it up by default (sessions, responses as event streams),
// until SIGTERM or SIGINT.
func serveHTTP(server *mcp.Server, addr string) error {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	srv := &http.Server{Handler: mux}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Printf("%shttp://%s/mcp\n", listeningLine, ln.Addr())
	select {
	case <-stop:
		// The client's event stream (its GET) stays open: close, not shut down.
		return srv.Close()
	case err := <-served:
		return err
	}
}
