// Command gen writes the conformance vector files from scripted scenarios,
// recording the outcomes of package core. Run it with go generate in
// tests/vectors; review the diff: a changed expectation is a changed contract
// that the WebAssembly module and the SQL functions must follow.
//
// Each algorithm's file (<name>.json) comes from a file of its own here
// (<name>.go), which registers its corrupt states and its own cases; the
// scenarios every algorithm shares, the carry, settle and multi-limit files
// are in main.go and cover every algorithm of core.Algorithms() by
// themselves.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/tests/vectors"
	"github.com/rlcore/rl/tests/vectors/vectorstest"
)

const (
	ms  = int64(1_000)
	sec = int64(1_000_000)
	min = 60 * sec
	day = 24 * 60 * min
	// t0 is 2026-01-01T00:00:00Z, a minute, hour and day boundary.
	t0 = int64(1_767_225_600) * sec
)

var notes = map[string]string{
	"edge":      "a call exactly at, or 1 µs before, a window or refill boundary",
	"cost0":     "cost 0: always allowed, changes nothing, reports the current state",
	"oversize":  "cost above the limit: denied with retry_after = -1 (never)",
	"backwards": "the clock steps backwards: nothing is refunded",
	"gap":       "a long idle gap (up to years)",
	"maxima":    "documented maximum parameters or times",
	"error":     "invalid input: the named error and no state change",
	"multi":     "several limits decided all or nothing",
	"params":    "the limit's parameters change between calls on one state",
	"state":     "a stored state is injected: foreign, corrupt or written elsewhere",
	"random":    "a seeded random sequence",
	"carry":     "a state recorded under other parameters or by another algorithm: the units it used carry over",
	"settle":    "settle: a cost corrected after the call (a debt above the limit, or a refund)",
	"legacy":    "a state without its recorded parameters (l, w, r 0), as written before they were kept",
}

type builder struct {
	c      vectors.Case
	limits []core.Limit
	states []core.State
}

func newCase(id, comment string, flags []string, limits ...vectors.Limit) *builder {
	b := &builder{c: vectors.Case{ID: id, Comment: comment, Flags: flags, Limits: limits}}
	b.limits = vectorstest.ToLimits(limits)
	b.states = make([]core.State, len(limits))
	return b
}

// everyAlgorithm is one limit of each algorithm of core.Algorithms(), named
// after its short name: a new algorithm joins the multi-limit cases by itself.
func everyAlgorithm(limit, window int64) []vectors.Limit {
	var ls []vectors.Limit
	for _, a := range core.Algorithms() {
		ls = append(ls, lim(a.ShortName(), a, limit, window, 0))
	}
	return ls
}

func lim(name string, alg core.Algorithm, limit, window, rate int64) vectors.Limit {
	return vectors.Limit{Name: name, Algorithm: int32(alg), Limit: limit, Window: window, Rate: rate}
}

func (b *builder) take(now, cost int64) *builder { return b.op("take", now, cost, nil, nil) }
func (b *builder) peek(now, cost int64) *builder { return b.op("peek", now, cost, nil, nil) }
func (b *builder) reset(now int64) *builder      { return b.op("reset", now, 0, nil, nil) }

func (b *builder) takeWith(now, cost int64, ls []vectors.Limit) *builder {
	return b.op("take", now, cost, ls, nil)
}

func (b *builder) takeFrom(now, cost int64, ss ...vectors.State) *builder {
	return b.op("take", now, cost, nil, ss)
}

func (b *builder) settle(now, delta int64) *builder { return b.op("settle", now, delta, nil, nil) }

func (b *builder) settleFrom(now, delta int64, ss ...vectors.State) *builder {
	return b.op("settle", now, delta, nil, ss)
}

func (b *builder) settleWith(now, delta int64, ls []vectors.Limit) *builder {
	return b.op("settle", now, delta, ls, nil)
}

// takeLegacy takes under ls from the current states with their recorded
// parameters removed, as a state written before they were kept.
func (b *builder) takeLegacy(now, cost int64, ls []vectors.Limit) *builder {
	ss := make([]vectors.State, len(b.states))
	for i, s := range b.states {
		ss[i] = vectorstest.FromState(s)
		ss[i].L, ss[i].W, ss[i].R = 0, 0, 0
	}
	return b.op("take", now, cost, ls, ss)
}

// retryEdge follows a denied call with cost at 1 µs before and exactly at
// its RetryAfter (the deciding limit's): a peek that must be denied, then a
// take that must be admitted.
func (b *builder) retryEdge(cost int64) *builder {
	last := b.c.Steps[len(b.c.Steps)-1]
	ex := last.Expect
	if ex.ErrorCode != 0 || len(ex.Decisions) == 0 || ex.Decisions[ex.Index].Allowed || ex.Decisions[ex.Index].RetryAfter <= 1 {
		log.Fatalf("%s: retryEdge after a call that was not denied for a while: %+v", b.c.ID, ex)
	}
	at := last.Now + ex.Decisions[ex.Index].RetryAfter
	b.peek(at-1, cost)
	if p := b.c.Steps[len(b.c.Steps)-1].Expect.Decisions[ex.Index]; p.Allowed {
		log.Fatalf("%s: admitted 1 µs before the retry", b.c.ID)
	}
	b.take(at, cost)
	if d := b.c.Steps[len(b.c.Steps)-1].Expect.Decisions[ex.Index]; !d.Allowed {
		log.Fatalf("%s: denied at the retry", b.c.ID)
	}
	return b
}

func (b *builder) op(op string, now, cost int64, ls []vectors.Limit, ss []vectors.State) *builder {
	st := vectors.Step{Now: now, Op: op, Cost: cost, Limits: ls, SetStates: ss}
	if ls != nil {
		b.limits = vectorstest.ToLimits(ls)
	}
	for i, s := range ss {
		b.states[i] = vectorstest.ToState(s)
	}
	for i := range b.states { // storage for log entries, as every runner gives
		if b.states[i].Log == nil {
			b.states[i].Log = make([]int64, 0, core.MaxLogLimit)
		}
	}
	var err error
	switch op {
	case "reset":
		for i := range b.states {
			b.states[i] = core.State{Log: b.states[i].Log[:0]}
		}
	case "settle":
		ds := make([]core.Decision, len(b.limits))
		if len(b.limits) == 1 {
			var n core.State
			ds[0], n, err = core.Settle(b.limits[0], b.states[0], now, cost)
			if err == nil {
				b.states[0] = n
			}
		} else {
			st.Expect.Index, err = core.SettleAll(b.limits, b.states, now, cost, ds)
		}
		st.Expect.Decisions = record(ds, err)
	case "peek", "take":
		ds := make([]core.Decision, len(b.limits))
		if len(b.limits) == 1 {
			var d core.Decision
			if op == "peek" {
				d, err = core.Peek(b.limits[0], b.states[0], now, cost)
			} else {
				var n core.State
				d, n, err = core.Take(b.limits[0], b.states[0], now, cost)
				if err == nil {
					b.states[0] = n
				}
			}
			ds[0] = d
		} else if op == "peek" {
			st.Expect.Index, err = core.PeekAll(b.limits, b.states, now, cost, ds)
		} else {
			st.Expect.Index, err = core.TakeAll(b.limits, b.states, now, cost, ds)
		}
		st.Expect.Decisions = record(ds, err)
	}
	if err != nil {
		var ce core.Error
		if !errors.As(err, &ce) {
			log.Fatalf("%s: unexpected error %v", b.c.ID, err)
		}
		st.Expect.Error, st.Expect.ErrorCode = errName(ce), int32(ce)
	}
	for _, s := range b.states {
		st.Expect.States = append(st.Expect.States, vectorstest.FromState(s))
	}
	b.c.Steps = append(b.c.Steps, st)
	return b
}

// record returns the decisions a step expects: ds, or none on an error.
func record(ds []core.Decision, err error) []vectors.Decision {
	if err != nil {
		return nil
	}
	out := make([]vectors.Decision, len(ds))
	for i, d := range ds {
		out[i] = vectorstest.FromDecision(d)
	}
	return out
}

func errName(e core.Error) string {
	names := map[core.Error]string{
		core.ErrAlgorithm: "ErrAlgorithm", core.ErrLimit: "ErrLimit", core.ErrWindow: "ErrWindow",
		core.ErrRate: "ErrRate", core.ErrUnits: "ErrUnits", core.ErrCost: "ErrCost", core.ErrTime: "ErrTime",
		core.ErrState: "ErrState", core.ErrLogCapacity: "ErrLogCapacity", core.ErrLimits: "ErrLimits",
	}
	return names[e]
}

// algFile is an algorithm's vector file: the scenarios every algorithm
// shares (common), then its own. Each algorithm registers one from a file
// of its own in this directory (fixed_window.go, ...), named as its vector
// file; files() writes one per algorithm of core.Algorithms() and refuses
// an algorithm without.
type algFile struct {
	alg    core.Algorithm
	prefix string // of its cases' IDs: "fw" for fixed_window
	desc   string // the file's description
	// corrupt adds to the errors case the calls on states only this
	// algorithm's words make corrupt (a word it does not use set, a value
	// it never writes).
	corrupt func(e *builder)
	// own returns its own cases.
	own func() []*builder
}

// algFiles holds the registered algorithms' files.
var algFiles = map[core.Algorithm]algFile{}

// register adds an algorithm's file.
func register(f algFile) {
	if _, dup := algFiles[f.alg]; dup {
		log.Fatalf("%v: two vector files", f.alg)
	}
	algFiles[f.alg] = f
}

// common adds the scenarios every algorithm shares.
func common(f algFile) []*builder {
	alg, p := f.alg, f.prefix
	a := alg
	l := func(limit, window int64) vectors.Limit { return lim("default", a, limit, window, 0) }
	var cs []*builder
	cs = append(cs,
		newCase(p+"-basic", "exhaust a limit of 3 per second, then wait it out", nil, l(3, sec)).
			take(t0, 1).take(t0+100*ms, 1).take(t0+200*ms, 1).take(t0+300*ms, 1).
			peek(t0+300*ms, 1).take(t0+999*ms, 1).take(t0+sec, 1).take(t0+1500*ms, 1).
			take(t0+2*sec, 2).take(t0+5*sec, 1),
		newCase(p+"-edge", "calls 1 µs before and exactly at the window or refill boundary", []string{"edge"}, l(2, 10*sec)).
			take(t0+9*sec, 2).take(t0+10*sec-1, 1).take(t0+10*sec, 1).take(t0+15*sec-1, 1).
			take(t0+15*sec, 1).take(t0+20*sec-1, 2).take(t0+20*sec, 2).take(t0+30*sec, 2),
		newCase(p+"-cost0", "cost 0 on fresh, partly used and exhausted state", []string{"cost0"}, l(4, sec)).
			take(t0, 0).take(t0+1, 3).take(t0+2, 0).peek(t0+3, 0).take(t0+4, 1).take(t0+5, 0).take(t0+6, 1),
		newCase(p+"-oversize", "a cost above the limit is never admitted and changes nothing", []string{"oversize"}, l(5, sec)).
			take(t0, 6).take(t0, 2).take(t0+1, 1000).peek(t0+2, 6).take(t0+3, 3).take(t0+4, 1),
		newCase(p+"-batch", "variable cost: a batch takes its whole cost or nothing", nil, l(500, min)).
			take(t0, 200).take(t0+sec, 250).take(t0+2*sec, 100).take(t0+3*sec, 50).take(t0+4*sec, 1).
			take(t0+30*sec, 100).take(t0+61*sec, 500),
		newCase(p+"-backwards", "the clock steps back within and across windows", []string{"backwards"}, l(3, sec)).
			take(t0+500*ms, 1).take(t0+400*ms, 1).take(t0+100*ms, 1).take(t0+50*ms, 1).
			take(t0+1200*ms, 1).take(t0+900*ms, 1).take(t0-5*sec, 1).peek(t0-5*sec, 1).take(t0+3*sec, 2),
		newCase(p+"-gap", "idle gaps of a day and of ten years", []string{"gap"}, l(10, min)).
			take(t0, 10).take(t0+day, 10).take(t0+day+1, 1).take(t0+day+10*365*day, 10).take(t0+day+10*365*day+sec, 1),
		newCase(p+"-reset", "reset restores the full limit", nil, l(2, min)).
			take(t0, 2).take(t0+sec, 1).reset(t0+2*sec).take(t0+2*sec, 2).peek(t0+3*sec, 1),
		newCase(p+"-peek", "peek reports what take would, and changes nothing", nil, l(3, sec)).
			peek(t0, 1).peek(t0, 3).peek(t0, 4).take(t0, 2).peek(t0+1, 2).peek(t0+1, 1).take(t0+1, 1).peek(t0+2, 1),
		newCase(p+"-epoch", "times at and near 0", []string{"edge"}, l(2, sec)).
			take(0, 1).take(1, 1).take(2, 1).take(sec, 1),
		newCase(p+"-maxtime", "now at the documented maximum", []string{"maxima"}, l(2, sec)).
			take(core.MaxTime-1, 1).take(core.MaxTime, 1).take(core.MaxTime, 1),
		newCase(p+"-maxwindow", "the longest window", []string{"maxima"}, l(2, core.MaxWindow/1_000_000)).
			take(t0, 2).take(t0+core.MaxWindow/2_000_000, 1),
		newCase(p+"-params", "the limit changes between calls on one key", []string{"params"}, l(5, sec)).
			take(t0, 4).takeWith(t0+100*ms, 1, []vectors.Limit{l(2, sec)}).take(t0+200*ms, 1).
			takeWith(t0+300*ms, 1, []vectors.Limit{l(10, sec)}).takeWith(t0+400*ms, 1, []vectors.Limit{l(10, 100*ms)}).
			take(t0+2*sec, 1),
		newCase(p+"-foreign", "a legacy state (no recorded parameters) written by another algorithm is treated as fresh", []string{"state", "legacy"}, l(2, sec)).
			takeFrom(t0, 1, vectors.State{Algorithm: int32(other(alg)), T: t0, X: 5}).take(t0+1, 1).take(t0+2, 1),
		newCase(p+"-clamp", "a state written at 1 per year, read at 10 per second: the unit it used carries over, "+
			"retry_after exact", []string{"params", "carry", "edge"}, l(1, 365*day)).
			take(t0+5*sec, 1).take(t0+5*sec+1, 1).
			takeWith(t0+5*sec+2, 10, []vectors.Limit{l(10, sec)}).take(t0+5*sec+3, 10).retryEdge(10).take(t0+20*sec, 1),
		newCase(p+"-clamp-legacy", "a legacy state written at 1 per year, read at 10 per second: denied no longer than the new limit allows "+
			"(one window, two for the sliding window, or one refill from when it was written), retry_after exact", []string{"params", "legacy", "edge"}, l(1, 365*day)).
			take(t0+5*sec, 1).take(t0+5*sec+1, 1).
			takeLegacy(t0+5*sec+2, 10, []vectors.Limit{l(10, sec)}).take(t0+5*sec+3, 10).retryEdge(10).take(t0+20*sec, 1),
	)
	if alg.Windowed() {
		cs = append(cs, newCase(p+"-regrid", "the window changes to a length whose grid the stored times are not on: retry_after exact "+
			"(1 µs before denied, at it admitted)", []string{"params", "edge"}, l(5, 3*sec)).
			take(t0+7*sec, 5).takeWith(t0+8*sec, 1, []vectors.Limit{l(5, 10*sec)}).retryEdge(1).
			takeWith(t0+41*sec, 4, []vectors.Limit{l(4, 7*sec)}).take(t0+41*sec+1, 2).retryEdge(2).
			takeWith(t0+50*sec+3, 3, []vectors.Limit{l(3, 2*sec+1)}).take(t0+50*sec+4, 1).retryEdge(1))
	}
	// Errors: each leaves the state as it was.
	e := newCase(p+"-errors", "invalid parameters, costs, times and states", []string{"error"}, l(3, sec)).take(t0, 1)
	bad := func(mod func(*vectors.Limit)) []vectors.Limit {
		x := l(3, sec)
		mod(&x)
		return []vectors.Limit{x}
	}
	good := []vectors.Limit{l(3, sec)}
	e.take(t0, -1).take(t0, core.MaxCost+1).take(-1, 1).take(core.MaxTime+1, 1).
		takeWith(t0, 1, bad(func(x *vectors.Limit) { x.Limit = 0 })).
		takeWith(t0, 1, bad(func(x *vectors.Limit) { x.Limit = -5 })).
		takeWith(t0, 1, bad(func(x *vectors.Limit) { x.Window = 0 })).
		takeWith(t0, 1, bad(func(x *vectors.Limit) { x.Window = core.MaxWindow + 1 })).
		takeWith(t0, 1, bad(func(x *vectors.Limit) { x.Algorithm = 0 })).
		takeWith(t0, 1, bad(func(x *vectors.Limit) { x.Algorithm = int32(len(core.Algorithms()) + 1) })).
		takeWith(t0, 1, bad(func(x *vectors.Limit) { x.Rate = -1 }))
	if !alg.Windowed() {
		e.takeWith(t0, 1, bad(func(x *vectors.Limit) { x.Rate = core.MaxLimit + 1 }))
	} else {
		e.takeWith(t0, 1, bad(func(x *vectors.Limit) { x.Rate = 1 }))
	}
	if alg.UnitsBounded() { // limit × window past MaxUnits
		e.takeWith(t0, 1, bad(func(x *vectors.Limit) { x.Limit = 1 << 20; x.Window = core.MaxUnits>>20 + 1 }))
	} else { // one above the largest limit the algorithm takes
		e.takeWith(t0, 1, bad(func(x *vectors.Limit) { x.Limit = maxLimit(alg) + 1 }))
	}
	e.takeWith(t0+1, 1, good).
		takeFrom(t0+2, 1, vectors.State{Algorithm: int32(alg), T: -1}).
		takeFrom(t0+3, 1, vectors.State{Algorithm: int32(alg), X: core.MaxStateValue + 1}).
		takeFrom(t0+4, 1, vectors.State{Algorithm: 9, T: t0}).
		takeFrom(t0+5, 1, vectors.State{Algorithm: 0, T: t0})
	f.corrupt(e)
	e.takeFrom(t0+8, 1, vectors.State{}).take(t0+9, 1)
	cs = append(cs, e)
	// Seeded random sequences with arbitrary small parameters.
	r := rand.New(rand.NewPCG(uint64(alg), 42))
	for i := range 12 {
		lm := l(1+r.Int64N(8), 1+r.Int64N(5*sec))
		if !alg.Windowed() && i%2 == 1 {
			lm.Rate = 1 + r.Int64N(7)
		}
		c := newCase(fmt.Sprintf("%s-random-%02d", p, i), "a seeded random sequence", []string{"random"}, lm)
		now := t0 + r.Int64N(lm.Window)
		for range 30 {
			switch r.IntN(8) {
			case 0:
				now -= r.Int64N(lm.Window)
			case 1:
				now += r.Int64N(3 * lm.Window)
			default:
				now += r.Int64N(lm.Window/3 + 1)
			}
			cost := int64(1)
			if r.IntN(4) == 0 {
				cost = r.Int64N(lm.Limit + 2)
			}
			if r.IntN(6) == 0 {
				c.peek(now, cost)
			} else {
				c.take(now, cost)
			}
		}
		cs = append(cs, c)
	}
	return cs
}

// maxLimit returns the largest Limit a takes, as Validate reports it.
func maxLimit(a core.Algorithm) int64 {
	var le *core.LimitError
	if !errors.As(core.Limit{Algorithm: a, Limit: core.MaxLimit + 1, Window: 1}.Validate(), &le) || le.Code != core.ErrLimit {
		log.Fatalf("%v: a limit above MaxLimit is not refused as ErrLimit", a)
	}
	return le.Max
}

func other(a core.Algorithm) core.Algorithm {
	if a == core.FixedWindow {
		return core.TokenBucket
	}
	return core.FixedWindow
}

func files() map[string]vectors.File {
	out := map[string]vectors.File{}
	add := func(name, desc string, cs []*builder) {
		f := vectors.File{Schema: vectors.Schema, Description: desc, Notes: notes}
		for _, c := range cs {
			f.Cases = append(f.Cases, c.c)
		}
		out[name] = f
	}
	for _, a := range core.Algorithms() {
		f, ok := algFiles[a]
		if !ok || f.corrupt == nil || f.own == nil {
			log.Fatalf("no vector file for %v, or an incomplete one: register one in a file of its own in tests/vectors/internal/gen (its corrupt states and its own cases)", a)
		}
		add(a.String()+".json", f.desc, append(common(f), f.own()...))
	}

	m := []*builder{
		newCase("multi-burst-daily", "a burst limit and a daily limit on one key", []string{"multi"},
			lim("burst", core.TokenBucket, 5, sec, 0), lim("daily", core.FixedWindow, 8, day, 0)).
			take(t0, 5).take(t0+1, 1).take(t0+sec, 3).take(t0+2*sec, 1).take(t0+3*sec, 1).take(t0+day, 5),
		newCase("multi-no-consume", "a denied call consumes no other limit's quota", []string{"multi"},
			lim("minute", core.FixedWindow, 10, min, 0), lim("second", core.SlidingLog, 2, sec, 0)).
			take(t0, 2).take(t0+1, 1).take(t0+2, 1).take(t0+3, 1).take(t0+sec, 2),
		newCase("multi-latest-retry", "when several deny, the latest retry-after decides", []string{"multi"},
			lim("a", core.FixedWindow, 2, sec, 0), lim("b", core.FixedWindow, 2, min, 0), lim("c", core.GCRA, 3, sec, 1)).
			take(t0, 2).take(t0+1, 1).take(t0+sec, 1).take(t0+sec, 5),
		newCase("multi-strict-smooth", "a strict primary plus a smoothing secondary", []string{"multi"},
			lim("hourly", core.FixedWindow, 100, 60*min, 0), lim("smooth", core.GCRA, 3, sec, 3)).
			take(t0, 3).take(t0+1, 1).peek(t0+1, 1).take(t0+333334, 1).take(t0+sec, 2).reset(t0+sec).take(t0+sec, 3),
		newCase("multi-every-algorithm", "every algorithm at once, one limit each", []string{"multi"}, everyAlgorithm(4, sec)...).
			take(t0+900*ms, 3).take(t0+sec, 1).take(t0+sec+100*ms, 1).take(t0+2*sec, 2).take(t0+2*sec, 0).take(t0+2*sec, 5),
		newCase("multi-error", "an invalid limit among several: its index, no state change", []string{"multi", "error"},
			lim("ok", core.FixedWindow, 4, sec, 0), lim("bad", core.TokenBucket, 4, 0, 0)).
			take(t0, 1).takeWith(t0, 1, []vectors.Limit{lim("ok", core.FixedWindow, 4, sec, 0), lim("fine", core.TokenBucket, 4, sec, 0)}),
	}
	add("multi.json", "Several limits at once, all or nothing: the deciding limit's index, and no state change on denial.", m)
	add("carry.json", "Parameter changes on one key: the units a state used carry over to the new limit or algorithm, "+
		"never a fraction of one refunded, clamped to the new limit.", carryCases())
	add("settle.json", "Settle: a cost corrected after the call; a positive delta may put the key in debt, a negative one refunds.", settleCases())
	return out
}

// numberArray matches a JSON array of integers spread over lines.
var (
	numberArray = regexp.MustCompile(`\[\s+-?\d+(,\s+-?\d+)*\s+\]`)
	space       = regexp.MustCompile(`\s+`)
)

func main() {
	dir := flag.String("out", ".", "directory to write the vector files to")
	flag.Parse()
	fs := files()
	for name, f := range fs {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", " ")
		if err := enc.Encode(f); err != nil {
			log.Fatal(err)
		}
		out := numberArray.ReplaceAllFunc(buf.Bytes(), func(b []byte) []byte { return space.ReplaceAll(b, nil) })
		if err := os.WriteFile(filepath.Join(*dir, name), out, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// carryCases pins, for every pair of algorithms, what a state written by
// one carries to the other: raised (admits what is left) and lowered
// (clamped: retry_after exact, never longer than the new limit gives).
func carryCases() []*builder {
	var cs []*builder
	for _, from := range core.Algorithms() {
		for _, to := range core.Algorithms() {
			src := lim("default", from, 5, sec, 0)
			if !from.Windowed() {
				src.Rate = 5
			}
			raised := lim("default", to, 8, 2*sec, 0)
			lowered := lim("default", to, 2, 3*sec, 0)
			if !to.Windowed() {
				raised.Rate, lowered.Rate = 3, 1
			}
			id := fmt.Sprintf("carry-%s-%s", from.ShortName(), to.ShortName())
			cs = append(cs,
				newCase(id+"-raised", fmt.Sprintf("3 of 5 per second used by %s, then %s at 8 per 2 s: what is left is admitted", from, to),
					[]string{"params", "carry"}, src).
					take(t0+100*ms, 3).peek(t0+150*ms, 1).takeWith(t0+200*ms, 5, []vectors.Limit{raised}).take(t0+300*ms, 1).
					take(t0+400*ms, 1),
				newCase(id+"-lowered", fmt.Sprintf("3 of 5 per second used by %s, then %s at 2 per 3 s: clamped, retry_after exact", from, to),
					[]string{"params", "carry", "edge"}, src).
					take(t0+100*ms, 3).takeWith(t0+200*ms, 1, []vectors.Limit{lowered}).retryEdge(1).take(t0+20*sec, 2),
			)
		}
	}
	cs = append(cs,
		newCase("carry-gcra-rate-raised", "letsencrypt/boulder #8785: GCRA at 1 per 10 s exhausted, then 10 per 10 s: "+
			"the override admits at once", []string{"params", "carry"}, lim("default", core.GCRA, 1, 10*sec, 1)).
			take(t0, 1).take(t0+sec, 1).takeWith(t0+2*sec, 1, []vectors.Limit{lim("default", core.GCRA, 10, 10*sec, 10)}).
			take(t0+2*sec, 8).take(t0+2*sec, 1),
		newCase("carry-token-window", "a token bucket's window doubles: the tokens used carry, not stretched", []string{"params", "carry"},
			lim("default", core.TokenBucket, 10, sec, 0)).
			take(t0, 10).takeWith(t0, 1, []vectors.Limit{lim("default", core.TokenBucket, 10, 2*sec, 0)}).retryEdge(1),
		newCase("carry-legacy-bucket", "a legacy token bucket state read under another window is clamped, not carried", []string{"params", "legacy"},
			lim("default", core.TokenBucket, 10, sec, 0)).
			take(t0, 10).takeLegacy(t0, 1, []vectors.Limit{lim("default", core.TokenBucket, 10, 2*sec, 0)}),
		newCase("carry-errors", "recorded parameters that are not a valid limit of the state's algorithm are a corrupt state", []string{"state", "error"},
			lim("default", core.TokenBucket, 10, sec, 0)).
			takeFrom(t0, 1, vectors.State{Algorithm: int32(core.TokenBucket), T: t0, X: 5, L: 10, W: sec}).
			takeFrom(t0, 1, vectors.State{Algorithm: int32(core.FixedWindow), T: t0, X: 5, L: 10, W: sec, R: 1}).
			takeFrom(t0, 1, vectors.State{Algorithm: int32(core.FixedWindow), T: t0, X: 5, L: 0, W: sec}).
			takeFrom(t0, 1, vectors.State{Algorithm: int32(core.SlidingLog), L: core.MaxLogLimit + 1, W: sec, Log: []int64{t0}}).
			takeFrom(t0, 1, vectors.State{L: 1, W: 1}).
			takeFrom(t0, 1, vectors.State{Algorithm: int32(core.FixedWindow), T: t0, X: 5, L: 10, W: sec}),
	)
	return cs
}

// settleMultiError: an error on the second limit of a settle (a corrupt
// state) changes no state, the first limit's included.
func settleMultiError() *builder {
	b := newCase("settle-multi-error", "an error on one limit (a corrupt state) changes no state", []string{"settle", "multi", "error"},
		lim("burst", core.TokenBucket, 5, sec, 0), lim("g", core.GCRA, 4, sec, 0)).take(t0, 1)
	corrupt := vectors.State{Algorithm: int32(core.GCRA), T: t0 + sec, X: core.MaxLimit + 1, Y: t0} // X beyond any rate
	return b.settleFrom(t0+1, 3, vectorstest.FromState(b.states[0]), corrupt)
}

// settleCases pins Settle for every algorithm: a debt above the limit paid
// off exactly, refunds never below nothing used, errors, several limits.
func settleCases() []*builder {
	var cs []*builder
	for _, a := range core.Algorithms() {
		l := lim("default", a, 4, sec, 0)
		p := "settle-" + a.ShortName()
		cs = append(cs,
			newCase(p+"-debt", "an estimate of 1, then the real cost of 7 on a limit of 4: in debt, denied until paid off",
				[]string{"settle", "edge"}, l).
				take(t0, 1).settle(t0+10*ms, 6).peek(t0+20*ms, 1).take(t0+30*ms, 1).retryEdge(1).take(t0+5*sec, 4),
			newCase(p+"-refund", "an estimate of 3, the real cost 1: refunded, never below nothing used",
				[]string{"settle"}, l).
				take(t0, 3).settle(t0+10*ms, -2).take(t0+20*ms, 3).take(t0+30*ms, 1).settle(t0+40*ms, -100).take(t0+50*ms, 4),
			newCase(p+"-fresh", "settling a fresh key", []string{"settle"}, l).
				settle(t0, -1).settle(t0, 0).settle(t0+1, 2).take(t0+2, 2).take(t0+3, 1),
			newCase(p+"-errors", "a delta out of range, or a time", []string{"settle", "error"}, l).
				take(t0, 1).settle(t0, core.MaxCost+1).settle(t0, -core.MaxCost-1).settle(-1, 1).settle(t0+1, 0),
		)
	}
	cs = append(cs,
		newCase("settle-gcra-huge", "a GCRA debt whose arrival time would not fit is capped at MaxStateValue, never refused",
			[]string{"settle", "maxima"}, lim("default", core.GCRA, 1, core.MaxWindow, 1)).
			settle(t0, core.MaxCost).take(t0+1, 1).settle(t0+2, -core.MaxCost).take(t0+3, 1),
		newCase("settle-sliding-huge", "a sliding window's debt is capped where its counts times Window reach 2^61",
			[]string{"settle", "maxima"}, lim("default", core.SlidingWindow, 4, 1_000_000_000, 0)).
			take(t0, 1).settle(t0+1, core.MaxUnits/1_000_000_000-1).take(t0+2, 1).settle(t0+3, 1).settle(t0+4, 2).
			settle(t0+5, -core.MaxUnits/1_000_000_000).take(t0+6, 4),
		newCase("settle-fixed-huge", "a fixed window's debt is capped at MaxStateValue, never refused",
			[]string{"settle", "maxima"}, lim("default", core.FixedWindow, 10, sec, 0)).
			take(t0, 1).settle(t0+1, core.MaxCost).take(t0+2, 1).
			settleFrom(t0+3, core.MaxCost, vectors.State{Algorithm: int32(core.FixedWindow), T: t0, X: core.MaxStateValue - 5, L: 10, W: sec}).
			take(t0+4, 1).take(t0+sec, 10),
		newCase("settle-bucket-huge", "a token bucket's debt is capped at a level of MaxStateValue, never refused",
			[]string{"settle", "maxima"}, lim("default", core.TokenBucket, 1_000_000, 1_000_000_000_000, 0)).
			take(t0, 1).settle(t0+1, core.MaxCost).take(t0+2, 1).settle(t0+3, -core.MaxCost).take(t0+4, 1_000_000),
		newCase("settle-multi", "settling several limits at once: every one is charged", []string{"settle", "multi"},
			lim("burst", core.TokenBucket, 5, sec, 0), lim("daily", core.FixedWindow, 8, day, 0)).
			take(t0, 2).settle(t0+1, 5).take(t0+2, 1).settle(t0+3, -7).take(t0+4, 5),
		newCase("settle-multi-capped", "a debt capped on one limit is still charged in full on the others", []string{"settle", "multi", "maxima"},
			lim("burst", core.TokenBucket, 5, sec, 0), lim("huge", core.GCRA, 1, core.MaxWindow, 1)).
			take(t0, 1).settle(t0+1, core.MaxCost).take(t0+2, 1),
		settleMultiError(),
		newCase("settle-carry", "a settle after the limit changed carries the state first", []string{"settle", "carry", "params"},
			lim("default", core.TokenBucket, 4, sec, 0)).
			take(t0, 2).settleWith(t0+1, 1, []vectors.Limit{lim("default", core.GCRA, 6, 2*sec, 0)}).take(t0+2, 3).take(t0+3, 1),
	)
	return cs
}
