package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/httplimit"
	"github.com/rlcore/rl/store"
)

// failing is a Limiter whose every decision fails with its error.
type failing struct{ err error }

func (f failing) Do(context.Context, rl.Request) (rl.Result, error) { return rl.Result{}, f.err }

var (
	errDown    = fmt.Errorf("%w: connect: %w", rl.ErrStore, store.ErrUnavailable)
	errBusy    = fmt.Errorf("%w: pool: %w", rl.ErrStore, store.ErrBusy)
	errTimeout = fmt.Errorf("%w: %w: %w", rl.ErrStore, store.ErrUnavailable, context.DeadlineExceeded)
	errStore   = fmt.Errorf("%w: constraint violated", rl.ErrStore)
	errOdd     = errors.New("corrupt state")
)

// A failed decision is answered by FailOpen, or by Fail when it is set;
// load (store.ErrBusy) is never admitted by default.
func TestFailedDecisions(t *testing.T) {
	onlyOutages := func(r *http.Request, err error) httplimit.Outcome {
		if errors.Is(err, store.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			return httplimit.OutcomeFailOpen
		}
		if errors.Is(err, store.ErrBusy) {
			return httplimit.OutcomeOverloaded
		}
		return httplimit.OutcomeFailClosed
	}
	for _, c := range []struct {
		name       string
		err        error
		failOpen   bool
		fail       func(*http.Request, error) httplimit.Outcome
		code       int
		body       string
		retryAfter string
		outcome    httplimit.Outcome
	}{
		{"down, closed", errDown, false, nil, 503, "Rate limiter unavailable\n", "1", httplimit.OutcomeFailClosed},
		{"down, open", errDown, true, nil, 200, "ok", "", httplimit.OutcomeFailOpen},
		{"busy, closed", errBusy, false, nil, 503, "Rate limiter overloaded; retry later\n", "1", httplimit.OutcomeOverloaded},
		{"busy is never admitted", errBusy, true, nil, 503, "Rate limiter overloaded; retry later\n", "1", httplimit.OutcomeOverloaded},
		{"not the store's", errOdd, true, nil, 500, "Rate limiter error\n", "", httplimit.OutcomeError},
		{"a corrupt state is an error even with FailOpen (the service: its fail policy)", fmt.Errorf("rl: %q: %w", "k", core.ErrState), true, nil, 500, "Rate limiter error\n", "", httplimit.OutcomeError},
		{"Fail: an outage opens", errDown, false, onlyOutages, 200, "ok", "", httplimit.OutcomeFailOpen},
		{"Fail: a timeout stays closed", errTimeout, false, onlyOutages, 503, "Rate limiter unavailable\n", "1", httplimit.OutcomeFailClosed},
		{"Fail: load", errBusy, false, onlyOutages, 503, "Rate limiter overloaded; retry later\n", "1", httplimit.OutcomeOverloaded},
		{"Fail: an error", errOdd, false, func(*http.Request, error) httplimit.Outcome { return httplimit.OutcomeError }, 500, "Rate limiter error\n", "", httplimit.OutcomeError},
		{"Fail: allowed is a bug, closed", errOdd, false, func(*http.Request, error) httplimit.Outcome { return httplimit.OutcomeAllowed }, 503, "Rate limiter unavailable\n", "1", httplimit.OutcomeFailClosed},
		{"Fail: unkeyed is a bug, closed", errDown, false, func(*http.Request, error) httplimit.Outcome { return httplimit.OutcomeUnkeyed }, 503, "Rate limiter unavailable\n", "1", httplimit.OutcomeFailClosed},
		{"Fail: zero is a bug, closed", errDown, false, func(*http.Request, error) httplimit.Outcome { return 0 }, 503, "Rate limiter unavailable\n", "1", httplimit.OutcomeFailClosed},
		{"a store failure that is no outage stays closed", errStore, true, nil, 503, "Rate limiter unavailable\n", "1", httplimit.OutcomeFailClosed},
		{"a first timeout stays closed", errTimeout, true, nil, 503, "Rate limiter unavailable\n", "1", httplimit.OutcomeFailClosed},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []httplimit.Decision
			var reported []error
			h, _ := setup(t, httplimit.Config{
				Limiter:    failing{c.err},
				FailOpen:   c.failOpen,
				Fail:       c.fail,
				OnError:    func(r *http.Request, err error) { reported = append(reported, err) },
				OnDecision: func(r *http.Request, d httplimit.Decision) { got = append(got, d) },
			}, nil)
			w := get(h, nil)
			require.Equal(t, c.code, w.Code)
			require.Equal(t, c.body, w.Body.String())
			require.Equal(t, c.retryAfter, w.Header().Get("Retry-After"))
			require.Empty(t, w.Header().Get("RateLimit"), "no decision, no fields")
			require.Len(t, got, 1)
			require.Equal(t, c.outcome, got[0].Outcome)
			require.ErrorIs(t, got[0].Err, c.err)
			require.Equal(t, "192.0.2.1", got[0].Key)
			require.Len(t, reported, 1)
			require.Equal(t, got[0].Err, reported[0])
			if bug := strings.HasSuffix(c.name, "is a bug, closed"); bug {
				require.ErrorContains(t, reported[0], "Config.Fail answered", "a bad answer of Fail is reported, not silent")
			} else {
				require.Equal(t, c.err, reported[0])
			}
		})
	}
}

// OnDecision hears once of every request, with what became of it.
func TestOnDecision(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Name: "m", Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute})
	var got []httplimit.Decision
	h, _ := setup(t, httplimit.Config{
		Key: httplimit.Header("X-User"),
		Cost: func(r *http.Request) (int64, error) {
			v := r.Header.Get("X-Cost")
			if v == "" {
				return 1, nil
			}
			return strconv.ParseInt(v, 10, 64)
		},
		OnDecision: func(r *http.Request, d httplimit.Decision) { got = append(got, d) },
	}, p)
	for _, c := range []struct {
		name, user, cost string
		code             int
		outcome          httplimit.Outcome
		label            string
		remaining        int64
	}{
		{"allowed", "u", "2", 200, httplimit.OutcomeAllowed, "allowed", 1},
		{"denied", "u", "2", 429, httplimit.OutcomeDenied, "denied", 1},
		{"no key", "", "", 400, httplimit.OutcomeMissingKey, "missing_key", 0},
		{"invalid key", "a b", "", 400, httplimit.OutcomeInvalidKey, "invalid_key", 0},
		{"cost the function refuses", "u", "x", 400, httplimit.OutcomeInvalidCost, "invalid_cost", 0},
		{"cost the limiter refuses", "u", "-1", 400, httplimit.OutcomeInvalidCost, "invalid_cost", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got = got[:0]
			w := get(h, func(r *http.Request) {
				if c.user != "" {
					r.Header.Set("X-User", c.user)
				}
				if c.cost != "" {
					r.Header.Set("X-Cost", c.cost)
				}
			})
			require.Equal(t, c.code, w.Code)
			require.Len(t, got, 1)
			d := got[0]
			require.Equal(t, c.outcome, d.Outcome)
			require.Equal(t, c.label, d.Outcome.String())
			require.Equal(t, c.code, d.Outcome.Status())
			require.GreaterOrEqual(t, d.Latency, time.Duration(0))
			switch c.outcome {
			case httplimit.OutcomeAllowed, httplimit.OutcomeDenied:
				require.NoError(t, d.Err)
				require.Equal(t, c.user, d.Key)
				require.Equal(t, int64(2), d.Cost)
				require.Equal(t, c.remaining, d.Result.Remaining)
				require.Equal(t, "m", d.Result.Name)
			default:
				require.Error(t, d.Err)
				require.Zero(t, d.Result)
			}
		})
	}
}

// The default answers to refusals say why, and never echo the key.
func TestRefusals(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second})
	costErr := errors.New("want a number")
	def, _ := setup(t, httplimit.Config{
		Key: httplimit.Header("X-User"),
		Cost: func(r *http.Request) (int64, error) {
			if r.URL.Query().Has("bad") {
				return 0, costErr
			}
			return 1, nil
		},
	}, p)
	long := strings.Repeat("k", 300)
	for _, c := range []struct {
		name string
		mod  func(*http.Request)
		body string
	}{
		{"no key", nil, "Missing or invalid rate-limit key\n"},
		{"key too long", func(r *http.Request) { r.Header.Set("X-User", long) }, "Invalid rate-limit key: 300 bytes, longer than 256\n"},
		{"key with a space", func(r *http.Request) { r.Header.Set("X-User", "a b") }, "Invalid rate-limit key: byte 0x20 at 1 is not printable ASCII\n"},
		{"bad cost", func(r *http.Request) { r.Header.Set("X-User", "u"); r.URL.RawQuery = "bad" }, "Invalid rate-limit cost\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := get(def, c.mod)
			require.Equal(t, 400, w.Code)
			require.Equal(t, c.body, w.Body.String())
			require.NotContains(t, w.Body.String(), "Config.", "no advice for the developer in a client's answer")
		})
	}

	// Refused writes them instead; 503s come with Retry-After set.
	var seen []httplimit.Outcome
	custom := func(w http.ResponseWriter, r *http.Request, d httplimit.Decision) {
		seen = append(seen, d.Outcome)
		w.WriteHeader(d.Outcome.Status())
		fmt.Fprintf(w, `{"error":%q}`, d.Outcome)
	}
	h, _ := setup(t, httplimit.Config{Key: httplimit.Header("X-User"), Refused: custom}, p)
	w := get(h, nil)
	require.Equal(t, 400, w.Code)
	require.Equal(t, `{"error":"missing_key"}`, w.Body.String())
	h, _ = setup(t, httplimit.Config{Limiter: failing{errBusy}, Refused: custom}, nil)
	w = get(h, nil)
	require.Equal(t, 503, w.Code)
	require.Equal(t, "1", w.Header().Get("Retry-After"))
	require.Equal(t, `{"error":"overloaded"}`, w.Body.String())
	require.Equal(t, []httplimit.Outcome{httplimit.OutcomeMissingKey, httplimit.OutcomeOverloaded}, seen)
	// A denial is Denied's, not Refused's.
	one := rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute})
	h, _ = setup(t, httplimit.Config{Refused: custom}, one)
	get(h, nil)
	require.Equal(t, 429, get(h, nil).Code)
	require.Len(t, seen, 2)
}

// Outcome names and statuses, for every outcome.
func TestOutcomes(t *testing.T) {
	for _, c := range []struct {
		o      httplimit.Outcome
		name   string
		status int
	}{
		{httplimit.OutcomeAllowed, "allowed", 200},
		{httplimit.OutcomeDenied, "denied", 429},
		{httplimit.OutcomeMissingKey, "missing_key", 400},
		{httplimit.OutcomeUnkeyed, "unkeyed", 200},
		{httplimit.OutcomeInvalidKey, "invalid_key", 400},
		{httplimit.OutcomeInvalidCost, "invalid_cost", 400},
		{httplimit.OutcomeFailOpen, "fail_open", 200},
		{httplimit.OutcomeFailClosed, "fail_closed", 503},
		{httplimit.OutcomeOverloaded, "overloaded", 503},
		{httplimit.OutcomeError, "error", 500},
		{0, "unknown", 503},
		{httplimit.OutcomeError + 1, "unknown", 503},
	} {
		require.Equal(t, c.name, c.o.String())
		require.Equal(t, c.status, c.o.Status(), c.name)
	}
}

// A Limiter of one's own wraps the decisions: here, one that counts them.
type counting struct {
	l *rl.Limiter
	n int
}

func (c *counting) Do(ctx context.Context, req rl.Request) (rl.Result, error) {
	c.n++
	return c.l.Do(ctx, req)
}

func TestLimiterWrapper(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute})
	l, err := rl.New(rl.Config{Policy: p})
	require.NoError(t, err)
	defer l.Close()
	c := &counting{l: l}
	h, _ := setup(t, httplimit.Config{Limiter: c}, nil)
	require.Equal(t, 200, get(h, nil).Code)
	require.Equal(t, 429, get(h, nil).Code)
	require.Equal(t, 2, c.n)
	_, err = httplimit.New(httplimit.Config{Key: httplimit.ClientIP()})
	require.Error(t, err, "no Limiter")
}

// A request without a key served by AllowMissingKey is OutcomeUnkeyed, a
// 200 as served, not OutcomeMissingKey's 400.
func TestUnkeyed(t *testing.T) {
	var got []httplimit.Decision
	h, _ := setup(t, httplimit.Config{
		Key:             httplimit.Header("X-User"),
		AllowMissingKey: true,
		OnDecision:      func(r *http.Request, d httplimit.Decision) { got = append(got, d) },
	}, nil)
	w := get(h, nil)
	require.Equal(t, 200, w.Code)
	require.Equal(t, "ok", w.Body.String())
	require.Empty(t, w.Header().Get("RateLimit"), "no decision, no fields")
	require.Len(t, got, 1)
	require.Equal(t, httplimit.OutcomeUnkeyed, got[0].Outcome)
	require.Equal(t, w.Code, got[0].Outcome.Status())
	require.Equal(t, "unkeyed", got[0].Outcome.String())
	require.ErrorIs(t, got[0].Err, httplimit.ErrNoKey)
	require.Empty(t, got[0].Key)
}

// flaky fails with err while fail is set, and otherwise decides with l.
type flaky struct {
	l    *rl.Limiter
	err  error
	fail bool
}

func (f *flaky) Do(ctx context.Context, req rl.Request) (rl.Result, error) {
	if f.fail {
		return rl.Result{}, f.err
	}
	return f.l.Do(ctx, req)
}

// With FailOpen, timeouts open only when 3 come in a row with no decision
// completed between: a loaded store times some out and completes others.
func TestFailOpenWaitsForTimeoutsInARow(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 100, Window: time.Second})
	l, err := rl.New(rl.Config{Policy: p})
	require.NoError(t, err)
	defer l.Close()
	f := &flaky{l: l, err: errTimeout}
	var got []httplimit.Outcome
	h, _ := setup(t, httplimit.Config{
		Limiter:    f,
		FailOpen:   true,
		OnDecision: func(r *http.Request, d httplimit.Decision) { got = append(got, d.Outcome) },
	}, nil)
	run := func(fails ...bool) {
		for _, fail := range fails {
			f.fail = fail
			get(h, nil)
		}
	}
	// Two timeouts, a success, two timeouts: never 3 in a row.
	run(true, true, false, true, true)
	// The third in a row opens, and so do the next; a success ends the run.
	run(true, true, false, true)
	closed, open, allowed := httplimit.OutcomeFailClosed, httplimit.OutcomeFailOpen, httplimit.OutcomeAllowed
	require.Equal(t, []httplimit.Outcome{closed, closed, allowed, closed, closed, open, open, allowed, closed}, got)

	// A store that is down (not a timeout) opens at once.
	f.err, got = errDown, nil
	run(true)
	require.Equal(t, []httplimit.Outcome{open}, got)
}

// New refuses a Config it cannot serve.
func TestNewRefuses(t *testing.T) {
	l, err := rl.New(rl.Config{Policy: rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 1, Window: time.Second})})
	require.NoError(t, err)
	defer l.Close()
	fail := func(*http.Request, error) httplimit.Outcome { return httplimit.OutcomeFailOpen }
	for _, c := range []struct {
		name string
		cfg  httplimit.Config
		want string
	}{
		{"no limiter", httplimit.Config{Key: httplimit.ClientIP()}, "Config.Limiter is nil"},
		{"a nil *rl.Limiter", httplimit.Config{Limiter: (*rl.Limiter)(nil), Key: httplimit.ClientIP()}, "Config.Limiter is nil"},
		{"no key", httplimit.Config{Limiter: l}, "Config.Key is nil"},
		{"Fail and FailOpen", httplimit.Config{Limiter: l, Key: httplimit.ClientIP(), FailOpen: true, Fail: fail}, "Config.Fail and Config.FailOpen are both set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mw, err := httplimit.New(c.cfg)
			require.ErrorContains(t, err, c.want)
			require.Nil(t, mw)
		})
	}
	_, err = httplimit.New(httplimit.Config{Limiter: l, Key: httplimit.ClientIP(), Fail: fail})
	require.NoError(t, err, "Fail alone")
}

// One middleware keeps one count for every handler it wraps: the store's
// health is the same for all of them, and a success through one ends the
// others' run.
func TestFailOpenCountsPerMiddleware(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 100, Window: time.Second})
	l, err := rl.New(rl.Config{Policy: p})
	require.NoError(t, err)
	defer l.Close()
	f := &flaky{l: l, err: errTimeout}
	var got []httplimit.Outcome
	mw, err := httplimit.New(httplimit.Config{
		Limiter:    f,
		Key:        httplimit.ClientIP(),
		FailOpen:   true,
		OnDecision: func(r *http.Request, d httplimit.Decision) { got = append(got, d.Outcome) },
	})
	require.NoError(t, err)
	a, b := mw(ok), mw(ok)
	run := func(h http.Handler, fail bool) {
		f.fail = fail
		get(h, nil)
	}
	run(a, true)
	run(b, true)
	run(a, true) // the third, through either handler: open
	run(b, false)
	run(a, true) // the success through b ended the run
	closed, open, allowed := httplimit.OutcomeFailClosed, httplimit.OutcomeFailOpen, httplimit.OutcomeAllowed
	require.Equal(t, []httplimit.Outcome{closed, closed, open, allowed, closed}, got)
}

// burst is a Limiter whose requests with X-Stall wait in Do until released
// and then time out; the others are decided at once.
type burst struct {
	l       *rl.Limiter
	entered sync.WaitGroup
	release chan struct{}
}

func (b *burst) Do(ctx context.Context, req rl.Request) (rl.Result, error) {
	if strings.HasPrefix(req.Key, "stall") {
		b.entered.Done()
		<-b.release
		return rl.Result{}, errTimeout
	}
	return b.l.Do(ctx, req)
}

// Timeouts of decisions queued together (a slow or hot row) do not open
// when another decision completed after they began: that is load, and
// load never turns into admissions. The same burst with no decision
// completing is an outage from its third timeout.
func TestFailOpenIgnoresABurstBegunBeforeASuccess(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 100, Window: time.Second})
	l, err := rl.New(rl.Config{Policy: p})
	require.NoError(t, err)
	defer l.Close()
	const n = 5
	for _, succeed := range []bool{true, false} {
		b := &burst{l: l, release: make(chan struct{})}
		var mu sync.Mutex
		var got []httplimit.Outcome
		h, _ := setup(t, httplimit.Config{
			Limiter:  b,
			Key:      httplimit.Header("X-Key"),
			FailOpen: true,
			OnDecision: func(r *http.Request, d httplimit.Decision) {
				if strings.HasPrefix(d.Key, "stall") {
					mu.Lock()
					got = append(got, d.Outcome)
					mu.Unlock()
				}
			},
		}, nil)
		b.entered.Add(n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { get(h, func(r *http.Request) { r.Header.Set("X-Key", fmt.Sprint("stall", i)) }) })
		}
		b.entered.Wait()
		if succeed {
			require.Equal(t, http.StatusOK, get(h, func(r *http.Request) { r.Header.Set("X-Key", "other") }).Code)
		}
		close(b.release)
		wg.Wait()
		counts := map[httplimit.Outcome]int{}
		for _, o := range got {
			counts[o]++
		}
		if succeed {
			require.Equal(t, map[httplimit.Outcome]int{httplimit.OutcomeFailClosed: n}, counts, "a burst begun before a success")
		} else {
			require.Equal(t, map[httplimit.Outcome]int{httplimit.OutcomeFailClosed: 2, httplimit.OutcomeFailOpen: n - 2}, counts, "a burst with no success")
		}
	}
}
