package collector

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/reqprof/reqprof/profile"
)

// recordHeaderSize is struct request_record up to its payload: every record
// has it, followed by payload_len captured bytes.
const recordHeaderSize = int(unsafe.Offsetof(reqprofRequestRecord{}.Payload))

// softirqNames are the kernel's softirq vectors, in order: NR_SOFTIRQS of
// them, which the array's length checks at compile time.
var softirqNames = [reqprofLimitsNR_SOFTIRQS]string{"HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"}

// decodedRecord is a request record at the BPF boundary, already in domain
// types; target is the index the collector gave the process.
type decodedRecord struct {
	target    uint32
	tgid      uint32
	flags     uint32
	localPort uint16
	streamOff uint64 // bytes read from the connection before its first
	payload   []byte // aliases the sample: valid until the next read
	request   profile.Request
	kernel    *reqprofCost // aliases the sample, for the per-cause breakdown
	// tail is what of kernel was the request's tail; aliases the sample.
	tail *reqprofTailCost
	// peer is whom a client's call (REQ_CLIENT) called; aliases the sample.
	peer *reqprofBackendPeer
}

// chunkHeaderSize is struct chunk_record up to its data.
const chunkHeaderSize = int(unsafe.Offsetof(reqprofChunkRecord{}.Data))

// decodedChunk is a chunk record: bytes read from a connection beyond its
// request's payload, or (closed) word that a streamed connection closed.
type decodedChunk struct {
	target uint32
	conn   uint64
	offset uint64
	data   []byte // aliases the sample: valid until the next read
	closed bool
}

// recordKind is the kind every ring-buffer record starts with.
func recordKind(b []byte) (uint32, error) {
	if len(b) < 4 {
		return 0, fmt.Errorf("ring-buffer record of %d bytes", len(b))
	}
	return binary.NativeEndian.Uint32(b), nil
}

// decodeChunk parses a chunk record, rejecting one that claims more data
// than it carries.
func decodeChunk(b []byte) (decodedChunk, error) {
	if len(b) < chunkHeaderSize {
		return decodedChunk{}, fmt.Errorf("chunk record of %d bytes, want at least %d", len(b), chunkHeaderSize)
	}
	var k reqprofChunkRecord
	u32 := func(field uintptr) uint32 { return binary.NativeEndian.Uint32(b[field:]) }
	u64 := func(field uintptr) uint64 { return binary.NativeEndian.Uint64(b[field:]) }
	length := u32(unsafe.Offsetof(k.Len))
	if int(length) > len(b)-chunkHeaderSize || int(length) > len(k.Data) {
		return decodedChunk{}, fmt.Errorf("chunk record claims %d bytes, carries %d", length, len(b)-chunkHeaderSize)
	}
	return decodedChunk{
		target: u32(unsafe.Offsetof(k.Target)),
		conn:   u64(unsafe.Offsetof(k.Conn)),
		offset: u64(unsafe.Offsetof(k.Offset)),
		data:   b[chunkHeaderSize : chunkHeaderSize+int(length)],
		closed: u32(unsafe.Offsetof(k.Kind)) == uint32(reqprofRecordKindRECORD_CLOSED),
	}, nil
}

// decodeRecord parses one ring-buffer sample. The sample is viewed in place
// as the generated struct, so decoding allocates nothing; anything shorter
// than the header, or claiming more payload than it carries, is rejected
// rather than read past.
func decodeRecord(b []byte) (decodedRecord, error) {
	return decodeRecordOf(b, uint32(reqprofRecordKindRECORD_REQUEST))
}

// decodeRecordOf parses a sample laid out as a request record, of kind
// (RECORD_REQUEST or RECORD_RESPONSE).
func decodeRecordOf(b []byte, kind uint32) (decodedRecord, error) {
	if len(b) < recordHeaderSize {
		return decodedRecord{}, fmt.Errorf("request record of %d bytes, want at least %d", len(b), recordHeaderSize)
	}
	if uintptr(unsafe.Pointer(&b[0]))%unsafe.Alignof(reqprofRequestRecord{}) != 0 {
		// Ring-buffer samples are 8-byte aligned; a copy keeps any other
		// caller (tests, fuzzing) safe.
		b = append(make([]byte, 0, len(b)+8), b...)
	}
	// The view covers only the header: the payload is taken from b.
	r := (*reqprofRequestRecord)(unsafe.Pointer(&b[0]))
	if r.Kind != kind {
		return decodedRecord{}, fmt.Errorf("record of kind %d, want %d", r.Kind, kind)
	}
	if r.StartNs > math.MaxInt64 || r.EndNs > math.MaxInt64 || r.FirstWriteNs > math.MaxInt64 {
		return decodedRecord{}, fmt.Errorf("request record times %d..%d are no monotonic clock readings", r.StartNs, r.EndNs)
	}
	if r.EndNs < r.StartNs {
		return decodedRecord{}, fmt.Errorf("request record ends (%d) before it starts (%d)", r.EndNs, r.StartNs)
	}
	end := recordHeaderSize + int(r.PayloadLen)
	if end > len(b) || int(r.PayloadLen) > len(r.Payload) {
		return decodedRecord{}, fmt.Errorf("request record claims %d payload bytes, carries %d", r.PayloadLen, len(b)-recordHeaderSize)
	}
	return decodedOf(r, b[recordHeaderSize:end]), nil
}

// decodedOf is a record already checked, in domain types, with its payload.
func decodedOf(r *reqprofRequestRecord, payload []byte) decodedRecord {
	return decodedRecord{
		tgid:      r.Tgid,
		target:    r.Target,
		flags:     r.Flags,
		localPort: r.LocalPort,
		streamOff: r.StreamOff,
		payload:   payload,
		kernel:    &r.Cost,
		tail:      &r.Tail,
		peer:      &r.Peer,
		request:   requestOf(r),
	}
}

// requestOf is the domain view of a request record, its name aside.
func requestOf(r *reqprofRequestRecord) profile.Request {
	c := &r.Cost
	var softirq uint64
	for _, ns := range c.SoftirqNs {
		softirq += ns
	}
	return profile.Request{
		TID:                 r.Tid,
		Conn:                r.Conn,
		Port:                r.LocalPort,
		Start:               time.Duration(r.StartNs),
		FirstWrite:          time.Duration(r.FirstWriteNs),
		End:                 time.Duration(r.EndNs),
		Interleaved:         r.Flags&uint32(reqprofRecordFlagsREQ_INTERLEAVED) != 0,
		UserNs:              c.UserNs,
		KernelNs:            c.SyscallNs + softirq + c.IrqNs,
		SyscallNs:           c.SyscallNs,
		SoftirqNs:           softirq,
		IrqNs:               c.IrqNs,
		RunqueueNs:          c.RunqueueNs,
		OffCPUNs:            c.OffcpuNs,
		PageFaults:          c.PageFaults,
		VoluntarySwitches:   c.VoluntarySwitches,
		InvoluntarySwitches: c.InvoluntarySwitches,
		BytesIn:             r.BytesIn,
		BytesOut:            r.BytesOut,
		SetupNs:             r.SetupNs,
		// Part of the CPU above, within it even from a malformed record.
		TailNs: min(r.Tail.CpuNs, c.UserNs+c.SyscallNs+softirq+c.IrqNs),
	}
}

// cpuNs is a cost's on-CPU time.
func cpuNs(c *reqprofCost) uint64 {
	ns := c.UserNs + c.SyscallNs + c.IrqNs
	for _, s := range c.SoftirqNs {
		ns += s
	}
	return ns
}

// unknownSyscall is the number the BPF side gives a syscall entered before
// the window opened.
const unknownSyscall = uint32(reqprofLimitsSYSCALL_UNKNOWN)

// Causes are built once: decoding a record must not allocate.
var (
	syscallCauses = func() map[uint32]profile.Cause {
		causes := map[uint32]profile.Cause{unknownSyscall: {Kind: profile.CauseSyscall, Name: "(entered before attach)"}}
		for nr, name := range syscallNames {
			causes[nr] = profile.Cause{Kind: profile.CauseSyscall, Name: name}
		}
		return causes
	}()
	softirqCauses = func() (causes [len(softirqNames)]profile.Cause) {
		for vec, name := range softirqNames {
			causes[vec] = profile.Cause{Kind: profile.CauseSoftirq, Name: name}
		}
		return causes
	}()
	// otherSyscallsCause is the syscalls a record had no slot for.
	otherSyscallsCause = profile.Cause{Kind: profile.CauseSyscall, Name: "other"}
	irqCause           = profile.Cause{Kind: profile.CauseIRQ}
)

func syscallCause(nr uint32) profile.Cause {
	if cause, ok := syscallCauses[nr]; ok {
		return cause
	}
	return profile.Cause{Kind: profile.CauseSyscall, Name: fmt.Sprintf("nr%d", nr)}
}

// kernelTally sums requests' kernel time by cause, record by record, in
// arrays indexed by syscall number and softirq vector: a map keyed by the
// cause's name cost a string hash per cause of every record, a tenth of the
// collector's CPU per request at 100,000 requests a second.
type kernelTally struct {
	syscalls   [maxTalliedSyscall + 1]profile.KernelCost
	unknown    profile.KernelCost // entered before the window
	other      profile.KernelCost // past the record's slots
	outOfRange map[uint32]profile.KernelCost
	softirqs   [len(softirqNames)]uint64
	irqNs      uint64
	// What reqprof's own cost took out of the requests' syscall and
	// interrupt time (selfCost.net), taken off the rows at the end.
	taken taken
}

// maxTalliedSyscall bounds the array; x86-64's numbers end near 470.
const maxTalliedSyscall = 1023

// add adds one request's kernel time by cause, and what its own cost
// took out of it.
func (k *kernelTally) add(c *reqprofCost, t taken) {
	k.taken.syscallNs += t.syscallNs
	k.taken.interruptNs += t.interruptNs
	for _, slot := range c.Syscalls {
		if slot.Nr == 0 {
			continue
		}
		switch nr := slot.Nr - 1; {
		case nr <= maxTalliedSyscall:
			addCost(&k.syscalls[nr], slot.Ns, uint64(slot.Calls))
		case nr == unknownSyscall:
			addCost(&k.unknown, slot.Ns, uint64(slot.Calls))
		default:
			// A number no kernel gives: kept apart rather than dropped.
			if k.outOfRange == nil {
				k.outOfRange = map[uint32]profile.KernelCost{}
			}
			cost := k.outOfRange[nr]
			addCost(&cost, slot.Ns, uint64(slot.Calls))
			k.outOfRange[nr] = cost
		}
	}
	addCost(&k.other, c.OtherSyscallNs, uint64(c.OtherSyscallCalls))
	for vec, ns := range c.SoftirqNs {
		k.softirqs[vec] += ns
	}
	k.irqNs += c.IrqNs
}

// takeOwnCost takes what was taken out of the requests off the rows, once.
func (k *kernelTally) takeOwnCost() {
	var syscalls []*uint64
	for i := range k.syscalls {
		if k.syscalls[i].Ns > 0 {
			syscalls = append(syscalls, &k.syscalls[i].Ns)
		}
	}
	syscalls = append(syscalls, &k.unknown.Ns, &k.other.Ns)
	outOfRange := map[uint32]*uint64{}
	for nr, cost := range k.outOfRange {
		ns := cost.Ns
		outOfRange[nr] = &ns
		syscalls = append(syscalls, &ns)
	}
	scaleDown(syscalls, k.taken.syscallNs)
	for nr, ns := range outOfRange {
		cost := k.outOfRange[nr]
		cost.Ns = *ns
		k.outOfRange[nr] = cost
	}
	interrupts := []*uint64{&k.irqNs}
	for i := range k.softirqs {
		interrupts = append(interrupts, &k.softirqs[i])
	}
	scaleDown(interrupts, k.taken.interruptNs)
	k.taken = taken{}
}

func addCost(into *profile.KernelCost, ns, calls uint64) {
	into.Ns += ns
	into.Calls += calls
}

// breakdown names each cause with time or calls, net of what reqprof's
// own cost took out of the requests: off the syscall rows, and off the
// interrupt rows, in proportion to each.
func (k *kernelTally) breakdown() map[profile.Cause]profile.KernelCost {
	k.takeOwnCost()
	into := map[profile.Cause]profile.KernelCost{}
	for nr, cost := range k.syscalls {
		addCause(into, syscallCause(uint32(nr)), cost)
	}
	addCause(into, syscallCause(unknownSyscall), k.unknown)
	for nr, cost := range k.outOfRange {
		addCause(into, syscallCause(nr), cost)
	}
	addCause(into, otherSyscallsCause, k.other)
	for vec, ns := range k.softirqs {
		addCause(into, softirqCauses[vec], profile.KernelCost{Ns: ns})
	}
	addCause(into, irqCause, profile.KernelCost{Ns: k.irqNs})
	return into
}

func addCause(into map[profile.Cause]profile.KernelCost, cause profile.Cause, cost profile.KernelCost) {
	if cost.Ns == 0 && cost.Calls == 0 {
		return
	}
	sum := into[cause]
	sum.Ns += cost.Ns
	sum.Calls += cost.Calls
	into[cause] = sum
}
