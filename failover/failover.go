// Package failover is a store.Store that decides on a primary (shared) store
// and, while the primary is unavailable, on a fallback (usually memstore),
// behind a circuit breaker.
//
// Closed: every call goes to the primary. A call that fails with
// store.ErrUnavailable (down, timed out) is answered by the fallback
// instead, and after Threshold such failures in a row the circuit opens.
// Open: calls go straight to the fallback, without waiting on the primary.
// After Cooldown one call probes the primary (half-open): success closes the
// circuit, failure opens it for another Cooldown.
//
// The fallback's counts are local to the process and start fresh: during an
// outage each instance enforces the limits on its own, and after recovery
// the primary's state resumes where it was. That is the trade-off of
// failover against failing open (no limit at all) or closed (no service).
package failover

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/util/clock"
	"github.com/rlcore/rl/store"
)

// State is the circuit's state.
type State int

// The circuit states.
const (
	Closed State = iota
	Open
	HalfOpen
)

func (s State) String() string {
	return [...]string{"closed", "open", "half-open"}[s]
}

// Config configures a Store.
type Config struct {
	// Primary and Fallback are required.
	Primary, Fallback store.Store
	// Threshold is how many unavailable errors in a row open the circuit.
	// Default 3.
	Threshold int
	// Cooldown is how long the circuit stays open before a probe. Default 5s.
	Cooldown time.Duration
	// Timeout bounds each call to the primary (0: only the caller's
	// context). A slow primary then counts as unavailable.
	Timeout time.Duration
	// OnChange, if set, hears every change of the circuit's state.
	OnChange func(from, to State)
	// OnFallback, if set, hears every call answered by the fallback and the
	// error that sent it there (nil while the circuit is open).
	OnFallback func(err error)
	// Clock times the cooldown. Default: the monotonic system clock (a
	// wall-clock step does not shorten or stretch a cooldown).
	Clock store.Clock
}

// Store is the failover store.Store.
type Store struct {
	cfg      Config
	mu       sync.Mutex
	state    State
	failures int
	openedAt int64 // µs, by Clock
	probing  bool
}

var _ store.Store = (*Store)(nil)

// New returns a Store.
func New(cfg Config) (*Store, error) {
	if cfg.Primary == nil || cfg.Fallback == nil {
		return nil, errors.New("failover: Primary and Fallback are required")
	}
	if cfg.Threshold <= 0 {
		cfg.Threshold = 3
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = 5 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Monotonic
	}
	return &Store{cfg: cfg}, nil
}

// State returns the circuit's state.
func (s *Store) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// route decides where a call goes: true for the primary. A probe call is
// marked so that its outcome moves the circuit.
func (s *Store) route() (primary, probe bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case Closed:
		return true, false
	case Open:
		if s.cfg.Clock()-s.openedAt >= s.cfg.Cooldown.Microseconds() && !s.probing {
			s.set(HalfOpen)
			s.probing = true
			return true, true
		}
	}
	return false, false
}

func (s *Store) set(to State) {
	if from := s.state; from != to {
		s.state = to
		if s.cfg.OnChange != nil {
			s.cfg.OnChange(from, to)
		}
	}
}

// done records the outcome of a primary call.
func (s *Store) done(probe bool, err error) {
	unavailable := errors.Is(err, store.ErrUnavailable)
	s.mu.Lock()
	defer s.mu.Unlock()
	if probe {
		s.probing = false
	}
	switch {
	case !unavailable:
		s.failures = 0
		s.set(Closed)
	case probe || s.state == Closed:
		s.failures++
		if probe || s.failures >= s.cfg.Threshold {
			s.openedAt = s.cfg.Clock()
			s.set(Open)
		}
	}
}

func (s *Store) primaryCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.cfg.Timeout > 0 {
		return context.WithTimeout(ctx, s.cfg.Timeout)
	}
	return ctx, func() {}
}

func (s *Store) fallback(err error) {
	if s.cfg.OnFallback != nil {
		s.cfg.OnFallback(err)
	}
}

// Decide implements store.Store.
func (s *Store) Decide(ctx context.Context, req store.Request, each []core.Decision) (int, core.Decision, error) {
	primary, probe := s.route()
	if primary {
		pctx, cancel := s.primaryCtx(ctx)
		i, d, err := s.cfg.Primary.Decide(pctx, req, each)
		cancel()
		s.done(probe, err)
		if !errors.Is(err, store.ErrUnavailable) {
			return i, d, err
		}
		s.fallback(err)
	} else {
		s.fallback(nil)
	}
	return s.cfg.Fallback.Decide(ctx, req, each)
}

// Reset implements store.Store: it resets both stores, and fails if the
// primary fails (a reset that did not reach the shared state did not
// happen).
func (s *Store) Reset(ctx context.Context, prefix, key string, names []string) error {
	ferr := s.cfg.Fallback.Reset(ctx, prefix, key, names)
	pctx, cancel := s.primaryCtx(ctx)
	defer cancel()
	if err := s.cfg.Primary.Reset(pctx, prefix, key, names); err != nil {
		return err
	}
	return ferr
}
