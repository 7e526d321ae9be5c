package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/reqprof/reqprof/collector"
)

// reqprof's performance goals, set for a 2-core machine.
const (
	goalAddedCPUUs       = 0.5     // µs of server CPU added per request, nginx
	goalThroughputLoss   = 0.08    // fraction of nginx's throughput
	goalLossFreeRate     = 150_000 // requests/s with zero lost events
	goalManyConnsRSSByte = 100e6   // collector peak memory at many connections
	goalChurnRSSGrowth   = 0.10    // collector memory growth over the churn phase
	// What reqprof's programs cost the target's threads per request (its
	// self_cost_us), on nginx and on the Go net/http server.
	goalProgramsUs = 1.0
	// The same as a share of the request's CPU, on the MCP Go SDK server
	// answering with event streams.
	goalProgramsShareMCP = 0.02
	// The collector's CPU per request at a rate of goalCollectorRate.
	goalCollectorUs   = 0.3
	goalCollectorRate = 100_000
	// What the stack sampling program costs a busy thread, as a share of
	// its CPU: its run time per sample at collector.DefaultStackHz.
	goalStackSamplingShare = 0.01
)

// markdown is the whole report, printed and written to the docs alike.
func (b *bench) markdown() string {
	var w strings.Builder
	h := b.host
	fmt.Fprintf(&w, "# Benchmarks\n\n")
	fmt.Fprintf(&w, "Written by `make bench` (cmd/reqprof-bench) from a real run on the machine below; rerun it rather than edit this file. "+
		"Every figure comes from the real `reqprof attach` binary attached to a real server under load on 127.0.0.1.\n\n")
	w.WriteString(table([]string{"", ""}, [][]string{
		{"Date", h.date},
		{"Kernel", h.kernel},
		{"CPU", fmt.Sprintf("%s, %d cores", h.cpu, h.cores)},
		{"Load average before the run", h.loadavg},
		{"Runs while another reqprof was loaded", b.runsBesideOtherReqprofs()},
		{"reqprof", "built from " + h.revision},
		{"nginx, wrk", h.nginx + ", " + h.wrk},
		{"Command", "`" + h.command + "`"},
	}))
	b.writeGoals(&w)
	b.writeOverhead(&w)
	b.writeLadder(&w)
	b.writeManyConnections(&w)
	b.writeChurn(&w)
	return w.String()
}

func (b *bench) writeGoals(w *strings.Builder) {
	nginx := b.overheads[0]
	added, loss := nginx.addedCPUUs(), nginx.throughputLoss()
	bestRate, _ := b.lossFreeRate()
	last, half := b.churned.samples[len(b.churned.samples)-1], b.churned.halfway()
	rows := [][]string{
		{"Server CPU added per request, nginx", fmt.Sprintf("< %.1f µs", goalAddedCPUUs), fmt.Sprintf("%.2f µs", added), met(added < goalAddedCPUUs)},
		{"Throughput loss, nginx", fmt.Sprintf("≤ %.0f%%", 100*goalThroughputLoss), percent(loss), met(loss <= goalThroughputLoss)},
		{"Zero lost events at a request rate of", thousands(goalLossFreeRate) + " req/s",
			"highest loss-free: " + thousands(int(bestRate)) + " req/s", met(bestRate >= goalLossFreeRate)},
		{fmt.Sprintf("Collector memory at %s connections", thousands(b.connections)), fmt.Sprintf("< %.0f MB", goalManyConnsRSSByte/1e6),
			fmt.Sprintf("%s peak RSS, %s of %s connections open", megabytes(b.many.collector.peakRSS), thousands(b.many.hold.opened), thousands(b.connections)),
			met(b.many.collector.peakRSS < goalManyConnsRSSByte && b.many.hold.opened == b.connections)},
		{"Connection entries freed under churn", "0 left once connections close",
			fmt.Sprintf("%d left of %s connections; at most %d at once", b.churned.after.conns, thousands(b.churned.load.requests), b.churned.maxSample().conns),
			met(b.churned.after.conns == 0)},
		{"Collector memory flat under churn", fmt.Sprintf("grows < %.0f%% over the second half", 100*goalChurnRSSGrowth),
			fmt.Sprintf("%s → %s RSS", megabytes(half.rss), megabytes(last.rss)),
			met(float64(last.rss) < (1+goalChurnRSSGrowth)*float64(half.rss))},
	}
	rows = append(rows, b.costGoals()...)
	rows = append(rows, b.netGoals()...)
	rows = append(rows, b.liteGoals()...)
	fmt.Fprintf(w, "\n## Goals\n\n")
	w.WriteString(table([]string{"Goal", "Target", "Measured", "Met"}, rows))
}

// Lite mode's goals (--lite): what a live production host may pay.
const (
	liteGoalThroughputLoss = 0.05 // fraction of throughput, nginx and Go net/http
	liteGoalAddedCPUUs     = 0.3  // µs of server CPU added per request, nginx
)

// liteGoals are the goal rows of lite mode, from its rows of nginx and the
// Go net/http server.
func (b *bench) liteGoals() [][]string {
	var rows [][]string
	for _, name := range []string{"nginx", goHTTPName} {
		i := slices.IndexFunc(b.overheads, func(o overhead) bool { return o.server == name+", --lite" })
		if i < 0 {
			continue
		}
		o := b.overheads[i]
		loss, added := o.throughputLoss(), o.addedCPUUs()
		// Lite mode's floor (attached to an idle process, measured on
		// nginx) is stated beside: what its programs cost before any target's
		// accounting, which no goal can go below.
		lossText, addedText := percent(loss), fmt.Sprintf("%.2f µs", added)
		if floor, ok := b.overheadNamed(runName(name, "--lite", floorLabel)); ok {
			lossText += fmt.Sprintf(" (floor, attached to an idle process: %s)", percent(floor.throughputLoss()))
			addedText += fmt.Sprintf(" (floor: %+.2f µs)", floor.addedCPUUs())
		}
		rows = append(rows, []string{"Throughput loss, --lite, " + name, fmt.Sprintf("≤ %.0f%%", 100*liteGoalThroughputLoss), lossText, met(loss <= liteGoalThroughputLoss)})
		if name == "nginx" {
			rows = append(rows, []string{"Server CPU added per request, --lite, nginx", fmt.Sprintf("≤ %.1f µs", liteGoalAddedCPUUs),
				addedText, met(added <= liteGoalAddedCPUUs)})
		} else {
			rows = append(rows, []string{"Server CPU added per request, --lite, " + name, "(stated)", addedText, "—"})
		}
	}
	return rows
}

// overheadOf is the overhead measured on the server named so, if any.
func (b *bench) overheadOf(name string) (overhead, bool) {
	i := slices.IndexFunc(b.overheads, func(o overhead) bool { return o.server == name })
	if i < 0 {
		return overhead{}, false
	}
	return b.overheads[i], true
}

// costGoals are the goal rows of what reqprof itself costs: its programs in
// the targets' context, per request, and the collector's CPU per request at
// a high rate.
func (b *bench) costGoals() [][]string {
	var rows [][]string
	for _, name := range []string{"nginx", goHTTPName} {
		if o, ok := b.overheadOf(name); ok {
			us := o.selfCostUs()
			rows = append(rows, []string{"reqprof's programs in the target per request, " + name,
				fmt.Sprintf("≤ %.1f µs", goalProgramsUs), fmt.Sprintf("%.2f µs", us), met(us <= goalProgramsUs)})
		}
	}
	if o, ok := b.overheadOf(mcpName); ok {
		us, request := o.selfCostUs(), o.detachedCPUUs()
		share := us / request
		rows = append(rows, []string{"reqprof's programs in the target, share of request CPU, " + mcpName,
			fmt.Sprintf("≤ %.0f%%", 100*goalProgramsShareMCP),
			fmt.Sprintf("%s (%.2f µs of %.1f µs)", percent(share), us, request), met(share <= goalProgramsShareMCP)})
	}
	if row, ok := b.stackSamplingGoal(stacksName, "Stack sampling program"); ok {
		rows = append(rows, row)
	}
	if row, ok := b.stackSamplingGoal(pythonStacksName, "Stack sampling program with Python frames"); ok {
		rows = append(rows, row)
	}
	if t, ok := b.fastestLossFree(); ok {
		us := float64(t.collector.windowCPUNs) / float64(t.collector.requests) / 1e3
		measured := fmt.Sprintf("%.2f µs at %s req/s", us, thousands(int(t.load.perSecond)))
		if t.load.perSecond < goalCollectorRate {
			measured += fmt.Sprintf(" (the fastest step; %s req/s not reached here)", thousands(goalCollectorRate))
		}
		rows = append(rows, []string{"Collector CPU per request", fmt.Sprintf("≤ %.1f µs at %s req/s", goalCollectorUs, thousands(goalCollectorRate)),
			measured, met(us <= goalCollectorUs && t.load.perSecond >= goalCollectorRate)})
	}
	return rows
}

// stackSamplingGoal is the goal row, titled what, of the stack sampling
// program's cost in the run named run: its run time per sample, times
// the samples a second each CPU takes, is the share of a busy CPU it
// takes. A run with interpreter frames also says how many of its samples
// were under the function its requests burn in, which says the frames
// were read.
func (b *bench) stackSamplingGoal(run, what string) ([]string, bool) {
	o, ok := b.overheadOf(run)
	if !ok {
		return nil, false
	}
	i := slices.IndexFunc(o.bpf.programs, func(p programRun) bool { return collector.IsStackSamplingProgram(p.name) })
	if i < 0 || o.bpf.programs[i].calls == 0 {
		return nil, false
	}
	p := o.bpf.programs[i]
	perSampleNs := float64(p.runTime.Nanoseconds()) / float64(p.calls)
	share := perSampleNs * collector.DefaultStackHz / 1e9
	measured := fmt.Sprintf("%s (%.2f µs a sample, %d samples)", percent(share), perSampleNs/1e3, p.calls)
	if o.bpf.underFunction != "" {
		measured = fmt.Sprintf("%s (%.2f µs a sample, %d samples; %s of its route's under %s)",
			percent(share), perSampleNs/1e3, p.calls, percent(o.bpf.underShare), o.bpf.underFunction)
	}
	return []string{fmt.Sprintf("%s, share of a busy CPU at %d Hz (%s)", what, collector.DefaultStackHz, run),
		fmt.Sprintf("≤ %.0f%%", 100*goalStackSamplingShare), measured,
		met(share <= goalStackSamplingShare)}, true
}

// fastestLossFree is the request-rate ladder's fastest step that lost no
// events, if any.
func (b *bench) fastestLossFree() (trial, bool) {
	var best trial
	found := false
	for _, t := range b.ladder {
		if t.collector.lost == 0 && t.collector.requests > 0 && (!found || t.load.perSecond > best.load.perSecond) {
			best, found = t, true
		}
	}
	return best, found
}

// netGoalServers are the servers whose net all-in CPU per request has a
// goal: reqprof's figures net of its own cost should stand for what the
// server costs without reqprof.
var netGoalServers = []string{"nginx", "calserver, 0 µs burn", goHTTPName}

// The net all-in CPU per request is within netGoalShare or netGoalUs of
// the detached CPU per request, whichever is larger.
const (
	netGoalShare = 0.05
	netGoalUs    = 1.0
)

// netGoals are the goal rows of the net all-in CPU per request: the
// server's CPU less what reqprof said its programs cost it, per request,
// against the server's CPU per request without reqprof, in runs
// alternated in one bench.
func (b *bench) netGoals() [][]string {
	var rows [][]string
	for _, name := range netGoalServers {
		i := slices.IndexFunc(b.overheads, func(o overhead) bool { return o.server == name })
		if i < 0 {
			continue
		}
		o := b.overheads[i]
		detached, net := o.detachedCPUUs(), o.netCPUUs()
		bound := max(netGoalShare*detached, netGoalUs)
		rows = append(rows, []string{
			"Net all-in CPU per request, " + name,
			"within 5% or 1 µs of detached",
			fmt.Sprintf("net %.2f µs (attached %.2f less own cost %.2f ± %.2f) vs detached %.2f µs: %+.2f; context switches per request %.2f detached, %.2f attached",
				net, o.attachedCPUUs(), o.selfCostUs(), o.selfSpreadUs(), detached, net-detached,
				median(o.detached, trial.switchesPerRequest), median(o.attached, trial.switchesPerRequest)),
			met(math.Abs(net-detached) <= bound),
		})
	}
	return rows
}

func (o overhead) netCPUUs() float64 { return median(o.attached, trial.netCPUPerRequestUs) }

// selfCostUs is what reqprof said its programs cost, per request the
// load answered (median over the attached runs).
func (o overhead) selfCostUs() float64 {
	return median(o.attached, func(t trial) float64 { return float64(t.collector.selfCostNs) / float64(t.load.requests) / 1e3 })
}

// selfSpreadUs is the standard error reqprof stated for its own cost per
// request, the median over the attached runs.
func (o overhead) selfSpreadUs() float64 {
	return median(o.attached, func(t trial) float64 { return float64(t.collector.selfSpreadNs) / float64(t.load.requests) / 1e3 })
}

// overheadNamed is the overhead row named name, if measured.
func (b *bench) overheadNamed(name string) (overhead, bool) {
	i := slices.IndexFunc(b.overheads, func(o overhead) bool { return o.server == name })
	if i < 0 {
		return overhead{}, false
	}
	return b.overheads[i], true
}

// floor is the overhead of reqprof, with its defaults, attached to an idle
// process while nginx serves, if measured.
func (b *bench) floor() (overhead, bool) { return b.overheadNamed(runName("nginx", floorLabel)) }

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func (b *bench) writeOverhead(w *strings.Builder) {
	fmt.Fprintf(w, "\n## Overhead\n\n")
	fmt.Fprintf(w, "Each server is loaded by wrk (closed loop: 2 threads, %d keep-alive connections) for %v per run, "+
		"%d rounds, each round one run without reqprof and one with it, their order alternating. "+
		"Server CPU is the kernel's CPU clock of the server process (all its threads) over the load. "+
		"Figures are medians over the rounds; \"added\" is the attached median less the detached one. "+
		"wrk runs on the same two cores, so throughput also pays for what reqprof's programs cost wrk's own threads. "+
		"The h2c server is loaded by h2load instead: 2 connections of %d streams in flight each, a stream being a request.\n\n",
		overheadConns, b.round, b.rounds, overheadConns/2)
	var rows [][]string
	for _, o := range b.overheads {
		var ratios []string
		for i := range o.attached {
			ratios = append(ratios, fmt.Sprintf("%.3f", o.attached[i].load.perSecond/o.detached[i].load.perSecond))
		}
		rows = append(rows, []string{
			o.server,
			thousands(int(o.detachedRate())), thousands(int(o.attachedRate())), percent(o.throughputLoss()),
			fmt.Sprintf("%.2f", o.detachedCPUUs()), fmt.Sprintf("%.2f", o.attachedCPUUs()), fmt.Sprintf("%+.2f", o.addedCPUUs()),
			strings.Join(ratios, " "),
			percent(median(slices.Concat(o.detached, o.attached), b.othersShare(b.round))),
		})
	}
	w.WriteString(table([]string{"Server", "req/s detached", "req/s attached", "throughput loss",
		"CPU µs/req detached", "CPU µs/req attached", "added µs/req", "attached/detached req/s by round",
		"other processes' CPU"}, rows))
	w.WriteString("\n\"Other processes' CPU\" is the machine's CPU that neither the server, wrk nor the bench's reqprof used during the load, " +
		"as a share of both cores (median over the runs): other work on a shared machine, and kernel threads, skew the figures by about that much.\n")
	if floor, ok := b.floor(); ok {
		nginx := b.overheads[0]
		fmt.Fprintf(w, "\nThe row \"%s\" attaches reqprof to a sleeping process while nginx is loaded: "+
			"its programs still run on each of nginx's and wrk's syscalls, softirqs and socket events, and return as soon as they see no target's thread. "+
			"That floor cost nginx %+.2f µs per request and %s of its throughput; attached to nginx itself, reqprof cost %+.2f µs and %s.\n",
			floor.server, floor.addedCPUUs(), percent(floor.throughputLoss()), nginx.addedCPUUs(), percent(nginx.throughputLoss()))
	}
	b.writeOwnCost(w)
	b.writeProgramRunTimes(w)
}

// writeOwnCost writes the table of what reqprof itself cost in each
// server's overhead runs: BPF run time and calls, the collector's CPU and
// memory, lost events and IRQ work interrupts.
func (b *bench) writeOwnCost(w *strings.Builder) {
	fmt.Fprintf(w, "\n### reqprof's own cost\n\n")
	fmt.Fprintf(w, "BPF run time is the kernel's own statistics (BPF_ENABLE_STATS: run_time_ns and run_cnt of each of reqprof's programs), "+
		"read in one more attached run per server with the statistics on throughout (they add two clock reads to every program call; "+
		"in the overhead runs, as in any run, `reqprof attach` keeps them a tenth of the time only, to report its own cost). "+
		"It counts every call on the machine, including wrk's syscalls, which reqprof's programs must look at to tell they are not a target's; "+
		"it excludes the kernel's trampoline into each program. "+
		"Collector CPU and memory are the `reqprof attach` process's: CPU from attached to the end of the load (medians over the attached runs), "+
		"and whole-life CPU and peak RSS (getrusage) including loading, calibration and writing the report.\n\n")
	var rows [][]string
	for _, o := range b.overheads {
		c := o.collectorMedians()
		var lost uint64
		for _, t := range o.attached {
			lost += t.collector.lost
		}
		requests := float64(o.bpf.requests)
		var calls uint64
		for _, p := range o.bpf.programs {
			calls += p.calls
		}
		rows = append(rows, []string{
			o.server,
			fmt.Sprintf("%.0f", float64(o.bpf.totalRunTime())/requests),
			fmt.Sprintf("%.1f", float64(calls)/requests),
			percent(c.windowCPUNs / b.round.Seconds() / 1e9),
			perRequestUs(c.windowCPUNs, c.requests),
			fmt.Sprintf("%.0f ms", c.totalCPUNs/1e6),
			megabytes(uint64(c.peakRSS)),
			strconv.FormatUint(lost, 10),
			fmt.Sprintf("%.2f, %.2f", median(o.detached, irqWorkPerRequest), median(o.attached, irqWorkPerRequest)),
		})
	}
	w.WriteString(table([]string{"Server", "BPF ns/req", "BPF calls/req", "collector CPU (of one core)",
		"collector CPU µs/req", "collector CPU, whole life", "collector peak RSS", "lost events, all attached runs",
		"IRQ work interrupts/req, detached and attached"}, rows))
	w.WriteString("\nIRQ work interrupts (/proc/interrupts IWI, whole machine, over the load; medians) are how a BPF program's ring-buffer output wakes the reader: " +
		"about one per request means reqprof's collector is woken for nearly every record, each wake-up an interrupt and a context switch.\n")
}

// writeProgramRunTimes writes each BPF program's run time and calls per
// request, a column per server, in the order of the first server's, then
// the programs only other servers' runs loaded; a server whose run did not
// load a program has "–" in its row.
func (b *bench) writeProgramRunTimes(w *strings.Builder) {
	fmt.Fprintf(w, "\nEach program's run time per request, in ns, and in brackets its calls per request, "+
		"in the order of the first server's run time; – where a run did not load the program:\n\n")
	header := []string{"Program"}
	var names []string
	for _, o := range b.overheads {
		header = append(header, o.server)
		for _, p := range o.bpf.programs {
			if !slices.Contains(names, p.name) {
				names = append(names, p.name)
			}
		}
	}
	var rows [][]string
	for _, name := range names {
		row := []string{name}
		for _, o := range b.overheads {
			cell := "–"
			if i := slices.IndexFunc(o.bpf.programs, func(q programRun) bool { return q.name == name }); i >= 0 {
				q, requests := o.bpf.programs[i], float64(o.bpf.requests)
				cell = fmt.Sprintf("%.0f (%.2f)", float64(q.runTime)/requests, float64(q.calls)/requests)
			}
			row = append(row, cell)
		}
		rows = append(rows, row)
	}
	w.WriteString(table(header, rows))
}

// othersShare is a trial's other processes' CPU as a share of the machine
// over a load of length d.
func (b *bench) othersShare(d time.Duration) func(trial) float64 {
	return func(t trial) float64 {
		return float64(t.othersCPUNs) / (float64(b.host.cores) * float64(d))
	}
}

// runsBesideOtherReqprofs says how many load runs had another reqprof's
// programs loaded when they ended.
func (b *bench) runsBesideOtherReqprofs() string {
	runs := slices.Concat(b.ladder, []trial{b.churned.trial})
	for _, o := range b.overheads {
		runs = slices.Concat(runs, o.detached, o.attached)
	}
	n := 0
	for _, t := range runs {
		if t.otherReqprofs > 0 {
			n++
		}
	}
	return fmt.Sprintf("%d of %d", n, len(runs))
}

func (b *bench) writeLadder(w *strings.Builder) {
	fmt.Fprintf(w, "\n## Scale\n\n### Request rate\n\n")
	fmt.Fprintf(w, "nginx under wrk with reqprof attached, %v per step, the connections doubling each step. "+
		"wrk is closed-loop and shares the two cores with nginx and reqprof, so the rate it reaches is the machine's ceiling for this load, "+
		"not reqprof's. Lost events are reqprof's lost_events: ring-buffer records, and thread or connection entries, it could not keep.\n\n", b.step)
	var rows [][]string
	for _, t := range b.ladder {
		rows = append(rows, []string{
			strconv.Itoa(t.conns), strconv.Itoa(min(2, t.conns)),
			thousands(int(t.load.perSecond)), thousands(t.load.requests), thousands(t.collector.requests),
			strconv.FormatUint(t.collector.lost, 10), strconv.Itoa(t.load.errors),
			fmt.Sprintf("%.2f", t.serverCPUPerRequestUs()), megabytes(t.collector.peakRSS),
			percent(b.othersShare(b.step)(t)),
		})
	}
	w.WriteString(table([]string{"Connections", "wrk threads", "req/s", "wrk requests", "reqprof requests",
		"lost events", "wrk errors", "nginx CPU µs/req", "collector peak RSS", "other processes' CPU"}, rows))
	best, top := b.lossFreeRate()
	fmt.Fprintf(w, "\nHighest rate with zero lost events: %s req/s; highest rate reached at all: %s req/s; "+
		"nginx alone reached %s req/s (overhead runs, median).",
		thousands(int(best)), thousands(int(top)), thousands(int(b.overheads[0].detachedRate())))
	if top < goalLossFreeRate {
		fmt.Fprintf(w, " %s req/s was not reachable with reqprof attached on this machine.", thousands(goalLossFreeRate))
	}
	w.WriteString("\n")
}

// lossFreeRate is the highest ladder rate with zero lost events, and the
// highest rate of the ladder.
func (b *bench) lossFreeRate() (lossFree, highest float64) {
	for _, t := range b.ladder {
		highest = max(highest, t.load.perSecond)
		if t.collector.lost == 0 {
			lossFree = max(lossFree, t.load.perSecond)
		}
	}
	return lossFree, highest
}

func (b *bench) writeManyConnections(w *strings.Builder) {
	m := b.many
	fmt.Fprintf(w, "\n### %s concurrent connections\n\n", thousands(b.connections))
	fmt.Fprintf(w, "With reqprof attached, a Go client opens %s keep-alive connections to nginx (at most %d dials at once), "+
		"each sending a request at once and then one every %v, and holds all of them open for %v in all. "+
		"reqprof's maps are sampled every second through its own descriptors.\n\n", thousands(b.connections), dialParallel, holdInterval, b.hold)
	w.WriteString(table([]string{"", ""}, [][]string{
		{"Connections opened", fmt.Sprintf("%s of %s, the last after %v", thousands(m.hold.opened), thousands(b.connections), m.hold.openTime.Round(time.Millisecond))},
		{"Requests answered (client)", thousands(m.hold.requests)},
		{"Requests counted (reqprof)", thousands(m.collector.requests)},
		{"Client errors", strconv.Itoa(m.hold.errors)},
		{"Lost events", strconv.FormatUint(m.collector.lost, 10)},
		{"Peak entries, connection map", thousands(m.peak.conns)},
		{"Peak kernel memory, connection map", megabytes(m.peak.connsKernelMemory)},
		{"Collector peak RSS (getrusage)", megabytes(m.collector.peakRSS)},
		{"Collector peak RSS while connections were open (sampled)", megabytes(m.peak.rss)},
		{"Collector CPU while the connections were open", fmt.Sprintf("%.0f ms in %v, %s of one core",
			float64(m.collector.windowCPUNs)/1e6, b.hold, percent(float64(m.collector.windowCPUNs)/float64(b.hold)))},
	}))
}

func (b *bench) writeChurn(w *strings.Builder) {
	c := b.churned
	fmt.Fprintf(w, "\n### A connection per request\n\n")
	fmt.Fprintf(w, "With reqprof attached, wrk (2 threads, %d connections, `Connection: close`) opens a new connection for every request "+
		"for %v; nginx closes each after its response. The collector is sampled every second; \"after\" is %v after the load stopped, "+
		"when every connection has closed, so any connection entry left then is one reqprof never freed.\n\n", churnConns, b.churn, settleTime)
	w.WriteString(table([]string{"", ""}, [][]string{
		{"Connections (= requests, wrk)", fmt.Sprintf("%s, %s/s", thousands(c.load.requests), thousands(int(c.load.perSecond)))},
		{"Requests counted (reqprof)", thousands(c.collector.requests)},
		{"wrk errors", strconv.Itoa(c.load.errors)},
		{"Lost events", strconv.FormatUint(c.collector.lost, 10)},
		{"nginx CPU per request", fmt.Sprintf("%.2f µs", c.serverCPUPerRequestUs())},
	}))
	w.WriteString("\n")
	first, last, top := c.samples[0], c.samples[len(c.samples)-1], c.maxSample()
	w.WriteString(table([]string{"", fmt.Sprintf("at %.0f s", first.at.Seconds()), "max", fmt.Sprintf("at %.0f s", last.at.Seconds()), "after"}, [][]string{
		{"Connection map entries", strconv.Itoa(first.conns), strconv.Itoa(top.conns), strconv.Itoa(last.conns), strconv.Itoa(c.after.conns)},
		{"Connection map kernel memory", megabytes(first.connsKernelMemory), megabytes(top.connsKernelMemory), megabytes(last.connsKernelMemory), megabytes(c.after.connsKernelMemory)},
		{"Collector RSS", megabytes(first.rss), megabytes(top.rss), megabytes(last.rss), megabytes(c.after.rss)},
	}))
	half := c.halfway()
	growth := func(from, to sample) float64 {
		span := (to.at - from.at).Seconds()
		if span <= 0 || c.load.perSecond <= 0 {
			return 0
		}
		return (float64(to.rss) - float64(from.rss)) / (c.load.perSecond * span)
	}
	fmt.Fprintf(w, "\nThe collector's RSS grew by %.0f bytes per request over the first half of the load (at %.0f s), "+
		"while it filled its sample of each target's requests (at most 100,000, for percentiles; counts and means are exact totals), "+
		"and by %.0f bytes per request over the second half.\n",
		growth(first, half), half.at.Seconds(), growth(half, last))
}

// halfway is the sample nearest the middle of the load.
func (c churnPhase) halfway() sample {
	first, last := c.samples[0], c.samples[len(c.samples)-1]
	mid := first.at + (last.at-first.at)/2
	best := first
	for _, x := range c.samples {
		if (x.at - mid).Abs() < (best.at - mid).Abs() {
			best = x
		}
	}
	return best
}

// maxSample is the largest of each figure over the load, each on its own.
func (c churnPhase) maxSample() sample {
	var top sample
	for _, x := range c.samples {
		top.rss = max(top.rss, x.rss)
		top.conns = max(top.conns, x.conns)
		top.connsKernelMemory = max(top.connsKernelMemory, x.connsKernelMemory)
	}
	return top
}

func (o overhead) detachedRate() float64 {
	return median(o.detached, func(t trial) float64 { return t.load.perSecond })
}

func (o overhead) attachedRate() float64 {
	return median(o.attached, func(t trial) float64 { return t.load.perSecond })
}

func (o overhead) throughputLoss() float64 { return 1 - o.attachedRate()/o.detachedRate() }

func (o overhead) detachedCPUUs() float64 { return median(o.detached, trial.serverCPUPerRequestUs) }

func (o overhead) attachedCPUUs() float64 { return median(o.attached, trial.serverCPUPerRequestUs) }

func (o overhead) addedCPUUs() float64 { return o.attachedCPUUs() - o.detachedCPUUs() }

// collectorMedians are the medians of the collector's figures over the
// attached runs, each figure on its own.
type collectorMedians struct {
	requests, windowCPUNs, totalCPUNs, peakRSS float64
}

func (o overhead) collectorMedians() collectorMedians {
	return collectorMedians{
		requests:    median(o.attached, func(t trial) float64 { return float64(t.collector.requests) }),
		windowCPUNs: median(o.attached, func(t trial) float64 { return float64(t.collector.windowCPUNs) }),
		totalCPUNs:  median(o.attached, func(t trial) float64 { return float64(t.collector.totalCPUNs) }),
		peakRSS:     median(o.attached, func(t trial) float64 { return float64(t.collector.peakRSS) }),
	}
}

// perRequestUs is ns over requests, in µs; a dash where the collector
// counted none (attached to an idle process).
func perRequestUs(ns, requests float64) string {
	if requests == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", ns/requests/1e3)
}

func irqWorkPerRequest(t trial) float64 { return float64(t.irqWork) / float64(t.load.requests) }

func median[T any](xs []T, f func(T) float64) float64 {
	values := make([]float64, len(xs))
	for i, x := range xs {
		values[i] = f(x)
	}
	slices.Sort(values)
	n := len(values)
	if n%2 == 1 {
		return values[n/2]
	}
	return (values[n/2-1] + values[n/2]) / 2
}

func percent(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func megabytes(bytes uint64) string { return fmt.Sprintf("%.1f MB", float64(bytes)/1e6) }

// thousands writes a count with separators: 50,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// table is a Markdown table with its columns padded to line up as plain
// text too; every column but the first is right-aligned.
func table(header []string, rows [][]string) string {
	widths := make([]int, len(header))
	for _, row := range append([][]string{header}, rows...) {
		for i, cell := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell), 3)
		}
	}
	var w strings.Builder
	line := func(cells []string) {
		for i, cell := range cells {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i == 0 {
				fmt.Fprintf(&w, "| %s%s ", cell, pad)
			} else {
				fmt.Fprintf(&w, "| %s%s ", pad, cell)
			}
		}
		w.WriteString("|\n")
	}
	line(header)
	for i, width := range widths {
		if i == 0 {
			fmt.Fprintf(&w, "|%s", strings.Repeat("-", width+2))
		} else {
			fmt.Fprintf(&w, "|%s:", strings.Repeat("-", width+1))
		}
	}
	w.WriteString("|\n")
	for _, row := range rows {
		line(row)
	}
	return w.String()
}
