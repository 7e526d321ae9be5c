package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/reqprof/reqprof/collector"
	"github.com/reqprof/reqprof/report"
)

// bench runs the phases and keeps what they measured.
type bench struct {
	settings
	tools     tools
	dir       string
	fileLimit uint64 // the open-file limit nginx inherits
	host      hostInfo

	// Whom reqprof attaches to, when not the server under load: the floor
	// runs attach it to an idle process.
	attachTo int

	overheads []overhead
	ladder    []trial
	many      manyConnections
	churned   churnPhase
}

// trial is one load run against a server, with reqprof attached or not.
type trial struct {
	conns       int // the load's connections
	load        wrkResult
	serverCPUNs uint64           // the server's CPU over the load
	collector   collectorFigures // zero when detached
	// The machine is shared: CPU that neither the server, wrk nor this
	// reqprof used over the load, and other reqprofs (tests, say) whose
	// programs were loaded, slowing every syscall, when it ended.
	othersCPUNs   uint64
	otherReqprofs int
	irqWork       uint64 // IRQ work interrupts on the machine over the load
	switches      uint64 // the server's threads' context switches over the load
}

// switchesPerRequest is the server's context switches per answered request.
func (t trial) switchesPerRequest() float64 {
	return float64(t.switches) / float64(t.load.requests)
}

// serverCPUPerRequestUs is the server process's CPU per answered request.
func (t trial) serverCPUPerRequestUs() float64 {
	return float64(t.serverCPUNs) / float64(t.load.requests) / 1e3
}

// netCPUPerRequestUs is the server's CPU per answered request less what
// reqprof said its own programs cost the server: what reqprof's figures,
// net of it, stand for.
func (t trial) netCPUPerRequestUs() float64 {
	return (float64(t.serverCPUNs) - float64(t.collector.selfCostNs)) / float64(t.load.requests) / 1e3
}

// overhead is one server's detached and attached trials, alternated, and
// the run-time statistics of reqprof's programs under the same load.
type overhead struct {
	server             string
	detached, attached []trial
	bpf                bpfCost
}

// bpfCost is what reqprof's programs ran while requests were served.
type bpfCost struct {
	requests int          // answered while the statistics were read
	programs []programRun // the difference over the load, longest first
	// underFunction is, for a run of a server whose route burns in a
	// function of its own, that function as the report names it, and
	// underShare the share of the route's samples under it.
	underFunction string
	underShare    float64
}

func (c bpfCost) totalRunTime() time.Duration {
	var sum time.Duration
	for _, p := range c.programs {
		sum += p.runTime
	}
	return sum
}

// manyConnections is the phase with many concurrent keep-alive connections.
type manyConnections struct {
	hold      holdResult
	collector collectorFigures
	peak      sample // the largest of each figure sampled, each on its own
}

// churnPhase is the phase with a new connection per request.
type churnPhase struct {
	trial
	samples []sample // over the load, the first taken a period after it began
	after   sample   // once the load stopped and every connection closed
}

// sample is the collector's state at one instant.
type sample struct {
	at                time.Duration // since the load started
	rss               uint64        // the collector's resident memory
	conns             int           // entries of reqprof's connection map (thread state lives in the tasks)
	connsKernelMemory uint64        // the connection map's memory, as the kernel counts it
}

// overheadConns is the wrk load of the overhead runs: enough connections
// that the server's one serving thread never waits for a request.
const overheadConns = 32

// ladderConns are the steps of the request-rate ladder: each doubles the
// connections of closed-loop load, so the rate rises until the two cores
// are saturated.
var ladderConns = []int{1, 2, 4, 8, 16, 32, 64, 128}

// churnConns is the churn phase's load: wrk connections, each reopened
// for every request.
const churnConns = 16

// holdInterval is how often each of the many connections sends a request.
const holdInterval = 2 * time.Second

func (b *bench) runAll() error {
	nginx, err := startNginx(b.tools.nginx, b.dir, b.connections, b.fileLimit)
	if err != nil {
		return err
	}
	defer nginx.stop()

	// nginx with reqprof's defaults first: the goals are about it. Without
	// capturing request bytes next, to tell what capture costs.
	for _, flags := range [][]string{{}, {"--no-payload"}} {
		if err := b.addOverhead(nginx, flags, ""); err != nil {
			return err
		}
	}
	// Lite mode (--lite), for live hosts: no program on every syscall.
	if err := b.addOverhead(nginx, []string{"--lite"}, ""); err != nil {
		return err
	}
	// The floor: reqprof attached to an idle process while nginx serves.
	// Its programs still run on every syscall, softirq and socket event of
	// the machine, if only to tell they are no target's: what that costs
	// nginx is the least any target pays, before any of its own accounting.
	if err := b.addFloor(nginx, nil); err != nil {
		return err
	}
	// And lite mode's floor: what its socket and scheduler programs cost
	// nginx when no thread of it is a target's.
	if err := b.addFloor(nginx, []string{"--lite"}); err != nil {
		return err
	}
	// Stack sampling with interpreter frames: a Python server whose
	// requests burn in a Python function, each sample walking its
	// thread's Python frames.
	py, err := startPythonRoutes(b.dir)
	if err != nil {
		return err
	}
	err = b.addOverhead(py, []string{stacksFlag}, "")
	py.stop()
	if err != nil {
		return err
	}
	for _, burn := range []time.Duration{0, stacksBurn} {
		srv, err := startCalserver(burn)
		if err != nil {
			return err
		}
		err = b.addOverhead(srv, nil, "")
		if err == nil && burn == stacksBurn {
			// Stack sampling, on a server whose requests are long enough
			// to be sampled.
			err = b.addOverhead(srv, []string{stacksFlag}, "")
		}
		srv.stop()
		if err != nil {
			return err
		}
	}

	if err := b.addGoHTTP(); err != nil {
		return err
	}
	if err := b.addGoHTTPLite(); err != nil {
		return err
	}
	if err := b.addMCP(); err != nil {
		return err
	}

	h2, err := startH2()
	if err != nil {
		return err
	}
	err = b.addOverhead(h2, nil, "")
	h2.stop()
	if err != nil {
		return err
	}

	b.progress("request-rate ladder on nginx: %d steps of %v", len(ladderConns), b.step)
	for _, conns := range ladderConns {
		t, err := b.trial(nginx, true, nil, b.wrk(nginx, conns, b.step))
		if err != nil {
			return err
		}
		b.ladder = append(b.ladder, t)
	}

	b.progress("%d concurrent connections to nginx for %v", b.connections, b.hold)
	if b.many, err = b.manyConnections(nginx); err != nil {
		return err
	}

	b.progress("a connection per request to nginx for %v", b.churn)
	b.churned, err = b.connectionChurn(nginx)
	return err
}

// addGoHTTP measures reqprof's overhead on the Go net/http server,
// HTTP/1.1, one route that burns nothing.
func (b *bench) addGoHTTP() error {
	srv, err := startGoHTTP()
	if err != nil {
		return err
	}
	defer srv.stop()
	return b.addOverhead(srv, nil, "")
}

// addGoHTTPLite measures lite mode's overhead on the Go net/http server.
func (b *bench) addGoHTTPLite() error {
	srv, err := startGoHTTP()
	if err != nil {
		return err
	}
	defer srv.stop()
	return b.addOverhead(srv, []string{"--lite"}, "")
}

// runLite runs only the rows of the lite goals: nginx and the Go net/http
// server, each attached in full and in lite mode.
func (b *bench) runLite() error {
	nginx, err := startNginx(b.tools.nginx, b.dir, b.connections, b.fileLimit)
	if err != nil {
		return err
	}
	for _, flags := range [][]string{nil, {"--lite"}} {
		if err = b.addOverhead(nginx, flags, ""); err != nil {
			break
		}
	}
	if err == nil {
		err = b.addFloor(nginx, []string{"--lite"})
	}
	nginx.stop()
	if err != nil {
		return err
	}
	if err := b.addGoHTTP(); err != nil {
		return err
	}
	return b.addGoHTTPLite()
}

// addMCP measures reqprof's overhead on the MCP server of the official Go
// SDK, each request a tool call answered as an event stream.
func (b *bench) addMCP() error {
	srv, err := startMCP(b.dir)
	if err != nil {
		return err
	}
	defer srv.stop()
	return b.addOverhead(srv, nil, "")
}

// runNet runs only the overhead rows the net-CPU goals are about: nginx,
// the calibrated server at 0 µs and the Go net/http server.
func (b *bench) runNet() error {
	nginx, err := startNginx(b.tools.nginx, b.dir, b.connections, b.fileLimit)
	if err != nil {
		return err
	}
	err = b.addOverhead(nginx, nil, "")
	nginx.stop()
	if err != nil {
		return err
	}
	srv, err := startCalserver(0)
	if err != nil {
		return err
	}
	err = b.addOverhead(srv, nil, "")
	srv.stop()
	if err != nil {
		return err
	}
	return b.addGoHTTP()
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "reqprof-bench: "+format+"\n", args...)
}

// load is one run of load that returns what the load generator counted.
type load struct {
	conns int
	run   func() (wrkResult, error)
}

// wrk is load by wrk with two threads, one per core, or one per connection
// if there are fewer.
func (b *bench) wrk(srv *server, conns int, d time.Duration, headers ...string) load {
	if srv.h2 {
		// HTTP/2: each of two connections has conns/2 streams in flight.
		return load{conns, func() (wrkResult, error) {
			return runH2load(b.tools.h2load, srv.url(), 2, max(1, conns/2), d)
		}}
	}
	return load{conns, func() (wrkResult, error) {
		return runWrk(b.tools.wrk, srv.url(), srv.script, min(2, conns), conns, d, headers...)
	}}
}

// trial runs load once, with reqprof attached (given these flags) or not,
// and measures the server's CPU over it.
func (b *bench) trial(srv *server, attached bool, flags []string, l load) (trial, error) {
	t := trial{conns: l.conns}
	var a *attachment
	if attached {
		var err error
		if a, err = attach(b.reqprof, b.dir, b.attachTarget(srv), flags); err != nil {
			return t, err
		}
	}
	err := b.measureServer(srv, a, l, &t)
	if a == nil {
		return t, err
	}
	if err != nil {
		a.kill()
		return t, err
	}
	end, err := a.cpuNs()
	if err != nil {
		a.kill()
		return t, err
	}
	t.collector, err = a.stop(end)
	return t, err
}

// measureServer runs the load and sets t's load, the server's CPU and what
// else ran on the machine meanwhile; a is the attached reqprof, or nil.
func (b *bench) measureServer(srv *server, a *attachment, l load, t *trial) error {
	var collectorBefore, collectorAfter uint64
	var err error
	if a != nil {
		if collectorBefore, err = a.cpuNs(); err != nil {
			return err
		}
	}
	busyBefore, err := machineBusyNs()
	if err != nil {
		return err
	}
	irqWorkBefore, err := irqWorkInterrupts()
	if err != nil {
		return err
	}
	switchesBefore, err := processSwitches(srv.pid())
	if err != nil {
		return err
	}
	before, err := collector.ProcessCPUNs(srv.pid())
	if err != nil {
		return err
	}
	result, err := l.run()
	if err != nil {
		return err
	}
	after, err := collector.ProcessCPUNs(srv.pid())
	if err != nil {
		return err
	}
	switchesAfter, err := processSwitches(srv.pid())
	if err != nil {
		return err
	}
	t.switches = switchesAfter - min(switchesBefore, switchesAfter)
	busyAfter, err := machineBusyNs()
	if err != nil {
		return err
	}
	irqWorkAfter, err := irqWorkInterrupts()
	if err != nil {
		return err
	}
	t.irqWork = irqWorkAfter - irqWorkBefore
	if a != nil {
		if collectorAfter, err = a.cpuNs(); err != nil {
			return err
		}
	}
	t.load, t.serverCPUNs = result, after-before
	ours := t.serverCPUNs + result.cpuNs + collectorAfter - collectorBefore
	t.othersCPUNs = max(busyAfter-busyBefore, ours) - ours
	t.otherReqprofs, err = collector.LoadedInstances()
	if a != nil {
		t.otherReqprofs--
	}
	return err
}

// attachTarget is the process reqprof attaches to in a run loading srv.
func (b *bench) attachTarget(srv *server) int {
	if b.attachTo != 0 {
		return b.attachTo
	}
	return srv.pid()
}

// addFloor measures what reqprof, with flags, costs srv while attached to
// an idle process.
func (b *bench) addFloor(srv *server, flags []string) error {
	idle := exec.Command("sleep", "infinity")
	if err := idle.Start(); err != nil {
		return fmt.Errorf("starting an idle process: %w", err)
	}
	defer func() {
		idle.Process.Kill()
		idle.Wait()
	}()
	b.attachTo = idle.Process.Pid
	defer func() { b.attachTo = 0 }()
	return b.addOverhead(srv, flags, floorLabel)
}

// floorLabel names the floor runs' row.
const floorLabel = "reqprof on an idle process"

// runName names a server's overhead row: the server, then how the run
// differs from the defaults (flags, a label), the empty ones left out.
func runName(server string, differences ...string) string {
	parts := []string{server}
	for _, d := range differences {
		if d != "" {
			parts = append(parts, d)
		}
	}
	return strings.Join(parts, ", ")
}

// addOverhead measures the overhead of reqprof, run with these flags, on
// srv; label, if any, says how the runs differ from the defaults.
func (b *bench) addOverhead(srv *server, flags []string, label string) error {
	o := overhead{server: runName(srv.name, slices.Concat(flags, []string{label})...)}
	b.progress("overhead on %s: %d rounds of %v detached and attached", o.server, b.rounds, b.round)
	// Unmeasured: the first seconds of a server's life (page faults, lazy
	// allocation) would count against whichever run came first.
	if _, err := b.wrk(srv, overheadConns, time.Second).run(); err != nil {
		return err
	}
	l := b.wrk(srv, overheadConns, b.round)
	for round := range b.rounds {
		// Alternating which goes first cancels a drift of the machine
		// over the rounds.
		for _, attached := range []bool{round%2 == 1, round%2 == 0} {
			t, err := b.trial(srv, attached, flags, l)
			if err != nil {
				return err
			}
			if attached {
				o.attached = append(o.attached, t)
			} else {
				o.detached = append(o.detached, t)
			}
		}
	}
	var err error
	o.bpf, err = b.bpfCost(srv, flags, l)
	b.overheads = append(b.overheads, o)
	return err
}

// bpfCost runs the load once more with reqprof attached and the kernel's
// run-time statistics on, in a run of its own: the statistics slow every
// BPF program, so they are off in the runs that measure overhead.
func (b *bench) bpfCost(srv *server, flags []string, l load) (bpfCost, error) {
	stats, err := enableRunStats()
	if err != nil {
		return bpfCost{}, err
	}
	defer stats.Close()
	a, err := attach(b.reqprof, b.dir, b.attachTarget(srv), flags)
	if err != nil {
		return bpfCost{}, err
	}
	cost, err := measureBPF(a, l)
	if err != nil {
		a.kill()
		return cost, err
	}
	end, err := a.cpuNs()
	var figures collectorFigures
	if err == nil {
		figures, err = a.stop(end)
	}
	if srv.burnsIn != "" && figures.stacks != nil {
		cost.underFunction, cost.underShare = underFunction(figures.stacks, srv.burnsIn)
	}
	return cost, err
}

// underFunction finds the function of a report's stacks named prefix
// (its name, then its file and line) and the share of its route's samples
// with it on the stack, in the route where that share is largest.
func underFunction(st *report.StacksSummary, prefix string) (string, float64) {
	samples, under := map[string]uint64{}, map[string]uint64{}
	var name string
	for _, f := range st.Folded {
		samples[f.Route] += f.Samples
		for _, frame := range f.Frames {
			if strings.HasPrefix(frame, prefix+" (") {
				name = frame
				under[f.Route] += f.Samples
				break
			}
		}
	}
	var share float64
	for route, n := range under {
		share = max(share, float64(n)/float64(samples[route]))
	}
	return name, share
}

func measureBPF(a *attachment, l load) (bpfCost, error) {
	objs, err := openBPFObjects(a.pid())
	if err != nil {
		return bpfCost{}, err
	}
	defer objs.close()
	before, err := objs.programRuns()
	if err != nil {
		return bpfCost{}, err
	}
	result, err := l.run()
	if err != nil {
		return bpfCost{}, err
	}
	after, err := objs.programRuns()
	if err != nil {
		return bpfCost{}, err
	}
	cost := bpfCost{requests: result.requests}
	for i, p := range after {
		run := programRun{
			name:    p.name,
			calls:   p.calls - before[i].calls,
			runTime: p.runTime - before[i].runTime,
		}
		cost.programs = append(cost.programs, run)
	}
	slices.SortFunc(cost.programs, func(x, y programRun) int { return cmp.Compare(y.runTime, x.runTime) })
	return cost, nil
}

func (b *bench) manyConnections(srv *server) (manyConnections, error) {
	var m manyConnections
	a, err := attach(b.reqprof, b.dir, srv.pid(), nil)
	if err != nil {
		return m, err
	}
	objs, err := openBPFObjects(a.pid())
	if err != nil {
		a.kill()
		return m, err
	}
	defer objs.close()
	s := startSampler(a, objs, time.Second)
	m.hold = holdConnections(srv.addr, b.connections, b.hold, holdInterval)
	samples, err := s.finish()
	if err != nil {
		a.kill()
		return m, err
	}
	for _, x := range samples {
		m.peak.rss = max(m.peak.rss, x.rss)
		m.peak.conns = max(m.peak.conns, x.conns)
		m.peak.connsKernelMemory = max(m.peak.connsKernelMemory, x.connsKernelMemory)
	}
	end, err := a.cpuNs()
	if err != nil {
		a.kill()
		return m, err
	}
	m.collector, err = a.stop(end)
	return m, err
}

// settleTime is how long the churn phase waits after its load for the last
// connections to close before it counts what is left in reqprof's maps.
const settleTime = 2 * time.Second

func (b *bench) connectionChurn(srv *server) (churnPhase, error) {
	c := churnPhase{trial: trial{conns: churnConns}}
	a, err := attach(b.reqprof, b.dir, srv.pid(), nil)
	if err != nil {
		return c, err
	}
	objs, err := openBPFObjects(a.pid())
	if err != nil {
		a.kill()
		return c, err
	}
	defer objs.close()
	s := startSampler(a, objs, time.Second)
	l := b.wrk(srv, churnConns, b.churn, "Connection: close")
	loadErr := b.measureServer(srv, a, l, &c.trial)
	c.samples, err = s.finish()
	if err == nil && len(c.samples) == 0 {
		err = errors.New("the churn phase ended before its first sample: lengthen --churn")
	}
	if err = errors.Join(loadErr, err); err != nil {
		a.kill()
		return c, err
	}
	time.Sleep(settleTime)
	if c.after, err = takeSample(a, objs, 0); err != nil {
		a.kill()
		return c, err
	}
	end, err := a.cpuNs()
	if err != nil {
		a.kill()
		return c, err
	}
	c.collector, err = a.stop(end)
	return c, err
}

// sampler samples the collector at a fixed period until finish.
type sampler struct {
	stop    chan struct{}
	done    chan struct{}
	samples []sample // read once done is closed
	err     error
}

func startSampler(a *attachment, objs *bpfObjects, period time.Duration) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	start := time.Now()
	go func() {
		defer close(s.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			x, err := takeSample(a, objs, time.Since(start))
			if err != nil {
				s.err = err
				return
			}
			s.samples = append(s.samples, x)
		}
	}()
	return s
}

// finish stops sampling and returns the samples.
func (s *sampler) finish() ([]sample, error) {
	close(s.stop)
	<-s.done
	return s.samples, s.err
}

func takeSample(a *attachment, objs *bpfObjects, at time.Duration) (sample, error) {
	x := sample{at: at}
	var err error
	if x.rss, err = rssBytes(a.pid()); err != nil {
		return x, err
	}
	connsName, err := collector.ConnsMapName()
	if err != nil {
		return x, err
	}
	conns := objs.maps[connsName]
	if conns == nil {
		return x, fmt.Errorf("reqprof holds no %q map", connsName)
	}
	if x.conns, err = entries(conns); err != nil {
		return x, err
	}
	if info, err := conns.Info(); err == nil {
		x.connsKernelMemory, _ = info.Memlock()
	}
	return x, nil
}
