package calserver

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// burnSink receives every burn loop's result: a store to a global is
// something the compiler must perform, so it must compute the loop too.
var burnSink atomic.Uint64

// spin runs n rounds of xorshift64. Each round depends on the previous one
// and touches only registers, so its cost is steady, and it makes no syscalls
// and no allocations: all of its time is user CPU.
//
//go:noinline
func spin(n, x uint64) uint64 {
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// Burn spends the user CPU that iterations rounds of spin take.
func Burn(iterations uint64) {
	if iterations == 0 {
		return
	}
	// Seeding from the sink chains every burn to the one before it; xorshift
	// needs a non-zero seed.
	burnSink.Store(spin(iterations, burnSink.Load()|1))
}

// ThreadCPU is the calling thread's CPU time (user + system): the clock
// every test server measures its own work by.
func ThreadCPU() time.Duration { return time.Duration(threadCPUNow()) }

// threadCPUNow is the calling thread's CPU time (user + system) in ns.
func threadCPUNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		// Only a bad clock id or pointer can fail, and a silent zero would
		// corrupt the ground truth.
		panic(err)
	}
	return ts.Nano()
}

var calibration struct {
	once  sync.Once
	perNs float64
}

// iterationsPerNs is how many rounds of spin take one ns of thread CPU,
// measured once per process.
func iterationsPerNs() float64 {
	calibration.once.Do(func() { calibration.perNs = calibrate() })
	return calibration.perNs
}

// IterationsFor converts a CPU duration into rounds of spin, calibrated
// once per process.
func IterationsFor(d time.Duration) uint64 {
	return uint64(float64(d.Nanoseconds())*iterationsPerNs() + 0.5)
}

func calibrate() float64 {
	// A thread CPU clock only measures spin if spin runs on that thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	// Grow the run until it takes at least a millisecond, long enough for the
	// clock's cost to vanish; the growing doubles as warm-up.
	n := uint64(1 << 12)
	for timeSpin(n) < int64(time.Millisecond) {
		n *= 2
	}
	// The median of several runs shrugs off the odd interrupt or cache miss.
	rates := make([]float64, 5)
	for i := range rates {
		rates[i] = float64(n) / float64(timeSpin(n))
	}
	slices.Sort(rates)
	return rates[len(rates)/2]
}

// timeSpin is the thread CPU, in ns, that n rounds of spin take.
func timeSpin(n uint64) int64 {
	before := threadCPUNow()
	Burn(n)
	return threadCPUNow() - before
}

// syscallStandIn has the shape of unix.RawSyscall and does nothing: timing a
// loop of it gives the user CPU of the /dev/null write loop without its
// syscalls.
//
//go:noinline
func syscallStandIn(trap, a1, a2, a3 uintptr) (r1, r2 uintptr, err unix.Errno) {
	return a1, a2, 0
}

// writeLoopUserNs estimates the user CPU of one round of the /dev/null write
// loop apart from its syscall: the least per-round cost over a few runs.
func writeLoopUserNs(fd int, buf []byte) float64 {
	// A thread's CPU clock means nothing across a move to another thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const rounds = 200_000
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	best := 0.0
	for i := range 5 {
		start := threadCPUNow()
		for range rounds {
			syscallStandIn(unix.SYS_WRITE, uintptr(fd), p, uintptr(len(buf)))
		}
		per := float64(threadCPUNow()-start) / rounds
		if i == 0 || per < best {
			best = per
		}
	}
	return best
}
