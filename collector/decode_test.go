package collector

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/reqprof/reqprof/profile"
)

// recordBytes is r as the ring buffer sends it; of kind request unless r
// says otherwise.
func recordBytes(t testing.TB, r reqprofRequestRecord) []byte {
	t.Helper()
	if r.Kind == 0 {
		r.Kind = uint32(reqprofRecordKindRECORD_REQUEST)
	}
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, r); err != nil {
		t.Fatal(err)
	}
	// The ring buffer sends the header and payload_len bytes, no more.
	return buf.Bytes()[:recordHeaderSize+int(r.PayloadLen)]
}

func TestDecodeRecord(t *testing.T) {
	in := reqprofRequestRecord{
		Conn: 0xc0ffee, StartNs: 1_000, FirstWriteNs: 41_000, EndNs: 51_000,
		BytesIn: 78, BytesOut: 1_500, Tgid: 4242, Tid: 4243, Target: 1, LocalPort: 8080, PayloadLen: 5,
	}
	in.Cost.UserNs = 30_000
	in.Cost.SyscallNs = 7_000
	in.Cost.SoftirqNs[3] = 2_000 // NET_RX
	in.Cost.IrqNs = 500
	in.Cost.RunqueueNs = 9_000
	in.Cost.Syscalls[0] = reqprofSyscallSlot{Nr: 1 + 1, Calls: 2, Ns: 7_000} // write
	in.Tail.CpuNs = 4_000
	copy(in.Payload[:], "GET /")

	got, err := decodeRecord(recordBytes(t, in))
	if err != nil {
		t.Fatal(err)
	}
	r := got.request
	if got.target != 1 || got.tgid != 4242 || got.localPort != 8080 || string(got.payload) != "GET /" ||
		r.TID != 4243 || r.Conn != 0xc0ffee || r.Start != time.Microsecond || r.FirstWrite != 41*time.Microsecond ||
		r.End != 51*time.Microsecond || r.UserNs != 30_000 || r.SyscallNs != 7_000 || r.SoftirqNs != 2_000 ||
		r.IrqNs != 500 || r.KernelNs != 9_500 || r.RunqueueNs != 9_000 || r.BytesIn != 78 || r.BytesOut != 1_500 ||
		r.TailNs != 4_000 {
		t.Errorf("decoded %+v from %+v", got, in)
	}
	if r.CPUNs() != 39_500 || r.LatencyNs() != 50_000 || r.FirstByteNs() != 40_000 {
		t.Errorf("cpu %d latency %d first byte %d", r.CPUNs(), r.LatencyNs(), r.FirstByteNs())
	}
}

func TestBreakdownNamesCauses(t *testing.T) {
	var c reqprofCost
	c.Syscalls[0] = reqprofSyscallSlot{Nr: 1 + 1, Calls: 2, Ns: 7_000}   // write
	c.Syscalls[1] = reqprofSyscallSlot{Nr: 232 + 1, Calls: 1, Ns: 3_000} // epoll_wait
	c.SoftirqNs[3] = 2_000
	c.IrqNs = 500
	c.Syscalls[2] = reqprofSyscallSlot{Nr: unknownSyscall + 1, Calls: 1, Ns: 100}
	c.Syscalls[3] = reqprofSyscallSlot{Nr: 5000 + 1, Calls: 1, Ns: 10}
	var tally kernelTally
	tally.add(&c, taken{})
	tally.add(&c, taken{})
	into := map[string]profile.KernelCost{}
	for cause, k := range tally.breakdown() {
		if profile.ParseCause(cause.String()) != cause {
			t.Errorf("%#v reads back from its name %q as %#v", cause, cause, profile.ParseCause(cause.String()))
		}
		into[cause.String()] = k
	}
	want := map[string]profile.KernelCost{
		"syscall:write":                   {Ns: 14_000, Calls: 4},
		"syscall:epoll_wait":              {Ns: 6_000, Calls: 2},
		"syscall:(entered before attach)": {Ns: 200, Calls: 2},
		"syscall:nr5000":                  {Ns: 20, Calls: 2},
		"softirq:NET_RX":                  {Ns: 4_000},
		"irq":                             {Ns: 1_000},
	}
	if len(into) != len(want) {
		t.Fatalf("breakdown %v, want %v", into, want)
	}
	for cause, k := range want {
		if into[cause] != k {
			t.Errorf("%s: %+v, want %+v", cause, into[cause], k)
		}
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	if _, err := decodeRecord(make([]byte, recordHeaderSize-1)); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("short record: error %v", err)
	}
	backwards := reqprofRequestRecord{StartNs: 10, EndNs: 5}
	if _, err := decodeRecord(recordBytes(t, backwards)); err == nil {
		t.Error("a record that ends before it starts was accepted")
	}
	overclaim := recordBytes(t, reqprofRequestRecord{PayloadLen: 4})
	if _, err := decodeRecord(overclaim[:len(overclaim)-1]); err == nil {
		t.Error("a record claiming more payload than it carries was accepted")
	}
	chunk := recordBytes(t, reqprofRequestRecord{Kind: uint32(reqprofRecordKindRECORD_CHUNK)})
	if _, err := decodeRecord(chunk); err == nil {
		t.Error("a chunk record was accepted as a request record")
	}
}

// chunkRecordBytes is a chunk record as the ring buffer sends it.
func chunkRecordBytes(t testing.TB, kind reqprofRecordKind, target uint32, conn, offset uint64, data string) []byte {
	t.Helper()
	k := reqprofChunkRecord{Kind: uint32(kind), Target: target, Conn: conn, Offset: offset, Len: uint32(len(data))}
	copy(k.Data[:], data)
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, k); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()[:chunkHeaderSize+len(data)]
}

func TestDecodeChunk(t *testing.T) {
	got, err := decodeChunk(chunkRecordBytes(t, reqprofRecordKindRECORD_CHUNK, 1, 77, 4096, "GET /b"))
	if err != nil {
		t.Fatal(err)
	}
	if got.target != 1 || got.conn != 77 || got.offset != 4096 || string(got.data) != "GET /b" || got.closed {
		t.Errorf("decoded %+v", got)
	}
	closed, err := decodeChunk(chunkRecordBytes(t, reqprofRecordKindRECORD_CLOSED, 0, 77, 0, ""))
	if err != nil || !closed.closed || closed.conn != 77 {
		t.Errorf("closed record decoded as %+v, %v", closed, err)
	}
	over := chunkRecordBytes(t, reqprofRecordKindRECORD_CHUNK, 0, 1, 0, "abcd")
	if _, err := decodeChunk(over[:len(over)-1]); err == nil {
		t.Error("a chunk claiming more bytes than it carries was accepted")
	}
	if _, err := decodeChunk(over[:chunkHeaderSize-1]); err == nil {
		t.Error("a chunk shorter than its header was accepted")
	}
}

// Chunks come from the kernel too: the decoder never panics and never
// reads past what it was given.
func FuzzDecodeChunk(f *testing.F) {
	f.Add(chunkRecordBytes(f, reqprofRecordKindRECORD_CHUNK, 0, 1, 2, "abc"))
	f.Add([]byte{2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeChunk(b)
		if err != nil {
			return
		}
		if len(b) < chunkHeaderSize || chunkHeaderSize+len(d.data) > len(b) {
			t.Fatalf("accepted %d bytes as %+v", len(b), d)
		}
	})
}

// Ring-buffer samples come from the kernel, but the decoder must hold up to
// any bytes: it never panics, and what it accepts it read from the bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(recordBytes(f, reqprofRequestRecord{PayloadLen: 3}))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeRecord(b)
		if err != nil {
			return
		}
		if len(b) < recordHeaderSize || d.request.End < d.request.Start || recordHeaderSize+len(d.payload) > len(b) {
			t.Fatalf("accepted %d bytes as %+v", len(b), d)
		}
		userAt := unsafe.Offsetof(reqprofRequestRecord{}.Cost) + unsafe.Offsetof(reqprofCost{}.UserNs)
		if d.request.UserNs != binary.LittleEndian.Uint64(b[userAt:]) {
			t.Fatalf("user ns %d not read from offset %d", d.request.UserNs, userAt)
		}
	})
}

func TestDecodeThreads(t *testing.T) {
	var want reqprofThreadState
	want.Serving.Conn = 42
	want.Serving.UnattributedNs = 1234
	want.Serving.Pending.UserNs = 99
	want.Serving.Dirty = 1
	want.Clock.DebtNs = 5
	entry := binary.NativeEndian.AppendUint64(nil, 3<<32|7) // tid 7 of process 3
	entry, err := binary.Append(entry, binary.NativeEndian, &want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeThreads(append(slices.Clone(entry), entry...))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].tid != 7 || got[1].tgid != 3 || got[1].state != want {
		t.Fatalf("decoded %+v, want two of tid 7 of process 3 with %+v", got, want)
	}
	if _, err := decodeThreads(entry[:len(entry)-1]); err == nil {
		t.Fatal("a truncated entry decoded without an error")
	}
}
