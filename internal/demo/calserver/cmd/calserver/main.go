// Command calserver runs the calibrated test server; see package calserver.
package main

import (
	"os"

	"github.com/reqprof/reqprof/internal/demo/calserver"
)

func main() { os.Exit(calserver.Main(os.Args[1:])) }
