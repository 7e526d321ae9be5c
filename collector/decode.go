package collector

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/reqprof/reqprof/report"
)

// recordSize is the size of struct request_record; a test keeps it equal to
// the generated reqprofRequestRecord so the two cannot drift apart.
const recordSize = 72

// recordStartUnseen mirrors REQ_START_UNSEEN in bpf/reqprof.bpf.c.
const recordStartUnseen = 1

// decodedRecord is a request record at the BPF boundary, already in domain
// types; target is the index the collector gave the process.
type decodedRecord struct {
	target  uint32
	tgid    uint32
	flags   uint32
	request report.Request
}

// decodeRecord parses one ring-buffer sample. The layout is fixed by
// struct request_record; anything shorter is rejected rather than read past.
func decodeRecord(b []byte) (decodedRecord, error) {
	if len(b) < recordSize {
		return decodedRecord{}, fmt.Errorf("request record of %d bytes, want %d", len(b), recordSize)
	}
	le := binary.LittleEndian
	start, end := le.Uint64(b[8:]), le.Uint64(b[16:])
	if start > math.MaxInt64 || end > math.MaxInt64 {
		return decodedRecord{}, fmt.Errorf("request record times %d..%d are no monotonic clock readings", start, end)
	}
	if end < start {
		return decodedRecord{}, fmt.Errorf("request record ends (%d) before it starts (%d)", end, start)
	}
	return decodedRecord{
		tgid:   le.Uint32(b[56:]),
		target: le.Uint32(b[64:]),
		flags:  le.Uint32(b[68:]),
		request: report.Request{
			Conn:     le.Uint64(b[0:]),
			Start:    time.Duration(start),
			End:      time.Duration(end),
			UserNs:   le.Uint64(b[24:]),
			KernelNs: le.Uint64(b[32:]),
			BytesIn:  le.Uint64(b[40:]),
			BytesOut: le.Uint64(b[48:]),
			TID:      le.Uint32(b[60:]),
		},
	}, nil
}
