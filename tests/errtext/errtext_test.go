// Package errtext_test holds the runtimes to one wording of an invalid
// limit (and of an invalid call: TestSameWordsCall): the same bad parameters given to the Go API (core.Limit.Validate,
// rl.NewPolicy), to the configuration checker of rl-wasm-host and the
// proxy-wasm filter (service.ParseConfig over ruleconfig) and to the SQL
// functions (rl.decide, in a database of the test's own migrated by
// sql/migrations) are refused with the same message, naming the
// parameter, its value, the range allowed and the algorithm. The message
// is written in one place, core.LimitError.Message; SQL's is checked
// against it here.
package errtext_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/frontend/service"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/migrations"
)

// A case is one invalid limit: as core and SQL take it (algorithm number,
// window in µs) and as a configuration file writes it (strategy name,
// window as a duration).
type errCase struct {
	name     string
	alg      core.Algorithm
	strategy string // "" for none
	limit    int64
	window   int64  // µs
	config   string // the window in a configuration file
	rate     int64
	code     core.Error
	want     string // the message, after "ratelimit: "
}

// The lists of algorithms in the messages are core's (AlgorithmList,
// RatedList: core's TestAlgorithmList builds them from the table), so a new
// algorithm needs no edit here; SQL's are still held to them.
var cases = []errCase{
	{"unset algorithm", 0, "", 10, 60_000_000, "1m", 0, core.ErrAlgorithm,
		"algorithm 0: unknown (want " + core.AlgorithmList(true) + ")"},
	{"zero limit", core.FixedWindow, "fixed", 0, 60_000_000, "1m", 0, core.ErrLimit,
		"limit 0: outside [1, 1099511627776] for fixed_window"},
	{"negative limit", core.TokenBucket, "token", -5, 1_000_000, "1s", 0, core.ErrLimit,
		"limit -5: outside [1, 1099511627776] for token_bucket"},
	{"sliding log limit", core.SlidingLog, "log", 5000, 1_000_000, "1s", 0, core.ErrLimit,
		"limit 5000: outside [1, 4096] for sliding_log"},
	{"window too long", core.GCRA, "gcra", 1, 11575 * 86_400_000_000, "11575d", 0, core.ErrWindow,
		"window 1000080000000000 µs: outside [1, 1000000000000000] µs"},
	{"rate on a fixed window", core.FixedWindow, "fixed", 10, 60_000_000, "1m", 5, core.ErrRate,
		"rate 5: must be 0 or absent for fixed_window (rate applies to " + core.RatedList() + ")"},
	{"negative rate", core.LeakyBucket, "leaky_bucket", 10, 1_000_000, "1s", -1, core.ErrRate,
		"rate -1: outside [0, 1099511627776] for leaky_bucket"},
	{"rate too high", core.GCRA, "gcra", 10, 1_000_000, "1s", core.MaxLimit + 1, core.ErrRate,
		"rate 1099511627777: outside [0, 1099511627776] for gcra"},
	{"limit × window", core.TokenBucket, "token_bucket", 1_000_000_000_000, 86_400_000_000, "1d", 0, core.ErrUnits,
		"limit 1000000000000 × window 86400000000 µs: too large for token_bucket (limit × window in µs must be at most 2305843009213693952)"},
}

// TestSameWords: Go, the configuration checker and SQL refuse each case
// with the same message.
func TestSameWords(t *testing.T) {
	db := pgtest.NewDatabase(t)
	ctx := context.Background()
	require.NoError(t, migrations.Up(ctx, db))
	pool := pgtest.Pool(t, db)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// core: Validate and Compile.
			l := core.Limit{Algorithm: c.alg, Limit: c.limit, Window: c.window, Rate: c.rate}
			err := l.Validate()
			require.EqualError(t, err, "ratelimit: "+c.want)
			require.ErrorIs(t, err, c.code)
			_, err = core.Compile(l)
			require.EqualError(t, err, "ratelimit: "+c.want)

			// The Go API: rl.NewPolicy names the limit, then core's words.
			_, err = rl.NewPolicy(rl.Limit{Name: "api", Algorithm: c.alg, Limit: c.limit, Window: time.Duration(c.window) * time.Microsecond, Rate: c.rate})
			require.EqualError(t, err, `rl: invalid policy: limit "api": ratelimit: `+c.want)
			require.ErrorIs(t, err, rl.ErrPolicy)
			require.ErrorIs(t, err, c.code)
			var le *core.LimitError
			require.ErrorAs(t, err, &le)
			require.Equal(t, c.code, le.Code)

			// SQL: rl.decide raises RL0NN with the same message.
			_, err = pool.Exec(ctx, `SELECT * FROM rl.decide($1, $2, $3, $4, 0, 0, 0, 0, '{}', $5, 1)`,
				int32(c.alg), c.limit, c.window, c.rate, int64(1_767_225_600_000_000))
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, fmt.Sprintf("RL%03d", int(c.code)), pe.Code)
			require.Equal(t, "ratelimit: "+c.want, pe.Message)

			// The configuration checker (rl-wasm-host -check-config, the
			// proxy-wasm filter): the rule, then the same words; a missing
			// strategy is reported as missing, naming every choice.
			rule := fmt.Sprintf("rules:\n  - {name: r, limit: %d, window: %s, rate: %d", c.limit, c.config, c.rate)
			if c.strategy != "" {
				rule += ", strategy: " + c.strategy
			}
			_, err = service.ParseConfig("rules.yaml", "yaml", []byte(rule+"}\n"))
			var ce *service.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Len(t, ce.Problems, 1, "%v", err)
			p := ce.Problems[0]
			require.Equal(t, `rules[0] "r"`, p.Rule)
			if c.strategy == "" {
				require.Equal(t, "strategy", p.Field)
				for _, a := range core.Algorithms() {
					require.Contains(t, p.Message, a.String())
				}
				return
			}
			require.Equal(t, "", p.Field, "the message names the parameter")
			require.Equal(t, c.want, p.Message)
			require.Contains(t, err.Error(), `rules.yaml: rules[0] "r": `+c.want)
		})
	}
}

// TestSameWordsCall: an invalid call (a time, a cost, a settle's delta)
// is refused in the same words by the Go API (a Limiter over the memory
// store, which decides with the core in Go) and by SQL.
func TestSameWordsCall(t *testing.T) {
	db := pgtest.NewDatabase(t)
	ctx := context.Background()
	require.NoError(t, migrations.Up(ctx, db))
	pool := pgtest.Pool(t, db)
	const t0 = int64(1_767_225_600_000_000)
	for _, c := range []struct {
		name      string
		now, cost int64
		settle    bool
		code      core.Error
		want      string
	}{
		// (A Limiter over the memory store never decides before the
		// store's horizon, so a negative clock reads as 0 there.)
		{"negative time", -5, 1, false, core.ErrTime, "time -5 µs: outside [0, 253402300799999999] µs since the Unix epoch"},
		{"time past 9999", core.MaxTime + 1, 1, false, core.ErrTime, "time 253402300800000000 µs: outside [0, 253402300799999999] µs since the Unix epoch"},
		{"negative cost", t0, -1, false, core.ErrCost, "cost -1: outside [0, 1099511627776]"},
		{"cost too high", t0, core.MaxCost + 1, false, core.ErrCost, "cost 1099511627777: outside [0, 1099511627776]"},
		{"settle delta", t0, -core.MaxCost - 1, true, core.ErrCost, "settle delta -1099511627777: outside [-1099511627776, 1099511627776]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ce := &core.CallError{Code: c.code, Now: c.now, Cost: c.cost, Settle: c.settle}
			require.EqualError(t, ce, "ratelimit: "+c.want)
			require.ErrorIs(t, ce, c.code)
			if c.now >= 0 {
				p := rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second})
				now := c.now
				l, err := rl.New(rl.Config{Policy: p, Clock: func() int64 { return now }})
				require.NoError(t, err)
				defer l.Close()
				_, err = l.Do(ctx, rl.Request{Key: "k", Cost: c.cost, Settle: c.settle})
				require.EqualError(t, err, `rl: "k": ratelimit: `+c.want)
				require.ErrorIs(t, err, c.code)
				require.ErrorAs(t, err, &ce)
			}

			op := "take"
			if c.settle {
				op = "settle"
			}
			_, err := pool.Exec(ctx, `SELECT * FROM rl.decide(4, 10, 1000000, 0, 0, 0, 0, 0, '{}', $1, $2, $3)`, c.now, c.cost, op)
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, fmt.Sprintf("RL%03d", int(c.code)), pe.Code)
			require.Equal(t, "ratelimit: "+c.want, pe.Message)
		})
	}
}

// TestCasesCoverEveryCheck: the cases reach every check of a limit.
func TestCasesCoverEveryCheck(t *testing.T) {
	seen := map[core.Error]bool{}
	for _, c := range cases {
		seen[c.code] = true
	}
	for _, code := range []core.Error{core.ErrAlgorithm, core.ErrLimit, core.ErrWindow, core.ErrRate, core.ErrUnits} {
		if !seen[code] {
			t.Errorf("no case for %v", code)
		}
	}
	// An unset algorithm's message names every choice.
	for _, c := range cases {
		if c.alg != 0 {
			continue
		}
		for _, a := range core.Algorithms() {
			if !strings.Contains(c.want, fmt.Sprintf("%d %s", a, a)) {
				t.Errorf("%s: %q does not name %d %s", c.name, c.want, a, a)
			}
		}
	}
}
