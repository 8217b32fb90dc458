package migrations_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/difftest"
	"github.com/rlcore/rl/internal/testkit/sqldecider"
	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/tests/vectors/vectorstest"
)

const nativeInstallHint = "install the native step first: bash scripts/test-setup.sh (make -C sql/native install, as root)"

// TestNative: the optional native step (sql/native, the extension
// rl_native) in a database of its own, migrated by an ordinary owner. The C
// rl._eval and rl._settle give what the PL/pgSQL ones give for odd input
// (NULLs, logs that are unsorted, hold NULLs, start at another index or
// have two dimensions, recorded parameters valid or not, states in debt);
// enabled, they pass every vector, pure and through the table functions,
// the differential test against the Go core and random batches
// (rl_decide_batch) against it; disabled, the catalog is as before. The
// same build at a schema before migration 17 (TestNativeBefore17).
func TestNative(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	su, owner := ownedDatabase(t)
	require.NoError(t, migrations.Up(ctx, owner))
	conn := connect(t, su)
	var offered bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'rl_native')`).Scan(&offered))
	if !offered {
		t.Fatalf("the server does not offer the extension rl_native: %s", nativeInstallHint)
	}
	before := catalog(t, su)
	_, err := conn.Exec(ctx, `CREATE EXTENSION rl_native`)
	require.NoError(t, err)
	requireSameCatalog(t, before, catalog(t, su), "CREATE EXTENSION rl_native alone")

	t.Run("same as PL/pgSQL", func(t *testing.T) { compareNative(t, conn) })

	var msg string
	require.NoError(t, conn.QueryRow(ctx, `SELECT rl_native.enable()`).Scan(&msg))
	require.Equal(t, "rl._eval and rl._settle are native (were plpgsql)", msg)
	require.NoError(t, conn.QueryRow(ctx, `SELECT rl_native.enable()`).Scan(&msg))
	require.Equal(t, "rl._eval and rl._settle are already native", msg)
	for _, fn := range []string{"rl._eval", "rl._settle"} {
		var lang string
		require.NoError(t, conn.QueryRow(ctx, `SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
			WHERE p.oid = $1::regproc`, fn).Scan(&lang))
		require.Equal(t, "c", lang, fn)
	}

	cfg, err := pgxpool.ParseConfig(su)
	require.NoError(t, err)
	cfg.MaxConns = 20
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	d := sqldecider.New(pool)
	t.Run("vectors/pure/single", func(t *testing.T) { vectorstest.Run(t, d, false) })
	t.Run("vectors/pure/all", func(t *testing.T) { vectorstest.Run(t, d, true) })
	t.Run("vectors/table", func(t *testing.T) { runVectorsTable(t, pool) })
	t.Run("batch", func(t *testing.T) { runBatchDifferential(t, pool, "native-bd", 20260104, 60) })
	t.Run("differential", func(t *testing.T) {
		r := difftest.Runner{Workers: 4, Deciders: []difftest.Decider{
			{Name: "native", Decider: vectorstest.Native{}},
			{Name: "sql+c", Decider: d},
		}}
		n := 1500
		if testing.Short() || raceEnabled {
			n = 500
		}
		t.Log(r.Check(t, difftest.Config{}, 20260102, n))
		stats := r.CheckSequences(t, difftest.Extremes())
		t.Logf("extremes: %d sequences, %d steps", stats.Sequences, stats.Steps)
	})
	pool.Close()

	require.NoError(t, conn.QueryRow(ctx, `SELECT rl_native.disable()`).Scan(&msg))
	require.Equal(t, "rl._eval and rl._settle are the PL/pgSQL port again", msg)
	requireSameCatalog(t, before, catalog(t, su), "rl_native.disable()")
	_, err = conn.Exec(ctx, `DROP EXTENSION rl_native`)
	require.NoError(t, err)
	requireSameCatalog(t, before, catalog(t, su), "DROP EXTENSION rl_native")
}

// TestNativeBefore17: the build of rl_native that serves migration 17
// serves a schema before it too. At 16 its rl_eval, called with
// rl._eval's 12 arguments there (a state records no parameters), gives
// what the PL/pgSQL rl._eval of 16 gives on every combination of a grid of
// limits, states and calls; enable() makes that rl._eval native as version
// 1 did, and disable() puts it back. Migration 17 replaces the native
// rl._eval (a new signature), after which enable() makes rl._eval and
// rl._settle native.
func TestNativeBefore17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	su, owner := ownedDatabase(t)
	m, err := migrations.Open(ctx, owner)
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Goto(ctx, 16))
	conn := connect(t, su)
	_, err = conn.Exec(ctx, `CREATE EXTENSION rl_native`)
	require.NoError(t, err, nativeInstallHint)
	_, err = conn.Exec(ctx, `CREATE FUNCTION pg_temp.eval12(integer, bigint, bigint, bigint, integer, bigint, bigint,
			bigint, bigint[], bigint, bigint, boolean) RETURNS rl._eval_result LANGUAGE c IMMUTABLE
		AS '$libdir/rl_native', 'rl_eval'`)
	require.NoError(t, err)
	const t0 = int64(1767225600000000)
	var calls, differ int
	require.NoError(t, conn.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE pg_temp.eval12(a, l, w, r, sa, st, sx, sy, lg, $1::bigint, c, tk)::text
		                                       IS DISTINCT FROM rl._eval(a, l, w, r, sa, st, sx, sy, lg, $1::bigint, c, tk)::text)
		  FROM unnest('{1,2,3,4,5,6}'::integer[]) a, unnest('{1,3}'::bigint[]) l, unnest('{7,1000000}'::bigint[]) w,
		       unnest('{0,2}'::bigint[]) r0, LATERAL (SELECT CASE WHEN a <= 3 THEN 0 ELSE r0 END) rr(r),
		       unnest('{0,1,2,3,4,5,6}'::integer[]) sa,
		       unnest(ARRAY[0, $1::bigint - 500000, $1::bigint + 300000]) st0,
		       unnest('{0,3,2000000}'::bigint[]) sx0,
		       LATERAL (SELECT CASE WHEN sa IN (0, 3) THEN 0 ELSE st0 END,
		                       CASE WHEN sa IN (0, 3) THEN 0 WHEN sa = 6 THEN sx0 % 3 ELSE sx0 END,
		                       CASE WHEN sa = 6 THEN greatest(0, st0 - 1000000) WHEN sa = 2 THEN sx0 % 5 ELSE 0 END,
		                       CASE WHEN sa = 3 AND sx0 > 0 THEN ARRAY[$1::bigint - 10, $1::bigint] ELSE '{}' END) s(st, sx, sy, lg),
		       unnest('{0,1,2,4}'::bigint[]) c, unnest('{true,false}'::boolean[]) tk`, t0).Scan(&calls, &differ))
	require.Zero(t, differ, "of %d calls", calls)
	t.Logf("%d calls, the same", calls)

	var msg string
	require.NoError(t, conn.QueryRow(ctx, `SELECT rl_native.enable()`).Scan(&msg))
	require.Equal(t, "rl._eval is native (was plpgsql)", msg)
	var allowed bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT allowed FROM rl.rl_allow('k', 'gcra', 5, '1 minute')`).Scan(&allowed))
	require.True(t, allowed)
	require.NoError(t, conn.QueryRow(ctx, `SELECT rl_native.disable()`).Scan(&msg))
	require.Equal(t, "rl._eval is the PL/pgSQL port again", msg)

	require.NoError(t, conn.QueryRow(ctx, `SELECT rl_native.enable()`).Scan(&msg))
	require.Equal(t, "rl._eval is native (was plpgsql)", msg)
	require.NoError(t, m.Goto(ctx, migrations.Latest))
	require.NoError(t, conn.QueryRow(ctx, `SELECT rl_native.disable()`).Scan(&msg))
	require.Equal(t, "rl._eval is not native: nothing to do", msg, "17 replaced the native rl._eval")
	require.NoError(t, conn.QueryRow(ctx, `SELECT rl_native.enable()`).Scan(&msg))
	require.Equal(t, "rl._eval and rl._settle are native (were plpgsql)", msg)
	require.NoError(t, conn.QueryRow(ctx, `SELECT allowed FROM rl.rl_allow('k', 'gcra', 5, '1 minute')`).Scan(&allowed))
	require.True(t, allowed)
	require.NoError(t, conn.QueryRow(ctx, `SELECT rl_native.disable()`).Scan(&msg))
	require.Equal(t, "rl._eval and rl._settle are the PL/pgSQL port again", msg)
}

// TestNativeAt18: the build of rl_native that caps a settle's debt too
// large for a state at migration 19 refuses it at 18 (RL006), as 18's
// PL/pgSQL does: it reads the schema's semantics from rl._eval_result,
// which has settle_caps since 19. At 18 it gives what 18's PL/pgSQL gives
// on the odd input of TestNative and on debts too large for a state of
// every kind (err 6 there); enabled, a settle of such a debt is RL006.
// Migrated to 19 (which puts the PL/pgSQL port back) and enabled again,
// the same build caps the same debt.
func TestNativeAt18(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	su, owner := ownedDatabase(t)
	m, err := migrations.Open(ctx, owner)
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Goto(ctx, 18))
	conn := connect(t, su)
	_, err = conn.Exec(ctx, `CREATE EXTENSION rl_native`)
	require.NoError(t, err, nativeInstallHint)
	t.Run("same as PL/pgSQL", func(t *testing.T) { compareNative(t, conn) })
	// Debts no state can record: a fixed window's count, a sliding window's
	// weighted counts, a bucket's level, GCRA's arrival time.
	huge := `SELECT a, %[1]s(a, l, w, 0, a, t, x, y, '{}', l, w, CASE WHEN a > 3 THEN l ELSE 0 END, 1767225600000000, 1099511627776)::text
		  FROM (VALUES (1, 10, 1000000, 1767225600000000, 4611686018427387000, 0),
		               (2, 4, 1000000000, 1767225600000000, 2305843009, 0),
		               (4, 1000000, 1000000000000, 1767225600000000, 4611686018427387000, 0),
		               (6, 1, 1000000000000000, 1767225600000000, 0, 0)) v(a, l, w, t, x, y) ORDER BY a`
	results := func(fn string) map[int32]string {
		rows, err := conn.Query(ctx, fmt.Sprintf(huge, fn))
		require.NoError(t, err)
		out := map[int32]string{}
		for rows.Next() {
			var a int32
			var r string
			require.NoError(t, rows.Scan(&a, &r))
			out[a] = r
		}
		require.NoError(t, rows.Err())
		return out
	}
	at18, plpgsql := results("rl_native.settle"), results("rl._settle")
	require.Equal(t, plpgsql, at18, "at 18")
	for a, r := range at18 {
		require.True(t, strings.HasPrefix(r, "(6,"), "at 18, algorithm %d: refused, not %s", a, r)
	}
	var msg string
	require.NoError(t, conn.QueryRow(ctx, `SELECT rl_native.enable()`).Scan(&msg))
	require.Equal(t, "rl._eval and rl._settle are native (were plpgsql)", msg)
	_, err = conn.Exec(ctx, `SELECT rl.rl_settle_us('k', 'gcra', 1, 1000000000000000, 1099511627776, 1, now_us => 1767225600000000)`)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "RL006", pe.Code)

	require.NoError(t, m.Goto(ctx, migrations.Latest))
	require.NoError(t, conn.QueryRow(ctx, `SELECT rl_native.disable()`).Scan(&msg))
	require.Equal(t, "rl._eval is not native: nothing to do", msg, "19 replaced the native steps")
	at19, plpgsql := results("rl_native.settle"), results("rl._settle")
	require.Equal(t, plpgsql, at19, "at 19")
	for a, r := range at19 {
		require.True(t, strings.HasPrefix(r, "(0,"), "at 19, algorithm %d: capped, not %s", a, r)
	}
	require.NoError(t, conn.QueryRow(ctx, `SELECT rl_native.enable()`).Scan(&msg))
	require.Equal(t, "rl._eval and rl._settle are native (were plpgsql)", msg)
	var remaining int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT remaining FROM rl.rl_settle_us('k', 'gcra', 1, 1000000000000000, 1099511627776, 1, now_us => 1767225600000000)`).Scan(&remaining))
	require.Zero(t, remaining)
	require.NoError(t, conn.QueryRow(ctx, `SELECT rl_native.disable()`).Scan(&msg))
	require.Equal(t, "rl._eval and rl._settle are the PL/pgSQL port again", msg)
}

// compareNative calls rl_native.eval and rl_native.settle and the PL/pgSQL
// rl._eval and rl._settle with the same arguments, many of them at or past
// a bound, NULL, or malformed, with recorded parameters (l, w, r) of the
// limit, of another, invalid or none, and requires the same
// rl._eval_result.
func compareNative(t *testing.T, conn *pgx.Conn) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(21, 13))
	const t0 = int64(1767225600000000)
	pick := func(vs ...any) any { return vs[rng.IntN(len(vs))] }
	i64 := func(vs ...int64) any {
		if rng.IntN(12) == 0 {
			return nil
		}
		return vs[rng.IntN(len(vs))]
	}
	logs := []string{"{}", "[3:4]={1,2}", "{{1,2},{3,4}}", "{1,NULL}", "{5,4}", "{-1}", "{4611686018427387905}"}
	for range 4 {
		var e []string
		for v, n := t0-2_000_000, rng.IntN(12); n > 0; n-- {
			v += rng.Int64N(400_000)
			e = append(e, fmt.Sprint(v))
		}
		logs = append(logs, "{"+strings.Join(e, ",")+"}", fmt.Sprintf("[0:%d]={%s}", max(len(e)-1, 0), strings.Join(e, ",")))
	}
	long := make([]string, 4097)
	for i := range long {
		long[i] = fmt.Sprint(t0 + int64(i))
	}
	logs = append(logs, "{"+strings.Join(long, ",")+"}")
	b := &pgx.Batch{}
	const n = 4000
	args := make([][]any, n)
	// Every algorithm of the table, and the first number past it (unknown).
	var algs []int32
	for _, a := range core.Algorithms() {
		algs = append(algs, int32(a))
	}
	unknown := int32(len(algs) + 1)
	for i := range n {
		var lg any = logs[rng.IntN(len(logs))]
		if rng.IntN(12) == 0 {
			lg = nil
		}
		a := []any{
			pick(nil, int32(-1), int32(0), algs[rng.IntN(len(algs))], algs[rng.IntN(len(algs))], algs[rng.IntN(len(algs))], unknown),
			i64(0, 1, 2, 3, 10, 4096, 4097, 1<<40, 1<<40+1, -1),
			i64(0, 1, 7, 1_000_000, 60_000_000, 1_000_000_000_000_000, 1_000_000_000_000_001),
			i64(-1, 0, 0, 0, 1, 3, 10, 1<<40, 1<<40+1),
			pick(nil, int32(0), algs[rng.IntN(len(algs))], algs[rng.IntN(len(algs))], algs[rng.IntN(len(algs))], unknown, int32(-1)),
			i64(0, 1, t0-1_500_000, t0-500_000, t0, t0+300_000, t0+5_000_000, 1<<62, 1<<62+1, -1),
			i64(0, 1, 2, 3, 9, 10, 1_000_000, 10_000_000, 1<<40, 1<<40+1, 1<<62+1, -1),
			i64(0, 0, 1, t0-2_000_000, t0-1_000_000, t0, t0+1_000_000, 1<<62, -1),
			lg,
			i64(-1, 0, t0, t0, t0+250_000, t0+1_000_000, 253402300799999999, 253402300800000000),
			i64(-1, 0, 0, 1, 1, 2, 3, 10, 4096, 1<<40, 1<<40+1),
			pick(nil, true, true, false),
			i64(0, 0, 0, 1, 3, 10, 100, 4096, 1<<40, -1),         // l
			i64(0, 0, 0, 1, 7, 1_000_000, 60_000_000, 1<<40, -1), // w
			i64(0, 0, 0, 1, 3, 10, 50, 1<<40, -1),                // r
		}
		if i%4 != 0 { // mostly well-formed: a limit and a state of one algorithm, near t0
			alg := algs[rng.IntN(len(algs))]
			sa := pick(alg, alg, alg, int32(0), algs[rng.IntN(len(algs))])
			lim := int64(pick(int64(1), int64(3), int64(10), int64(100)).(int64))
			a[0], a[1], a[2] = alg, lim, int64(pick(int64(1_000_000), int64(60_000_000), int64(7)).(int64))
			a[3] = int64(0)
			if alg > 3 {
				a[3] = int64(pick(int64(0), int64(1), int64(3), int64(50)).(int64))
			}
			a[4] = sa
			ts := []int64{t0 - 1_500_000, t0 - 500_000, t0 - 3, t0, t0 + 300_000, t0 + 2_000_000}
			a[5], a[6], a[7] = ts[rng.IntN(len(ts))], rng.Int64N(20_000_000), int64(0)
			if sa == 2 {
				a[6], a[7] = rng.Int64N(12), rng.Int64N(12)
			} else if sa == 6 {
				a[6] = rng.Int64N(60)
				a[7] = a[5].(int64) - rng.Int64N(3_000_000)
			} else if sa == 3 || sa == 0 {
				a[5], a[6] = int64(0), int64(0)
			} else if sa == 1 {
				a[6] = rng.Int64N(12)
			}
			if sa != 3 {
				a[8] = "{}"
			}
			a[9] = t0 + rng.Int64N(2_000_000) - 1_000_000
			a[10] = int64(pick(int64(0), int64(1), int64(1), int64(2), int64(3), int64(11), int64(101)).(int64))
			a[11] = pick(true, true, false, nil)
			// The parameters that wrote the state: the limit's (read
			// exactly, a debt kept), another limit's (carried over), none
			// (a legacy state).
			if sa.(int32) != 0 {
				switch rng.IntN(3) {
				case 0:
					a[12], a[13], a[14] = int64(0), int64(0), int64(0)
				case 1:
					a[12], a[13], a[14] = lim, a[2], int64(0)
					if sa.(int32) > 3 {
						a[14] = lim
						if r := a[3].(int64); r != 0 {
							a[14] = r
						}
					}
					sa := sa.(int32)
					if sa != alg { // the limit's parameters, recorded by another algorithm
						a[14] = int64(0)
						if sa > 3 {
							a[14] = lim
						}
					}
					if rng.IntN(3) == 0 && sa != 3 { // in debt
						a[6] = []int64{1 << 40, 1 << 61, 1 << 62, a[6].(int64) * 1000}[rng.IntN(4)]
						if sa == 6 {
							a[6] = rng.Int64N(60)
							a[5] = a[5].(int64) + rng.Int64N(1<<40)
						}
					}
				default:
					a[12] = int64(pick(int64(1), int64(2), int64(5), int64(40)).(int64))
					a[13] = int64(pick(int64(7), int64(1_000_000), int64(31_536_000_000_000)).(int64))
					a[14] = int64(0)
					if sa.(int32) > 3 {
						a[14] = int64(pick(int64(1), int64(3), a[12]).(int64))
					}
				}
			}
		}
		args[i] = a
		b.Queue(`SELECT rl_native.eval($1, $2, $3, $4, $5, $6, $7, $8, $9::text::bigint[], $13, $14, $15, $10, $11, $12)::text,
			rl._eval($1, $2, $3, $4, $5, $6, $7, $8, $9::text::bigint[], $13, $14, $15, $10, $11, $12)::text,
			rl_native.settle($1, $2, $3, $4, $5, $6, $7, $8, $9::text::bigint[], $13, $14, $15, $10, $16)::text,
			rl._settle($1, $2, $3, $4, $5, $6, $7, $8, $9::text::bigint[], $13, $14, $15, $10, $16)::text`,
			append(a, i64(0, 1, -1, 2, -3, 7, 45, 1<<40, -(1<<40), 1<<40+1, -(1<<40)-1, 1<<62))...)
	}
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	ok, settled := 0, 0
	for i := range n {
		var c, pl, cs, pls string
		require.NoError(t, br.QueryRow().Scan(&c, &pl, &cs, &pls), "%v", args[i])
		require.Equal(t, pl, c, "rl_native.eval%v", args[i])
		require.Equal(t, pls, cs, "rl_native.settle%v", args[i])
		if strings.HasPrefix(pl, "(0,") {
			ok++
		}
		if strings.HasPrefix(pls, "(0,") {
			settled++
		}
	}
	t.Logf("%d calls: %d decided and %d settled without an error", n, ok, settled)
}
