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
// index of the limit that caused it.
func TakeAll(ls []Limit, ss []State, now, cost int64, ds []Decision) (int, error) {
	return all(ls, ss, now, cost, ds, modeTake)
}

// PeekAll returns what TakeAll would return, changing nothing.
func PeekAll(ls []Limit, ss []State, now, cost int64, ds []Decision) (int, error) {
	return all(ls, ss, now, cost, ds, modePeek)
}

func all(ls []Limit, ss []State, now, cost int64, ds []Decision, m mode) (int, error) {
	if len(ls) == 0 || len(ss) < len(ls) || len(ds) < len(ls) {
		return 0, ErrLimits
	}
	first := modeCheck
	if m == modePeek {
		first = modePeek
	}
	denied := -1
	for i := range ls {
		d, _, err := eval(&ls[i], &ss[i], now, cost, first)
		if err != 0 {
			return i, err
		}
		ds[i] = d
		if !d.Allowed && (denied < 0 || later(d.RetryAfter, ds[denied].RetryAfter)) {
			denied = i
		}
	}
	if denied >= 0 {
		return denied, nil
	}
	best := 0
	for i := range ls {
		if m == modeTake {
			d, n, err := eval(&ls[i], &ss[i], now, cost, modeTake)
			if err != 0 { // not reached: the check pass accepted the same input
				return i, err
			}
			ds[i], ss[i] = d, n
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
