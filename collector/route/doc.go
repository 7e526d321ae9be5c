// Package route names a request from the first bytes read from its
// connection, so that CPU time can be grouped per route or RPC method instead
// of per connection. A name is at most 128 bytes of printable UTF-8: bytes that
// are not UTF-8, control characters and other runes that would not print
// become U+FFFD. Names are built only from the bytes given, so the same bytes
// always get the same name.
//
// The payload is tried as, in order:
//
//   - TLS: a handshake record (0x16, version 0x03xx) is "tls :PORT".
//   - HTTP/2 with prior knowledge: the client preface "PRI * HTTP/2.0" is
//     "h2 :PORT".
//   - HTTP/1.x: the request line "METHOD target HTTP/1.x", for the methods
//     GET HEAD POST PUT DELETE PATCH OPTIONS TRACE CONNECT, is "METHOD /path".
//     The query and fragment are dropped; percent-encoding is left as sent;
//     an absolute-form target ("http://host/path") reduces to its path;
//     "OPTIONS *" stays; any other target (CONNECT's host:port) leaves the
//     method alone. A path segment that names an entity rather than a route
//     becomes {id}: all digits, a UUID (8-4-4-4-12 hex), 16 or more hex
//     digits, or 16 or more of [A-Za-z0-9_-] mixing letters and digits
//     (base64url tokens, ULIDs, dated slugs). Word-only segments such as
//     "list-repositories-for-user" stay. Any other segment longer than 64
//     bytes becomes {long}, and after 8 segments or about 80 bytes of path
//     the rest becomes /{more}, so a hostile path cannot make names long or
//     many.
//   - JSON-RPC 2.0, raw on the connection or as the body of an HTTP POST in
//     the same read: the call's "method" is appended ("POST /mcp tools/list");
//     raw, it is the whole name. MCP "tools/call" and "prompts/get" add
//     params.name ("POST /mcp tools/call add"); "resources/read" adds only the
//     scheme of params.uri ("resources/read file:"), since the full URI has
//     no bound. A batch is named by its first call plus "(batch)". A body is
//     JSON-RPC only if it has "jsonrpc":"2.0" at the top level, so a REST body
//     that happens to have a "method" field keeps the bare HTTP name. Method
//     and names longer than 48 bytes become {long}.
//   - FastCGI: records from a client (a BEGIN_REQUEST, or any client's
//     record first where a burst of a kept connection starts) are the
//     request of the BEGIN_REQUEST among them, named from its params as
//     an HTTP request line: REQUEST_METHOD and REQUEST_URI, or SCRIPT_NAME
//     when the URI is empty or missing ("GET /items/{id}"); "fastcgi
//     :PORT" without a method or path. Each is the last sent, at most
//     8 KiB of it (a longer URI is named as cut there). Params cut by the
//     end of the payload name the request by a REQUEST_URI seen, {cut}
//     when cut inside it, and by port before it.
//   - Redis: a RESP array "*N\r\n$len\r\nCMD..." or an inline command line
//     ("PING\r\n") is the command, uppercased ("GET", "JSON.GET"). Commands
//     are 1 to 32 letters, '.', '_' or '-', starting with a letter; any other
//     line-based protocol whose first word looks like that is named by the
//     word too.
//   - Anything else is ":PORT".
//
// Limits:
//
//   - Truncation. The payload may end at any byte (the BPF side keeps the
//     first 256 bytes of the first read). JSON is scanned tolerantly: what
//     lies before the cut is used, so a method is found even when the cut
//     falls in params, but a method or name cut in the middle is left out
//     rather than named by its prefix, and when headers push the body past the
//     cut the name is the HTTP one alone ("POST /mcp"; raw JSON-RPC:
//     "jsonrpc"). MCP clients send 200 to 350 bytes of headers (curl about
//     220, Node's fetch about 340), so with 256 bytes most MCP requests over
//     HTTP are named by their path alone. A request
//     line cut inside the path ends in {cut} in place of the segment that may
//     be partial.
//   - Pipelining. Only the first request of a read is named: requests
//     pipelined behind it in the same read get no name of their own.
//     Package collector/stream, fed a connection's every inbound byte,
//     finds and names each one (and HTTP/2 streams, JSON-RPC batch calls)
//     with the same rules, through AppendRequestName, AppendJSONRPC and
//     AppendRedisCommand.
//   - Bodies are read as sent: a chunked, compressed, or 100-continue body,
//     or one that arrives in a later read, leaves the HTTP name alone.
//   - HTTP/2 and TLS are named by port only: their requests are framed,
//     HPACK-compressed or encrypted, so the first read shows no path.
package route
