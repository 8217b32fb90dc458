package difftest_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/difftest"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/internal/testkit/sqldecider"
	"github.com/rlcore/rl/tests/vectors/vectorstest"
	"github.com/rlcore/rl/wasm"
)

// The three deciders: the WebAssembly pool and the SQL functions on a
// database of their own, created, migrated and dropped by TestMain.
var (
	pool *wasm.Pool
	db   *pgxpool.Pool
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	ctx := context.Background()
	var err error
	if pool, err = wasm.New(ctx, wasm.Config{}); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: wasm.New:", err)
		return 1
	}
	defer pool.Close(ctx)
	flag.Parse()
	if testing.Short() {
		return m.Run() // TestNativeWASMSQL, the one test that needs PostgreSQL, skips
	}
	u, drop, err := pgtest.CreateMigrated(ctx) // a copy of the migrated template
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "drop test database:", err)
		}
	}()
	if db, err = pgxpool.New(ctx, u); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer db.Close()
	return m.Run()
}

// TestNativeWASMSQL runs the native core, the WebAssembly module and the
// SQL functions through the same sequences.
func TestNativeWASMSQL(t *testing.T) {
	pgtest.SkipShort(t)
	r := difftest.Runner{Workers: 4, Deciders: []difftest.Decider{
		{Name: "native", Decider: vectorstest.Native{}},
		{Name: "wasm", Decider: pool},
		{Name: "sql", Decider: sqldecider.New(db)},
	}}
	stats := r.Check(t, difftest.Config{}, 20261123, 400)
	t.Log(stats)
}

// native is the core as a difftest.Decider, with its single-limit calls.
var native = difftest.Decider{Name: "native", Decider: vectorstest.Native{}}

func TestGenerateIsDeterministic(t *testing.T) {
	for _, cfg := range []difftest.Config{{}, {Valid: true}, {MaxLimits: 3, MaxSteps: 5}} {
		a, b := difftest.Generate(42, cfg), difftest.Generate(42, cfg)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%+v: seed 42 made two sequences:\n%v\n%v", cfg, a, b)
		}
		if c := difftest.Generate(43, cfg); reflect.DeepEqual(a.Steps, c.Steps) {
			t.Fatalf("%+v: seeds 42 and 43 made the same steps", cfg)
		}
		data := []byte("some fuzz input, long enough for several draws")
		if x, y := difftest.FromBytes(data, cfg), difftest.FromBytes(data, cfg); !reflect.DeepEqual(x, y) {
			t.Fatalf("%+v: FromBytes made two sequences", cfg)
		}
	}
}

// TestConfig checks that sequences keep to their Config.
func TestConfig(t *testing.T) {
	for seed := range uint64(2000) {
		s := difftest.Generate(seed, difftest.Config{MaxLimits: 3, MaxSteps: 5})
		if len(s.Limits) > 3 || len(s.Steps) < 1 || len(s.Steps) > 5 || len(s.States) != len(s.Limits) {
			t.Fatalf("%v: %d limits, %d states, %d steps", s.Name, len(s.Limits), len(s.States), len(s.Steps))
		}
		for _, st := range s.Steps {
			if st.Limits != nil && len(st.Limits) != len(s.Limits) || st.States != nil && len(st.States) != len(s.Limits) {
				t.Fatalf("%v: a step changes the number of limits: %v", s.Name, s)
			}
		}
		v := difftest.Generate(seed, difftest.Config{Valid: true})
		if len(v.Limits) != 1 || v.Limits[0].Validate() != nil || len(v.States) != 1 || v.States[0].Algorithm != 0 {
			t.Fatalf("valid %v: limits %+v, states %+v", v.Name, v.Limits, v.States)
		}
		for _, st := range v.Steps {
			if st.Op != difftest.Take || st.Limits != nil || st.States != nil || st.Now < 0 || st.Now > core.MaxTime ||
				st.Cost < 0 || st.Cost > core.MaxCost {
				t.Fatalf("valid %v: step %+v", v.Name, st)
			}
		}
	}
}

// TestReach checks that the generated sequences reach every path: each
// algorithm admits and denies, each call is made on one, two, three and more
// limits, and every core.Error occurs (ErrLogCapacity only where log
// storage is kept as generated).
func TestReach(t *testing.T) {
	seqs := make([]difftest.Sequence, 1000)
	for i := range seqs {
		seqs[i] = difftest.Generate(uint64(i), difftest.Config{})
	}
	for _, exact := range []bool{false, true} {
		r := difftest.Runner{Exact: exact, Deciders: []difftest.Decider{native}}
		stats := r.CheckSequences(t, seqs)
		want := []string{"Take/1 allowed", "Take/1 denied", "Peek/1 allowed", "Peek/1 denied"}
		for _, c := range []string{"TakeAll", "PeekAll"} {
			for _, n := range []string{"1", "2", "3", "n"} {
				want = append(want, c+"/"+n+" allowed", c+"/"+n+" denied")
			}
		}
		for _, a := range core.Algorithms() {
			want = append(want, a.String()+" allowed", a.String()+" denied")
		}
		for e := core.ErrAlgorithm; e <= core.ErrLimits; e++ {
			if e != core.ErrLogCapacity || exact {
				want = append(want, fmt.Sprintf("error %d %s", int(e), e.Error()))
			}
		}
		for _, w := range want {
			found := 0
			for k, v := range stats.Outcomes {
				if strings.HasSuffix(k, w) || strings.HasPrefix(k, w) {
					found += v
				}
			}
			if found == 0 {
				t.Errorf("exact %v: no %q in %v", exact, w, stats)
			}
		}
		if !exact && stats.Outcomes["TakeAll/1 error 9 "+core.ErrLogCapacity.Error()] != 0 {
			t.Errorf("ErrLogCapacity although every log had room: %v", stats)
		}
	}
}

// refunding is the core with a bug: a clock stepping back by more than a
// second admits as from a fresh state.
type refunding struct {
	vectorstest.Native
	last int64
}

func (r *refunding) TakeAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	if now < r.last-1_000_000 {
		for i := range ss[:len(ls)] {
			ss[i] = core.State{Log: ss[i].Log[:0]}
		}
	}
	r.last = max(r.last, now)
	return core.TakeAll(ls, ss, now, cost, ds)
}

// copying returns each new sliding log in a new array rather than the
// caller's, which only Exact compares.
type copying struct{ core.Native }

func (copying) TakeAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	i, err := core.TakeAll(ls, ss, now, cost, ds)
	for j := range ss[:len(ls)] {
		if ss[j].Log != nil {
			ss[j].Log = append(make([]int64, 0, cap(ss[j].Log)), ss[j].Log...)
		}
	}
	return i, err
}

func TestRunnerFindsDivergences(t *testing.T) {
	// A hand-made sequence: the bug shows at step 3; steps 0 and 2 are
	// needed for it, step 1 is not.
	l := core.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: 10_000_000}
	seq := difftest.Sequence{Name: "hand-made", Limits: []core.Limit{l}, States: []core.State{{}}, Steps: []difftest.Step{
		{Op: difftest.TakeAll, Now: 5_000_000, Cost: 1},
		{Op: difftest.PeekAll, Now: 5_000_001, Cost: 1},
		{Op: difftest.TakeAll, Now: 3_000_000, Cost: 0},
		{Op: difftest.TakeAll, Now: 3_000_000, Cost: 1},
		{Op: difftest.TakeAll, Now: 3_000_000, Cost: 1},
	}}
	r := difftest.Runner{Deciders: []difftest.Decider{native, {Name: "refunding", Decider: &refunding{}}}}
	d := r.Run(seq)
	if d == nil || d.Step != 2 {
		t.Fatalf("divergence %v, want one at step 2", d)
	}
	r.Deciders[1].Decider = &refunding{}
	m := r.Minimize(d)
	if len(m.Seq.Steps) != 2 || m.Seq.Steps[0].Now != 5_000_000 || m.Seq.Steps[1].Now != 3_000_000 {
		t.Fatalf("minimized to\n%v", m)
	}
	if msg := m.Error(); !strings.Contains(msg, "hand-made, minimized, step 1") || !strings.Contains(msg, "refunding") {
		t.Fatalf("report %q", msg)
	}

	// Storage: only Exact sees the log leave the caller's array.
	var found bool
	for seed := range uint64(300) {
		s := difftest.Generate(seed, difftest.Config{})
		loose := difftest.Runner{Deciders: []difftest.Decider{native, {Name: "copying", Decider: copying{}}}}
		if d := loose.Run(s); d != nil {
			t.Fatalf("without Exact: %v", d)
		}
		exact := loose
		exact.Exact = true
		if d := exact.Run(s); d != nil {
			// The copying decider leaves the caller's array (a new one),
			// or its copy differs from what the core wrote in place.
			if !strings.Contains(d.Msg, "caller's array") && !strings.Contains(d.Msg, "log backing arrays differ") {
				t.Fatalf("Exact: %v", d)
			}
			found = true
		}
	}
	if !found {
		t.Fatal("Exact never saw a log leave the caller's array in 300 sequences")
	}
}
