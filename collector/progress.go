package collector

import (
	"time"

	"github.com/reqprof/reqprof/profile"
)

// Progress is what the collector knows of an open window besides its
// finished requests (which Config.OnRequest hands out one by one): what
// was lost so far and what reqprof cost so far. Each figure is a total
// since the window opened, so it only grows within a window.
type Progress struct {
	// Elapsed is the time since the window opened.
	Elapsed time.Duration
	// Lost is, per target index, the records and events the programs
	// could not keep so far (ring buffer full, no room for a thread's or
	// a connection's state). Records the collector could not decode are
	// counted only in the window's result.
	Lost []uint64
	// Overhead is what reqprof cost so far: the collector's CPU since the
	// window opened, and its programs' run time while the kernel kept
	// statistics (BPFSampled of BPFWindow; see profile.Overhead).
	Overhead profile.Overhead
}

// progressPolls is how many polls of the window make one Progress: a
// second's worth.
const progressPolls = int(time.Second / pollInterval)

// BPFNsEstimate is the programs' run time over the whole of o's window,
// scaled up from the part of it the kernel kept statistics for; 0 when
// unknown.
func BPFNsEstimate(o profile.Overhead) uint64 {
	if !o.Measured {
		return 0
	}
	if o.BPFSampled <= 0 || o.BPFWindow <= o.BPFSampled {
		return o.BPFNs
	}
	return uint64(float64(o.BPFNs) * float64(o.BPFWindow) / float64(o.BPFSampled))
}
