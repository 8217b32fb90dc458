package httpflow

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/outage"
	"github.com/rlcore/rl/internal/request/pipeline"
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
var ErrResponseCost = errors.New("httplimit: invalid response cost")

// ErrAborted is matched by the error of a settle that could not run: the
// handler did not return (it panicked, or called runtime.Goexit) before
// its response reported the actual cost. httputil.ReverseProxy panics so,
// with http.ErrAbortHandler, when the client goes away mid-response. The
// estimate stands; OnError and OnSettle hear of it, so that a client
// hanging up before the cost is known shows.
var ErrAborted = errors.New("httplimit: the handler did not return before its response reported the actual cost; the estimate stands")

// serveAndSettle serves an admitted request through a writer that keeps
// the ResponseCost field from the client, then settles the difference
// between the cost its response reports and req.Cost, taken for it.
//
// The settle runs whenever the actual cost is known, whatever happens
// after: when the handler returns, and when it panics (a reverse proxy
// whose client went away: http.ErrAbortHandler) once the field was
// written, or set in the header map. The panic is not recovered: the
// settle runs as it unwinds, then the panic goes on as it was, with its
// value and stack, to net/http. A handler that panics before reporting
// the cost is reported as ErrAborted.
//
// The settle never holds the response: when the handler returns, the
// response is complete but for what net/http writes after it (buffered
// bytes, the last chunk, the trailers), so the store call runs in a
// goroutine of its own, after the handler, with the request's context
// values but not its cancellation (a client gone after being served, or
// while being served, has still cost what it cost). A request that
// arrives before the settle lands is decided without it. An invalid field
// is reported at once, without a store call. The correction is
// pipeline.SettleDelta's, the rule every front end settles by. It is
// settled under res.Policy.Charged, the limits the take charged: a shadow
// limit's would-deny is not corrected for units it never took (res.Policy
// is the key's, or the limiter's default; nil when neither is known, and
// then the limiter's policy is settled whole). The settle is the engine's
// (engine.Run, engine.GateSettle: bounded by the admission it follows).
func (h *handler) serveAndSettle(w http.ResponseWriter, r *http.Request, res *engine.Result) {
	cw := &costWriter{ResponseWriter: w, field: textproto.CanonicalMIMEHeaderKey(h.cfg.ResponseCost.Field)}
	returned := false
	defer func() {
		if !returned { // panicking (or runtime.Goexit): settle what is known, and let it go on
			h.settle(r, cw, res, false)
		}
	}()
	h.next.ServeHTTP(cw, r)
	returned = true
	h.settle(r, cw, res, true)
}

// settle settles the cost cw's response reported for res, the request's
// admission (see serveAndSettle), the handler having returned or not.
func (h *handler) settle(r *http.Request, cw *costWriter, res *engine.Result, returned bool) {
	values := cw.finish()
	s := Settlement{Key: res.Key, Estimate: res.Cost}
	if len(values) == 0 {
		if !returned {
			s.Err = ErrAborted
			h.reportSettle(r, &s)
		}
		return // the estimate stands
	}
	actual, _, err := pipeline.ParseResponseCost(values)
	if err != nil {
		s.Err = fmt.Errorf("%w: %s: %w", ErrResponseCost, cw.field, err)
		h.reportSettle(r, &s)
		return
	}
	delta := pipeline.SettleDelta(res.Cost, actual, h.cfg.ResponseCost.Min)
	s.Actual = res.Cost + delta
	if delta == 0 {
		h.reportSettle(r, &s)
		return
	}
	in := &engine.Input{Key: res.Key, Cost: delta, Settle: true, Gate: engine.GateSettle}
	if p := res.Policy; p != nil {
		if in.Policy = p.Charged(res.Each); in.Policy == nil {
			h.reportSettle(r, &s) // shadow limits only, each a would-deny: nothing taken
			return
		}
	}
	ctx, key := context.WithoutCancel(r.Context()), res.Key
	go func() {
		start := time.Now()
		sr := h.eng.Run(ctx, h.rule, in)
		s.Latency = time.Since(start)
		if h.cfg.OnResult != nil {
			h.cfg.OnResult(r, sr)
		}
		if err := sr.Err; err != nil {
			if ce, ok := err.(*outage.Error); ok {
				err = ce.Err
			}
			s.Err = fmt.Errorf("httplimit: settling %d for key %q: %w", delta, key, err)
		} else {
			s.Result = sr.Result
		}
		h.reportSettle(r, &s)
	}()
}

// reportSettle tells OnError and OnSettle of s.
func (h *handler) reportSettle(r *http.Request, s *Settlement) {
	if s.Err != nil && h.cfg.OnError != nil {
		h.cfg.OnError(r, s.Err)
	}
	if h.cfg.OnSettle != nil {
		h.cfg.OnSettle(r, *s)
	}
}

// costWriter keeps a response's cost field (field, canonical) from the
// client and collects its values: a header's when the response header is
// written (removed from the header map, and from the Trailer field's
// announcements), a trailer's when the handler has returned (finish).
// Interim (1xx) responses never carry it. It implements Flush (writing
// the header first, as net/http does); other optional interfaces
// (Hijacker, deadlines, full duplex) are reached through Unwrap with
// http.ResponseController.
type costWriter struct {
	http.ResponseWriter
	field  string
	wrote  bool
	values []string
}

func (w *costWriter) WriteHeader(code int) {
	h := w.Header()
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// An interim response is sent from the header map as it is, and
		// the map is kept for the final one: send it without the field,
		// then put the field back.
		vs, ok := h[w.field]
		delete(h, w.field)
		w.ResponseWriter.WriteHeader(code)
		if _, again := h[w.field]; ok && !again {
			h[w.field] = vs
		}
		return
	}
	if !w.wrote {
		w.wrote = true
		w.values = append(w.values, h[w.field]...)
		delete(h, w.field)
		unannounce(h, w.field)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *costWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush writes the header, if it is not written yet, and flushes.
func (w *costWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the writer it wraps, for http.ResponseController.
func (w *costWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish collects and removes the field's values left in the header map
// once the handler has returned: a header the handler set without writing
// anything (net/http writes the header after the handler), a declared
// trailer's, and one written with http.TrailerPrefix. It returns every
// value the response carried.
func (w *costWriter) finish() []string {
	h := w.Header()
	if !w.wrote {
		unannounce(h, w.field)
	}
	w.values = append(w.values, h[w.field]...)
	delete(h, w.field)
	for k, vs := range h {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && strings.EqualFold(name, w.field) {
			w.values = append(w.values, vs...)
			delete(h, k)
		}
	}
	return w.values
}

// unannounce removes field from the trailers the Trailer field of h
// announces (a list, in any case), and the Trailer field if it is left
// empty.
func unannounce(h http.Header, field string) {
	vs, ok := h["Trailer"]
	if !ok {
		return
	}
	var kept []string
	for _, v := range vs {
		var names []string
		for n := range strings.SplitSeq(v, ",") {
			if n = textproto.TrimString(n); n != "" && !strings.EqualFold(n, field) {
				names = append(names, n)
			}
		}
		if len(names) > 0 {
			kept = append(kept, strings.Join(names, ", "))
		}
	}
	if len(kept) == 0 {
		delete(h, "Trailer")
		return
	}
	h["Trailer"] = kept
}
