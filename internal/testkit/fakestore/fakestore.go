// Package fakestore is the one fake store.Store of the tests: a real store
// (a memory store unless the test names another) behind switches a test
// flips while it runs, and counters of what reached it. It replaces the
// hand-made wrappers each package used to write (a store that is down, one
// that is busy for its first calls, one that holds a decision until the
// test releases it, one that records keys, one that counts admissions).
//
//	s := fakestore.New(t, fakestore.Config{})
//	s.Fail(fmt.Errorf("dial: %w", store.ErrUnavailable)) // down from now on
//	s.Fail(nil)                                          // back up
//	s.FailNext(2, store.ErrBusy)                         // busy for two decisions
//	h := s.Hold(fakestore.Ops(store.Take))               // hold every take
//	<-h.Arrived()                                        // one is held
//	h.Release()                                          // let them all go on
//
// Order of a decision: it is counted (Calls, Requests); with
// Config.FailDoneContext a done context fails it; a matching Hold holds it
// until released or until its context is done; an error set by FailNext or
// Fail fails it; Config.Before runs; the inner store decides; Config.After
// runs; an admitted take is counted (Admitted). Every method is safe for
// concurrent use.
package fakestore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/store"
)

// Config is what a test fixes of a fake store when it makes it. Zero
// fields are the defaults.
type Config struct {
	// Inner decides what the fake lets through; nil: a new memory store
	// (memstore.New(nil)), closed when the test ends.
	Inner store.Store
	// FailDoneContext fails a decision whose context is already done with
	// the context's error, as pgstore does (the memory store decides it).
	FailDoneContext bool
	// Before, if set, runs before each decision that reaches the inner
	// store, given the inner store (to change states behind the caller's
	// back, as a concurrent request would); an error it returns is the
	// decision's, and the inner store is not called.
	Before func(ctx context.Context, inner store.Store, req store.Request) error
	// After, if set, runs after each decision the inner store made, given
	// the inner store and the decision's result.
	After func(ctx context.Context, inner store.Store, req store.Request, d core.Decision, err error)
}

// Store is the fake. Make one with New.
type Store struct {
	cfg Config

	calls, resets, admitted atomic.Int64

	mu       sync.Mutex
	err      error // Fail
	nextErr  error // FailNext
	nextN    int
	holds    []*Hold
	requests []store.Request
}

var _ store.Store = (*Store)(nil)

// New returns a fake store over cfg.Inner (a new memory store when it is
// nil), which lets everything through until the test flips a switch.
func New(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.Inner == nil {
		m := memstore.New(nil)
		t.Cleanup(func() { m.Close() })
		cfg.Inner = m
	}
	return &Store{cfg: cfg}
}

// Inner returns the store the fake decides with.
func (s *Store) Inner() store.Store { return s.cfg.Inner }

// Fail makes every later Decide and Reset fail with err, until Fail(nil).
func (s *Store) Fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// FailNext makes the next n decisions fail with err (before an error set
// by Fail); those after go on.
func (s *Store) FailNext(n int, err error) {
	s.mu.Lock()
	s.nextN, s.nextErr = n, err
	s.mu.Unlock()
}

// Calls returns the number of Decide calls so far, failed ones included.
func (s *Store) Calls() int64 { return s.calls.Load() }

// Resets returns the number of Reset calls so far.
func (s *Store) Resets() int64 { return s.resets.Load() }

// Admitted returns the number of takes of a positive cost the inner store
// admitted so far.
func (s *Store) Admitted() int64 { return s.admitted.Load() }

// Requests returns a copy of every request Decide was called with, in the
// order of the calls.
func (s *Store) Requests() []store.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Match selects the decisions a Hold holds.
type Match func(store.Request) bool

// All matches every decision.
func All(store.Request) bool { return true }

// Ops matches the decisions of the given operations.
func Ops(ops ...store.Op) Match {
	return func(r store.Request) bool { return slices.Contains(ops, r.Op) }
}

// Hold holds decisions in the store, as a slow database would, until the
// test releases them or their context is done. Make one with Store.Hold
// or Store.HoldOnce.
type Hold struct {
	match   Match
	once    bool
	used    bool // a HoldOnce that held its decision
	arrived chan store.Request
	release chan struct{}
	done    sync.Once
}

// holdBuffer is how many arrivals a Hold keeps for the test to read; a
// decision that finds it full waits for the test to read one.
const holdBuffer = 4096

// Hold holds every later decision match selects, telling Arrived of each,
// until Release, or until the decision's context is done: the decision
// then fails with store.ErrUnavailable and the context's error, as a store
// whose database did not answer in time.
func (s *Store) Hold(match Match) *Hold { return s.hold(match, false) }

// HoldOnce is Hold for the first decision match selects only.
func (s *Store) HoldOnce(match Match) *Hold { return s.hold(match, true) }

func (s *Store) hold(match Match, once bool) *Hold {
	h := &Hold{match: match, once: once, arrived: make(chan store.Request, holdBuffer), release: make(chan struct{})}
	s.mu.Lock()
	s.holds = append(s.holds, h)
	s.mu.Unlock()
	return h
}

// Arrived receives each held decision's request as it is held.
func (h *Hold) Arrived() <-chan store.Request { return h.arrived }

// Release lets every decision h holds go on, and h hold no more. Calling
// it again does nothing.
func (h *Hold) Release() { h.done.Do(func() { close(h.release) }) }

// holdFor returns the Holds that hold req, marking a HoldOnce used.
func (s *Store) holdFor(req store.Request) []*Hold {
	s.mu.Lock()
	defer s.mu.Unlock()
	var hs []*Hold
	for _, h := range s.holds {
		if h.used || !h.match(req) {
			continue
		}
		select {
		case <-h.release:
			continue
		default:
		}
		h.used = h.once
		hs = append(hs, h)
	}
	return hs
}

// Decide implements store.Store, in the order the package doc gives.
func (s *Store) Decide(ctx context.Context, req store.Request, each []core.Decision) (int, core.Decision, error) {
	s.calls.Add(1)
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()
	if s.cfg.FailDoneContext {
		if err := ctx.Err(); err != nil {
			return 0, core.Decision{}, err
		}
	}
	for _, h := range s.holdFor(req) {
		select {
		case h.arrived <- req:
		case <-ctx.Done():
			return 0, core.Decision{}, fmt.Errorf("fakestore: held: %w: %w", store.ErrUnavailable, ctx.Err())
		}
		select {
		case <-h.release:
		case <-ctx.Done():
			return 0, core.Decision{}, fmt.Errorf("fakestore: held: %w: %w", store.ErrUnavailable, ctx.Err())
		}
	}
	if err := s.failure(true); err != nil {
		return 0, core.Decision{}, err
	}
	if s.cfg.Before != nil {
		if err := s.cfg.Before(ctx, s.cfg.Inner, req); err != nil {
			return 0, core.Decision{}, err
		}
	}
	i, d, err := s.cfg.Inner.Decide(ctx, req, each)
	if s.cfg.After != nil {
		s.cfg.After(ctx, s.cfg.Inner, req, d, err)
	}
	if err == nil && d.Allowed && req.Op == store.Take && req.Cost > 0 {
		s.admitted.Add(1)
	}
	return i, d, err
}

// failure returns the error the next call fails with, nil if none; a
// decision (decide) uses up one of FailNext's.
func (s *Store) failure(decide bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if decide && s.nextN > 0 {
		s.nextN--
		return s.nextErr
	}
	return s.err
}

// Reset implements store.Store: it fails with Fail's error, if set, and
// otherwise resets in the inner store.
func (s *Store) Reset(ctx context.Context, prefix, key string, names []string) error {
	s.resets.Add(1)
	if err := s.failure(false); err != nil {
		return err
	}
	return s.cfg.Inner.Reset(ctx, prefix, key, names)
}
