package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// BatchConfig configures a Batched store. The zero value is the default.
type BatchConfig struct {
	// MaxBatch caps the requests one statement carries (default
	// DefaultMaxBatch).
	MaxBatch int
	// MaxInFlight caps the batch statements running at once, each on a
	// connection of its own (default DefaultMaxInFlight, at most the
	// pool's size). While that many are running, arrivals queue; the next
	// statement carries everything queued. Fewer statements in flight make
	// bigger batches (more decisions per commit); more use more of the
	// database's cores.
	MaxInFlight int
	// MaxWait, if positive, holds each statement up to this long before
	// it is sent, unless MaxBatch requests are queued by then: bigger
	// batches for added latency. The default, 0, sends at once, so a lone
	// caller waits for nothing but its own statement.
	MaxWait time.Duration
}

// Defaults of BatchConfig.
const (
	DefaultMaxBatch    = 256
	DefaultMaxInFlight = 2
)

// Batched is a store.Store that coalesces concurrent decisions: while
// statements are in flight, arriving decisions queue, and the next
// statement decides everything queued (up to MaxBatch) in one transaction,
// one commit. Decisions, rows and errors are those of Store, as if the
// requests of a batch had been decided one by one in arrival order:
//
//   - ModeSQL calls rl.rl_decide_batch (migration 0009; its settle flags,
//     migration 17; its shadow flags, migration 18, honoured by a settle
//     since 19): one statement.
//   - ModeGo locks every row of the batch with rl.lock_states_batch, in one
//     order, decides in Go with Config.Decider (store.Policy.Decide: shadow
//     limits too), and writes the new states back with one UPDATE ... FROM
//     unnest: two round trips.
//
// An invalid request gets its own error; the rest of its batch is decided.
// A failure of the statement (a connection cut, Config.Timeout) gives every
// request of the batch the error (store.ErrUnavailable) and charges none of
// them: a batch is one transaction. A caller whose context ends while it
// waits gets the context's error at once; if its batch was already sent, the
// decision may still be applied, as with a single statement canceled late.
// Waiting in the queue is bounded by Config.QueueTimeout, like waiting for
// a connection, with the same store.ErrBusy.
type Batched struct {
	s   *Store
	cfg BatchConfig

	mu       sync.Mutex
	queue    []*call
	inflight int
	full     chan struct{} // MaxWait: a full batch is queued

	batches, requests atomic.Int64
}

// BatchStats counts what a Batched store sent.
type BatchStats struct {
	// Batches is the number of statements (transactions) sent; Requests
	// the number of decisions they carried. Requests/Batches is the mean
	// batch size.
	Batches, Requests int64
}

// Stats returns the counts so far.
func (b *Batched) Stats() BatchStats {
	return BatchStats{Batches: b.batches.Load(), Requests: b.requests.Load()}
}

var _ store.Store = (*Batched)(nil)

// call is one queued decision.
type call struct {
	key    string // FullKey
	policy *store.Policy
	names  []string     // policy.Names()
	limits []core.Limit // policy.Limits()
	op     store.Op
	now    int64
	cost   int64

	out     []core.Decision
	index   int
	err     error
	done    chan struct{}
	claimed bool          // taken into a batch (under Batched.mu)
	left    atomic.Bool   // the caller gave up
	b       *batchContext // the batch it was taken into (under Batched.mu)
}

// batchContext cancels a statement whose callers have all left when
// Config.Timeout does not bound it.
type batchContext struct {
	live   atomic.Int32
	cancel context.CancelFunc
}

// NewBatched returns a batching store over pool, whose database must have
// been migrated (sql/migrations, 0009 or later). cfg is as for New.
func NewBatched(pool *pgxpool.Pool, cfg Config, bcfg BatchConfig) (*Batched, error) {
	s, err := New(pool, cfg)
	if err != nil {
		return nil, err
	}
	if bcfg.MaxBatch <= 0 {
		bcfg.MaxBatch = DefaultMaxBatch
	}
	if bcfg.MaxInFlight <= 0 {
		bcfg.MaxInFlight = DefaultMaxInFlight
	}
	if m := int(pool.Config().MaxConns); m > 0 && bcfg.MaxInFlight > m {
		bcfg.MaxInFlight = m
	}
	return &Batched{s: s, cfg: bcfg, full: make(chan struct{}, 1)}, nil
}

// Close stops the background expiry. It does not close the pool.
func (b *Batched) Close() error { return b.s.Close() }

// Expire deletes idle rows, as Store.Expire.
func (b *Batched) Expire(ctx context.Context) (int64, error) { return b.s.Expire(ctx) }

// Reset implements store.Store (one statement, not batched).
func (b *Batched) Reset(ctx context.Context, prefix, key string, names []string) error {
	return b.s.Reset(ctx, prefix, key, names)
}

// Decide implements store.Store.
func (b *Batched) Decide(ctx context.Context, req store.Request, each []core.Decision) (int, core.Decision, error) {
	if req.Policy == nil {
		return 0, core.Decision{}, core.ErrLimits
	}
	n := req.Policy.Len()
	if err := ctx.Err(); err != nil {
		return 0, core.Decision{}, fmt.Errorf("pgstore: waiting for a batch: %w", err)
	}
	c := &call{
		key: FullKey(req.Prefix, req.Key), policy: req.Policy, names: req.Policy.Names(), limits: req.Policy.Limits(),
		op: req.Op, now: req.Now, cost: req.Cost,
		out: make([]core.Decision, n), done: make(chan struct{}),
	}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if b.inflight < b.cfg.MaxInFlight {
		b.inflight++
		go b.runner()
	} else if b.cfg.MaxWait > 0 && len(b.queue) >= b.cfg.MaxBatch {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()

	var queueTimer <-chan time.Time
	if qt := b.queueTimeout(); qt > 0 {
		t := time.NewTimer(qt)
		defer t.Stop()
		queueTimer = t.C
	}
	answer := func() (int, core.Decision, error) {
		if c.err != nil {
			return 0, core.Decision{}, c.err
		}
		if len(each) >= n {
			copy(each, c.out)
		}
		return c.index, c.policy.Deciding(c.out, c.index), nil
	}
	for {
		select {
		case <-c.done:
			return answer()
		case <-ctx.Done():
			select {
			case <-c.done: // decided meanwhile: the answer, not the context's error
				return answer()
			default:
			}
			claimed := b.leave(c)
			err := ctx.Err()
			if claimed && errors.Is(err, context.DeadlineExceeded) {
				return 0, core.Decision{}, b.s.fail(err) // the database did not answer in time
			}
			return 0, core.Decision{}, fmt.Errorf("pgstore: waiting for a batch: %w", err)
		case <-queueTimer:
			queueTimer = nil
			b.mu.Lock()
			queued := !c.claimed
			if queued {
				c.left.Store(true)
			}
			b.mu.Unlock()
			if !queued {
				continue // in a statement: Config.Timeout bounds it
			}
			if b.s.failingRecently() {
				return 0, core.Decision{}, b.s.fail(errors.New("queued behind a failing database"))
			}
			return 0, core.Decision{}, fmt.Errorf("pgstore: %d batches in flight, queued for %v: %w",
				b.cfg.MaxInFlight, b.queueTimeout(), store.ErrBusy)
		}
	}
}

func (b *Batched) queueTimeout() time.Duration {
	return max(b.s.cfg.QueueTimeout, 0)
}

// leave marks c as abandoned and reports whether it was already in a
// batch; the last caller to leave a statement without Config.Timeout
// cancels it.
func (b *Batched) leave(c *call) bool {
	b.mu.Lock()
	c.left.Store(true)
	claimed, bc := c.claimed, c.b
	var cancel context.CancelFunc
	if bc != nil {
		cancel = bc.cancel
	}
	b.mu.Unlock()
	if bc != nil && bc.live.Add(-1) == 0 && cancel != nil {
		cancel()
	}
	return claimed
}

// runner sends batches while there are queued calls.
func (b *Batched) runner() {
	for {
		if b.cfg.MaxWait > 0 {
			t := time.NewTimer(b.cfg.MaxWait)
			b.mu.Lock()
			short := len(b.queue) < b.cfg.MaxBatch
			b.mu.Unlock()
			if short {
				select {
				case <-t.C:
				case <-b.full:
				}
			}
			t.Stop()
		}
		b.mu.Lock()
		var calls []*call
		k := 0
		for k < len(b.queue) && len(calls) < b.cfg.MaxBatch {
			c := b.queue[k]
			k++
			if c.left.Load() {
				continue
			}
			c.claimed = true
			calls = append(calls, c)
		}
		clear(b.queue[:k])
		b.queue = b.queue[k:]
		if len(b.queue) == 0 {
			b.queue = nil
		}
		if len(calls) == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		bc := &batchContext{}
		bc.live.Store(int32(len(calls)))
		if b.s.cfg.Timeout <= 0 {
			bc.cancel = cancel // the last caller to leave cancels
		}
		for _, c := range calls {
			c.b = bc
		}
		b.mu.Unlock()
		b.batches.Add(1)
		b.requests.Add(int64(len(calls)))
		b.exec(ctx, calls)
		cancel()
	}
}

// exec decides calls in one transaction and delivers every result.
func (b *Batched) exec(ctx context.Context, calls []*call) {
	defer func() {
		for _, c := range calls {
			close(c.done)
		}
	}()
	conn, err := b.s.acquire(ctx)
	if err != nil {
		for _, c := range calls {
			c.err = err
		}
		return
	}
	defer conn.Release()
	sctx, scancel := b.s.ctx(ctx)
	defer scancel()
	if c := single(calls); c != nil {
		// A batch of one (a lone caller): the single-request statement,
		// cheaper than the batch function's fixed cost.
		req := store.Request{Policy: c.policy, Key: c.key, Op: c.op, Now: c.now, Cost: c.cost}
		var i int
		if b.s.cfg.Mode == ModeGo {
			i, err = b.s.decideGo(sctx, conn, &req, c.out)
		} else {
			i, err = b.s.decideSQL(sctx, conn, &req, c.out)
		}
		if err != nil {
			c.err = b.s.classify(sctx, err)
		}
		c.index = i
		return
	}
	if b.s.cfg.Mode == ModeGo {
		err = b.execGo(sctx, conn, calls)
	} else {
		err = b.execSQL(sctx, conn, calls)
	}
	if err != nil {
		err = b.s.classify(sctx, err)
		for _, c := range calls {
			c.err = err
		}
	}
}

// single returns the one call of calls whose caller has not left, if there
// is exactly one (nil otherwise).
func single(calls []*call) *call {
	var one *call
	for _, c := range calls {
		if !c.left.Load() {
			if one != nil {
				return nil
			}
			one = c
		}
	}
	return one
}

// batchSQL calls rl.rl_decide_batch; batchFastSQL also turns off
// synchronous commit for its transaction.
const (
	batchCols    = "b.req, b.ord, b.allowed, b.lim, b.remaining, b.reset_after_us, b.retry_after_us, b.delay_us, b.next_after_us, b.deciding, b.error_code, b.error_message"
	batchSQL     = "SELECT " + batchCols + " FROM rl.rl_decide_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) b"
	batchFastSQL = "SELECT " + batchCols + " FROM (SELECT set_config('synchronous_commit', 'off', true)) c, rl.rl_decide_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) b"
	// batchShadowSQL and batchShadowFastSQL pass shadow flags, one per
	// limit (migration 18), when a call's policy has shadow limits.
	batchShadowSQL     = "SELECT " + batchCols + " FROM rl.rl_decide_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) b"
	batchShadowFastSQL = "SELECT " + batchCols + " FROM (SELECT set_config('synchronous_commit', 'off', true)) c, rl.rl_decide_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) b"
)

// execSQL decides calls with rl.rl_decide_batch: one statement.
func (b *Batched) execSQL(ctx context.Context, conn *pgxpool.Conn, all []*call) error {
	calls := make([]*call, 0, len(all))
	for _, c := range all {
		if !c.left.Load() { // a caller that left before the statement is not decided
			calls = append(calls, c)
		}
	}
	if len(calls) == 0 {
		return nil
	}
	nreq := len(calls)
	nlim := 0
	for _, c := range calls {
		nlim += len(c.limits)
	}
	keys := make([]string, nreq)
	costs := make([]int64, nreq)
	counts := make([]int32, nreq)
	takes, settles := make([]bool, nreq), make([]bool, nreq)
	var nows []int64
	if b.s.cfg.RequestClock {
		nows = make([]int64, nreq)
	}
	names := make([]string, 0, nlim)
	algs := make([]int32, 0, nlim)
	lims, wins, rates := make([]int64, 0, nlim), make([]int64, 0, nlim), make([]int64, 0, nlim)
	write, shadowed := false, false
	for _, c := range calls {
		shadowed = shadowed || c.policy.Shadowed()
	}
	var shadows []bool
	if shadowed {
		shadows = make([]bool, 0, nlim)
	}
	for i, c := range calls {
		keys[i], costs[i], counts[i], takes[i] = c.key, c.cost, int32(len(c.limits)), c.op == store.Take
		settles[i] = c.op == store.Settle
		write = write || takes[i] || settles[i]
		if nows != nil {
			nows[i] = c.now
		}
		names = append(names, c.names...)
		if shadowed { // a settle's too: migration 19 settles them as Policy.Decide (18 ignores them)
			for j := range c.limits {
				shadows = append(shadows, c.policy.Shadow(j))
			}
		}
		for _, l := range c.limits {
			algs, lims, wins, rates = append(algs, int32(l.Algorithm)), append(lims, l.Limit), append(wins, l.Window), append(rates, l.Rate)
		}
	}
	q := batchSQL
	if b.s.cfg.Durability == DurabilityFast && write {
		q = batchFastSQL
	}
	var countsArg any = counts
	if nlim == nreq {
		countsArg = nil // one limit each
	}
	var nowsArg, takesArg, settlesArg any
	if nows != nil {
		nowsArg = nows
	}
	if slices.Contains(takes, false) {
		takesArg = takes // NULL, all takes: the function's fast path
	}
	if slices.Contains(settles, true) {
		settlesArg = settles // NULL: no settles
	}
	args := []any{keys, names, algs, lims, wins, rates, costs, countsArg, nowsArg, takesArg, settlesArg}
	if shadowed {
		q = batchShadowSQL
		if b.s.cfg.Durability == DurabilityFast && write {
			q = batchShadowFastSQL
		}
		args = append(args, shadows)
	}
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		req, ord                                 pgtype.Int4
		allowed, deciding                        pgtype.Bool
		lim, remaining, resetAfter, retry, delay pgtype.Int8
		next                                     pgtype.Int8
		code, msg                                pgtype.Text
	)
	for rows.Next() {
		if err := rows.Scan(&req, &ord, &allowed, &lim, &remaining, &resetAfter, &retry, &delay, &next, &deciding, &code, &msg); err != nil {
			return err
		}
		if !req.Valid || int(req.Int32) >= nreq || req.Int32 < 0 {
			return fmt.Errorf("pgstore: rl_decide_batch returned request %v of %d", req, nreq)
		}
		c := calls[req.Int32]
		if code.Valid {
			c.err = b.s.classify(ctx, &pgconn.PgError{Severity: "ERROR", Code: code.String, Message: msg.String})
			continue
		}
		if !ord.Valid || int(ord.Int32) >= len(c.out) || ord.Int32 < 0 {
			return fmt.Errorf("pgstore: rl_decide_batch returned limit %v of %d", ord, len(c.out))
		}
		c.out[ord.Int32] = core.Decision{Allowed: allowed.Bool, Limit: lim.Int64, Remaining: remaining.Int64,
			ResetAfter: resetAfter.Int64, RetryAfter: retry.Int64, Delay: delay.Int64, NextAfter: next.Int64}
		if deciding.Bool {
			c.index = int(ord.Int32)
		}
	}
	return rows.Err()
}

// pairKey names one state row.
type pairKey struct{ key, name string }

// pairState is one row of a Go batch.
type pairState struct {
	st      core.State
	created bool
	dirty   bool
	exp     int64
}

// invalidKey is the error the SQL functions raise for a key or limit name
// that is not 1 to 256 bytes (RL011).
func invalidKey(what string) error {
	return &pgconn.PgError{Severity: "ERROR", Code: "RL011", Message: "ratelimit: invalid " + what + ": it must be 1 to 256 bytes"}
}

// rowPlan lists the rows of a Go batch by how the lock phase reads them:
// the rows a take or a settle may write are locked (rl.lock_states_batch,
// which creates the missing ones), the rows that are only peeked are read
// without a lock. Each list is keys and names, index by index.
type rowPlan struct {
	lockKeys, lockNames []string
	peekKeys, peekNames []string
}

// execGo decides calls in Go, phase by phase: validate the calls, plan the
// rows they touch, lock those rows (one order, one transaction), decide
// each call in arrival order, write the new states back and commit. The
// phases share states, one entry per row, and valid; both are made here
// and only passed down, never kept, so neither escapes to the heap (the
// phases allocate what the one function did, no more).
func (b *Batched) execGo(ctx context.Context, conn *pgxpool.Conn, calls []*call) error {
	states := make(map[pairKey]*pairState)
	valid := make([]bool, len(calls))
	b.validateCalls(ctx, calls, valid)
	plan := planRows(calls, valid, states)
	if len(plan.lockKeys) == 0 && len(plan.peekKeys) == 0 {
		return nil
	}
	pc := conn.Conn()
	open := true
	defer func() {
		if open {
			rollback(ctx, pc)
		}
	}()
	now, err := b.lockRows(ctx, pc, plan, states)
	if err != nil {
		return err
	}
	b.decideCalls(calls, valid, states, now)
	if err := writeRows(ctx, pc, states); err != nil {
		return err
	}
	open = false
	return nil
}

// validateCalls is execGo's first phase: it sets valid[i] for each call
// that is to be decided, and gives the others their error. A call whose
// caller has left is neither valid nor given an error; a key or limit name
// that is not 1 to 256 bytes gets the error the SQL functions raise
// (invalidKey), a limit name twice in one policy core.ErrLimits.
func (b *Batched) validateCalls(ctx context.Context, calls []*call, valid []bool) {
	for i, c := range calls {
		if c.left.Load() {
			continue // its caller left before the statement: not decided
		}
		if len(c.key) < 1 || len(c.key) > 256 {
			c.err = b.s.classify(ctx, invalidKey("key"))
			continue
		}
		valid[i] = b.validNames(ctx, c)
	}
}

// validNames reports whether c's limit names are 1 to 256 bytes each and
// distinct, setting c.err if not.
func (b *Batched) validNames(ctx context.Context, c *call) bool {
	for j, name := range c.names {
		if len(name) < 1 || len(name) > 256 {
			c.err = b.s.classify(ctx, invalidKey("limit name"))
			return false
		}
		if slices.Contains(c.names[:j], name) {
			c.err = core.ErrLimits
			return false
		}
	}
	return true
}

// planRows is execGo's second phase: it gives every row the valid calls
// touch an entry in states, and lists each row once, to lock if some take
// or settle touches it and to peek otherwise. It leaves every entry's dirty flag
// false, ready for the decide phase.
func planRows(calls []*call, valid []bool, states map[pairKey]*pairState) rowPlan {
	var plan rowPlan
	for i, c := range calls {
		if !valid[i] {
			continue
		}
		for _, name := range c.names {
			p := pairKey{c.key, name}
			ps, ok := states[p]
			if !ok {
				ps = &pairState{}
				states[p] = ps
			}
			if c.op == store.Take || c.op == store.Settle {
				if !ok || !ps.dirty { // dirty marks "to lock" until decided
					plan.lockKeys, plan.lockNames = append(plan.lockKeys, c.key), append(plan.lockNames, name)
					ps.dirty = true
				}
			}
		}
	}
	for p, ps := range states {
		if !ps.dirty {
			plan.peekKeys, plan.peekNames = append(plan.peekKeys, p.key), append(plan.peekNames, p.name)
		}
		ps.dirty = false
	}
	return plan
}

// lockRows is execGo's third phase: in one pipelined round trip it begins
// the transaction, sets its planner and durability settings, locks the
// plan's rows to lock (creating the missing ones) and reads the rows to
// peek, storing each row's state in states. It returns the server's clock
// (microseconds), read with the rows. On error the transaction is left
// for the caller to roll back.
func (b *Batched) lockRows(ctx context.Context, pc *pgx.Conn, plan rowPlan, states map[pairKey]*pairState) (int64, error) {
	bt := &pgx.Batch{}
	bt.Queue("BEGIN")
	// Generic plans for the transaction: the statements below join
	// unnest($n) against rl.state, which PostgreSQL would otherwise plan
	// again on every call (a custom plan knows the arrays' lengths), at a
	// cost above a small batch's decisions; nested loops over the primary
	// key, even if the plan is made while rl.state is small (as migration
	// 0010 sets for rl.rl_decide_batch).
	syncCommit := "NULL"
	if b.s.cfg.Durability == DurabilityFast && len(plan.lockKeys) > 0 {
		syncCommit = "set_config('synchronous_commit', 'off', true)"
	}
	bt.Queue("SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true), " +
		"set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true), " + syncCommit)
	if len(plan.lockKeys) > 0 {
		bt.Queue("SELECT now_us, key, name, algorithm, t, x, y, log, created, l, w, r FROM rl.lock_states_batch($1, $2)", plan.lockKeys, plan.lockNames)
	}
	if len(plan.peekKeys) > 0 {
		bt.Queue("SELECT "+nowSQL+", u.k, u.n, s.algorithm, s.t, s.x, s.y, s.log, false, s.l, s.w, s.r FROM unnest($1::text[], $2::text[]) AS u(k, n) LEFT JOIN rl.state s ON s.key = u.k AND s.name = u.n", plan.peekKeys, plan.peekNames)
	}
	br := pc.SendBatch(ctx, bt)
	queries := 0
	if len(plan.lockKeys) > 0 {
		queries++
	}
	if len(plan.peekKeys) > 0 {
		queries++
	}
	var serverNow int64
	haveNow := false
	var err error
	for range bt.Len() - queries {
		if _, err = br.Exec(); err != nil {
			br.Close()
			return 0, err
		}
	}
	for range queries {
		var rows pgx.Rows
		rows, err = br.Query()
		if err != nil {
			break
		}
		var now int64
		var ok bool
		if now, ok, err = readRows(rows, states); err != nil {
			break
		}
		if ok && !haveNow {
			serverNow, haveNow = now, true
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return serverNow, nil
}

// readRows reads the rows of lockRows's queries (now_us, key, name,
// algorithm, t, x, y, log, created, l, w, r) into their entries of states, and
// closes rows. It returns the server's clock from the first row, and
// whether there was one.
func readRows(rows pgx.Rows, states map[pairKey]*pairState) (serverNow int64, haveNow bool, err error) {
	for rows.Next() {
		var (
			now     int64
			key     string
			name    string
			alg     pgtype.Int4
			t, x, y pgtype.Int8
			log     []int64
			created bool
			l, w, r pgtype.Int8
		)
		if err = rows.Scan(&now, &key, &name, &alg, &t, &x, &y, &log, &created, &l, &w, &r); err != nil {
			break
		}
		if !haveNow {
			serverNow, haveNow = now, true
		}
		if ps := states[pairKey{key, name}]; ps != nil {
			ps.st = core.State{Algorithm: core.Algorithm(alg.Int32), T: t.Int64, X: x.Int64, Y: y.Int64,
				L: l.Int64, W: w.Int64, R: r.Int64, Log: log}
			ps.created = created
		}
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	return serverNow, haveNow, err
}

// decideCalls is execGo's fourth phase: it decides each valid call in
// arrival order, at serverNow unless Config.RequestClock gives each call
// its own time, with Config.Decider over the batch's states. An admitted
// take with a positive cost, or a settle of a delta other than 0, replaces
// its rows' states (marking them dirty, with their expiry), so the next
// call on the same key sees them. A call
// whose caller has left since validation is not decided: nothing is
// charged for it.
func (b *Batched) decideCalls(calls []*call, valid []bool, states map[pairKey]*pairState, serverNow int64) {
	var scratch []core.State
	for i, c := range calls {
		if !valid[i] || c.left.Load() {
			continue // invalid, or its caller left: nothing is charged for it
		}
		n := len(c.limits)
		scratch = slices.Grow(scratch[:0], n)[:n]
		for j, name := range c.names {
			st := states[pairKey{c.key, name}].st
			if l := &c.limits[j]; l.Algorithm == core.SlidingLog && int64(cap(st.Log)) < l.Limit && l.Limit <= core.MaxLogLimit {
				st.Log = slices.Grow(st.Log[:len(st.Log):len(st.Log)], int(l.Limit)-len(st.Log))
			}
			scratch[j] = st
		}
		now := serverNow
		if b.s.cfg.RequestClock {
			now = c.now
		}
		// The call's enforced and shadow limits in one step.
		idx, err := c.policy.Decide(b.s.cfg.Decider, c.op, scratch, now, c.cost, c.out)
		if err != nil {
			c.err = err
			continue
		}
		c.index = idx
		if c.op == store.Take && c.policy.Deciding(c.out, idx).Allowed && c.cost > 0 || c.op == store.Settle && c.cost != 0 {
			for j, name := range c.names {
				ps := states[pairKey{c.key, name}]
				ps.st, ps.dirty, ps.exp = scratch[j], true, expiresAt(now, c.out[j].ResetAfter)
				scratch[j] = core.State{}
			}
		}
	}
}

// writeRows is execGo's last phase: in one pipelined round trip it writes
// the dirty rows' states back (one UPDATE ... FROM unnest), drops the rows
// the lock phase created that no call wrote (rl.drop_fresh_states), and
// commits. On error the transaction is left for the caller to roll back.
func writeRows(ctx context.Context, pc *pgx.Conn, states map[pairKey]*pairState) error {
	var (
		wk, wn, logs, dk, dn []string
		algs                 []int32
		ts, xs, ys, exp      []int64
		ls, ws, rs           []int64
	)
	for p, ps := range states {
		switch {
		case ps.dirty:
			wk, wn = append(wk, p.key), append(wn, p.name)
			algs, ts, xs, ys = append(algs, int32(ps.st.Algorithm)), append(ts, ps.st.T), append(xs, ps.st.X), append(ys, ps.st.Y)
			logs, exp = append(logs, logLiteral(ps.st.Log)), append(exp, ps.exp)
			ls, ws, rs = append(ls, ps.st.L), append(ws, ps.st.W), append(rs, ps.st.R)
		case ps.created:
			dk, dn = append(dk, p.key), append(dn, p.name)
		}
	}
	bt := &pgx.Batch{}
	if len(wk) > 0 {
		bt.Queue(`UPDATE rl.state s SET algorithm = u.algorithm, t = u.t, x = u.x, y = u.y, log = u.log::bigint[],
				l = u.l, w = u.w, r = u.r, expires_at = u.expires_at
			FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[], $7::text[], $8::bigint[],
				$9::bigint[], $10::bigint[], $11::bigint[]) AS u(key, name, algorithm, t, x, y, log, expires_at, l, w, r)
			WHERE s.key = u.key AND s.name = u.name`, wk, wn, algs, ts, xs, ys, logs, exp, ls, ws, rs)
	}
	if len(dk) > 0 {
		bt.Queue("SELECT rl.drop_fresh_states($1, $2)", dk, dn)
	}
	bt.Queue("COMMIT")
	br := pc.SendBatch(ctx, bt)
	var err error
	for range bt.Len() {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// rollback ends pc's open transaction, undoing it (and removing the rows
// rl.lock_states or rl.lock_states_batch created). It has 5 seconds even
// if ctx has ended; if the ROLLBACK fails it closes pc, for a connection in
// a transaction must never go back to the pool.
func rollback(ctx context.Context, pc *pgx.Conn) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := pc.Exec(rctx, "ROLLBACK"); err != nil {
		pc.Close(rctx)
	}
}
