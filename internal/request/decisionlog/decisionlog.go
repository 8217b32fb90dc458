// Package decisionlog writes the log lines of decisions, for every front
// end that decides in the engine (internal/request/engine): rl-wasm-host's
// proxy, decision API and gRPC rate limit service.
//
// Two logs, each off by default:
//
//   - The denial log (Config.DenialsPerSecond): one line at info level per
//     denial, as nginx logs each rejection: the rule, the limit that
//     denied, the key's digest, the cost and the retry-after. It is
//     rate limited by a token bucket of this module's own (an in-memory
//     rl.Limiter), so a flood of denials cannot fill a disk: the lines
//     beyond the rate are counted, the count reported in the next line
//     ("suppressed") and by Logger.Suppressed (a metric).
//   - The debug log: one line at debug level per decision, whatever its
//     outcome, written when the Logger's slog.Logger is enabled at debug
//     level: what a user debugging a rule needs (the rule, the key's
//     digest, the cost, the outcome, the limit that decided, what remains,
//     the store's time). When debug is off it costs an Enabled check and
//     allocates nothing.
//
// A line never holds a key, which may be an API key: it holds the key's
// digest (redact.Digest).
package decisionlog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/util/redact"
)

// MaxDenialsPerSecond bounds Config.DenialsPerSecond.
const MaxDenialsPerSecond = 1_000_000

// Config configures a Logger. Zero fields take the documented defaults.
type Config struct {
	// Logger receives the lines. Default slog.Default().
	Logger *slog.Logger
	// DenialsPerSecond is the denial log's rate: at most this many lines
	// a second, in bursts of up to as many; the denials beyond are counted
	// (Suppressed) and their number reported in the next line. 0: no
	// denial log (the default); at most MaxDenialsPerSecond.
	DenialsPerSecond int
	// Clock is the denial log's limiter's clock. Default rl.CoarseClock.
	Clock rl.Clock
}

// Logger writes the lines of decisions. It is safe for concurrent use.
type Logger struct {
	log *slog.Logger
	// denials is the denial log's token bucket: one key, one token a
	// line; nil when the denial log is off.
	denials *rl.Limiter
	// pending counts the denials not logged since the last line;
	// suppressed, all of them.
	pending, suppressed atomic.Uint64
}

// New returns a Logger as cfg says.
func New(cfg Config) (*Logger, error) {
	l := &Logger{log: cmp.Or(cfg.Logger, slog.Default())}
	switch n := cfg.DenialsPerSecond; {
	case n < 0 || n > MaxDenialsPerSecond:
		return nil, fmt.Errorf("decisionlog: %d denial lines a second: outside [0, %d] (0: no denial log)", n, MaxDenialsPerSecond)
	case n > 0:
		p, err := rl.NewPolicy(rl.Limit{Name: "lines", Algorithm: core.TokenBucket, Limit: int64(n), Window: time.Second})
		if err != nil {
			return nil, fmt.Errorf("decisionlog: %w", err)
		}
		if l.denials, err = rl.New(rl.Config{Policy: p, Clock: cfg.Clock}); err != nil {
			return nil, fmt.Errorf("decisionlog: %w", err)
		}
	}
	return l, nil
}

// Close releases the denial log's limiter.
func (l *Logger) Close() error {
	if l.denials == nil {
		return nil
	}
	return l.denials.Close()
}

// Denials reports whether the denial log is on.
func (l *Logger) Denials() bool { return l.denials != nil }

// Enabled reports whether l writes any line: the denial log is on, or
// its slog.Logger is enabled at debug level. A front end may leave a
// Logger that is not out of its engine.
func (l *Logger) Enabled(ctx context.Context) bool {
	return l.denials != nil || l.log.Enabled(ctx, slog.LevelDebug)
}

// Suppressed returns the number of denials the denial log has left out
// for its rate, since New: rl_denial_log_suppressed_total.
func (l *Logger) Suppressed() uint64 { return l.suppressed.Load() }

// Entry is one decision's fields.
type Entry struct {
	// Rule is what decided: a rule's name, "inline" (the decision API's
	// inline limits), "rls:<domain>" (the gRPC rate limit service).
	Rule string
	// Key is the key decided. Only its digest is written.
	Key string
	// Op is "check", "peek" or "settle".
	Op string
	// Cost is the request's cost.
	Cost int64
	// Outcome is the decision's (engine.Outcome).
	Outcome engine.Outcome
	// Result is the limiter's result: the limit that decided (for a
	// denial, the one that denied), what remains, the retry-after.
	// Meaningful for Allowed and Denied.
	Result rl.Result
	// Took is the store's time; 0 when it was not called.
	Took time.Duration
	// Err is the decision's error, for a failure.
	Err error
}

// Hook returns l.OnDecision for engine.Options.OnDecision, or nil when l
// is nil or writes no line (Enabled), so that the engine then reads no
// clock for it.
func (l *Logger) Hook() func(context.Context, *engine.Rule, *engine.Result, time.Duration) {
	if l == nil || !l.Enabled(context.Background()) {
		return nil
	}
	return l.OnDecision
}

// OnDecision logs one decision of the engine: engine.Options.OnDecision.
func (l *Logger) OnDecision(ctx context.Context, r *engine.Rule, res *engine.Result, took time.Duration) {
	denied := res.Outcome == engine.Denied && !res.Settle
	if !(denied && l.denials != nil) && !l.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	op := "check"
	switch {
	case res.Peek:
		op = "peek"
	case res.Settle:
		op = "settle"
	}
	l.Log(ctx, &Entry{Rule: r.Name, Key: res.Key, Op: op, Cost: res.Cost, Outcome: res.Outcome, Result: res.Result, Took: took, Err: res.Err})
}

// Log writes e: a denial line if e is a denial and the denial log is on
// and within its rate (else it counts it as suppressed), and a debug line
// if the slog.Logger is enabled at debug level. A denial is a check or a
// peek denied: front ends peek to deny (the gRPC rate limit service's
// descriptors with hits_addend 0, and every descriptor of a request with
// several; the decision API's atomic batches), and a decision API caller
// peeks to ask whether a request would pass; the line's op says which. A
// settle is never one.
func (l *Logger) Log(ctx context.Context, e *Entry) {
	if e.Outcome == engine.Denied && e.Op != "settle" && l.denials != nil {
		l.denial(ctx, e)
	}
	if l.log.Enabled(ctx, slog.LevelDebug) {
		l.debug(ctx, e)
	}
}

// denial writes e's denial line if the denial log's rate allows it, with
// the number of denials left out since the last line, or counts it.
func (l *Logger) denial(ctx context.Context, e *Entry) {
	// A background context: the line's token is the log's, not the
	// request's, whose cancelation must not turn it into a failure.
	res, err := l.denials.Allow(context.Background(), "lines")
	if err != nil || !res.Allowed {
		l.pending.Add(1)
		l.suppressed.Add(1)
		return
	}
	l.log.LogAttrs(ctx, slog.LevelInfo, "request denied",
		slog.String("rule", e.Rule),
		slog.String("limit", e.Result.Name),
		slog.String("key_digest", redact.Digest(e.Key)),
		slog.String("op", e.Op),
		slog.Int64("cost", e.Cost),
		retryAfter(&e.Result),
		slog.Uint64("suppressed", l.pending.Swap(0)))
}

// debug writes e's debug line.
func (l *Logger) debug(ctx context.Context, e *Entry) {
	attrs := make([]slog.Attr, 0, 11)
	attrs = append(attrs, slog.String("rule", e.Rule), slog.String("key_digest", redact.Digest(e.Key)), slog.String("op", e.Op),
		slog.Int64("cost", e.Cost), slog.String("outcome", e.Outcome.String()))
	if e.Outcome == engine.Allowed || e.Outcome == engine.Denied {
		attrs = append(attrs, slog.String("limit", e.Result.Name), slog.Int64("limit_value", e.Result.Limit),
			slog.Int64("remaining", e.Result.Remaining), retryAfter(&e.Result))
	}
	if e.Took > 0 {
		attrs = append(attrs, slog.Int64("store_us", e.Took.Microseconds()))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("err", errText(e.Err, e.Key)))
	}
	l.log.LogAttrs(ctx, slog.LevelDebug, "decision", attrs...)
}

// retryAfter is the retry_after_ms attribute: the retry-after in ms,
// rounded up (as Retry-After's seconds are), or -1 when no retry can pass
// (the cost is over the limit).
func retryAfter(r *rl.Result) slog.Attr {
	if r.Never {
		return slog.Int64("retry_after_ms", -1)
	}
	ms := r.RetryAfter / time.Millisecond
	if r.RetryAfter%time.Millisecond > 0 {
		ms++
	}
	return slog.Int64("retry_after_ms", int64(ms))
}

// errText is err's text without key: an invalid key's error
// (*rl.KeyError) holds it, so only its reason is written; the limiter's
// error for a core.Error (an invalid cost, a corrupt state) names it, so
// the core.Error alone is; and any other error that spells key, as it is
// or quoted, has it replaced by its digest.
func errText(err error, key string) string {
	if ke := (*rl.KeyError)(nil); errors.As(err, &ke) {
		return rl.ErrInvalidKey.Error() + ": " + ke.Reason
	}
	if errors.Is(err, rl.ErrInvalidKey) {
		return rl.ErrInvalidKey.Error()
	}
	if ce := core.Error(0); errors.As(err, &ce) {
		return "rl: " + ce.Error()
	}
	s := err.Error()
	if key != "" {
		d := "<key " + redact.Digest(key) + ">"
		s = strings.ReplaceAll(strings.ReplaceAll(s, strconv.Quote(key), d), key, d)
	}
	return s
}
