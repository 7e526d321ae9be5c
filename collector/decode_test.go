package collector

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// The hand-written decoder reads the layout bpf2go generated from the C
// struct; this keeps them from drifting apart.
func TestRecordSizeMatchesGeneratedStruct(t *testing.T) {
	if got := int(unsafe.Sizeof(reqprofRequestRecord{})); got != recordSize {
		t.Fatalf("struct request_record is %d bytes, decoder expects %d", got, recordSize)
	}
}

func TestDecodeRecord(t *testing.T) {
	want := reqprofRequestRecord{
		Conn: 0xc0ffee, StartNs: 1_000, EndNs: 51_000, UserNs: 30_000, KernelNs: 7_000,
		BytesIn: 78, BytesOut: 1_500, Tgid: 4242, Tid: 4243, Target: 1, Flags: 0,
	}
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, want); err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecord(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	r := got.request
	if got.target != 1 || got.tgid != 4242 || r.TID != 4243 || r.Conn != 0xc0ffee ||
		r.Start != 1*time.Microsecond || r.End != 51*time.Microsecond ||
		r.UserNs != 30_000 || r.KernelNs != 7_000 || r.BytesIn != 78 || r.BytesOut != 1_500 {
		t.Errorf("decoded %+v from %+v", got, want)
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	short := make([]byte, recordSize-1)
	if _, err := decodeRecord(short); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("short record: error %v", err)
	}
	backwards := make([]byte, recordSize)
	binary.LittleEndian.PutUint64(backwards[8:], 10) // start
	binary.LittleEndian.PutUint64(backwards[16:], 5) // end
	if _, err := decodeRecord(backwards); err == nil {
		t.Error("a record that ends before it starts was accepted")
	}
}

// Ring-buffer samples come from the kernel, but the decoder must hold up to
// any bytes: it never panics, and what it accepts it read from the bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(make([]byte, recordSize))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeRecord(b)
		if err != nil {
			return
		}
		if len(b) < recordSize || d.request.End < d.request.Start {
			t.Fatalf("accepted %d bytes as %+v", len(b), d)
		}
		if d.request.UserNs != binary.LittleEndian.Uint64(b[24:]) {
			t.Fatalf("user ns %d not read from offset 24", d.request.UserNs)
		}
	})
}
