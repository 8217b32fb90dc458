// Package sqldecider is core.Decider computed by the SQL port: each call is
// one query of the pure functions of sql/migrations, rl.decide (Take, Peek,
// Settle) and rl.decide_all (TakeAll, PeekAll, SettleAll), which read no
// clock and no table. States go in and come out with the parameters that
// wrote them (core.State L, W, R), as the table rl.state keeps them since
// migration 17.
//
// States go in as arguments and come out as the functions' results, so what
// is compared with the core is the port's decision function itself, bit for
// bit, without the row locking of rl.rl_allow around it (the stores' tests
// and the SQL concurrency tests cover that). It is the adapter the
// differential tests (package internal/testkit/difftest) run beside the native core
// and the WebAssembly module.
//
// Two things are the Go memory's, not the port's. A sliding log is a SQL
// array, which has no capacity: the functions never return ErrLogCapacity,
// so compare them on states whose logs have room (difftest.Runner without
// Exact gives it). A new log is written into the backing array of the
// state's Log when it fits there, as core.Take does, and is a new slice
// otherwise.
package sqldecider

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl/core"
)

// Decider calls the SQL functions through a pool on a database migrated by
// package migrations. It is safe for concurrent use.
type Decider struct {
	pool *pgxpool.Pool
}

var (
	_ core.Decider = (*Decider)(nil)

	errNoPool = errors.New("sqldecider: nil pool")
)

// New returns a Decider querying through pool, which the caller owns.
func New(pool *pgxpool.Pool) *Decider { return &Decider{pool: pool} }

const decideSQL = `SELECT allowed, lim, remaining, reset_after_us, retry_after_us, delay_us, next_after_us, algorithm, t, x, y, log, l, w, r
FROM rl.decide($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`

// decideAllSQL builds the arrays of composites rl.decide_all takes from
// arrays of their fields; the logs are one flat array cut by offsets.
const decideAllSQL = `SELECT ord, allowed, lim, remaining, reset_after_us, retry_after_us, delay_us, next_after_us, idx, algorithm, t, x, y, log, l, w, r
FROM rl.decide_all(
	ARRAY(SELECT ROW(a, l, w, r)::rl.limit_spec
	      FROM unnest($1::integer[], $2::bigint[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS u(a, l, w, r, i)
	      ORDER BY i),
	ARRAY(SELECT ROW(a, t, x, y, ($9::bigint[])[o + 1 : o + n], l, w, r)::rl.state_words
	      FROM unnest($5::integer[], $6::bigint[], $7::bigint[], $8::bigint[], $10::integer[], $11::integer[],
	                  $15::bigint[], $16::bigint[], $17::bigint[])
	           WITH ORDINALITY AS u(a, t, x, y, o, n, l, w, r, i)
	      ORDER BY i),
	$12, $13, $14)`

// Take is core.Take computed by rl.decide.
func (d *Decider) Take(l core.Limit, s core.State, now, cost int64) (core.Decision, core.State, error) {
	dec, n, err := d.decide(l, s, now, cost, "take")
	if err != nil {
		return core.Decision{}, s, err
	}
	return dec, n, nil
}

// Peek is core.Peek computed by rl.decide.
func (d *Decider) Peek(l core.Limit, s core.State, now, cost int64) (core.Decision, error) {
	dec, _, err := d.decide(l, s, now, cost, "peek")
	if err != nil {
		return core.Decision{}, err
	}
	return dec, nil
}

// Settle is core.Settle computed by rl.decide (op settle).
func (d *Decider) Settle(l core.Limit, s core.State, now, delta int64) (core.Decision, core.State, error) {
	dec, n, err := d.decide(l, s, now, delta, "settle")
	if err != nil {
		return core.Decision{}, s, err
	}
	return dec, n, nil
}

func (d *Decider) decide(l core.Limit, s core.State, now, cost int64, op string) (core.Decision, core.State, error) {
	if d.pool == nil {
		return core.Decision{}, s, errNoPool
	}
	log := s.Log
	if log == nil {
		log = []int64{}
	}
	var (
		dec core.Decision
		n   core.State
		nl  []int64
	)
	err := d.pool.QueryRow(context.Background(), decideSQL, int32(l.Algorithm), l.Limit, l.Window, l.Rate,
		int32(s.Algorithm), s.T, s.X, s.Y, log, now, cost, op, s.L, s.W, s.R).
		Scan(&dec.Allowed, &dec.Limit, &dec.Remaining, &dec.ResetAfter, &dec.RetryAfter, &dec.Delay, &dec.NextAfter,
			&n.Algorithm, &n.T, &n.X, &n.Y, &nl, &n.L, &n.W, &n.R)
	if err != nil {
		_, err = mapError(err)
		return core.Decision{}, s, err
	}
	n.Log = store(s.Log, nl)
	return dec, n, nil
}

// TakeAll is core.TakeAll computed by rl.decide_all.
func (d *Decider) TakeAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	return d.all(ls, ss, now, cost, ds, "take")
}

// PeekAll is core.PeekAll computed by rl.decide_all.
func (d *Decider) PeekAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	return d.all(ls, ss, now, cost, ds, "peek")
}

// SettleAll is core.SettleAll computed by rl.decide_all (op settle).
func (d *Decider) SettleAll(ls []core.Limit, ss []core.State, now, delta int64, ds []core.Decision) (int, error) {
	return d.all(ls, ss, now, delta, ds, "settle")
}

func (d *Decider) all(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision, op string) (int, error) {
	if len(ds) < len(ls) { // the rest of ErrLimits is rl.decide_all's to find
		return 0, core.ErrLimits
	}
	if d.pool == nil {
		return 0, errNoPool
	}
	n := len(ls)
	var (
		la                = make([]int32, n)
		lims, wins, rates = make([]int64, n), make([]int64, n), make([]int64, n)
		sa, offs, lens    = make([]int32, len(ss)), make([]int32, len(ss)), make([]int32, len(ss))
		st, sx, sy, logs  = make([]int64, len(ss)), make([]int64, len(ss)), make([]int64, len(ss)), []int64{}
		sl, sw, sr        = make([]int64, len(ss)), make([]int64, len(ss)), make([]int64, len(ss))
	)
	for i, l := range ls {
		la[i], lims[i], wins[i], rates[i] = int32(l.Algorithm), l.Limit, l.Window, l.Rate
	}
	for i, s := range ss {
		sa[i], st[i], sx[i], sy[i] = int32(s.Algorithm), s.T, s.X, s.Y
		sl[i], sw[i], sr[i] = s.L, s.W, s.R
		offs[i], lens[i] = int32(len(logs)), int32(len(s.Log))
		logs = append(logs, s.Log...)
	}
	rows, err := d.pool.Query(context.Background(), decideAllSQL, la, lims, wins, rates, sa, st, sx, sy, logs,
		offs, lens, now, cost, op, sl, sw, sr)
	if err != nil {
		return mapError(err)
	}
	defer rows.Close()
	type res struct {
		st  core.State
		log []int64
	}
	out := make([]res, n)
	idx, got := 0, 0
	for rows.Next() {
		var (
			ord int32
			dec core.Decision
			r   res
			ix  int32
		)
		if err := rows.Scan(&ord, &dec.Allowed, &dec.Limit, &dec.Remaining, &dec.ResetAfter, &dec.RetryAfter,
			&dec.Delay, &dec.NextAfter, &ix, &r.st.Algorithm, &r.st.T, &r.st.X, &r.st.Y, &r.log,
			&r.st.L, &r.st.W, &r.st.R); err != nil {
			return 0, fmt.Errorf("sqldecider: %w", err)
		}
		if ord < 0 || int(ord) >= n {
			return 0, fmt.Errorf("sqldecider: rl.decide_all returned limit %d of %d", ord, n)
		}
		ds[ord], out[ord], idx = dec, r, int(ix)
		got++
	}
	if err := rows.Err(); err != nil {
		return mapError(err)
	}
	if got != n {
		return 0, fmt.Errorf("sqldecider: rl.decide_all returned %d rows for %d limits", got, n)
	}
	if op != "peek" {
		for i := range out {
			out[i].st.Log = store(ss[i].Log, out[i].log)
			ss[i] = out[i].st
		}
	}
	return idx, nil
}

// store returns log written into old's backing array when it fits there,
// else log itself; nil for an empty log.
func store(old, log []int64) []int64 {
	if len(log) == 0 {
		return nil
	}
	if cap(old) >= len(log) {
		return append(old[:0], log...)
	}
	return log
}

var limitIndex = regexp.MustCompile(`^limit index (\d+)$`)

// mapError returns the core.Error an RL0NN SQLSTATE stands for, with the
// limit index its DETAIL names ("limit index N"; 0 when there is none), or
// err wrapped.
func mapError(err error) (int, error) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "RL0") {
		if c, e := strconv.Atoi(pe.Code[3:]); e == nil && c >= int(core.ErrAlgorithm) && c <= int(core.ErrLimits) {
			idx := 0
			if m := limitIndex.FindStringSubmatch(pe.Detail); m != nil {
				idx, _ = strconv.Atoi(m[1])
			}
			return idx, core.Error(c)
		}
	}
	return 0, fmt.Errorf("sqldecider: %w", err)
}
