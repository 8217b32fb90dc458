package core

// algFixedWindow implements FixedWindow: T is the window's start (µs), X
// the units admitted in it. Windows are aligned to multiples of Window
// from the epoch.
type algFixedWindow struct{}

func (algFixedWindow) decide(c *Compiled, s *State, _ bool, now, cost int64, _ mode, d *Decision, n *State) Error {
	w, lim := c.l.Window, c.l.Limit
	start, count := c.wdiv.div(now, w)*w, int64(0)
	if s.Algorithm == FixedWindow && s.T >= start {
		// The current window, or a later one if the clock stepped back.
		// A state written under another window length may start off
		// the current one's grid: its window is the one holding T.
		start, count = c.wdiv.div(s.T, w)*w, s.X
	}
	end := start + w
	if cost == 0 || count+cost <= lim {
		d.Allowed = true
		if cost > 0 {
			count += cost
			if n != nil {
				n.set(FixedWindow, start, count, 0, lim, w, 0)
			}
		}
	} else if cost > lim {
		d.RetryAfter = Never
	} else {
		d.RetryAfter = end - now
	}
	d.Remaining = max(0, lim-count)
	if count > 0 {
		// The whole quota comes back when the window ends, none before.
		d.ResetAfter = end - now
		d.NextAfter = end - now
	}
	return 0
}

func (algFixedWindow) checkWords(s *State) Error {
	if s.Y != 0 {
		return ErrState
	}
	return 0
}

func (algFixedWindow) usage(s *State) (anchor, used int64, ok bool) { return s.T, s.X, true }

// carried: the units in the window that holds the anchor.
func (algFixedWindow) carried(c *Compiled, anchor, used int64) (t, x, y int64) {
	return c.wdiv.div(anchor, c.l.Window) * c.l.Window, used, 0
}

func (algFixedWindow) settle(c *Compiled, s *State, _ bool, now, delta int64, _ mode, n *State) Error {
	w := c.l.Window
	start, count := c.wdiv.div(now, w)*w, int64(0)
	if s.Algorithm == FixedWindow && s.T >= start {
		start, count = c.wdiv.div(s.T, w)*w, s.X
	}
	count = min(count+delta, MaxStateValue) // no overflow: both ≤ MaxStateValue + MaxCost
	if count > 0 {
		*n = State{Algorithm: FixedWindow, T: start, X: count}
	}
	return 0
}

// nextAfter: the window resets whole, at ResetAfter.
func (algFixedWindow) nextAfter(_ *Limit, d *Decision) int64 { return d.ResetAfter }
