package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// takeManySQL calls rl.rl_decide_multi: rl_allow_multi and rl_peek_multi
// with arrays instead of JSON, executable by the rl_app role.
const takeManySQL = "SELECT t.ord, t.allowed, t.lim, t.remaining, t.reset_after_us, t.retry_after_us, t.delay_us, t.next_after_us, t.deciding " +
	"FROM rl.rl_decide_multi($1, $2, $3, $4, $5, $6, $7, $8, $9) t"

// takeManyFastSQL also turns off synchronous commit for its transaction.
const takeManyFastSQL = "SELECT t.ord, t.allowed, t.lim, t.remaining, t.reset_after_us, t.retry_after_us, t.delay_us, t.next_after_us, t.deciding " +
	"FROM (SELECT set_config('synchronous_commit', 'off', true)) c, rl.rl_decide_multi($1, $2, $3, $4, $5, $6, $7, $8, $9) t"

// takeShadowSQL and takeShadowFastSQL pass a policy's shadow flags too
// (migration 18): rl_decide_multi decides them as store.Policy.Decide.
const (
	takeShadowSQL = "SELECT t.ord, t.allowed, t.lim, t.remaining, t.reset_after_us, t.retry_after_us, t.delay_us, t.next_after_us, t.deciding " +
		"FROM rl.rl_decide_multi($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) t"
	takeShadowFastSQL = "SELECT t.ord, t.allowed, t.lim, t.remaining, t.reset_after_us, t.retry_after_us, t.delay_us, t.next_after_us, t.deciding " +
		"FROM (SELECT set_config('synchronous_commit', 'off', true)) c, rl.rl_decide_multi($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) t"
)

// shadowFlags is a policy's shadow flag per limit, nil without any.
func shadowFlags(p *store.Policy) []bool {
	if !p.Shadowed() {
		return nil
	}
	sh := make([]bool, p.Len())
	for i := range sh {
		sh[i] = p.Shadow(i)
	}
	return sh
}

// settleManySQL calls rl.rl_settle_decide (migration 17): rl_settle_multi
// with arrays instead of JSON, executable by the rl_app role.
const settleManySQL = "SELECT t.ord, t.allowed, t.lim, t.remaining, t.reset_after_us, t.retry_after_us, t.delay_us, t.next_after_us, t.deciding " +
	"FROM rl.rl_settle_decide($1, $2, $3, $4, $5, $6, $7, $8) t"

// settleManyFastSQL also turns off synchronous commit for its transaction.
const settleManyFastSQL = "SELECT t.ord, t.allowed, t.lim, t.remaining, t.reset_after_us, t.retry_after_us, t.delay_us, t.next_after_us, t.deciding " +
	"FROM (SELECT set_config('synchronous_commit', 'off', true)) c, rl.rl_settle_decide($1, $2, $3, $4, $5, $6, $7, $8) t"

// settleShadowSQL settles a policy with shadow limits as
// store.Policy.Decide settles it (migration 19; at 18 every limit alike):
// rl.rl_decide_batch with one request, its settle flag and the policy's
// shadow flags ($9). rl_settle_decide takes no shadow flags. An error of
// the request comes as a row (error_code, error_message), not raised.
// settleShadowFastSQL also turns off synchronous commit.
const (
	settleShadowSQL = "SELECT b.ord, b.allowed, b.lim, b.remaining, b.reset_after_us, b.retry_after_us, b.delay_us, b.next_after_us, b.deciding, b.error_code, b.error_message " +
		"FROM rl.rl_decide_batch(ARRAY[$1::text], $2, $3, $4, $5, $6, ARRAY[$7::bigint], ARRAY[cardinality($2::text[])], ARRAY[$8::bigint], NULL, '{true}', $9) b"
	settleShadowFastSQL = "SELECT b.ord, b.allowed, b.lim, b.remaining, b.reset_after_us, b.retry_after_us, b.delay_us, b.next_after_us, b.deciding, b.error_code, b.error_message " +
		"FROM (SELECT set_config('synchronous_commit', 'off', true)) c, " +
		"rl.rl_decide_batch(ARRAY[$1::text], $2, $3, $4, $5, $6, ARRAY[$7::bigint], ARRAY[cardinality($2::text[])], ARRAY[$8::bigint], NULL, '{true}', $9) b"
)

// decideSQL is the one-round-trip path: PL/pgSQL decides, NextAfter
// included (next_after_us, migration 16), or settles (migration 17).
func (s *Store) decideSQL(ctx context.Context, conn *pgxpool.Conn, req *store.Request, out []core.Decision) (int, error) {
	n := req.Policy.Len()
	algs := make([]int32, n)
	lims, wins, rates := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, l := range req.Policy.Limits() {
		algs[i], lims[i], wins[i], rates[i] = int32(l.Algorithm), l.Limit, l.Window, l.Rate
	}
	var now *int64
	if s.cfg.RequestClock {
		now = &req.Now
	}
	var (
		rows pgx.Rows
		err  error
	)
	fast := s.cfg.Durability == DurabilityFast
	switch {
	case req.Op == store.Settle && req.Policy.Shadowed():
		q := settleShadowSQL
		if fast {
			q = settleShadowFastSQL
		}
		rows, err = conn.Query(ctx, q, FullKey(req.Prefix, req.Key), req.Policy.Names(), algs, lims, wins, rates, req.Cost, now, shadowFlags(req.Policy))
		if err != nil {
			return 0, err
		}
		return scanSettleShadow(rows, out)
	case req.Op == store.Settle:
		q := settleManySQL
		if fast {
			q = settleManyFastSQL
		}
		rows, err = conn.Query(ctx, q, FullKey(req.Prefix, req.Key), req.Policy.Names(), algs, lims, wins, rates, req.Cost, now)
	case req.Policy.Shadowed():
		q := takeShadowSQL
		if fast && req.Op == store.Take {
			q = takeShadowFastSQL
		}
		rows, err = conn.Query(ctx, q, FullKey(req.Prefix, req.Key), req.Policy.Names(), algs, lims, wins, rates, req.Cost, now, req.Op == store.Take, shadowFlags(req.Policy))
	default:
		q := takeManySQL
		if fast && req.Op == store.Take {
			q = takeManyFastSQL
		}
		rows, err = conn.Query(ctx, q, FullKey(req.Prefix, req.Key), req.Policy.Names(), algs, lims, wins, rates, req.Cost, now, req.Op == store.Take)
	}
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	index := 0
	for rows.Next() {
		var (
			ord      int32
			d        core.Decision
			deciding bool
		)
		if err := rows.Scan(&ord, &d.Allowed, &d.Limit, &d.Remaining, &d.ResetAfter, &d.RetryAfter, &d.Delay, &d.NextAfter, &deciding); err != nil {
			return 0, err
		}
		if int(ord) < n {
			out[ord] = d
		}
		if deciding {
			index = int(ord)
		}
	}
	return index, rows.Err()
}

// scanSettleShadow reads settleShadowSQL's rows into out; a request's error
// row is returned as the error the functions raise (code and message).
func scanSettleShadow(rows pgx.Rows, out []core.Decision) (int, error) {
	defer rows.Close()
	index := 0
	for rows.Next() {
		var (
			ord                                      pgtype.Int4
			allowed, deciding                        pgtype.Bool
			lim, remaining, resetAfter, retry, delay pgtype.Int8
			next                                     pgtype.Int8
			code, msg                                pgtype.Text
		)
		if err := rows.Scan(&ord, &allowed, &lim, &remaining, &resetAfter, &retry, &delay, &next, &deciding, &code, &msg); err != nil {
			return 0, err
		}
		if code.Valid {
			rows.Close()
			return 0, &pgconn.PgError{Severity: "ERROR", Code: code.String, Message: msg.String}
		}
		if !ord.Valid || int(ord.Int32) >= len(out) || ord.Int32 < 0 {
			return 0, fmt.Errorf("pgstore: rl_decide_batch returned limit %v of %d", ord, len(out))
		}
		out[ord.Int32] = core.Decision{Allowed: allowed.Bool, Limit: lim.Int64, Remaining: remaining.Int64,
			ResetAfter: resetAfter.Int64, RetryAfter: retry.Int64, Delay: delay.Int64, NextAfter: next.Int64}
		if deciding.Bool {
			index = int(ord.Int32)
		}
	}
	return index, rows.Err()
}
