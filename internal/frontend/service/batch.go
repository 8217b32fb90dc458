package service

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/httpflow"
	"github.com/rlcore/rl/internal/request/outage"
)

// BatchRequest is the body of POST /v1/ratelimit/batch.
//
// Several limits on ONE key are all or nothing exactly: put them in one rule
// (or one item's inline limits), and the store decides them in one atomic
// step. Across SEVERAL keys the store has no atomic step, so an atomic batch
// (the default) works in two phases: it peeks every item, and only if all
// would pass does it take them one by one. If a concurrent request drains an
// item between its peek and its take (a window of one store round trip),
// that take is denied, the batch stops there and answers 429 with
// "partial": true, and the items taken before it stay taken. The race can
// only under-admit (quota spent for a batch that was then refused), never
// over-admit: every take is itself exact.
//
// With "atomic": false each item is decided on its own.
type BatchRequest struct {
	// Atomic: all items or none (default true); see above.
	Atomic *bool `json:"atomic,omitempty"`
	// Peek decides every item without taking anything.
	Peek bool `json:"peek,omitempty"`
	// Items to decide, 1 to Options.MaxBatch; an atomic batch may not
	// hold one key twice under the same rule (combine their costs).
	Items []DecisionRequest `json:"items"`
}

// BatchJSON is the response of a batch: 200 when every item passed, 429
// when the batch (or, non-atomic, any item) was denied, 503 when the store
// failed for an item whose rule fails closed. Its headers describe the
// deciding item's deciding limit: the denied item with the latest retry, or
// when all passed the item with the fewest remaining.
type BatchJSON struct {
	Allowed bool `json:"allowed"`
	Atomic  bool `json:"atomic"`
	Peek    bool `json:"peek"`
	// Partial reports an atomic batch that took some items and then was
	// denied or failed (the race described on BatchRequest).
	Partial bool `json:"partial"`
	// Deciding is the index of the item the headers describe.
	Deciding int            `json:"deciding"`
	Results  []DecisionJSON `json:"results"`
}

type batchItem struct {
	t    target
	key  string
	cost int64
	res  rl.Result
	out  engine.Outcome
	err  error
	// taken: the cost was consumed.
	taken bool
	each  []rl.LimitResult
}

func (s *Service) apiBatch(w http.ResponseWriter, r *http.Request) {
	var req BatchRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	if len(req.Items) == 0 || len(req.Items) > s.maxBatch {
		s.apiError(w, http.StatusBadRequest, "invalid_batch", fmt.Sprintf("items: %d items, want 1 to %d", len(req.Items), s.maxBatch))
		return
	}
	atomic := req.Atomic == nil || *req.Atomic
	rs := s.rules.Load()
	items := make([]batchItem, len(req.Items))
	type nsKey struct{ ns, key string }
	seen := make(map[nsKey]int, len(items))
	for i := range req.Items {
		op := opCheck
		if req.Peek {
			op = opPeek
		}
		if req.Items[i].Explain {
			s.apiError(w, http.StatusBadRequest, "invalid_batch", fmt.Sprintf("items[%d].explain: explain is for check and peek, not batches", i))
			return
		}
		t, cost, err := s.resolve(rs, &req.Items[i], fmt.Sprintf("items[%d].", i), op, roleOf(r))
		if err != nil {
			s.clientError(w, err)
			return
		}
		k := nsKey{t.er.Name, req.Items[i].Key}
		if j, dup := seen[k]; dup && atomic && !req.Peek {
			s.apiError(w, http.StatusBadRequest, "invalid_batch",
				fmt.Sprintf("items[%d]: same rule and key as items[%d]; an atomic batch decides each key once (combine their costs)", i, j))
			return
		}
		seen[k] = i
		items[i] = batchItem{t: t, key: req.Items[i].Key, cost: cost, each: make([]rl.LimitResult, t.limits())}
	}

	ctx := r.Context()
	start := time.Now()
	var partial bool
	var err error
	switch {
	case req.Peek:
		err = s.decideEach(ctx, items, true)
	case !atomic || len(items) == 1:
		err = s.decideEach(ctx, items, false)
	default:
		partial, err = s.decideAtomic(ctx, items)
	}
	s.metrics.apiLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		s.clientError(w, err)
		return
	}

	resp := BatchJSON{Allowed: true, Atomic: atomic, Peek: req.Peek, Partial: partial, Results: make([]DecisionJSON, len(items))}
	failed, deciding := 0, -1 // failed: the status of the first item refused for a failure
	for i := range items {
		it := &items[i]
		d := decisionJSON(it.t.er.Name, it.key, it.cost, req.Peek, it.res, it.out, it.each)
		d.Override = it.t.overrideLabel()
		d.Taken = it.taken
		if !d.Taken {
			d.Uncharged = nil // nothing taken (an atomic batch refused): nothing to settle
		}
		switch it.out {
		case engine.FailClosed, engine.Overloaded, engine.Error:
			// By the item's class (outage.Class, from the engine: Service.decide).
			status, body := outage.ClassOf(it.err).Refusal()
			if failed == 0 {
				failed = status
			}
			resp.Allowed = false
			d.Allowed = false
			d.Error = strings.ToLower(body[:1]) + body[1:] + ": " + it.err.Error()
		case engine.Denied:
			resp.Allowed = false
			if deciding < 0 || items[deciding].out != engine.Denied || laterRetry(&it.res, &items[deciding].res) {
				deciding = i
			}
		case engine.Allowed:
			if deciding < 0 || items[deciding].out == engine.FailOpen ||
				(items[deciding].out == engine.Allowed && it.res.Remaining < items[deciding].res.Remaining) {
				deciding = i
			}
		case engine.FailOpen:
			if deciding < 0 {
				deciding = i
			}
		case 0: // not decided: the atomic batch stopped before this item
			resp.Allowed = false
			d.Allowed = false
			d.Error = "not decided: the batch stopped at an earlier item"
		}
		resp.Results[i] = d
	}
	// Metrics count what happened to each item: in an atomic batch that was
	// refused, an item that would have passed but was not taken counts as
	// denied.
	for i := range items {
		it := &items[i]
		out := it.out
		if atomic && !req.Peek && !resp.Allowed && out == engine.Allowed && !it.taken {
			out = engine.Denied
		}
		if out == 0 {
			out = engine.Denied
		}
		it.t.m.record(out, &it.res)
	}
	status := http.StatusOK
	switch {
	case failed != 0:
		status = failed
	case !resp.Allowed:
		status = http.StatusTooManyRequests
	}
	if deciding < 0 {
		deciding = 0
	}
	resp.Deciding = deciding
	if it := &items[deciding]; it.out == engine.Allowed || it.out == engine.Denied {
		httpflow.SetFields(w.Header(), it.key, it.res, it.each, it.t.fields)
	}
	writeJSON(w, status, resp)
}

// laterRetry reports whether a's retry is later than b's (Never latest).
func laterRetry(a, b *rl.Result) bool {
	if b.Never {
		return false
	}
	return a.Never || a.RetryAfter > b.RetryAfter
}

// decideEach decides every item on its own.
func (s *Service) decideEach(ctx context.Context, items []batchItem, peek bool) error {
	for i := range items {
		it := &items[i]
		it.res, it.out, it.err = s.decide(ctx, &it.t, it.key, it.cost, peek, it.each)
		if it.out == 0 {
			return it.err
		}
		it.taken = !peek && it.out == engine.Allowed
	}
	return nil
}

// decideAtomic peeks every item, then takes them all if all passed. It
// reports partial when it took some items and then stopped.
func (s *Service) decideAtomic(ctx context.Context, items []batchItem) (partial bool, err error) {
	denied := false
	for i := range items {
		it := &items[i]
		it.res, it.out, it.err = s.decide(ctx, &it.t, it.key, it.cost, true, it.each)
		switch it.out {
		case 0:
			return false, it.err
		case engine.FailClosed, engine.Overloaded, engine.Error:
			return false, nil // answered 503; nothing taken
		case engine.Denied:
			denied = true
		}
	}
	if denied {
		// Items that would have passed are reported as such, not taken.
		return false, nil
	}
	taken := 0
	for i := range items {
		it := &items[i]
		if it.out == engine.FailOpen {
			continue // the store failed on peek; admitted without a take
		}
		it.res, it.out, it.err = s.decide(ctx, &it.t, it.key, it.cost, false, it.each)
		switch it.out {
		case 0:
			return taken > 0, it.err
		case engine.Allowed:
			taken++
			it.taken = true
			continue
		case engine.FailOpen:
			continue
		}
		// Denied (a concurrent request drained it since the peek) or the
		// store failed closed: stop; later items are not decided.
		for j := i + 1; j < len(items); j++ {
			items[j].out = 0
		}
		return taken > 0, nil
	}
	return false, nil
}
