// Package await lets a test wait for an event instead of a time: a
// condition that becomes true, a value on a channel. The only bound is the
// test's own deadline (go test -timeout): a machine slowed by load makes the
// wait longer, never the test fail, while an event that never comes still
// fails the test, naming what it waited for, before the deadline's panic.
//
//	await.Until(t, "the breaker to close", func() bool { return fo.State() == failover.Closed })
//	v := await.Recv(t, "the handler to start", started)
package await

import (
	"testing"
	"time"
)

// margin is kept before the test's deadline to fail with a message (and run
// the cleanups) rather than be stopped by go test's panic.
const margin = 30 * time.Second

// limit is when a wait gives up: shortly before t's deadline, or never
// (the zero time) when t has none (go test -timeout 0).
func limit(t testing.TB) time.Time {
	d, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return time.Time{}
	}
	dl, ok := d.Deadline()
	if !ok {
		return time.Time{}
	}
	// Keep a tenth of what is left, at most margin, for the failure.
	return dl.Add(-min(margin, time.Until(dl)/10))
}

// Until polls cond until it returns true. It fails t, naming what, only
// when the test's deadline is near.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	end := limit(t)
	for wait := time.Millisecond; !cond(); wait = min(2*wait, 50*time.Millisecond) {
		if !end.IsZero() && time.Now().After(end) {
			t.Fatalf("await: gave up waiting for %s at the test's deadline", what)
		}
		time.Sleep(wait)
	}
}

// Recv returns the next value from ch (the zero value if ch is closed). It
// fails t, naming what, only when the test's deadline is near.
func Recv[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	end := limit(t)
	if end.IsZero() {
		return <-ch
	}
	timer := time.NewTimer(time.Until(end))
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("await: gave up waiting for %s at the test's deadline", what)
		var zero T
		return zero
	}
}

// Done waits until ch is closed or sends, as Recv.
func Done[T any](t testing.TB, what string, ch <-chan T) {
	t.Helper()
	Recv(t, what, ch)
}
