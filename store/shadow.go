package store

import (
	"fmt"
	"slices"
	"sync"

	"github.com/rlcore/rl/core"
)

// Shadow limits. A limit of a policy can be a shadow limit: a candidate
// decided on the same key, in the same atomic step as the policy's
// enforced limits (under the same lock or transaction), whose state
// evolves as if it were enforced on its own, but which never denies. Per
// call (Policy.Decide):
//
//   - the enforced limits decide all or nothing, as core.TakeAll, as if
//     the shadow limits were not there;
//   - when they admit the call, each shadow limit takes the cost on its
//     own (core.Take of that one limit): it is charged exactly when it
//     would admit the cost, and when it would deny it, its decision is the
//     denial (a would-deny) and its state is left as it was;
//   - when they deny the call, nothing is charged anywhere, shadow limits
//     included, and each shadow limit's decision is a peek of the cost:
//     what it would have decided;
//   - a policy of only shadow limits admits every call;
//   - a settle (Settle) corrects the enforced limits all or nothing, as
//     core.SettleAll, then each shadow limit on its own: a shadow limit
//     that cannot be settled (a corrupt state) is left as it was and
//     never fails the call, nor cancels the enforced limits' correction.
//
// A peek decides every limit as a peek. The decision a store returns is
// the deciding enforced limit's (Policy.Deciding); each shadow limit's own
// decision is in the per-limit decisions, with Allowed false for a
// would-deny. A policy without shadow limits costs nothing extra: Decide
// is core.TakeAll or PeekAll on it.

// shadows is what a policy with shadow limits needs to decide them: the
// indexes of both kinds of limits and the enforced limits alone, for
// core.TakeAll.
type shadows struct {
	shadow    []bool // by limit
	enforced  []int  // indexes of the enforced limits, in order
	shadows   []int  // indexes of the shadow limits, in order
	eLimits   []core.Limit
	eCompiled []core.Compiled

	// charged caches Charged's policies, by the bits of the shadow limits
	// they leave out.
	mu      sync.Mutex
	charged map[uint32]*Policy
}

// WithShadow returns a copy of p in which the named limits, and only they,
// are shadow limits; with no names, a copy without any. The copy has an ID
// of its own; the names, limits and their order are p's, and so are the
// states a store keeps for them: a limit's state is the same whether it is
// enforced or shadow, so a candidate can be promoted (or an enforced limit
// demoted) without losing its count. A name that is not one of p's is
// refused with an error matching core.ErrLimits.
func (p *Policy) WithShadow(names ...string) (*Policy, error) {
	q := &Policy{names: p.names, limits: p.limits, compiled: p.compiled}
	if len(names) > 0 {
		sh := &shadows{shadow: make([]bool, len(p.names))}
		for _, name := range names {
			i := slices.Index(p.names, name)
			if i < 0 {
				return nil, fmt.Errorf("store: no limit named %q to make a shadow limit: %w", name, core.ErrLimits)
			}
			sh.shadow[i] = true
		}
		for i, s := range sh.shadow {
			if s {
				sh.shadows = append(sh.shadows, i)
			} else {
				sh.enforced = append(sh.enforced, i)
				sh.eLimits = append(sh.eLimits, p.limits[i])
				sh.eCompiled = append(sh.eCompiled, p.compiled[i])
			}
		}
		q.sh = sh
	}
	q.id = policyIDs.Add(1)
	return q, nil
}

// Charged returns the policy a settle of a call should be decided under,
// given ds, the call's per-limit decisions (from Decide, a Take that was
// admitted): p without the shadow limits that did not charge the call
// (a would-deny, ds[i].Allowed false). As if it were enforced, such a
// shadow limit would have denied the call, which then had nothing to
// settle; a settle under p itself would correct units it never took. It
// returns p when p has no shadow limits or every one was charged, and nil
// when no limit remains (a policy of shadow limits that all would have
// denied): then there is nothing to settle. The policies it builds are
// kept with p, one per set of limits left out (up to maxCharged sets), so
// a settle allocates nothing after the first; each has the names, limits,
// and states of p's limits it keeps.
func (p *Policy) Charged(ds []core.Decision) *Policy {
	sh := p.sh
	if sh == nil {
		return p
	}
	var out uint32
	for _, i := range sh.shadows {
		if i < len(ds) && !ds[i].Allowed {
			out |= 1 << i
		}
	}
	if out == 0 {
		return p
	}
	if len(sh.enforced) == 0 && out == allBits(sh.shadows) {
		return nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if q, ok := sh.charged[out]; ok {
		return q
	}
	q := &Policy{}
	var shadows []string
	for i := range p.limits {
		if out&(1<<i) != 0 {
			continue
		}
		q.names = append(q.names, p.names[i])
		q.limits = append(q.limits, p.limits[i])
		q.compiled = append(q.compiled, p.compiled[i])
		if sh.shadow[i] {
			shadows = append(shadows, p.names[i])
		}
	}
	q.id = policyIDs.Add(1)
	if shadows != nil {
		q, _ = q.WithShadow(shadows...) // not an error: the names are q's
	}
	if len(sh.charged) < maxCharged {
		if sh.charged == nil {
			sh.charged = make(map[uint32]*Policy)
		}
		sh.charged[out] = q
	}
	return q
}

// maxCharged bounds the policies Charged keeps per policy: a policy of
// many shadow limits has 2^n sets of them to leave out, which callers (a
// decision API client naming them) could make it build one by one.
// Beyond it, a set's policy is built for its call and not kept.
const maxCharged = 64

// SettleCharged is Decide's Settle under p.Charged(charged) for a store
// that keeps all of p's states together (ss and ds in p's order, as
// Decide's): the limits the charged policy keeps are settled as its Decide
// settles them, and every other limit is left as it was, its decision a
// peek of cost 0 (what it says of the key now, so that the key's expiry
// still counts it; the zero Decision with its Limit if its state cannot
// be read). It returns the deciding index in p's order. With charged
// shorter than p or every limit charged, it is Decide's Settle.
func (p *Policy) SettleCharged(dec core.Decider, charged []core.Decision, ss []core.State, now, delta int64, ds []core.Decision) (int, error) {
	q := p.Charged(charged)
	if q == p || len(charged) < len(p.limits) {
		return p.Decide(dec, Settle, ss, now, delta, ds)
	}
	if len(ss) < len(p.limits) || len(ds) < len(p.limits) {
		return 0, core.ErrLimits
	}
	if err := core.CheckSettle(now, delta); err != nil {
		return 0, err
	}
	var kept [core.MaxLimits]int // q's limits, by their index in p
	var qs [core.MaxLimits]core.State
	var qd [core.MaxLimits]core.Decision
	k := 0
	for i := range p.limits {
		if q != nil && k < q.Len() && q.names[k] == p.names[i] {
			kept[k], qs[k] = i, ss[i]
			k++
			continue
		}
		if _, err := decideAll(dec, Peek, p.limits[i:i+1], p.compiled[i:i+1], ss[i:i+1], now, 0, ds[i:i+1]); err != nil {
			ds[i] = core.Decision{Limit: p.limits[i].Limit}
		}
	}
	if k == 0 { // nothing charged: nothing to settle
		return 0, nil
	}
	j, err := q.Decide(dec, Settle, qs[:k], now, delta, qd[:k])
	if err != nil {
		return kept[j], err
	}
	for j, i := range kept[:k] {
		ss[i], ds[i] = qs[j], qd[j]
	}
	return kept[j], nil
}

// allBits returns the bits of the indexes is.
func allBits(is []int) uint32 {
	var b uint32
	for _, i := range is {
		b |= 1 << i
	}
	return b
}

// Shadow reports whether limit i is a shadow limit.
func (p *Policy) Shadow(i int) bool { return p.sh != nil && p.sh.shadow[i] }

// Shadowed reports whether the policy has a shadow limit.
func (p *Policy) Shadowed() bool { return p.sh != nil }

// Decide decides op on ss, the states of a key's limits in the policy's
// order, into ds (both at least Len long), as a store's atomic step does:
// for a policy without shadow limits, exactly core.TakeAll, PeekAll or
// SettleAll with decider dec (nil: the native core on the compiled
// limits); with shadow limits, the enforced limits with one TakeAll,
// PeekAll or SettleAll of dec, then each shadow limit alone (see the
// package doc's Shadow limits). It returns the index of the deciding
// limit, whose decision is
// Deciding(ds, i), not ds[i].
//
// States change as TakeAll changes them: only when the call is admitted,
// in place (a sliding log's entries in its backing array, which must have
// room for the Limit as for TakeAll; a shadow limit's log without room is
// given a new one). On an error, the index of the limit at fault, and ss
// unchanged: every check is made before any state is written.
func (p *Policy) Decide(dec core.Decider, op Op, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	switch {
	case p.sh == nil:
		return decideAll(dec, op, p.limits, p.compiled, ss, now, cost, ds)
	case op == Settle:
		return p.settleShadow(dec, ss, now, cost, ds)
	}
	return p.decideShadow(dec, op, ss, now, cost, ds)
}

// maxLimits32 holds that a uint32 has a bit for every limit of a policy.
var _ [32 - core.MaxLimits]struct{}

// settleShadow is Decide's Settle for a policy with shadow limits: the
// enforced limits are settled all or nothing, as core.SettleAll, as if the
// shadow limits were not there; then each shadow limit alone, and one that
// cannot be settled (its state is corrupt) is left as it was, its decision
// the zero Decision with its Limit: a shadow limit never fails a settle,
// and above all never cancels the enforced limits' debt. The call's own
// errors (core.CheckSettle) are reported first, at index 0.
func (p *Policy) settleShadow(dec core.Decider, ss []core.State, now, delta int64, ds []core.Decision) (int, error) {
	sh := p.sh
	if len(ss) < len(p.limits) || len(ds) < len(p.limits) {
		return 0, core.ErrLimits
	}
	if err := core.CheckSettle(now, delta); err != nil {
		return 0, err // the call's own error, as core.SettleAll reports it
	}
	deciding, err := sh.enforce(dec, Settle, ss, now, delta, ds)
	if err != nil {
		return deciding, err
	}
	var failed uint32 // shadow limits not settled, by index (maxLimits32)
	for _, i := range sh.shadows {
		roomForLog(&p.limits[i], &ss[i])
		s := ss[i]
		if _, err := decideAll(dec, Settle, p.limits[i:i+1], p.compiled[i:i+1], ss[i:i+1], now, delta, ds[i:i+1]); err != nil {
			ss[i], ds[i] = s, core.Decision{Limit: p.limits[i].Limit}
			failed |= 1 << i
		}
	}
	if deciding < 0 { // only shadow limits: the settled one closest to exhaustion
		for _, i := range sh.shadows {
			if deciding < 0 || failed&(1<<deciding) != 0 || failed&(1<<i) == 0 && ds[i].Remaining < ds[deciding].Remaining {
				deciding = i
			}
		}
	}
	return deciding, nil
}

// decideAll is core.TakeAll or PeekAll of ls, with dec or, when dec is nil,
// natively on cs.
func decideAll(dec core.Decider, op Op, ls []core.Limit, cs []core.Compiled, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	switch {
	case dec == nil && op == Take:
		return core.TakeAllCompiled(cs, ss, now, cost, ds)
	case dec == nil && op == Settle:
		return core.SettleAllCompiled(cs, ss, now, cost, ds)
	case dec == nil:
		return core.PeekAllCompiled(cs, ss, now, cost, ds)
	case op == Take:
		return dec.TakeAll(ls, ss, now, cost, ds)
	case op == Settle:
		return dec.SettleAll(ls, ss, now, cost, ds)
	}
	return dec.PeekAll(ls, ss, now, cost, ds)
}

// decideShadow is Decide for a policy with shadow limits.
func (p *Policy) decideShadow(dec core.Decider, op Op, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	sh := p.sh
	n := len(p.limits)
	if len(ss) < n || len(ds) < n {
		return 0, core.ErrLimits
	}
	take := op == Take && cost > 0
	// Every shadow limit peeked first: its decision should the enforced
	// limits deny, and the check of its state and the call, so that
	// nothing can fail once an enforced limit's state is written.
	for _, i := range sh.shadows {
		if take {
			roomForLog(&p.limits[i], &ss[i])
		}
		if _, err := decideAll(dec, Peek, p.limits[i:i+1], p.compiled[i:i+1], ss[i:i+1], now, cost, ds[i:i+1]); err != nil {
			return i, err
		}
	}
	deciding, err := sh.enforce(dec, op, ss, now, cost, ds)
	if err != nil {
		return deciding, err
	}
	admitted := deciding < 0 || ds[deciding].Allowed
	if admitted && take {
		for _, i := range sh.shadows {
			if !ds[i].Allowed {
				continue // a would-deny: not charged
			}
			if _, err := decideAll(dec, Take, p.limits[i:i+1], p.compiled[i:i+1], ss[i:i+1], now, cost, ds[i:i+1]); err != nil {
				return i, err // not reached: the peek checked the same input
			}
		}
	}
	if deciding < 0 { // only shadow limits: the one closest to exhaustion
		deciding = sh.shadows[0]
		for _, i := range sh.shadows[1:] {
			if ds[i].Remaining < ds[deciding].Remaining {
				deciding = i
			}
		}
	}
	return deciding, nil
}

// enforce decides op on the enforced limits alone, all or nothing (as if
// the shadow limits were not there), on their states in ss, writing back
// their states and decisions (ds) in the policy's order. It returns the
// deciding enforced limit's index, or -1 when there is none; on an error,
// the index of the limit at fault, and nothing written.
func (sh *shadows) enforce(dec core.Decider, op Op, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	k := len(sh.enforced)
	if k == 0 {
		return -1, nil
	}
	var es [core.MaxLimits]core.State
	var ed [core.MaxLimits]core.Decision
	for j, i := range sh.enforced {
		es[j] = ss[i]
	}
	j, err := decideAll(dec, op, sh.eLimits, sh.eCompiled, es[:k], now, cost, ed[:k])
	if err != nil {
		return sh.enforced[j], err
	}
	for j, i := range sh.enforced {
		ss[i], ds[i] = es[j], ed[j]
	}
	return sh.enforced[j], nil
}

// roomForLog gives a sliding log state a log with room for l's Limit, if
// it has less, so that taking on it cannot fail with core.ErrLogCapacity.
func roomForLog(l *core.Limit, s *core.State) {
	if l.Algorithm == core.SlidingLog && int64(cap(s.Log)) < l.Limit && l.Limit <= core.MaxLogLimit {
		log := make([]int64, len(s.Log), l.Limit)
		copy(log, s.Log)
		s.Log = log
	}
}

// Deciding returns the decision of a call whose limits decided ds, i being
// the deciding index Decide returned: ds[i], except for a policy of only
// shadow limits, which admits every call: then ds[i] (the shadow limit
// closest to exhaustion) with Allowed set and RetryAfter and Delay 0,
// whatever the shadow limit would have decided (ds[i] says that).
func (p *Policy) Deciding(ds []core.Decision, i int) core.Decision {
	d := ds[i]
	if p.sh != nil && len(p.sh.enforced) == 0 {
		d.Allowed, d.RetryAfter, d.Delay = true, 0, 0
	}
	return d
}
