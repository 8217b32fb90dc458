package wasm_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/difftest"
	"github.com/rlcore/rl/tests/vectors/vectorstest"
	"github.com/rlcore/rl/wasm"
)

// gatedOpen is a HandoffConfig.Open that blocks until release, then returns
// the package's shared pool (or err): the test decides when the module is
// "compiled". A Handoff built with it must not be closed once switched:
// that would close the shared pool.
type gatedOpen struct {
	entered chan struct{} // closed when Open is called
	gate    chan struct{} // close to let Open return
	err     error
	once    sync.Once
}

func newGate() *gatedOpen {
	return &gatedOpen{entered: make(chan struct{}), gate: make(chan struct{})}
}

func (g *gatedOpen) open(ctx context.Context, _ wasm.Config) (*wasm.Pool, error) {
	close(g.entered)
	<-g.gate
	if g.err != nil {
		return nil, g.err
	}
	return pool, nil
}

func (g *gatedOpen) release() { g.once.Do(func() { close(g.gate) }) }

// TestHandoffNativeUntilReady: the Handoff decides (natively) while its
// Pool is not built, then switches to the Pool and reports it.
func TestHandoffNativeUntilReady(t *testing.T) {
	g := newGate()
	var done atomic.Int32
	var doneErr error
	h := wasm.NewHandoff(wasm.HandoffConfig{Open: g.open, OnDone: func(_ time.Duration, err error) {
		doneErr = err
		done.Add(1)
	}})
	<-g.entered
	ls := []core.Limit{{Algorithm: core.FixedWindow, Limit: 3, Window: 60_000_000}}
	ss := make([]core.State, 1)
	ds := make([]core.Decision, 1)
	take := func() core.Decision {
		t.Helper()
		if _, err := h.TakeAll(ls, ss, 1_000_000, 1, ds); err != nil {
			t.Fatal(err)
		}
		return ds[0]
	}
	if d := take(); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("before the module is compiled: %+v", d)
	}
	select {
	case <-h.Ready():
		t.Fatal("ready before Open returned")
	default:
	}
	if h.Deciding() != "native" || h.Pool() != nil || h.Err() != nil || h.Stats() != (wasm.Stats{}) || h.Took() != 0 {
		t.Fatalf("native phase: deciding %s, pool %v, err %v, stats %+v", h.Deciding(), h.Pool(), h.Err(), h.Stats())
	}
	started := pool.Stats().Started
	g.release()
	<-h.Ready()
	if h.Deciding() != "wasm" || h.Pool() != pool || h.Err() != nil || done.Load() != 1 || doneErr != nil {
		t.Fatalf("after: deciding %s, err %v, OnDone called %d times with %v", h.Deciding(), h.Err(), done.Load(), doneErr)
	}
	// The state the native core wrote is the module's to continue.
	if d := take(); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after the switch: %+v", d)
	}
	if pool.Stats().Started == started && pool.Stats().Instances == 0 {
		t.Fatal("the pool did not decide")
	}
}

// TestHandoffOpenFails: when the Pool cannot be built, the native core
// keeps deciding, and Err and OnDone say why.
func TestHandoffOpenFails(t *testing.T) {
	g := newGate()
	g.err = errors.New("no executable memory")
	var doneErr error
	h := wasm.NewHandoff(wasm.HandoffConfig{Open: g.open, OnDone: func(_ time.Duration, err error) { doneErr = err }})
	defer h.Close(context.Background())
	g.release()
	<-h.Ready()
	if !errors.Is(h.Err(), g.err) || !errors.Is(doneErr, g.err) || h.Deciding() != "native" || h.Pool() != nil {
		t.Fatalf("err %v, OnDone %v, deciding %s", h.Err(), doneErr, h.Deciding())
	}
	ls := []core.Limit{{Algorithm: core.TokenBucket, Limit: 2, Window: 1_000_000}}
	ss, ds := make([]core.State, 1), make([]core.Decision, 1)
	for i, want := range []bool{true, true, false} {
		if _, err := h.TakeAll(ls, ss, 5, 1, ds); err != nil || ds[0].Allowed != want {
			t.Fatalf("take %d: %+v %v", i, ds[0], err)
		}
	}
}

// TestHandoffCloseWhileOpening: Close during the build stops the Handoff
// at once (ErrClosed), returns ctx's error if the build outlasts it, and
// the Pool built afterwards is closed, not leaked.
func TestHandoffCloseWhileOpening(t *testing.T) {
	built, err := wasm.New(context.Background(), wasm.Config{MaxInstances: 1})
	if err != nil {
		t.Fatal(err)
	}
	entered, gate := make(chan struct{}), make(chan struct{})
	var doneCalled atomic.Bool
	h := wasm.NewHandoff(wasm.HandoffConfig{
		Open: func(ctx context.Context, _ wasm.Config) (*wasm.Pool, error) {
			close(entered)
			<-gate
			if ctx.Err() == nil {
				t.Error("Open's context was not canceled by Close")
			}
			return built, nil
		},
		OnDone: func(time.Duration, error) { doneCalled.Store(true) },
	})
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with the build running and ctx done: %v", err)
	}
	ls := []core.Limit{{Algorithm: core.TokenBucket, Limit: 2, Window: 1_000_000}}
	ss, ds := make([]core.State, 1), make([]core.Decision, 1)
	if _, err := h.TakeAll(ls, ss, 5, 1, ds); !errors.Is(err, wasm.ErrClosed) {
		t.Fatalf("TakeAll after Close: %v", err)
	}
	close(gate)
	<-h.Ready()
	if _, err := built.TakeAll(ls, ss, 5, 1, ds); !errors.Is(err, wasm.ErrClosed) {
		t.Fatalf("the pool built after Close was not closed: %v", err)
	}
	if doneCalled.Load() {
		t.Fatal("OnDone was called after Close")
	}
	if err := h.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// switchAt decides through a Handoff and lets its Pool be built at the
// at-th call (counting from 0), waiting for the switch before deciding:
// calls before at are native, the rest are the module's.
type switchAt struct {
	h     *wasm.Handoff
	g     *gatedOpen
	at, n int
}

func newSwitchAt(at int) *switchAt {
	g := newGate()
	return &switchAt{h: wasm.NewHandoff(wasm.HandoffConfig{Open: g.open}), g: g, at: at}
}

func (s *switchAt) step() {
	if s.n == s.at {
		s.g.release()
		<-s.h.Ready()
	}
	s.n++
}

func (s *switchAt) TakeAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	s.step()
	return s.h.TakeAll(ls, ss, now, cost, ds)
}

func (s *switchAt) PeekAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	s.step()
	return s.h.PeekAll(ls, ss, now, cost, ds)
}

func (s *switchAt) SettleAll(ls []core.Limit, ss []core.State, now, delta int64, ds []core.Decision) (int, error) {
	s.step()
	return s.h.SettleAll(ls, ss, now, delta, ds)
}

// TestHandoffDifferential runs generated sequences (internal/testkit/
// difftest) through the native core and through a Handoff that switches to
// the module at a random step of each, and requires identical decisions,
// errors and states at every step (difftest.Runner.Exact): deciding a
// state partly natively and partly in the module is deciding it with
// either.
func TestHandoffDifferential(t *testing.T) {
	n := 2000
	if testing.Short() || raceEnabled {
		n = 300
	}
	rng := rand.New(rand.NewPCG(20261129, 1))
	switched := 0
	for i := range n {
		seq := difftest.Generate(uint64(i)+20261129, difftest.Config{})
		if i%4 == 0 {
			seq = difftest.Generate(uint64(i)+20261129, difftest.Config{Valid: true})
		}
		sw := newSwitchAt(rng.IntN(len(seq.Steps) + 1))
		r := difftest.Runner{Exact: true, Deciders: []difftest.Decider{
			{Name: "native", Decider: vectorstest.Native{}},
			{Name: "handoff", Decider: sw},
		}}
		if d := r.Run(seq); d != nil {
			t.Fatalf("switch at step %d: %v", sw.at, d)
		}
		if sw.at < len(seq.Steps) {
			switched++
			if sw.h.Deciding() != "wasm" {
				t.Fatalf("sequence %d: no switch at step %d", i, sw.at)
			}
		}
		sw.g.release() // a sequence that ended before its switch: let the goroutine finish
	}
	if switched < n/2 {
		t.Fatalf("only %d of %d sequences switched over", switched, n)
	}
	for _, seq := range difftest.Extremes() {
		for _, at := range []int{0, len(seq.Steps) / 2, len(seq.Steps)} {
			sw := newSwitchAt(at)
			r := difftest.Runner{Exact: true, Deciders: []difftest.Decider{
				{Name: "native", Decider: vectorstest.Native{}},
				{Name: "handoff", Decider: sw},
			}}
			if d := r.Run(seq); d != nil {
				t.Fatalf("%s, switch at step %d: %v", seq.Name, at, d)
			}
			sw.g.release()
		}
	}
}

// TestHandoffConcurrentSwitch: callers deciding their own states while the
// switch happens (under -race: the switch is a safe publication) each get
// what the native core gives for the same calls.
func TestHandoffConcurrentSwitch(t *testing.T) {
	g := newGate()
	h := wasm.NewHandoff(wasm.HandoffConfig{Open: g.open})
	<-g.entered
	const workers, steps = 6, 400
	algs := core.Algorithms()
	var wg sync.WaitGroup
	var begun sync.WaitGroup
	begun.Add(workers)
	for w := range workers {
		wg.Go(func() {
			ls := []core.Limit{
				{Algorithm: algs[w%len(algs)], Limit: 7, Window: 1_000_000},
				{Algorithm: core.SlidingLog, Limit: 5, Window: 3_000_000},
			}
			ss, ns := make([]core.State, 2), make([]core.State, 2)
			ss[1].Log, ns[1].Log = make([]int64, 0, 5), make([]int64, 0, 5)
			ds, nds := make([]core.Decision, 2), make([]core.Decision, 2)
			for i := range steps {
				if i == steps/4 {
					begun.Done()
				}
				now, cost := int64(i)*97_000, int64(1+i%3)
				j, err := h.TakeAll(ls, ss, now, cost, ds)
				nj, nerr := core.TakeAll(ls, ns, now, cost, nds)
				if j != nj || err != nerr || ds[0] != nds[0] || ds[1] != nds[1] || !sameState(ss, ns) {
					t.Errorf("worker %d step %d: %d %v %+v %+v, native %d %v %+v %+v", w, i, j, err, ds, ss, nj, nerr, nds, ns)
					return
				}
			}
		})
	}
	begun.Wait() // every worker is deciding: switch under them
	g.release()
	wg.Wait()
	<-h.Ready()
	if h.Deciding() != "wasm" {
		t.Fatal("no switch")
	}
}

func sameState(a, b []core.State) bool {
	for i := range a {
		x, y := a[i], b[i]
		if x.Algorithm != y.Algorithm || x.T != y.T || x.X != y.X || x.Y != y.Y || x.L != y.L || x.W != y.W || x.R != y.R || len(x.Log) != len(y.Log) {
			return false
		}
		for j := range x.Log {
			if x.Log[j] != y.Log[j] {
				return false
			}
		}
	}
	return true
}
