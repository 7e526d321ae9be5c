package calserver

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Main runs the server as a process of its own, for a profiler to attach to:
// it prints "listening on IP:PORT", serves until SIGTERM or SIGINT, then
// prints the final Stats as one JSON line and returns 0.
func Main(args []string) int {
	flags := flag.NewFlagSet("calserver", flag.ContinueOnError)
	cfg := Config{Routes: make(map[string]time.Duration)}
	var model string
	flags.StringVar(&model, "model", string(Threads), "threading model: threads, epoll or pool")
	flags.StringVar(&cfg.Listen, "listen", "127.0.0.1:0", "IP:port to listen on")
	flags.DurationVar(&cfg.Burn, "burn", 0, "user CPU to burn per request")
	flags.Var(routeFlag(cfg.Routes), "route", `KEY=DURATION: burn DURATION for requests with route key KEY instead of --burn (repeatable); KEY is a path ("/a") or a JSON-RPC method ("tools/list", "tools/call add")`)
	flags.IntVar(&cfg.DevNullWrites, "devnull-writes", 0, "writes to /dev/null per request")
	flags.IntVar(&cfg.DevNullBytes, "devnull-bytes", 0, "bytes per /dev/null write")
	flags.IntVar(&cfg.GetppidCalls, "getppid-calls", 0, "getppid() calls per request, after the /dev/null writes, timed apart")
	flags.DurationVar(&cfg.Sleep, "sleep", 0, "off-CPU sleep per request")
	flags.IntVar(&cfg.Workers, "workers", DefaultWorkers, "worker threads of the pool model")
	flags.BoolVar(&cfg.CloseAfterResponse, "close", false, "close each connection after its first response, as an HTTP/1.0 server (threads model)")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "calserver: unexpected arguments %q\n", flags.Args())
		return 2
	}
	cfg.Model = Model(model)

	// Subscribed before the address is printed, so that a signal sent as soon
	// as the caller reads it is caught.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)

	srv, err := Start(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("listening on %s\n", srv.Addr())
	<-stop
	closeErr := srv.Close()
	if err := json.NewEncoder(os.Stdout).Encode(srv.Stats()); err != nil {
		fmt.Fprintln(os.Stderr, "calserver:", err)
		return 1
	}
	if closeErr != nil {
		fmt.Fprintln(os.Stderr, closeErr)
		return 1
	}
	return 0
}

// routeFlag collects --route KEY=DURATION into a Config.Routes map.
type routeFlag map[string]time.Duration

func (f routeFlag) String() string { return fmt.Sprint(map[string]time.Duration(f)) }

func (f routeFlag) Set(value string) error {
	// The last '=' splits: a key may hold one, a duration cannot.
	i := strings.LastIndexByte(value, '=')
	if i < 0 {
		return fmt.Errorf("want KEY=DURATION, got %q", value)
	}
	d, err := time.ParseDuration(value[i+1:])
	if err != nil {
		return err
	}
	f[value[:i]] = d
	return nil
}
