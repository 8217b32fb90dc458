package ruleconfig

import "github.com/rlcore/rl/core"

// CheckLimit validates one limit given as an object at field (a rule's
// "global.fallback"): its strategy, limit, window and rate, as a rule's
// own. ok is false if it has a problem. Its name and shadow are the
// caller's to read or refuse.
func CheckLimit(c *Checker, field string, l *Limit) (lim core.Limit, ok bool) {
	before := len(c.Problems)
	if !c.Object(field, "an object {strategy, limit, window, rate}", &l.Fields) {
		return core.Limit{}, false
	}
	lim, ok = l.LimitFields.check(c, field+".")
	return lim, ok && len(c.Problems) == before
}
