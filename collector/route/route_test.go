package route

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// captureLen is how many bytes of a request's first read the BPF side keeps
// by default.
const captureLen = 256

// request assembles an HTTP/1.1 request as a client writes it, with the
// Content-Length of body last among the headers.
func request(line string, headers []string, body string) string {
	var b strings.Builder
	b.WriteString(line + "\r\n")
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

func capture(p string) string { return p[:min(len(p), captureLen)] }

// Headers as real clients send them.
var (
	curlHeaders = []string{
		"Host: localhost:8080",
		"User-Agent: curl/8.5.0",
		"Accept: */*",
	}
	// curl against a stateless MCP server: no session yet.
	curlMCPHeaders = []string{
		"Host: localhost:3000",
		"User-Agent: curl/8.5.0",
		"Content-Type: application/json",
		"Accept: application/json, text/event-stream",
	}
	curlMCPSessionHeaders = slices.Concat(curlMCPHeaders, []string{"Mcp-Session-Id: 1868a90c-2a6f-4b8e-9c3d-5e7f0a1b2c3d"})
	// The MCP TypeScript SDK's StreamableHTTPClientTransport on Node's fetch.
	nodeMCPHeaders = []string{
		"host: localhost:3000",
		"connection: keep-alive",
		"content-type: application/json",
		"accept: application/json, text/event-stream",
		"mcp-session-id: 1868a90c-2a6f-4b8e-9c3d-5e7f0a1b2c3d",
		"mcp-protocol-version: 2025-06-18",
		"accept-language: *",
		"sec-fetch-mode: cors",
		"user-agent: node",
		"accept-encoding: gzip, deflate",
	}
	// The A2A Python SDK's client, on httpx.
	httpxA2AHeaders = []string{
		"Host: localhost:9999",
		"Accept: */*",
		"Accept-Encoding: gzip, deflate",
		"Connection: keep-alive",
		"User-Agent: python-httpx/0.28.1",
		"Content-Type: application/json",
	}
)

// JSON-RPC bodies as MCP and A2A clients send them.
const (
	mcpInitialize = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18",` +
		`"capabilities":{"sampling":{},"elicitation":{}},"clientInfo":{"name":"example-client","version":"1.0.0"}}}`
	mcpToolsList   = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	mcpToolsCall   = `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`
	mcpPromptsGet  = `{"jsonrpc":"2.0","id":4,"method":"prompts/get","params":{"name":"code_review","arguments":{"code":"def hello():\n    print('world')"}}}`
	mcpResourceGet = `{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"file:///project/src/main.rs"}}`
	a2aMessageSend = `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user",` +
		`"parts":[{"kind":"text","text":"tell me a joke"}],"messageId":"9229e770-767c-417b-a0b0-f0741243c589"},"metadata":{}}}`
	a2aTasksGet = `{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"id":"363422be-b0f9-4692-a24d-278670e7c7f1"}}`
)

// A TLS 1.3 ClientHello from curl, up to the start of its random.
var tlsClientHello = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\x5b\x8e\x11\x70\x2c\x3a"

// The HTTP/2 client preface and the empty SETTINGS frame that follows it.
var http2PrefaceAndSettings = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"

var nameTests = []struct {
	what    string
	payload string
	port    uint16
	want    string
}{
	{"curl GET with query", request("GET /search?q=cpu+time&page=2 HTTP/1.1", curlHeaders, ""), 8080, "GET /search"},
	{"numeric id and UUID", request("GET /api/v1/users/12345/orders/3F2B8C1E-9d4a-4e7b-8c6f-1a2b3c4d5e6f HTTP/1.1", curlHeaders, ""), 8080,
		"GET /api/v1/users/{id}/orders/{id}"},
	{"commit hash", request("GET /repos/reqprof/commits/9fceb02d0ae598e95dc970b74767f19372d61af8 HTTP/1.1", curlHeaders, ""), 8080,
		"GET /repos/reqprof/commits/{id}"},
	{"ULID and base64url token", request("GET /invites/01ARZ3NDEKTSV4RRFFQ69G5FAV/accept/dGhpc2lzYXRva2VuMTIz HTTP/1.1", curlHeaders, ""), 8080,
		"GET /invites/{id}/accept/{id}"},
	{"long words are a route", request("GET /docs/list-repositories-for-the-authenticated-user HTTP/1.1", curlHeaders, ""), 8080,
		"GET /docs/list-repositories-for-the-authenticated-user"},
	{"short hex and versions stay", request("GET /v2/cafe/beef HTTP/1.0", nil, ""), 8080, "GET /v2/cafe/beef"},
	{"trailing slash and fragment", request("GET /users/7/#top HTTP/1.1", curlHeaders, ""), 8080, "GET /users/{id}/"},
	{"percent-encoding as sent", request("DELETE /files/a%20b%2Fc HTTP/1.1", curlHeaders, ""), 8080, "DELETE /files/a%20b%2Fc"},
	{"absolute form", request("GET http://example.com:8080/items/42?x=1 HTTP/1.1", curlHeaders, ""), 8080, "GET /items/{id}"},
	{"absolute form without path", request("HEAD https://example.com HTTP/1.1", curlHeaders, ""), 8080, "HEAD /"},
	{"asterisk form", request("OPTIONS * HTTP/1.1", curlHeaders, ""), 8080, "OPTIONS *"},
	{"authority form", request("CONNECT example.com:443 HTTP/1.1", curlHeaders, ""), 3128, "CONNECT"},
	{"control and non-UTF-8 bytes", request("GET /caf\xe9/a\x01b/\u202e HTTP/1.1", curlHeaders, ""), 8080, "GET /caf\ufffd/a\ufffdb/\ufffd"},
	{"long segment", request("GET /search/"+strings.Repeat("xy", 40)+"/x HTTP/1.1", curlHeaders, ""), 8080, "GET /search/{long}/x"},
	{"too many segments", request("GET /a/b/c/d/e/f/g/h/i/j HTTP/1.1", curlHeaders, ""), 8080, "GET /a/b/c/d/e/f/g/h/{more}"},
	{"too long a path", request("GET /"+strings.Repeat("abcdefghijklmnopqrstuvwxyz/", 5)+" HTTP/1.1", curlHeaders, ""), 8080,
		"GET /abcdefghijklmnopqrstuvwxyz/abcdefghijklmnopqrstuvwxyz/{more}"},

	{"MCP tools/call", request("POST /mcp HTTP/1.1", curlMCPSessionHeaders, mcpToolsCall), 3000, "POST /mcp tools/call add"},
	{"MCP tools/call from Node", request("POST /mcp HTTP/1.1", nodeMCPHeaders, mcpToolsCall), 3000, "POST /mcp tools/call add"},
	{"MCP initialize", request("POST /mcp HTTP/1.1", curlMCPHeaders, mcpInitialize), 3000, "POST /mcp initialize"},
	{"MCP tools/list", request("POST /mcp HTTP/1.1", curlMCPSessionHeaders, mcpToolsList), 3000, "POST /mcp tools/list"},
	{"MCP prompts/get", request("POST /mcp HTTP/1.1", curlMCPSessionHeaders, mcpPromptsGet), 3000, "POST /mcp prompts/get code_review"},
	{"MCP resources/read", request("POST /mcp HTTP/1.1", curlMCPSessionHeaders, mcpResourceGet), 3000, "POST /mcp resources/read file:"},
	{"MCP over the SSE transport", request("POST /messages?sessionId=a1b2 HTTP/1.1", curlMCPHeaders, mcpToolsList), 3000, "POST /messages tools/list"},
	{"A2A message/send", request("POST / HTTP/1.1", httpxA2AHeaders, a2aMessageSend), 9999, "POST / message/send"},
	{"A2A tasks/get", request("POST / HTTP/1.1", httpxA2AHeaders, a2aTasksGet), 9999, "POST / tasks/get"},
	{"JSON-RPC batch", request("POST / HTTP/1.1", curlMCPHeaders,
		`[{"jsonrpc":"2.0","method":"eth_blockNumber","params":[],"id":1},{"jsonrpc":"2.0","method":"eth_chainId","params":[],"id":2}]`), 8545,
		"POST / eth_blockNumber (batch)"},
	{"JSON-RPC response", request("POST /mcp HTTP/1.1", curlMCPSessionHeaders, `{"jsonrpc":"2.0","id":"s-1","result":{"action":"accept"}}`), 3000,
		"POST /mcp"},
	{"REST body with a method field", request("POST /v1/payments HTTP/1.1", curlMCPHeaders, `{"amount":1200,"method":"card"}`), 8080,
		"POST /v1/payments"},
	{"JSON-RPC only in POST bodies", request("PUT /mcp HTTP/1.1", curlMCPHeaders, mcpToolsList), 3000, "PUT /mcp"},

	{"raw JSON-RPC", mcpToolsCall + "\n", 7000, "tools/call add"},
	{"raw JSON-RPC response", "\n" + `{"jsonrpc":"2.0","id":1,"result":{}}`, 7000, "jsonrpc"},
	{"raw JSON that is not JSON-RPC", `{"type":"subscribe","channel":"ticker"}`, 7000, ":7000"},

	{"Redis GET", "*2\r\n$3\r\nGET\r\n$5\r\nuser1\r\n", 6379, "GET"},
	{"Redis SET lowercase", "*3\r\n$3\r\nset\r\n$5\r\nuser1\r\n$5\r\nalice\r\n", 6379, "SET"},
	{"Redis module command", "*3\r\n$8\r\nJSON.GET\r\n$3\r\ndoc\r\n$1\r\n$\r\n", 6379, "JSON.GET"},
	{"Redis inline PING", "PING\r\n", 6379, "PING"},
	{"Redis inline GET", "get user1\r\n", 6379, "GET"},
	{"Redis GET of a path is not HTTP", "GET /user1\r\n", 6379, "GET"},
	{"RESP command is no word", "*1\r\n$4\r\n\x00\x01\x02\x03\r\n", 6379, ":6379"},
	{"RESP length past the payload", "*1\r\n$40\r\nGET\r\n", 6379, ":6379"},

	{"HTTP/2 preface", http2PrefaceAndSettings, 8080, "h2 :8080"},
	{"TLS ClientHello", tlsClientHello, 443, "tls :443"},
	{"PostgreSQL SSLRequest", "\x00\x00\x00\x08\x04\xd2\x16\x2f", 5432, ":5432"},
	{"binary garbage", "\x9f\x00\xff\xfe{\"method\"\r\n", 9000, ":9000"},
	{"empty", "", 80, ":80"},
}

func TestName(t *testing.T) {
	for _, tt := range nameTests {
		if got := Name([]byte(tt.payload), tt.port); got != tt.want {
			t.Errorf("%s: Name(%q) = %q, want %q", tt.what, tt.payload, got, tt.want)
		}
	}
}

// The BPF side keeps the first 256 bytes. Each case states where that cut
// falls, and the test checks that it does.
func TestNameTruncated(t *testing.T) {
	tests := []struct {
		what    string
		payload string
		cutIn   string // the cut falls inside this part of payload
		want    string
	}{
		{"headers push the method past the cut",
			request("POST /mcp HTTP/1.1", nodeMCPHeaders, mcpToolsCall), "sec-fetch-mode: cors", "POST /mcp"},
		{"cut inside the arguments",
			request("POST /mcp HTTP/1.1", curlMCPHeaders, mcpToolsCall), `"arguments":{"a":1,"b":2}`, "POST /mcp tools/call add"},
		{"cut inside the method is no method",
			request("POST /mcp HTTP/1.1", curlMCPSessionHeaders, mcpToolsCall), `"tools/call"`, "POST /mcp"},
		{"cut inside the A2A message",
			request("POST / HTTP/1.1", httpxA2AHeaders, a2aMessageSend), `"params":{"message"`, "POST / message/send"},
		{"cut inside the tool name",
			request("POST /mcp HTTP/1.1", curlMCPHeaders[:2], `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"arguments":{"query":"`+
				strings.Repeat("x", 75)+`"},"name":"search_issues"}}`), `"search_issues"`, "POST /mcp tools/call"},
		{"cut inside a deep path",
			request("GET /files"+strings.Repeat("/a", 130)+"/report.pdf HTTP/1.1", nil, ""), "/files" + strings.Repeat("/a", 130),
			"GET /files/a/a/a/a/a/a/a/{more}"},
		{"cut inside a long query",
			request("GET /search?q="+strings.Repeat("x", 300)+" HTTP/1.1", nil, ""), "?q=" + strings.Repeat("x", 300), "GET /search"},
		{"cut in the last segment",
			request("GET /static/js/"+strings.Repeat("x", 250)+".js HTTP/1.1", nil, ""), strings.Repeat("x", 250), "GET /static/js/{cut}"},
	}
	for _, tt := range tests {
		at := strings.Index(tt.payload, tt.cutIn)
		if at < 0 || at >= captureLen || at+len(tt.cutIn) <= captureLen {
			t.Errorf("%s: the cut at %d does not fall inside %q (at %d..%d)", tt.what, captureLen, tt.cutIn, at, at+len(tt.cutIn))
			continue
		}
		if got := Name([]byte(capture(tt.payload)), 3000); got != tt.want {
			t.Errorf("%s: Name(%q) = %q, want %q", tt.what, capture(tt.payload), got, tt.want)
		}
	}
}

// Cut at every byte, a request is named by a prefix of its full name's
// words, or by its port while too little of it is there to tell.
func TestNameEveryCut(t *testing.T) {
	for _, p := range []string{
		request("POST /mcp HTTP/1.1", curlMCPSessionHeaders, mcpToolsCall),
		request("POST / HTTP/1.1", httpxA2AHeaders, a2aMessageSend),
		"*3\r\n$3\r\nSET\r\n$5\r\nuser1\r\n$5\r\nalice\r\n",
	} {
		full := Name([]byte(p), 3000)
		for n := range len(p) {
			got := Name([]byte(p[:n]), 3000)
			if got != ":3000" && !strings.HasPrefix(full+" ", got+" ") && !strings.HasSuffix(got, "{cut}") {
				t.Errorf("Name(%q) = %q, not a prefix of %q", p[:n], got, full)
			}
		}
	}
}

func TestNameBounded(t *testing.T) {
	longTool := strings.Repeat("t", 47)
	long := request("POST "+strings.Repeat("/abcdefghi", 8)+" HTTP/1.1", curlMCPHeaders,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+longTool+`"}}`)
	want := "POST /abcdefghi/abcdefghi/abcdefghi/abcdefghi/abcdefghi/abcdefghi/abcdefghi/abcdefghi tools/call"
	if got := Name([]byte(long), 80); got != want {
		t.Errorf("long path and tool: got %q, want %q", got, want)
	}
	if got := Name([]byte(request("POST /mcp HTTP/1.1", curlMCPHeaders,
		`{"jsonrpc":"2.0","id":1,"method":"`+strings.Repeat("m", 49)+`"}`)), 80); got != "POST /mcp {long}" {
		t.Errorf("long method: got %q", got)
	}
}
