// Command stdioserver runs the JSON-RPC server over stdio; see package stdioserver.
package main

import (
	"os"

	"github.com/reqprof/reqprof/internal/testservers/stdioserver"
)

func main() { os.Exit(stdioserver.Main(os.Args[1:])) }
