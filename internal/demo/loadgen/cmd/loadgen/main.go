// Command loadgen drives a loopback HTTP server with bounded load; see
// package loadgen.
package main

import (
	"os"

	"github.com/reqprof/reqprof/internal/demo/loadgen"
)

func main() { os.Exit(loadgen.Main(os.Args[1:])) }
