package collector

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/reqprof/reqprof/profile"
)

// Fuzz targets for what the collector reads from /proc and /sys and from
// the settle iterators' output; the ring-buffer records' are in
// decode_test.go and stacks_test.go. `make fuzz` runs each.

// A /proc/PID/stat line holds the command name, which its process chose:
// any bytes in it must give the parent and the image or an error, never a
// panic, and the same either way.
func FuzzParseProcStat(f *testing.F) {
	fields := make([]string, 52)
	for i := range fields {
		fields[i] = strconv.Itoa(i + 1)
	}
	fields[2] = "S"
	f.Add("4242 (a (b) c) " + strings.Join(fields[2:], " ") + "\n")
	f.Add("1 (systemd) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 2 0 0")
	f.Add("7 ()) S 1")
	f.Fuzz(func(t *testing.T, stat string) {
		parent, ok := parentOf(stat)
		var img image
		err := parseImage(stat, &img)
		end := strings.LastIndexByte(stat, ')')
		if end < 0 {
			if ok || err == nil {
				t.Fatalf("%q, with no ')', gave parent %d (%v), image error %v", stat, parent, ok, err)
			}
			return
		}
		after := strings.Fields(stat[end+1:])
		if ok {
			if len(after) < 2 {
				t.Fatalf("parent %d read from %d fields", parent, len(after)+2)
			}
			if want, err := strconv.Atoi(after[1]); err != nil || parent != want {
				t.Fatalf("parent %d read from field %q", parent, after[1])
			}
		}
		if err == nil && len(after) < 46 {
			t.Fatalf("an image read from %d fields", len(after)+2)
		}
		again, againOK := parentOf(stat)
		if again != parent || againOK != ok {
			t.Fatal("parentOf read the same line two ways")
		}
	})
}

// /proc/net/unix lists every socket of the namespace, bound to paths
// other users chose.
func FuzzParseListeningUnix(f *testing.F) {
	f.Add("Num       RefCount Protocol Flags    Type St Inode Path\n"+
		"0000000000000000: 00000002 00000000 00010000 0001 01 1001 /run/app.sock\n"+
		"0000000000000000: 00000002 00000000 00010000 0001 01 1002 @abstract name\n", uint64(1002))
	f.Add("h\n0: 2 0 00010000 0001 01 x /p\n", uint64(0))
	f.Fuzz(func(t *testing.T, table string, inode uint64) {
		paths, err := parseListeningUnix(strings.NewReader(table), map[uint64]bool{inode: true})
		if err != nil {
			return
		}
		for _, p := range paths {
			if p == "" || !strings.Contains(table, strconv.FormatUint(inode, 10)) {
				t.Fatalf("path %q kept for inode %d of %q", p, inode, table)
			}
		}
	})
}

// fdinfo files are the kernel's, read for every descriptor of a process.
func FuzzParseFdinfoIDs(f *testing.F) {
	f.Add("pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t1057\nlink_type:\ttracing\nlink_id:\t12\nprog_tag:\t1234\nprog_id:\t77\n")
	f.Add("map_id:\t4294967296\n")
	f.Fuzz(func(t *testing.T, text string) {
		keys := map[string]map[uint32]bool{"prog_id": {}, "link_id": {}, "map_id": {}}
		if err := parseFdinfoIDs(strings.NewReader(text), keys); err != nil {
			return
		}
		for key, ids := range keys {
			for id := range ids {
				if !strings.Contains(text, key+":") || !strings.Contains(text, strconv.FormatUint(uint64(id), 10)) {
					t.Fatalf("%s %d found in %q", key, id, text)
				}
			}
		}
	})
}

// The CPU list is the kernel's (/sys/devices/system/cpu/online); a list
// must never make the sampler open an event per made-up CPU.
func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0", "0-3", "0,2-3,7", "0-1\n", "3-1", "0-99999999", ",", "0-65536"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		cpus, err := parseCPUList(list)
		if err != nil {
			return
		}
		if len(cpus) == 0 || len(cpus) > maxCPUs {
			t.Fatalf("%q read as %d CPUs", list, len(cpus))
		}
		for _, cpu := range cpus {
			if cpu < 0 || cpu >= maxCPUs {
				t.Fatalf("%q read as CPU %d", list, cpu)
			}
		}
	})
}

// settle_threads' output is read back whole: any length and bytes decode
// or fail, and what decodes was read from the bytes.
func FuzzDecodeThreads(f *testing.F) {
	var state reqprofThreadState
	state.Serving.Conn = 42
	entry := binary.NativeEndian.AppendUint64(nil, 3<<32|7)
	entry, err := binary.Append(entry, binary.NativeEndian, &state)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(append(entry, entry...))
	f.Add(entry[:len(entry)-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		threads, err := decodeThreads(b)
		if err != nil {
			return
		}
		size := len(entry)
		if len(threads)*size != len(b) {
			t.Fatalf("%d threads from %d bytes", len(threads), len(b))
		}
		for i, th := range threads {
			ids := binary.NativeEndian.Uint64(b[i*size:])
			if th.tid != uint32(ids) || th.tgid != uint32(ids>>32) {
				t.Fatalf("thread %d is %d of %d, its bytes say %x", i, th.tid, th.tgid, ids)
			}
		}
	})
}

// ringRecords joins ring-buffer records as FuzzConsume reads them: each
// after its length, two bytes little-endian.
func ringRecords(records ...[]byte) []byte {
	var b []byte
	for _, r := range records {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(r)))
		b = append(b, r...)
	}
	return b
}

// The consumer takes any sequence of ring-buffer records, of any kind, in
// any order: requests, chunks of their bytes, closed connections. It
// never panics, names every request it finishes, and shares out no more
// CPU than the records it accepted carried.
func FuzzConsume(f *testing.F) {
	get := "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
	rec := func(conn uint64, start uint64, payload string, flags reqprofRecordFlags) []byte {
		r := reqprofRequestRecord{Conn: conn, StartNs: start, FirstWriteNs: start + 10, EndNs: start + 20,
			LocalPort: 8080, PayloadLen: uint16(len(payload)), Flags: uint32(flags)}
		r.Cost.UserNs = 1000
		copy(r.Payload[:], payload)
		return recordBytes(f, r)
	}
	f.Add(ringRecords(rec(1, 100, get+get, 0), rec(1, 200, get[:10], 0), rec(1, 300, get[10:]+get, 0)))
	f.Add(ringRecords(
		chunkRecordBytes(f, reqprofRecordKindRECORD_CHUNK, 0, 7, uint64(len(get)), get),
		rec(7, 100, get, reqprofRecordFlagsREQ_CHUNKED),
		chunkRecordBytes(f, reqprofRecordKindRECORD_CLOSED, 0, 7, 0, ""),
		rec(8, 100, "*1\r\n$4\r\nPING\r\n", 0)))
	f.Add(ringRecords(rec(2, 100, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0), rec(2, 200, "\x16\x03\x01", 0), []byte{1, 0, 0}))
	fcgi := fcgiRequest(1, "REQUEST_METHOD", "GET", "REQUEST_URI", "/a/1")
	f.Add(ringRecords(rec(10, 100, fcgi, 0), rec(11, 100, fcgi[:30], 0), rec(12, 100, fcgiRecord(5, 1, "")+fcgi, 0)))
	// A stdio burst of two calls: a read mark between them, the second
	// answered first, then the burst's record.
	stdio := func(kind reqprofRecordKind, off uint64, userNs uint64, payload string) []byte {
		r := reqprofRequestRecord{Kind: uint32(kind), Conn: 9, StartNs: 100, EndNs: 150, StreamOff: off,
			Flags: uint32(reqprofRecordFlagsREQ_STDIO), PayloadLen: uint16(len(payload))}
		r.Cost.UserNs = userNs
		copy(r.Payload[:], payload)
		return recordBytes(f, r)
	}
	slowCall := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}` + "\n"
	lightCall := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"light"}}` + "\n"
	f.Add(ringRecords(
		stdio(reqprofRecordKindRECORD_READ_MARK, uint64(len(slowCall)), 40, ""),
		stdio(reqprofRecordKindRECORD_RESPONSE, 0, 140, `{"jsonrpc":"2.0","id":2,"result":{}}`+"\n"),
		stdio(reqprofRecordKindRECORD_RESPONSE, 40, 600, `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n"),
		stdio(reqprofRecordKindRECORD_REQUEST, 0, 650, slowCall+lightCall)))
	f.Fuzz(func(t *testing.T, data []byte) {
		res := newConsumeResult(2)
		var finished uint64
		res.onRequest = func(target int, r profile.Request) {
			if r.Route == "" || !utf8.ValidString(r.Route) || r.End < r.Start {
				t.Fatalf("finished %+v", r)
			}
			finished += r.UserNs
		}
		var accepted uint64
		overflow := false
		for len(data) >= 2 {
			n := min(int(binary.LittleEndian.Uint16(data)), len(data)-2)
			b := data[2 : 2+n]
			data = data[2+n:]
			if d, err := decodeRecord(b); err == nil {
				var carry uint64
				accepted, carry = bits.Add64(accepted, d.request.UserNs, 0)
				overflow = overflow || carry != 0
			}
			res.decode(b)
		}
		if !overflow && finished > accepted {
			t.Fatalf("finished requests were charged %d ns of user CPU, the records carried %d", finished, accepted)
		}
	})
}
