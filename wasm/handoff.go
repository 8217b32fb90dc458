package wasm

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlcore/rl/core"
)

// HandoffConfig configures a Handoff. The zero value builds a Pool of the
// embedded module with New and Config's defaults.
type HandoffConfig struct {
	// Pool configures the Pool being built.
	Pool Config
	// Open builds the Pool in the background; nil means New. A host wraps
	// New here to add its own policy (rl-wasm-host retries without
	// Config.CacheDir when the cache fails); a test passes a function that
	// blocks, to observe the native phase.
	Open func(ctx context.Context, cfg Config) (*Pool, error)
	// OnDone, if set, is called once from the background goroutine when
	// Open returns, unless Close was called first: after the switch to the
	// Pool (err nil), or after a failure (err non-nil; the native core
	// keeps deciding), and before Ready is closed. took is the time Open
	// took: the module's compilation, mostly.
	OnDone func(took time.Duration, err error)
}

// Handoff is a core.Decider that decides with the native core while the
// module compiles in the background, then with the Pool: a host serves at
// once instead of waiting the seconds a first compilation takes.
//
// The switch is one atomic store; every call decides wholly with one
// decider or the other. It cannot change a decision: the module is package
// core compiled to WebAssembly, both deciders take and return the same
// core.State (the state encoding is one: core's; the Pool copies it into
// the module's buffer and back field for field), and the conformance vectors
// and the differential fuzz test hold them to the same results. So a key
// decided natively, then by the module, is decided as either alone would
// have.
//
// If Open fails, the native core keeps deciding for good: Err reports why.
// A Handoff is safe for concurrent use, and allocates nothing per call
// beyond what the deciding core does.
type Handoff struct {
	cur   atomic.Pointer[deciderBox]
	ready chan struct{} // closed once Open has returned and its result is in place
	cfg   HandoffConfig
	stop  context.CancelFunc

	mu     sync.Mutex
	closed bool
	pool   *Pool         // guarded by mu; set before ready is closed
	err    error         // guarded by mu; set before ready is closed
	took   time.Duration // guarded by mu; set before ready is closed
}

// deciderBox holds a core.Decider for an atomic.Pointer.
type deciderBox struct{ core.Decider }

// nativeBox and closedBox are the Handoff's deciders other than its Pool.
var (
	nativeBox = &deciderBox{Decider: core.Native{}}
	closedBox = &deciderBox{Decider: closedDecider{}}
)

// NewHandoff returns a Handoff that decides natively at once, and starts
// building its Pool in a goroutine; the Pool decides from the moment it is
// ready. Close stops it.
func NewHandoff(cfg HandoffConfig) *Handoff {
	if cfg.Open == nil {
		cfg.Open = New
	}
	ctx, stop := context.WithCancel(context.Background())
	h := &Handoff{ready: make(chan struct{}), cfg: cfg, stop: stop}
	h.cur.Store(nativeBox)
	go h.open(ctx)
	return h
}

// open builds the Pool and switches over to it, or records why not.
func (h *Handoff) open(ctx context.Context) {
	start := time.Now()
	pool, err := h.cfg.Open(ctx, h.cfg.Pool)
	took := time.Since(start)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		if pool != nil {
			pool.Close(context.Background())
		}
		close(h.ready)
		return
	}
	h.pool, h.err, h.took = pool, err, took
	if err == nil {
		h.cur.Store(&deciderBox{pool})
	}
	h.mu.Unlock()
	if h.cfg.OnDone != nil {
		h.cfg.OnDone(took, err)
	}
	close(h.ready)
}

// TakeAll is core.TakeAll, decided by the deciding core (Deciding). After
// Close it returns ErrClosed; the Pool's errors are its own.
func (h *Handoff) TakeAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	return h.cur.Load().TakeAll(ls, ss, now, cost, ds)
}

// PeekAll is core.PeekAll, decided by the deciding core, with TakeAll's
// extra errors.
func (h *Handoff) PeekAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	return h.cur.Load().PeekAll(ls, ss, now, cost, ds)
}

// SettleAll is core.SettleAll, decided by the deciding core, with TakeAll's
// extra errors.
func (h *Handoff) SettleAll(ls []core.Limit, ss []core.State, now, delta int64, ds []core.Decision) (int, error) {
	return h.cur.Load().SettleAll(ls, ss, now, delta, ds)
}

// Deciding names the core deciding now: "native" until the Pool is ready
// (for good if building it failed), then "wasm". After Close it still names
// the last one.
func (h *Handoff) Deciding() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pool != nil {
		return "wasm"
	}
	return "native"
}

// Ready is closed once the background build is over, after OnDone
// returned: the Pool decides, or Err says why it does not.
func (h *Handoff) Ready() <-chan struct{} { return h.ready }

// Err returns why the Pool could not be built (the native core then keeps
// deciding), or nil: while it is being built, or once it decides.
func (h *Handoff) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Took returns the time building the Pool took, once it is over (Ready);
// 0 before.
func (h *Handoff) Took() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.took
}

// Pool returns the Pool once it decides, else nil.
func (h *Handoff) Pool() *Pool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pool
}

// Stats returns the Pool's Stats once it decides; zero before.
func (h *Handoff) Stats() Stats {
	if p := h.Pool(); p != nil {
		return p.Stats()
	}
	return Stats{}
}

// Close stops the Handoff: later calls return ErrClosed. A Pool that
// decides is closed as Pool.Close does, within ctx. A Pool still being built
// is abandoned: Close waits for Open to return (its context is canceled,
// which New does not heed mid-compilation) and closes what it built, or
// returns ctx's error if ctx is done first, leaving the background
// goroutine to close it. Calling Close again does nothing.
func (h *Handoff) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.cur.Store(closedBox)
	pool := h.pool
	h.mu.Unlock()
	h.stop()
	if pool != nil {
		return pool.Close(ctx)
	}
	select {
	case <-h.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closedDecider is a closed Handoff's decider.
type closedDecider struct{}

func (closedDecider) TakeAll([]core.Limit, []core.State, int64, int64, []core.Decision) (int, error) {
	return 0, ErrClosed
}

func (closedDecider) PeekAll([]core.Limit, []core.State, int64, int64, []core.Decision) (int, error) {
	return 0, ErrClosed
}

func (closedDecider) SettleAll([]core.Limit, []core.State, int64, int64, []core.Decision) (int, error) {
	return 0, ErrClosed
}

var _ core.Decider = (*Handoff)(nil)
