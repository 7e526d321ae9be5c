// Package stream follows one connection's inbound bytes, as the server read
// them, and says which requests they carry: each pipelined HTTP/1 request,
// each HTTP/2 stream and gRPC call, each RESP command, each JSON-RPC
// message (one per element of a batch), each FastCGI request. Where the BPF side's first read of
// a burst names one request per burst (package route), a Conn counts and
// names every request in it, each as route.Name would name its bytes alone.
//
// A Conn is fed the bytes with their inbound offsets (Feed), and hands out
// the requests whose head became complete (Requests). It keeps no more
// than the unit it is reading when a Feed ends mid-unit: a request head, a
// line, an HTTP/2 header frame; payloads it does not need (bodies, DATA,
// RESP values) are passed over without being kept, so bytes missing there
// (a gap in the offsets) cost nothing. A request that comes whole in one
// Feed is read where it lies, without a copy; its name is the one
// allocation, which RequestsFunc lets a caller that interns names avoid.
//
// # Detection
//
// The protocol is told from the first bytes (after any whitespace):
//
//   - "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", the HTTP/2 client preface: H2.
//   - 0x16 0x03, a TLS handshake: the Conn breaks with ErrTLS ("TLS: named
//     by port"); the bytes are encrypted.
//   - '*': RESP. '{' or '[': JSON-RPC raw on the connection.
//   - 0x01: FastCGI when the first 8 bytes are a record header a client
//     opens a connection with (version 1, reserved byte 0): BEGIN_REQUEST
//     (request id not 0, content length 8) or GET_VALUES (request id 0);
//     from an offset past the connection's start, any record a client
//     sends.
//     "Content-Length:" (any case): JSON-RPC framed as LSP does.
//   - A line starting with a word of letters: HTTP/1 when it is
//     "METHOD target HTTP/1.x" (any token method), else an inline Redis
//     command when the word is one (as route sees commands: 1 to 32
//     letters, '.', '_', '-'). So "GET /\r\n" (HTTP/0.9) is a Redis GET.
//   - Anything else breaks the Conn with ErrUnknown.
//
// Detection waits for as many bytes as it takes to tell: a prefix of the
// preface or of "Content-Length:", or the first line.
//
// # HTTP/1
//
// Request heads are read line by line (CR LF or bare LF; blank lines
// between requests are skipped) up to the blank line. Content-Length and
// Transfer-Encoding frame the body: chunked (the last coding) wins; chunk
// sizes, extensions and trailers are read, chunk data passed over. A
// request counts once its body has fully arrived (the server answers only
// then), named from its request line with route.AppendRequestName. The
// body of a POST is followed as JSON: a JSON-RPC 2.0 object makes the
// request "POST /mcp tools/call add", and a batch array makes one request
// per JSON-RPC element, each named so; a body with no JSON-RPC keeps the
// HTTP name. JSON-RPC is not looked for outside POST bodies. A request
// with "Upgrade: h2c" is followed by the HTTP/2 preface if the server
// switched: the Conn then reads HTTP/2, the upgrade request having counted
// as HTTP/1 (it is stream 1). Other upgrades (WebSocket) and CONNECT
// tunnels break the Conn at their first bytes, which are no request.
//
// # HTTP/2 and gRPC
//
// Frames are read by their 9-byte header: a HEADERS frame with its
// CONTINUATION frames (PADDED and PRIORITY handled) is buffered frame by
// frame and decoded with golang.org/x/net/http2/hpack, one decoder per
// connection, every block in order, since HPACK's dynamic table spans the
// connection. A block on an odd stream above the last one opened is a new
// request: "METHOD /path" with the path named as HTTP/1 paths are, or "h2
// :PORT" without a :method; blocks on streams already open (trailers) are
// decoded for the table's sake only. When the content-type starts with
// application/grpc the request is GRPC, named by its method path
// ("/pkg.Service/Method") as sent, unless it is not printable ASCII or is
// longer than 128 bytes (then as HTTP). DATA and every other frame's
// payload are passed over; fixed-size frames are checked for their size and
// stream. JSON-RPC inside HTTP/2 bodies is not read.
//
// # FastCGI
//
// Records are read by their 8-byte header (version 1, type, request id,
// content length, padding length). BEGIN_REQUEST begins a request of its
// id (one begun again before its params ended starts over); the contents
// of its PARAMS records are decoded as they come, pairs cut anywhere
// across records and Feeds, by route.FastCGIParams, which keeps only
// REQUEST_METHOD, REQUEST_URI and SCRIPT_NAME. The empty PARAMS record
// that ends them counts the request, named by route's rules
// ("GET /items/{id}"), since a server answers a request only once it has
// its params; ABORT_REQUEST before then drops it. Requests multiplexed by
// id are each followed. STDIN, DATA, GET_VALUES, unknown types and all
// padding are passed over; a record only a server sends, a version other
// than 1, a request's record on id 0 or GET_VALUES on another breaks the
// Conn.
//
// # RESP
//
// A command is an array of bulk strings ("*N\r\n$len\r\n...\r\n"), named
// by the first, uppercased (route.AppendRedisCommand), or ":PORT" when that
// is no command; it counts once its last argument is in. The other
// arguments are passed over unread. Inline commands are lines named by
// their first word; blank lines and "*0"/"*-1" are no command.
//
// # JSON-RPC
//
// Raw JSON-RPC is values one after another, with or without whitespace or
// newlines between them; LSP-style framing puts each value after headers
// with a Content-Length. Each top-level object is a message; each element
// of a top-level array (a batch) is one. A message is named by
// route.AppendJSONRPC ("tools/call add"; "jsonrpc" without a method;
// ":PORT" when it is not JSON-RPC 2.0; an empty batch, which is answered
// with an error, ":PORT" too). Notification marks a message with a method
// and no "id" member, Response one without a method (a reply to the
// server). The JSON is followed byte by byte, counting nesting, never
// recursing, without checking it beyond where values start and end; only a
// message's first 16 KiB are kept to name it, so a message longer than that
// is named by what comes first (its "id" is seen wherever it is).
//
// # Bounds
//
//   - A Conn buffers at most 64 KiB of partial messages: a request head
//     (64 KiB), the first line of the connection, an inline command or a
//     trailer line (64 KiB each), a chunk-size line (4 KiB), a RESP length
//     line (32 bytes), an HTTP/2 header block (64 KiB over its frames), and
//     the kept start of a JSON message (16 KiB).
//   - HPACK strings are at most 16 KiB decoded, and the dynamic table at
//     most 64 KiB (a client may grow it to what the server allowed).
//   - RESP commands have at most 2^20 arguments of at most 512 MiB, as
//     Redis allows.
//   - At most 65536 requests wait to be taken by Requests.
//   - At most 1024 FastCGI requests begun and not yet named, keeping at
//     most 8 KiB of each of the three values that name them, within the
//     64 KiB of partial messages.
//
// # What breaks a Conn
//
// A Conn breaks (Err is non-nil, wrapping ErrTLS, ErrUnknown, ErrGap,
// ErrMalformed, ErrBound or ErrHPACK) on: TLS or an unknown protocol; bytes
// that break the protocol's framing (a malformed request line, header or
// chunk size, conflicting Content-Lengths, a Transfer-Encoding other than
// chunked last; an HTTP/2 frame a client may not send, of the wrong size or
// on the wrong stream, CONTINUATION out of place; a RESP argument that is
// not a bulk string; JSON that is not an object or array at the top
// level; a FastCGI record a client may not send, params that end inside
// a pair); an HPACK block that fails to decode; any bound exceeded; a gap
// anywhere but in a payload passed over (inside a head, a frame header or
// header block, a line, raw JSON, a JSON-RPC batch in a body, FastCGI
// params); Skip says where a gap ends without bytes after it. A gap in a
// body whose single JSON value was being read names that message from what
// came before the gap. Once broken a Conn ignores every Feed; requests
// completed before the break are still returned by Requests, once. The
// caller then falls back to counting bursts.
//
// No input makes a Conn panic or grow beyond these bounds; fuzz tests feed
// every parser arbitrary bytes, cut anywhere, and check that cutting a
// stream into Feeds does not change what is found.
package stream
