package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/reqprof/reqprof/internal/demo/calserver"
)

// mcpserverCommand makes the bench's own binary run the MCP server.
const mcpserverCommand = "mcpserver"

// mcpName names the MCP server's rows.
const mcpName = "MCP Go SDK, streamable HTTP (SSE), 50 µs tool"

// mcpProtocolVersion is the MCP revision the bench's session asks for.
const mcpProtocolVersion = "2025-06-18"

// startMCP starts the MCP server built with the official Go SDK, serving
// over the SDK's streamable HTTP handler as it is set up by default: a
// session, and each tool call answered as a server-sent event stream. The
// bench opens one session and loads it with wrk, each request a call of the
// tool that burns 50 µs.
func startMCP(dir string) (*server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, mcpserverCommand, "--http", "127.0.0.1:0", "--light", "50us")
	cmd.Stderr = io.Discard // its call counts, at the end
	p, err := calserver.Spawn(cmd)
	if err != nil {
		return nil, err
	}
	srv := &server{name: mcpName, cmd: cmd}
	endpoint, err := url.Parse(p.Addr)
	if err != nil {
		srv.stop()
		return nil, fmt.Errorf("MCP server said it listens on %q: %w", p.Addr, err)
	}
	srv.addr, srv.path = endpoint.Host, endpoint.Path
	session, err := openMCPSession(srv.url())
	if err != nil {
		srv.stop()
		return nil, err
	}
	srv.script = filepath.Join(dir, "mcp-call.lua")
	if err := os.WriteFile(srv.script, []byte(mcpCallScript(session)), 0o644); err != nil {
		srv.stop()
		return nil, err
	}
	return srv, nil
}

// mcpCallScript is a wrk script whose every request calls the light tool
// in the session, each call with an id of its own: the SDK refuses an id
// still in flight.
func mcpCallScript(session string) string {
	return fmt.Sprintf(`local threads = 0
function setup(thread)
  thread:set("first", threads * 1000000000)
  threads = threads + 1
end
local n = 0
function request()
  n = n + 1
  return wrk.format(nil, nil, nil, '{"jsonrpc":"2.0","id":' .. (first + n) .. ',"method":"tools/call","params":{"name":"light","arguments":{}}}')
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["Mcp-Session-Id"] = %q
wrk.headers["Mcp-Protocol-Version"] = %q
`, session, mcpProtocolVersion)
}

// openMCPSession initializes a session with the server at endpoint, as a
// client does, and returns its id.
func openMCPSession(endpoint string) (string, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(session, body string) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, endpoint, bytes.NewBufferString(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", mcpProtocolVersion)
		}
		return client.Do(req)
	}
	resp, err := post("", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+mcpProtocolVersion+
		`","capabilities":{},"clientInfo":{"name":"reqprof-bench","version":"1"}}}`)
	if err != nil {
		return "", fmt.Errorf("initializing an MCP session: %w", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || session == "" || !strings.Contains(string(body), `"result"`) {
		return "", fmt.Errorf("initializing an MCP session: %s, session %q: %s", resp.Status, session, body)
	}
	resp, err = post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if err != nil {
		return "", fmt.Errorf("initializing an MCP session: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("initializing an MCP session: notifications/initialized answered %s", resp.Status)
	}
	return session, nil
}
