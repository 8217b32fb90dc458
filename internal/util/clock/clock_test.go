package clock

import (
	"testing"
	"time"

	"github.com/rlcore/rl/internal/testkit/await"
)

// TestCoarse: the coarse clock follows real time within about its
// resolution, never goes back, stops ticking when idle and restarts on the
// next reading.
//
// No bound here depends on how fast the machine is: a reading is compared
// with system readings taken just before and after it (load only widens
// that bracket), and a running ticker is proven by the clock catching up
// with a system reading, which a stopped ticker never does.
func TestCoarse(t *testing.T) {
	c := NewCoarse(time.Millisecond)
	prev := bracketed(t, "first reading", c.Now)
	deadline := time.Now().Add(100 * time.Millisecond)
	for time.Now().Before(deadline) {
		now := c.Now()
		if now < prev {
			t.Fatalf("went back: %d after %d", now, prev)
		}
		prev = now
	}
	// It follows the monotonic clock from the wall time of its start, so it
	// may differ from the wall clock by a few µs either way (skew).
	s := System()
	await.Until(t, "the coarse clock to catch up with the system clock (a ticker that stopped never does)", func() bool {
		return c.Now() >= s-skew
	})
	// Idle: the ticker stops after idleAfter without readings.
	await.Until(t, "the ticker to stop while idle", func() bool { return c.flags.Load()&running == 0 })
	// The next reading restarts it and is current, not stale (stale would
	// be more than a second behind).
	time.Sleep(time.Second)
	bracketed(t, "after idle", c.Now)
	if !(c.flags.Load()&running != 0) {
		t.Fatal("ticker not restarted")
	}
}

// skew is how far, in µs, the clocks here may differ from the wall clock
// (they follow the monotonic clock from a wall-clock start).
const skew = 2000

// bracketed reads read between two readings of the system clock and fails
// t when it is outside them by more than skew: a stale or a wrong reading.
func bracketed(t *testing.T, what string, read func() int64) int64 {
	t.Helper()
	before := System()
	v := read()
	after := System()
	if v < before-skew || v > after+skew {
		t.Fatalf("%s %d µs: outside the system clock's %d..%d", what, v, before, after)
	}
	return v
}

func BenchmarkCoarse(b *testing.B) {
	c := NewCoarse(time.Millisecond)
	c.Now()
	b.ReportAllocs()
	for b.Loop() {
		c.Now()
	}
}

func BenchmarkSystem(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		System()
	}
}

// TestMonotonic: the monotonic clock starts at the wall clock and never
// goes back.
func TestMonotonic(t *testing.T) {
	prev := bracketed(t, "first reading", Monotonic)
	for range 100_000 {
		now := Monotonic()
		if now < prev {
			t.Fatalf("went back: %d after %d", now, prev)
		}
		prev = now
	}
}
