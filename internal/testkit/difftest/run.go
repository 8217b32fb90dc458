package difftest

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/rlcore/rl/core"
)

// Decider is an implementation under test, named in reports.
type Decider struct {
	Name string
	core.Decider
}

// Single is implemented by deciders that also have the single-limit calls of
// package core. When every decider of a Runner has them, Take and Peek steps
// on one limit go through them.
type Single interface {
	Take(l core.Limit, s core.State, now, cost int64) (core.Decision, core.State, error)
	Peek(l core.Limit, s core.State, now, cost int64) (core.Decision, error)
}

// Runner drives deciders through sequences, each with states of its own, and
// requires each to return what the first does at every step: the same
// decisions, deciding index, core.Error (compared by value) and states.
type Runner struct {
	Deciders []Decider
	// Exact compares everything the Go memory shows, for deciders that
	// share it (native, WebAssembly): decisions even after an error (which
	// core leaves unspecified; decisions past the limits are prefilled, so
	// writing them is a divergence) and sliding logs' storage: nil-ness,
	// length, capacity, the backing array up to its capacity, and whether
	// the caller's array was written. Logs keep the capacity the sequence
	// gives them, so ErrLogCapacity occurs.
	//
	// Without Exact, decisions are compared when the call succeeded, logs
	// by their entries (nil equals empty), and every log is given room for
	// core.MaxLogLimit entries before each call, as the conformance vectors
	// do: storage capacity is a property of the Go memory, which the SQL
	// port's arrays do not have.
	Exact bool
	// Workers is how many sequences Check runs at once; 0 means 1.
	Workers int
}

// Divergence is the first step of a sequence where a decider's result
// differs from the first decider's.
type Divergence struct {
	Seq  Sequence
	Step int
	Msg  string
}

// Error describes the divergence and prints the sequence up to it.
func (d *Divergence) Error() string {
	return fmt.Sprintf("%s, step %d: %s\nsequence:\n%s", d.Seq.Name, d.Step, d.Msg, d.Seq.format(d.Step+1))
}

// Stats counts the outcomes of the first decider's calls, by call and by
// algorithm (one-limit calls), to show which paths sequences reach.
type Stats struct {
	Sequences, Steps int
	Outcomes         map[string]int
}

func (s *Stats) add(o Stats) {
	s.Sequences += o.Sequences
	s.Steps += o.Steps
	if s.Outcomes == nil {
		s.Outcomes = map[string]int{}
	}
	for k, v := range o.Outcomes {
		s.Outcomes[k] += v
	}
}

// String lists the outcomes, sorted.
func (s Stats) String() string {
	keys := make([]string, 0, len(s.Outcomes))
	for k := range s.Outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%d sequences, %d steps:", s.Sequences, s.Steps)
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %-40s %d", k, s.Outcomes[k])
	}
	return b.String()
}

type world struct {
	d      Decider
	single Single // nil when d has no single-limit calls
	states []core.State
}

// outcome is one decider's result of one step.
type outcome struct {
	call   string
	index  int
	err    error
	ds     []core.Decision
	before []core.State // the states the call was given (their log arrays may since have been written)
	after  []core.State
}

// Run drives every decider through seq and returns the first divergence, or
// nil.
func (r *Runner) Run(seq Sequence) *Divergence { return r.run(seq, nil) }

func (r *Runner) run(seq Sequence, stats *Stats) *Divergence {
	ws := make([]world, len(r.Deciders))
	all := true
	for i, d := range r.Deciders {
		ws[i] = world{d: d, states: cloneStates(seq.States)}
		ws[i].single, _ = d.Decider.(Single)
		all = all && ws[i].single != nil
	}
	if !all {
		for i := range ws {
			ws[i].single = nil
		}
	}
	limits := seq.Limits
	outs := make([]outcome, len(ws))
	for k, st := range seq.Steps {
		if st.Limits != nil {
			limits = st.Limits
		}
		for i := range ws {
			w := &ws[i]
			if st.States != nil {
				w.states = cloneStates(st.States)
			}
			if !r.Exact {
				giveRoom(w.states)
			}
			outs[i] = call(w, limits, st)
		}
		if stats != nil {
			stats.count(outs[0], limits)
		}
		for i := 1; i < len(ws); i++ {
			a, b := outs[0], outs[i]
			if msg := r.compare(a, b); msg != "" {
				return &Divergence{Seq: seq, Step: k, Msg: fmt.Sprintf("%s (%d limits, now %d, cost %d): %s\n"+
					"  %s: %s\n  %s: %s", outs[0].call, len(limits), st.Now, st.Cost, msg,
					ws[0].d.Name, outs[0].describe(), ws[i].d.Name, outs[i].describe())}
			}
		}
	}
	if stats != nil {
		stats.Sequences++
	}
	return nil
}

func (s *Stats) count(o outcome, limits []core.Limit) {
	if s.Outcomes == nil {
		s.Outcomes = map[string]int{}
	}
	s.Steps++
	res := "denied"
	var ce core.Error
	switch {
	case errors.As(o.err, &ce):
		res = "error " + strconv.Itoa(int(ce)) + " " + ce.Error()
	case o.err != nil:
		res = "error " + o.err.Error()
	case o.index >= 0 && o.index < len(o.ds) && o.ds[o.index].Allowed:
		res = "allowed"
	}
	n := strconv.Itoa(min(len(limits), 3))
	if len(limits) > 3 {
		n = "n"
	}
	s.Outcomes[o.call+"/"+n+" "+res]++
	if len(limits) == 1 && limits[0].Validate() == nil && o.err == nil {
		s.Outcomes[limits[0].Algorithm.String()+" "+res]++
	}
}

// call makes st's call on w.
func call(w *world, ls []core.Limit, st Step) outcome {
	o := outcome{before: slices.Clone(w.states)}
	o.ds = make([]core.Decision, len(ls)+1)
	for i := range o.ds {
		o.ds[i] = core.Decision{Limit: -7, Remaining: int64(i)} // untouched entries show
	}
	take := st.Op == Take || st.Op == TakeAll
	switch {
	case (st.Op == Take || st.Op == Peek) && len(ls) == 1 && len(w.states) >= 1 && w.single != nil:
		if take {
			o.call = "Take"
			var n core.State
			o.ds[0], n, o.err = w.single.Take(ls[0], w.states[0], st.Now, st.Cost)
			w.states[0] = n
		} else {
			o.call = "Peek"
			o.ds[0], o.err = w.single.Peek(ls[0], w.states[0], st.Now, st.Cost)
		}
	case st.Op == SettleAll:
		o.call = "SettleAll"
		o.index, o.err = w.d.SettleAll(ls, w.states, st.Now, st.Cost, o.ds)
	case take:
		o.call = "TakeAll"
		o.index, o.err = w.d.TakeAll(ls, w.states, st.Now, st.Cost, o.ds)
	default:
		o.call = "PeekAll"
		o.index, o.err = w.d.PeekAll(ls, w.states, st.Now, st.Cost, o.ds)
	}
	o.after = slices.Clone(w.states)
	return o
}

func (o *outcome) describe() string {
	if o.err != nil {
		return fmt.Sprintf("index %d, error %v; states %s", o.index, o.err, formatStates(o.after))
	}
	return fmt.Sprintf("index %d, decisions %+v; states %s", o.index, o.ds, formatStates(o.after))
}

// compare returns what differs between the reference outcome a and b.
func (r *Runner) compare(a, b outcome) string {
	if !sameErr(a.err, b.err) {
		return "errors differ"
	}
	if a.index != b.index {
		return "indexes differ"
	}
	if (a.err == nil || r.Exact) && !slices.Equal(a.ds, b.ds) {
		return "decisions differ"
	}
	for i := range a.after {
		if msg := r.sameState(a.after[i], b.after[i], a.before[i], b.before[i]); msg != "" {
			return fmt.Sprintf("state %d: %s", i, msg)
		}
	}
	return ""
}

func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	var ae, be core.Error
	return errors.As(a, &ae) && errors.As(b, &be) && ae == be
}

// sameState compares states after a call; origA and origB are the states
// each decider was given.
func (r *Runner) sameState(a, b, origA, origB core.State) string {
	if a.Algorithm != b.Algorithm || a.T != b.T || a.X != b.X || a.Y != b.Y || a.L != b.L || a.W != b.W || a.R != b.R {
		return "words differ"
	}
	if !r.Exact {
		if !slices.Equal(a.Log, b.Log) {
			return "logs differ"
		}
		return ""
	}
	if (a.Log == nil) != (b.Log == nil) || len(a.Log) != len(b.Log) || cap(a.Log) != cap(b.Log) {
		return fmt.Sprintf("log storage differs: nil %v, len %d, cap %d vs nil %v, len %d, cap %d",
			a.Log == nil, len(a.Log), cap(a.Log), b.Log == nil, len(b.Log), cap(b.Log))
	}
	if !slices.Equal(a.Log[:cap(a.Log)], b.Log[:cap(b.Log)]) {
		return "log backing arrays differ"
	}
	sharesA := a.Log != nil && origA.Log != nil && unsafe.SliceData(a.Log) == unsafe.SliceData(origA.Log)
	sharesB := b.Log != nil && origB.Log != nil && unsafe.SliceData(b.Log) == unsafe.SliceData(origB.Log)
	if sharesA != sharesB {
		return fmt.Sprintf("log in the caller's array: %v vs %v", sharesA, sharesB)
	}
	return ""
}

// cloneStates copies states into backing arrays of their own, of the same
// length and capacity and with the same contents up to the capacity.
func cloneStates(ss []core.State) []core.State {
	out := make([]core.State, len(ss))
	for i, s := range ss {
		out[i] = s
		if s.Log != nil {
			out[i].Log = make([]int64, len(s.Log), cap(s.Log))
			copy(out[i].Log[:cap(s.Log)], s.Log[:cap(s.Log)])
		}
	}
	return out
}

// giveRoom makes every log able to hold core.MaxLogLimit entries.
func giveRoom(ss []core.State) {
	for i := range ss {
		if cap(ss[i].Log) < int(core.MaxLogLimit) {
			ss[i].Log = append(make([]int64, 0, int(core.MaxLogLimit)+len(ss[i].Log)), ss[i].Log...)
		}
	}
}

// Minimize returns the divergence of the shortest sequence found by
// dropping steps from d's that still diverges (not always the shortest
// there is). Its steps end at the divergent one.
func (r *Runner) Minimize(d *Divergence) *Divergence {
	cur := *d
	cur.Seq.Steps = cur.Seq.Steps[:d.Step+1]
	cur.Seq.Name = d.Seq.Name + ", minimized"
	for budget := 2000; budget > 0; {
		shorter := false
		for i := 0; i < len(cur.Seq.Steps) && len(cur.Seq.Steps) > 1 && budget > 0; i++ {
			try := cur.Seq
			try.Steps = slices.Delete(slices.Clone(cur.Seq.Steps), i, i+1)
			budget--
			if dv := r.Run(try); dv != nil {
				dv.Seq.Steps = dv.Seq.Steps[:dv.Step+1]
				cur, shorter = *dv, true
				i--
			}
		}
		if !shorter {
			break
		}
	}
	return &cur
}

// Check runs n sequences generated under cfg, sequence i from seed+i, and
// fails t at the first divergence, reporting it minimized with the
// environment that replays it: RL_DIFF_SEED and RL_DIFF_N replace seed and
// n. It returns what the sequences reached.
func (r *Runner) Check(t testing.TB, cfg Config, seed uint64, n int) Stats {
	t.Helper()
	if s := os.Getenv("RL_DIFF_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("RL_DIFF_SEED: %v", err)
		}
		seed = v
	}
	if s := os.Getenv("RL_DIFF_N"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("RL_DIFF_N: %v", err)
		}
		n = v
	}
	stats, d := r.check(n, func(i int) Sequence { return Generate(seed+uint64(i), cfg) })
	if d != nil {
		seqSeed, _ := strconv.ParseUint(strings.TrimPrefix(d.Seq.Name, "seed "), 10, 64)
		t.Fatalf("%v\n\n%v\n\nreplay: RL_DIFF_SEED=%d RL_DIFF_N=1 go test -run '^%s$'", d, r.Minimize(d), seqSeed, t.Name())
	}
	return stats
}

// CheckSequences runs seqs and fails t at the first divergence, reporting
// it minimized. It returns what the sequences reached.
func (r *Runner) CheckSequences(t testing.TB, seqs []Sequence) Stats {
	t.Helper()
	stats, d := r.check(len(seqs), func(i int) Sequence { return seqs[i] })
	if d != nil {
		t.Fatalf("%v\n\n%v", d, r.Minimize(d))
	}
	return stats
}

func (r *Runner) check(n int, seq func(int) Sequence) (Stats, *Divergence) {
	var (
		next   atomic.Int64
		failed atomic.Bool
		mu     sync.Mutex
		first  *Divergence
		total  Stats
		wg     sync.WaitGroup
	)
	for range max(1, r.Workers) {
		wg.Go(func() {
			var stats Stats
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					break
				}
				if d := r.run(seq(i), &stats); d != nil {
					mu.Lock()
					if first == nil {
						first = d
					}
					mu.Unlock()
					failed.Store(true)
				}
			}
			mu.Lock()
			total.add(stats)
			mu.Unlock()
		})
	}
	wg.Wait()
	return total, first
}

// format prints the limits, initial states and first n steps.
func (s Sequence) format(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  limits %s\n  states %s\n", formatLimits(s.Limits), formatStates(s.States))
	for k, st := range s.Steps[:min(n, len(s.Steps))] {
		fmt.Fprintf(&b, "  %2d %-7s now %d cost %d", k, st.Op, st.Now, st.Cost)
		if st.Limits != nil {
			fmt.Fprintf(&b, " limits %s", formatLimits(st.Limits))
		}
		if st.States != nil {
			fmt.Fprintf(&b, " states %s", formatStates(st.States))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// String prints the sequence.
func (s Sequence) String() string { return s.Name + "\n" + s.format(len(s.Steps)) }

func formatLimits(ls []core.Limit) string {
	var parts []string
	for _, l := range ls {
		parts = append(parts, fmt.Sprintf("{alg %d limit %d window %d rate %d}", l.Algorithm, l.Limit, l.Window, l.Rate))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func formatStates(ss []core.State) string {
	var parts []string
	for _, s := range ss {
		p := fmt.Sprintf("{%d T %d X %d Y %d L %d W %d R %d", s.Algorithm, s.T, s.X, s.Y, s.L, s.W, s.R)
		switch {
		case s.Log == nil:
		case len(s.Log) <= 8:
			p += fmt.Sprintf(" log %v cap %d", s.Log, cap(s.Log))
		default:
			p += fmt.Sprintf(" log [%d … %d] len %d cap %d", s.Log[0], s.Log[len(s.Log)-1], len(s.Log), cap(s.Log))
		}
		parts = append(parts, p+"}")
	}
	return "[" + strings.Join(parts, " ") + "]"
}
