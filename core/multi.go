package core

// TakeAll decides cost against several limits at once, all or nothing: the
// states change only if every limit admits the cost. ls[i] is decided with
// ss[i] into ds[i]; ss and ds must be at least as long as ls. On admission
// ss[i] is replaced by each limit's new state; on denial ss is untouched.
//
// It returns the index of the deciding limit: when denied, the denying limit
// with the latest RetryAfter (Never counts as latest), so a client that waits
// that long is not denied again by another one; when allowed, the limit with
// the fewest Remaining. The first of equals wins. On an error it returns the
// index of the limit that caused it; the contents of ds are then unspecified.
//
// When the call is denied, a limit that would have admitted the cost reports
// Allowed with its state as it is (nothing was taken from it): its decision
// for cost 0.
func TakeAll(ls []Limit, ss []State, now, cost int64, ds []Decision) (int, error) {
	return all(ls, nil, len(ls), ss, now, cost, ds, modeTake)
}

// PeekAll returns what TakeAll would return, changing nothing. It does not
// check a sliding log's storage capacity (it stores nothing), so it can admit
// where TakeAll would fail with ErrLogCapacity.
func PeekAll(ls []Limit, ss []State, now, cost int64, ds []Decision) (int, error) {
	return all(ls, nil, len(ls), ss, now, cost, ds, modePeek)
}

// all decides the k limits given either as ls (checked at each use) or as
// cs (compiled), the other nil.
func all(ls []Limit, cs []Compiled, k int, ss []State, now, cost int64, ds []Decision, m mode) (int, error) {
	if k == 0 || len(ss) < k || len(ds) < k {
		return 0, ErrLimits
	}
	if k == 1 { // one limit: decide and take in one pass
		if err := evalAt(ls, cs, 0, &ss[0], now, cost, m, &ds[0], &ss[0]); err != 0 {
			return 0, err
		}
		return 0, nil
	}
	first := modeCheck
	if m == modePeek {
		first = modePeek
	}
	denied := -1
	for i := range k {
		if err := evalAt(ls, cs, i, &ss[i], now, cost, first, &ds[i], nil); err != 0 {
			return i, err
		}
		if d := &ds[i]; !d.Allowed && (denied < 0 || later(d.RetryAfter, ds[denied].RetryAfter)) {
			denied = i
		}
	}
	if denied >= 0 {
		if cost > 0 {
			for i := range k {
				if ds[i].Allowed { // nothing was taken: report the state as it is
					evalAt(ls, cs, i, &ss[i], now, 0, modePeek, &ds[i], nil)
				}
			}
		}
		return denied, nil
	}
	best := 0
	for i := range k {
		if m == modeTake {
			if err := evalAt(ls, cs, i, &ss[i], now, cost, modeTake, &ds[i], &ss[i]); err != 0 {
				return i, err // not reached: the check pass accepted the same input
			}
		}
		if ds[i].Remaining < ds[best].Remaining {
			best = i
		}
	}
	return best, nil
}

// evalAt decides limit i of ls or, when cs is not nil, of cs.
func evalAt(ls []Limit, cs []Compiled, i int, s *State, now, cost int64, m mode, d *Decision, n *State) Error {
	if cs != nil {
		return cs[i].eval(s, now, cost, m, d, n)
	}
	return eval(&ls[i], s, now, cost, m, d, n)
}

// later reports whether retry-after a is later than b.
func later(a, b int64) bool {
	if b == Never {
		return false
	}
	return a == Never || a > b
}
