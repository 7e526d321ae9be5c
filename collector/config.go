package collector

import (
	"slices"
	"time"

	"github.com/reqprof/reqprof/profile"
)

// Config says what to profile and for how long. Its zero values are
// defaults, decided in one place (resolved) when Run starts.
type Config struct {
	Targets []Target
	// Duration bounds the window; zero means until ctx is done or every
	// target has exited.
	Duration time.Duration
	// OnAttached, if set, is called once every program is attached and
	// counting, with a one-line description, so load can start after it.
	OnAttached func(line string)
	// CaptureBytes is how many bytes of each request's first read are
	// captured to name it (route, RPC method); 0 means MaxCaptureBytes,
	// and NoPayload makes it 0.
	// The bytes never leave the collector: only the derived name does.
	CaptureBytes int
	// NoPayload captures nothing: requests are named by port only.
	NoPayload bool
	// Gross keeps reqprof's own cost in the figures as observed: by
	// default what its programs cost in a request's context is taken out
	// of its CPU, user/kernel split and kernel breakdown. Either way it
	// is measured and stated (profile.Target.SelfCost, Request.SelfNs).
	Gross bool
	// Lite attaches no program to the syscall, interrupt and page fault
	// tracepoints, which run on every syscall of the machine: a mode for
	// live production hosts. A socket operation is a request's boundary;
	// CPU per request, latency, waits and routes stay exact; the
	// user/kernel split is estimated from the kernel's tick accounting;
	// there is no kernel breakdown, no page fault count, no connection
	// setup, and no stdio requests (profile.Run.Lite).
	Lite bool
	// Stacks samples the targets' threads' stacks on each CPU, StackHz
	// times a second (DefaultStackHz when 0), each sample with the request
	// it ran for: profile.Target.Stacks.
	Stacks  bool
	StackHz int
	// FollowChildren adds each target's child processes, present and
	// future, to it: a pre-fork server (nginx, gunicorn, PHP-FPM) is
	// profiled through its master. A cgroup target sets it.
	FollowChildren bool
	// Stdio says whether requests on a target's stdin, answered on its
	// stdout, are followed (MCP's stdio transport): by default when stdin
	// is a pipe, FIFO or socket.
	Stdio StdioMode
	// OnRequest, if set, is handed each finished request as it is
	// counted, with its target's index in Targets, so that a caller can
	// keep figures while the window runs (reqprof serve, the live view).
	// It is called from the goroutine that reads the ring buffer, up to
	// some 150,000 times a second: it must be quick and never block, or
	// records are lost. The request's strings are interned: they may be
	// kept.
	OnRequest func(target int, r profile.Request)
	// Runtime names how every target resumes a request whose backend
	// answered (a key of Runtimes); "" detects it per target.
	Runtime string
	// Role says what every target's outbound connections are: "client"
	// or "both" (each call on them a request of its own, named with its
	// peer), "server" (backends of the requests it serves); "" detects it
	// per target (a client when it serves nothing). See Roles.
	Role string
	// OnProgress, if set, is called about once a second while the window
	// is open with what the collector knows so far besides finished
	// requests (see Progress).
	OnProgress func(Progress)
	// NoSample keeps no sample of the finished requests (the result's
	// Requests are empty, its totals exact), for a caller that takes its
	// figures from OnRequest: the sample is some 15 MB a target.
	NoSample bool
}

// StdioMode says when a target's stdin and stdout carry requests.
type StdioMode int

const (
	StdioAuto StdioMode = iota // when stdin is a pipe, FIFO or socket
	StdioOn                    // unless stdin is a terminal
	StdioOff
)

// chunkBytes is how many bytes of a request beyond its capture the
// programs send on, so that requests pipelined behind its first are
// counted and named (HTTP/2 connections send every byte): enough for 16
// pipelined requests of 500 bytes, a copy of 1 to 2 µs for a request that
// brings that much or more.
const chunkBytes = 8192

// resolved is cfg with its defaults and derived fields decided, the one
// place they are: Run works from it, and what it hands the programs
// (bpfConfig) is read from it as it is.
func (cfg Config) resolved() Config {
	switch {
	case cfg.NoPayload:
		cfg.CaptureBytes = 0
	case cfg.CaptureBytes <= 0:
		cfg.CaptureBytes = MaxCaptureBytes
	}
	switch {
	case !cfg.Stacks:
		cfg.StackHz = 0
	case cfg.StackHz == 0:
		cfg.StackHz = DefaultStackHz
	}
	// A cgroup target is every process of its cgroup: those they fork
	// join it from their first event, where the poll (refreshCgroup)
	// would find them a poll later.
	if slices.ContainsFunc(cfg.Targets, func(t Target) bool { return t.Cgroup != "" }) {
		cfg.FollowChildren = true
	}
	return cfg
}

// bpfConfig is what the programs are fixed with before load, from a
// resolved Config.
func (cfg Config) bpfConfig() reqprofConfig {
	bc := reqprofConfig{CaptureBytes: uint32(cfg.CaptureBytes)}
	if !cfg.NoPayload {
		bc.ChunkBytes = chunkBytes
	}
	if cfg.FollowChildren {
		bc.FollowChildren = 1
	}
	if cfg.Lite {
		bc.Lite = 1
	}
	if testHideSwitchIns {
		bc.HideSwitchIns = 1
	}
	return bc
}

// testHideSwitchIns, when set by a test, has the programs see no switch-in
// of a target's thread, as where the kernel runs no tracepoint for a switch.
var testHideSwitchIns bool
