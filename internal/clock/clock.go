// Package clock provides the limiter's clocks: microseconds since the Unix
// epoch, read cheaply.
package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// System returns the wall clock in µs since the Unix epoch (time.Now).
func System() int64 { return time.Now().UnixMicro() }

var monoBase = sync.OnceValue(func() time.Time { return time.Now() })

// Monotonic returns µs since the Unix epoch as the wall clock read at the
// first call plus the monotonic time elapsed since: wall-clock steps (NTP,
// an operator) do not move it, so it suits measuring intervals.
func Monotonic() int64 {
	b := monoBase()
	return b.UnixMicro() + time.Since(b).Microseconds()
}

// Coarse is a clock that a background goroutine advances every Resolution,
// so a reading is one atomic load. Its time is the wall clock at the first
// reading plus the monotonic time elapsed since, so wall-clock steps (NTP,
// an operator) do not move it; it lags real time by at most about one
// Resolution. The goroutine runs only while the clock is read: after
// idleAfter without readings it stops, and the next reading restarts it.
type Coarse struct {
	now     atomic.Int64
	running atomic.Bool
	used    atomic.Bool
	mu      sync.Mutex
	res     time.Duration
	base    time.Time // wall + monotonic reading at start
	baseUS  int64
}

const idleAfter = time.Second

// NewCoarse returns a coarse clock ticking every res (at least 100µs).
func NewCoarse(res time.Duration) *Coarse {
	res = max(res, 100*time.Microsecond)
	c := &Coarse{res: res, base: time.Now()}
	c.baseUS = c.base.UnixMicro()
	c.now.Store(c.baseUS)
	return c
}

// Now returns the time in µs since the Unix epoch.
func (c *Coarse) Now() int64 {
	if !c.running.Load() {
		return c.start()
	}
	if !c.used.Load() {
		c.used.Store(true)
	}
	return c.now.Load()
}

func (c *Coarse) read() int64 { return c.baseUS + time.Since(c.base).Microseconds() }

func (c *Coarse) start() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.read()
	c.advance(now)
	if !c.running.Load() {
		c.running.Store(true)
		c.used.Store(true)
		go c.tick()
	}
	return c.now.Load()
}

// advance moves the clock forward to now, never back.
func (c *Coarse) advance(now int64) {
	for {
		old := c.now.Load()
		if now <= old || c.now.CompareAndSwap(old, now) {
			return
		}
	}
}

func (c *Coarse) tick() {
	t := time.NewTicker(c.res)
	defer t.Stop()
	idle := time.Duration(0)
	for range t.C {
		c.advance(c.read())
		if c.used.Swap(false) {
			idle = 0
			continue
		}
		if idle += c.res; idle >= idleAfter {
			c.mu.Lock()
			if !c.used.Load() {
				c.running.Store(false)
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
		}
	}
}
