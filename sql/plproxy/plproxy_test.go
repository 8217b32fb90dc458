package plproxy_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/internal/testkit/tcpproxy"
	"github.com/rlcore/rl/sql/plproxy"
	"github.com/rlcore/rl/sql/plproxy/plproxytest"
	"github.com/rlcore/rl/tests/vectors/vectorstest"
)

var ctx = context.Background()

// randomKey returns a valid UTF-8 key of 0 to 300 bytes mixing ASCII and
// multi-byte characters.
func randomKey(r *rand.Rand) string {
	n := r.IntN(40)
	if r.IntN(4) == 0 {
		n = r.IntN(300)
	}
	var b strings.Builder
	for b.Len() < n {
		switch r.IntN(6) {
		case 0:
			b.WriteRune(rune(0x80 + r.IntN(0x780))) // 2 bytes
		case 1:
			b.WriteRune(rune(0x800 + r.IntN(0xD000-0x800))) // 3 bytes
		case 2:
			b.WriteRune(rune(0x10000 + r.IntN(0x10000))) // 4 bytes
		default:
			b.WriteByte(byte(0x01 + r.IntN(0x7F)))
		}
	}
	return b.String()
}

// TestHashText compares HashText with the server's hashtext for many keys
// of every length up to 300 bytes, so the Go store and the router agree on
// every key's partition.
func TestHashText(t *testing.T) {
	pgtest.SkipShort(t)
	r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	keys := []string{"", "a", "b", "user:42", "api:user:42", strings.Repeat("x", 256), "ключ", "鍵🔑"}
	for n := range 40 { // every tail length, aligned and not
		keys = append(keys, strings.Repeat("k", n), "é"+strings.Repeat("z", n))
	}
	for range 20000 {
		keys = append(keys, randomKey(r))
	}
	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT k, hashtext(k) FROM unnest($1::text[]) WITH ORDINALITY AS u(k, i) ORDER BY i", keys)
	require.NoError(t, err)
	i := 0
	for rows.Next() {
		var (
			k string
			h int32
		)
		require.NoError(t, rows.Scan(&k, &h))
		require.Equal(t, keys[i], k)
		if got := plproxy.HashText(k); got != h {
			t.Fatalf("HashText(%q) = %d, the server's hashtext = %d", k, got, h)
		}
		for _, n := range []int{1, 2, 16, 1024} {
			require.Equal(t, int(uint32(h)&uint32(n-1)), plproxy.Partition(k, n))
		}
		i++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(keys), i)
}

func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		shards     []string
		partitions int
		want       []string
		user, pw   string
		err        string
	}{
		{[]string{"postgres://u:pw@h1:5433/a?sslmode=disable", "postgresql://u:pw@h2/b"}, 4,
			[]string{"dbname=a host=h1 port=5433 sslmode=disable", "dbname=b host=h2", "dbname=a host=h1 port=5433 sslmode=disable", "dbname=b host=h2"},
			"u", "pw", ""},
		{[]string{"postgres://h/a", "postgres://h/b", "postgres://h/c"}, 0,
			[]string{"dbname=a host=h", "dbname=b host=h", "dbname=c host=h", "dbname=a host=h"}, "", "", ""},
		{[]string{"postgres://h/my%20db?user=x&password=it's"}, 0, []string{`dbname='my db' host=h`}, "x", "it's", ""},
		{[]string{"pgx5://h:1/a?x-migrations-table=t&pool_max_conns=4&options=-c%20synchronous_commit%3Doff&connect_timeout=5"}, 0,
			[]string{`connect_timeout=5 dbname=a host=h options='-c synchronous_commit=off' port=1`}, "", "", ""},
		{[]string{"postgres://h/a", "postgres://h/b"}, 3, nil, "", "", "3 partitions: want a power of two from 2"},
		{[]string{"postgres://h/a", "postgres://h/b", "postgres://h/c"}, 2, nil, "", "", "2 partitions"},
		{nil, 0, nil, "", "", "no shards"},
		{[]string{"postgres://u@h/a", "postgres://v@h/b"}, 0, nil, "", "", "shard 1 names another user"},
		{[]string{"postgres://h"}, 0, nil, "", "", "no database name"},
		{[]string{"mysql://h/a"}, 0, nil, "", "", `scheme "mysql"`},
	} {
		parts, user, pw, err := plproxy.Config{Shards: tc.shards, Partitions: tc.partitions}.Layout()
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, parts)
		require.Equal(t, tc.user, user)
		require.Equal(t, tc.pw, pw)
	}
}

// routed are the functions the router has, with the signatures of a shard.
var routed = []string{"rl_allow", "rl_allow_us", "rl_peek", "rl_peek_us", "rl_allow_multi", "rl_peek_multi",
	"rl_decide_multi", "rl_decide_batch", "rl_settle", "rl_settle_us", "rl_settle_multi", "rl_settle_decide",
	"rl_reset", "rl_expire", "enforce_limit"}

func signatures(t *testing.T, url string) map[string]string {
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT p.proname, pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid)
		FROM pg_proc p WHERE p.pronamespace = 'rl'::regnamespace AND p.proname !~ '^_'`)
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var n, s string
		require.NoError(t, rows.Scan(&n, &s))
		out[n] = s
	}
	require.NoError(t, rows.Err())
	return out
}

// TestSignatures: the router's functions have the shard's signatures, and
// every shard function taking a key first is routed.
func TestSignatures(t *testing.T) {
	t.Parallel() // a cluster of its own (plproxytest.New)
	c := plproxytest.New(t, 2, 0)
	router, shard := signatures(t, c.Router), signatures(t, c.Shards[0])
	for _, f := range routed {
		require.NotEmpty(t, shard[f], f)
		require.Equal(t, shard[f], router[f], f)
	}
	for f, s := range shard {
		if strings.HasPrefix(s, "key text") {
			require.Contains(t, routed, f, "%s takes a key but the router does not route it", f)
		}
	}
}

func pool(t *testing.T, url string, max int32) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = max
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func count(t *testing.T, url, query string, args ...any) int64 {
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int64
	require.NoError(t, conn.QueryRow(ctx, query, args...).Scan(&n))
	return n
}

// TestRouting: keys spread over the shards, each row on the shard
// Partition names, over 16 partitions on 2 shards as over 2 on 2; reset
// and expire through the router.
func TestRouting(t *testing.T) {
	t.Parallel()
	for _, parts := range []int{0, 16} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) {
			t.Parallel() // a cluster of its own (plproxytest.New)
			c := plproxytest.New(t, 2, parts)
			router := pool(t, c.Router, 4)
			perShard := make([]int64, len(c.Shards))
			for i := range 200 {
				key := fmt.Sprintf("user:%d", i)
				var allowed bool
				var now int64
				require.NoError(t, router.QueryRow(ctx, "SELECT allowed, now_us FROM rl.rl_allow($1, 'token_bucket', 10, '1 minute', now_us => $2)",
					key, int64(1_767_225_600_000_000)).Scan(&allowed, &now))
				require.True(t, allowed)
				require.Equal(t, int64(1_767_225_600_000_000), now)
				perShard[c.ShardOf(key)]++
			}
			for i, s := range c.Shards {
				require.Equal(t, perShard[i], count(t, s, "SELECT count(*) FROM rl.state"), "shard %d", i)
				require.Greater(t, perShard[i], int64(60), "keys spread over the shards")
			}
			// Each key's row is on its shard alone.
			for i := range 20 {
				key := fmt.Sprintf("user:%d", i)
				for j, s := range c.Shards {
					require.Equal(t, b2i(j == c.ShardOf(key)), count(t, s, "SELECT count(*) FROM rl.state WHERE key = $1", key))
				}
				var n int64
				require.NoError(t, router.QueryRow(ctx, "SELECT rl.rl_reset($1)", key).Scan(&n))
				require.Equal(t, int64(1), n)
			}
			var n int64
			require.NoError(t, router.QueryRow(ctx, "SELECT rl.rl_expire(now_us => $1, batch => NULL)", int64(1<<62)).Scan(&n))
			require.Equal(t, int64(180), n, "rl_expire deletes on every shard")
			for _, s := range c.Shards {
				require.Zero(t, count(t, s, "SELECT count(*) FROM rl.state"))
			}
			// The errors of a shard come through with their SQLSTATE.
			_, err := router.Exec(ctx, "SELECT * FROM rl.rl_allow('k', 'token_bucket', 0, '1 minute')")
			requireCode(t, err, "RL002")
			_, err = router.Exec(ctx, "SELECT * FROM rl.rl_allow(NULL, 'token_bucket', 1, '1 minute')")
			requireCode(t, err, "RL011")
			// The Go/WASM path's lock function says why it cannot run here.
			_, err = router.Exec(ctx, "SELECT * FROM rl.lock_states('k', '{a}')")
			requireCode(t, err, "0A000")
		})
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func requireCode(t *testing.T, err error, code string) {
	t.Helper()
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, code, pe.Code, pe.Message)
}

// TestApply: the router schema never goes into a database with rl.state;
// the partition count cannot change under the keys; apply again is
// harmless, and gives the result types of a router made before the shards'
// migration 16 their next_after_us, and a router made before 17 the
// shards' lock_states and rl_decide_batch; only the owner of the router's functions is mapped (URLs
// without a user keep its mapping, or take over an earlier version's PUBLIC
// one, which goes); the server option default_user is refused.
func TestApply(t *testing.T) {
	t.Parallel() // a cluster of its own (plproxytest.New)
	c := plproxytest.New(t, 2, 4)
	err := plproxy.Apply(ctx, c.Shards[0], plproxy.Config{Shards: c.Shards})
	require.ErrorContains(t, err, "it is a shard or a single node")
	err = plproxy.Apply(ctx, c.Router, plproxy.Config{Shards: c.Shards, Partitions: 8})
	require.ErrorContains(t, err, "has 4 partitions, not 8")
	require.NoError(t, plproxy.Apply(ctx, c.Router, plproxy.Config{Shards: c.Shards, Partitions: 4,
		Options: map[string]string{"connection_lifetime": "1800"}}))
	var opts []string
	conn, err := pgx.Connect(ctx, c.Router)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, conn.QueryRow(ctx, "SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'rl_shards'").Scan(&opts))
	require.Contains(t, opts, "connection_lifetime=1800")
	require.Len(t, opts, 5)
	var d bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT allowed FROM rl.rl_allow('k', 'gcra', 1, '1 second')").Scan(&d))
	require.True(t, d)
	// A router made before the shards' migration 16: its result types end
	// at error_message and now_us.
	_, err = conn.Exec(ctx, `ALTER TYPE rl.decision DROP ATTRIBUTE next_after_us;
		ALTER TYPE rl.multi_decision DROP ATTRIBUTE next_after_us;
		ALTER TYPE rl.batch_decision DROP ATTRIBUTE next_after_us`)
	require.NoError(t, err)
	require.NoError(t, plproxy.Apply(ctx, c.Router, plproxy.Config{Shards: c.Shards, Partitions: 4}))
	var next int64
	require.NoError(t, conn.QueryRow(ctx, "SELECT next_after_us FROM rl.rl_allow('k2', 'gcra', 1, '1 second')").Scan(&next))
	require.Equal(t, int64(1_000_000), next, "one unit of a burst of 1 a second")
	require.NoError(t, conn.QueryRow(ctx, `SELECT next_after_us FROM rl.rl_decide_batch('{k3}', '{default}', '{6}', '{1}',
		'{1000000}', '{0}')`).Scan(&next))
	require.Equal(t, int64(1_000_000), next)
	// A router made before the shards' migration 17: lock_states without
	// l, w, r, rl_decide_batch without settle flags. Applying again gives
	// the shards' shapes and drops the old signature.
	_, err = conn.Exec(ctx, `DROP FUNCTION rl.lock_states(text, text[]);
		CREATE FUNCTION rl.lock_states(p_key text, p_names text[])
			RETURNS TABLE (name text, algorithm integer, t bigint, x bigint, y bigint, log bigint[], now_us bigint)
			LANGUAGE sql AS 'SELECT NULL::text, 0, 0::bigint, 0::bigint, 0::bigint, NULL::bigint[], 0::bigint';
		CREATE FUNCTION rl.rl_decide_batch(keys text[], names text[], algorithms integer[], lims bigint[],
			windows_us bigint[], rates bigint[], costs bigint[], limit_counts integer[], now_us bigint[], take boolean[])
			RETURNS SETOF rl.batch_decision LANGUAGE sql AS 'SELECT NULL::rl.batch_decision WHERE false'`)
	require.NoError(t, err)
	require.NoError(t, plproxy.Apply(ctx, c.Router, plproxy.Config{Shards: c.Shards, Partitions: 4}))
	var batches int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE oid = 'rl.rl_decide_batch'::regproc").Scan(&batches))
	require.Equal(t, 1, batches)
	_, err = conn.Exec(ctx, "SELECT l, w, r FROM rl.lock_states('k', '{a}')")
	require.ErrorContains(t, err, "this database is a PL/Proxy router")
	require.NoError(t, conn.QueryRow(ctx, `SELECT allowed FROM rl.rl_settle_decide('k4', '{default}', '{6}', '{1}',
		'{1000000}', '{0}', 1)`).Scan(&d))
	require.True(t, d)
	// URLs without a user keep the mapping that names one: the owner's.
	var bare []string
	for _, s := range c.Shards {
		bare = append(bare, strings.Replace(s, "postgres@", "", 1))
	}
	require.NotEqual(t, c.Shards, bare)
	require.NoError(t, plproxy.Apply(ctx, c.Router, plproxy.Config{Shards: bare, Partitions: 4}))
	var um []string
	require.NoError(t, conn.QueryRow(ctx, "SELECT umoptions FROM pg_user_mappings WHERE srvname = 'rl_shards' AND usename = $1", c.Owner).Scan(&um))
	require.Equal(t, []string{"user=postgres"}, um)
	require.Equal(t, int64(1), count(t, c.Router, "SELECT count(*) FROM pg_user_mappings WHERE srvname = 'rl_shards'"), "the owner's mapping alone")
	// An earlier version's PUBLIC mapping, and no owner's: carried over to
	// the owner when the URLs name no user, then dropped.
	_, err = conn.Exec(ctx, "DROP USER MAPPING FOR "+c.Owner+" SERVER rl_shards; CREATE USER MAPPING FOR PUBLIC SERVER rl_shards OPTIONS (user '"+c.ShardLogin+"')")
	require.NoError(t, err)
	require.NoError(t, plproxy.Apply(ctx, c.Router, plproxy.Config{Shards: bare, Partitions: 4}))
	require.NoError(t, conn.QueryRow(ctx, "SELECT umoptions FROM pg_user_mappings WHERE srvname = 'rl_shards' AND usename = $1", c.Owner).Scan(&um))
	require.Equal(t, []string{"user=" + c.ShardLogin}, um)
	// Applied again without Config.Owner, the router stays its owner's:
	// schema rl and everything in it belong to the ordinary role, never to
	// the superuser running Apply.
	var owners []string
	require.NoError(t, conn.QueryRow(ctx, `SELECT array_agg(DISTINCT r.rolname::text || CASE WHEN r.rolsuper THEN ' (superuser)' ELSE '' END)
		FROM (SELECT nspowner AS o FROM pg_namespace WHERE nspname = 'rl'
		      UNION ALL SELECT proowner FROM pg_proc WHERE pronamespace = 'rl'::regnamespace
		      UNION ALL SELECT relowner FROM pg_class WHERE relnamespace = 'rl'::regnamespace
		      UNION ALL SELECT typowner FROM pg_type WHERE typnamespace = 'rl'::regnamespace) x
		JOIN pg_roles r ON r.oid = x.o`).Scan(&owners))
	require.Equal(t, []string{c.Owner}, owners)
	require.Equal(t, int64(1), count(t, c.Router, "SELECT count(*) FROM pg_user_mappings WHERE srvname = 'rl_shards'"), "PUBLIC's mapping is gone")
	// The server option that would make PL/Proxy connect as the caller.
	err = plproxy.Apply(ctx, c.Router, plproxy.Config{Shards: c.Shards, Partitions: 4, Options: map[string]string{"default_user": "session_user"}})
	require.ErrorContains(t, err, "default_user")
}

// routerCore decides the vectors through the router: it writes the given
// states into the key's rows on the shard Partition names, calls the
// router's function, and reads the rows back.
type routerCore struct {
	c      *plproxytest.Cluster
	router *pgxpool.Pool
	shards []*pgxpool.Pool
	n      atomic.Int64
}

var _ vectorstest.Core = (*routerCore)(nil)

func (r *routerCore) Take(l core.Limit, s core.State, now, cost int64) (core.Decision, core.State, error) {
	ss := []core.State{s}
	ds := make([]core.Decision, 1)
	_, err := r.do("take", true, []core.Limit{l}, ss, now, cost, ds)
	return ds[0], ss[0], err
}

func (r *routerCore) Peek(l core.Limit, s core.State, now, cost int64) (core.Decision, error) {
	ds := make([]core.Decision, 1)
	_, err := r.do("peek", true, []core.Limit{l}, []core.State{s}, now, cost, ds)
	return ds[0], err
}

func (r *routerCore) Settle(l core.Limit, s core.State, now, delta int64) (core.Decision, core.State, error) {
	ss := []core.State{s}
	ds := make([]core.Decision, 1)
	_, err := r.do("settle", true, []core.Limit{l}, ss, now, delta, ds)
	return ds[0], ss[0], err
}

func (r *routerCore) TakeAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	return r.do("take", false, ls, ss, now, cost, ds)
}

func (r *routerCore) PeekAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	return r.do("peek", false, ls, ss, now, cost, ds)
}

func (r *routerCore) SettleAll(ls []core.Limit, ss []core.State, now, delta int64, ds []core.Decision) (int, error) {
	return r.do("settle", false, ls, ss, now, delta, ds)
}

var indexDetail = regexp.MustCompile(`limit index (\d+)`)

// do calls the router's function for op (take, peek or settle): for one
// limit (single) rl_allow_us, rl_peek_us or rl_settle_us, else
// rl_decide_multi or rl_settle_decide.
func (r *routerCore) do(op string, single bool, ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	key := fmt.Sprintf("vec:%d:%d", time.Now().UnixNano(), r.n.Add(1))
	shard := r.shards[r.c.ShardOf(key)]
	names := make([]string, len(ls))
	algs := make([]int32, len(ls))
	lims, wins, rates := make([]int64, len(ls)), make([]int64, len(ls)), make([]int64, len(ls))
	sa := make([]int32, len(ls))
	st, sx, sy := make([]int64, len(ls)), make([]int64, len(ls)), make([]int64, len(ls))
	sl, sw, sr := make([]int64, len(ls)), make([]int64, len(ls)), make([]int64, len(ls))
	slog := make([]string, len(ls))
	for i, l := range ls {
		names[i] = "n" + strconv.Itoa(i)
		algs[i], lims[i], wins[i], rates[i] = int32(l.Algorithm), l.Limit, l.Window, l.Rate
		s := ss[i]
		sa[i], st[i], sx[i], sy[i] = int32(s.Algorithm), s.T, s.X, s.Y
		sl[i], sw[i], sr[i] = s.L, s.W, s.R
		parts := make([]string, len(s.Log))
		for j, e := range s.Log {
			parts[j] = strconv.FormatInt(e, 10)
		}
		slog[i] = "{" + strings.Join(parts, ",") + "}"
	}
	if _, err := shard.Exec(ctx, `INSERT INTO rl.state (key, name, algorithm, t, x, y, log, l, w, r)
		SELECT $1, u.n, u.a, u.t, u.x, u.y, u.lg::bigint[], u.l, u.w, u.r
		  FROM unnest($2::text[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[], $7::text[], $8::bigint[], $9::bigint[], $10::bigint[])
		       AS u(n, a, t, x, y, lg, l, w, r)`,
		key, names, sa, st, sx, sy, slog, sl, sw, sr); err != nil {
		return 0, err
	}
	index := 0
	var err error
	if single {
		fn := map[string]string{"take": "rl.rl_allow_us", "peek": "rl.rl_peek_us", "settle": "rl.rl_settle_us"}[op]
		alg := fmt.Sprintf("unknown-%d", ls[0].Algorithm)
		if a := ls[0].Algorithm; a.Valid() {
			alg = a.String()
		}
		d := &ds[0]
		var at int64
		err = r.router.QueryRow(ctx, "SELECT allowed, lim, remaining, reset_after_us, retry_after_us, delay_us, next_after_us, now_us FROM "+fn+"($1, $2, $3, $4, $5, $6, $7, $8)",
			key, alg, ls[0].Limit, ls[0].Window, cost, ls[0].Rate, names[0], now).
			Scan(&d.Allowed, &d.Limit, &d.Remaining, &d.ResetAfter, &d.RetryAfter, &d.Delay, &d.NextAfter, &at)
		if err == nil && at != now {
			return 0, fmt.Errorf("now_us %d, want %d", at, now)
		}
	} else {
		var rows pgx.Rows
		const cols = "SELECT ord, allowed, lim, remaining, reset_after_us, retry_after_us, delay_us, next_after_us, deciding"
		if op == "settle" {
			rows, err = r.router.Query(ctx, cols+" FROM rl.rl_settle_decide($1, $2, $3, $4, $5, $6, $7, $8)",
				key, names, algs, lims, wins, rates, cost, now)
		} else {
			rows, err = r.router.Query(ctx, cols+" FROM rl.rl_decide_multi($1, $2, $3, $4, $5, $6, $7, $8, $9)",
				key, names, algs, lims, wins, rates, cost, now, op == "take")
		}
		if err == nil {
			for rows.Next() {
				var (
					ord      int
					d        core.Decision
					deciding bool
				)
				if err = rows.Scan(&ord, &d.Allowed, &d.Limit, &d.Remaining, &d.ResetAfter, &d.RetryAfter, &d.Delay, &d.NextAfter, &deciding); err != nil {
					break
				}
				ds[ord] = d
				if deciding {
					index = ord
				}
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "RL0") {
		n, _ := strconv.Atoi(pe.Code[2:])
		index = 0
		if m := indexDetail.FindStringSubmatch(pe.Detail); m != nil {
			index, _ = strconv.Atoi(m[1])
		}
		return index, core.Error(n)
	}
	if err != nil {
		return 0, err
	}
	// The states after the call, read from the shard.
	rows, err := shard.Query(ctx, "SELECT name, algorithm, t, x, y, log, l, w, r FROM rl.state WHERE key = $1", key)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			name string
			s    core.State
			a    int32
		)
		if err := rows.Scan(&name, &a, &s.T, &s.X, &s.Y, &s.Log, &s.L, &s.W, &s.R); err != nil {
			return 0, err
		}
		s.Algorithm = core.Algorithm(a)
		i, _ := strconv.Atoi(name[1:])
		ss[i] = s
	}
	return index, rows.Err()
}

// TestVectors runs every conformance vector through the router: one-limit
// steps through rl_allow_us / rl_peek_us / rl_settle_us, and every step
// through rl_decide_multi / rl_settle_decide, with the states (and the
// parameters that wrote them) written to and read from the shards.
func TestVectors(t *testing.T) {
	t.Parallel() // a cluster of its own (plproxytest.New)
	c := plproxytest.New(t, 2, 0)
	r := &routerCore{c: c, router: pool(t, c.Router, 4)}
	for _, s := range c.Shards {
		r.shards = append(r.shards, pool(t, s, 4))
	}
	// The two runs at once: each call waits on round trips, not on a core.
	t.Run("single", func(t *testing.T) { t.Parallel(); vectorstest.Run(t, r, false) })
	t.Run("all", func(t *testing.T) { t.Parallel(); vectorstest.Run(t, r, true) })
}

var algorithms = core.Algorithms()

// TestExactness: 32 goroutines on one key through the router admit exactly
// the limit, for every algorithm, with keys on both shards. They share 16
// connections: on the shared test server (100 connections, other packages'
// tests beside) each router session opens one more to the shard;
// TestSeparateClusters runs 32 connections on servers of its own.
func TestExactness(t *testing.T) {
	t.Parallel() // a cluster of its own (plproxytest.New)
	c := plproxytest.New(t, 2, 0)
	const goroutines, calls, limit = 32, 8, 100
	onShard := make([]int, len(c.Shards))
	for i, alg := range algorithms {
		{
			key := "exact-" + alg.String()
			for c.ShardOf(key) != i%2 { // alternate the shards
				key += "+"
			}
			onShard[c.ShardOf(key)]++
			// A pool per key: the router's sessions, and their connections
			// to the shards, end with it (the server has 100 connections).
			router := pool(t, c.Router, goroutines/2)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make(chan error, goroutines)
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range calls {
						var ok bool
						err := router.QueryRow(ctx, "SELECT allowed FROM rl.rl_allow_us($1, $2, $3, $4, now_us => $5)",
							key, alg.String(), int64(limit), int64(3_600_000_000), int64(1_767_225_600_000_000)).Scan(&ok)
						if err != nil {
							errs <- err
							return
						}
						if ok {
							admitted.Add(1)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			router.Close()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			require.Equal(t, int64(limit), admitted.Load(), "%s on shard %d", key, c.ShardOf(key))
		}
	}
	for i, n := range onShard {
		require.NotZero(t, n, "no key on shard %d", i)
	}
}

// TestShardDown: with one shard cut off, its keys fail and the others keep
// deciding; restored, its keys decide again.
func TestShardDown(t *testing.T) {
	t.Parallel() // a cluster of its own (plproxytest.New)
	c := plproxytest.New(t, 2, 0)
	u, err := pgconn.ParseConfig(c.Shards[1])
	require.NoError(t, err)
	px, err := tcpproxy.New(fmt.Sprintf("%s:%d", u.Host, u.Port))
	require.NoError(t, err)
	t.Cleanup(func() { px.Close() })
	host, port, _ := strings.Cut(px.Addr(), ":")
	proxied := strings.Replace(c.Shards[1], fmt.Sprintf("%s:%d", u.Host, u.Port), host+":"+port, 1)
	require.NoError(t, plproxy.Apply(ctx, c.Router, plproxy.Config{Shards: []string{c.Shards[0], proxied}}))

	router := pool(t, c.Router, 4)
	var keys [2][]string
	for i := 0; len(keys[0]) < 10 || len(keys[1]) < 10; i++ {
		k := fmt.Sprintf("down:%d", i)
		keys[c.ShardOf(k)] = append(keys[c.ShardOf(k)], k)
	}
	decide := func(k string) error {
		var ok bool
		return router.QueryRow(ctx, "SELECT allowed FROM rl.rl_allow($1, 'fixed_window', 1000, '1 hour', now_us => $2)", k, t0).Scan(&ok)
	}
	for _, ks := range keys {
		for _, k := range ks {
			require.NoError(t, decide(k))
		}
	}
	px.Cut()
	for round := range 3 {
		for _, k := range keys[0] {
			require.NoError(t, decide(k), "round %d: a key of the live shard", round)
		}
		for _, k := range keys[1] {
			err := decide(k)
			require.Error(t, err, "round %d: a key of the cut shard", round)
			require.NotContains(t, err.Error(), "RL0")
		}
	}
	px.Restore()
	for _, ks := range keys {
		for _, k := range ks {
			require.NoError(t, decide(k))
		}
	}
	// Each shard counted the calls it decided: 5 on the live one, 2 on the
	// one that was cut.
	for i, want := range []int64{995, 998} {
		for _, k := range keys[i] {
			var rem int64
			require.NoError(t, router.QueryRow(ctx, "SELECT remaining FROM rl.rl_peek($1, 'fixed_window', 1000, '1 hour', cost => 0, now_us => $2)", k, t0).Scan(&rem))
			require.Equal(t, want, rem, k)
		}
	}
}

const t0 = int64(1_767_225_600_000_000)
