package migrations_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/tests/vectors"
)

// TestVectorsTable runs every vector case whose limits have distinct names
// through the table functions: rl_allow_us / rl_peek_us / rl_settle_us for
// one limit, rl_allow_multi / rl_peek_multi / rl_settle_multi (and
// rl_decide_multi, rl_settle_decide) for several, rl_reset for
// reset, and again with every step a batch of one request (rl_decide_batch,
// its settle flag for a settle), with explicit now_us, after writing
// set_states into rows. After every step the rows must hold expect.states
// (a missing row is a fresh state), with the parameters that wrote them,
// and the expires_at the last write set.
func TestVectorsTable(t *testing.T) {
	t.Parallel()
	runVectorsTable(t, db)
}

// runVectorsTable runs TestVectorsTable's cases through db, a pool on a
// database with rl (TestExtensionVectors passes one where CREATE EXTENSION
// rl installed it).
func runVectorsTable(t *testing.T, db *pgxpool.Pool) {
	files, err := vectors.Load()
	require.NoError(t, err)
	for _, f := range files {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			for _, c := range f.Cases {
				// Every case applies today; a future one with duplicate
				// names could not map its states to rows.
				require.True(t, distinctNames(c), "%s: duplicate limit names", c.ID)
				if err := runTableCase(context.Background(), db, c, viaFunctions); err != nil {
					t.Errorf("%s: %v", c.ID, err)
				}
				if len(c.Limits) > 1 {
					if err := runTableCase(context.Background(), db, c, viaArrays); err != nil {
						t.Errorf("%s (rl_decide_multi): %v", c.ID, err)
					}
				}
				if err := runTableCase(context.Background(), db, c, viaBatch); err != nil {
					t.Errorf("%s (rl_decide_batch): %v", c.ID, err)
				}
			}
		})
	}
}

func distinctNames(c vectors.Case) bool {
	lists := [][]vectors.Limit{c.Limits}
	for _, s := range c.Steps {
		if s.Limits != nil {
			lists = append(lists, s.Limits)
		}
	}
	for _, ls := range lists {
		seen := map[string]bool{}
		for _, l := range ls {
			if seen[l.Name] || l.Name == "" {
				return false
			}
			seen[l.Name] = true
		}
	}
	return true
}

func names(ls []vectors.Limit) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Name
	}
	return out
}

func algName(a int32) string {
	if core.Algorithm(a).Valid() {
		return core.Algorithm(a).String()
	}
	return fmt.Sprintf("unknown-%d", a)
}

func writeState(ctx context.Context, db *pgxpool.Pool, key, name string, s vectors.State, expires int64) error {
	log := s.Log
	if log == nil {
		log = []int64{}
	}
	_, err := db.Exec(ctx, `INSERT INTO rl.state (key, name, algorithm, t, x, y, log, l, w, r, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON CONFLICT (key, name) DO UPDATE SET algorithm = EXCLUDED.algorithm, t = EXCLUDED.t, x = EXCLUDED.x,
			y = EXCLUDED.y, log = EXCLUDED.log, l = EXCLUDED.l, w = EXCLUDED.w, r = EXCLUDED.r,
			expires_at = EXCLUDED.expires_at`,
		key, name, s.Algorithm, s.T, s.X, s.Y, log, s.L, s.W, s.R, expires)
	return err
}

type row struct {
	state   vectors.State
	expires int64
	found   bool
}

func readRows(ctx context.Context, db *pgxpool.Pool, key string, ns []string) ([]row, error) {
	out := make([]row, len(ns))
	for i, n := range ns {
		r := &out[i]
		err := db.QueryRow(ctx, `SELECT algorithm, t, x, y, log, l, w, r, expires_at FROM rl.state WHERE key = $1 AND name = $2`,
			key, n).Scan(&r.state.Algorithm, &r.state.T, &r.state.X, &r.state.Y, &r.state.Log,
			&r.state.L, &r.state.W, &r.state.R, &r.expires)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return nil, err
		default:
			r.found = true
		}
	}
	return out, nil
}

// tableVia is the way runTableCase calls the table functions.
type tableVia int

const (
	viaFunctions tableVia = iota // rl_allow_us, rl_peek_us, rl_settle_us, rl_allow_multi, rl_peek_multi, rl_settle_multi
	viaArrays                    // rl_decide_multi (rl_settle_decide) for several limits
	viaBatch                     // rl_decide_batch, one request per batch
)

func runTableCase(ctx context.Context, db *pgxpool.Pool, c vectors.Case, via tableVia) error {
	key := "vec:" + c.ID
	if via == viaBatch {
		key = "vecb:" + c.ID
	}
	if _, err := db.Exec(ctx, `DELETE FROM rl.state WHERE key = $1`, key); err != nil {
		return err
	}
	limits := c.Limits
	ns := names(limits)
	expires := map[string]int64{}
	const written = 1 << 62 // expires_at of rows the test writes itself
	for i, s := range c.States {
		if err := writeState(ctx, db, key, ns[i], s, written); err != nil {
			return err
		}
		expires[ns[i]] = written
	}
	for i, st := range c.Steps {
		fail := func(format string, a ...any) error {
			return fmt.Errorf("step %d (op %s now %d cost %d): %s", i, st.Op, st.Now, st.Cost, fmt.Sprintf(format, a...))
		}
		if st.Limits != nil {
			next := names(st.Limits)
			// States belong to positions (README): a renamed limit keeps the
			// state of its position.
			for j := range min(len(ns), len(next)) {
				if ns[j] != next[j] {
					if _, err := db.Exec(ctx, `UPDATE rl.state SET name = $3 WHERE key = $1 AND name = $2`, key, ns[j], next[j]); err != nil {
						return err
					}
					if e, ok := expires[ns[j]]; ok {
						expires[next[j]] = e
						delete(expires, ns[j])
					}
				}
			}
			limits, ns = st.Limits, next
		}
		for j, s := range st.SetStates {
			if err := writeState(ctx, db, key, ns[j], s, written); err != nil {
				return err
			}
			expires[ns[j]] = written
		}
		var (
			ds    []vectors.Decision
			index int
			err   error
		)
		switch {
		case st.Op == "reset":
			_, err = db.Exec(ctx, `SELECT rl.rl_reset($1)`, key)
			clear(expires)
		case via == viaBatch:
			ds, index, err = batchStep(ctx, db, key, limits, st)
			if err == nil && writes(st, ds) {
				for j, d := range ds {
					expires[limits[j].Name] = expiresAt(st.Now, d.ResetAfter)
				}
			}
		case len(limits) == 1:
			fn := "rl.rl_allow_us"
			switch st.Op {
			case "peek":
				fn = "rl.rl_peek_us"
			case "settle":
				fn = "rl.rl_settle_us"
			}
			l := limits[0]
			var d vectors.Decision
			var now int64
			err = db.QueryRow(ctx, `SELECT allowed, lim, remaining, reset_after_us, retry_after_us, delay_us, now_us, next_after_us
				FROM `+fn+`($1, $2, $3, $4, $5, $6, $7, $8)`,
				key, algName(l.Algorithm), l.Limit, l.Window, st.Cost, l.Rate, l.Name, st.Now).
				Scan(&d.Allowed, &d.Limit, &d.Remaining, &d.ResetAfter, &d.RetryAfter, &d.Delay, &now, &d.NextAfter)
			if err == nil {
				if now != st.Now {
					return fail("now_us %d, want %d", now, st.Now)
				}
				ds = append(ds, d)
				if writes(st, ds) {
					expires[l.Name] = expiresAt(st.Now, d.ResetAfter)
				}
			}
		default:
			fn := "rl.rl_allow_multi"
			switch st.Op {
			case "peek":
				fn = "rl.rl_peek_multi"
			case "settle":
				fn = "rl.rl_settle_multi"
			}
			type jl struct {
				Name      string `json:"name"`
				Algorithm int32  `json:"algorithm"`
				Limit     int64  `json:"limit"`
				WindowUS  int64  `json:"window_us"`
				Rate      int64  `json:"rate"`
			}
			var js []jl
			for _, l := range limits {
				js = append(js, jl{l.Name, l.Algorithm, l.Limit, l.Window, l.Rate})
			}
			b, _ := json.Marshal(js)
			const cols = `SELECT ord, name, allowed, lim, remaining, reset_after_us, retry_after_us, delay_us, deciding, now_us, next_after_us`
			var rows pgx.Rows
			if via == viaArrays {
				var (
					algs              []int32
					lims, wins, rates []int64
				)
				for _, l := range limits {
					algs, lims, wins, rates = append(algs, l.Algorithm), append(lims, l.Limit), append(wins, l.Window), append(rates, l.Rate)
				}
				if st.Op == "settle" {
					rows, err = db.Query(ctx, cols+` FROM rl.rl_settle_decide($1, $2, $3, $4, $5, $6, $7, $8)`,
						key, ns, algs, lims, wins, rates, st.Cost, st.Now)
				} else {
					rows, err = db.Query(ctx, cols+` FROM rl.rl_decide_multi($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
						key, ns, algs, lims, wins, rates, st.Cost, st.Now, st.Op == "take")
				}
			} else {
				rows, err = db.Query(ctx, cols+` FROM `+fn+`($1, $2::jsonb, $3, $4)`, key, string(b), st.Cost, st.Now)
			}
			if err == nil {
				index = -1
				for rows.Next() {
					var (
						d        vectors.Decision
						ord      int
						name     string
						deciding bool
						now      int64
					)
					if err = rows.Scan(&ord, &name, &d.Allowed, &d.Limit, &d.Remaining, &d.ResetAfter, &d.RetryAfter,
						&d.Delay, &deciding, &now, &d.NextAfter); err != nil {
						break
					}
					if ord != len(ds) || name != limits[ord].Name || now != st.Now {
						return fail("row ord %d name %q now %d out of order", ord, name, now)
					}
					if deciding {
						if index >= 0 {
							return fail("two deciding rows")
						}
						index = ord
					}
					ds = append(ds, d)
				}
				rows.Close()
				if err == nil {
					err = rows.Err()
				}
				if err == nil && writes(st, ds) {
					for j, d := range ds {
						expires[limits[j].Name] = expiresAt(st.Now, d.ResetAfter)
					}
				}
			}
		}
		want := st.Expect
		var pe *pgconn.PgError
		switch {
		case want.ErrorCode != 0:
			code := fmt.Sprintf("RL%03d", want.ErrorCode)
			if !errors.As(err, &pe) || pe.Code != code {
				return fail("got error %v, want %s (%s)", err, code, want.Error)
			}
			if i := errorIndex(pe.Detail); i != want.Index {
				return fail("error index %d (detail %q), want %d", i, pe.Detail, want.Index)
			}
		case err != nil:
			return fail("unexpected error %v", err)
		case st.Op != "reset":
			if index != want.Index {
				return fail("index %d, want %d", index, want.Index)
			}
			if !slices.Equal(ds, want.Decisions) {
				return fail("decisions\n got %+v\nwant %+v", ds, want.Decisions)
			}
		}
		rows, err := readRows(ctx, db, key, ns)
		if err != nil {
			return err
		}
		for j, w := range want.States {
			if j >= len(rows) {
				break
			}
			r := rows[j]
			if !stateEqual(r.state, w) {
				return fail("row %q: state %+v, want %+v", ns[j], r.state, w)
			}
			if e, ok := expires[ns[j]]; ok != r.found || r.found && r.expires != e {
				return fail("row %q: found %v expires_at %d, want found %v expires_at %d", ns[j], r.found, r.expires, ok, e)
			}
		}
	}
	return nil
}

// writes reports whether a step that decided ds wrote its rows: an
// admitted take of a cost above 0, or a settle of a delta other than 0.
func writes(st vectors.Step, ds []vectors.Decision) bool {
	switch st.Op {
	case "take":
		return st.Cost > 0 && !slices.ContainsFunc(ds, func(d vectors.Decision) bool { return !d.Allowed })
	case "settle":
		return st.Cost != 0
	}
	return false
}

// batchStep decides one vector step as a batch of one request
// (rl_decide_batch), returning an error row as the *pgconn.PgError the
// other functions raise (its message as DETAIL, which names the limit).
func batchStep(ctx context.Context, db *pgxpool.Pool, key string, limits []vectors.Limit, st vectors.Step) ([]vectors.Decision, int, error) {
	var (
		ns                []string
		algs              []int32
		lims, wins, rates []int64
	)
	for _, l := range limits {
		ns, algs = append(ns, l.Name), append(algs, l.Algorithm)
		lims, wins, rates = append(lims, l.Limit), append(wins, l.Window), append(rates, l.Rate)
	}
	rows, err := db.Query(ctx, `SELECT req, ord, name, allowed, lim, remaining, reset_after_us, retry_after_us, delay_us,
			deciding, now_us, error_code, error_message, next_after_us
		FROM rl.rl_decide_batch(ARRAY[$1::text], $2, $3, $4, $5, $6, ARRAY[$7::bigint], ARRAY[$8::integer],
			ARRAY[$9::bigint], ARRAY[$10::boolean], ARRAY[$11::boolean])`,
		key, ns, algs, lims, wins, rates, st.Cost, len(limits), st.Now, st.Op == "take", st.Op == "settle")
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var (
		ds    []vectors.Decision
		index = -1
	)
	for rows.Next() {
		var (
			req           int32
			ord           *int32
			name          *string
			d             vectors.Decision
			lim, rem, ra  *int64
			rt, dl, now   *int64
			na            *int64
			deciding      bool
			code, message *string
		)
		if err := rows.Scan(&req, &ord, &name, &d.Allowed, &lim, &rem, &ra, &rt, &dl, &deciding, &now, &code, &message, &na); err != nil {
			return nil, 0, err
		}
		if req != 0 {
			return nil, 0, fmt.Errorf("row of request %d", req)
		}
		if code != nil {
			if ord != nil || len(ds) > 0 {
				return nil, 0, fmt.Errorf("error row %s after decisions", *code)
			}
			return nil, 0, &pgconn.PgError{Code: *code, Message: *message, Detail: limitIndexIn.FindString(*message)}
		}
		if ord == nil || int(*ord) != len(ds) || *name != limits[*ord].Name || now == nil || *now != st.Now {
			return nil, 0, fmt.Errorf("row ord %v name %v now %v out of order", ord, name, now)
		}
		d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter, d.Delay, d.NextAfter = *lim, *rem, *ra, *rt, *dl, *na
		if deciding {
			if index >= 0 {
				return nil, 0, fmt.Errorf("two deciding rows")
			}
			index = int(*ord)
		}
		ds = append(ds, d)
	}
	return ds, index, rows.Err()
}

// limitIndexIn finds "limit index N" in an error row's message.
var limitIndexIn = regexp.MustCompile(`limit index \d+`)

// expiryGrain is the grain of the stored expires_at (sql/README.md,
// "Expiry"; migration 0013): 2^26 µs.
const expiryGrain = 1 << 26

// expiresAt is the expires_at the documentation promises for a write at now
// of a decision with this reset_after: the time the state is fresh again,
// now + reset_after, rounded up to a multiple of expiryGrain.
func expiresAt(now, resetAfter int64) int64 {
	fresh := now + resetAfter
	if r := fresh % expiryGrain; r != 0 {
		return fresh + expiryGrain - r
	}
	return fresh
}
