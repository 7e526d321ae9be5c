// Command mcpserver runs the MCP server over stdio or streamable HTTP, or
// with --compare drives it over both; see package mcpserver.
package main

import (
	"os"

	"github.com/reqprof/reqprof/internal/testservers/mcpserver"
)

func main() { os.Exit(mcpserver.Main(os.Args[1:])) }
