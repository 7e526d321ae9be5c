package route

import (
	"strings"
	"testing"
)

func TestAppendRequestName(t *testing.T) {
	tests := []struct {
		method, target, want string
	}{
		{"GET", "/users/42?x=1", "GET /users/{id}"},
		{"POST", "http://example.com/a/b#f", "POST /a/b"},
		{"OPTIONS", "*", "OPTIONS *"},
		{"CONNECT", "example.com:443", "CONNECT"},
		{"CONNECT", "", "CONNECT"},
		{"PROPFIND", "/dav/x", "PROPFIND /dav/x"},
		{"G\x00T", "/", "G\ufffdT /"},
		{strings.Repeat("M", 33), "/", "{long} /"},
		{"GET", "/" + strings.Repeat("x", 300), "GET /{long}"},
	}
	for _, tt := range tests {
		dst := []byte("prefix:")
		got := AppendRequestName(dst, []byte(tt.method), []byte(tt.target))
		if string(got) != "prefix:"+tt.want {
			t.Errorf("AppendRequestName(%q, %q) = %q, want %q", tt.method, tt.target, got, "prefix:"+tt.want)
		}
	}
	// For the methods Name knows, a whole request line is named alike.
	for _, tt := range nameTests {
		method, rest := httpMethod([]byte(tt.payload))
		line, _, found := strings.Cut(string(rest), "\r\n")
		target, version, ok := strings.Cut(line, " ")
		if method == "" || !found || !ok || !strings.HasPrefix(version, "HTTP/1.") || method == "POST" {
			continue
		}
		if got := string(AppendRequestName(nil, []byte(method), []byte(target))); got != tt.want {
			t.Errorf("%s: AppendRequestName = %q, Name = %q", tt.what, got, tt.want)
		}
	}
}

func TestAppendJSONRPC(t *testing.T) {
	tests := []struct {
		name, msg   string
		want        string
		rpc, method bool
	}{
		{"", mcpToolsCall, "tools/call add", true, true},
		{"POST /mcp", mcpToolsCall, "POST /mcp tools/call add", true, true},
		{"POST /mcp", mcpResourceGet, "POST /mcp resources/read file:", true, true},
		{"POST /mcp", `{"jsonrpc":"2.0","id":1,"result":{}}`, "POST /mcp", true, false},
		{"", `{"jsonrpc":"1.0","method":"x"}`, "", false, false},
		{"", `[` + mcpToolsList + `]`, "", false, false}, // a batch is split by the caller
		{"", ` {"jsonrpc":"2.0","method":"tools/li`, "", true, false},
		{strings.Repeat("n", 120), mcpToolsList, strings.Repeat("n", 120), true, true},
	}
	for _, tt := range tests {
		got, rpc, method := AppendJSONRPC([]byte(tt.name), []byte(tt.msg))
		if string(got) != tt.want || rpc != tt.rpc || method != tt.method {
			t.Errorf("AppendJSONRPC(%q, %q) = %q, %v, %v; want %q, %v, %v", tt.name, tt.msg, got, rpc, method, tt.want, tt.rpc, tt.method)
		}
	}
}

func TestAppendRedisCommand(t *testing.T) {
	for _, tt := range []struct {
		cmd, want string
		ok        bool
	}{
		{"get", "GET", true}, {"JSON.get", "JSON.GET", true}, {"1GET", "", false}, {"", "", false},
		{strings.Repeat("a", 33), "", false}, {"GET\x00", "", false},
	} {
		got, ok := AppendRedisCommand([]byte(">"), []byte(tt.cmd))
		if string(got) != ">"+tt.want || ok != tt.ok {
			t.Errorf("AppendRedisCommand(%q) = %q, %v", tt.cmd, got, ok)
		}
	}
	if !JSONKeyIs([]byte(`m\u0065thod`), "method") || JSONKeyIs([]byte("id2"), "id") {
		t.Error("JSONKeyIs")
	}
}
