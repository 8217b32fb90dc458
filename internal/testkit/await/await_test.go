package await

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// fakeT is a testing.TB whose deadline the test chooses and whose Fatalf
// only records.
type fakeT struct {
	testing.TB
	deadline time.Time
	failed   atomic.Bool
}

// The embedded testing.TB is nil: only these methods are called.
func (f *fakeT) Helper()                           {}
func (f *fakeT) Deadline() (time.Time, bool)       { return f.deadline, true }
func (f *fakeT) Fatalf(format string, args ...any) { f.failed.Store(true); runtime.Goexit() }

func TestUntilWaitsForTheEvent(t *testing.T) {
	var n atomic.Int64
	go func() {
		for range 5 {
			time.Sleep(time.Millisecond)
			n.Add(1)
		}
	}()
	Until(t, "five ticks", func() bool { return n.Load() == 5 })
}

func TestRecv(t *testing.T) {
	ch := make(chan int, 1)
	go func() { ch <- 7 }()
	if v := Recv(t, "a value", ch); v != 7 {
		t.Fatalf("Recv = %d, want 7", v)
	}
	done := make(chan struct{})
	close(done)
	Done(t, "a closed channel", done)
}

// A wait for an event that never comes fails the test once its deadline
// is near (a tenth of what was left before it), and not before.
func TestGivesUpAtTheDeadline(t *testing.T) {
	for name, wait := range map[string]func(testing.TB){
		"Until": func(t testing.TB) { Until(t, "never", func() bool { return false }) },
		"Recv":  func(t testing.TB) { Recv(t, "never", make(chan int)) },
	} {
		start := time.Now()
		f := &fakeT{deadline: start.Add(time.Second)}
		done := make(chan struct{})
		go func() { defer close(done); wait(f) }() // Fatalf ends the goroutine, as testing's does
		<-done
		if !f.failed.Load() {
			t.Fatalf("%s returned without the event and without failing", name)
		}
		if took := time.Since(start); took < 900*time.Millisecond {
			t.Fatalf("%s gave up after %s, before 0.9 of the time left", name, took)
		}
	}
}
