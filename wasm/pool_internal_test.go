package wasm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlcore/rl/core"
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
	select {
	case err := <-done:
		t.Fatalf("a call completed while the only instance was held: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	p.put(in)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting call did not get the returned instance")
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
	time.Sleep(20 * time.Millisecond)
	closed := make(chan error)
	go func() { closed <- p.Close(ctx) }()
	if err := <-waiting; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting caller: %v, want ErrClosed", err)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a call was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	p.put(in) // the call in flight ends
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return after the call ended")
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
