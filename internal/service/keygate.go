package service

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
	slots [4096]struct {
		n atomic.Int32
		_ [60]byte // one counter per cache line
	}
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
// the bound if the key is at it (Service.do says why). The caller gives
// the place back with slot.Add(-1).
func (g *keyGate) settle(rule, key string) (slot *atomic.Int32) {
	c := g.slot(rule, key)
	c.Add(1)
	return c
}

// slot is the counter of (rule, key).
func (g *keyGate) slot(rule, key string) *atomic.Int32 {
	var h maphash.Hash
	h.SetSeed(g.seed)
	h.WriteString(rule)
	h.WriteByte(0)
	h.WriteString(key)
	return &g.slots[h.Sum64()%uint64(len(g.slots))].n
}
