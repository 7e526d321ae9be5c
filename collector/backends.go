package collector

import (
	"cmp"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/reqprof/reqprof/profile"
)

// Runtimes are the names --runtime takes, each with the model the
// programs follow when a backend answers (bpf/backends.h).
var Runtimes = map[string]reqprofRuntimeModel{
	"node":    reqprofRuntimeModelRUNTIME_IMMEDIATE,
	"asyncio": reqprofRuntimeModelRUNTIME_ASYNCIO,
	"threads": reqprofRuntimeModelRUNTIME_THREADS,
	"go":      reqprofRuntimeModelRUNTIME_GO,
}

// RuntimeNames lists Runtimes' names, for help and errors.
const RuntimeNames = "node, asyncio, threads, go"

// What profile.Target.RuntimeFrom says.
const (
	RuntimeGiven         = "--runtime"
	RuntimeDetected      = "detected"
	RuntimeNotRecognised = "not recognised"
)

// immediateLoops are programs whose event loop goes on with a caller at
// once when its backend's answer is read: libuv (Node and what embeds
// it), and C loops that proxy (nginx, HAProxy, Envoy).
var immediateLoops = map[string]bool{
	"node": true, "nodejs": true, "bun": true, "deno": true,
	"nginx": true, "openresty": true, "haproxy": true, "envoy": true,
}

// detectRuntime says how pid's threads resume a request whose backend
// answered, from what the process runs: a Go binary follows its
// goroutines; Node and the C loops go on at once; a Python interpreter
// with an epoll instance runs asyncio. Anything else is "threads", not
// recognised.
func detectRuntime(pid int) (name, from string) {
	if _, err := goLayoutOf(pid); err == nil {
		return "go", RuntimeDetected
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	base := filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
	if immediateLoops[base] {
		return "node", RuntimeDetected
	}
	if strings.HasPrefix(base, "python") && hasEpoll(pid) {
		return "asyncio", RuntimeDetected
	}
	return "threads", RuntimeNotRecognised
}

// hasEpoll reports whether pid holds an epoll instance: what an asyncio
// loop waits in.
func hasEpoll(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if link, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && link == "anon_inode:[eventpoll]" {
			return true
		}
	}
	return false
}

// setRuntime chooses target index's runtime model, given or detected,
// and gives it to the programs, before its threads are targets: each
// looks it up once.
func (p *process) setRuntime(objs *bpfObjects, index int, given string) error {
	if given != "" {
		p.runtime, p.runtimeFrom = given, RuntimeGiven
	} else {
		p.runtime, p.runtimeFrom = detectRuntime(p.PID)
	}
	return objs.Runtimes.Update(uint32(index), uint32(Runtimes[p.runtime]), ebpf.UpdateAny)
}

// backendRecordSize is struct backend_record's.
const backendRecordSize = int(unsafe.Sizeof(reqprofBackendRecord{}))

// decodeBackend is a backend record at the BPF boundary.
func decodeBackend(b []byte) (*reqprofBackendRecord, error) {
	if len(b) < backendRecordSize {
		return nil, fmt.Errorf("backend record of %d bytes, want %d", len(b), backendRecordSize)
	}
	return (*reqprofBackendRecord)(unsafe.Pointer(&b[0])), nil
}

// backendPeer is a peer as the programs send it: comparable, named only
// when the run is built.
type backendPeer struct {
	addr   [16]byte
	port   uint16
	family uint16
}

// peerName is "127.0.0.1:9400", "[::1]:5432", or "unix".
func (p backendPeer) name() string {
	switch p.family {
	case afINET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(p.addr[:4])), p.port).String()
	case afINET6:
		return netip.AddrPortFrom(netip.AddrFrom16(p.addr).Unmap(), p.port).String()
	case afUNIX:
		return "unix"
	}
	return "family " + strconv.Itoa(int(p.family))
}

const (
	afUNIX  = 1
	afINET  = 2
	afINET6 = 10
)

// backendKey is what a target's backend figures are summed by.
type backendKey struct {
	route profile.RouteKey
	peer  backendPeer
}

// backendUses are the backend figures of a consume: those of requests not
// yet finished by connection, and sums per target by route and peer.
type backendUses struct {
	pending map[uint64][]reqprofBackendUse
	sums    []map[backendKey]*profile.Backend
}

func newBackendUses(targets int) backendUses {
	b := backendUses{pending: map[uint64][]reqprofBackendUse{}, sums: make([]map[backendKey]*profile.Backend, targets)}
	for i := range b.sums {
		b.sums[i] = map[backendKey]*profile.Backend{}
	}
	return b
}

// maxPendingBackendConns bounds the connections whose backend figures
// wait for their request's record (which follows them at once, unless it
// was lost to a full ring buffer).
const maxPendingBackendConns = 4096

// held keeps a backend record until its request's record comes.
func (b *backendUses) held(r *reqprofBackendRecord) {
	uses, ok := b.pending[r.Conn]
	if !ok && len(b.pending) >= maxPendingBackendConns {
		clear(b.pending)
	}
	b.pending[r.Conn] = append(uses, r.Use)
}

// finished gives the backend figures held for conn to the request of
// target and route that its record finished.
func (b *backendUses) finished(target uint32, conn uint64, route profile.RouteKey) {
	uses, ok := b.pending[conn]
	if !ok {
		return
	}
	delete(b.pending, conn)
	sums := b.sums[target]
	for _, u := range uses {
		key := backendKey{route: route, peer: backendPeer{addr: u.Peer.Addr, port: u.Peer.Port, family: u.Peer.Family}}
		sum := sums[key]
		if sum == nil {
			sum = &profile.Backend{Route: route}
			sums[key] = sum
		}
		sum.Calls += u.Calls
		sum.WaitNs += u.WaitNs
		sum.BytesIn += u.BytesIn
		sum.BytesOut += u.BytesOut
	}
}

// of is target's backends, named, in route then peer order.
func (b *backendUses) of(target int) []profile.Backend {
	if target >= len(b.sums) {
		return nil
	}
	var out []profile.Backend
	for key, sum := range b.sums[target] {
		one := *sum
		one.Peer = key.peer.name()
		out = append(out, one)
	}
	slices.SortFunc(out, func(x, y profile.Backend) int {
		return cmp.Or(strings.Compare(x.Route.Route, y.Route.Route), cmp.Compare(x.Route.Port, y.Route.Port),
			strings.Compare(x.Peer, y.Peer))
	})
	return out
}
