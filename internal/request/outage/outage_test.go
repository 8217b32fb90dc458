package outage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rlcore/rl/store"
)

var (
	timeout = fmt.Errorf("decide: %w: %w", store.ErrUnavailable, context.DeadlineExceeded)
	down    = fmt.Errorf("dial: %w", store.ErrUnavailable)
	busy    = fmt.Errorf("acquire: %w", store.ErrBusy)
	other   = errors.New("protocol error")
	// A client's deadline that is not the store's: not ErrUnavailable.
	clientDeadline = fmt.Errorf("wait: %w", context.DeadlineExceeded)
)

// step is one event of a Detector's history: a decision begins (begin, its
// token kept under name), completes (success), or fails with err (the
// decision named), expecting want.
type step struct {
	op   string // "begin", "success", "fail"
	name string
	err  error
	want bool
}

func begin(names ...string) []step {
	var s []step
	for _, n := range names {
		s = append(s, step{op: "begin", name: n})
	}
	return s
}

func fail(name string, err error, want bool) step { return step{"fail", name, err, want} }

var success = step{op: "success"}

func join(parts ...any) []step {
	var s []step
	for _, p := range parts {
		switch p := p.(type) {
		case step:
			s = append(s, p)
		case []step:
			s = append(s, p...)
		}
	}
	return s
}

func TestDetectorRule(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a non-timeout unavailable is an outage at once", join(begin("a"), fail("a", down, true))},
		{"busy is never an outage", join(begin("a", "b", "c", "d"), fail("a", busy, false), fail("b", busy, false), fail("c", busy, false), fail("d", busy, false))},
		{"busy does not count toward timeouts", join(begin("a", "b", "c"), fail("a", busy, false), fail("b", timeout, false), fail("c", timeout, false))},
		{"another error is not an outage", join(begin("a"), fail("a", other, false))},
		{"a client's deadline is not the store's", join(begin("a", "b", "c"), fail("a", clientDeadline, false), fail("b", clientDeadline, false), fail("c", clientDeadline, false))},
		{"3 timeouts with no success since they began open", join(begin("a", "b", "c", "d"), fail("a", timeout, false), fail("b", timeout, false), fail("c", timeout, true), fail("d", timeout, true))},
		{"timeouts begun one after another, no success, open", join(begin("a"), fail("a", timeout, false), begin("b"), fail("b", timeout, false), begin("c"), fail("c", timeout, true))},
		{"a success resets the count", join(begin("a", "b"), fail("a", timeout, false), fail("b", timeout, false), success,
			begin("c", "d", "e"), fail("c", timeout, false), fail("d", timeout, false), fail("e", timeout, true))},
		{"a burst begun before a success does not open", join(begin("a", "b", "c", "d", "e", "f"), success,
			fail("a", timeout, false), fail("b", timeout, false), fail("c", timeout, false), fail("d", timeout, false), fail("e", timeout, false), fail("f", timeout, false))},
		{"a burst straddling a success: only the ones begun after it count", join(begin("a", "b", "c"), success, begin("d", "e"),
			fail("a", timeout, false), fail("d", timeout, false), fail("b", timeout, false), fail("e", timeout, false), fail("c", timeout, false), begin("f"), fail("f", timeout, true))},
		{"a stale timeout does not add to the count", join(begin("old"), success, begin("a", "b"), fail("a", timeout, false), fail("old", timeout, false), fail("b", timeout, false), begin("c"), fail("c", timeout, true))},
		{"an outage error does not count as a timeout", join(begin("a", "b", "c"), fail("a", timeout, false), fail("b", down, true), fail("c", timeout, false))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d Detector
			tokens := map[string]Token{}
			for i, s := range tc.steps {
				switch s.op {
				case "begin":
					tokens[s.name] = d.Begin()
				case "success":
					d.Success()
				case "fail":
					tok, ok := tokens[s.name]
					if !ok {
						t.Fatalf("step %d: %q never began", i, s.name)
					}
					if got := d.Outage(tok, s.err); got != s.want {
						t.Fatalf("step %d: Outage(%s, %v) = %v, want %v", i, s.name, s.err, got, s.want)
					}
				}
			}
		})
	}
}

// The count saturates: a run of timeouts far longer than any counter
// still answers outage, and one success still resets it.
func TestDetectorSaturates(t *testing.T) {
	var d Detector
	begun := d.Begin()
	for i := 1; i <= 1000; i++ {
		if got, want := d.Outage(begun, timeout), i >= Timeouts; got != want {
			t.Fatalf("timeout %d: Outage = %v, want %v", i, got, want)
		}
	}
	if n := d.state.Load() & (1<<countBits - 1); n != Timeouts {
		t.Fatalf("count %d, want it saturated at %d", n, Timeouts)
	}
	d.Success()
	begun = d.Begin()
	if d.Outage(begun, timeout) {
		t.Fatal("after a success, one timeout is an outage")
	}
}

// Concurrent decisions: a burst begun before a success never opens
// however it interleaves, and a burst with none opens for all but the
// first Timeouts-1 of its timeouts.
func TestDetectorConcurrent(t *testing.T) {
	const n = 64
	var d Detector
	run := func(beforeFail func()) (outages int64) {
		var began, wg sync.WaitGroup
		var count atomic.Int64
		release := make(chan struct{})
		began.Add(n)
		for range n {
			wg.Go(func() {
				tok := d.Begin()
				began.Done()
				<-release
				if d.Outage(tok, timeout) {
					count.Add(1)
				}
			})
		}
		began.Wait()
		beforeFail()
		close(release)
		wg.Wait()
		return count.Load()
	}
	// Successes of other decisions race the burst, each after it began.
	var others sync.WaitGroup
	got := run(func() {
		for range 8 {
			others.Go(d.Success)
		}
		others.Wait()
	})
	if got != 0 {
		t.Fatalf("burst begun before successes: %d outages, want 0", got)
	}
	if got := run(func() {}); got != n-(Timeouts-1) {
		t.Fatalf("burst with no success: %d outages, want %d", got, n-(Timeouts-1))
	}
	// Successes and timeouts interleaved at random: the detector stays
	// consistent (race detector) and the count never passes Timeouts.
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for range 100 {
				tok := d.Begin()
				if i%2 == 0 {
					d.Success()
				} else {
					d.Outage(tok, timeout)
				}
			}
		})
	}
	wg.Wait()
	if c := d.state.Load() & (1<<countBits - 1); c > Timeouts {
		t.Fatalf("count %d passed %d", c, Timeouts)
	}
}

func BenchmarkDetectorSuccess(b *testing.B) {
	var d Detector
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d.Begin()
			d.Success()
		}
	})
}
