package collector

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// nginxLikeRecords are the ring-buffer records of a keep-alive load as wrk
// puts on nginx: conns connections, each sending requests one after
// another, their records interleaved as one event loop finishes them. Each
// record carries what such a request costs (a recvfrom, a writev, an
// epoll_wait, a NET_RX softirq, two socket operations) so that decoding,
// netting reqprof's own cost, the kernel tally, splitting and the totals
// all do their usual work. routes distinct paths are spread over them.
func nginxLikeRecords(tb testing.TB, conns, perConn, routes int) [][]byte {
	tb.Helper()
	const recvfrom, writev, epollWait = 45, 20, 232
	var records [][]byte
	offsets := make([]uint64, conns)
	for i := range perConn {
		for c := range conns {
			n := i*conns + c
			payload := fmt.Sprintf("GET /items/%d HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n", n%routes)
			r := reqprofRequestRecord{
				Conn: uint64(c + 1), StreamOff: offsets[c], StartNs: uint64(n) * 10_000, LocalPort: 8080,
				FirstWriteNs: uint64(n)*10_000 + 6_000, EndNs: uint64(n)*10_000 + 6_500,
				BytesIn: uint64(len(payload)), BytesOut: 150, PayloadLen: uint16(len(payload)),
			}
			offsets[c] += uint64(len(payload))
			copy(r.Payload[:], payload)
			r.Cost.UserNs = 1_200
			r.Cost.SyscallNs = 4_100
			r.Cost.SoftirqNs[3] = 2_600 // NET_RX
			r.Cost.SockOps, r.Cost.Interrupts = 2, 1
			r.Cost.Syscalls[0] = reqprofSyscallSlot{Nr: recvfrom + 1, Calls: 1, Ns: 1_600}
			r.Cost.Syscalls[1] = reqprofSyscallSlot{Nr: writev + 1, Calls: 1, Ns: 2_400}
			r.Cost.Syscalls[2] = reqprofSyscallSlot{Nr: epollWait + 1, Calls: 1, Ns: 100}
			records = append(records, recordBytes(tb, r))
		}
	}
	return records
}

// BenchmarkConsumeSteady is the collector's work per finished request in a
// long window, once its sample of requests is full: a record from the ring
// buffer through decoding, the kernel tally, reqprof's own cost taken out,
// splitting the burst into requests and naming them, to the totals. Besides
// ns/op (wall clock, which another process on the CPU stretches) it reports
// cpu-ns/op, the process's CPU (user + system, the garbage collector
// included) per record: the figure the collector's goal is about.
func BenchmarkConsumeSteady(b *testing.B) {
	for _, c := range []struct {
		name          string
		conns, routes int
	}{
		{"32conns-1route", 32, 1},
		{"32conns-50routes", 32, 50},
		{"1000conns-50routes", 1000, 50},
	} {
		b.Run(c.name, func(b *testing.B) {
			records := nginxLikeRecords(b, c.conns, max(1, 4096/c.conns), c.routes)
			res := newConsumeResult(1)
			res.self = newSelfCost(false)
			res.self.rates.Store(&selfRates{entryNs: 70, runNs: [selfKinds]float64{150, 150, 400, 200, 100, 100, 100}})
			// Past the sample's filling, and with every connection followed
			// once: the steady state of a long window.
			for i := range maxSampledRequests + len(records) {
				res.decode(records[i%len(records)])
			}
			cpu0 := processCPUNs(b)
			b.ReportAllocs()
			n := 0
			for i := 0; b.Loop(); i++ {
				res.decode(records[i%len(records)])
				n++
			}
			b.ReportMetric(float64(processCPUNs(b)-cpu0)/float64(n), "cpu-ns/op")
			if res.malformed != 0 {
				b.Fatalf("%d records malformed", res.malformed)
			}
		})
	}
}

// processCPUNs is this process's CPU so far, user and system.
func processCPUNs(tb testing.TB) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkConsumeFilling is the same work over a window's first
// maxSampledRequests requests, while the sample of requests fills: each op
// is one record, from a fresh consumer every maxSampledRequests.
func BenchmarkConsumeFilling(b *testing.B) {
	records := nginxLikeRecords(b, 32, 128, 50)
	var res consumeResult
	cpu0 := processCPUNs(b)
	b.ReportAllocs()
	n := 0
	for i := 0; b.Loop(); i++ {
		if i%maxSampledRequests == 0 {
			res = newConsumeResult(1)
			res.self = newSelfCost(false)
		}
		res.decode(records[i%len(records)])
		n++
	}
	b.ReportMetric(float64(processCPUNs(b)-cpu0)/float64(n), "cpu-ns/op")
}
