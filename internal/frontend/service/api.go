package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/httpflow"
	"github.com/rlcore/rl/internal/request/outage"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
	"github.com/rlcore/rl/internal/util/redact"
)

// DecisionRequest is the body of check, peek and reset, and one item of a
// batch: a key decided against a named rule or against inline limits.
type DecisionRequest struct {
	// Rule names a configured rule. Give Rule or Limits, not both.
	Rule string `json:"rule,omitempty"`
	// Limits are inline limits, in the configuration file's limit shape
	// ({"name","strategy","limit","window","rate"}), decided together.
	Limits []ruleconfig.Limit `json:"limits,omitempty"`
	// Key is the key to decide; required.
	Key string `json:"key"`
	// Cost is the units to take; default the rule's cost (1 unless the
	// rule says otherwise), 1 for inline limits. A settle has none.
	Cost *int64 `json:"cost,omitempty"`
	// Estimate and Actual are a settle's, required there and nowhere
	// else: the cost its check took, within [min_cost, 2^40], and the
	// call's actual cost, a JSON integer at least 0, however large
	// (ActualCost). The key's usage is corrected by
	// pipeline.SettleDelta (actual, at least the rule's min_cost and at
	// most 2^40, less the estimate), as every front end settles; a
	// refund (a negative correction) needs a settle or admin token. With
	// a check or settle token, estimate and actual are at most the key's
	// smallest enforced limit, the most one check can take (settleBound;
	// 400 above): such a token's settle charges no more than its checks
	// could.
	Estimate *int64      `json:"estimate,omitempty"`
	Actual   *ActualCost `json:"actual,omitempty"`
	// Delta was a settle's correction, given by the caller; it is
	// refused (400, naming estimate and actual): a delta cannot be held
	// to the rule's min_cost, nor told from a refund of units a check
	// never took.
	Delta *int64 `json:"delta,omitempty"`
	// Uncharged is a settle's, optional: the names of the shadow limits
	// its check did not charge (their would-denies, "allowed": false in
	// the check's "limits"). The settle leaves them as they are
	// (rl.Policy.Charged): a candidate limit is not corrected for units it
	// never took. Each must name a shadow limit of the rule (400).
	Uncharged []string `json:"uncharged,omitempty"`
	// FailOpen is the store-failure policy of inline limits (a rule has
	// its own); default false.
	FailOpen *bool `json:"fail_open,omitempty"`
	// Explain adds "explain" to the answer of a check or peek: the rule
	// and why, the key and cost as used, every limit's evaluation and
	// the fields sent (ExplainJSON); a settle or reset with it is 400.
	Explain bool `json:"explain,omitempty"`
}

// LimitJSON is one limit's result in a response. Durations are given in
// milliseconds and in seconds, both rounded up so they are never early.
type LimitJSON struct {
	Name    string `json:"name"`
	Allowed bool   `json:"allowed"`
	// Shadow marks a shadow limit ("shadow": true in the rule), which
	// never denies: Allowed false is a would-deny (not charged; when the
	// request was denied by the enforced limits, a peek). Left out for an
	// enforced limit.
	Shadow       bool  `json:"shadow,omitempty"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	WindowMS     int64 `json:"window_ms"`
	ResetAfterMS int64 `json:"reset_after_ms"`
	ResetAfter   int64 `json:"reset_after"`
	// RetryAfterMS and RetryAfter are 0 when allowed and -1 when the cost
	// exceeds the limit (no retry can pass; Never is true).
	RetryAfterMS int64 `json:"retry_after_ms"`
	RetryAfter   int64 `json:"retry_after"`
	Never        bool  `json:"never"`
	// DelayMS is the LeakyBucket shaping delay of an admitted call.
	DelayMS int64 `json:"delay_ms"`
	// NextAfterMS and NextAfter are the time until more quota is made
	// available (the RateLimit field's t): 0 when nothing is missing.
	NextAfterMS int64 `json:"next_after_ms"`
	NextAfter   int64 `json:"next_after"`
}

// DecisionJSON is the response of check and peek and one result of a
// batch: the deciding limit's fields at the top level (on a denial the limit
// that denied, with the latest retry; when admitted the one with the fewest
// remaining; an enforced limit, unless the rule has only shadow limits),
// and every limit's result in Limits, shadow limits' included.
type DecisionJSON struct {
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule"`
	Key     string `json:"key"`
	Cost    int64  `json:"cost"`
	// Delta is a settle's correction (pipeline.SettleDelta of its
	// estimate and actual), present only in a settle's answer (whose
	// cost is 0 and taken false).
	Delta *int64 `json:"delta,omitempty"`
	Peek  bool   `json:"peek"`
	// Taken reports that the cost was consumed (allowed, not a peek, not
	// fail-open, and in an atomic batch, the batch went through).
	Taken bool `json:"taken"`
	// Uncharged names, when the cost was taken, the shadow limits that
	// did not charge it (their would-denies, "allowed": false in Limits):
	// give it back as the settle's "uncharged", so that the settle leaves
	// them as they are.
	Uncharged []string `json:"uncharged,omitempty"`
	// FailOpen reports an admission without a decision: the store failed
	// and the rule fails open. The limit fields are then zero.
	FailOpen bool `json:"fail_open"`
	// Error is set on a batch item the store failed for (fail closed).
	Error string `json:"error,omitempty"`
	// Override names the rule's override that decided the key
	// ("key:<key>", "key_prefix:<prefix>"); absent when the rule's own
	// limits did (or inline limits).
	Override string `json:"override,omitempty"`
	// LimitName names the deciding limit; the fields after it are its.
	LimitName    string `json:"limit_name"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	WindowMS     int64  `json:"window_ms"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	ResetAfter   int64  `json:"reset_after"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	RetryAfter   int64  `json:"retry_after"`
	Never        bool   `json:"never"`
	DelayMS      int64  `json:"delay_ms"`
	NextAfterMS  int64  `json:"next_after_ms"`
	NextAfter    int64  `json:"next_after"`
	// Limits holds every limit's result, in the rule's order.
	Limits []LimitJSON `json:"limits"`
	// Explain is present when the request asked for it.
	Explain *ExplainJSON `json:"explain,omitempty"`
}

// ErrorJSON is the body of every error response.
type ErrorJSON struct {
	Error string `json:"error"`
	// Code is a stable token: invalid_json, body_too_large, unknown_field,
	// unknown_rule, invalid_key, invalid_cost, invalid_limits,
	// inline_disabled, invalid_batch, method_not_allowed, not_found,
	// unauthorized (401: no or unknown token), forbidden (403: an admin
	// operation with a check or settle token, or a refund settled with a
	// check token), overloaded (503: too many requests in flight, a busy
	// or full store), store_unavailable, internal (500: a corrupt stored
	// state).
	Code string `json:"code"`
}

func (s *Service) apiError(w http.ResponseWriter, status int, code, msg string) {
	if status < 500 {
		s.metrics.rejected.WithLabelValues(code).Inc()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(ErrorJSON{Error: msg, Code: code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(b.Len()))
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// resolve turns a request into a target and cost; on failure it returns an
// *errClient naming the field (prefix "items[i]." in a batch).
//
// A check costs at least 1 (a rule's MinCost): cost 0, reading a key's
// quota without charging it, is a peek. Inline limits are for admins.
func (s *Service) resolve(rs *ruleSet, req *DecisionRequest, prefix string, op apiOp, role Role) (target, int64, error) {
	bad := func(code, format string, args ...any) (target, int64, error) {
		return target{}, 0, &errClient{code, fmt.Errorf(prefix+format, args...)}
	}
	if req.Key == "" {
		return bad("invalid_key", "key: missing")
	}
	var t target
	cost, minCost := int64(1), int64(1)
	switch {
	case req.Rule != "" && req.Limits != nil:
		return bad("invalid_limits", "give rule or limits, not both")
	case req.Rule != "":
		ru := rs.byName[req.Rule]
		if ru == nil {
			return target{}, 0, &errClient{"unknown_rule", fmt.Errorf("%srule: no rule named %q", prefix, req.Rule)}
		}
		if req.FailOpen != nil {
			return bad("invalid_limits", "fail_open: a rule's fail_open is set in the configuration")
		}
		t, cost = ru.target(), ru.spec.Cost
		t.rule = ru
		minCost = ru.spec.MinCost
	case req.Limits != nil:
		if !rs.cfg.InlineLimits {
			return target{}, 0, &errClient{"inline_disabled", fmt.Errorf("%slimits: inline limits are disabled (inline_limits: false); name a rule", prefix)}
		}
		if role != RoleAdmin {
			return target{}, 0, &errClient{"forbidden", fmt.Errorf("%slimits: inline limits are an admin operation (this token's role is %s); name a rule", prefix, role)}
		}
		p, err := inlinePolicy(req.Limits, prefix, rs.cfg.MaxInlineLimits)
		if err != nil {
			return target{}, 0, err
		}
		if no := s.eng.ShadowUnsupported(); p.Shadowed() && no != nil {
			return bad("invalid_limits", "limits: a shadow limit, which this store cannot decide (%v)", no)
		}
		t = target{er: &rs.inlineRules[0], lim: rs.inline, policy: p, m: rs.inlineM}
		if req.FailOpen != nil && *req.FailOpen {
			t.er = &rs.inlineRules[1]
		}
	default:
		return bad("invalid_limits", "rule: missing (name a rule, or give limits)")
	}
	if err := s.checkKey(t.er.Name, req.Key); err != nil {
		return bad("invalid_key", "key: %v", err)
	}
	t.forKey(req.Key)
	switch {
	case req.Explain && (op == opSettle || op == opReset):
		return bad("invalid_json", "explain: only a check or a peek is explained")
	case req.Delta != nil:
		return bad("invalid_cost", "delta: %s", deltaRefused)
	case op == opSettle && req.Cost != nil:
		return bad("invalid_cost", "cost: a settle has no cost; give estimate, the cost the check took, and actual, the call's actual cost")
	case op == opSettle:
		return s.settleDelta(t, req, prefix, minCost, role)
	case req.Estimate != nil || req.Actual != nil:
		return bad("invalid_cost", "estimate, actual: only a settle has them")
	case req.Uncharged != nil:
		return bad("invalid_limits", "uncharged: only a settle has it")
	}
	if req.Cost != nil {
		if op == opReset {
			return bad("invalid_cost", "cost: a reset has no cost")
		}
		cost = *req.Cost
		switch {
		case cost < 0 || cost > core.MaxCost:
			return bad("invalid_cost", "cost: %d is outside [0, %d]", cost, core.MaxCost)
		case op == opCheck && cost < minCost:
			return bad("invalid_cost", "cost: %d is below this rule's minimum %d (to read a key's quota without charging it, peek)", cost, minCost)
		}
	}
	return t, cost, nil
}

// ActualCost is a settle's actual cost in a request body: a JSON integer
// of decimal digits, read as a response's cost field is
// (pipeline.ParseResponseCost): however large, it is a cost (saturated,
// then clamped to 2^40 by pipeline.SettleDelta), never refused for its
// size, since a refused settle leaves the estimate. A sign, a fraction or
// an exponent is refused (invalid_cost).
type ActualCost int64

// UnmarshalJSON reads a JSON number of decimal digits only.
func (a *ActualCost) UnmarshalJSON(b []byte) error {
	n, _, err := pipeline.ParseResponseCost([]string{string(b)})
	if err != nil {
		return &actualError{string(b)}
	}
	*a = ActualCost(n)
	return nil
}

// actualError is an "actual" that is not a JSON integer of digits.
type actualError struct{ value string }

func (e *actualError) Error() string {
	return "actual: want an integer, at least 0, got " + ruleconfig.Clip(e.value, 32)
}

// deltaRefused is the answer to a request with "delta".
const deltaRefused = "no longer accepted: give a settle estimate, the cost the check took, and actual, the call's actual cost (the key is settled by actual, at least the rule's min_cost, less estimate)"

// settleDelta returns a settle's correction of t's key,
// pipeline.SettleDelta of its estimate and actual under the target's
// minCost: the one rule every front end settles by. A refund (a negative
// correction) needs a role trusted with one (Role.mayRefund): a check
// token may only add usage, or a settle would be a reset by another name
// (a refund of what no check took). A role that is no admin settles an
// estimate and an actual of at most settleBound of the key's limits.
func (s *Service) settleDelta(t target, req *DecisionRequest, prefix string, minCost int64, role Role) (target, int64, error) {
	bad := func(code, format string, args ...any) (target, int64, error) {
		return target{}, 0, &errClient{code, fmt.Errorf(prefix+format, args...)}
	}
	switch {
	case req.Estimate == nil:
		return bad("invalid_cost", "estimate: missing (the cost the check took)")
	case req.Actual == nil:
		return bad("invalid_cost", "actual: missing (the call's actual cost)")
	case *req.Estimate < minCost || *req.Estimate > core.MaxCost:
		return bad("invalid_cost", "estimate: %d is outside [%d, %d] (a check's cost, at least this rule's minimum)", *req.Estimate, minCost, core.MaxCost)
	}
	delta := pipeline.SettleDelta(*req.Estimate, int64(*req.Actual), minCost)
	if delta < 0 && !role.mayRefund() {
		return target{}, 0, &errClient{"forbidden", fmt.Errorf("%sactual: %d below the estimate %d is a refund, which needs a settle or admin token (this token's role is %s: it may settle an actual cost at least the estimate)",
			prefix, *req.Actual, *req.Estimate, role)}
	}
	if role != RoleAdmin {
		if err := checkSettleBound(t.policy, *req.Estimate, int64(*req.Actual), role); err != nil {
			return bad("invalid_cost", "%v", err)
		}
	}
	if len(req.Uncharged) == 0 {
		return t, delta, nil
	}
	// The check's would-denies: settled under the policy without them.
	ls := t.policy.Limits()
	each := make([]rl.LimitResult, len(ls))
	for i := range each {
		each[i].Allowed = true
	}
	for _, name := range req.Uncharged {
		i := slices.IndexFunc(ls, func(l rl.Limit) bool { return l.Name == name })
		if i < 0 || !ls[i].Shadow {
			return bad("invalid_limits", "uncharged: %q is not a shadow limit of %s", ruleconfig.Clip(name, 64), t.er.Name)
		}
		each[i].Allowed = false
	}
	if delta == 0 {
		return t, 0, nil // nothing to settle: no policy to build
	}
	if p := t.policy.Charged(each); p != nil {
		t.policy = p
	} else {
		delta = 0 // shadow limits only, none charged: nothing to settle
	}
	return t, delta, nil
}

// settleBound is the most a check or settle token may report as a
// settle's estimate or actual cost on a key decided under p: the smallest
// limit of p's enforced limits (the most one check of the key can take,
// since a check of more is denied), or, for shadow limits only, the
// largest. So a settle with such a token charges a key at most one full
// limit above what its check took, a debt paid off in about one window
// (for a bucket, the time it takes to refill), as a check could have
// drained it; it never locks a key out for longer than its own checks
// could. An admin token's settle is bounded by 2^40 only
// (pipeline.SettleDelta).
func settleBound(p *rl.Policy) int64 {
	var enforced, shadow int64
	for _, l := range p.Limits() {
		switch {
		case l.Shadow:
			shadow = max(shadow, l.Limit)
		case enforced == 0 || l.Limit < enforced:
			enforced = l.Limit
		}
	}
	if enforced > 0 {
		return enforced
	}
	return shadow
}

// checkSettleBound refuses a settle's estimate or actual above
// settleBound(p), for a role that is no admin.
func checkSettleBound(p *rl.Policy, estimate, actual int64, role Role) error {
	bound := settleBound(p)
	switch {
	case actual > bound:
		given := strconv.FormatInt(actual, 10)
		if actual == math.MaxInt64 {
			given += " or more"
		}
		return fmt.Errorf("actual: %s is above %d, the most a settle with a %s token may charge for one call on this key "+
			"(its smallest enforced limit, the most one check can take); settle an actual of at most %d, "+
			"or a larger cost with an admin token", given, bound, role, bound)
	case estimate > bound:
		return fmt.Errorf("estimate: %d is above %d, the most one check of this key can take (its smallest enforced limit), "+
			"so no check took it; settle the estimate the check took, at most %d", estimate, bound, bound)
	}
	return nil
}

// apiOp is what a decision-API request does.
type apiOp uint8

const (
	opCheck apiOp = iota
	opPeek
	opReset
	opSettle
)

// inlinePolicy validates inline limits with the configuration's rules and
// messages.
func inlinePolicy(ls []ruleconfig.Limit, prefix string, max int) (*rl.Policy, error) {
	if max <= 0 || max > rl.MaxLimits {
		max = rl.MaxLimits
	}
	if len(ls) == 0 || len(ls) > max {
		return nil, &errClient{"invalid_limits", fmt.Errorf("%slimits: %d limits, want 1 to %d (max_inline_limits)", prefix, len(ls), max)}
	}
	c := &ruleconfig.Checker{}
	checked, _ := ruleconfig.CheckLimits(c, prefix+"limits", ls)
	if len(c.Problems) > 0 {
		msgs := make([]string, len(c.Problems))
		for i, pr := range c.Problems {
			msgs[i] = pr.String()
		}
		return nil, &errClient{"invalid_limits", errors.New(strings.Join(msgs, "; "))}
	}
	pol, err := engine.Policy(checked)
	if err != nil {
		return nil, &errClient{"invalid_limits", fmt.Errorf("%slimits: %w", prefix, err)}
	}
	return pol, nil
}

func (s *Service) clientError(w http.ResponseWriter, err error) {
	var ce *errClient
	if !errors.As(err, &ce) {
		s.apiError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	status := http.StatusBadRequest
	switch ce.code {
	case "unknown_rule":
		status = http.StatusNotFound
	case "inline_disabled", "forbidden":
		status = http.StatusForbidden
	}
	s.apiError(w, status, ce.code, ce.err.Error())
}

func (s *Service) apiDecide(peek bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req DecisionRequest
		if !s.readJSON(w, r, &req) {
			return
		}
		rs := s.rules.Load()
		op := opCheck
		if peek {
			op = opPeek
		}
		t, cost, err := s.resolve(rs, &req, "", op, roleOf(r))
		if err != nil {
			s.clientError(w, err)
			return
		}
		start := time.Now()
		each := make([]rl.LimitResult, t.limits())
		res, out, err := s.decide(r.Context(), &t, req.Key, cost, peek, each)
		s.metrics.apiLatency.Observe(time.Since(start).Seconds())
		if out == 0 {
			s.clientError(w, err)
			return
		}
		t.m.record(out, &res)
		if refused(out) {
			s.failClosed(w, err)
			return
		}
		d := decisionJSON(t.er.Name, req.Key, cost, peek, res, out, each)
		d.Override = t.overrideLabel()
		status := http.StatusOK
		if out != engine.FailOpen {
			httpflow.SetFields(w.Header(), req.Key, res, each, t.fields)
			if !res.Allowed {
				status = http.StatusTooManyRequests
			}
		}
		if req.Explain {
			d.Explain = explainDecision(&t, t.rule, &req, cost, peek, res, out, each, w.Header(), roleOf(r))
		}
		writeDecision(w, status, &d)
	}
}

// apiSettle corrects a key's usage by a delta (POST
// /v1/ratelimit/settle): the actual cost of a call whose check took an
// estimate, less that estimate. It never denies: the answer (200) is the
// decision fields of the key after the correction, with "delta". A store
// failure is refused by its class, whatever the fail policy (there is
// nothing to admit): 503 for an outage or load, 500 for the rest.
func (s *Service) apiSettle(w http.ResponseWriter, r *http.Request) {
	var req DecisionRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	rs := s.rules.Load()
	t, delta, err := s.resolve(rs, &req, "", opSettle, roleOf(r))
	if err != nil {
		s.clientError(w, err)
		return
	}
	each := make([]rl.LimitResult, t.limits())
	// Not the request's cancellation: a caller that hangs up once it has
	// sent its settle has still cost what it cost (as the proxy's
	// settles, httpflow.serveAndSettle), and the store call would be
	// cancelled with it, the estimate standing. Within a per-key bound of
	// its own (engine.GateSettleBounded): refused beyond it (503), as a
	// check is.
	d := s.run(context.WithoutCancel(r.Context()), &t, &engine.Input{Key: req.Key, Cost: delta, Settle: true, Each: each, Gate: engine.GateSettleBounded})
	switch d.Outcome {
	case engine.Allowed, engine.Denied:
	case engine.InvalidKey:
		s.clientError(w, &errClient{"invalid_key", d.Err})
		return
	case engine.InvalidCost: // a debt beyond what a state holds
		s.clientError(w, &errClient{"invalid_cost", d.Err})
		return
	default:
		// Whatever the fail policy: a settle has nothing to admit.
		s.settled(&t, d.Err)
		s.failClosed(w, d.Err)
		return
	}
	res := d.Result
	s.settled(&t, nil)
	dj := decisionJSON(t.er.Name, req.Key, 0, false, res, engine.Allowed, each)
	dj.Taken, dj.Delta, dj.Override = false, &delta, t.overrideLabel()
	httpflow.SetFields(w.Header(), req.Key, res, each, t.fields)
	writeDecision(w, http.StatusOK, &dj)
}

// limits is the number of limits the target decides.
func (t *target) limits() int { return t.policy.Len() }

func decisionJSON(rule, key string, cost int64, peek bool, res rl.Result, out engine.Outcome, each []rl.LimitResult) DecisionJSON {
	d := DecisionJSON{Rule: rule, Key: key, Cost: cost, Peek: peek, Limits: []LimitJSON{}}
	if out == engine.FailOpen {
		d.Allowed, d.FailOpen = true, true
		return d
	}
	d.Allowed = res.Allowed
	d.Taken = res.Allowed && !peek
	l := limitJSON(&res.LimitResult)
	d.LimitName, d.Limit, d.Remaining, d.WindowMS = l.Name, l.Limit, l.Remaining, l.WindowMS
	d.ResetAfterMS, d.ResetAfter, d.RetryAfterMS, d.RetryAfter = l.ResetAfterMS, l.ResetAfter, l.RetryAfterMS, l.RetryAfter
	d.Never, d.DelayMS, d.NextAfterMS, d.NextAfter = l.Never, l.DelayMS, l.NextAfterMS, l.NextAfter
	d.Limits = make([]LimitJSON, len(each))
	for i := range each {
		d.Limits[i] = limitJSON(&each[i])
		if d.Taken && each[i].Shadow && !each[i].Allowed {
			d.Uncharged = append(d.Uncharged, each[i].Name)
		}
	}
	return d
}

func limitJSON(l *rl.LimitResult) LimitJSON {
	j := LimitJSON{Name: l.Name, Allowed: l.Allowed, Shadow: l.Shadow, Limit: l.Limit, Remaining: l.Remaining,
		WindowMS: ceilDiv(l.Window, time.Millisecond), ResetAfterMS: ceilDiv(l.ResetAfter, time.Millisecond),
		ResetAfter: ceilDiv(l.ResetAfter, time.Second), RetryAfterMS: ceilDiv(l.RetryAfter, time.Millisecond),
		RetryAfter: ceilDiv(l.RetryAfter, time.Second), Never: l.Never, DelayMS: ceilDiv(l.Delay, time.Millisecond),
		NextAfterMS: ceilDiv(l.NextAfter, time.Millisecond), NextAfter: ceilDiv(l.NextAfter, time.Second)}
	if l.Never {
		j.RetryAfterMS, j.RetryAfter = -1, -1
	}
	return j
}

// ceilDiv rounds d up to whole units, 0 for a negative d. It saturates
// rather than overflows: d + unit - 1 would wrap within a unit of the
// largest Duration and turn a 292-year wait into a negative one.
// failClosed answers a decision refused for a failure (Service.decide):
// by its class (outage.Class), 503 with Retry-After for load and store
// failures, 500 for the rest.
func (s *Service) failClosed(w http.ResponseWriter, err error) {
	switch outage.ClassOf(err) {
	case outage.Load:
		w.Header().Set("Retry-After", "1")
		s.apiError(w, http.StatusServiceUnavailable, "overloaded", "rate limiter overloaded; retry later")
	case outage.Internal:
		s.apiError(w, http.StatusInternalServerError, "internal", "rate limiter error: "+redact.String(err.Error()))
	default:
		w.Header().Set("Retry-After", "1")
		s.apiError(w, http.StatusServiceUnavailable, "store_unavailable", "rate limiter unavailable: "+redact.String(err.Error()))
	}
}

func ceilDiv(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	q := int64(d / unit)
	if d%unit != 0 {
		q++
	}
	return q
}

func (s *Service) apiReset(w http.ResponseWriter, r *http.Request) {
	if !s.requireAdmin(w, r, "reset") {
		return
	}
	var req DecisionRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	rs := s.rules.Load()
	t, _, err := s.resolve(rs, &req, "", opReset, RoleAdmin)
	if err != nil {
		s.clientError(w, err)
		return
	}
	err = t.lim.ResetPolicy(r.Context(), req.Key, t.policy)
	if err == nil && t.override != nil {
		// The rule's limits too: the key's state is kept per limit name,
		// and a name of the rule's that the override lacks would come back
		// into use when the override stops applying.
		err = t.lim.ResetPolicy(r.Context(), req.Key, t.rule.policy)
	}
	if err != nil {
		if errors.Is(err, rl.ErrStore) {
			t.m.storeErrors.Inc()
			s.log.Warn("reset failed", "rule", t.er.Name, "err", err)
			s.apiError(w, http.StatusServiceUnavailable, "store_unavailable", "rate limiter unavailable: "+err.Error())
			return
		}
		s.clientError(w, &errClient{"invalid_key", err})
		return
	}
	answer := map[string]any{"reset": true, "rule": t.er.Name, "key": req.Key}
	if t.override != nil {
		answer["override"] = t.override.label
	}
	writeJSON(w, http.StatusOK, answer)
}

// RuleJSON describes a rule in GET /v1/ratelimit/rules and in explain: the
// configuration's fields in canonical form.
type RuleJSON struct {
	Name               string          `json:"name"`
	Endpoint           string          `json:"endpoint,omitempty"`
	Host               string          `json:"host,omitempty"`
	Methods            []string        `json:"methods,omitempty"`
	KeyBy              string          `json:"key_by"`
	Cost               int64           `json:"cost"`
	MinCost            int64           `json:"min_cost"`
	CostHeader         string          `json:"cost_header,omitempty"`
	ResponseCostHeader string          `json:"response_cost_header,omitempty"`
	FailOpen           bool            `json:"fail_open"`
	Shape              bool            `json:"shape,omitempty"`
	RateLimitFields    string          `json:"ratelimit_fields"`
	QuotaUnit          string          `json:"quota_unit"`
	PartitionKey       bool            `json:"partition_key,omitempty"`
	Limits             []LimitSpecJSON `json:"limits"`
	// Overrides are the rule's per-key overrides, in file order.
	Overrides []OverrideJSON `json:"overrides,omitempty"`
}

// LimitSpecJSON is a configured limit in canonical form.
type LimitSpecJSON struct {
	Name     string `json:"name"`
	Strategy string `json:"strategy"`
	Limit    int64  `json:"limit"`
	Window   string `json:"window"`
	Rate     int64  `json:"rate,omitempty"`
	Shadow   bool   `json:"shadow,omitempty"`
}

func (s *Service) apiRules(w http.ResponseWriter, r *http.Request) {
	if !s.requireAdmin(w, r, "reading the rules") {
		return
	}
	rs := s.rules.Load()
	out := struct {
		Config       string     `json:"config"`
		Loaded       time.Time  `json:"loaded"`
		Upstream     string     `json:"upstream"`
		InlineLimits bool       `json:"inline_limits"`
		Rules        []RuleJSON `json:"rules"`
	}{rs.cfg.Path, rs.loaded.UTC(), redact.String(rs.cfg.Upstream), rs.cfg.InlineLimits, []RuleJSON{}}
	for _, spec := range rs.cfg.Rules {
		out.Rules = append(out.Rules, *describeRule(rs.byName[spec.Name]))
	}
	writeJSON(w, http.StatusOK, out)
}

// checkKey validates a key of the target (rule or inline namespace) base
// as the limiter will, before anything is decided (so a batch with a bad
// key fails before it takes anything): 1 to MaxKeyLength bytes of
// printable ASCII without spaces, the length counted on the key the store
// sees ("<base>:<key>", rl.Config.MaxKeyLength), so that a key the API
// accepts is one every store takes.
func (s *Service) checkKey(base, key string) error {
	if key == "" {
		return errors.New("missing")
	}
	if n, max := len(base)+1+len(key), s.eng.MaxKeyLength(); n > max {
		return fmt.Errorf("%d bytes (%d with the rule's name %q), longer than %d", len(key), n, base, max)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("byte %#02x at %d is not printable ASCII (or is a space)", c, i)
		}
	}
	return nil
}

// appendJSON encodes d as encoding/json would (same fields, same order),
// without reflection: the decision API's hot path.
func (d *DecisionJSON) appendJSON(b []byte) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	b = append(b, `,"rule":`...)
	b = appendString(b, d.Rule)
	b = append(b, `,"key":`...)
	b = appendString(b, d.Key)
	b = append(b, `,"cost":`...)
	b = strconv.AppendInt(b, d.Cost, 10)
	if d.Delta != nil {
		b = append(b, `,"delta":`...)
		b = strconv.AppendInt(b, *d.Delta, 10)
	}
	b = append(b, `,"peek":`...)
	b = strconv.AppendBool(b, d.Peek)
	b = append(b, `,"taken":`...)
	b = strconv.AppendBool(b, d.Taken)
	if len(d.Uncharged) > 0 {
		b = append(b, `,"uncharged":[`...)
		for i, name := range d.Uncharged {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, name)
		}
		b = append(b, ']')
	}
	b = append(b, `,"fail_open":`...)
	b = strconv.AppendBool(b, d.FailOpen)
	if d.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, d.Error)
	}
	if d.Override != "" {
		b = append(b, `,"override":`...)
		b = appendString(b, d.Override)
	}
	b = append(b, `,"limit_name":`...)
	b = appendString(b, d.LimitName)
	b = appendLimitFields(b, d.Limit, d.Remaining, d.WindowMS, d.ResetAfterMS, d.ResetAfter, d.RetryAfterMS, d.RetryAfter, d.Never, d.DelayMS, d.NextAfterMS, d.NextAfter)
	b = append(b, `,"limits":[`...)
	for i := range d.Limits {
		l := &d.Limits[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, l.Name)
		b = append(b, `,"allowed":`...)
		b = strconv.AppendBool(b, l.Allowed)
		if l.Shadow {
			b = append(b, `,"shadow":true`...)
		}
		b = appendLimitFields(b, l.Limit, l.Remaining, l.WindowMS, l.ResetAfterMS, l.ResetAfter, l.RetryAfterMS, l.RetryAfter, l.Never, l.DelayMS, l.NextAfterMS, l.NextAfter)
		b = append(b, '}')
	}
	b = append(b, ']')
	if d.Explain != nil {
		// Rare and nested: encoding/json, as the rest would encode it.
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(d.Explain); err == nil {
			b = append(b, `,"explain":`...)
			b = append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		}
	}
	return append(b, "}\n"...)
}

func appendLimitFields(b []byte, limit, remaining, windowMS, resetMS, reset, retryMS, retry int64, never bool, delayMS, nextMS, next int64) []byte {
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, remaining, 10)
	b = append(b, `,"window_ms":`...)
	b = strconv.AppendInt(b, windowMS, 10)
	b = append(b, `,"reset_after_ms":`...)
	b = strconv.AppendInt(b, resetMS, 10)
	b = append(b, `,"reset_after":`...)
	b = strconv.AppendInt(b, reset, 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, retryMS, 10)
	b = append(b, `,"retry_after":`...)
	b = strconv.AppendInt(b, retry, 10)
	b = append(b, `,"never":`...)
	b = strconv.AppendBool(b, never)
	b = append(b, `,"delay_ms":`...)
	b = strconv.AppendInt(b, delayMS, 10)
	b = append(b, `,"next_after_ms":`...)
	b = strconv.AppendInt(b, nextMS, 10)
	b = append(b, `,"next_after":`...)
	return strconv.AppendInt(b, next, 10)
}

// appendString appends s as a JSON string. Keys and names are printable
// ASCII, but anything is escaped correctly.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		case c >= 0x80:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = append(b, `\ufffd`...)
				continue
			}
			if r == '\u2028' || r == '\u2029' { // as encoding/json does
				b = append(b, `\u202`...)
				b = append(b, hex[r&15])
			} else {
				b = append(b, s[i:i+n]...)
			}
			i += n - 1
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// writeDecision writes d with the fast encoder.
func writeDecision(w http.ResponseWriter, status int, d *DecisionJSON) {
	bp := bufPool.Get().(*[]byte)
	b := d.appendJSON((*bp)[:0])
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	w.Write(b)
	*bp = b
	bufPool.Put(bp)
}

var jsonContentType = []string{"application/json"}
