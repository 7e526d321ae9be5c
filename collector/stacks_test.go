package collector

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/reqprof/reqprof/collector/symbols"
	"github.com/reqprof/reqprof/profile"
)

// sampleBytes is a stack sample as the ring buffer sends it.
func sampleBytes(t testing.TB, s reqprofStackSample) []byte {
	t.Helper()
	s.Kind = uint32(reqprofRecordKindRECORD_STACK)
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, s); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()[:sampleHeaderSize+8*int(s.KernelFrames+s.UserFrames+2*s.InterpFrames)]
}

// userSample is a user-mode sample of process 4242 in target 0, running
// for the request of conn that started at start (none when conn is 0), at
// the user addresses ips.
func userSample(t testing.TB, conn, start uint64, ips ...uint64) []byte {
	s := reqprofStackSample{Tgid: 4242, Tid: 4243, Conn: conn, StartNs: start, UserFrames: uint16(len(ips))}
	if conn != 0 {
		s.Flags = uint32(reqprofSampleFlagsSAMPLE_IN_REQUEST)
	}
	copy(s.Ips[:], ips)
	return sampleBytes(t, s)
}

func TestDecodeStackSample(t *testing.T) {
	in := reqprofStackSample{Target: 1, Tgid: 10, Tid: 11, Conn: 12, StartNs: 13, KernelFrames: 2, UserFrames: 1,
		Flags: uint32(reqprofSampleFlagsSAMPLE_KERNEL_MODE | reqprofSampleFlagsSAMPLE_IN_REQUEST)}
	in.Ips[0], in.Ips[1], in.Ips[2] = 0xffffffff81000010, 0xffffffff81000020, 0x401000
	d, err := decodeStackSample(sampleBytes(t, in))
	if err != nil {
		t.Fatal(err)
	}
	if d.target != 1 || d.tgid != 10 || d.tid != 11 || d.conn != 12 || d.startNs != 13 ||
		!slices.Equal(d.kernel, []uint64{0xffffffff81000010, 0xffffffff81000020}) || !slices.Equal(d.user, []uint64{0x401000}) ||
		!d.has(reqprofSampleFlagsSAMPLE_KERNEL_MODE) {
		t.Errorf("decoded %+v", d)
	}
	withInterp := in
	withInterp.InterpFrames, withInterp.InterpEntries = 1, 1
	withInterp.Ips[3], withInterp.Ips[4] = 0x7f0000001000, 0x7f0000001010
	d, err = decodeStackSample(sampleBytes(t, withInterp))
	if err != nil || !slices.Equal(d.user, []uint64{0x401000}) || !slices.Equal(d.interp, []uint64{0x7f0000001000, 0x7f0000001010}) || d.interpEntries != 1 {
		t.Errorf("with an interpreter frame: decoded %+v (%v)", d, err)
	}
	b := sampleBytes(t, withInterp)
	if _, err := decodeStackSample(b[:len(b)-1]); err == nil {
		t.Error("a sample claiming more interpreter frames than it carries was decoded")
	}
	b = sampleBytes(t, in)
	if _, err := decodeStackSample(b[:len(b)-1]); err == nil {
		t.Error("a sample claiming more frames than it carries was decoded")
	}
	if _, err := decodeStackSample(b[:sampleHeaderSize-1]); err == nil {
		t.Error("a short sample was decoded")
	}
}

// Samples come from the kernel too: the decoder never panics, and never
// gives more frames than the record holds or the BPF side sends.
func FuzzDecodeStackSample(f *testing.F) {
	f.Add(userSample(f, 1, 2, 0x401000, 0x402000))
	f.Add(interpSample(f, []uint64{0x401000}, 1, 0x7f0000001000, 0x7f0000001010))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeStackSample(b)
		if err != nil {
			return
		}
		if n := len(d.kernel) + len(d.user) + len(d.interp); sampleHeaderSize+8*n > len(b) || len(d.kernel) > int(reqprofLimitsSTACK_DEPTH) ||
			len(d.interp)%2 != 0 || len(d.interp) > 2*int(reqprofLimitsMAX_INTERP_FRAMES) {
			t.Fatalf("%d words of frames from %d bytes (%d of interpreter frames)", n, len(b), len(d.interp))
		}
	})
}

// newTestResult is a consume result of one target sampling stacks,
// resolving nothing of the system it runs on.
func newTestResult(t *testing.T) *consumeResult {
	dir := t.TempDir()
	res := newConsumeResult(1)
	res.stacks = newStackSamples(1, 999, symbols.New(symbols.Options{Proc: dir, Kallsyms: filepath.Join(dir, "kallsyms")}))
	return &res
}

// request is a finished request record of conn, started at start, whose
// captured bytes name it (pipelined requests give several).
func request(t *testing.T, conn, start uint64, payload string) []byte {
	return requestAt(t, conn, start, 0, payload)
}

// requestAt is request, its bytes at offset streamOff of the connection.
func requestAt(t *testing.T, conn, start, streamOff uint64, payload string) []byte {
	r := reqprofRequestRecord{Conn: conn, StartNs: start, EndNs: start + 10, LocalPort: 8080, PayloadLen: uint16(len(payload)), StreamOff: streamOff}
	r.Cost.UserNs = 1000
	copy(r.Payload[:], payload)
	return recordBytes(t, r)
}

// counts are a target's samples by route, whatever their stacks.
func counts(st *profile.Stacks) map[string]uint64 {
	byRoute := map[string]uint64{}
	for _, s := range st.Samples {
		byRoute[s.Route.Route] += s.Count
	}
	return byRoute
}

func TestSamplesJoinTheirRequests(t *testing.T) {
	res := newTestResult(t)
	// Two samples of a request on conn 1, one of the next; one of a thread
	// serving nothing; one of a request begun before the window.
	res.decode(userSample(t, 1, 100, 0x401000))
	res.decode(userSample(t, 1, 100, 0x401000, 0x402000))
	res.decode(userSample(t, 0, 0, 0x403000))
	unseen := reqprofStackSample{Tgid: 4242, Conn: 2, StartNs: 50, UserFrames: 1,
		Flags: uint32(reqprofSampleFlagsSAMPLE_IN_REQUEST | reqprofSampleFlagsSAMPLE_START_UNSEEN)}
	unseen.Ips[0] = 0x401000
	res.decode(sampleBytes(t, unseen))
	res.decode(request(t, 1, 100, "GET /a HTTP/1.1\r\n\r\n"))
	res.decode(userSample(t, 1, 200, 0x401000))
	// Of the calibrating thread, target 63: ignored.
	calibrating := reqprofStackSample{Target: uint32(calibrationTarget), Tgid: 1, UserFrames: 1}
	res.decode(sampleBytes(t, calibrating))
	res.decode(request(t, 1, 200, "GET /b HTTP/1.1\r\n\r\n"))
	// A sample of a request that never finished.
	res.decode(userSample(t, 3, 300, 0x401000))

	st := res.stacks.result(nil)[0]
	want := map[string]uint64{"GET /a": 2, "GET /b": 1, profile.BetweenRequests: 1, profile.UnfinishedRequest: 2}
	if got := counts(st); !mapsEqual(got, want) {
		t.Errorf("samples by route %v, want %v", got, want)
	}
	if res.malformed != 0 {
		t.Errorf("%d malformed", res.malformed)
	}
	// Stacks are deduplicated: 0x401000 alone is one stack, resolved once.
	if len(res.stacks.stacks) != 3 {
		t.Errorf("%d distinct stacks, want 3", len(res.stacks.stacks))
	}
	for _, s := range st.Samples {
		if s.Route.Route == "GET /a" && s.Route.Port != 8080 {
			t.Errorf("route key %+v, want port 8080", s.Route)
		}
	}
}

// A burst of several requests shares its samples among them: whole
// samples, dealt in turn from a request that moves on with each burst.
func TestBurstSharesItsSamples(t *testing.T) {
	res := newTestResult(t)
	pipelined := "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\nGET /c HTTP/1.1\r\n\r\n"
	for range 4 {
		res.decode(userSample(t, 1, 100, 0x401000))
	}
	res.decode(request(t, 1, 100, pipelined))
	for range 2 {
		res.decode(userSample(t, 1, 200, 0x401000))
	}
	res.decode(request(t, 1, 200, pipelined))
	st := res.stacks.result(nil)[0]
	// The first burst deals a, b, c, a; the second starts at b: b, c.
	want := map[string]uint64{"GET /a": 2, "GET /b": 2, "GET /c": 2}
	if got := counts(st); !mapsEqual(got, want) {
		t.Errorf("samples by route %v, want %v", got, want)
	}
}

// A burst that completes no request (half of one) passes its samples on
// with its cost to the burst that completes it; samples of an earlier
// request whose record never came are of no finished request.
func TestCarriedBurstsPassTheirSamplesOn(t *testing.T) {
	res := newTestResult(t)
	half := "GET /a HTTP/1.1\r\nHost: x\r\n" // no end of headers yet
	res.decode(userSample(t, 1, 100, 0x401000))
	res.decode(request(t, 1, 100, half))
	res.decode(userSample(t, 1, 200, 0x401000))
	res.decode(requestAt(t, 1, 200, uint64(len(half)), "\r\n"))
	// Conn 2: a request dropped (its record never came), then one that
	// finished.
	res.decode(userSample(t, 2, 100, 0x401000))
	res.decode(userSample(t, 2, 200, 0x401000))
	res.decode(request(t, 2, 200, "GET /b HTTP/1.1\r\n\r\n"))
	st := res.stacks.result(nil)[0]
	want := map[string]uint64{"GET /a": 2, "GET /b": 1, profile.UnfinishedRequest: 1}
	if got := counts(st); !mapsEqual(got, want) {
		t.Errorf("samples by route %v, want %v", got, want)
	}
}

// What the samples keep is bounded: past the bound on samples held for
// unfinished requests, and on distinct stacks, they are counted as lost.
func TestSampleBounds(t *testing.T) {
	res := newTestResult(t)
	res.stacks.maxHeld, res.stacks.maxStacks = 2, 3
	for i := range 4 {
		res.decode(userSample(t, 1, 100, 0x401000+uint64(i)))
	}
	res.decode(userSample(t, 0, 0, 0x401000)) // a stack already known
	st := res.stacks.result([]reqprofTargetStats{{LostStackSamples: 7}})[0]
	wantLost := map[string]uint64{lostSamplePending: 1, lostSampleStacks: 1, lostSampleRingBuffer: 7}
	if !mapsEqual(st.Lost, wantLost) {
		t.Errorf("lost %v, want %v", st.Lost, wantLost)
	}
	want := map[string]uint64{profile.UnfinishedRequest: 2, profile.BetweenRequests: 1}
	if got := counts(st); !mapsEqual(got, want) {
		t.Errorf("samples by route %v, want %v", got, want)
	}
}

// Kernel frames are resolved by kallsyms, user frames of a process gone
// are addresses, and each is said once in the target's notes.
func TestSampleFrames(t *testing.T) {
	res := newTestResult(t)
	s := reqprofStackSample{Tgid: 4242, KernelFrames: 1, UserFrames: 1, Flags: uint32(reqprofSampleFlagsSAMPLE_KERNEL_MODE)}
	s.Ips[0], s.Ips[1] = 0xffffffff81000010, 0x401000
	res.decode(sampleBytes(t, s))
	st := res.stacks.result(nil)[0]
	if len(st.Samples) != 1 || !st.Samples[0].Kernel || len(st.Samples[0].Frames) != 2 {
		t.Fatalf("samples %+v", st.Samples)
	}
	k, u := st.Frames[st.Samples[0].Frames[0]], st.Frames[st.Samples[0].Frames[1]]
	if !k.Kernel || u.Kernel || u.Address != 0x401000 {
		t.Errorf("frames %+v, %+v", k, u)
	}
	if len(st.Notes) != 2 {
		t.Errorf("notes %q, want one for the kernel's symbols and one for the process", st.Notes)
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestParseCPUList(t *testing.T) {
	for _, c := range []struct {
		list string
		want []int
	}{
		{"0", []int{0}}, {"0-3", []int{0, 1, 2, 3}}, {"0,2-3,7", []int{0, 2, 3, 7}}, {"0-1\n", nil},
	} {
		got, err := parseCPUList(c.list)
		if c.want == nil {
			if err == nil {
				t.Errorf("%q read as %v", c.list, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: %v, %v; want %v", c.list, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "0-99999999", "65536", "0-65535,0"} {
		if got, err := parseCPUList(bad); err == nil {
			t.Errorf("%q read as %v", bad, got)
		}
	}
}

// A stack whose JIT code the perf map did not name when it was first seen
// (a JIT writes a name after it compiles the code) is named at the end of
// the window, with every sample counted under it.
func TestUnnamedJITNamedAtTheEnd(t *testing.T) {
	proc := t.TempDir()
	dir := filepath.Join(proc, "4242")
	perfMap := filepath.Join(dir, "root", "tmp", "perf-4242.map")
	if err := os.MkdirAll(filepath.Dir(perfMap), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "maps"), []byte("7f0000000000-7f0000010000 r-xp 00000000 00:00 0 \n"), 0o644)
	os.WriteFile(perfMap, []byte("7f0000001000 100 JS:*older app.js:1\n"), 0o644)
	res := newConsumeResult(1)
	res.stacks = newStackSamples(1, 999, symbols.New(symbols.Options{Proc: proc, Kallsyms: filepath.Join(proc, "kallsyms"), PerfMapInterval: time.Nanosecond}))
	res.decode(userSample(t, 0, 0, 0x7f0000002010, 0x7f0000001010))
	res.decode(userSample(t, 0, 0, 0x7f0000002010, 0x7f0000001010))
	if err := os.WriteFile(perfMap, []byte("7f0000001000 100 JS:*older app.js:1\n7f0000002000 100 JS:*handle app.js:10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := res.stacks.result(nil)[0]
	if len(st.Samples) != 1 || st.Samples[0].Count != 2 {
		t.Fatalf("samples %+v, want one stack of 2", st.Samples)
	}
	var names []string
	for _, i := range st.Samples[0].Frames {
		names = append(names, st.Frames[i].Name())
	}
	if want := []string{"JS:*handle app.js:10", "JS:*older app.js:1"}; !slices.Equal(names, want) {
		t.Errorf("frames %q, want %q", names, want)
	}
}
