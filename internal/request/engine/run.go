package engine

import (
	"context"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/outage"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// Limiter decides requests: *rl.Limiter is one; the middleware's users may
// wrap one (httplimit.Limiter).
type Limiter interface {
	Do(ctx context.Context, req rl.Request) (rl.Result, error)
}

// Reading is how a rule reads a request's key and cost: its key_by, cost,
// min_cost and cost_header (ruleconfig.Spec), and the client networks
// key_by: ip keys by.
type Reading struct {
	// KeyBy is the one place the key is read from (pipeline.Key).
	KeyBy ruleconfig.KeyBy
	// IP is how key_by: ip keys a client.
	IP pipeline.IPKey
	// Cost is the cost of a request without CostHeader; MinCost the
	// least a cost header may ask for (at least 1: never free).
	Cost, MinCost int64
	// CostHeader, if set, names the request header carrying the cost.
	CostHeader string
}

// Key returns r's key by rd's key source (pipeline.Key), before the rule's
// name is added; match is r's path in pipeline.MatchPath's form. Its error
// is a *pipeline.KeyError: the request has no usable key.
func (rd *Reading) Key(r *pipeline.Request, match string) (string, error) {
	return pipeline.Key(rd.KeyBy, rd.IP, r, match)
}

// ReadCost returns r's cost: rd.Cost, or its cost header's
// (pipeline.ParseCost, within [MinCost, core.MaxCost]). Its error is a
// *pipeline.CostError.
func (rd *Reading) ReadCost(r *pipeline.Request) (int64, error) {
	if rd.CostHeader == "" {
		return rd.Cost, nil
	}
	var vs []string
	if r.Header != nil {
		vs = r.Header.Values(rd.CostHeader)
	}
	return pipeline.ParseCost(vs, rd.Cost, rd.MinCost)
}

// Rule is what the engine decides a request against, compiled once per
// configuration: a rule of rl-wasm-host, a domain of the gRPC service, the
// decision API's inline limits, a middleware's limiter. Its fields are
// read, never written, by Run: share one Rule among every request.
type Rule struct {
	// Name is the limiter's base key: the per-key gate's namespace.
	Name string
	// Limiter decides.
	Limiter Limiter
	// Policy is the rule's policy; nil: the limiter's.
	Policy *rl.Policy
	// FailOpen admits requests when the store is down (an outage, never
	// load).
	FailOpen bool
	// AllowMissingKey serves a request without a key unlimited (Unkeyed)
	// instead of refusing it (MissingKey).
	AllowMissingKey bool
	// Reading reads the key and cost of an Input that carries a Request.
	Reading Reading
	// Overrides select, for some keys, the policy of OverridePolicies at
	// the index they match in place of Policy (ruleconfig's overrides).
	Overrides        pipeline.Overrides
	OverridePolicies []*rl.Policy
}

// For is the override step: the policy deciding key, Policy or that of
// the override selecting key, and that override's index (-1: none).
func (r *Rule) For(key string) (*rl.Policy, int) {
	if len(r.OverridePolicies) == 0 {
		return r.Policy, -1
	}
	if i := r.Overrides.Match(key); i >= 0 {
		return r.OverridePolicies[i], i
	}
	return r.Policy, -1
}

// Input is one request to decide, in neutral terms: what a front end read
// of its protocol once it matched the request to a rule.
type Input struct {
	// Request, if set, is read for the key and the cost by the rule's
	// Reading, Match being its path in pipeline.MatchPath's form (for
	// key_by: path). Otherwise Key and Cost are the request's as the front
	// end read them, and KeyErr and CostErr, when set, why it could not:
	// a request without a key (MissingKey, or Unkeyed), with an invalid
	// cost (InvalidCost).
	Request *pipeline.Request
	Match   string
	Key     string
	KeyErr  error
	Cost    int64
	CostErr error
	// Policy, if set, decides in place of the override step's (Rule.For):
	// a front end that chose it (httplimit's Config.Policy), or that
	// needed the key's policy before deciding (the decision API's settle
	// bound, the charged limits of a settle).
	Policy *rl.Policy
	// Peek decides without charging; Settle corrects the key's usage by
	// Cost (rl.Request.Settle).
	Peek, Settle bool
	// Gate is how the decision takes its place in the per-key bound.
	Gate Gate
	// Each, if set, receives every limit's result (rl.Request.Each).
	// Results, without Each, makes Run allocate it for the key's policy
	// (rl.MaxLimits long when the policy is the limiter's own, unknown).
	Each    []rl.LimitResult
	Results bool
	// Fail, if set, answers a decision that failed for a reason other
	// than the request's in place of the failure rule (httplimit's
	// Config.Fail): the outcome, which must be a failure's (FailOpen,
	// FailClosed, Overloaded, Error; any other is answered FailClosed),
	// and the error to report.
	Fail func(err error) (Outcome, error)
}

// Result is everything Run made of one request: one value, so that
// whatever reads decisions (metrics, logs, the answer's fields) reads
// them in one place.
type Result struct {
	// Outcome is the one vocabulary's: Allowed or Denied when decided;
	// MissingKey, Unkeyed, InvalidKey or InvalidCost for a request at
	// fault; FailOpen, FailClosed, Overloaded or Error for a failure.
	Outcome Outcome
	// Key and Cost are the request's (Cost 0 when its key was missing);
	// Peek and Settle the Input's.
	Key          string
	Cost         int64
	Peek, Settle bool
	// Policy is the policy decided (the key's), nil when the limiter's
	// own is not known; Override the index of the override that chose
	// it, -1 for none.
	Policy   *rl.Policy
	Override int
	// Result is the limiter's, for Allowed and Denied; Each every limit's
	// result (Input.Each, or the slice Run allocated).
	Result rl.Result
	Each   []rl.LimitResult
	// Class is the failure's (outage.Class); 0 when decided.
	Class outage.Class
	// Err is nil when decided; the reading's error for MissingKey,
	// Unkeyed and a cost header's InvalidCost; the limiter's for
	// InvalidKey and InvalidCost; otherwise that error classified
	// (outage.Classified), or Input.Fail's.
	Err error
}

// Verdict is the result in the units of the answer's fields (Verdict).
func (r *Result) Verdict() pipeline.Verdict { return Verdict(r.Result, r.Each) }

// Run decides in, a request matched to r, through every step after the
// match, written once for every front end: the key and the cost (read
// from in.Request by r.Reading, or as given), the override (Rule.For),
// the per-key gate (in.Gate), the decision (r.Limiter over the store),
// the outage detector and the failure rule (outage.Class), into one Result,
// from which the answer's fields follow (Result.Verdict,
// pipeline.AppendFields).
//
// Every request a front end decides, or refuses for its key or cost,
// leaves Run as one Result, here: the one place that sees them all.
func (e *Engine) Run(ctx context.Context, r *Rule, in *Input) Result {
	if e.onDecision == nil {
		// A Result of its own: the one below goes to the hook, a function
		// value, so it lives on the heap; this one stays on the stack.
		var res Result
		e.run(ctx, r, in, &res, nil)
		return res
	}
	return e.runLogged(ctx, r, in)
}

// runLogged is Run with Options.OnDecision.
func (e *Engine) runLogged(ctx context.Context, r *Rule, in *Input) Result {
	var res Result
	var took time.Duration
	e.run(ctx, r, in, &res, &took)
	e.onDecision(ctx, r, &res, took)
	return res
}

// run is Run, into *res.
func (e *Engine) run(ctx context.Context, r *Rule, in *Input, res *Result, took *time.Duration) {
	*res = Result{Override: -1, Key: in.Key, Cost: in.Cost, Peek: in.Peek, Settle: in.Settle, Err: in.KeyErr}
	if in.Request != nil {
		res.Key, res.Err = r.Reading.Key(in.Request, in.Match)
	}
	if res.Err != nil {
		res.Key, res.Cost, res.Outcome = "", 0, MissingKey
		if r.AllowMissingKey {
			res.Outcome = Unkeyed
		}
		return
	}
	if in.Request != nil {
		res.Cost, res.Err = r.Reading.ReadCost(in.Request)
	} else {
		res.Err = in.CostErr
	}
	if res.Err != nil {
		res.Cost, res.Outcome = 0, InvalidCost
		return
	}
	res.Policy = in.Policy
	if res.Policy == nil {
		res.Policy, res.Override = r.For(res.Key)
	}
	req := rl.Request{Key: res.Key, Cost: res.Cost, Policy: res.Policy, Peek: in.Peek, Settle: in.Settle, Each: in.Each}
	if res.Policy == nil {
		if l, ok := r.Limiter.(*rl.Limiter); ok {
			res.Policy = l.Policy() // what the limiter decides; the request still names none
		}
	}
	if req.Each == nil && in.Results {
		n := rl.MaxLimits
		if res.Policy != nil {
			n = res.Policy.Len()
		}
		req.Each = make([]rl.LimitResult, n)
	}
	res.Each = req.Each
	e.decide(ctx, r, req, in.Gate, in.Fail, res, took)
}
