package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/outage"
	"github.com/rlcore/rl/internal/request/pipeline"
	rlstore "github.com/rlcore/rl/store"
)

// clock returns µs since the Unix epoch: the host's clock
// (wasi clock_time_get). Tests replace it.
var clock = func() int64 { return time.Now().UnixMicro() }

// vmContext is the VM: one per Envoy worker thread (and one on the main
// thread), all sharing one shared-data map per vm_id.
type vmContext struct {
	types.DefaultVMContext
}

// NewPluginContext implements types.VMContext.
func (*vmContext) NewPluginContext(uint32) types.PluginContext {
	return &pluginContext{sd: newSharedData()}
}

// newSharedData returns the host's shared data; tests replace it.
var newSharedData = func() sharedData { return hostSharedData{} }

// pluginContext is one configured filter in one VM.
type pluginContext struct {
	types.DefaultPluginContext
	sd    sharedData
	cfg   *config
	store *store
	ds    []core.Decision
	// noRoom counts the requests whose key found no room in shared data
	// (metric noRoomMetric); noRoomLogged holds the rules whose first
	// such request this VM logged: the others are counted, not logged.
	noRoom       proxywasm.MetricCounter
	noRoomLogged map[*rule]bool
	// outage is this VM's record of its decisions for the one failure
	// rule (outage.Classify): only an outage (shared data failing, the
	// global service unreachable) is answered by fail_open.
	outage outage.Detector
	// loggedAt is when a failure was last logged (µs): at most one a
	// second.
	loggedAt int64
	// shadowDenied are, for each rule, a counter per shadow limit (nil
	// for an enforced one) of the requests admitted that it would have
	// denied (shadowMetric).
	shadowDenied map[*rule][]proxywasm.MetricCounter
	// settles are, for each rule with response_cost_header, its settle
	// counters by result (settleMetric, pipeline.SettleResults).
	settles map[*rule]*[pipeline.NumSettleResults]proxywasm.MetricCounter
	// outbox holds global settles for the plugin to send at its next
	// tick, which runs (ticking) only while it holds any (queueSettle).
	outbox  []globalSettle
	ticking bool
	// ticks counts the ticks while settles wait (a settle's due time).
	ticks uint64
}

// shadowMetric is the name of the counter of a rule's shadow limit: the
// requests the rule admitted that the shadow limit would have denied.
// Envoy shows it as wasmcustom.rl_filter.shadow_denied.<rule>.<limit>.
func shadowMetric(rule, limit string) string { return "rl_filter.shadow_denied." + rule + "." + limit }

// defineShadowMetrics defines the counters of every shadow limit of cfg.
func (p *pluginContext) defineShadowMetrics(cfg *config) {
	p.shadowDenied = map[*rule][]proxywasm.MetricCounter{}
	for _, r := range cfg.Rules {
		for i, shadow := range r.Shadow {
			if !shadow {
				continue
			}
			if p.shadowDenied[r] == nil {
				p.shadowDenied[r] = make([]proxywasm.MetricCounter, len(r.Shadow))
			}
			p.shadowDenied[r][i] = proxywasm.DefineCounterMetric(shadowMetric(r.Name, r.LimitNames[i]))
		}
	}
}

// countShadow counts the would-denies of r's shadow limits in v.
func (p *pluginContext) countShadow(r *rule, v *pipeline.Verdict) {
	cs := p.shadowDenied[r]
	for i := range cs {
		if r.Shadow[i] && i < len(v.Limits) && v.WouldDeny(i) {
			cs[i].Increment(1)
		}
	}
}

// noRoomMetric is the counter of requests refused (or, fail_open, let
// through) because their rule's shared data had no room for a new key.
// Envoy shows it as wasmcustom.rl_filter.no_room.
const noRoomMetric = "rl_filter.no_room"

// OnPluginStart reads and validates the plugin configuration; an invalid
// one is logged (every problem, by rule and field) and fails the start, so
// Envoy rejects the configuration.
func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		proxywasm.LogCriticalf("rl-filter: reading the plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	cfg, err := parseConfig(data)
	if err != nil {
		proxywasm.LogCritical(err.Error())
		return types.OnPluginStartStatusFailed
	}
	st := newStore(cfg, p.sd)
	if err := st.createSlots(); err != nil {
		proxywasm.LogCriticalf("rl-filter: creating shared-data slots: %v", err)
		return types.OnPluginStartStatusFailed
	}
	p.cfg, p.store, p.ds = cfg, st, make([]core.Decision, maxLimits)
	p.noRoom, p.noRoomLogged = proxywasm.DefineCounterMetric(noRoomMetric), map[*rule]bool{}
	p.defineShadowMetrics(cfg)
	p.defineSettleMetrics(cfg)
	proxywasm.LogInfof("rl-filter: %d rules, %d slots × %d keys per rule", len(cfg.Rules), cfg.Slots, cfg.KeysPerSlot)
	return types.OnPluginStartStatusOK
}

// NewHttpContext implements types.PluginContext.
func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	return &httpContext{p: p}
}

// httpContext is one request.
type httpContext struct {
	types.DefaultHttpContext
	p *pluginContext
	// headers are the rate-limit fields to add to the upstream's response
	// (nil: none, the request was not decided or was answered locally).
	headers [][2]string
	// problem: the filter's 429 or 503 to this request is RFC 9457
	// problem details (the configuration's problem_details and the
	// request's Accept field), else plain text.
	problem bool
	// settle, if set, settles the cost the response reports (settle.go).
	settle *pendingSettle
}

func sourceAddress() string {
	b, err := proxywasm.GetProperty([]string{"source", "address"})
	if err != nil {
		return ""
	}
	return string(b)
}

// OnHttpRequestHeaders matches, keys and decides the request.
func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	cfg := h.p.cfg
	if cfg == nil {
		return types.ActionContinue
	}
	hs, err := proxywasm.GetHttpRequestHeaders()
	if err != nil {
		proxywasm.LogErrorf("rl-filter: reading the request headers: %v", err)
		return h.reply(500, nil, "Rate limiter error\n")
	}
	req := newRequest(hs, sourceAddress())
	h.problem = cfg.ProblemDetails.Wants(req.Header.Values("accept"))
	r, err := cfg.match(req)
	if err != nil {
		return h.reply(400, nil, "Bad request: "+err.Error()+"\n")
	}
	if err := forward(hs, req, r); err != nil {
		proxywasm.LogErrorf("rl-filter: rewriting the request headers: %v", err)
		return h.reply(500, nil, "Rate limiter error\n")
	}
	if r == nil {
		return types.ActionContinue
	}
	key, err := r.key(req)
	if err != nil {
		return h.reply(400, nil, "Bad request: "+err.Error()+"\n")
	}
	cost, err := r.cost(req)
	if err != nil {
		return h.reply(400, nil, "Bad request: "+err.Error()+"\n")
	}
	r, record := r.forKey(key) // the rule, or its override for the key
	if r.Global != nil {
		if p := globalKeyProblem(r, key); p != "" {
			return h.reply(400, nil, "Bad request: invalid rate-limit key ("+r.KeyBy.String()+"): "+p+"\n")
		}
		return h.askGlobal(r, key, cost)
	}
	h.expectSettle(r, key, record, cost) // if admitted
	ds := h.p.ds[:len(r.Limits)]
	begun := h.p.outage.Begin()
	idx, err := h.p.store.take(r, record, clock(), cost, ds)
	if err != nil {
		return h.failed(r, begun, err)
	}
	h.p.outage.Success()
	if h.settle != nil {
		h.settle.charged(r, ds)
	}
	v := pipeline.FromCore(r.LimitNames, r.Limits, r.Shadow, ds, idx)
	return h.decided(r, key, &v)
}

// decided continues an admitted request (its response gets the rate-limit
// fields: every limit of the rule, with the rule's choices, and its cost
// is settled if the rule says so) or answers a denied one 429.
func (h *httpContext) decided(r *rule, key string, v *pipeline.Verdict) types.Action {
	h.p.countShadow(r, v)
	f := r.fields
	if r.PartitionKey {
		f.PartitionKey = pipeline.PartitionKey(h.p.cfg.PartitionKeySecret, r.Name, key)
	}
	hs := pipeline.AppendFields(nil, v, &f)
	if v.Allowed {
		h.headers = hs
		return types.ActionContinue
	}
	h.settle = nil // nothing taken
	if h.problem {
		return h.replyProblem(hs, pipeline.QuotaExceeded(v))
	}
	return h.reply(429, hs, pipeline.DeniedBody(v.Decider().Never))
}

// failed answers a request whose decision failed (begun at begun) by the
// one failure rule (outage.Classify): an outage by the rule's fail policy,
// anything else refused (load 503 with Retry-After, never admitted). A key
// without room in shared data is load, counted in noRoomMetric and logged
// only the first time for its rule: a flood of new keys must not flood the
// log. Other failures are logged at most once a second.
func (h *httpContext) failed(r *rule, begun outage.Token, err error) types.Action {
	p := h.p
	class := p.outage.Classify(begun, err)
	open := engine.OutcomeOf(class, r.FailOpen) == engine.FailOpen // the one failure rule's outcome
	verb := "refusing"
	if open {
		verb = "failing open"
	}
	if errors.Is(err, errFull) {
		p.noRoom.Increment(1)
		if !p.noRoomLogged[r.root()] {
			p.noRoomLogged[r.root()] = true
			proxywasm.LogWarnf("rl-filter: rule %q: no decision (%v, %v); %s; further requests of this rule without room are counted in metric %s, not logged",
				r.Name, class, err, verb, noRoomMetric)
		}
	} else if now := clock(); now-p.loggedAt >= 1_000_000 || now < p.loggedAt {
		p.loggedAt = now
		proxywasm.LogWarnf("rl-filter: rule %q: no decision (%v, %v); %s", r.Name, class, err, verb)
	}
	h.settle = nil // nothing taken
	if open {
		h.expectNoSettle(r)
		return types.ActionContinue
	}
	status, body := class.Refusal()
	var hs [][2]string
	if status == 503 {
		hs = [][2]string{{"retry-after", "1"}}
		if h.problem {
			return h.replyProblem(hs, pipeline.ReducedCapacity(body))
		}
	}
	return h.reply(uint32(status), hs, body+"\n")
}

// replyProblem answers the request locally with problem details.
func (h *httpContext) replyProblem(hs [][2]string, p pipeline.Problem) types.Action {
	hs = append(hs, [2]string{"content-type", pipeline.ProblemContentType}, [2]string{"x-content-type-options", "nosniff"})
	h.headers = nil
	if err := proxywasm.SendHttpResponse(uint32(p.Status), hs, p.JSON(), -1); err != nil {
		proxywasm.LogErrorf("rl-filter: sending the local response: %v", err)
	}
	return types.ActionPause
}

// reply answers the request locally.
func (h *httpContext) reply(status uint32, hs [][2]string, body string) types.Action {
	hs = append(hs, [2]string{"content-type", "text/plain; charset=utf-8"}, [2]string{"x-content-type-options", "nosniff"})
	h.headers = nil
	if err := proxywasm.SendHttpResponse(status, hs, []byte(body), -1); err != nil {
		proxywasm.LogErrorf("rl-filter: sending the local response: %v", err)
	}
	return types.ActionPause
}

// OnHttpResponseHeaders adds the rate-limit fields of an admitted request
// to the upstream's response: the upstream's own X-RateLimit-* fields are
// replaced (they would contradict ours), its RateLimit and RateLimit-Policy
// fields kept beside ours, one list as draft-11 allows. For a rule with
// response_cost_header it takes the field out (settle.go), settling at
// once when the headers end the response.
func (h *httpContext) OnHttpResponseHeaders(_ int, endOfStream bool) types.Action {
	if ps := h.settle; ps != nil && !ps.done {
		ps.collect(false)
		if endOfStream {
			h.finishSettle()
		}
	}
	for _, kv := range h.headers {
		v := kv[1]
		if kv[0] == "RateLimit" || kv[0] == "RateLimit-Policy" {
			// One field, the upstream's members first: the same list on
			// every host, however it would have joined two fields.
			if up, err := proxywasm.GetHttpResponseHeader(kv[0]); err == nil && up != "" {
				v = up + ", " + v
			}
		}
		if err := proxywasm.ReplaceHttpResponseHeader(kv[0], v); err != nil {
			proxywasm.LogErrorf("rl-filter: setting %s: %v", kv[0], err)
		}
	}
	h.headers = nil
	return types.ActionContinue
}

// hostSharedData is the host's shared data.
type hostSharedData struct{}

func (hostSharedData) get(key string) ([]byte, uint32, error) {
	v, cas, err := proxywasm.GetSharedData(key)
	switch {
	case errors.Is(err, types.ErrorStatusNotFound):
		return nil, 0, errNotFound
	case err != nil:
		return nil, 0, fmt.Errorf("%w: get_shared_data: %w", rlstore.ErrUnavailable, err)
	}
	return v, cas, nil
}

func (hostSharedData) set(key string, value []byte, cas uint32) error {
	err := proxywasm.SetSharedData(key, value, cas)
	switch {
	case errors.Is(err, types.ErrorStatusCasMismatch):
		return errCASMismatch
	case err != nil:
		return fmt.Errorf("%w: set_shared_data: %w", rlstore.ErrUnavailable, err)
	}
	return nil
}
