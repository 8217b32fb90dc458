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
	now    atomic.Int64
	flags  atomic.Uint32 // running | used
	mu     sync.Mutex
	res    time.Duration
	base   time.Time // wall + monotonic reading at start
	baseUS int64
}

// The flags of a Coarse clock.
const (
	running = 1 // the goroutine advances the clock
	used    = 2 // read since the goroutine last looked
)

const idleAfter = time.Second

// NewCoarse returns a coarse clock ticking every res (at least 100µs).
func NewCoarse(res time.Duration) *Coarse {
	res = max(res, 100*time.Microsecond)
	c := &Coarse{res: res, base: time.Now()}
	c.baseUS = c.base.UnixMicro()
	c.now.Store(c.baseUS)
	return c
}

// Now returns the time in µs since the Unix epoch: two atomic loads when
// the clock runs and was read since its last tick (small enough to inline).
func (c *Coarse) Now() int64 {
	if c.flags.Load() != running|used {
		return c.mark()
	}
	return c.now.Load()
}

// mark records a reading, starting the goroutine if it stopped.
func (c *Coarse) mark() int64 {
	if c.flags.Or(used)&running == 0 {
		return c.start()
	}
	return c.now.Load()
}

func (c *Coarse) read() int64 { return c.baseUS + time.Since(c.base).Microseconds() }

func (c *Coarse) start() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.read()
	c.advance(now)
	if c.flags.Load()&running == 0 {
		c.flags.Store(running | used)
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
		if c.flags.And(^uint32(used))&used != 0 {
			idle = 0
			continue
		}
		if idle += c.res; idle >= idleAfter {
			// Stop unless read meanwhile: a reading after this sees the
			// clock stopped and starts it again.
			c.mu.Lock()
			stopped := c.flags.CompareAndSwap(running, 0)
			c.mu.Unlock()
			if stopped {
				return
			}
		}
	}
}
