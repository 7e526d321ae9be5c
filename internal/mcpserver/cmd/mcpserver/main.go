// Command mcpserver runs the MCP server over stdio; see package mcpserver.
package main

import (
	"os"

	"github.com/reqprof/reqprof/internal/mcpserver"
)

func main() { os.Exit(mcpserver.Main(os.Args[1:])) }
