package route

import "testing"

func TestScanRPC(t *testing.T) {
	tests := []struct {
		what string
		body string
		want rpcCall
	}{
		{"MCP tools/call", mcpToolsCall, rpcCall{jsonrpc2: true, method: "tools/call", name: "add"}},
		{"nested name is not params.name",
			`{"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"name":"evil"},"name":"add"}}`,
			rpcCall{jsonrpc2: true, method: "tools/call", name: "add"}},
		{"nested method is not the method",
			`{"jsonrpc":"2.0","id":1,"result":{"method":"tools/call"}}`,
			rpcCall{jsonrpc2: true}},
		{"method after params", `{"params":{"name":"add"},"id":1,"method":"tools/call","jsonrpc":"2.0"}`,
			rpcCall{jsonrpc2: true, method: "tools/call", name: "add"}},
		{"strings holding quotes, braces and brackets",
			`{"id":"a\"}]{[","jsonrpc":"2.0","x":["}",{"y":"\\"}],"method":"ping"}`,
			rpcCall{jsonrpc2: true, method: "ping"}},
		{"escapes", `{"jsonrpc":"2.0","method":"tools\/call","params":{"name":"\u00e9t\u00E9 \ud83d\ude00"}}`,
			rpcCall{jsonrpc2: true, method: "tools/call", name: "été 😀"}},
		{"escaped key", `{"jsonrpc":"2.0","m\u0065thod":"ping"}`, rpcCall{jsonrpc2: true, method: "ping"}},
		{"control characters", `{"jsonrpc":"2.0","method":"a\nb\u0000\ud800c"}`, rpcCall{jsonrpc2: true, method: "a\ufffdb\ufffd\ufffdc"}},
		{"pretty-printed", "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 7,\n  \"method\": \"tasks/get\"\n}",
			rpcCall{jsonrpc2: true, method: "tasks/get"}},
		{"numbers and literals", `{"id":-1.5e3,"a":true,"b":null,"jsonrpc":"2.0","method":"ping"}`, rpcCall{jsonrpc2: true, method: "ping"}},
		{"first of repeated keys", `{"jsonrpc":"2.0","method":"first","method":"second"}`, rpcCall{jsonrpc2: true, method: "first"}},
		{"method not a string", `{"jsonrpc":"2.0","method":42,"params":{"name":"add"}}`, rpcCall{jsonrpc2: true, name: "add"}},
		{"other JSON-RPC version", `{"jsonrpc":"1.0","method":"ping"}`, rpcCall{method: "ping"}},
		{"resource scheme", mcpResourceGet, rpcCall{jsonrpc2: true, method: "resources/read", scheme: "file:"}},
		{"URI without scheme", `{"jsonrpc":"2.0","method":"resources/read","params":{"uri":"/etc/hosts"}}`,
			rpcCall{jsonrpc2: true, method: "resources/read"}},
		{"batch", `[{"jsonrpc":"2.0","method":"a","id":1},{"jsonrpc":"2.0","method":"b","id":2}]`,
			rpcCall{jsonrpc2: true, method: "a", batch: true}},

		{"cut inside params", mcpToolsCall[:len(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","argu`)],
			rpcCall{jsonrpc2: true, method: "tools/call", name: "add"}},
		{"cut inside the method", `{"jsonrpc":"2.0","id":3,"method":"tools/ca`, rpcCall{jsonrpc2: true}},
		{"cut inside an escape", `{"jsonrpc":"2.0","method":"a\`, rpcCall{jsonrpc2: true}},
		{"cut inside a number before the method", `{"jsonrpc":"2.0","id":12`, rpcCall{jsonrpc2: true}},
		{"cut inside a skipped string", `{"jsonrpc":"2.0","id":"ab\"},"method":"x`, rpcCall{jsonrpc2: true}},
		{"malformed after the method", `{"jsonrpc":"2.0","method":"ping",,,}}`, rpcCall{jsonrpc2: true, method: "ping"}},
		{"not an object", `"method"`, rpcCall{}},
		{"empty", ``, rpcCall{}},
	}
	for _, tt := range tests {
		if got := scanRPC([]byte(tt.body)); got != tt.want {
			t.Errorf("%s: scanRPC(%q) = %+v, want %+v", tt.what, tt.body, got, tt.want)
		}
	}
}
