// Package difftest holds the decision API's implementations to one another:
// it generates seeded random call sequences (Generate) and systematic ones at
// the bounds (Extremes), and drives any number of core.Decider
// implementations through the same sequence (Runner), reporting the first
// divergence with the seed that replays it and a minimized sequence.
//
// The native core (core.Native), the WebAssembly module (package wasm) and
// the SQL port (package internal/testkit/sqldecider) are compared with it by the
// tests of core, wasm and sql/migrations, and all three at once by this
// package's own tests.
package difftest

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"

	"github.com/rlcore/rl/core"
)

// Op is the call a Step makes.
type Op uint8

// The calls. Take and Peek on one limit go through the single-limit calls
// (core.Take, core.Peek) of deciders that have them (see Single), and through
// TakeAll and PeekAll otherwise; on any other number of limits they are
// TakeAll and PeekAll.
const (
	Take Op = iota
	Peek
	TakeAll
	PeekAll
	// SettleAll settles Cost, which may be negative, on every limit
	// (core.SettleAll).
	SettleAll
)

func (o Op) String() string {
	switch o {
	case Take:
		return "Take"
	case Peek:
		return "Peek"
	case TakeAll:
		return "TakeAll"
	case PeekAll:
		return "PeekAll"
	case SettleAll:
		return "SettleAll"
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Step is one call of a Sequence. The states carry over from call to call:
// each decider's states after a step are its states before the next.
type Step struct {
	Op        Op
	Now, Cost int64
	// Limits, when not nil, replaces the limits from this step on (a
	// configuration change); it has as many limits as before.
	Limits []core.Limit
	// States, when not nil, replaces the states before the call (a state
	// written elsewhere: fresh, foreign, corrupt, a log of any length and
	// capacity).
	States []core.State
}

// Sequence is a list of calls on one key: the limits and initial states,
// then the steps.
type Sequence struct {
	// Name says where the sequence comes from: "seed N" for Generate(N, …),
	// which returns it again, or the name of a systematic case.
	Name   string
	Limits []core.Limit
	States []core.State
	Steps  []Step
}

// Config shapes generated sequences. The zero value is the default: any
// input, valid or not, for the differential tests.
type Config struct {
	// MaxLimits bounds the number of limits of a sequence; 0 means
	// core.MaxLimits.
	MaxLimits int
	// MaxSteps bounds the number of steps; 0 means 40.
	MaxSteps int
	// Valid restricts sequences to what an invariant check can judge: one
	// valid limit that never changes, a fresh initial state, no injected
	// states, Take calls only, times and costs in range (the clock may still
	// step back).
	Valid bool
}

// Generate returns the sequence of seed under cfg; the same arguments always
// return the same sequence.
func Generate(seed uint64, cfg Config) Sequence {
	g := gen{r: rand.New(rand.NewPCG(seed, 0x6469666674657374)), cfg: cfg}
	s := g.sequence()
	s.Name = "seed " + strconv.FormatUint(seed, 10)
	return s
}

// FromBytes returns a sequence whose random choices are read from data, for
// fuzzing; once data is exhausted they continue from a generator seeded by
// it, so every input, even empty, makes a whole sequence.
func FromBytes(data []byte, cfg Config) Sequence {
	var h uint64 = 14695981039346656037 // FNV-1a
	for _, c := range data {
		h = (h ^ uint64(c)) * 1099511628211
	}
	g := gen{r: rand.New(&byteSource{b: data, rest: rand.NewPCG(h, uint64(len(data)))}), cfg: cfg}
	s := g.sequence()
	s.Name = "bytes " + strconv.Quote(string(data))
	return s
}

// byteSource reads 8 bytes per draw, then continues with rest.
type byteSource struct {
	b    []byte
	rest rand.Source
}

func (s *byteSource) Uint64() uint64 {
	if len(s.b) < 8 {
		s.b = nil
		return s.rest.Uint64()
	}
	v := binary.LittleEndian.Uint64(s.b)
	s.b = s.b[8:]
	return v
}

const (
	// Epoch2026 is 2026-01-01T00:00:00Z in µs, a present-day instant.
	Epoch2026 int64 = 1767225600000000
	day       int64 = 86_400_000_000
)

type gen struct {
	r   *rand.Rand
	cfg Config
}

// pick returns one of xs.
func (g *gen) pick(xs ...int64) int64 { return xs[g.r.IntN(len(xs))] }

// pct reports true p times in 100.
func (g *gen) pct(p int) bool { return g.r.IntN(100) < p }

// upTo returns a value in [0, n], biased to small ones; 0 for n <= 0.
func (g *gen) upTo(n int64) int64 {
	if n <= 0 {
		return 0
	}
	switch g.r.IntN(3) {
	case 0:
		return g.r.Int64N(min(n, 10) + 1)
	case 1:
		return g.r.Int64N(min(n, 1000) + 1)
	}
	if n == 1<<63-1 {
		return int64(g.r.Uint64() >> 1)
	}
	return g.r.Int64N(n + 1)
}

func (g *gen) algorithm() core.Algorithm {
	algs := core.Algorithms()
	return algs[g.r.IntN(len(algs))]
}

// limit returns parameters for a: mostly small and common ones, often at a
// bound, and for sequences that may be invalid, out of range a few times in
// a hundred.
func (g *gen) limit(a core.Algorithm) core.Limit {
	l := core.Limit{Algorithm: a}
	maxLim := core.MaxLimit
	if a == core.SlidingLog {
		maxLim = core.MaxLogLimit
		if !g.pct(5) {
			maxLim = 100 // long logs are slow in PL/pgSQL, and rarely add anything
		}
	}
	switch g.r.IntN(6) {
	case 0, 1:
		l.Limit = g.pick(1, 2, 3, 5, 10)
	case 2:
		l.Limit = 1 + g.r.Int64N(min(maxLim, 100))
	case 3:
		l.Limit = maxLim
	default:
		l.Limit = 1 + g.upTo(maxLim-1)
	}
	switch g.r.IntN(6) {
	case 0, 1:
		l.Window = g.pick(1, 2, 3, 7, 10, 1000)
	case 2:
		l.Window = g.pick(1_000_000, 60_000_000, 3_600_000_000, day)
	case 3:
		l.Window = g.pick(core.MaxWindow, 1_000_000_000_000)
	default:
		l.Window = 1 + g.upTo(core.MaxWindow-1)
	}
	if a.UnitsBounded() && l.Limit > core.MaxUnits/l.Window {
		if g.pct(50) {
			l.Window = max(1, core.MaxUnits/l.Limit)
		} else {
			l.Limit = max(1, core.MaxUnits/l.Window)
		}
	}
	if !a.Windowed() {
		switch g.r.IntN(5) {
		case 0, 1:
			l.Rate = 0
		case 2:
			l.Rate = g.pick(1, 2, 3, 7, l.Limit, l.Limit+1)
		case 3:
			l.Rate = core.MaxLimit
		default:
			l.Rate = 1 + g.upTo(core.MaxLimit-1)
		}
		l.Rate = min(l.Rate, core.MaxLimit)
	}
	if !g.cfg.Valid && g.pct(4) { // invalid: every field, alone and together
		switch g.r.IntN(9) {
		case 0:
			l.Algorithm = core.Algorithm(g.pick(0, 7, -1, 1<<20, int64(int32(g.r.Uint32()))))
		case 1:
			l.Limit = g.pick(0, -1, core.MaxLimit+1, core.MaxLogLimit+1, 1<<62, -1<<63)
		case 2:
			l.Window = g.pick(0, -1, core.MaxWindow+1, 1<<63-1)
		case 3:
			l.Rate = g.pick(-1, 1, core.MaxLimit+1)
		case 4:
			l.Limit, l.Window = core.MaxUnits/1000+1, 1000
		case 5:
			l.Limit, l.Window = 0, 0
		case 6:
			l.Window, l.Rate = 0, -1
		case 7:
			l.Algorithm, l.Limit = 0, 0
		default:
			l = core.Limit{Algorithm: core.Algorithm(g.r.Uint32()), Limit: int64(g.r.Uint64()),
				Window: int64(g.r.Uint64()), Rate: int64(g.r.Uint64())}
		}
	}
	return l
}

// state returns a state for l near now: fresh, plausible for l's algorithm
// or another's, corrupt, or a log, with log storage of some capacity.
func (g *gen) state(l core.Limit, now int64) core.State {
	var s core.State
	w, lim := max(l.Window, 1), max(l.Limit, 1)
	word := func() int64 {
		switch g.r.IntN(12) {
		case 0:
			return 0
		case 1:
			return g.upTo(10)
		case 2:
			return now
		case 3:
			return max(0, now-g.upTo(w*2))
		case 4:
			return now + g.upTo(w*2)
		case 5:
			return g.upTo(core.MaxStateValue)
		case 6:
			return g.pick(core.MaxStateValue, core.MaxUnits, core.MaxLimit)
		case 7:
			if g.pct(20) {
				return g.pick(-1, core.MaxStateValue+1, -1<<63, 1<<63-1)
			}
			return g.upTo(lim * 2)
		case 8:
			return g.upTo(lim * min(w, core.MaxUnits/lim))
		default:
			return g.upTo(lim * 2)
		}
	}
	switch g.r.IntN(10) {
	case 0, 1, 2: // fresh
	case 3, 4, 5: // plausible words of the limit's algorithm
		s.Algorithm = l.Algorithm
	case 6: // another algorithm's
		s.Algorithm = g.algorithm()
	case 7: // no algorithm, or an unknown one
		s.Algorithm = core.Algorithm(g.pick(0, -1, 7, 100, int64(int32(g.r.Uint32()))))
	default:
		s.Algorithm = core.SlidingLog
	}
	n := 0
	if s.Algorithm == core.SlidingLog || g.pct(6) {
		n = int(g.pick(0, 1, 2, 3, 5, 10, lim-1, lim, lim+1, 4095, 4096, 4097))
		n = max(0, min(n, int(g.upTo(5000))+1, 5000))
	}
	switch {
	case s.Algorithm == 0 && n == 0:
	case s.Algorithm == core.SlidingLog:
		if g.pct(5) {
			s.T = word()
		}
	default:
		s.T, s.X = word(), word()
		if s.Algorithm == core.SlidingWindow || g.pct(5) {
			s.Y = word()
		}
		if s.Algorithm == core.GCRA && g.pct(70) {
			s.X %= max(1, l.Rate, l.Limit)
		}
	}
	if s.Algorithm != 0 && g.pct(50) { // the parameters that wrote it
		p := l
		if s.Algorithm != l.Algorithm || g.pct(30) {
			p = g.limit(s.Algorithm)
		}
		s.L, s.W, s.R = p.Limit, p.Window, p.Rate
		if p.Rate == 0 && !p.Algorithm.Windowed() {
			s.R = p.Limit
		}
		if g.pct(5) { // not a valid limit: corrupt
			s.R = g.pick(0, -1, 1, core.MaxLimit+1)
		}
	}
	c := n + int(g.pick(0, 0, 1, 2, 10, 4096, 10000))
	if g.pct(25) {
		c = n
	}
	s.Log = make([]int64, n, c)
	t := max(0, now-g.upTo(2*w))
	for i := range s.Log {
		switch g.r.IntN(40) {
		case 0:
			t -= 5 // out of order: corrupt
		case 1:
			t = word()
		default:
			t += g.pick(0, 0, 1, max(1, w/lim), g.upTo(w))
		}
		s.Log[i] = t
	}
	if n == 0 && c == 0 && g.pct(50) {
		s.Log = nil
	}
	return s
}

// fresh returns a fresh state, with log storage of some capacity.
func (g *gen) fresh() core.State {
	switch g.r.IntN(4) {
	case 0:
		return core.State{}
	case 1:
		return core.State{Log: make([]int64, 0, core.MaxLogLimit)}
	}
	return core.State{Log: make([]int64, 0, g.pick(0, 1, 2, 10, 100))}
}

func (g *gen) sequence() Sequence {
	maxLimits := g.cfg.MaxLimits
	if maxLimits <= 0 {
		maxLimits = core.MaxLimits
	}
	maxSteps := g.cfg.MaxSteps
	if maxSteps <= 0 {
		maxSteps = 40
	}
	valid := g.cfg.Valid
	nl := 1
	if !valid {
		switch x := g.r.IntN(100); {
		case x < 70:
		case x < 82:
			nl = 2
		case x < 90:
			nl = 3
		case x < 98:
			nl = 1 + g.r.IntN(maxLimits)
		default:
			nl = 0
		}
		nl = min(nl, maxLimits)
	}
	var seq Sequence
	for range nl {
		seq.Limits = append(seq.Limits, g.limit(g.algorithm()))
	}
	var now int64
	switch g.r.IntN(6) {
	case 0:
		now = g.upTo(1000)
	case 1:
		now = core.MaxTime - g.upTo(day)
	case 2:
		now = g.upTo(core.MaxTime)
	default:
		now = Epoch2026 + g.upTo(day)
	}
	limits := seq.Limits
	states := func() []core.State {
		ss := make([]core.State, len(limits))
		for i, l := range limits {
			if g.pct(40) {
				ss[i] = g.state(l, now)
			} else {
				ss[i] = g.fresh()
			}
		}
		return ss
	}
	if valid {
		seq.States = []core.State{{Log: make([]int64, 0, core.MaxLogLimit)}}
	} else if g.pct(20) {
		seq.States = states()
	} else {
		for range limits {
			seq.States = append(seq.States, g.fresh())
		}
	}
	n := 1 + g.r.IntN(maxSteps)
	for range n {
		st := Step{Op: Take}
		if !valid {
			switch x := g.r.IntN(100); {
			case x < 20:
				st.Op = Peek
			case x < 40:
				st.Op = TakeAll
			case x < 50:
				st.Op = PeekAll
			case x < 58:
				st.Op = SettleAll
			}
			if len(limits) > 0 && g.pct(4) { // a configuration change
				next := make([]core.Limit, len(limits))
				for i, l := range limits {
					switch g.r.IntN(4) {
					case 0: // unchanged
						next[i] = l
					case 1: // another algorithm
						next[i] = g.limit(g.algorithm())
					case 2: // the same, one parameter moved
						next[i] = l
						switch g.r.IntN(3) {
						case 0:
							next[i].Limit = max(1, l.Limit+g.pick(-1, 1, l.Limit, -l.Limit/2))
						case 1:
							next[i].Window = max(1, l.Window+g.pick(-1, 1, l.Window, -l.Window/2))
						default:
							if !l.Algorithm.Windowed() {
								next[i].Rate = g.pick(0, 1, max(0, l.Rate-1), l.Rate+1, l.Rate*1000, core.MaxLimit)
							}
						}
					default:
						next[i] = g.limit(l.Algorithm)
					}
				}
				limits, st.Limits = next, next
			}
			if g.pct(4) {
				st.States = states()
			}
		}
		w := int64(1)
		if len(limits) > 0 {
			w = max(1, limits[g.r.IntN(len(limits))].Window)
		}
		switch g.r.IntN(16) {
		case 0:
		case 1:
			now++
		case 2:
			now += w - 1
		case 3:
			now += w
		case 4:
			now += w + 1
		case 5, 6:
			now -= g.upTo(w) // the clock steps back
		case 7:
			now -= g.pick(1, 1000, day)
		case 8:
			now += g.pick(day, 3650*day, 1<<40, 1<<50)
		case 9:
			now += g.upTo(w * 3)
		default:
			now += g.upTo(w / 4)
		}
		now = max(0, min(now, core.MaxTime))
		st.Now = now
		if !valid && g.pct(1) {
			st.Now = g.pick(-1, core.MaxTime+1, -1<<63, 1<<63-1)
		}
		lim := int64(1)
		if len(limits) > 0 {
			lim = max(1, min(limits[g.r.IntN(len(limits))].Limit, core.MaxCost))
		}
		switch g.r.IntN(12) {
		case 0:
			st.Cost = 0
		case 1:
			st.Cost = lim
		case 2:
			st.Cost = lim + 1
		case 3:
			st.Cost = lim - 1
		case 4:
			st.Cost = g.upTo(core.MaxCost)
		case 5:
			st.Cost = g.upTo(lim)
		default:
			st.Cost = 1 + g.upTo(2)
		}
		st.Cost = min(st.Cost, core.MaxCost)
		if !valid && g.pct(1) {
			st.Cost = g.pick(-1, core.MaxCost+1, 1<<62, -1<<63)
		}
		if st.Op == SettleAll && g.pct(40) {
			st.Cost = -st.Cost // a refund
		}
		seq.Steps = append(seq.Steps, st)
	}
	return seq
}
