package main

import (
	"strings"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/pipeline"
)

// A rule with response_cost_header settles the cost of each request it
// admitted against what the upstream's response reports, as
// rl-wasm-host's proxy does: the request was charged its cost (the
// estimate); the response's header fields and trailers of that name give
// the actual cost (pipeline.ParseResponseCost), and the correction
// pipeline.SettleDelta makes of them (actual, at least min_cost and at
// most 2^40, less the estimate) is settled on the same key under the same
// limits (the key's override included): on shared data (store.settle), or
// in global mode through rl-wasm-host's POST /v1/ratelimit/settle (the
// estimate and the actual cost), a callout sent by the plugin and not
// waited for, its answer counted when it comes (queueSettle). The field is
// removed from the response (its headers, the Trailer field's
// announcements, its trailers): the client never sees it; a client's own
// field of that name is removed from the request (forward).
//
// The settle is made once the cost is final: with the response headers
// when they end the stream, with the trailers, or when the stream is done
// (a body without trailers). It never holds the response.

// pendingSettle is what a request admitted under a rule with
// response_cost_header needs to settle its response.
type pendingSettle struct {
	r        *rule  // the rule or override that decided it
	key      string // the key, before the rule's name
	record   string // the key's record in shared data
	estimate int64  // the cost taken
	// uncharged: the shadow limits (bits by index) the take did not
	// charge, its would-denies, which the settle leaves as they are
	// (store.Policy.Charged).
	uncharged uint32
	// unchargedNames: in global mode, the same, by name, as rl-wasm-host
	// answered the check: sent with the settle.
	unchargedNames []string
	values         []string
	done           bool
	// untaken: the request was let through without a decision
	// (fail_open): nothing to settle, but the field is removed all the
	// same.
	untaken bool
}

// settleMetric is the name of the counter of a rule's settles by result
// (pipeline.SettleResults, the results rl-wasm-host counts too): settled
// (on shared data, or in global mode answered 200 by rl-wasm-host; a cost
// equal to the estimate needs neither), invalid (a response cost that is
// not one: nothing settled), failed (shared data failed; in global mode,
// the callout could not be sent or was answered anything but 200: the
// estimate stands). Envoy shows it as
// wasmcustom.rl_filter.settles.<rule>.<result>.
func settleMetric(rule string, result pipeline.SettleResult) string {
	return "rl_filter.settles." + rule + "." + result.String()
}

// defineSettleMetrics defines the settle counters of every rule of cfg
// with response_cost_header.
func (p *pluginContext) defineSettleMetrics(cfg *config) {
	p.settles = map[*rule]*[pipeline.NumSettleResults]proxywasm.MetricCounter{}
	for _, r := range cfg.Rules {
		if r.ResponseCostHeader == "" {
			continue
		}
		var cs [pipeline.NumSettleResults]proxywasm.MetricCounter
		for _, res := range pipeline.SettleResults() {
			cs[res] = proxywasm.DefineCounterMetric(settleMetric(r.Name, res))
		}
		p.settles[r] = &cs
	}
}

// countSettle counts a settle of r by its result.
func (p *pluginContext) countSettle(r *rule, result pipeline.SettleResult) {
	if cs := p.settles[r.root()]; cs != nil {
		cs[result].Increment(1)
	}
}

// expectSettle records that the request, admitted by r for key (its
// record) at cost, settles its response, if r has response_cost_header.
func (h *httpContext) expectSettle(r *rule, key, record string, cost int64) {
	if r.ResponseCostHeader != "" {
		h.settle = &pendingSettle{r: r, key: key, record: record, estimate: cost}
	}
}

// charged records which of the rule's limits the take charged (ds, its
// per-limit decisions): a shadow limit's would-deny is not settled.
func (ps *pendingSettle) charged(r *rule, ds []core.Decision) {
	for i := range ds {
		if r.Shadow[i] && !ds[i].Allowed {
			ps.uncharged |= 1 << i
		}
	}
}

// expectNoSettle records that the request, let through by r without a
// decision, has its response's cost field removed, settling nothing.
func (h *httpContext) expectNoSettle(r *rule) {
	if r.ResponseCostHeader != "" {
		h.settle = &pendingSettle{r: r, untaken: true}
	}
}

// collect takes the cost field's values out of the response's header
// fields (trailers: false) or trailers, removing it, and the field from the
// Trailer field's announcements.
func (ps *pendingSettle) collect(trailers bool) {
	name := ps.r.ResponseCostHeader
	get, remove, replace := proxywasm.GetHttpResponseHeaders, proxywasm.RemoveHttpResponseHeader, proxywasm.ReplaceHttpResponseHeader
	if trailers {
		get, remove = proxywasm.GetHttpResponseTrailers, proxywasm.RemoveHttpResponseTrailer
	}
	hs, err := get()
	if err != nil {
		proxywasm.LogErrorf("rl-filter: rule %q: reading the response to settle its cost: %v", ps.r.Name, err)
		return
	}
	found := false
	for _, kv := range hs {
		switch {
		case strings.EqualFold(kv[0], name):
			ps.values = append(ps.values, kv[1])
			found = true
		case !trailers && strings.EqualFold(kv[0], "trailer"):
			if kept := unannounce(kv[1], name); kept != kv[1] {
				var err error
				if kept == "" {
					err = remove("trailer")
				} else {
					err = replace("trailer", kept)
				}
				if err != nil {
					proxywasm.LogErrorf("rl-filter: rule %q: rewriting the trailer field: %v", ps.r.Name, err)
				}
			}
		}
	}
	if found {
		if err := remove(name); err != nil {
			proxywasm.LogErrorf("rl-filter: rule %q: removing %s from the response: %v", ps.r.Name, name, err)
		}
	}
}

// unannounce is a Trailer field's value without name.
func unannounce(v, name string) string {
	var kept []string
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n != "" && !strings.EqualFold(n, name) {
			kept = append(kept, n)
		}
	}
	return strings.Join(kept, ", ")
}

// finishSettle settles the request's response once its cost is final:
// nothing without the field, nothing (counted and logged) for an invalid
// one, else pipeline.SettleDelta's correction.
func (h *httpContext) finishSettle() {
	ps := h.settle
	if ps == nil || ps.done {
		return
	}
	ps.done = true
	if len(ps.values) == 0 || ps.untaken {
		return // the estimate stands, or nothing was taken
	}
	p, r := h.p, ps.r
	actual, _, err := pipeline.ParseResponseCost(ps.values)
	if err != nil {
		p.countSettle(r, pipeline.SettleInvalid)
		p.logSettle("rule %q: invalid %s (%v); nothing settled, the estimate stands", r.Name, r.ResponseCostHeader, err)
		return
	}
	delta := pipeline.SettleDelta(ps.estimate, actual, r.MinCost)
	if delta == 0 {
		p.countSettle(r, pipeline.Settled)
		return
	}
	if r.Global != nil {
		// Sent by the plugin, counted when rl-wasm-host answers.
		p.queueSettle(globalSettle{r: r, key: ps.key, estimate: ps.estimate, actual: ps.estimate + delta, uncharged: ps.unchargedNames})
		return
	}
	var charged [core.MaxLimits]core.Decision
	for i := range r.Limits {
		charged[i].Allowed = ps.uncharged&(1<<i) == 0
	}
	if _, err = p.store.settle(r, ps.record, clock(), delta, charged[:len(r.Limits)], p.ds[:len(r.Limits)]); err == nil {
		p.countSettle(r, pipeline.Settled)
	}
	if err != nil {
		p.countSettle(r, pipeline.SettleFailed)
		p.logSettle("rule %q: settling %d: %v; the estimate stands", r.Name, delta, err)
	}
}

// logSettle logs a settle's problem, at most one line a second with the
// failures'.
func (p *pluginContext) logSettle(format string, args ...any) {
	if now := clock(); now-p.loggedAt >= 1_000_000 || now < p.loggedAt {
		p.loggedAt = now
		proxywasm.LogWarnf("rl-filter: "+format, args...)
	}
}

// globalSettle is a global rule's settle waiting to be sent.
type globalSettle struct {
	r                *rule // the rule or override that decided the request
	key              string
	estimate, actual int64 // the actual cost as SettleDelta settles it here
	uncharged        []string
	// tries counts the sends refused for load so far; due is the tick
	// count (pluginContext.ticks) at which the next send may go.
	tries int
	due   uint64
}

// settleRetryTicks are the waits, in ticks of settleTickMS, before a global
// settle that rl-wasm-host refused for load (503) or never answered is sent
// again: the waits rl.Limiter gives a settle its store refuses for load. A
// settle refused once more after the last is counted failed: the estimate
// stands.
var settleRetryTicks = [...]uint64{10, 40, 160}

// settleTickMS is the tick period while global settles wait to be sent.
const settleTickMS = 1

// maxSettleOutbox bounds the global settles waiting for a tick: beyond it
// a settle fails (the host is not ticking).
const maxSettleOutbox = 4096

// queueSettle has the plugin send a global rule's settle at its next tick
// (OnTick, within settleTickMS). The request is done, or about to be, when
// its cost is final: a callout it sent itself would be its own, and the SDK
// drops the answer to a callout whose context is gone (a host may cancel
// the callout with it), so the answer could never be counted. A callout
// the plugin sends lives as long as the plugin, and its answer is counted
// (sendSettle). The tick runs only while settles wait.
func (p *pluginContext) queueSettle(s globalSettle) {
	if len(p.outbox) >= maxSettleOutbox {
		p.countSettle(s.r, pipeline.SettleFailed)
		p.logSettle("rule %q: %d settles wait for the plugin's tick; dropping the settle of estimate %d, actual %d: the estimate stands",
			s.r.Name, len(p.outbox), s.estimate, s.actual)
		return
	}
	if !p.ticking {
		if err := proxywasm.SetTickPeriodMilliSeconds(settleTickMS); err != nil {
			p.countSettle(s.r, pipeline.SettleFailed)
			p.logSettle("rule %q: setting the plugin's tick to send a settle: %v; the estimate stands", s.r.Name, err)
			return
		}
		p.ticking = true
	}
	p.outbox = append(p.outbox, s)
}

// OnTick sends the global settles waiting (queueSettle) whose time has
// come, then stops the tick when none waits.
func (p *pluginContext) OnTick() {
	p.ticks++
	out := p.outbox
	keep := out[:0]
	for i := range out {
		if out[i].due > p.ticks {
			keep = append(keep, out[i])
			continue
		}
		p.sendSettle(out[i])
	}
	clear(out[len(keep):])
	p.outbox = keep
	if len(p.outbox) > 0 || !p.ticking {
		return
	}
	if err := proxywasm.SetTickPeriodMilliSeconds(0); err != nil {
		proxywasm.LogErrorf("rl-filter: stopping the plugin's tick: %v", err)
		return // ticking on, harmlessly
	}
	p.ticking = false
}

// sendSettle sends a global rule's settle of estimate and actual (as
// pipeline.SettleDelta settled it here: the service applies the same rule)
// to rl-wasm-host (its settle path), from the plugin, without waiting. It
// is counted when the answer comes: 200 settled; anything else, or none,
// failed and logged (at most a line a second), since the estimate stands:
// rl-wasm-host refused it (a refund with a check token, 403; a bad request,
// 400) or never got it. A settle refused for load (503) or not answered is
// sent again after the waits of settleRetryTicks before it counts failed.
func (p *pluginContext) sendSettle(s globalSettle) {
	r, g := s.r, s.r.Global
	hs := [][2]string{
		{":method", "POST"},
		{":path", g.SettlePath},
		{":authority", g.Authority},
		{"content-type", "application/json"},
		{"accept", "application/json"},
	}
	if g.Token != "" {
		hs = append(hs, [2]string{"authorization", "Bearer " + g.Token})
	}
	estimate, actual := s.estimate, s.actual
	_, err := proxywasm.DispatchHttpCall(g.Cluster, hs, settleBody(r, s.key, estimate, actual, s.uncharged), nil, g.TimeoutMS, func(numHeaders, _, _ int) {
		status := ""
		if numHeaders > 0 {
			hs, _ := proxywasm.GetHttpCallResponseHeaders()
			for _, kv := range hs {
				if kv[0] == ":status" {
					status = kv[1]
				}
			}
		}
		if (status == "503" || status == "") && s.tries < len(settleRetryTicks) {
			s.due = p.ticks + settleRetryTicks[s.tries]
			s.tries++
			p.queueSettle(s)
			return
		}
		if status != "200" {
			p.countSettle(r, pipeline.SettleFailed)
			p.logSettle("rule %q: cluster %q answered the settle of estimate %d, actual %d with status %q; the estimate stands",
				r.Name, g.Cluster, estimate, actual, status)
			return
		}
		p.countSettle(r, pipeline.Settled)
	})
	if err != nil {
		p.countSettle(r, pipeline.SettleFailed)
		p.logSettle("rule %q: settling estimate %d, actual %d: calling cluster %q: %v; the estimate stands", r.Name, estimate, actual, g.Cluster, err)
	}
}

// OnHttpResponseTrailers settles the response's cost with its trailers.
func (h *httpContext) OnHttpResponseTrailers(int) types.Action {
	if ps := h.settle; ps != nil && !ps.done {
		ps.collect(true)
		h.finishSettle()
	}
	return types.ActionContinue
}

// OnHttpStreamDone settles a response whose cost was not final before
// (a body without trailers).
func (h *httpContext) OnHttpStreamDone() { h.finishSettle() }
