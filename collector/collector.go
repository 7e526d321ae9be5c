// Package collector loads reqprof's BPF programs, attaches them to the
// target processes' scheduler, syscall and socket tracepoints, and decodes
// what they measured into profile types. It is the only package that knows
// about BPF.
package collector

import (
	"context"

	"golang.org/x/sys/unix"

	"github.com/reqprof/reqprof/profile"
)

// Target is one process to profile, or every process of a cgroup.
type Target struct {
	PID    int
	Label  string // optional name shown in reports
	Cgroup string // a cgroup v2 directory instead of PID: all its processes, as one target
}

// Run profiles the targets for one window and returns what it measured.
// Errors are one line each, ready to show to a user.
func Run(ctx context.Context, cfg Config) (profile.Run, error) {
	cfg = cfg.resolved()
	procs, err := openTargets(cfg.Targets)
	if err != nil {
		return profile.Run{}, err
	}
	defer func() {
		for _, p := range procs {
			unix.Close(p.pidfd)
		}
	}()
	if err := Preflight(); err != nil {
		return profile.Run{}, err
	}
	s, err := start(cfg, procs)
	if err != nil {
		return profile.Run{}, err
	}
	defer s.close()
	return s.profile(ctx, cfg)
}
