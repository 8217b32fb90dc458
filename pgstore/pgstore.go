// Package pgstore is the PostgreSQL store.Store, through a pgx pool.
//
// State lives in the rows of rl.state that the migrations in sql/migrations
// create, one per (key, limit name), in the encoding the SQL functions
// (rl.rl_allow and friends) use, so one key can be decided by this store, by
// rl_allow() from SQL or a trigger, and by another process, interleaved,
// with one result.
//
// Two paths decide:
//
//   - ModeSQL (the default): one statement, one round trip; the PL/pgSQL port
//     of the core decides inside the database, under SELECT ... FOR UPDATE.
//   - ModeGo: a transaction locks the rows with SELECT ... FOR UPDATE, the
//     store's Config.Decider (native Go or the WebAssembly module) decides,
//     and the new states are written back: two round trips.
//
// Both modes decide shadow limits (store.Policy.WithShadow) with the
// enforced ones in one atomic step, as store.Policy.Decide does: ModeGo in
// its transaction, ModeSQL by passing the policy's shadow flags to
// rl_decide_multi and rl_decide_batch (migration 18). A settle
// (store.Settle) of a policy without shadow limits corrects every limit,
// all or nothing: ModeSQL with rl_settle_decide (migration 17). With
// shadow limits, the enforced limits all or nothing, then each shadow
// limit alone, one that cannot be settled (a corrupt row) left as it was:
// ModeSQL passes the shadow flags with the settle to rl_decide_batch,
// which settles them so since migration 19 (at 18, every limit alike).
//
// Each row records the parameters of the limit that wrote it (rl.state's
// l, w, r, migration 17; core.State L, W, R), so a key whose limit changes
// carries its usage over (core's "Carrying usage") on either path, and a
// state in debt after a settle is read exactly.
//
// Both produce identical decisions, core.Decision.NextAfter included, and
// identical rows (the conformance vectors and the differential tests hold the
// SQL port equal to the core). Both need the schema at migration 17 or
// later (migrations.Up, or ALTER EXTENSION rl UPDATE; on a PL/Proxy router,
// the shards first, then rl-migrate router): the rows' l, w, r, the settle
// functions, and since 16 the functions' next_after_us, which the SQL path
// reads as NextAfter.
//
// Batched (NewBatched) is the same store with concurrent decisions
// coalesced: while its statements run, arrivals queue, and the next
// statement decides everything queued in one transaction (rl.rl_decide_batch,
// or the Go path locking every row of the batch in one order), one commit
// for many decisions. It trades a little latency under load for throughput;
// a lone caller waits for nothing but its own statement.
//
// Durability is a choice: DurabilityDurable commits synchronously (a decision
// survives a crash once answered); DurabilityFast commits with
// synchronous_commit = off, several times faster, where a crash can lose the
// last fraction of a second of counts but never corrupts a row. For state
// that need not survive a crash at all, the table can be made UNLOGGED (see
// sql/README.md).
//
// Time: by default the database server's clock decides, so every app
// instance shares one clock; Config.RequestClock uses the limiter's instead.
//
// Errors: invalid input is a core.Error (the functions' SQLSTATE RL0NN
// mapped back); a database without rl's schema, or with an older one,
// gives an error matching ErrNotMigrated that names the fix
// (migrations.Up, or "rl-migrate up"); a server that is down, unreachable or slower than
// Config.Timeout gives an error matching store.ErrUnavailable, and a
// timeout (Config.Timeout, or the server's statement_timeout: SQLSTATE
// 57014) matches context.DeadlineExceeded too; a canceled caller context
// gives the context's error.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// Mode selects the decision path.
type Mode int

const (
	// ModeSQL decides in PL/pgSQL in one round trip.
	ModeSQL Mode = iota
	// ModeGo locks the rows in a transaction and decides with
	// Config.Decider.
	ModeGo
)

// Durability selects how decisions are committed.
type Durability int

const (
	// DurabilityDurable commits synchronously (the server's setting).
	DurabilityDurable Durability = iota
	// DurabilityFast commits with synchronous_commit = off.
	DurabilityFast
)

// Config configures a Store. The zero value is the default.
type Config struct {
	// Mode is where decisions are computed: ModeSQL (the default) or ModeGo.
	Mode Mode
	// Decider is ModeGo's decision function. Default: core.Native{} (a
	// *wasm.Pool decides with the WebAssembly build of the same core).
	// ModeSQL decides with the PL/pgSQL port, so New refuses a Decider
	// other than core.Native{} with it rather than ignore it.
	Decider    core.Decider
	Durability Durability
	// RequestClock decides at the request's Now instead of the database
	// server's clock.
	RequestClock bool
	// Timeout bounds each decision once it has a connection (0: only the
	// caller's context). A decision that runs out of it fails with
	// store.ErrUnavailable: the database did not answer in time.
	Timeout time.Duration
	// QueueTimeout, if positive, bounds the wait for a pooled connection
	// (0 or negative: only the caller's context bounds it; rl-wasm-host
	// sets 1s). Waiting is queueing, not a
	// failure of the database: running out of it while every connection
	// of the pool is in use fails with store.ErrBusy, which does not match
	// store.ErrUnavailable, so a fail-open policy or a failover store never
	// turns load into admissions. A connection that cannot be opened is
	// store.ErrUnavailable.
	QueueTimeout time.Duration
	// ExpireEvery, if positive, runs Expire in the background that often.
	ExpireEvery time.Duration
	// OnExpireError hears errors of the background expiry.
	OnExpireError func(error)
}

// Store is the PostgreSQL store.Store. The pool belongs to the caller.
type Store struct {
	pool *pgxpool.Pool
	cfg  Config
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
	// lastFail is when the database last failed (unix ns).
	lastFail atomic.Int64
}

var _ store.Store = (*Store)(nil)

// New returns a Store over pool, whose database must have been migrated
// (migrations.Up of package github.com/rlcore/rl/sql/migrations, or
// "rl-migrate up"). New does no I/O: on a database that is not, the first
// call fails with an error matching ErrNotMigrated that says so.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("pgstore: nil pool")
	}
	if cfg.Mode != ModeSQL && cfg.Mode != ModeGo {
		return nil, fmt.Errorf("pgstore: unknown Mode %d", cfg.Mode)
	}
	if cfg.Decider == nil {
		cfg.Decider = core.Native{}
	} else if _, native := cfg.Decider.(core.Native); !native && cfg.Mode == ModeSQL {
		return nil, errors.New("pgstore: Config.Decider is used only with ModeGo (ModeSQL decides in PL/pgSQL)")
	}
	s := &Store{pool: pool, cfg: cfg, stop: make(chan struct{})}
	if cfg.ExpireEvery > 0 {
		s.wg.Add(1)
		go s.expirer()
	}
	return s, nil
}

// Close stops the background expiry. It does not close the pool.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
	return nil
}

func (s *Store) expirer() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.ExpireEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ExpireEvery)
			_, err := s.Expire(ctx)
			cancel()
			if err != nil && s.cfg.OnExpireError != nil {
				s.cfg.OnExpireError(err)
			}
		}
	}
}

// Expire deletes idle rows (all of whose states are fresh by now) and
// returns how many it deleted.
//
// Now is the database server's clock, with RequestClock too: a state
// decided at a request time further behind that clock than its reset time
// is idle at once, and deleting it starts its key over. With RequestClock,
// keep request times close to the server's clock, or expire only when
// nothing decides at past times (as a test deciding at fixed past times
// must).
func (s *Store) Expire(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, "SELECT rl.rl_expire()").Scan(&n)
	if err != nil {
		return 0, classify(ctx, err)
	}
	return n, nil
}

// expiryGrain is the grain of expires_at: 2^26 µs, about 67 s (migration
// 0013, rl._expires_at).
const expiryGrain = 1 << 26

// expiresAt is the expires_at a write at now stores for a decision with
// this ResetAfter: the time the state is fresh again, rounded up to a
// multiple of expiryGrain, as rl._expires_at computes it. A coarse bound
// changes rarely, so most updates of a row leave its indexed columns alone
// and PostgreSQL applies them as HOT updates; it is never early, so
// rl_expire never deletes a state that still counts.
func expiresAt(now, resetAfter int64) int64 {
	return (now + resetAfter + expiryGrain - 1) / expiryGrain * expiryGrain
}

// FullKey is the key under which a request's states are stored: prefix,
// ":", key, or just key without a prefix. rl_allow() callers that share
// state with a prefixed limiter use the same form.
func FullKey(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + ":" + key
}

// acquire waits for a pooled connection, bounded by QueueTimeout.
func (s *Store) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	qctx, cancel := ctx, context.CancelFunc(func() {})
	if s.cfg.QueueTimeout > 0 {
		qctx, cancel = context.WithTimeout(ctx, s.cfg.QueueTimeout)
	}
	defer cancel()
	conn, err := s.pool.Acquire(qctx)
	if err == nil {
		return conn, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("pgstore: waiting for a connection: %w", ctx.Err())
	}
	if qctx.Err() != nil && !s.failingRecently() {
		if st := s.pool.Stat(); st.AcquiredConns() >= st.MaxConns() {
			return nil, fmt.Errorf("pgstore: all %d connections busy: %w", st.MaxConns(), store.ErrBusy)
		}
	}
	return nil, s.fail(err)
}

// fail marks err as store.ErrUnavailable and remembers when the database
// last failed.
func (s *Store) fail(err error) error {
	s.lastFail.Store(time.Now().UnixNano())
	return &unavailable{err: err}
}

// failingRecently reports a database failure (an error or a timeout of a
// statement that had a connection) within the last few queue timeouts:
// connections busy then are stuck on a failing database, not on load.
func (s *Store) failingRecently() bool {
	window := 2 * (max(s.cfg.QueueTimeout, time.Second) + s.cfg.Timeout)
	return time.Now().UnixNano()-s.lastFail.Load() < int64(window)
}

func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.cfg.Timeout > 0 {
		return context.WithTimeout(ctx, s.cfg.Timeout)
	}
	return ctx, func() {}
}

// Decide implements store.Store.
func (s *Store) Decide(ctx context.Context, req store.Request, each []core.Decision) (int, core.Decision, error) {
	if req.Policy == nil {
		return 0, core.Decision{}, core.ErrLimits
	}
	conn, err := s.acquire(ctx)
	if err != nil {
		return 0, core.Decision{}, err
	}
	defer conn.Release()
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	out := make([]core.Decision, req.Policy.Len())
	var i int
	if s.cfg.Mode == ModeGo {
		i, err = s.decideGo(ctx, conn, &req, out)
	} else {
		i, err = s.decideSQL(ctx, conn, &req, out)
	}
	if err != nil {
		return 0, core.Decision{}, s.classify(ctx, err)
	}
	if len(each) >= len(out) {
		copy(each, out)
	}
	return i, req.Policy.Deciding(out, i), nil
}

// nowSQL is the server clock in µs since the Unix epoch, as the SQL
// functions read it (rl.now_us when a session sets it).
const nowSQL = "rl._now()"

// decideGo is the transaction path: lock, decide in Go, write back.
func (s *Store) decideGo(ctx context.Context, conn *pgxpool.Conn, req *store.Request, out []core.Decision) (int, error) {
	key := FullKey(req.Prefix, req.Key)
	names, limits := req.Policy.Names(), req.Policy.Limits()
	n := len(limits)
	sorted := slices.Clone(names)
	slices.Sort(sorted) // bytewise, as the locking protocol wants
	pos := make(map[string]int, n)
	for i, name := range names {
		pos[name] = i
	}
	states := make([]core.State, n)
	now := req.Now
	if req.Op == store.Peek || req.Op == store.Settle && req.Cost == 0 {
		// Nothing is written: a peek, or a settle of 0 (which changes
		// nothing), reads the rows without a lock.
		rows, err := conn.Query(ctx, "SELECT "+nowSQL+", s.name, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r FROM (SELECT 1) one LEFT JOIN rl.state s ON s.key = $1 AND s.name = ANY($2)", key, sorted)
		if err != nil {
			return 0, err
		}
		if err := scanStates(rows, pos, states, &now, s.cfg.RequestClock); err != nil {
			return 0, err
		}
		return req.Policy.Decide(s.cfg.Decider, req.Op, states, now, req.Cost, out)
	}
	pc := conn.Conn()
	// Two round trips: BEGIN and the lock in one pipelined batch, then the
	// UPDATE and COMMIT in another (or a ROLLBACK when nothing is written).
	// rl.lock_states follows the locking protocol shared with the SQL
	// functions (name by name in bytewise order, creating missing rows in
	// passing); anything else can deadlock against them.
	open := true
	defer func() {
		if open { // undo the transaction, removing rows lock_states created
			rollback(ctx, pc)
		}
	}()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if s.cfg.Durability == DurabilityFast {
		b.Queue("SET LOCAL synchronous_commit = off")
	}
	b.Queue("SELECT now_us, name, algorithm, t, x, y, log, l, w, r FROM rl.lock_states($1, $2)", key, sorted)
	br := pc.SendBatch(ctx, b)
	for range b.Len() - 1 {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return 0, err
		}
	}
	rows, err := br.Query()
	if err == nil {
		err = scanStates(rows, pos, states, &now, s.cfg.RequestClock)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	for i := range limits {
		if l := &limits[i]; l.Algorithm == core.SlidingLog && int64(cap(states[i].Log)) < l.Limit {
			states[i].Log = slices.Grow(states[i].Log, int(l.Limit)-len(states[i].Log))
		}
	}
	// The enforced limits and the shadow ones (if any) in this one
	// transaction, on the rows it locked: a take, or a settle (which never
	// denies, and writes every state).
	i, err := req.Policy.Decide(s.cfg.Decider, req.Op, states, now, req.Cost, out)
	if err != nil || !req.Policy.Deciding(out, i).Allowed || req.Cost == 0 {
		return i, err // the deferred rollback writes nothing
	}
	algs := make([]int32, n)
	ts, xs, ys, exp := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	ls, ws, rs := make([]int64, n), make([]int64, n), make([]int64, n)
	logs := make([]string, n)
	for j, st := range states {
		algs[j], ts[j], xs[j], ys[j] = int32(st.Algorithm), st.T, st.X, st.Y
		ls[j], ws[j], rs[j] = st.L, st.W, st.R
		exp[j] = expiresAt(now, out[j].ResetAfter)
		logs[j] = logLiteral(st.Log)
	}
	b = &pgx.Batch{}
	b.Queue(`UPDATE rl.state s SET algorithm = u.algorithm, t = u.t, x = u.x, y = u.y, log = u.log::bigint[],
			l = u.l, w = u.w, r = u.r, expires_at = u.expires_at
		FROM unnest($2::text[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[], $7::text[], $8::bigint[],
			$9::bigint[], $10::bigint[], $11::bigint[]) AS u(name, algorithm, t, x, y, log, expires_at, l, w, r)
		WHERE s.key = $1 AND s.name = u.name`, key, names, algs, ts, xs, ys, logs, exp, ls, ws, rs)
	b.Queue("COMMIT")
	br = pc.SendBatch(ctx, b)
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	open = false
	return i, nil
}

// logLiteral encodes a log as a PostgreSQL array literal (unnest cannot
// take an array of arrays of different lengths).
func logLiteral(log []int64) string {
	b := make([]byte, 0, 2+len(log)*17)
	b = append(b, '{')
	for i, e := range log {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, e, 10)
	}
	return string(append(b, '}'))
}

func scanStates(rows pgx.Rows, pos map[string]int, states []core.State, now *int64, requestClock bool) error {
	defer rows.Close()
	for rows.Next() {
		var (
			serverNow int64
			name      *string
			alg       *int32
			t, x, y   *int64
			log       []int64
			l, w, r   *int64
		)
		if err := rows.Scan(&serverNow, &name, &alg, &t, &x, &y, &log, &l, &w, &r); err != nil {
			return err
		}
		if !requestClock {
			*now = serverNow
		}
		if name == nil {
			continue // LEFT JOIN: no rows
		}
		i, ok := pos[*name]
		if !ok {
			continue
		}
		states[i] = core.State{Algorithm: core.Algorithm(*alg), T: *t, X: *x, Y: *y, L: *l, W: *w, R: *r, Log: log}
	}
	return rows.Err()
}

// Reset implements store.Store.
func (s *Store) Reset(ctx context.Context, prefix, key string, names []string) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	// rl_reset locks before it deletes, in the shared order; several names
	// go in one transaction, in bytewise order.
	full := FullKey(prefix, key)
	if names == nil {
		_, err := s.pool.Exec(ctx, "SELECT rl.rl_reset($1)", full)
		return classify(ctx, err)
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, name := range sorted {
			b.Queue("SELECT rl.rl_reset($1, $2)", full, name)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	return classify(ctx, err)
}

// unavailable marks an error as store.ErrUnavailable, and a timeout the
// server reported (timeout) as context.DeadlineExceeded too, as a
// client-side one already is.
type unavailable struct {
	err     error
	timeout bool
}

func (e *unavailable) Error() string { return "pgstore: database unavailable: " + e.err.Error() }
func (e *unavailable) Unwrap() error { return e.err }
func (e *unavailable) Is(target error) bool {
	return target == store.ErrUnavailable || e.timeout && target == context.DeadlineExceeded
}

// ErrNotMigrated is matched by the error of a call on a database without
// rl's schema, or with an older one than this package needs (a function
// or table of the schema rl missing): the database must be migrated first,
// with migrations.Up (package github.com/rlcore/rl/sql/migrations) or the
// rl-migrate command ("rl-migrate up"), as the error says. It is a
// configuration mistake, not an outage: it does not match
// store.ErrUnavailable.
var ErrNotMigrated = errors.New("pgstore: database not migrated")

// notMigrated is the error of a call on an unmigrated database: the
// server's error (an undefined schema, function or table of rl) with what
// to do.
type notMigrated struct{ err error }

func (e *notMigrated) Error() string {
	what := "database not migrated"
	var pe *pgconn.PgError
	if errors.As(e.err, &pe) && pe.Code != "3F000" { // the schema is there, older
		what = "database migrated to an older version than this package needs"
	}
	return "pgstore: " + what + ": " + e.err.Error() +
		`: run migrations.Up(ctx, url) (package github.com/rlcore/rl/sql/migrations) or "rl-migrate up" on it`
}
func (e *notMigrated) Unwrap() error        { return e.err }
func (e *notMigrated) Is(target error) bool { return target == ErrNotMigrated }

// unmigrated reports whether pe says rl's schema, or one of its functions
// or tables, does not exist: SQLSTATE 3F000 (invalid_schema_name), 42883
// (undefined_function) or 42P01 (undefined_table) naming the schema rl.
func unmigrated(pe *pgconn.PgError) bool {
	switch pe.Code {
	case "3F000":
		return strings.Contains(pe.Message, `schema "rl"`)
	case "42883":
		return strings.Contains(pe.Message, "function rl.")
	case "42P01":
		return strings.Contains(pe.Message, `"rl.`)
	}
	return false
}

// classify maps a pgx error to this package's errors, remembering
// failures of the database.
func (s *Store) classify(ctx context.Context, err error) error {
	err = classify(ctx, err)
	if errors.Is(err, store.ErrUnavailable) {
		s.lastFail.Store(time.Now().UnixNano())
	}
	return err
}

// classify maps a pgx error to this package's errors.
func classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var ce core.Error
	if errors.As(err, &ce) { // decided in Go: invalid input
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if unmigrated(pe) {
			return &notMigrated{err: err}
		}
		if len(pe.Code) == 5 && pe.Code[:3] == "RL0" {
			if n, perr := strconv.Atoi(pe.Code[3:]); perr == nil && n >= 1 && n <= 10 {
				return fmt.Errorf("pgstore: %s: %w", pe.Message, core.Error(n))
			}
		}
		switch {
		case pe.Code == "57014" && ctx.Err() == context.Canceled:
			return fmt.Errorf("pgstore: %w", err) // the caller gave up
		case pe.Code == "57014":
			// query_canceled: statement_timeout (or a cancel request).
			// A timeout, which counts toward an outage only as one of a
			// run (internal/request/outage), not at once.
			return &unavailable{err: err, timeout: true}
		case pe.Code[:2] == "08", pe.Code[:2] == "53", pe.Code[:2] == "57": // connection exception, insufficient resources, operator intervention
			return &unavailable{err: err}
		}
		// A PL/Proxy router that cannot reach a shard reports XX000
		// "PL/Proxy function ...: <connection error>"; an error the shard
		// itself raised comes as "... REMOTE ERROR: ..." and is the
		// request's.
		if pe.Code == "XX000" && strings.HasPrefix(pe.Message, "PL/Proxy function") && !strings.Contains(pe.Message, "REMOTE ERROR") {
			return &unavailable{err: err}
		}
		return fmt.Errorf("pgstore: %w", err)
	}
	if errors.Is(err, context.Canceled) && ctx.Err() == context.Canceled {
		return fmt.Errorf("pgstore: %w", err) // the caller gave up
	}
	// Everything else is the connection: refused, reset, timed out.
	return &unavailable{err: err}
}
