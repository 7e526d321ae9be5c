package collector

import (
	"strings"

	"github.com/reqprof/reqprof/collector/route"
	"github.com/reqprof/reqprof/profile"
)

// maxRouteNames bounds the distinct route names the collector keeps.
// Names come from what clients sent, so without a bound a client could
// grow the collector's memory with each request; past it, requests are
// named profile.OtherRoutes, as the summary names the routes it folds.
const maxRouteNames = 10_000

// routeNames names requests, keeps one copy of each name, and at most
// maxRouteNames of them.
type routeNames struct {
	interned map[string]string
	limit    int
}

func newRouteNames(limit int) *routeNames {
	return &routeNames{interned: map[string]string{}, limit: limit}
}

func (n *routeNames) name(payload []byte, port uint16) string {
	return n.intern(route.Name(payload, port))
}

// internBytes is intern for a name in bytes, which it copies only when
// new.
func (n *routeNames) internBytes(b []byte) string {
	if interned, ok := n.interned[string(b)]; ok {
		return interned
	}
	return n.intern(string(b))
}

// intern keeps one copy of each name, and at most limit names.
func (n *routeNames) intern(name string) string {
	if interned, ok := n.interned[name]; ok {
		return interned
	}
	if len(n.interned) >= n.limit {
		return profile.OtherRoutes
	}
	n.interned[name] = name
	return name
}

// routeOf is the route of a request of d named name: a client's call
// with its peer, a request of a Unix socket or stdio channel with it.
func (res *consumeResult) routeOf(name string, d *decodedRecord) string {
	if d.request.Peer != "" {
		res.clientRoute = appendClientRoute(res.clientRoute[:0], name, d.request.Peer)
		return res.names.internBytes(res.clientRoute)
	}
	if channel := channelName(d.flags); channel != "" {
		return res.names.intern(localName(name, channel))
	}
	return name
}

// channelName is what requests with no port came on: "unix" (a Unix
// socket), "stdio", or "" for a TCP port.
func channelName(flags uint32) string {
	switch {
	case flags&uint32(reqprofRecordFlagsREQ_STDIO) != 0:
		return "stdio"
	case flags&uint32(reqprofRecordFlagsREQ_UNIX) != 0:
		return "unix"
	}
	return ""
}

// localName names by its channel what would be named by port 0.
func localName(name, channel string) string {
	if channel == "" {
		return name
	}
	if name == ":0" {
		return channel
	}
	if rest, ok := strings.CutSuffix(name, " :0"); ok {
		return rest + " " + channel
	}
	return name
}

// fallbackName names a burst counted as one request.
func fallbackName(d *decodedRecord) string { return route.Name(d.payload, d.localPort) }

// maxPeers bounds the peers named in one run; calls to more are named
// with otherPeers.
const maxPeers = 4096

const otherPeers = "(other peers)"

// peerNames names the peers of client calls, once each.
type peerNames struct {
	names map[backendPeer]string
}

func (n *peerNames) name(raw reqprofBackendPeer) string {
	p := backendPeer{addr: raw.Addr, port: raw.Port, family: raw.Family}
	if name, ok := n.names[p]; ok {
		return name
	}
	if n.names == nil {
		n.names = map[backendPeer]string{}
	}
	if len(n.names) >= maxPeers {
		return otherPeers
	}
	name := p.name()
	if p.family == 0 {
		name = "stdio" // a pipe to a server's stdio: no socket, no address
	}
	n.names[p] = name
	return name
}

// clientRouteSep joins a call's name and its peer.
const clientRouteSep = " -> "

// appendClientRoute appends a client call's route: its name, as a
// server's request would be named from the same bytes, and its peer
// ("GET /users -> 127.0.0.1:9400"). A name of no method (the bytes not
// recognised: ":0") is the peer alone; "tls :0", "h2 :0" keep their word.
func appendClientRoute(dst []byte, name, peer string) []byte {
	switch {
	case name == ":0":
		name = "call"
	case len(name) > 3 && name[len(name)-3:] == " :0":
		name = name[:len(name)-3]
	}
	dst = append(dst, name...)
	dst = append(dst, clientRouteSep...)
	return append(dst, peer...)
}
