package collector_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/reqprof/reqprof/profile"
)

// TestBlockedIsTheSleepUnderConcurrency: with several threads of a
// thread-per-connection server sleeping at once on two CPUs, a timer that
// wakes one runs over whichever thread is on the CPU, and Go's runtime
// preempts threads with signals. Such wake-ups are no hand-off of the
// waker's request: each request's blocked time stays its own sleep. The
// mean is above the sleep by the timer's slack (50 µs), and with more
// threads than CPUs by the wait of Go's threads for a P after it.
func TestBlockedIsTheSleepUnderConcurrency(t *testing.T) {
	const sleep = 300 * time.Microsecond
	for _, conns := range []int{1, 4, 8} {
		t.Run(fmt.Sprintf("%d connections", conns), func(t *testing.T) {
			target, _ := runCalserver(t, conns, 2000, "--model", "threads", "--burn", "50us", "--sleep", sleep.String())
			short := 0
			for _, r := range target.Requests {
				if r.OffCPUNs < uint64(sleep)*9/10 {
					short++
				}
			}
			offcpu := meanUs(target.Requests, func(r profile.Request) uint64 { return r.OffCPUNs })
			t.Logf("blocked %.1f µs per request for a %v sleep; %d of %d requests blocked for less than 90%% of it", offcpu, sleep, short, len(target.Requests))
			// Every request sleeps its whole sleep, from arming the timer;
			// its thread is off the CPU from a little after that. A request
			// whose sleep was taken for another's (a wake-up handed on)
			// shows much less.
			if short*100 > len(target.Requests) {
				t.Errorf("%d of %d requests blocked for less than 90%% of their %v sleep", short, len(target.Requests), sleep)
			}
		})
	}
}
