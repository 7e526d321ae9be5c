package calserver

import "sync/atomic"

// Totals is what the serving threads measured over a set of requests. A
// request's CPU runs, on its thread's CPU clock (CLOCK_THREAD_CPUTIME_ID),
// from just before the read that brought its first bytes to just before the
// read that brings the thread's next request, one clock reading ending the
// one and starting the other: the thread's loop after the response (back to
// epoll_wait or read) is the request's, as reqprof charges it, and what
// reqprof's programs cost the thread in that span is in it. Its wall time
// runs from the return of that read to just after the write of its
// response's last byte returned. A pipelined request, already buffered when
// the one before it finished, starts instead where that one ended, so
// requests that arrived in one read share its CPU in arrival order.
//
// In the pool model a request runs on two threads, and its CPU is the sum of
// two parts (zero in the other models): the I/O thread's, from just before
// the read that brought its first bytes to just after the futex wake that
// handed it to the workers, and the worker's, from just after it took the
// job off the queue to just after the write of the response's last byte
// returned. Its wall time runs from the return of that read to the same end.
type Totals struct {
	Requests     uint64 `json:"requests"`
	CPUNs        uint64 `json:"cpu_ns"`
	DevNullCPUNs uint64 `json:"devnull_cpu_ns"` // part of CPUNs spent writing to /dev/null
	WallNs       uint64 `json:"wall_ns"`
	IOCPUNs      uint64 `json:"io_cpu_ns,omitempty"`     // pool model: the I/O thread's part of CPUNs
	WorkerCPUNs  uint64 `json:"worker_cpu_ns,omitempty"` // pool model: the workers' part of CPUNs
}

// MeanCPUMicros is the mean CPU per request, in µs.
func (t Totals) MeanCPUMicros() float64 { return perRequestMicros(t.CPUNs, t.Requests) }

// MeanDevNullCPUMicros is the mean CPU per request spent writing to /dev/null, in µs.
func (t Totals) MeanDevNullCPUMicros() float64 {
	return perRequestMicros(t.DevNullCPUNs, t.Requests)
}

// MeanIOCPUMicros is the mean CPU per request on the pool model's I/O
// thread, in µs.
func (t Totals) MeanIOCPUMicros() float64 { return perRequestMicros(t.IOCPUNs, t.Requests) }

// MeanWorkerCPUMicros is the mean CPU per request on the pool model's
// workers, in µs.
func (t Totals) MeanWorkerCPUMicros() float64 { return perRequestMicros(t.WorkerCPUNs, t.Requests) }

// MeanWallMicros is the mean wall time per request, in µs.
func (t Totals) MeanWallMicros() float64 { return perRequestMicros(t.WallNs, t.Requests) }

func perRequestMicros(ns, requests uint64) float64 {
	if requests == 0 {
		return 0
	}
	return float64(ns) / float64(requests) / 1e3
}

func (t *Totals) add(o Totals) {
	t.Requests += o.Requests
	t.CPUNs += o.CPUNs
	t.DevNullCPUNs += o.DevNullCPUNs
	t.WallNs += o.WallNs
	t.IOCPUNs += o.IOCPUNs
	t.WorkerCPUNs += o.WorkerCPUNs
}

// Stats is the server's ground truth: all requests, and the requests of each
// route, keyed by route key as Config.Routes is (DefaultRoute for requests
// whose key has no route of its own).
type Stats struct {
	Totals
	Routes map[string]Totals `json:"routes"`
	// DevNullLoopUserNs is the user CPU of one round of the /dev/null write
	// loop apart from its syscall (loop and call instructions): part of
	// DevNullCPUNs that is no kernel time.
	DevNullLoopUserNs float64 `json:"devnull_loop_user_ns"`
	// GetppidCalls and GetppidCPUNs: the getppid() calls made
	// (Config.GetppidCalls a request) and the thread CPU they took, the
	// loop's user instructions included, as for DevNullCPUNs.
	GetppidCalls uint64 `json:"getppid_calls,omitempty"`
	GetppidCPUNs uint64 `json:"getppid_cpu_ns,omitempty"`

	// Pool model only: FUTEX_WAKE calls the I/O thread made to hand jobs to
	// sleeping workers, the workers they woke, and FUTEX_WAIT calls the
	// workers made to sleep for a job. A job a worker finds queued when it
	// looks for the next one needs no wake.
	FutexWakes uint64 `json:"futex_wakes,omitempty"`
	FutexWoken uint64 `json:"futex_woken,omitempty"`
	FutexWaits uint64 `json:"futex_waits,omitempty"`
}

// route is a route key's work and the running totals of its requests. Totals are
// atomics so that any serving thread can add to them without allocating or
// waiting.
type route struct {
	name       string
	iterations uint64 // rounds of spin per request

	requests, cpuNs, devNullCPUNs, wallNs atomic.Uint64
	ioCPUNs, workerCPUNs                  atomic.Uint64
}

func (r *route) record(cpuNs, devNullCPUNs, wallNs int64) {
	r.requests.Add(1)
	r.cpuNs.Add(uint64(cpuNs))
	r.devNullCPUNs.Add(uint64(devNullCPUNs))
	r.wallNs.Add(uint64(wallNs))
}

// addIO adds the pool model I/O thread's part of a request's CPU.
func (r *route) addIO(cpuNs int64) {
	r.ioCPUNs.Add(uint64(cpuNs))
	r.cpuNs.Add(uint64(cpuNs))
}

// addWorker adds a pool model worker's part of a request's CPU.
func (r *route) addWorker(cpuNs int64) {
	r.workerCPUNs.Add(uint64(cpuNs))
	r.cpuNs.Add(uint64(cpuNs))
}

// count records a pool model request, whose CPU the two parts add.
func (r *route) count(devNullCPUNs, wallNs int64) {
	r.record(0, devNullCPUNs, wallNs)
}

func (r *route) totals() Totals {
	return Totals{
		Requests:     r.requests.Load(),
		CPUNs:        r.cpuNs.Load(),
		DevNullCPUNs: r.devNullCPUNs.Load(),
		WallNs:       r.wallNs.Load(),
		IOCPUNs:      r.ioCPUNs.Load(),
		WorkerCPUNs:  r.workerCPUNs.Load(),
	}
}
