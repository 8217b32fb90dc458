package service

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"

	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/httpflow"
	"github.com/rlcore/rl/internal/request/pipeline"
)

// serveProxy is the reverse proxy filter: it matches the request to the
// most specific rule and hands it to the rule's middleware (ruleProxy),
// which keys, decides and forwards it or answers it. Requests no rule
// matches are forwarded unlimited.
func (s *Service) serveProxy(w http.ResponseWriter, r *http.Request) {
	rs := s.rules.Load()
	if rs.upstream == nil {
		http.Error(w, "Not found: no upstream configured (set \"upstream\" in the configuration)", http.StatusNotFound)
		return
	}
	if s.proxyBody > 0 && r.ContentLength > s.proxyBody {
		s.metrics.rejected.WithLabelValues("body_too_large").Inc()
		http.Error(w, "Request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	esc := r.URL.EscapedPath()
	t, path, err := pipeline.Prepare(httpflow.Request(r, esc))
	if err != nil {
		reason := "invalid_path"
		if !pipeline.IsPathError(err) {
			reason = "invalid_host"
		}
		s.metrics.rejected.WithLabelValues(reason).Inc()
		http.Error(w, "Bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	// From here on r carries the canonical path: the one matched is the
	// one forwarded.
	if path != esc {
		r = withPath(r, path)
	}
	if ru := rs.match(&t); ru != nil {
		ru.proxy.ServeHTTP(w, r)
		return
	}
	s.forward(rs.upstream, w, r)
}

// ruleProxy is the middleware (package httpflow, httplimit's flow) that
// decides the requests matched to ru and forwards the ones it serves to
// rs's upstream. Built once per rule set, it answers by the service's
// rules: the engine runs the rule (engine.Engine.Run: its key and cost,
// a bad one 400 saying why, the key's override, the per-key bound, the
// outage detector and the failure rule: fail_open only on an outage; load
// is 503 with Retry-After, never admitted), shaping with shape: true, and
// the rule's metrics (account, OnDecision).
func (s *Service) ruleProxy(rs *ruleSet, ru *rule) (http.Handler, error) {
	keyBy := ru.spec.KeyBy
	mw, err := httpflow.New(httpflow.Config{
		Engine: s.eng,
		Rule:   &ru.eng,
		Wait:   ru.spec.Shape,
		OnResult: func(_ *http.Request, res engine.Result) {
			t := ru.target()
			if res.Override >= 0 {
				t.use(ru.overrides[res.Override]) // its counters
			}
			s.account(&t, &res)
		},
		Fields:   ru.fields,
		Problems: httpflow.Problems(rs.cfg.ProblemDetails),
		// The upstream's response_cost_header: the actual cost (at
		// least min_cost), settled against the cost taken, the field
		// kept from the client.
		ResponseCost: httpflow.ResponseCost{Field: ru.spec.ResponseCostHeader, Min: ru.spec.MinCost},
		OnSettle: func(r *http.Request, st httpflow.Settlement) {
			t := ru.target()
			s.settled(&t, st.Err)
		},
		OnDecision: func(r *http.Request, d httpflow.Decision) {
			switch d.Outcome {
			case engine.MissingKey, engine.InvalidCost:
				s.metrics.rejected.WithLabelValues(d.Outcome.String()).Inc()
				return
			case engine.InvalidKey:
				s.metrics.rejected.WithLabelValues(d.Outcome.String()).Inc()
			case engine.Allowed:
				ru.m.allowed.Inc()
			case engine.Denied:
				m := ru.m
				if ov := ru.overrideFor(d.Key); ov != nil {
					m = ov.m // d.Result.Index is among the override's limits
				}
				m.record(engine.Denied, &d.Result)
			case engine.FailOpen:
				ru.m.failOpen.Inc()
			case engine.FailClosed, engine.Overloaded, engine.Error:
				ru.m.failClosed.Inc()
			}
			// OutcomeUnkeyed is not reached: the service never sets
			// AllowMissingKey (a missing key is 400, missing_key).
			s.metrics.proxyLatency.Observe(d.Latency.Seconds())
		},
		Refused: func(w http.ResponseWriter, r *http.Request, d httpflow.Decision) {
			switch d.Outcome {
			case engine.MissingKey:
				msg := "Missing rate-limit key: " + keyBy.Hint()
				var ke *pipeline.KeyError
				if errors.As(d.Err, &ke) {
					msg = "Missing rate-limit key: " + ke.Reason
				}
				http.Error(w, msg, http.StatusBadRequest)
			case engine.InvalidKey:
				http.Error(w, "Invalid rate-limit key ("+keyBy.String()+"): "+cmp.Or(httpflow.KeyReason(d.Err), "refused"), http.StatusBadRequest)
			case engine.InvalidCost:
				msg := "Invalid rate-limit cost"
				var ec *pipeline.CostError
				if errors.As(d.Err, &ec) {
					msg += ": " + ec.Error()
				}
				http.Error(w, msg, http.StatusBadRequest)
			default:
				httpflow.WriteRefusedFor(w, r, d, httpflow.Problems(rs.cfg.ProblemDetails))
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A decided request carries our rate-limit fields, which the
		// upstream's own X-RateLimit-* would contradict; one served
		// because the store failed (fail_open) carries none, so the
		// upstream's are kept.
		up := rs.decided
		if _, ours := w.Header()["X-Ratelimit-Limit"]; !ours {
			up = rs.upstream
		}
		if f := ru.spec.ResponseCostHeader; f != "" {
			// The upstream reports the actual cost in this field: the
			// client's own must not reach it (pipeline.DropsField,
			// applied by reverseProxy).
			r = r.WithContext(context.WithValue(r.Context(), responseCostKey{}, f))
		}
		s.forward(up, w, r)
	})), nil
}

// responseCostKey carries, in a proxied request's context, the
// response_cost_header of the rule that matched it, a field the request
// is forwarded without (pipeline.DropsField).
type responseCostKey struct{}

func (s *Service) forward(upstream http.Handler, w http.ResponseWriter, r *http.Request) {
	if s.proxyBody > 0 && r.Body != nil {
		r2 := *r // never edit the caller's request
		r2.Body = http.MaxBytesReader(w, r.Body, s.proxyBody)
		r = &r2
	}
	upstream.ServeHTTP(w, r)
}

// withPath returns r with its URL's path set to p, a canonical escaped
// path; r itself is never edited.
func withPath(r *http.Request, p string) *http.Request {
	dec, err := url.PathUnescape(p)
	if err != nil { // not reached: canonicalPath checked every escape
		dec = p
	}
	r2 := *r
	u := *r.URL
	u.Path, u.RawPath = dec, p
	r2.URL = &u
	return &r2
}

// demoUpstream is the built-in upstream of "upstream: demo": it answers
// every request with a small JSON echo, so the sample configuration runs
// with nothing else.
func demoUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{
			"upstream": "demo",
			"method":   r.Method,
			"path":     r.URL.Path,
			"message":  "hello from the built-in demo upstream",
		})
	})
}
