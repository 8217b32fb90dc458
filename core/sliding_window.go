package core

// algSlidingWindow implements SlidingWindow, the sliding window counter: T
// is the current window's start, X the units admitted in it, Y those of
// the previous window, which weighs by the part of it still inside the
// sliding window.
type algSlidingWindow struct{}

func (algSlidingWindow) decide(c *Compiled, s *State, exact bool, now, cost int64, _ mode, d *Decision, n *State) Error {
	w, lim := c.l.Window, c.l.Limit
	start, curr, prev := slidingCounts(c, s, c.wdiv.div(now, w)*w, w)
	curr, prev = clampCounts(c, exact, curr, prev)
	e := max(now, start) - start // elapsed in the current window, < w
	// room: units (1/w of a request) left under the weighted count.
	room := (lim-curr)*w - prev*(w-e)
	if cost == 0 || (cost <= lim-curr && cost*w <= room) {
		d.Allowed = true
		if cost > 0 {
			curr += cost
			room -= cost * w
			if n != nil {
				n.set(SlidingWindow, start, curr, prev, lim, w, 0)
			}
		}
	} else if cost > lim {
		d.RetryAfter = Never
	} else {
		d.RetryAfter = slidingRetry(w, lim, start, e, curr, prev, cost) - now
	}
	if room > 0 {
		d.Remaining = c.wdiv.div(room, w)
	}
	switch {
	case curr > 0:
		d.ResetAfter = start + 2*w - now
	case prev > 0:
		d.ResetAfter = start + w - now
	}
	if d.Remaining < lim {
		// One more unit fits when a call of Remaining+1, denied now,
		// would pass.
		d.NextAfter = slidingRetry(w, lim, start, e, curr, prev, d.Remaining+1) - now
	}
	return 0
}

// slidingCounts reads a sliding window state, of window w, in the window
// starting at start (now's): the start of the window it counts in (a later one if the
// clock stepped back) and its current and previous counts, as written (a
// state written under other parameters has them clamped by the caller:
// clampCounts). Small enough to inline, as its callers need.
func slidingCounts(c *Compiled, s *State, start, w int64) (at, curr, prev int64) {
	at = start
	if s.Algorithm == SlidingWindow {
		// The window holding T: T itself unless the state was written
		// under another window length.
		if st := c.wdiv.div(s.T, w) * w; st >= start {
			at, curr, prev = st, s.X, s.Y
		} else if st+w == start {
			prev = s.X
		}
	}
	return at, curr, prev
}

// clampCounts clamps the counts of a sliding window state written under
// other parameters (not exact): counts above the limit come from a lowered
// limit, and count as full.
func clampCounts(c *Compiled, exact bool, curr, prev int64) (int64, int64) {
	if exact {
		return curr, prev
	}
	return min(curr, c.l.Limit), min(prev, c.l.Limit)
}

// slidingRetry returns the first instant at which cost (≤ lim) fits a
// sliding window currently at (start, curr, prev), elapsed e.
func slidingRetry(w, lim, start, e, curr, prev, cost int64) int64 {
	if curr+cost <= lim && prev > 0 {
		// Later in this window, once enough of prev has slid out:
		// prev×(w−e') ≤ (lim−curr−cost)×w.
		// Denied now, so k < w−e and e1 > e.
		k := (lim - curr - cost) * w / prev
		if e1 := w - k; e1 < w {
			return start + e1
		}
	}
	// In the next window curr becomes prev: curr×(w−e'') ≤ (lim−cost)×w.
	if curr == 0 {
		return start + w
	}
	k := (lim - cost) * w / curr
	return start + w + max(0, w-k)
}

// checkWords: every word may be set.
func (algSlidingWindow) checkWords(*State) Error { return 0 }

// usage: both windows' counts, the previous one weighing fully at the
// window's start.
func (algSlidingWindow) usage(s *State) (anchor, used int64, ok bool) {
	return s.T, sat(s.X + s.Y), true
}

// carried: the units in the current count of the window that holds the
// anchor.
func (algSlidingWindow) carried(c *Compiled, anchor, used int64) (t, x, y int64) {
	return c.wdiv.div(anchor, c.l.Window) * c.l.Window, used, 0
}

// settle takes a refund from the current window, then from the previous
// one.
func (algSlidingWindow) settle(c *Compiled, s *State, exact bool, now, delta int64, _ mode, n *State) Error {
	w := c.l.Window
	start, curr, prev := slidingCounts(c, s, c.wdiv.div(now, w)*w, w)
	curr, prev = clampCounts(c, exact, curr, prev)
	curr += delta // no overflow: curr ≤ MaxStateValue, |delta| ≤ MaxCost
	if curr < 0 {
		prev = max(0, prev+curr)
		curr = 0
	}
	// A debt is kept while the weighted count stays computable, the counts
	// times Window within MaxUnits as a limit's own are; a larger one is
	// capped there.
	if m := MaxUnits / c.l.Window; curr > m-min(prev, m) {
		prev = min(prev, m)
		curr = m - prev
	}
	if curr > 0 || prev > 0 {
		*n = State{Algorithm: SlidingWindow, T: start, X: curr, Y: prev}
	}
	return 0
}

// nextAfter: ResetAfter, or a denial's RetryAfter when earlier (both
// bounds: the counts that would tell the exact time are not in d).
func (algSlidingWindow) nextAfter(_ *Limit, d *Decision) int64 { return windowNextAfter(d) }
