package fakestore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/fakestore"
	"github.com/rlcore/rl/store"
)

var lim = core.Limit{Algorithm: core.FixedWindow, Limit: 2, Window: 60_000_000}

func req(key string, op store.Op) store.Request {
	return store.Request{Key: key, Op: op, Policy: store.MustPolicy([]string{"default"}, lim), Now: 1_000_000, Cost: 1}
}

func decide(s *fakestore.Store, ctx context.Context, key string, op store.Op) (core.Decision, error) {
	_, d, err := s.Decide(ctx, req(key, op), nil)
	return d, err
}

// TestSwitches: each switch, in turn, on one store; the counters follow.
func TestSwitches(t *testing.T) {
	ctx := context.Background()
	s := fakestore.New(t, fakestore.Config{})
	down := errors.New("down")
	steps := []struct {
		name    string
		flip    func()
		op      store.Op
		wantErr error
		allowed bool
	}{
		{"through", func() {}, store.Take, nil, true},
		{"failing", func() { s.Fail(down) }, store.Take, down, false},
		{"still failing", func() {}, store.Peek, down, false},
		{"healed", func() { s.Fail(nil) }, store.Take, nil, true},
		{"busy once", func() { s.FailNext(1, store.ErrBusy) }, store.Take, store.ErrBusy, false},
		{"denied after busy: the limit is 2", func() {}, store.Take, nil, false},
	}
	for _, st := range steps {
		st.flip()
		d, err := decide(s, ctx, "k", st.op)
		if !errors.Is(err, st.wantErr) || (st.wantErr == nil && err != nil) || d.Allowed != st.allowed {
			t.Fatalf("%s: %+v %v, want allowed %v, error %v", st.name, d, err, st.allowed, st.wantErr)
		}
	}
	if s.Calls() != int64(len(steps)) || s.Admitted() != 2 || len(s.Requests()) != len(steps) {
		t.Fatalf("calls %d admitted %d requests %d, want %d, 2, %d", s.Calls(), s.Admitted(), len(s.Requests()), len(steps), len(steps))
	}
	s.Fail(down)
	if err := s.Reset(ctx, "", "k", nil); !errors.Is(err, down) || s.Resets() != 1 {
		t.Fatalf("Reset while failing: %v (resets %d)", err, s.Resets())
	}
}

// TestHold: a held decision waits for Release, others pass; a HoldOnce
// holds one; a held decision whose context ends fails as unavailable.
func TestHold(t *testing.T) {
	ctx := context.Background()
	s := fakestore.New(t, fakestore.Config{})
	h := s.Hold(fakestore.Ops(store.Settle))
	done := make(chan error)
	go func() { _, err := decide(s, ctx, "held", store.Settle); done <- err }()
	if r := <-h.Arrived(); r.Key != "held" {
		t.Fatalf("arrived %q", r.Key)
	}
	if _, err := decide(s, ctx, "other", store.Take); err != nil {
		t.Fatalf("a take passes a hold of settles: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("the held settle returned before Release: %v", err)
	default:
	}
	h.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := decide(s, ctx, "after", store.Settle); err != nil {
		t.Fatalf("released, the hold holds no more: %v", err)
	}

	once := s.HoldOnce(fakestore.All)
	go func() { _, err := decide(s, ctx, "first", store.Take); done <- err }()
	<-once.Arrived()
	if _, err := decide(s, ctx, "second", store.Take); err != nil {
		t.Fatalf("HoldOnce held a second decision: %v", err)
	}
	once.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	s.Hold(fakestore.All) // never released
	cctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if _, err := decide(s, cctx, "k", store.Take); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a held decision past its deadline: %v, want unavailable and the deadline", err)
	}
}

// TestHooks: FailDoneContext, Before and After.
func TestHooks(t *testing.T) {
	var after []store.Op
	refused := errors.New("refused")
	s := fakestore.New(t, fakestore.Config{
		FailDoneContext: true,
		Before: func(ctx context.Context, inner store.Store, r store.Request) error {
			if r.Key == "refuse" {
				return refused
			}
			return nil
		},
		After: func(ctx context.Context, inner store.Store, r store.Request, d core.Decision, err error) {
			after = append(after, r.Op)
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := decide(s, ctx, "k", store.Take); !errors.Is(err, context.Canceled) {
		t.Fatalf("done context: %v", err)
	}
	if _, err := decide(s, context.Background(), "refuse", store.Take); !errors.Is(err, refused) {
		t.Fatalf("Before's error: %v", err)
	}
	if _, err := decide(s, context.Background(), "k", store.Peek); err != nil || len(after) != 1 || after[0] != store.Peek {
		t.Fatalf("After saw %v (%v), want the one decision that reached the inner store", after, err)
	}
}
