package live

import (
	"io"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/reqprof/reqprof/profile"
)

// DefaultLogRate is how many lines a second a RequestLog writes at most by
// default: some 200 KB/s. A server may finish 150,000 requests a second,
// and writing each would cost more than profiling it; past the cap, lines
// are dropped and counted.
const DefaultLogRate = 1000

// maxPendingLogBytes bounds the lines held for the writer: past it (the
// file's disk is slower than the lines), lines are dropped and counted
// rather than the collector kept waiting.
const maxPendingLogBytes = 4 << 20

// logFlushInterval is how often held lines are written out.
const logFlushInterval = 200 * time.Millisecond

// RequestLog writes one NDJSON line per finished request:
//
//	{"time":"2025-01-02T03:04:05.123456789Z","target":"api","route":"GET /users","cpu_us":80.912,
//	 "user_us":52.8,"kernel_us":28.112,"runqueue_us":5.1,"blocked_us":0,"latency_us":83.5,
//	 "bytes_in":312,"bytes_out":210}
//
// time is when its last response byte was written. At most rate lines are
// written per second of requests' end times, the first that end in it;
// after a second with some dropped, a line {"time":...,"dropped":N} says
// how many. Add is meant for Config.OnRequest: it formats the line into a
// buffer, and a goroutine of its own writes the buffer out, so that a slow
// disk never holds up the collector.
type RequestLog struct {
	mu      sync.Mutex
	names   []string // target name by collector index
	rate    uint64
	pending []byte
	// second is the current second of end times (monotonic ns / 1e9),
	// inSecond the lines written in it and droppedInSecond those not.
	second, inSecond, droppedInSecond uint64
	written, dropped                  uint64
	// wallOffset turns the monotonic clock of requests' times into wall
	// time: wall = mono + wallOffset.
	wallOffset int64
	quoted     map[string][]byte // route names as JSON strings, bounded as the collector's names are
	// wallSecond is the wall-clock second formatted in wallPrefix, to the
	// second, so that a line formats only its fraction.
	wallSecond int64
	wallPrefix []byte

	w       io.Writer
	wakeup  chan struct{}
	done    chan struct{} // closed by Close
	stopped chan struct{} // closed by the writer once it has stopped
	err     error         // the first write error, the writer's own until it stops
}

// maxQuotedNames bounds the route names kept quoted.
const maxQuotedNames = 10_000

// NewRequestLog writes lines to w, at most rate a second (DefaultLogRate
// when 0 or less), until Close.
func NewRequestLog(w io.Writer, rate int) *RequestLog {
	if rate <= 0 {
		rate = DefaultLogRate
	}
	l := &RequestLog{
		w: w, rate: uint64(rate), quoted: map[string][]byte{},
		wallOffset: time.Now().UnixNano() - int64(monotonicNs()),
		wakeup:     make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{}),
	}
	go l.flushLoop()
	return l
}

// Bind names the collector's target indices for the next window.
func (l *RequestLog) Bind(names []string) {
	l.mu.Lock()
	l.names = append(l.names[:0], names...)
	l.mu.Unlock()
}

// Add logs one finished request of the collector's target index, or counts
// it dropped past the rate.
func (l *RequestLog) Add(index int, r profile.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if second := uint64(r.End) / 1e9; second > l.second {
		if l.droppedInSecond > 0 {
			l.appendDropped()
		}
		l.second, l.inSecond, l.droppedInSecond = second, 0, 0
	}
	if l.inSecond >= l.rate || len(l.pending) > maxPendingLogBytes {
		l.droppedInSecond++
		l.dropped++
		return
	}
	l.inSecond++
	l.written++
	name := ""
	if index < len(l.names) {
		name = l.names[index]
	}
	l.appendLine(name, &r)
}

func (l *RequestLog) appendLine(target string, r *profile.Request) {
	b := l.pending
	b = append(b, `{"time":"`...)
	b = l.appendTime(b, int64(r.End)+l.wallOffset)
	b = append(b, `","target":`...)
	b = l.appendQuoted(b, target)
	b = append(b, `,"route":`...)
	b = l.appendQuoted(b, r.Route)
	b = appendMicros(append(b, `,"cpu_us":`...), r.CPUNs())
	b = appendMicros(append(b, `,"user_us":`...), r.UserNs)
	b = appendMicros(append(b, `,"kernel_us":`...), r.KernelNs)
	b = appendMicros(append(b, `,"runqueue_us":`...), r.RunqueueNs)
	b = appendMicros(append(b, `,"blocked_us":`...), r.OffCPUNs)
	b = appendMicros(append(b, `,"latency_us":`...), r.LatencyNs())
	b = strconv.AppendUint(append(b, `,"bytes_in":`...), r.BytesIn, 10)
	b = strconv.AppendUint(append(b, `,"bytes_out":`...), r.BytesOut, 10)
	l.pending = append(b, "}\n"...)
	l.poke()
}

// appendDropped notes the lines dropped in the second that just ended.
func (l *RequestLog) appendDropped() {
	b := append(l.pending, `{"time":"`...)
	b = l.appendTime(b, int64((l.second+1)*1e9)+l.wallOffset)
	b = strconv.AppendUint(append(b, `","dropped":`...), l.droppedInSecond, 10)
	l.pending = append(b, "}\n"...)
}

// appendTime appends wall time ns as RFC 3339 in UTC, to the ns, as
// time.RFC3339Nano does (no trailing zeros), formatting the date and time
// of day once a second: a time.Format per line cost 0.8 µs.
func (l *RequestLog) appendTime(b []byte, ns int64) []byte {
	sec, frac := ns/1e9, ns%1e9
	if frac < 0 {
		sec, frac = sec-1, frac+1e9
	}
	if sec != l.wallSecond || l.wallPrefix == nil {
		l.wallSecond = sec
		l.wallPrefix = time.Unix(sec, 0).UTC().AppendFormat(l.wallPrefix[:0], "2006-01-02T15:04:05")
	}
	b = append(b, l.wallPrefix...)
	if frac != 0 {
		digits := 9
		for frac%10 == 0 {
			frac /= 10
			digits--
		}
		b = append(b, '.')
		for i := digits - 1; i >= 0; i-- {
			b = append(b, '0'+byte(frac/pow10[i]%10))
		}
	}
	return append(b, 'Z')
}

var pow10 = [...]int64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8}

// poke wakes the writer once a good share of the bound is held.
func (l *RequestLog) poke() {
	if len(l.pending) >= maxPendingLogBytes/4 {
		select {
		case l.wakeup <- struct{}{}:
		default:
		}
	}
}

func (l *RequestLog) appendQuoted(b []byte, s string) []byte {
	if q, ok := l.quoted[s]; ok {
		return append(b, q...)
	}
	q := appendJSONString(nil, s)
	if len(l.quoted) < maxQuotedNames {
		l.quoted[s] = q
	}
	return append(b, q...)
}

// appendMicros appends ns as µs with three decimals, exactly.
func appendMicros(b []byte, ns uint64) []byte {
	b = strconv.AppendUint(b, ns/1000, 10)
	frac := ns % 1000
	if frac == 0 {
		return b
	}
	b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	for b[len(b)-1] == '0' {
		b = b[:len(b)-1]
	}
	return b
}

// appendJSONString appends s as a JSON string: route names come from what
// clients sent, so anything may be in them; bytes that are no UTF-8 are
// written as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// Counts says how many lines were written and how many dropped so far.
func (l *RequestLog) Counts() (written, dropped uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written, l.dropped
}

func (l *RequestLog) flushLoop() {
	defer close(l.stopped)
	tick := time.NewTicker(logFlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-tick.C:
		case <-l.wakeup:
		}
		l.flush()
	}
}

// flush writes the lines held so far; only the writer calls it, until it
// stops.
func (l *RequestLog) flush() {
	l.mu.Lock()
	out := l.pending
	l.pending = nil
	l.mu.Unlock()
	if len(out) == 0 || l.err != nil {
		return
	}
	if _, err := l.w.Write(out); err != nil {
		l.err = err
	}
}

// Close writes what is held, a last line for the lines dropped in the
// last second, and stops the writer; it returns the first write error.
func (l *RequestLog) Close() error {
	close(l.done)
	<-l.stopped
	l.mu.Lock()
	if l.droppedInSecond > 0 {
		l.appendDropped()
		l.droppedInSecond = 0
	}
	l.mu.Unlock()
	l.flush()
	return l.err
}
