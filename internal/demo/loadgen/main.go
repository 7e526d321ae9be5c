package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
)

// Main runs the load generator from the command line and prints its Result
// as one JSON line; it returns 1 if not every request was answered, 2 if
// the flags are wrong.
func Main(args []string) int {
	flags := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	var cfg Config
	flags.StringVar(&cfg.Addr, "addr", "", "host:port of the loopback server (required)")
	flags.IntVar(&cfg.Conns, "conns", 1, "concurrent connections")
	flags.IntVar(&cfg.Requests, "requests", 1000, "total requests, split across connections")
	var bodies []string // one per --path so far
	hasBody := false
	flags.Func("path", `path to request; repeat for several, requested in turn (default "/")`, func(p string) error {
		cfg.Paths = append(cfg.Paths, p)
		bodies = append(bodies, "")
		return nil
	})
	flags.Func("body", "JSON body to POST to the --path just before it, instead of a GET (at most one per --path)", func(b string) error {
		switch {
		case len(bodies) == 0:
			return errors.New("--body must follow the --path it is for")
		case bodies[len(bodies)-1] != "":
			return errors.New("more than one --body for one --path")
		case b == "":
			return errors.New("empty --body")
		}
		bodies[len(bodies)-1] = b
		hasBody = true
		return nil
	})
	flags.BoolVar(&cfg.ConnPerRequest, "conn-per-request", false, "open a connection for each request, as an HTTP/1.0 client")
	flags.DurationVar(&cfg.Timeout, "timeout", 0, "bound on the whole run (default 30s)")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "loadgen: unexpected arguments %q\n", flags.Args())
		return 2
	}
	if hasBody {
		cfg.Bodies = bodies
	}
	res, err := Run(context.Background(), cfg)
	if errors.Is(err, ErrConfig) {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if jsonErr := json.NewEncoder(os.Stdout).Encode(res); jsonErr != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", jsonErr)
		return 1
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
