package httplimit

import (
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/httpflow"
)

// ResponseCost reads the actual cost of an admitted request from its
// response (Config.ResponseCost), for costs known only once the handler
// has run: the tokens a model generated, the bytes or rows sent. The
// request is charged its estimate when it arrives (Config.Cost); once the
// handler has returned (or panicked after reporting the cost), the
// middleware settles actual − estimate on the same key and policy
// (rl.Request.Settle): a positive difference may put the key in debt,
// denying its next requests until it is paid off, a negative one
// refunds.
type ResponseCost struct {
	// Field names the response header field carrying the actual cost:
	// set as a header before the response is written, or as a trailer
	// after the body (declared in the Trailer field, or written with
	// http.TrailerPrefix), as one run of decimal digits (a cost above
	// 2^40 settles as 2^40). The field is removed from the response the
	// client receives: it is the handler's message to the middleware. ""
	// settles nothing.
	Field string
	// Min is the least a request costs: an actual cost below it settles
	// as Min, so a refund is at most the estimate less Min. Default 0.
	Min int64
}

// Settlement describes the settle of one admitted request whose response
// carried the ResponseCost field (Config.OnSettle).
type Settlement struct {
	// Key is the request's key.
	Key string
	// Estimate is the cost taken when the request was admitted, Actual
	// the cost its response reported as settled: at least
	// ResponseCost.Min, at most 2^40 (pipeline.SettleDelta); 0 when the
	// field was invalid. Actual − Estimate was settled.
	Estimate, Actual int64
	// Result describes the key after the correction (the Limiter's
	// settle result: Allowed, its Remaining, ResetAfter and NextAfter);
	// zero when no store call was made: Err is set, or Actual equals
	// Estimate.
	Result rl.Result
	// Err is why nothing was settled: an invalid field (matching
	// ErrResponseCost), a handler that panicked before its response
	// reported the cost (ErrAborted), or the Limiter's failure
	// (rl.ErrStore, ...).
	Err error
	// Latency is the settle's store call, 0 without one.
	Latency time.Duration
}

// ErrResponseCost is matched by the error of a response whose
// ResponseCost field is not one run of decimal digits (given twice, as a
// header and a trailer; empty; signed; a fraction): nothing is settled,
// and the estimate stands.
var ErrResponseCost = httpflow.ErrResponseCost

// ErrAborted is matched by the error of a settle that could not run: the
// handler did not return (it panicked, or called runtime.Goexit) before
// its response reported the actual cost. httputil.ReverseProxy panics so,
// with http.ErrAbortHandler, when the client goes away mid-response. The
// estimate stands; OnError and OnSettle hear of it, so that a client
// hanging up before the cost is known shows.
var ErrAborted = httpflow.ErrAborted
