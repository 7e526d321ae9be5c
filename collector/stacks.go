package collector

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"github.com/reqprof/reqprof/collector/symbols"
	"github.com/reqprof/reqprof/profile"
)

// Stack samples (bpf/stacks.h) come through the ring buffer with the
// request each ran for, as (conn, start_ns), before that request's record:
// a request is emitted when the next one on its connection starts, or when
// the connection closes. The collector holds each sample until then, and
// gives it the route of the record's request. A burst that carried several
// requests (pipelining, HTTP/2 streams, a JSON-RPC batch) shares its
// samples among them as it shares its CPU: whole samples, dealt in turn,
// starting from a request that moves on with each burst, so that no
// request of a burst is favoured. A burst that completed no request passes
// its samples on with its cost.
//
// Stacks are deduplicated as they arrive and resolved to functions the
// first time each is seen, while its process still runs as it did.

// Bounds on what the samples take of the collector's memory; past each,
// samples are counted as lost, by why.
const (
	// maxHeldSamples bounds the samples held for requests not finished
	// yet, 16 bytes each: a minute of two CPUs at 999 Hz is 120,000.
	maxHeldSamples = 1 << 18
	// maxStacks and maxStackKeyBytes bound the distinct stacks kept: a
	// server's hot paths are a few thousand.
	maxStacks        = 1 << 16
	maxStackKeyBytes = 64 << 20
	// maxSampleCounts bounds the distinct (route, stack, mode) counted per
	// target.
	maxSampleCounts = 1 << 20
)

// Why samples were lost, as profile.Stacks.Lost keys them.
const (
	lostSampleRingBuffer = "ring_buffer"
	lostSamplePending    = "pending_bound"
	lostSampleStacks     = "stack_bound"
	lostSampleCounts     = "count_bound"
)

// decodedSample is a stack sample at the BPF boundary.
type decodedSample struct {
	target, tgid, tid uint32
	conn, startNs     uint64
	flags             uint32
	kernel, user      []uint64
	stackTop          uint64 // the word on top of the user stack
	// interp are its interpreter frames, innermost first, two words each:
	// the code and where in it (bpf/interp.h); bit i of interpEntries
	// says frame i ends a run of the interpreter's loop.
	interp        []uint64
	interpEntries uint64
}

func (d *decodedSample) has(flag reqprofSampleFlags) bool { return d.flags&uint32(flag) != 0 }

// sampleHeaderSize is struct stack_sample up to its addresses.
const sampleHeaderSize = int(unsafe.Offsetof(reqprofStackSample{}.Ips))

// decodeStackSample parses a stack sample, rejecting one that claims more
// frames than it carries.
func decodeStackSample(b []byte) (decodedSample, error) {
	if len(b) < sampleHeaderSize {
		return decodedSample{}, fmt.Errorf("stack sample of %d bytes, want at least %d", len(b), sampleHeaderSize)
	}
	var s reqprofStackSample
	u16 := func(field uintptr) int { return int(binary.NativeEndian.Uint16(b[field:])) }
	u32 := func(field uintptr) uint32 { return binary.NativeEndian.Uint32(b[field:]) }
	u64 := func(field uintptr) uint64 { return binary.NativeEndian.Uint64(b[field:]) }
	nk, nu := u16(unsafe.Offsetof(s.KernelFrames)), u16(unsafe.Offsetof(s.UserFrames))
	ni := u16(unsafe.Offsetof(s.InterpFrames))
	if nk > int(reqprofLimitsSTACK_DEPTH) || nu > int(reqprofLimitsSTACK_DEPTH) || ni > int(reqprofLimitsMAX_INTERP_FRAMES) ||
		sampleHeaderSize+8*(nk+nu+2*ni) > len(b) {
		return decodedSample{}, fmt.Errorf("stack sample claims %d+%d frames and %d interpreter frames, carries %d bytes", nk, nu, ni, len(b)-sampleHeaderSize)
	}
	ips := make([]uint64, nk+nu+2*ni)
	for i := range ips {
		ips[i] = binary.NativeEndian.Uint64(b[sampleHeaderSize+8*i:])
	}
	return decodedSample{
		target:   u32(unsafe.Offsetof(s.Target)),
		tgid:     u32(unsafe.Offsetof(s.Tgid)),
		tid:      u32(unsafe.Offsetof(s.Tid)),
		conn:     u64(unsafe.Offsetof(s.Conn)),
		startNs:  u64(unsafe.Offsetof(s.StartNs)),
		flags:    u32(unsafe.Offsetof(s.Flags)),
		stackTop: u64(unsafe.Offsetof(s.UserStackTop)),
		kernel:   ips[:nk],
		user:     ips[nk : nk+nu],
		interp:   ips[nk+nu:],

		interpEntries: u64(unsafe.Offsetof(s.InterpEntries)),
	}, nil
}

// stackSamples is what the collector keeps of the samples of one run.
type stackSamples struct {
	hz  int
	sym *symbols.Symbolizer
	// The bounds, maxHeldSamples and maxStacks but in tests.
	maxHeld, maxStacks int

	// Distinct stacks, by their raw addresses and process, and what they
	// resolved to.
	index    map[string]int32
	stacks   []resolvedStack
	keyBytes int
	key      []byte // reused

	perTarget []*targetSamples
	// held are the samples of requests whose record has not come yet, by
	// connection.
	held  map[uint64][]heldSample
	nHeld int
	// deal is the request of a burst dealt its first sample, moving on.
	deal int
	// pids are the processes samples came from, with their targets: the
	// symbolizer's notes are about processes.
	pids map[int]uint32
	// interp names interpreter frames; nil when none are read.
	interp *interpreters

	frames []profile.Frame // reused
}

type resolvedStack struct {
	frames []int32 // into its target's frames
	// byTop: the innermost user function had no frame, so the stack is
	// told apart by the word on top of the user stack too (its caller),
	// under a key of its own; this entry has no frames.
	byTop bool
	// unnamedJIT is the sample the stack was resolved from when some of
	// its frames are JIT code its perf map did not name yet (a JIT writes
	// a name after it compiles the code): it is resolved again at the
	// end, when the map has it.
	unnamedJIT *retrySample
}

type heldSample struct {
	start  uint64
	stack  int32
	kernel bool
	target uint32
}

type countKey struct {
	route  profile.RouteKey
	stack  int32
	kernel bool
}

// targetSamples are one target's samples, counted by route, stack and
// mode, and its frames.
type targetSamples struct {
	counts     map[countKey]uint64
	frames     []profile.Frame
	frameIndex map[profile.Frame]int32
	lost       map[string]uint64
	kernel     bool // some of its stacks have kernel frames
}

func newStackSamples(targets, hz int, sym *symbols.Symbolizer) *stackSamples {
	s := &stackSamples{hz: hz, sym: sym, maxHeld: maxHeldSamples, maxStacks: maxStacks,
		index: map[string]int32{}, held: map[uint64][]heldSample{}, pids: map[int]uint32{}}
	for range targets {
		s.perTarget = append(s.perTarget, &targetSamples{
			counts: map[countKey]uint64{}, frameIndex: map[profile.Frame]int32{}, lost: map[string]uint64{},
		})
	}
	return s
}

// sample takes one sample: counted at once when it ran for no request (or
// one that will not be reported), else held for its request's record.
func (s *stackSamples) sample(d *decodedSample) {
	if int(d.target) >= len(s.perTarget) {
		return // the collector's own thread, calibrating
	}
	t := s.perTarget[d.target]
	stack, ok := s.stack(d)
	if !ok {
		t.lost[lostSampleStacks]++
		return
	}
	kernel := d.has(reqprofSampleFlagsSAMPLE_KERNEL_MODE)
	switch {
	case !d.has(reqprofSampleFlagsSAMPLE_IN_REQUEST):
		s.count(d.target, profile.RouteKey{Route: profile.BetweenRequests}, stack, kernel)
	case d.has(reqprofSampleFlagsSAMPLE_START_UNSEEN):
		s.count(d.target, profile.RouteKey{Route: profile.UnfinishedRequest}, stack, kernel)
	case s.nHeld >= s.maxHeld:
		t.lost[lostSamplePending]++
	default:
		s.held[d.conn] = append(s.held[d.conn], heldSample{start: d.startNs, stack: stack, kernel: kernel, target: d.target})
		s.nHeld++
	}
}

func (s *stackSamples) count(target uint32, route profile.RouteKey, stack int32, kernel bool) {
	t := s.perTarget[target]
	key := countKey{route: route, stack: stack, kernel: kernel}
	if _, ok := t.counts[key]; !ok && len(t.counts) >= maxSampleCounts {
		t.lost[lostSampleCounts]++
		return
	}
	t.counts[key]++
}

// stack is the index of d's stack, resolved the first time it is seen.
// The key is the process and the addresses; where the innermost user
// function had no frame, the word on top of the user stack too, which
// names its caller (and is any data elsewhere, which must not split
// stacks that are alike).
func (s *stackSamples) stack(d *decodedSample) (int32, bool) {
	kernelMode := d.has(reqprofSampleFlagsSAMPLE_KERNEL_MODE)
	key := binary.NativeEndian.AppendUint32(s.key[:0], d.tgid)
	key = binary.NativeEndian.AppendUint32(key, uint32(len(d.kernel)))
	if kernelMode {
		key = append(key, 1)
	} else {
		key = append(key, 0)
	}
	for _, ip := range d.kernel {
		key = binary.NativeEndian.AppendUint64(key, ip)
	}
	for _, ip := range d.user {
		key = binary.NativeEndian.AppendUint64(key, ip)
	}
	// Interpreter frames, by what they were named: their code and
	// instructions differ from sample to sample where their lines do not.
	var interp interpStack
	if s.interp != nil {
		interp = s.interp.stack(d)
	}
	if len(interp.frames) > 0 {
		t := s.perTarget[d.target]
		key = append(key, 'i')
		if interp.truncated {
			key = append(key, 1)
		} else {
			key = append(key, 0)
		}
		for i, f := range interp.frames {
			index := uint32(t.frame(f))
			if interp.runEnds[i] {
				index |= 1 << 31
			}
			key = binary.NativeEndian.AppendUint32(key, index)
		}
	}
	s.key = key
	i, known := s.index[string(key)]
	if known && !s.stacks[i].byTop {
		return i, true
	}
	if known {
		key = binary.NativeEndian.AppendUint64(append(key, 't'), d.stackTop)
		s.key = key
		if j, ok := s.index[string(key)]; ok {
			return j, true
		}
	}
	if len(s.stacks) >= s.maxStacks || s.keyBytes+2*len(key) > maxStackKeyBytes {
		return 0, false
	}
	t := s.perTarget[d.target]
	s.pids[int(d.tgid)] = d.target
	frames, byTop := s.resolve(d, interp)
	if byTop && !known {
		// The first of its kind: a marker under the addresses' key, the
		// stack under the key with its top.
		s.add(key, resolvedStack{byTop: true})
		key = binary.NativeEndian.AppendUint64(append(key, 't'), d.stackTop)
		s.key = key
	}
	resolved := resolvedStack{frames: t.frameIndexes(nil, frames)}
	if unnamedJIT(frames) {
		resolved.unnamedJIT = &retrySample{d: d.clone(), interp: interp}
	}
	if len(d.kernel) > 0 {
		t.kernel = true
	}
	return s.add(key, resolved), true
}

// resolve resolves d's stacks to frames, innermost first, its
// interpreter frames put in (splice), and says whether the innermost user
// function had no frame (AppendUser's topUsed).
func (s *stackSamples) resolve(d *decodedSample, interp interpStack) ([]profile.Frame, bool) {
	// The kernel's innermost address is the interrupted instruction in
	// kernel mode; the user stack's is, in user mode; every other
	// address is a return address.
	frames := s.sym.AppendKernel(s.frames[:0], d.kernel, true)
	frames, byTop := s.sym.AppendUser(frames, int(d.tgid), d.user, !d.has(reqprofSampleFlagsSAMPLE_KERNEL_MODE), d.stackTop)
	s.frames = frames
	return splice(frames, len(d.kernel), interp), byTop
}

// retrySample is what a stack is resolved from again.
type retrySample struct {
	d      *decodedSample
	interp interpStack
}

// unnamedJIT says whether some of frames is JIT code without a name.
func unnamedJIT(frames []profile.Frame) bool {
	for _, f := range frames {
		if f.Module == profile.JITModule && f.Function == "" {
			return true
		}
	}
	return false
}

// clone is a copy of d that shares no memory with it.
func (d *decodedSample) clone() *decodedSample {
	c := *d
	c.kernel = slices.Clone(d.kernel)
	c.user = slices.Clone(d.user)
	c.interp = slices.Clone(d.interp)
	return &c
}

// nameJIT resolves again the stacks that had JIT code without a name,
// once the window closed: the perf map has the names of the code compiled
// since. What the samples counted under them is counted under the new
// frames.
func (s *stackSamples) nameJIT() {
	for i := range s.stacks {
		r := &s.stacks[i]
		if r.unnamedJIT == nil {
			continue
		}
		frames, _ := s.resolve(r.unnamedJIT.d, r.unnamedJIT.interp)
		r.frames = s.perTarget[r.unnamedJIT.d.target].frameIndexes(r.frames[:0], frames)
		r.unnamedJIT = nil
	}
}

// add keeps a resolved stack under key and says its index.
func (s *stackSamples) add(key []byte, r resolvedStack) int32 {
	i := int32(len(s.stacks))
	s.stacks = append(s.stacks, r)
	s.index[string(key)] = i
	s.keyBytes += len(key)
	return i
}

// frameIndexes appends to dst the indexes of frames in t's frames.
func (t *targetSamples) frameIndexes(dst []int32, frames []profile.Frame) []int32 {
	for _, f := range frames {
		dst = append(dst, t.frame(f))
	}
	return dst
}

func (t *targetSamples) frame(f profile.Frame) int32 {
	if i, ok := t.frameIndex[f]; ok {
		return i
	}
	i := int32(len(t.frames))
	t.frames = append(t.frames, f)
	t.frameIndex[f] = i
	return i
}

// finished gives the samples held for the request of conn that started
// at startNs to routes, the requests its record carried, dealt in turn.
// Samples of the same connection's earlier requests (whose records never
// came: dropped, or lost to a full ring buffer) ran for no request
// reported, unless withEarlier, when the record carries the cost of
// earlier bursts that completed no request, and their samples with it.
func (s *stackSamples) finished(conn, startNs uint64, routes []profile.RouteKey, withEarlier bool) {
	held, ok := s.held[conn]
	if !ok || len(routes) == 0 {
		return
	}
	later := held[:0]
	dealt := 0
	for _, h := range held {
		switch {
		case h.start > startNs:
			later = append(later, h)
			continue
		case h.start == startNs || withEarlier:
			route := routes[(s.deal+dealt)%len(routes)]
			dealt++
			s.count(h.target, route, h.stack, h.kernel)
		default:
			s.count(h.target, profile.RouteKey{Route: profile.UnfinishedRequest}, h.stack, h.kernel)
		}
		s.nHeld--
	}
	s.deal++
	if len(later) == 0 {
		delete(s.held, conn)
	} else {
		s.held[conn] = later
	}
}

// stacks are each target's samples once the window closed: what is still
// held ran for requests that did not finish in it.
func (s *stackSamples) result(stats []reqprofTargetStats) []*profile.Stacks {
	for _, held := range s.held {
		for _, h := range held {
			s.count(h.target, profile.RouteKey{Route: profile.UnfinishedRequest}, h.stack, h.kernel)
		}
	}
	s.held, s.nHeld = map[uint64][]heldSample{}, 0
	s.nameJIT()
	notes := map[uint32][]string{}
	for _, n := range s.sym.Notes() {
		if n.PID == 0 {
			for i, t := range s.perTarget {
				if t.kernel {
					notes[uint32(i)] = append(notes[uint32(i)], n.Text)
				}
			}
			continue
		}
		if target, ok := s.pids[n.PID]; ok {
			notes[target] = append(notes[target], n.Text)
		}
	}
	if s.interp != nil {
		for _, n := range s.interp.notes {
			if target, ok := s.pids[n.pid]; ok {
				notes[target] = append(notes[target], n.text)
			}
		}
	}
	out := make([]*profile.Stacks, len(s.perTarget))
	for i, t := range s.perTarget {
		st := &profile.Stacks{Hz: s.hz, PeriodNs: stackPeriodNs(s.hz), Frames: t.frames, Notes: notes[uint32(i)]}
		st.Samples = s.samplesOf(t)
		if i < len(stats) && stats[i].LostStackSamples > 0 {
			t.lost[lostSampleRingBuffer] += stats[i].LostStackSamples
		}
		if len(t.lost) > 0 {
			st.Lost = t.lost
		}
		out[i] = st
	}
	return out
}

// samplesOf merges a target's counts whose stacks resolved alike (the same
// binary in several processes), in an order that depends on nothing but
// the counts: most samples first, then by route, mode and frames.
func (s *stackSamples) samplesOf(t *targetSamples) []profile.StackSample {
	type mergeKey struct {
		route  profile.RouteKey
		kernel bool
		frames string
	}
	merged := map[mergeKey]int{}
	var out []profile.StackSample
	for key, n := range t.counts {
		frames := s.stacks[key.stack].frames
		mk := mergeKey{route: key.route, kernel: key.kernel, frames: framesKey(frames)}
		if i, ok := merged[mk]; ok {
			out[i].Count += n
			continue
		}
		merged[mk] = len(out)
		out = append(out, profile.StackSample{Route: key.route, Kernel: key.kernel, Frames: frames, Count: n})
	}
	slices.SortFunc(out, func(a, b profile.StackSample) int {
		return cmp.Or(
			cmp.Compare(b.Count, a.Count),
			cmp.Compare(a.Route.Route, b.Route.Route),
			cmp.Compare(a.Route.Port, b.Route.Port),
			cmpBool(a.Kernel, b.Kernel),
			slices.Compare(a.Frames, b.Frames),
		)
	})
	return out
}

func framesKey(frames []int32) string {
	b := make([]byte, 0, 4*len(frames))
	for _, f := range frames {
		b = binary.NativeEndian.AppendUint32(b, uint32(f))
	}
	return string(b)
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
