package engine

import (
	"hash/maphash"
	"sync/atomic"
)

// keyGate bounds the decisions in flight per key: keys hash to one of a
// fixed set of counters (collisions share a bound, harmlessly), so it holds
// no per-key memory an attacker could grow.
type keyGate struct {
	max   int32
	seed  maphash.Seed
	slots [4096]gateSlot
}

// gateSlot is the count of the decisions in flight on the keys hashing
// to it, and of the decision API's settles among them.
type gateSlot struct {
	n       atomic.Int32
	settles atomic.Int32
	_       [56]byte // one slot per cache line
}

func newKeyGate(max int) *keyGate {
	return &keyGate{max: int32(min(max, 1<<30)), seed: maphash.MakeSeed()}
}

// enter takes a place for (rule, key), or reports false when the key is at
// its bound. The caller gives the place back with slot.Add(-1).
func (g *keyGate) enter(rule, key string) (slot *atomic.Int32, ok bool) {
	c := g.slot(rule, key)
	if c.Add(1) > g.max {
		c.Add(-1)
		return nil, false
	}
	return c, true
}

// settle takes a place for a settle of (rule, key), never refused: past
// the bound if the key is at it (GateSettle says why). The caller gives
// the place back with slot.Add(-1).
func (g *keyGate) settle(rule, key string) (slot *atomic.Int32) {
	c := g.slot(rule, key)
	c.Add(1)
	return c
}

// enterSettle takes a place for a decision-API settle of (rule, key), or
// reports false when as many of the key's settles are in flight as the
// bound allows. Only settles count toward that bound, so a key's own
// checks (its client's load) never refuse its settles, while a flood of
// settles on one key cannot take every store connection from the other
// keys. Taken, the place counts among the key's decisions too, over the
// bound if it must (as settle's). The caller gives it back with
// slot.leaveSettle.
func (g *keyGate) enterSettle(rule, key string) (slot *gateSlot, ok bool) {
	c := g.gateSlot(rule, key)
	if c.settles.Add(1) > g.max {
		c.settles.Add(-1)
		return nil, false
	}
	c.n.Add(1)
	return c, true
}

// leaveSettle gives back a place enterSettle took.
func (c *gateSlot) leaveSettle() {
	c.n.Add(-1)
	c.settles.Add(-1)
}

// slot is the counter of (rule, key).
func (g *keyGate) slot(rule, key string) *atomic.Int32 { return &g.gateSlot(rule, key).n }

// gateSlot is the slot of (rule, key).
func (g *keyGate) gateSlot(rule, key string) *gateSlot {
	var h maphash.Hash
	h.SetSeed(g.seed)
	h.WriteString(rule)
	h.WriteByte(0)
	h.WriteString(key)
	return &g.slots[h.Sum64()%uint64(len(g.slots))]
}
