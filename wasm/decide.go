package wasm

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/rlcore/rl/core"
)

var le = binary.LittleEndian

// TakeAll is core.TakeAll run by the module: it decides cost against every
// limit in ls at once, all or nothing, with the contract of core.TakeAll
// (identical decisions, index, new states written into ss, sliding-log
// entries written into the backing array of each ss[i].Log, and the same
// core.Error values). Beyond that contract it returns ErrTooManyLimits for
// more than MaxLimits limits, ErrClosed after Close, and an error matching
// ErrTrap if the module trapped. It allocates nothing.
func (p *Pool) TakeAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	return p.all(true, ls, ss, now, cost, ds)
}

// PeekAll is core.PeekAll run by the module: what TakeAll would return,
// changing nothing. Its extra errors are TakeAll's.
func (p *Pool) PeekAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	return p.all(false, ls, ss, now, cost, ds)
}

// Take is core.Take run by the module: one limit, with core.Take's contract.
// Its extra errors are TakeAll's.
func (p *Pool) Take(l core.Limit, s core.State, now, cost int64) (core.Decision, core.State, error) {
	in, err := p.get()
	if err != nil {
		return core.Decision{}, s, err
	}
	b, _ := in.mem.Read(in.buf, bufferBytes)
	putSlot(slotOf(b, 0), &l, &s)
	in.stack[0], in.stack[1] = uint64(now), uint64(cost)
	if err := in.take.CallWithStack(context.Background(), in.stack); err != nil {
		return core.Decision{}, s, p.trap(in, "rl_take", err)
	}
	status := uint32(in.stack[0])
	b, _ = in.mem.Read(in.buf, bufferBytes)
	w := slotOf(b, 0)
	var d core.Decision
	switch {
	case status == 0:
		getDecision(w, &d)
		if le.Uint64(b[hWritten:]) != 0 {
			if err := getState(w, &s); err != nil {
				p.put(in)
				return core.Decision{}, s, err
			}
		}
	case status <= uint32(core.ErrLimits):
		err = core.Error(status)
	default:
		err = statusError(status)
	}
	p.put(in)
	return d, s, err
}

// Peek is core.Peek run by the module. Its extra errors are TakeAll's.
func (p *Pool) Peek(l core.Limit, s core.State, now, cost int64) (core.Decision, error) {
	in, err := p.get()
	if err != nil {
		return core.Decision{}, err
	}
	b, _ := in.mem.Read(in.buf, bufferBytes)
	putSlot(slotOf(b, 0), &l, &s)
	in.stack[0], in.stack[1] = uint64(now), uint64(cost)
	if err := in.peek.CallWithStack(context.Background(), in.stack); err != nil {
		return core.Decision{}, p.trap(in, "rl_peek", err)
	}
	status := uint32(in.stack[0])
	b, _ = in.mem.Read(in.buf, bufferBytes)
	var d core.Decision
	switch {
	case status == 0:
		getDecision(slotOf(b, 0), &d)
	case status <= uint32(core.ErrLimits):
		err = core.Error(status)
	default:
		err = statusError(status)
	}
	p.put(in)
	return d, err
}

// SettleAll is core.SettleAll run by the module: delta settled on every
// limit of ls, each state of ss replaced. Its extra errors are TakeAll's.
func (p *Pool) SettleAll(ls []core.Limit, ss []core.State, now, delta int64, ds []core.Decision) (int, error) {
	return p.run(opSettle, ls, ss, now, delta, ds)
}

// The multi-limit exports.
const (
	opPeek = iota
	opTake
	opSettle
)

func (p *Pool) all(take bool, ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	op := opPeek
	if take {
		op = opTake
	}
	return p.run(op, ls, ss, now, cost, ds)
}

func (p *Pool) run(o int, ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	n := len(ls)
	if len(ss) < n || len(ds) < n {
		return 0, core.ErrLimits
	}
	if n > MaxLimits {
		return 0, ErrTooManyLimits
	}
	in, err := p.get()
	if err != nil {
		return 0, err
	}
	// A view of the buffer; read again after the call in case the module
	// grew its memory (it does not, but the view would then be stale).
	b, _ := in.mem.Read(in.buf, bufferBytes)
	for i := range n {
		putSlot(slotOf(b, i), &ls[i], &ss[i])
	}
	fn, op := in.peekAll, "rl_peek_all"
	switch o {
	case opTake:
		fn, op = in.takeAll, "rl_take_all"
	case opSettle:
		fn, op = in.settleAll, "rl_settle_all"
	}
	in.stack[0], in.stack[1], in.stack[2] = uint64(n), uint64(now), uint64(cost)
	if err := fn.CallWithStack(context.Background(), in.stack); err != nil {
		return 0, p.trap(in, op, err)
	}
	status := uint32(in.stack[0])
	b, _ = in.mem.Read(in.buf, bufferBytes)
	index := int(int64(le.Uint64(b[hIndex:])))
	switch {
	case status == 0:
		if index < 0 || index >= n {
			err = errBadOutput
			break
		}
		getDecisions(b, ds[:n])
		if le.Uint64(b[hWritten:]) != 0 {
			for i := range n {
				if err = getState(slotOf(b, i), &ss[i]); err != nil {
					break
				}
			}
		}
	case status <= uint32(core.ErrLimits):
		if index < 0 || index >= max(n, 1) {
			err = errBadOutput
			break
		}
		// Like core, which may have written some decisions before failing.
		getDecisions(b, ds[:n])
		err = core.Error(status)
	default:
		err = statusError(status)
	}
	p.put(in)
	if err != nil && status == 0 {
		index = 0
	}
	return index, err
}

// slotOf returns slot i's fixed head and its log region.
func slotOf(b []byte, i int) []byte {
	off := headerBytes + i*slotBytes
	return b[off : off+slotBytes : off+slotBytes]
}

// putSlot writes a limit and a state into a slot.
func putSlot(w []byte, l *core.Limit, s *core.State) {
	h := (*[slotHeadBytes]byte)(w[:slotHeadBytes])
	le.PutUint64(h[oLimitAlgorithm:], uint64(int64(l.Algorithm)))
	le.PutUint64(h[oLimitLimit:], uint64(l.Limit))
	le.PutUint64(h[oLimitWindow:], uint64(l.Window))
	le.PutUint64(h[oLimitRate:], uint64(l.Rate))
	le.PutUint64(h[oStateAlgorithm:], uint64(int64(s.Algorithm)))
	le.PutUint64(h[oStateT:], uint64(s.T))
	le.PutUint64(h[oStateX:], uint64(s.X))
	le.PutUint64(h[oStateY:], uint64(s.Y))
	le.PutUint64(h[oStateL:], uint64(s.L))
	le.PutUint64(h[oStateW:], uint64(s.W))
	le.PutUint64(h[oStateR:], uint64(s.R))
	// Lengths beyond core.MaxLogLimit all decide alike (a sliding-log state
	// that long is corrupt, other algorithms ignore the entries), as do
	// capacities: the ABI takes both clamped to logSlots.
	n, c := min(len(s.Log), logSlots), min(cap(s.Log), logSlots)
	le.PutUint64(h[oStateLogLen:], uint64(n))
	le.PutUint64(h[oStateLogCap:], uint64(c))
	// The module reads the entries of sliding-log states only.
	if s.Algorithm == core.SlidingLog && n < logSlots {
		e := w[oLog : oLog+8*n]
		for j, v := range s.Log {
			le.PutUint64(e[8*j:], uint64(v))
		}
	}
}

// getDecisions copies the decisions core wrote; the others stay as they
// are, as they do in the native core.
func getDecisions(b []byte, ds []core.Decision) {
	for i := range ds {
		w := slotOf(b, i)
		if le.Uint64(w[oDecided:]) != 0 {
			getDecision(w, &ds[i])
		}
	}
}

func getDecision(w []byte, d *core.Decision) {
	h := (*[slotHeadBytes]byte)(w[:slotHeadBytes])
	*d = core.Decision{
		Allowed:    le.Uint64(h[oAllowed:]) != 0,
		Limit:      int64(le.Uint64(h[oDecLimit:])),
		Remaining:  int64(le.Uint64(h[oRemaining:])),
		ResetAfter: int64(le.Uint64(h[oResetAfter:])),
		RetryAfter: int64(le.Uint64(h[oRetryAfter:])),
		Delay:      int64(le.Uint64(h[oDelay:])),
		NextAfter:  int64(le.Uint64(h[oNextAfter:])),
	}
}

// getState reads the new state the module stored in a slot. Like core, it
// writes sliding-log entries into s.Log's backing array, and leaves a nil Log
// for the other algorithms.
func getState(w []byte, s *core.State) error {
	h := (*[slotHeadBytes]byte)(w[:slotHeadBytes])
	alg := core.Algorithm(int32(le.Uint64(h[oStateAlgorithm:])))
	n := int64(le.Uint64(h[oStateLogLen:]))
	var log []int64
	if alg == core.SlidingLog {
		if n < 0 || n > int64(cap(s.Log)) || n > core.MaxLogLimit {
			return errBadOutput
		}
		log = s.Log[:n]
		e := w[oLog : oLog+8*n]
		for j := range log {
			log[j] = int64(le.Uint64(e[8*j:]))
		}
	} else if n != 0 {
		return errBadOutput
	}
	*s = core.State{
		Algorithm: alg,
		T:         int64(le.Uint64(h[oStateT:])),
		X:         int64(le.Uint64(h[oStateX:])),
		Y:         int64(le.Uint64(h[oStateY:])),
		L:         int64(le.Uint64(h[oStateL:])),
		W:         int64(le.Uint64(h[oStateW:])),
		R:         int64(le.Uint64(h[oStateR:])),
		Log:       log,
	}
	return nil
}

// statusError reports a status outside core.Error's: the host or the module
// broke the ABI.
func statusError(status uint32) error {
	switch status {
	case statusTooManyLimits:
		return fmt.Errorf("%w: status %d (too many limits)", errBadOutput, status)
	case statusBadLog:
		return fmt.Errorf("%w: status %d (bad log length or capacity)", errBadOutput, status)
	}
	return fmt.Errorf("%w: status %d", errBadOutput, status)
}

// Settle is core.Settle run by the module: one limit, through
// rl_settle_all. Its extra errors are TakeAll's.
func (p *Pool) Settle(l core.Limit, s core.State, now, delta int64) (core.Decision, core.State, error) {
	ls, ss := [1]core.Limit{l}, [1]core.State{s}
	var ds [1]core.Decision
	if _, err := p.SettleAll(ls[:], ss[:], now, delta, ds[:]); err != nil {
		return core.Decision{}, s, err
	}
	return ds[0], ss[0], nil
}
