package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/outage"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
	rlstore "github.com/rlcore/rl/store"
)

// Global mode: the rule's decision is rl-wasm-host's, asked over an HTTP
// callout (proxy_http_call) to an Envoy cluster:
//
//	POST /v1/ratelimit/check
//	Authorization: Bearer <global.token>        (if set)
//	{"rule": "<global.rule>", "key": "<key>", "cost": n}
//	{"limits": [{"name", "strategy", "limit", "window", "rate", "shadow"}...], "key": "<rule>:<key>", "cost": n, "fail_open": b}
//
// 200 admits, 429 denies (the body's deciding limit gives the header
// fields); anything else, a timeout or a failed call is a failure, answered
// by the one failure rule (outage.Classify, readGlobal): only the service
// unreachable is an outage, answered by the rule's fail policy; its own
// refusals (overloaded, its store failing, a bad request) are refused here
// too.

// checkRequest is the body of a callout, rl-wasm-host's DecisionRequest.
type checkRequest struct {
	Rule     string        `json:"rule,omitempty"`
	Limits   []inlineLimit `json:"limits,omitempty"`
	Key      string        `json:"key"`
	Cost     int64         `json:"cost,omitempty"` // a check's: at least 1
	Estimate *int64        `json:"estimate,omitempty"`
	Actual   *int64        `json:"actual,omitempty"`
	// Uncharged: a settle's shadow limits the check did not charge
	// (its would-denies), left as they are by rl-wasm-host.
	Uncharged []string `json:"uncharged,omitempty"`
	FailOpen  *bool    `json:"fail_open,omitempty"`
}

type inlineLimit struct {
	Name     string `json:"name"`
	Strategy string `json:"strategy"`
	Limit    int64  `json:"limit"`
	Window   string `json:"window"`
	Rate     int64  `json:"rate,omitempty"`
	Shadow   bool   `json:"shadow,omitempty"`
}

// checkResponse is the part of rl-wasm-host's DecisionJSON the filter reads
// (readAnswer).
type checkResponse struct {
	Allowed   bool
	FailOpen  bool
	LimitName string
	checkLimit
	// Limits are every limit's (an older rl-wasm-host sends none: the
	// deciding limit's fields above serve alone).
	Limits []checkLimit
}

// checkLimit is one limit's result in rl-wasm-host's DecisionJSON.
type checkLimit struct {
	Name         string
	Allowed      bool
	Shadow       bool
	Limit        int64
	Remaining    int64
	WindowMS     int64
	ResetAfterMS int64
	RetryAfterMS int64
	Never        bool
	NextAfterMS  int64
}

// answerJSON is rl-wasm-host's DecisionJSON as the filter decodes it,
// with ruleconfig.Decode, the filter's one JSON decoder (its
// configuration's too): names match exactly and a name given twice in one
// object is refused, where encoding/json would take "Allowed", "ALLOWED"
// or "\u212a"-spelled names for the field, the last one winning, so that an
// answer could read two ways to two readers. Unknown names pass (a newer
// rl-wasm-host may add fields), except another spelling of a field read
// here (ruleconfig.Fields.Respelled); a field of the wrong kind is
// refused. (rl-wasm-host reads its requests with
// github.com/go-json-experiment/json; here it would add 1.35 MB, 28%, to
// the module, and ruleconfig's decoder, already in it, adds nothing.)
type answerJSON struct {
	ruleconfig.Fields
	Allowed   ruleconfig.Bool   `json:"allowed"`
	FailOpen  ruleconfig.Bool   `json:"fail_open"`
	LimitName ruleconfig.String `json:"limit_name"`
	// The deciding limit's fields, as answerLimit's.
	Limit        ruleconfig.Int               `json:"limit"`
	Remaining    ruleconfig.Int               `json:"remaining"`
	WindowMS     ruleconfig.Int               `json:"window_ms"`
	ResetAfterMS ruleconfig.Int               `json:"reset_after_ms"`
	RetryAfterMS ruleconfig.Int               `json:"retry_after_ms"`
	Never        ruleconfig.Bool              `json:"never"`
	NextAfterMS  ruleconfig.Int               `json:"next_after_ms"`
	Limits       ruleconfig.List[answerLimit] `json:"limits"`
}

// answerLimit is one limit's result in answerJSON.
type answerLimit struct {
	ruleconfig.Fields
	Name         ruleconfig.String `json:"name"`
	Allowed      ruleconfig.Bool   `json:"allowed"`
	Shadow       ruleconfig.Bool   `json:"shadow"`
	Limit        ruleconfig.Int    `json:"limit"`
	Remaining    ruleconfig.Int    `json:"remaining"`
	WindowMS     ruleconfig.Int    `json:"window_ms"`
	ResetAfterMS ruleconfig.Int    `json:"reset_after_ms"`
	RetryAfterMS ruleconfig.Int    `json:"retry_after_ms"`
	Never        ruleconfig.Bool   `json:"never"`
	NextAfterMS  ruleconfig.Int    `json:"next_after_ms"`
}

// readAnswer decodes rl-wasm-host's answer (answerJSON). A field absent is
// zero, as it was.
func readAnswer(body []byte) (checkResponse, error) {
	var a answerJSON
	if ps := ruleconfig.Decode(body, &a); len(ps) > 0 {
		return checkResponse{}, errors.New("answered malformed JSON: " + strings.TrimPrefix(ps[0].String(), "JSON: "))
	}
	c := &ruleconfig.Checker{}
	var cr checkResponse
	if answerObject(c, "", &a.Fields) {
		cr.Allowed, _ = c.Bool("allowed", a.Allowed)
		cr.FailOpen, _ = c.Bool("fail_open", a.FailOpen)
		cr.LimitName, _ = c.String("limit_name", a.LimitName)
		cr.checkLimit = checkLimit{Limit: answerInt(c, "limit", a.Limit), Remaining: answerInt(c, "remaining", a.Remaining),
			WindowMS: answerInt(c, "window_ms", a.WindowMS), ResetAfterMS: answerInt(c, "reset_after_ms", a.ResetAfterMS),
			RetryAfterMS: answerInt(c, "retry_after_ms", a.RetryAfterMS), NextAfterMS: answerInt(c, "next_after_ms", a.NextAfterMS)}
		cr.Never, _ = c.Bool("never", a.Never)
		if c.Want("limits", "a list", a.Limits.Got) {
			for i := range a.Limits.Items {
				l, path := &a.Limits.Items[i], "limits["+strconv.Itoa(i)+"]"
				if !answerObject(c, path, &l.Fields) {
					continue
				}
				cl := checkLimit{Limit: answerInt(c, path+".limit", l.Limit), Remaining: answerInt(c, path+".remaining", l.Remaining),
					WindowMS: answerInt(c, path+".window_ms", l.WindowMS), ResetAfterMS: answerInt(c, path+".reset_after_ms", l.ResetAfterMS),
					RetryAfterMS: answerInt(c, path+".retry_after_ms", l.RetryAfterMS), NextAfterMS: answerInt(c, path+".next_after_ms", l.NextAfterMS)}
				cl.Name, _ = c.String(path+".name", l.Name)
				cl.Allowed, _ = c.Bool(path+".allowed", l.Allowed)
				cl.Shadow, _ = c.Bool(path+".shadow", l.Shadow)
				cl.Never, _ = c.Bool(path+".never", l.Never)
				cr.Limits = append(cr.Limits, cl)
			}
		}
	}
	if len(c.Problems) > 0 {
		return checkResponse{}, errors.New("answered an invalid decision: " + c.Problems[0].String())
	}
	return cr, nil
}

// answerObject reports the object at path unless it is one, and a field
// it gives in another spelling; it returns whether it is an object.
func answerObject(c *ruleconfig.Checker, path string, f *ruleconfig.Fields) bool {
	if !c.Want(path, "an object", f.Got) {
		return false
	}
	if k, want := f.Respelled(); k != "" {
		c.Fail(ruleconfig.Join(path, k), "names are case-sensitive; want %q", want)
	}
	return true
}

// answerInt is the integer at path, reporting another kind; 0 if absent.
func answerInt(c *ruleconfig.Checker, path string, v ruleconfig.Int) int64 {
	n, _ := c.Int(path, v)
	return n
}

// state checks l's ranges and returns it in the answer's units, named
// name.
func (l *checkLimit) state(name string) (pipeline.LimitState, error) {
	const maxMS = core.MaxWindow / 1000
	if l.Limit < 1 || l.Remaining < 0 || l.WindowMS < 1 || l.ResetAfterMS < 0 || l.RetryAfterMS < -1 || l.NextAfterMS < 0 ||
		l.Limit > core.MaxLimit || l.WindowMS > maxMS || l.ResetAfterMS > maxMS || l.RetryAfterMS > maxMS || l.NextAfterMS > maxMS {
		return pipeline.LimitState{}, errors.New("answered a decision out of range: limit " + strconv.FormatInt(l.Limit, 10))
	}
	return pipeline.LimitState{Name: name, Allowed: l.Allowed, Never: l.Never, Shadow: l.Shadow, Limit: l.Limit, Remaining: l.Remaining,
		Window: l.WindowMS * 1000, ResetAfter: l.ResetAfterMS * 1000, RetryAfter: max(0, l.RetryAfterMS) * 1000,
		NextAfter: l.NextAfterMS * 1000}, nil
}

// globalKey is the key sent to rl-wasm-host for key, the request's key as
// key_by derived it (pipeline.Key).
//
// A rule naming rl-wasm-host's rule (global.rule) sends key itself: that
// rule keeps it as "<global.rule>:<key>" and matches its own overrides
// against it, as it does for the same request through rl-wasm-host's proxy,
// and for a decision-API client naming the rule with that key. A key it
// would refuse was answered 400 before any callout (globalKeyProblem).
//
// Inline limits are kept in rl-wasm-host's inline namespace
// ("inline:<key>"), shared by every caller of inline limits, so the key
// sent is "<rule>:<key>" (the rule's overrides were matched here, on key),
// or, when rl-wasm-host would not take that as an inline key (too long with
// "inline:" counted, or not printable ASCII without spaces), "<rule>:sha256:"
// and 32 hex digits of key's SHA-256.
func globalKey(r *rule, key string) string {
	if r.Global.Rule != "" {
		return key
	}
	k := r.Name + ":" + key
	if pipeline.StoredKeyProblem(ruleconfig.InlineNamespace, k) == "" {
		return k
	}
	return r.Name + ":" + pipeline.APIKeyDigest(key)
}

// globalKeyProblem says why rl-wasm-host would refuse key from r, or is "":
// a global.rule's key goes as it is (globalKey), and rl-wasm-host keeps
// it under that rule's name.
func globalKeyProblem(r *rule, key string) string {
	if r.Global.Rule == "" {
		return ""
	}
	return pipeline.StoredKeyProblem(r.Global.Rule, key)
}

// checkBody returns the callout's body.
func checkBody(r *rule, key string, cost int64) []byte {
	return decisionBody(r, checkRequest{Key: globalKey(r, key), Cost: cost}, true)
}

// settleBody returns the body of a settle's callout: the check's, with
// the estimate (the check's cost) and the actual cost instead of a cost.
func settleBody(r *rule, key string, estimate, actual int64, uncharged []string) []byte {
	return decisionBody(r, checkRequest{Key: globalKey(r, key), Estimate: &estimate, Actual: &actual, Uncharged: uncharged}, false)
}

// decisionBody completes req with r's rule name or inline limits (and,
// for a check, their fail policy) and encodes it.
func decisionBody(r *rule, req checkRequest, check bool) []byte {
	if r.Global.Rule != "" {
		req.Rule = r.Global.Rule
	} else {
		for i, l := range r.Limits {
			req.Limits = append(req.Limits, inlineLimit{
				Name: r.LimitNames[i], Strategy: l.Algorithm.String(), Limit: l.Limit, Window: core.FormatWindow(l.Window), Rate: l.Rate,
				Shadow: r.Shadow[i],
			})
		}
		if check {
			fo := r.FailOpen
			req.FailOpen = &fo
		}
	}
	b, err := json.Marshal(req)
	if err != nil { // not reached: plain fields
		panic(err)
	}
	return b
}

// askGlobal sends the callout and pauses the request until its answer.
func (h *httpContext) askGlobal(r *rule, key string, cost int64) types.Action {
	g := r.Global
	hs := [][2]string{
		{":method", "POST"},
		{":path", g.Path},
		{":authority", g.Authority},
		{"content-type", "application/json"},
		{"accept", "application/json"},
	}
	if g.Token != "" {
		hs = append(hs, [2]string{"authorization", "Bearer " + g.Token})
	}
	begun := h.p.outage.Begin()
	_, err := proxywasm.DispatchHttpCall(g.Cluster, hs, checkBody(r, key, cost), nil, g.TimeoutMS,
		func(numHeaders, bodySize, _ int) { h.onGlobal(r, begun, key, cost, numHeaders, bodySize) })
	if err != nil {
		return h.failed(r, begun, fmt.Errorf("calling cluster %q: %w: %w", g.Cluster, rlstore.ErrUnavailable, err))
	}
	return types.ActionPause
}

// onGlobal handles the callout's answer and resumes or answers the request.
func (h *httpContext) onGlobal(r *rule, begun outage.Token, key string, cost int64, numHeaders, bodySize int) {
	v, err := readGlobal(numHeaders, bodySize)
	var act types.Action
	switch {
	case errors.Is(err, errServiceFailOpen):
		act = types.ActionContinue // the service's store failed, fail_open: no decision, no fields
		h.expectNoSettle(r)
	case err != nil:
		act = h.failed(r, begun, fmt.Errorf("cluster %q: %w", r.Global.Cluster, err))
	default:
		h.p.outage.Success()
		if v.Allowed {
			h.expectSettle(r, key, key, cost)
			if h.settle != nil {
				for i := range v.Limits {
					if v.WouldDeny(i) {
						h.settle.unchargedNames = append(h.settle.unchargedNames, v.Limits[i].Name)
					}
				}
			}
		}
		act = h.decided(r, key, &v)
	}
	if act == types.ActionContinue {
		if err := proxywasm.ResumeHttpRequest(); err != nil {
			proxywasm.LogErrorf("rl-filter: resuming the request: %v", err)
		}
	}
}

var errServiceFailOpen = errors.New("rl-wasm-host failed open")

// maxGlobalBody bounds the answer read (rl-wasm-host's is well below).
const maxGlobalBody = 64 << 10

// readGlobal reads the callout's answer: a verdict, errServiceFailOpen, or
// a failure for the one failure rule (outage.Classify):
//
//   - no answer (a timeout, a reset) is a timeout (rlstore.ErrUnavailable and
//     context.DeadlineExceeded: an outage only as the Detector counts them);
//   - a 200 that is not a decision is Failed;
//   - any other answer that is not a decision goes to outage.ClassifyHTTP,
//     the one mapping of statuses, Envoy's x-envoy-overloaded and
//     rl-wasm-host's error codes to failures (globalRefusal).
func readGlobal(numHeaders, bodySize int) (pipeline.Verdict, error) {
	if numHeaders == 0 {
		return pipeline.Verdict{}, fmt.Errorf("no answer (timeout, reset or no healthy host): %w: %w", rlstore.ErrUnavailable, context.DeadlineExceeded)
	}
	hs, err := proxywasm.GetHttpCallResponseHeaders()
	if err != nil {
		return pipeline.Verdict{}, fmt.Errorf("%w: %w", rlstore.ErrUnavailable, err)
	}
	status, overloaded := "", false
	for _, kv := range hs {
		switch kv[0] {
		case ":status":
			status = kv[1]
		case outage.OverloadedField:
			overloaded = true
		}
	}
	var body []byte
	if bodySize > 0 && bodySize <= maxGlobalBody {
		if body, err = proxywasm.GetHttpCallResponseBody(0, bodySize); err != nil {
			return pipeline.Verdict{}, fmt.Errorf("%w: %w", rlstore.ErrUnavailable, err)
		}
	}
	if (status == "200" || status == "429") && body != nil {
		v, err := parseGlobal(status, body)
		if err == nil || errors.Is(err, errServiceFailOpen) {
			return v, err
		}
		if status == "200" {
			return pipeline.Verdict{}, outage.Classified(outage.Failed, err)
		}
	}
	if status == "200" {
		return pipeline.Verdict{}, outage.Classified(outage.Failed, fmt.Errorf("answered a body of %d bytes", bodySize))
	}
	return pipeline.Verdict{}, globalRefusal(status, overloaded, body)
}

// globalRefusal is the failure of an answer that is not a decision:
// outage.ClassifyHTTP of its status, whether Envoy marked it
// x-envoy-overloaded, and rl-wasm-host's error code if the body is its
// JSON error.
func globalRefusal(status string, overloaded bool, body []byte) error {
	// The code only as rl-wasm-host spells it (answerJSON says why).
	var e struct {
		ruleconfig.Fields
		Code ruleconfig.String `json:"code"`
	}
	code := ""
	if len(ruleconfig.Decode(body, &e)) == 0 && e.Code.OK() {
		if k, _ := e.Respelled(); k == "" {
			code = e.Code.V
		}
	}
	n, err := strconv.Atoi(status)
	if err != nil || n < 100 || n > 999 {
		n = 0
	}
	return outage.ClassifyHTTP(n, overloaded, code)
}

// parseGlobal turns rl-wasm-host's answer into a verdict.
func parseGlobal(status string, body []byte) (pipeline.Verdict, error) {
	cr, err := readAnswer(body)
	if err != nil {
		return pipeline.Verdict{}, err
	}
	if cr.Allowed != (status == "200") {
		return pipeline.Verdict{}, fmt.Errorf("answered status %s with allowed=%v", status, cr.Allowed)
	}
	if cr.FailOpen {
		return pipeline.Verdict{}, errServiceFailOpen
	}
	// The deciding limit is the one named limit_name; an answer without
	// the list (or naming none of it) gives that limit alone.
	v := pipeline.Verdict{Allowed: cr.Allowed, Deciding: -1}
	if len(cr.Limits) <= maxLimits {
		for i := range cr.Limits {
			l, err := cr.Limits[i].state(cr.Limits[i].Name)
			if err != nil {
				return pipeline.Verdict{}, err
			}
			if l.Name == cr.LimitName && v.Deciding < 0 {
				v.Deciding = i
			}
			v.Limits = append(v.Limits, l)
		}
	}
	if v.Deciding >= 0 && v.Limits[v.Deciding].Shadow {
		v.Allowed = true // only shadow limits: they never deny
	}
	if v.Deciding < 0 {
		cr.checkLimit.Allowed = cr.Allowed
		l, err := cr.checkLimit.state(cr.LimitName)
		if err != nil {
			return pipeline.Verdict{}, err
		}
		v.Limits, v.Deciding = []pipeline.LimitState{l}, 0
	}
	return v, nil
}
