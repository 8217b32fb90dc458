package main

import (
	"fmt"
	"strings"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/rlcore/rl/internal/pipeline"
	rlstore "github.com/rlcore/rl/store"
)

// A rule with response_cost_header settles the cost of each request it
// admitted against what the upstream's response reports, as
// rl-wasm-host's proxy does: the request was charged its cost (the
// estimate); the response's header fields and trailers of that name give
// the actual cost (pipeline.ParseResponseCost, at least min_cost), and
// actual − estimate is settled on the same key under the same limits (the
// key's override included): on shared data (store.settle), or in global
// mode through rl-wasm-host's POST /v1/ratelimit/settle, a callout sent
// and not waited for. The field is removed from the response (its
// headers, the Trailer field's announcements, its trailers): the client
// never sees it.
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
	values   []string
	done     bool
	// untaken: the request was let through without a decision
	// (fail_open): nothing to settle, but the field is removed all the
	// same.
	untaken bool
}

// settleMetric is the name of the counter of a rule's settles by result:
// settled (on shared data, or sent to rl-wasm-host in global mode, which
// counts them as they land in rl_settles_total; a cost equal to the
// estimate needs neither), invalid (a response cost that is not one:
// nothing settled), failed (shared data failed, or the callout could not
// be sent). Envoy shows it as wasmcustom.rl_filter.settles.<rule>.<result>.
func settleMetric(rule, result string) string { return "rl_filter.settles." + rule + "." + result }

// settleResults are the results settleMetric counts.
var settleResults = [...]string{"settled", "invalid", "failed"}

// defineSettleMetrics defines the settle counters of every rule of cfg
// with response_cost_header.
func (p *pluginContext) defineSettleMetrics(cfg *config) {
	p.settles = map[*rule]*[len(settleResults)]proxywasm.MetricCounter{}
	for _, r := range cfg.Rules {
		if r.ResponseCostHeader == "" {
			continue
		}
		var cs [len(settleResults)]proxywasm.MetricCounter
		for i, res := range settleResults {
			cs[i] = proxywasm.DefineCounterMetric(settleMetric(r.Name, res))
		}
		p.settles[r] = &cs
	}
}

// countSettle counts a settle of r by result (an index of settleResults).
func (p *pluginContext) countSettle(r *rule, result int) {
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
// one, else actual − estimate.
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
	actual, _, err := pipeline.ParseResponseCost(ps.values, r.MinCost)
	if err != nil {
		p.countSettle(r, 1)
		p.logSettle("rule %q: invalid %s (%v); nothing settled, the estimate stands", r.Name, r.ResponseCostHeader, err)
		return
	}
	delta := actual - ps.estimate
	if delta == 0 {
		p.countSettle(r, 0)
		return
	}
	if r.Global != nil {
		err = h.sendSettle(r, ps.key, delta)
	} else {
		_, err = p.store.settle(r, ps.record, clock(), delta, p.ds[:len(r.Limits)])
	}
	if err != nil {
		p.countSettle(r, 2)
		p.logSettle("rule %q: settling %d: %v; the estimate stands", r.Name, delta, err)
		return
	}
	p.countSettle(r, 0)
}

// logSettle logs a settle's problem, at most one line a second with the
// failures'.
func (p *pluginContext) logSettle(format string, args ...any) {
	if now := clock(); now-p.loggedAt >= 1_000_000 || now < p.loggedAt {
		p.loggedAt = now
		proxywasm.LogWarnf("rl-filter: "+format, args...)
	}
}

// sendSettle sends a global rule's settle to rl-wasm-host (its settle
// path), without waiting: the callout belongs to the plugin, so it
// outlives the request, and its answer is only logged when it is not a
// settle (the request may be gone by then).
func (h *httpContext) sendSettle(r *rule, key string, delta int64) error {
	g := r.Global
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
	_, err := proxywasm.DispatchHttpCall(g.Cluster, hs, settleBody(r, key, delta), nil, g.TimeoutMS, func(numHeaders, _, _ int) {
		status := ""
		if numHeaders > 0 {
			hs, _ := proxywasm.GetHttpCallResponseHeaders()
			for _, kv := range hs {
				if kv[0] == ":status" {
					status = kv[1]
				}
			}
		}
		if status != "200" { // counted as sent: the answer rarely comes while the request lives
			h.p.logSettle("rule %q: cluster %q answered the settle of %d with status %q", r.Name, g.Cluster, delta, status)
		}
	})
	if err != nil {
		return fmt.Errorf("calling cluster %q: %w: %w", g.Cluster, rlstore.ErrUnavailable, err)
	}
	return nil
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
