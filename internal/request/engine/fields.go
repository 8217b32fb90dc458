package engine

import (
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/pipeline"
)

// Verdict is a decision in the units of the answer's fields
// (internal/request/pipeline, the one source of the fields every front end
// writes): durations in µs, each rounded up so that nothing is early. each
// holds every limit's result (rl.Request.Each); res alone when each is
// shorter than res.Index+1. Results no limit wrote (a slice longer than
// the policy ends in zero results) are dropped.
func Verdict(res rl.Result, each []rl.LimitResult) pipeline.Verdict {
	each = trimResults(each)
	if res.Index >= len(each) {
		return pipeline.Verdict{Allowed: res.Allowed, Limits: []pipeline.LimitState{limitState(&res.LimitResult)}}
	}
	v := pipeline.Verdict{Allowed: res.Allowed, Deciding: res.Index, Limits: make([]pipeline.LimitState, len(each))}
	for i := range each {
		v.Limits[i] = limitState(&each[i])
	}
	return v
}

// trimResults drops the results no limit wrote: a limit's result always
// has a name.
func trimResults(each []rl.LimitResult) []rl.LimitResult {
	for len(each) > 0 && each[len(each)-1].Name == "" {
		each = each[:len(each)-1]
	}
	return each
}

func limitState(r *rl.LimitResult) pipeline.LimitState {
	return pipeline.LimitState{Name: r.Name, Allowed: r.Allowed, Never: r.Never, Shadow: r.Shadow, Limit: r.Limit, Remaining: r.Remaining,
		Window: ceilMicros(r.Window), ResetAfter: ceilMicros(r.ResetAfter), RetryAfter: ceilMicros(r.RetryAfter),
		NextAfter: ceilMicros(r.NextAfter)}
}

// ceilMicros rounds d up to whole µs.
func ceilMicros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond > 0 {
		us++
	}
	return us
}
