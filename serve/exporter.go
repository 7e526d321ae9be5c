package serve

import (
	"runtime"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/reqprof/reqprof/live"
)

// Every series reqprof serve exports. CPU and time are in seconds, as
// Prometheus's conventions have them.
var (
	requestsDesc = prometheus.NewDesc("reqprof_requests_total",
		"Requests finished, by target and route.", []string{"target", "route"}, nil)
	cpuDesc = prometheus.NewDesc("reqprof_request_cpu_seconds",
		"CPU (user + kernel) each finished request cost its server, by target and route.", []string{"target", "route"}, nil)
	userDesc = prometheus.NewDesc("reqprof_request_user_cpu_seconds_total",
		"User CPU of finished requests, by target and route.", []string{"target", "route"}, nil)
	kernelDesc = prometheus.NewDesc("reqprof_request_kernel_cpu_seconds_total",
		"Kernel CPU of finished requests (syscalls, softirqs and interrupts that ran over their threads), by target and route.", []string{"target", "route"}, nil)
	latencyDesc = prometheus.NewDesc("reqprof_request_latency_seconds",
		"Wall time of each finished request, from its first byte read to its last byte written, by target and route.", []string{"target", "route"}, nil)
	kernelCauseDesc = prometheus.NewDesc("reqprof_kernel_cpu_seconds_total",
		"Kernel CPU of finished requests, by target and cause: syscall, softirq or irq.", []string{"target", "cause"}, nil)
	runqueueDesc = prometheus.NewDesc("reqprof_request_runqueue_seconds_total",
		"Time finished requests' threads waited for a CPU while serving them, by target.", []string{"target"}, nil)
	blockedDesc = prometheus.NewDesc("reqprof_request_blocked_seconds_total",
		"Time finished requests' threads slept (locks, disk, timers) while serving them, by target.", []string{"target"}, nil)
	lostDesc = prometheus.NewDesc("reqprof_lost_events_total",
		"Records and events reqprof could not keep (its ring buffer full, no room for a thread's or connection's state, records it could not read), by target.", []string{"target"}, nil)
	targetUpDesc = prometheus.NewDesc("reqprof_target_up",
		"1 while a process of the target is being profiled, else 0.", []string{"target"}, nil)
	targetInfoDesc = prometheus.NewDesc("reqprof_target_info",
		"1 for each process being profiled, with its target, pid and command name.", []string{"target", "pid", "comm"}, nil)
	selfCPUDesc = prometheus.NewDesc("reqprof_self_cpu_seconds_total",
		"CPU reqprof itself used: part=\"collector\" its process (reading records, serving metrics), part=\"bpf\" its programs' run time in the kernel, on every CPU, scaled up from the tenth of the time the kernel keeps statistics (absent where it keeps none).", []string{"part"}, nil)
	attachesDesc = prometheus.NewDesc("reqprof_attaches_total",
		"Times reqprof attached to its targets: once at start, and again each time a --comm or --port target's process was replaced.", nil, nil)
	logLinesDesc = prometheus.NewDesc("reqprof_request_log_lines_total",
		"Lines written to the --requests log.", nil, nil)
	logDroppedDesc = prometheus.NewDesc("reqprof_request_log_dropped_total",
		"Finished requests not written to the --requests log, past its rate.", nil, nil)
	buildInfoDesc = prometheus.NewDesc("reqprof_build_info",
		"1, labelled with the version and commit of reqprof and the Go it was built with.", []string{"version", "commit", "goversion"}, nil)
)

// exporter is the prometheus.Collector of a Server: each scrape reads a
// snapshot of the tally and the server's own state, and turns it into
// metrics made for that scrape. The hot path, counting a request, never
// touches a prometheus type.
type exporter struct {
	s *Server
}

func (e exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		requestsDesc, cpuDesc, userDesc, kernelDesc, latencyDesc, kernelCauseDesc, runqueueDesc, blockedDesc,
		lostDesc, targetUpDesc, targetInfoDesc, selfCPUDesc, attachesDesc, logLinesDesc, logDroppedDesc, buildInfoDesc,
	} {
		ch <- d
	}
}

func (e exporter) Collect(ch chan<- prometheus.Metric) {
	snap := e.s.tally.Snapshot()
	st := e.s.state()
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, t := range snap.Targets {
		for _, r := range t.Routes {
			counter(requestsDesc, float64(r.Counts.Requests), t.Name, r.Route)
			counter(userDesc, seconds(r.Counts.UserNs), t.Name, r.Route)
			counter(kernelDesc, seconds(r.Counts.KernelNs), t.Name, r.Route)
			ch <- newHistogram(cpuDesc, r.CPU, t.Name, r.Route)
			ch <- newHistogram(latencyDesc, r.Latency, t.Name, r.Route)
		}
		c := t.Total.Counts
		counter(kernelCauseDesc, seconds(c.SyscallNs), t.Name, "syscall")
		counter(kernelCauseDesc, seconds(c.SoftirqNs), t.Name, "softirq")
		counter(kernelCauseDesc, seconds(c.IrqNs), t.Name, "irq")
		counter(runqueueDesc, seconds(c.RunqueueNs), t.Name)
		counter(blockedDesc, seconds(c.OffCPUNs), t.Name)
		counter(lostDesc, float64(st.lost[t.Name]), t.Name)
		up := 0.0
		if len(st.processes[t.Name]) > 0 {
			up = 1
		}
		gauge(targetUpDesc, up, t.Name)
		for _, p := range st.processes[t.Name] {
			gauge(targetInfoDesc, 1, t.Name, strconv.Itoa(p.PID), p.Comm)
		}
	}
	if cpuNs, ok := processCPUNs(); ok {
		counter(selfCPUDesc, seconds(cpuNs), "collector")
	}
	if st.bpfKnown {
		counter(selfCPUDesc, seconds(st.bpfNs), "bpf")
	}
	counter(attachesDesc, float64(st.attaches))
	if l := e.s.opts.RequestLog; l != nil {
		written, dropped := l.Counts()
		counter(logLinesDesc, float64(written))
		counter(logDroppedDesc, float64(dropped))
	}
	gauge(buildInfoDesc, 1, e.s.opts.Version, e.s.opts.Commit, runtime.Version())
}

func seconds(ns uint64) float64 { return float64(ns) / 1e9 }

// processCPUNs is this process's CPU, user and system, so far.
func processCPUNs() (uint64, bool) {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return uint64(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// histogram is a histogram made for one scrape, with both kinds of
// buckets: classic ones (le="1e-06" ... "+Inf"), which every Prometheus
// reads, and native ones (schema 3), which a Prometheus with native
// histograms enabled asks for through the protobuf format. Prometheus's
// own const histograms take one kind or the other.
type histogram struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	b      live.Buckets
}

func newHistogram(desc *prometheus.Desc, b live.Buckets, labels ...string) prometheus.Metric {
	return histogram{desc: desc, labels: prometheus.MakeLabelPairs(desc, labels), b: b}
}

func (h histogram) Desc() *prometheus.Desc { return h.desc }

// classicBoundsSeconds are live.ClassicBoundsNs in seconds.
var classicBoundsSeconds = func() (s [len(live.ClassicBoundsNs)]float64) {
	for i, ns := range live.ClassicBoundsNs {
		s[i] = float64(ns) / 1e9
	}
	return s
}()

func (h histogram) Write(m *dto.Metric) error {
	b := &h.b
	out := &dto.Histogram{
		SampleCount:   new(b.Count),
		SampleSum:     new(seconds(b.SumNs)),
		Schema:        new(int32(live.NativeSchema)),
		ZeroThreshold: new(prometheus.DefNativeHistogramZeroThreshold),
		ZeroCount:     new(b.Zero),
	}
	var cumulative uint64
	for i, bound := range classicBoundsSeconds {
		cumulative += b.Classic[i]
		out.Bucket = append(out.Bucket, &dto.Bucket{CumulativeCount: new(cumulative), UpperBound: new(bound)})
	}
	out.PositiveSpan, out.PositiveDelta = nativeSpans(b.NativeLow, b.Native)
	if len(out.PositiveSpan) == 0 && b.Zero == 0 {
		// No observation yet: one empty span marks the histogram as
		// native, as Prometheus's client does.
		out.PositiveSpan = []*dto.BucketSpan{{Offset: new(int32(0)), Length: new(uint32(0))}}
	}
	m.Label = h.labels
	m.Histogram = out
	return nil
}

// nativeSpans encodes the counts of keys low, low+1, ... as Prometheus's
// spans and deltas: runs of buckets, each delta the count less the one
// before it. A gap of up to two empty buckets stays inside a span, as
// Prometheus's client does it.
func nativeSpans(low int, counts []uint64) ([]*dto.BucketSpan, []int64) {
	var (
		spans  []*dto.BucketSpan
		deltas []int64
		prev   int64
		next   int // the key after the last one encoded
	)
	for i, n := range counts {
		if n == 0 {
			continue
		}
		key := low + i
		if gap := key - next; len(spans) == 0 || gap > 2 {
			spans = append(spans, &dto.BucketSpan{Offset: new(int32(gap)), Length: new(uint32(0))})
		} else {
			for range gap {
				*spans[len(spans)-1].Length++
				deltas = append(deltas, -prev)
				prev = 0
			}
		}
		*spans[len(spans)-1].Length++
		deltas = append(deltas, int64(n)-prev)
		prev = int64(n)
		next = key + 1
	}
	return spans, deltas
}
