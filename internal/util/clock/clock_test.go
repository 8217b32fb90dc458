package clock

import (
	"testing"
	"time"
)

// TestCoarse: the coarse clock follows real time within about its
// resolution, never goes back, stops ticking when idle and restarts on the
// next reading.
func TestCoarse(t *testing.T) {
	c := NewCoarse(time.Millisecond)
	prev := c.Now()
	if d := System() - prev; d < -2000 || d > maxLag {
		t.Fatalf("first reading %d µs off the system clock", d)
	}
	deadline := time.Now().Add(100 * time.Millisecond)
	for time.Now().Before(deadline) {
		now := c.Now()
		if now < prev {
			t.Fatalf("went back: %d after %d", now, prev)
		}
		prev = now
	}
	// It follows the monotonic clock from the wall time of its start, so it
	// may differ from the wall clock by a few µs either way. The bound is
	// loose (a loaded machine may not run the ticker for a while): it
	// catches a ticker that stopped, not a slow one.
	if lag := System() - c.Now(); lag < -2000 || lag > maxLag {
		t.Fatalf("lags %d µs behind the system clock", lag)
	}
	// Idle: the ticker stops after idleAfter without readings.
	stopped := time.Now().Add(idleAfter + 2*time.Second)
	for (c.flags.Load()&running != 0) && time.Now().Before(stopped) {
		time.Sleep(50 * time.Millisecond)
	}
	if c.flags.Load()&running != 0 {
		t.Fatal("ticker still running while idle")
	}
	// The next reading restarts it and is current, not stale (stale would
	// be more than idleAfter + 1s behind).
	time.Sleep(time.Second)
	if lag := System() - c.Now(); lag < -2000 || lag > maxLag {
		t.Fatalf("after idle, lags %d µs", lag)
	}
	if !(c.flags.Load()&running != 0) {
		t.Fatal("ticker not restarted")
	}
}

func BenchmarkCoarse(b *testing.B) {
	c := NewCoarse(time.Millisecond)
	c.Now()
	b.ReportAllocs()
	for b.Loop() {
		c.Now()
	}
}

// maxLag bounds how far behind the system clock a reading may be in these
// tests, in µs: far more than any correct clock lags (about 1 ms for the
// coarse one), far less than a stopped ticker or a wrong base would.
const maxLag = 500_000

func BenchmarkSystem(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		System()
	}
}

// TestMonotonic: the monotonic clock starts at the wall clock and never
// goes back.
func TestMonotonic(t *testing.T) {
	prev := Monotonic()
	if d := System() - prev; d < -2000 || d > maxLag {
		t.Fatalf("first reading %d µs off the system clock", d)
	}
	for range 100_000 {
		now := Monotonic()
		if now < prev {
			t.Fatalf("went back: %d after %d", now, prev)
		}
		prev = now
	}
}
