// Command calclient is a client that measures its own CPU per call (see
// package calclient).
package main

import (
	"os"

	"github.com/reqprof/reqprof/internal/testservers/calclient"
)

func main() { os.Exit(calclient.Main(os.Args[1:])) }
