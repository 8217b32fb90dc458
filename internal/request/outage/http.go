package outage

import (
	"context"
	"fmt"

	"github.com/rlcore/rl/store"
)

// OverloadedField is the response header field Envoy sets on a reply it
// makes itself for its own load: a circuit breaker of the upstream cluster
// overflowing (max_requests, max_pending_requests), a pending-request
// queue full. Its 503 carries no body of ours.
const OverloadedField = "x-envoy-overloaded"

// ClassifyHTTP is the one mapping from an HTTP answer that carries no
// decision to a failure, for a front end that asks rl-wasm-host's decision
// API over HTTP (the proxy-wasm filter's global mode, through an Envoy
// cluster). status is the answer's status (0 if unreadable), overloaded
// whether it carries OverloadedField, code the "code" of rl-wasm-host's
// JSON error body ("" for a body that is not one). Classify gives the
// returned error's class:
//
//   - OverloadedField, whatever the status, is Load: Envoy refusing for
//     its own load (a flood through the filter that overflows the
//     cluster's circuit breaker must never be admitted by fail_open);
//   - rl-wasm-host's own refusals keep their meaning: "overloaded" is
//     Load, "internal" Internal, any other code (its store failing on a
//     rule it does not open, a request it refuses) Failed;
//   - without a code, 429 is Load; 504 a timeout (store.ErrUnavailable and
//     context.DeadlineExceeded: an Outage only as the Detector counts
//     them); 502 and 503 the service unreachable (Envoy found no healthy
//     host or could not connect): store.ErrUnavailable, an Outage;
//   - anything else is Failed.
func ClassifyHTTP(status int, overloaded bool, code string) error {
	err := fmt.Errorf("answered status %d", status)
	if code != "" {
		if len(code) > 32 {
			code = code[:32] + "..."
		}
		err = fmt.Errorf("%w (%q)", err, code)
	}
	switch {
	case overloaded:
		return fmt.Errorf("%w with %s: %w", err, OverloadedField, store.ErrBusy)
	case code == "overloaded":
		return fmt.Errorf("%w: %w", err, store.ErrBusy)
	case code == "internal":
		return Classified(Internal, err)
	case code != "":
		return Classified(Failed, err)
	case status == 429:
		return fmt.Errorf("%w: %w", err, store.ErrBusy)
	case status == 504:
		return fmt.Errorf("%w: %w: %w", err, store.ErrUnavailable, context.DeadlineExceeded)
	case status == 502, status == 503:
		return fmt.Errorf("%w: %w", err, store.ErrUnavailable)
	}
	return Classified(Failed, err)
}
