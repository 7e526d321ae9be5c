package stdioserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reqprof/reqprof/internal/calserver"
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
func serveOutOfOrder(burn map[string]uint64, wait time.Duration) int {
	runtime.LockOSThread()
	var stats Stats
	stats.Calls, stats.CPUUs = map[string]uint64{}, map[string]float64{}
	total := map[string]time.Duration{}
	var waiting []parked
	var pending []byte // a line not complete yet
	buf := make([]byte, 64<<10)
	// Every ns of the thread is some call's: mark is where what has not
	// been given to a call yet starts.
	mark := calserver.ThreadCPU()
	answer := func(m message, cpu time.Duration, start time.Duration) bool {
		calserver.Burn(burn[m.Params.Name])
		out := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"ok"}]}}`+"\n", m.ID)
		if _, err := os.Stdout.WriteString(out); err != nil {
			return false
		}
		cpu += calserver.ThreadCPU() - start
		mark = calserver.ThreadCPU()
		total[m.Params.Name] += cpu
		stats.Calls[m.Params.Name]++
		stats.Requests++
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
			// The loop's wake-up for it is its own.
			if !answer(p.m, p.cpu, mark) {
				return 1
			}
		}
		if fds[0].Revents == 0 {
			continue
		}
		// The loop since the last call, and the read, are the calls it brings.
		readStart := mark
		n, err := unix.Read(0, buf)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if n <= 0 {
			break
		}
		readCPU := calserver.ThreadCPU() - readStart
		mark = calserver.ThreadCPU()
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
				waiting = append(waiting, parked{m: m, until: time.Now().Add(wait), cpu: share + calserver.ThreadCPU() - start})
				mark = calserver.ThreadCPU()
				continue
			}
			if !answer(m, share, start) {
				return 1
			}
		}
	}
	for name, n := range stats.Calls {
		stats.CPUUs[name] = float64(total[name].Nanoseconds()) / float64(n) / 1e3
	}
	json.NewEncoder(os.Stderr).Encode(stats)
	return 0
}
