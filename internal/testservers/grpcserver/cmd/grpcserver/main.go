// Command grpcserver runs the grpc-go test server; see package grpcserver.
package main

import (
	"os"

	"github.com/reqprof/reqprof/internal/testservers/grpcserver"
)

func main() { os.Exit(grpcserver.Main(os.Args[1:])) }
