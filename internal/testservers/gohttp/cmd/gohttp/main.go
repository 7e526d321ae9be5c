// Command gohttp runs the Go net/http test server; see package gohttp.
package main

import (
	"os"

	"github.com/reqprof/reqprof/internal/testservers/gohttp"
)

func main() { os.Exit(gohttp.Main(os.Args[1:])) }
