package live

import (
	"sync"
	"time"
)

// refreshInterval is how often a Monitor shows a frame.
const refreshInterval = time.Second

// Monitor shows a View of a Tally once a second while a window is open:
// what each target finished over the last second.
type Monitor struct {
	tally    *Tally
	view     *View
	duration time.Duration
	top      int

	mu     sync.Mutex
	lost   []uint64 // by the tally's target order, so far in the window
	stop   chan struct{}
	done   chan struct{}
	opened time.Time
}

// NewMonitor shows view of tally over windows of duration (0: until
// stopped), with the top busiest routes of each target.
func NewMonitor(tally *Tally, view *View, duration time.Duration, top int) *Monitor {
	return &Monitor{tally: tally, view: view, duration: duration, top: top}
}

// SetLost takes the events lost so far in the window, per target in the
// order the tally first named them.
func (m *Monitor) SetLost(lost []uint64) {
	m.mu.Lock()
	m.lost = append(m.lost[:0], lost...)
	m.mu.Unlock()
}

// Start shows frames from now on, as a window opens.
func (m *Monitor) Start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop != nil {
		return
	}
	m.stop, m.done, m.opened, m.lost = make(chan struct{}), make(chan struct{}), time.Now(), nil
	go m.loop(m.stop, m.done, m.opened)
}

func (m *Monitor) loop(stop, done chan struct{}, opened time.Time) {
	defer close(done)
	tick := time.NewTicker(refreshInterval)
	defer tick.Stop()
	prev, prevAt := m.tally.Snapshot(), time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			snap := m.tally.Snapshot()
			m.mu.Lock()
			lost := append([]uint64(nil), m.lost...)
			m.mu.Unlock()
			m.view.Show(FrameOf(snap.Sub(prev), now.Sub(prevAt), now.Sub(opened), m.duration, lost, m.top))
			prev, prevAt = snap, now
		}
	}
}

// Stop stops showing frames, as the window closes, and takes the last one
// off a terminal.
func (m *Monitor) Stop() {
	m.mu.Lock()
	stop, done := m.stop, m.done
	m.stop, m.done = nil, nil
	m.mu.Unlock()
	if stop == nil {
		return
	}
	close(stop)
	<-done
	m.view.Clear()
}
