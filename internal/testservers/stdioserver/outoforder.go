package stdioserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reqprof/reqprof/internal/demo/calserver"
)

// parked is a call waiting before it burns.
type parked struct {
	m     message
	until time.Time
	cpu   time.Duration // spent on it so far
}

// serveOutOfOrder is the event loop of --out-of-order: one thread polls
// stdin, answers the calls of each read last first, and parks tool slow
// for wait, answering what comes meanwhile.
//
// Every ns of the thread is some call's, by the rule the calibrated server
// keeps (calserver's ledger): what the loop runs after a call, up to its
// next read, is the call's it last worked on: the tail of a call answered,
// or, for a call set aside, its wait for the next input. A read's own cost
// is shared by the calls it completes; what runs between two responses
// with no read between is the second's.
func serveOutOfOrder(burn map[string]uint64, wait time.Duration) int {
	runtime.LockOSThread()
	var stats Stats
	stats.Calls, stats.CPUUs = map[string]uint64{}, map[string]float64{}
	total := map[string]time.Duration{}
	var waiting []*parked
	var pending []byte // a line not complete yet
	buf := make([]byte, 64<<10)
	// mark is where what has not been given to a call yet starts; until
	// the next read it goes to the call last worked on: a tool answered
	// (tailOf) or a call parked (parkedLast), or none before the first.
	mark := calserver.ThreadCPU()
	begin := mark
	tailOf := ""
	var parkedLast *parked
	answer := func(m message, cpu time.Duration, start time.Duration) bool {
		calserver.Burn(burn[m.Params.Name])
		out := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"ok"}]}}`+"\n", m.ID)
		if _, err := os.Stdout.WriteString(out); err != nil {
			return false
		}
		mark = calserver.ThreadCPU()
		cpu += mark - start
		total[m.Params.Name] += cpu
		stats.Calls[m.Params.Name]++
		stats.Requests++
		tailOf, parkedLast = m.Params.Name, nil
		return true
	}
	for {
		timeout := -1
		if len(waiting) > 0 {
			timeout = max(0, int(time.Until(waiting[0].until).Milliseconds())+1)
		}
		fds := []unix.PollFd{{Fd: 0, Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, timeout); err != nil && err != unix.EINTR {
			break
		}
		// The parked calls whose wait is over.
		for len(waiting) > 0 && !time.Now().Before(waiting[0].until) {
			p := waiting[0]
			waiting = waiting[1:]
			if p == parkedLast {
				parkedLast = nil // what ran since mark is its wake-up: answer takes it
			}
			// The loop's wake-up for it is its own.
			if !answer(p.m, p.cpu, mark) {
				return 1
			}
		}
		if fds[0].Revents == 0 {
			continue
		}
		// The loop since mark, up to the read, is the last call's.
		readStart := calserver.ThreadCPU()
		switch {
		case parkedLast != nil:
			parkedLast.cpu += readStart - mark
		case tailOf != "":
			total[tailOf] += readStart - mark
		}
		mark = readStart
		n, err := unix.Read(0, buf)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if n <= 0 {
			break
		}
		mark = calserver.ThreadCPU()
		readCPU := mark - readStart
		pending = append(pending, buf[:n]...)
		var lines [][]byte
		for {
			i := bytes.IndexByte(pending, '\n')
			if i < 0 {
				break
			}
			lines = append(lines, append([]byte(nil), pending[:i+1]...))
			pending = pending[i+1:]
		}
		// Last first: the read's cost shared by the lines it completed.
		for i := len(lines) - 1; i >= 0; i-- {
			share := readCPU / time.Duration(len(lines))
			if i == 0 {
				share += readCPU % time.Duration(len(lines))
			}
			var m message
			if json.Unmarshal(lines[i], &m) != nil || len(m.ID) == 0 {
				if len(m.ID) == 0 {
					stats.Notifications++
				}
				continue // its cost goes to the next call
			}
			start := mark
			if m.Params.Name == "slow" {
				until := time.Now().Add(wait)
				mark = calserver.ThreadCPU()
				p := &parked{m: m, until: until, cpu: share + mark - start}
				waiting = append(waiting, p)
				tailOf, parkedLast = "", p
				continue
			}
			if !answer(m, share, start) {
				return 1
			}
		}
	}
	var assigned time.Duration
	for _, d := range total {
		assigned += d
	}
	stats.UnassignedUs = float64((calserver.ThreadCPU() - begin - assigned).Nanoseconds()) / 1e3
	for name, n := range stats.Calls {
		stats.CPUUs[name] = float64(total[name].Nanoseconds()) / float64(n) / 1e3
	}
	json.NewEncoder(os.Stderr).Encode(stats)
	return 0
}
