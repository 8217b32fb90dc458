package wasm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/await"
)

// The pool's blocking paths, driven by holding an instance with get.

func TestWaitForInstance(t *testing.T) {
	ctx := context.Background()
	p, err := New(ctx, Config{MaxInstances: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	in, err := p.get()
	if err != nil {
		t.Fatal(err)
	}
	l := core.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: 1000}
	done := make(chan error)
	go func() {
		_, _, err := p.Take(l, core.State{}, 0, 1)
		done <- err
	}()
	// The call is seen waiting for an instance (an event, not a time), and
	// has not completed.
	await.Until(t, "the call to wait for an instance", func() bool { return p.waiters.Load() == 1 })
	select {
	case err := <-done:
		t.Fatalf("a call completed while the only instance was held: %v", err)
	default:
	}
	p.put(in)
	if err := await.Recv(t, "the waiting call to get the returned instance", done); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Started != 1 || st.Instances != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCloseWaitsForCalls(t *testing.T) {
	ctx := context.Background()
	p, err := New(ctx, Config{MaxInstances: 1})
	if err != nil {
		t.Fatal(err)
	}
	in, err := p.get()
	if err != nil {
		t.Fatal(err)
	}
	// A caller waiting for an instance is released with ErrClosed.
	waiting := make(chan error)
	go func() {
		_, err := p.Peek(core.Limit{Algorithm: core.GCRA, Limit: 1, Window: 1}, core.State{}, 0, 1)
		waiting <- err
	}()
	await.Until(t, "the caller to wait for an instance", func() bool { return p.waiters.Load() == 1 })
	closed := make(chan error)
	go func() { closed <- p.Close(ctx) }()
	if err := <-waiting; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting caller: %v, want ErrClosed", err)
	}
	// A negative check: load can only hide a Close that returns early,
	// never fail this one.
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a call was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	p.put(in) // the call in flight ends
	if err := await.Recv(t, "Close to return after the call ended", closed); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Instances != 0 {
		t.Fatalf("stats after Close: %+v", st)
	}
}

func TestCloseGivesUpWithContext(t *testing.T) {
	p, err := New(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := p.get()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want DeadlineExceeded", err)
	}
	p.put(in) // late: the instance is closed, not pooled
	if st := p.Stats(); st.Instances != 0 || st.Idle != 0 {
		t.Fatalf("stats: %+v", st)
	}
}
