package decisionlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/ruleconfig"
	"github.com/rlcore/rl/internal/util/redact"
	"github.com/rlcore/rl/memstore"
)

// secret is a key that must never reach a line.
const secret = "sk_live_0123456789abcdef"

// sink is a JSON log at level, whose lines lines decodes.
type sink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func newSink(level slog.Level) (*sink, *slog.Logger) {
	s := &sink{}
	return s, slog.New(slog.NewJSONHandler(s, &slog.HandlerOptions{Level: level}))
}

func (s *sink) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func (s *sink) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.text()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func newLogger(t *testing.T, cfg Config) *Logger {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func denial(key string) *Entry {
	return &Entry{Rule: "search", Key: key, Op: "check", Cost: 1, Outcome: engine.Denied,
		Result: rl.Result{LimitResult: rl.LimitResult{Name: "per_minute", Limit: 10, RetryAfter: 1500*time.Millisecond + 1}}}
}

// A flood of denials writes the denial log's burst, then one line a
// token; each line reports how many were left out since the line before,
// and Suppressed counts them all.
func TestDenialFloodIsBounded(t *testing.T) {
	const t0 = int64(1_700_000_000_000_000)
	var now atomic.Int64
	now.Store(t0)
	s, log := newSink(slog.LevelInfo)
	l := newLogger(t, Config{Logger: log, DenialsPerSecond: 5, Clock: now.Load})
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 250 {
				l.Log(ctx, denial(secret))
			}
		}()
	}
	wg.Wait()
	if got := len(s.lines(t)); got != 5 {
		t.Fatalf("%d lines for 1000 denials at one instant, want the burst, 5", got)
	}
	if got := l.Suppressed(); got != 995 {
		t.Fatalf("Suppressed() = %d, want 995", got)
	}
	now.Store(t0 + 200_000) // one token back
	l.Log(ctx, denial(secret))
	l.Log(ctx, denial(secret))
	lines := s.lines(t)
	if len(lines) != 6 {
		t.Fatalf("%d lines, want 6", len(lines))
	}
	last := lines[5]
	for k, want := range map[string]any{"level": "INFO", "msg": "request denied", "rule": "search", "limit": "per_minute",
		"key_digest": redact.Digest(secret), "op": "check", "cost": 1.0, "retry_after_ms": 1501.0} {
		if last[k] != want {
			t.Errorf("%s: %v, want %v (line %v)", k, last[k], want, last)
		}
	}
	// Each line reports the denials left out since the line before (a
	// line of the burst may report some, left out while it was written):
	// the lines account for every one.
	sum := 0.0
	for _, l := range lines {
		sum += l["suppressed"].(float64)
	}
	if sum != 995 {
		t.Errorf("the lines report %v suppressed, want 995", sum)
	}
	if got := l.Suppressed(); got != 996 {
		t.Fatalf("Suppressed() = %d, want 996", got)
	}
	if strings.Contains(s.text(), secret) {
		t.Fatal("a line holds the key")
	}
}

// Off by default: no denial line, nothing counted, and at info level the
// Logger is not enabled at all.
func TestDenialLogOffByDefault(t *testing.T) {
	s, log := newSink(slog.LevelInfo)
	l := newLogger(t, Config{Logger: log})
	if l.Enabled(context.Background()) || l.Denials() {
		t.Fatal("enabled with no denial log at info level")
	}
	for range 100 {
		l.Log(context.Background(), denial(secret))
	}
	if s.text() != "" || l.Suppressed() != 0 {
		t.Fatalf("wrote %q, suppressed %d", s.text(), l.Suppressed())
	}
}

func TestNewRefusesRates(t *testing.T) {
	for _, n := range []int{-1, MaxDenialsPerSecond + 1} {
		if _, err := New(Config{DenialsPerSecond: n}); err == nil || !strings.Contains(err.Error(), "outside [0, 1000000]") {
			t.Errorf("DenialsPerSecond %d: err %v", n, err)
		}
	}
}

// A denial is a check or a peek denied (its op says which): a settle, an
// allowed check and a failure write no denial line.
func TestDenialsAreDeniedChecksAndPeeks(t *testing.T) {
	s, log := newSink(slog.LevelInfo)
	l := newLogger(t, Config{Logger: log, DenialsPerSecond: 100})
	l.Log(context.Background(), &Entry{Rule: "r", Key: "k", Op: "peek", Outcome: engine.Denied})
	if lines := s.lines(t); len(lines) != 1 || lines[0]["op"] != "peek" {
		t.Fatalf("a denied peek: %v", lines)
	}
	s.buf.Reset()
	for _, e := range []*Entry{
		{Rule: "r", Key: "k", Op: "settle", Outcome: engine.Denied},
		{Rule: "r", Key: "k", Op: "check", Outcome: engine.Allowed},
		{Rule: "r", Key: "k", Op: "check", Outcome: engine.FailClosed},
	} {
		l.Log(context.Background(), e)
	}
	if s.text() != "" {
		t.Fatalf("wrote %q", s.text())
	}
}

// At debug level every decision has a line with what debugging a rule
// needs, and none holds the key, not even an invalid key's error.
func TestDebugLines(t *testing.T) {
	s, log := newSink(slog.LevelDebug)
	l := newLogger(t, Config{Logger: log})
	if !l.Enabled(context.Background()) {
		t.Fatal("not enabled at debug level")
	}
	ctx := context.Background()
	allowed := rl.Result{LimitResult: rl.LimitResult{Name: "search", Allowed: true, Limit: 10, Remaining: 7}}
	l.Log(ctx, &Entry{Rule: "search", Key: secret, Op: "check", Cost: 3, Outcome: engine.Allowed, Result: allowed, Took: 1500 * time.Microsecond})
	never := rl.Result{LimitResult: rl.LimitResult{Name: "search", Limit: 10, Never: true}}
	l.Log(ctx, &Entry{Rule: "search", Key: secret, Op: "peek", Cost: 11, Outcome: engine.Denied, Result: never, Took: time.Millisecond})
	bad := secret + " x"
	l.Log(ctx, &Entry{Rule: "search", Key: bad, Op: "check", Cost: 1, Outcome: engine.InvalidKey,
		Err: &rl.KeyError{Key: bad, Reason: "byte 0x20 at 24 is not printable ASCII"}})
	l.Log(ctx, &Entry{Rule: "rls:api", Key: secret, Op: "check", Cost: 1, Outcome: engine.FailClosed, Err: errors.New("store: unavailable")})
	l.Log(ctx, &Entry{Rule: "search", Key: secret, Op: "check", Cost: 1, Outcome: engine.Error,
		Err: fmt.Errorf("rl: %q: %w", secret, core.ErrState)})
	l.Log(ctx, &Entry{Rule: "search", Key: secret, Op: "check", Cost: 1, Outcome: engine.FailClosed,
		Err: fmt.Errorf("store: row %s locked, then %q timed out", secret, secret)})
	lines := s.lines(t)
	want := []map[string]any{
		{"msg": "decision", "level": "DEBUG", "rule": "search", "key_digest": redact.Digest(secret), "op": "check", "cost": 3.0,
			"outcome": "allowed", "limit": "search", "limit_value": 10.0, "remaining": 7.0, "retry_after_ms": 0.0, "store_us": 1500.0},
		{"msg": "decision", "level": "DEBUG", "rule": "search", "key_digest": redact.Digest(secret), "op": "peek", "cost": 11.0,
			"outcome": "denied", "limit": "search", "limit_value": 10.0, "remaining": 0.0, "retry_after_ms": -1.0, "store_us": 1000.0},
		{"msg": "decision", "level": "DEBUG", "rule": "search", "key_digest": redact.Digest(bad), "op": "check", "cost": 1.0,
			"outcome": "invalid_key", "err": "rl: invalid key: byte 0x20 at 24 is not printable ASCII"},
		{"msg": "decision", "level": "DEBUG", "rule": "rls:api", "key_digest": redact.Digest(secret), "op": "check", "cost": 1.0,
			"outcome": "fail_closed", "err": "store: unavailable"},
		{"msg": "decision", "level": "DEBUG", "rule": "search", "key_digest": redact.Digest(secret), "op": "check", "cost": 1.0,
			"outcome": "error", "err": "rl: " + core.ErrState.Error()},
		{"msg": "decision", "level": "DEBUG", "rule": "search", "key_digest": redact.Digest(secret), "op": "check", "cost": 1.0,
			"outcome": "fail_closed", "err": "store: row <key " + redact.Digest(secret) + "> locked, then <key " + redact.Digest(secret) + "> timed out"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), s.text())
	}
	for i, w := range want {
		delete(lines[i], "time")
		if len(lines[i]) != len(w) {
			t.Errorf("line %d: %v, want %v", i, lines[i], w)
		}
		for k, v := range w {
			if lines[i][k] != v {
				t.Errorf("line %d: %s = %v, want %v", i, k, lines[i][k], v)
			}
		}
	}
	if strings.Contains(s.text(), secret) {
		t.Fatal("a line holds the key")
	}
}

// The engine reports each decision to OnDecision: the denial line names
// the rule (the target), the limit that denied and the key's digest, from
// the decision itself.
func TestEngineDecisions(t *testing.T) {
	s, log := newSink(slog.LevelDebug)
	l := newLogger(t, Config{Logger: log, DenialsPerSecond: 10})
	e, err := engine.New(engine.Options{Store: memstore.New(nil), Clock: func() int64 { return 1_000_000 }, OnDecision: l.OnDecision})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Compile(`rule "search"`, []ruleconfig.NamedLimit{
		{Name: "burst", Limit: core.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: 1_000_000}},
		{Name: "hourly", Limit: core.Limit{Algorithm: core.FixedWindow, Limit: 100, Window: 3_600_000_000}}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := e.Limiter("search", p)
	if err != nil {
		t.Fatal(err)
	}
	r := &engine.Rule{Name: "search", Limiter: lim, Policy: p}
	for _, want := range []engine.Outcome{engine.Allowed, engine.Denied} {
		if d := e.Run(context.Background(), r, &engine.Input{Key: secret, Cost: 1}); d.Outcome != want {
			t.Fatalf("outcome %v, want %v", d.Outcome, want)
		}
	}
	var got []string
	for _, m := range s.lines(t) {
		got = append(got, fmt.Sprint(m["level"], " ", m["msg"], " ", m["rule"], " ", m["outcome"], " ", m["limit"], " ", m["key_digest"]))
	}
	dg := redact.Digest(secret)
	want := []string{
		"DEBUG decision search allowed burst " + dg,
		"INFO request denied search <nil> burst " + dg, // the denial line: no outcome, it is one
		"DEBUG decision search denied burst " + dg,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// With debug off and the denial log off (or a decision that is no
// denial), OnDecision allocates nothing.
func TestOnDecisionDisabledAllocatesNothing(t *testing.T) {
	_, log := newSink(slog.LevelInfo)
	l := newLogger(t, Config{Logger: log, DenialsPerSecond: 10})
	r := &engine.Rule{Name: "search"}
	res := &engine.Result{Outcome: engine.Allowed, Key: secret, Cost: 1}
	if n := testing.AllocsPerRun(100, func() { l.OnDecision(context.Background(), r, res, time.Millisecond) }); n != 0 {
		t.Fatalf("%v allocations a decision with debug off", n)
	}
}

// BenchmarkOnDecisionDisabled: an allowed decision with debug off (a
// denial log on), as rl-wasm-host's proxy makes most: no allocation.
func BenchmarkOnDecisionDisabled(b *testing.B) {
	_, log := newSink(slog.LevelInfo)
	l, err := New(Config{Logger: log, DenialsPerSecond: 10})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r := &engine.Rule{Name: "search"}
	res := &engine.Result{Outcome: engine.Allowed, Key: secret, Cost: 1}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l.OnDecision(ctx, r, res, time.Millisecond)
	}
}
