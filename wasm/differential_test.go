package wasm_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/wasm"
)

// The differential tests feed the same scenario to the native core and to
// the module and require identical decisions, indexes, errors and states,
// down to the nil-ness, length, capacity, contents and backing array of every
// sliding log. A scenario is decoded from bytes, so the fuzzer can explore
// it: limits (valid, at and beyond every bound), initial states (fresh,
// plausible, corrupt, foreign, logs of every length and capacity), then a
// sequence of calls whose states carry over, with times that advance, step
// back, jump and leave the range, costs around the limits, injected states
// and parameter changes.

// FuzzDifferential: go test -fuzz=FuzzDifferential ./wasm
func FuzzDifferential(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 32 {
		f.Add(randomBytes(rng))
	}
	f.Add([]byte{})
	f.Add([]byte{0, 3, 0, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if msg := differential(data); msg != "" {
			t.Fatal(msg)
		}
	})
}

// TestDifferential is the seeded version that runs with every go test.
func TestDifferential(t *testing.T) {
	n := 20000
	if testing.Short() || raceEnabled {
		n = 2000
	}
	rng := rand.New(rand.NewPCG(20260101, 1))
	clear(outcomes)
	for i := range n {
		data := randomBytes(rng)
		if msg := differential(data); msg != "" {
			t.Fatalf("case %d (data %x):\n%s", i, data, msg)
		}
	}
	t.Logf("%d scenarios; outcomes of the calls: %v", n, outcomes)
}

// outcomes counts what the calls of the seeded scenarios returned, to show
// that they reach every path.
var outcomes = map[string]int{}

func count(op string, err error, allowed bool) {
	switch {
	case err != nil:
		op += " " + err.Error()
	case allowed:
		op += " allowed"
	default:
		op += " denied"
	}
	outcomes[op]++
}

func randomBytes(rng *rand.Rand) []byte {
	b := make([]byte, 16+rng.IntN(400))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// src reads a scenario's choices from bytes; exhausted, it continues with a
// generator seeded by them, so short inputs still make long scenarios and
// every input is deterministic.
type src struct {
	b   []byte
	rng *rand.Rand
}

func newSrc(data []byte) *src {
	var seed uint64 = 14695981039346656037
	for _, c := range data {
		seed = (seed ^ uint64(c)) * 1099511628211
	}
	return &src{b: data, rng: rand.New(rand.NewPCG(seed, uint64(len(data))))}
}

func (s *src) u8() byte {
	if len(s.b) == 0 {
		return byte(s.rng.Uint32())
	}
	v := s.b[0]
	s.b = s.b[1:]
	return v
}

func (s *src) u64() uint64 {
	if len(s.b) < 8 {
		s.b = nil
		return s.rng.Uint64()
	}
	v := binary.LittleEndian.Uint64(s.b)
	s.b = s.b[8:]
	return v
}

func (s *src) pick(vs ...int64) int64 { return vs[int(s.u8())%len(vs)] }

// i64 returns one of the interesting values or, one time in eight, any
// int64, and one in eight, a small one.
func (s *src) i64(interesting ...int64) int64 {
	switch s.u8() % 8 {
	case 0:
		return int64(s.u64())
	case 1:
		return int64(s.u64() % 1000)
	default:
		return s.pick(interesting...)
	}
}

const base = 1767225600000000 // 2026-01-01T00:00:00Z in µs

// limit returns a valid limit seven times in eight, else anything.
func (s *src) limit() core.Limit {
	if s.u8()%8 == 0 {
		l := core.Limit{Algorithm: core.Algorithm(s.u8() % 8)}
		if s.u8() == 255 {
			l.Algorithm = core.Algorithm(int32(s.u64()))
		}
		l.Limit = s.i64(1, 2, 3, 5, 10, 100, 1000, 4096, 4097, core.MaxLimit, core.MaxLimit+1, 0, -1)
		l.Window = s.i64(1, 7, 1000, 1_000_000, 60_000_000, 86_400_000_000, core.MaxWindow, core.MaxWindow+1, 0, -5)
		l.Rate = s.i64(0, 0, 0, 1, 2, 7, 100, core.MaxLimit, core.MaxLimit+1, -1)
		return l
	}
	l := core.Limit{Algorithm: core.Algorithm(1 + s.u8()%6)}
	l.Limit = s.pick(1, 2, 3, 5, 10, 100, 1000, 4096)
	if s.u8()%8 == 0 {
		l.Limit = 1 + int64(s.u64()%uint64(core.MaxLimit))
	}
	l.Window = s.pick(1, 7, 1000, 1_000_000, 60_000_000, 86_400_000_000, 1_000_000_000_000)
	if s.u8()%16 == 0 {
		l.Window = s.pick(core.MaxWindow, 1+int64(s.u64()%uint64(core.MaxWindow)))
	}
	switch l.Algorithm {
	case core.SlidingLog:
		l.Limit = min(l.Limit, core.MaxLogLimit)
	case core.TokenBucket, core.LeakyBucket, core.GCRA:
		l.Rate = s.pick(0, 0, 1, 2, 3, 7, 100, l.Limit, core.MaxLimit)
	}
	if l.Algorithm != core.FixedWindow && l.Algorithm != core.SlidingLog && l.Limit > core.MaxUnits/l.Window && s.u8()%4 != 0 {
		l.Limit = max(1, core.MaxUnits/l.Window)
	}
	return l
}

// state returns a state for a limit, with log storage of some capacity.
func (s *src) state(l core.Limit, now int64) core.State {
	var st core.State
	switch s.u8() % 8 {
	case 0, 1, 2: // fresh
	case 3, 4: // plausible words of the limit's algorithm (or another's)
		st.Algorithm = l.Algorithm
		if s.u8()%4 == 0 {
			st.Algorithm = core.Algorithm(s.u8() % 7)
		}
		st.T = now - int64(s.u64()%uint64(max(1, 2*l.Window)))
		st.X = int64(s.u64() % uint64(max(1, min(l.Limit*max(1, l.Window), 1<<50))))
		if st.Algorithm == core.SlidingWindow {
			st.Y = int64(s.u64() % uint64(max(1, l.Limit+1)))
		}
		if st.Algorithm == core.GCRA {
			st.X %= max(1, l.Rate, l.Limit)
		}
	case 5: // anything
		st.Algorithm = core.Algorithm(s.u8() % 8)
		if s.u8()%4 == 0 {
			st.Algorithm = core.Algorithm(int32(s.u64()))
		}
		st.T = s.i64(0, -1, core.MaxStateValue, core.MaxStateValue+1, now, now+1_000_000)
		st.X = s.i64(0, -1, 1, core.MaxLimit, core.MaxLimit+1, core.MaxStateValue+1)
		st.Y = s.i64(0, 0, 1, -1)
	default: // a sliding log
		st.Algorithm = core.SlidingLog
	}
	n := 0
	if st.Algorithm == core.SlidingLog || s.u8()%16 == 0 {
		n = int(s.pick(0, 1, 2, 3, 5, 10, 100, l.Limit-1, l.Limit, 4095, 4096, 4097, 5000))
		n = max(0, min(n, 5000))
	}
	c := n + int(s.pick(0, 0, 1, 2, 10, 4096, 10000))
	if s.u8()%4 == 0 {
		c = n
	}
	st.Log = make([]int64, n, c)
	t := now - int64(s.u64()%uint64(max(1, 2*l.Window)))
	for i := range st.Log {
		switch s.u8() % 32 {
		case 0:
			t -= 5 // out of order: corrupt
		case 1:
			t = int64(s.u64()) // anything
		default:
			t += int64(s.u8()%4) * max(1, l.Window/max(1, l.Limit))
		}
		st.Log[i] = t
	}
	if n == 0 && c == 0 && s.u8()%2 == 0 {
		st.Log = nil
	}
	return st
}

// clone copies states into fresh backing arrays of the same length and
// capacity.
func clone(ss []core.State) []core.State {
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

// sameState compares two states of the two worlds; origN and origW are the
// states each world started the call with.
func sameState(n, w, origN, origW core.State) string {
	if n.Algorithm != w.Algorithm || n.T != w.T || n.X != w.X || n.Y != w.Y {
		return fmt.Sprintf("words: native %+v, wasm %+v", n, w)
	}
	if (n.Log == nil) != (w.Log == nil) || len(n.Log) != len(w.Log) || cap(n.Log) != cap(w.Log) {
		return fmt.Sprintf("log: native nil=%v len %d cap %d, wasm nil=%v len %d cap %d",
			n.Log == nil, len(n.Log), cap(n.Log), w.Log == nil, len(w.Log), cap(w.Log))
	}
	if !slices.Equal(n.Log[:cap(n.Log)], w.Log[:cap(w.Log)]) {
		return "log backing arrays differ"
	}
	sharesN := n.Log != nil && origN.Log != nil && unsafe.SliceData(n.Log) == unsafe.SliceData(origN.Log)
	sharesW := w.Log != nil && origW.Log != nil && unsafe.SliceData(w.Log) == unsafe.SliceData(origW.Log)
	if sharesN != sharesW {
		return fmt.Sprintf("log shares the caller's array: native %v, wasm %v", sharesN, sharesW)
	}
	return ""
}

func sameErr(n, w error) bool {
	if n == nil || w == nil {
		return n == w
	}
	var ne, we core.Error
	return errors.As(n, &ne) && errors.As(w, &we) && ne == we && errors.Is(w, n)
}

// differential runs one scenario and returns a description of the first
// difference, or "".
func differential(data []byte) string {
	s := newSrc(data)
	now := base + int64(s.u64()%1_000_000_000_000)
	if s.u8()%16 == 0 {
		now = s.i64(0, 1, core.MaxTime, core.MaxTime-1)
	}
	nl := 1
	switch s.u8() % 16 {
	case 0:
		nl = 2
	case 1:
		nl = 3
	case 2:
		nl = int(s.u8() % 18) // 0 … 17
	}
	ls := make([]core.Limit, nl)
	for i := range ls {
		ls[i] = s.limit()
	}
	nat := make([]core.State, nl)
	for i := range nat {
		nat[i] = s.state(ls[i], now)
	}
	wsm := clone(nat)
	steps := 1 + int(s.u8()%24)
	var trace []string
	for step := range steps {
		// Time: mostly forward, sometimes back, far, or out of range.
		switch s.u8() % 16 {
		case 0:
			now -= int64(s.u8()) * 1000
		case 1:
			now += int64(s.u64() % (1 << 50))
		case 2:
			if s.u8()%4 == 0 {
				now = s.i64(-1, core.MaxTime, core.MaxTime+1, 0)
			}
		case 3:
		default:
			now += int64(s.u8()) * s.pick(1, 1000, 100_000, 1_000_000)
		}
		cost := s.pick(1, 1, 1, 1, 1, 1, 0, 2, 3, 5, 10, 100)
		if s.u8()%16 == 0 {
			cost = s.i64(4096, core.MaxCost, core.MaxCost+1, -1)
		}
		if nl > 0 && s.u8()%4 == 0 {
			cost = ls[0].Limit + s.pick(-1, 0, 1)
		}
		switch s.u8() % 32 {
		case 0: // change parameters
			if nl > 0 {
				ls[int(s.u8())%nl] = s.limit()
			}
		case 1: // inject a state
			if nl > 0 {
				i := int(s.u8()) % nl
				nat[i] = s.state(ls[i], now)
				wsm[i] = clone(nat[i : i+1])[0]
			}
		}
		op := s.u8() % 4
		trace = append(trace, fmt.Sprintf("step %d: op %d now %d cost %d limits %+v states %s", step, op, now, cost, ls, summary(nat)))
		fail := func(format string, args ...any) string {
			return fmt.Sprintf("%s\n"+format, append([]any{joinLines(trace)}, args...)...)
		}
		// The states as the call receives them, for the log identity checks.
		origN, origW := slices.Clone(nat), slices.Clone(wsm)
		if op < 2 && nl == 1 { // single-limit calls
			if op == 0 {
				dn, sn, en := core.Take(ls[0], nat[0], now, cost)
				dw, sw, ew := pool.Take(ls[0], wsm[0], now, cost)
				if !sameErr(en, ew) || dn != dw {
					return fail("Take: native %+v %v, wasm %+v %v", dn, en, dw, ew)
				}
				if msg := sameState(sn, sw, nat[0], wsm[0]); msg != "" {
					return fail("Take state: %s", msg)
				}
				nat[0], wsm[0] = sn, sw
				count("take", en, dn.Allowed)
			} else {
				dn, en := core.Peek(ls[0], nat[0], now, cost)
				dw, ew := pool.Peek(ls[0], wsm[0], now, cost)
				if !sameErr(en, ew) || dn != dw {
					return fail("Peek: native %+v %v, wasm %+v %v", dn, en, dw, ew)
				}
				count("peek", en, dn.Allowed)
			}
			continue
		}
		// Multi-limit calls; slices may be longer than ls, decisions are
		// prefilled so untouched entries are compared too.
		dn := make([]core.Decision, nl+1)
		for i := range dn {
			dn[i] = core.Decision{Limit: -7, Remaining: int64(i)}
		}
		dw := slices.Clone(dn)
		var (
			in, iw int
			en, ew error
		)
		if op%2 == 0 {
			in, en = core.TakeAll(ls, nat, now, cost, dn)
			iw, ew = pool.TakeAll(ls, wsm, now, cost, dw)
		} else {
			in, en = core.PeekAll(ls, nat, now, cost, dn)
			iw, ew = pool.PeekAll(ls, wsm, now, cost, dw)
		}
		if nl > wasm.MaxLimits {
			if !errors.Is(ew, wasm.ErrTooManyLimits) {
				return fail("%d limits: wasm error %v, want ErrTooManyLimits", nl, ew)
			}
			return ""
		}
		count(fmt.Sprintf("all(op %d, %d limits)", op%2, min(nl, 2)), en, en == nil && dn[in].Allowed)
		if !sameErr(en, ew) || in != iw {
			return fail("All: native %d %v, wasm %d %v", in, en, iw, ew)
		}
		if !slices.Equal(dn, dw) {
			return fail("All decisions:\nnative %+v\nwasm   %+v", dn, dw)
		}
		for i := range nat {
			if msg := sameState(nat[i], wsm[i], origN[i], origW[i]); msg != "" {
				return fail("All state %d: %s", i, msg)
			}
		}
	}
	return ""
}

// summary describes states without their log entries.
func summary(ss []core.State) string {
	out := ""
	for _, s := range ss {
		out += fmt.Sprintf("{%d %d %d %d log len %d cap %d nil %v} ", s.Algorithm, s.T, s.X, s.Y, len(s.Log), cap(s.Log), s.Log == nil)
	}
	return out
}

func joinLines(s []string) string {
	out := ""
	for _, l := range s {
		out += l + "\n"
	}
	return out
}
