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
	return all(ls, ss, now, cost, ds, modeTake)
}

// PeekAll returns what TakeAll would return, changing nothing. It does not
// check a sliding log's storage capacity (it stores nothing), so it can admit
// where TakeAll would fail with ErrLogCapacity.
func PeekAll(ls []Limit, ss []State, now, cost int64, ds []Decision) (int, error) {
	return all(ls, ss, now, cost, ds, modePeek)
}

func all(ls []Limit, ss []State, now, cost int64, ds []Decision, m mode) (int, error) {
	if len(ls) == 0 || len(ss) < len(ls) || len(ds) < len(ls) {
		return 0, ErrLimits
	}
	if len(ls) == 1 { // one limit: decide and take in one pass
		if err := eval(&ls[0], &ss[0], now, cost, m, &ds[0], &ss[0]); err != 0 {
			return 0, err
		}
		return 0, nil
	}
	first := modeCheck
	if m == modePeek {
		first = modePeek
	}
	denied := -1
	for i := range ls {
		if err := eval(&ls[i], &ss[i], now, cost, first, &ds[i], nil); err != 0 {
			return i, err
		}
		if d := &ds[i]; !d.Allowed && (denied < 0 || later(d.RetryAfter, ds[denied].RetryAfter)) {
			denied = i
		}
	}
	if denied >= 0 {
		if cost > 0 {
			for i := range ls {
				if ds[i].Allowed { // nothing was taken: report the state as it is
					eval(&ls[i], &ss[i], now, 0, modePeek, &ds[i], nil)
				}
			}
		}
		return denied, nil
	}
	best := 0
	for i := range ls {
		if m == modeTake {
			if err := eval(&ls[i], &ss[i], now, cost, modeTake, &ds[i], &ss[i]); err != 0 {
				return i, err // not reached: the check pass accepted the same input
			}
		}
		if ds[i].Remaining < ds[best].Remaining {
			best = i
		}
	}
	return best, nil
}

// later reports whether retry-after a is later than b.
func later(a, b int64) bool {
	if b == Never {
		return false
	}
	return a == Never || a > b
}
