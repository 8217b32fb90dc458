package rlqs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/rlcore/rl/internal/request/quota"
)

// PGStore is a Store in PostgreSQL, in the tables rl.quota_bucket (one row
// per bucket: its key, BucketId and limit) and rl.quota_client (one row per
// bucket and client: quota.Client's exported fields) of the rl schema
// (migration 0021). State survives a restart, and several servers over one
// database may serve the same buckets: set Config.KeepsState.
//
// Update runs in one transaction: it locks the bucket's row FOR UPDATE,
// rebuilds the bucket with quota.Bucket.Restore, runs fn, and writes back
// the client rows that changed (and the limit, when it changed), deleting
// the bucket when no client is left. fn may run more than once: a
// transaction that lost a race to create the bucket, or failed to
// serialize, is run again on the state read afresh. The server numbers
// each client's reports (quota.Bucket.Report's seq), so a report applied
// again counts once.
//
// The role needs rl_admin (or to own schema rl): rl_app has no access to
// the tables. The pool is the caller's; PGStore never closes it.
type PGStore struct {
	pool    *pgxpool.Pool
	cfg     quota.Config
	timeout time.Duration // opTimeout; tests shorten it

	// The count of buckets Len returns: counted at most once per
	// lenFresh, and moved by this store's own creations and deletions in
	// between (the Server asks before every report's Update).
	mu      sync.Mutex
	n       int
	counted time.Time
}

// lenFresh is how long Len trusts its last count of the table.
const lenFresh = time.Second

// opTimeout bounds each Update (all its attempts), Keys and Len: a hung
// database fails the report (the stream ends, Envoy opens another at its
// next report) or the tick (tried again a second later) instead of holding
// them forever.
const opTimeout = 5 * time.Second

var _ Store = (*PGStore)(nil)

// NewPGStore returns a store over pool. New gives it the Server's
// quota.Config (the buckets it rebuilds divide with it); until then it uses
// quota's defaults.
func NewPGStore(pool *pgxpool.Pool) *PGStore { return &PGStore{pool: pool, timeout: opTimeout} }

// setQuota is called by New with the Server's configuration.
func (p *PGStore) setQuota(c quota.Config) { p.cfg = c }

// quotaConfigured is a Store that rebuilds buckets and needs the Server's
// quota.Config to do so.
type quotaConfigured interface{ setQuota(quota.Config) }

// errRaced: another transaction created or deleted the bucket between the
// read and the write; run again.
var errRaced = errors.New("rlqs: bucket created concurrently")

// maxAttempts bounds the runs of one Update that lose a race.
const maxAttempts = 5

// Update implements Store.
func (p *PGStore) Update(ctx context.Context, key string, create func() (*Entry, error), fn func(*Entry)) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	var err error
	for range maxAttempts {
		var delta int
		err = pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			var err error
			delta, err = p.update(ctx, tx, key, create, fn)
			return err
		})
		if err == nil && delta != 0 {
			p.mu.Lock()
			p.n = max(0, p.n+delta)
			p.mu.Unlock()
		}
		if !retryable(err) {
			return err
		}
	}
	return fmt.Errorf("rlqs: bucket %q: %d attempts lost a race with other servers: %w", key, maxAttempts, err)
}

func retryable(err error) bool {
	if errors.Is(err, errRaced) {
		return true
	}
	var pe *pgconn.PgError
	// serialization_failure, deadlock_detected
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// update is one run of Update in tx: read, fn, write. It returns the
// change in the number of buckets: 1 created, -1 deleted.
func (p *PGStore) update(ctx context.Context, tx pgx.Tx, key string, create func() (*Entry, error), fn func(*Entry)) (int, error) {
	e, before, err := p.load(ctx, tx, key)
	if err != nil {
		return 0, err
	}
	created := false
	if e == nil {
		if create == nil {
			return 0, nil
		}
		if e, err = create(); err != nil {
			return 0, err
		}
		created = true
	}
	lim := e.Bucket.Limit()
	fn(e)
	switch {
	case e.Bucket.Empty() && created:
		return 0, nil
	case e.Bucket.Empty():
		_, err = tx.Exec(ctx, `DELETE FROM rl.quota_bucket WHERE key = $1`, []byte(key))
		return -1, err
	case created:
		id, err := proto.MarshalOptions{Deterministic: true}.Marshal(e.ID)
		if err != nil {
			return 0, fmt.Errorf("rlqs: bucket_id: %w", err)
		}
		l := e.Bucket.Limit()
		tag, err := tx.Exec(ctx, `INSERT INTO rl.quota_bucket (key, bucket_id, fill, fill_interval, burst)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (key) DO NOTHING`, []byte(key), id, l.Fill, l.FillInterval, l.Burst)
		if err != nil {
			return 0, err
		}
		if tag.RowsAffected() == 0 {
			return 0, errRaced
		}
	case e.Bucket.Limit() != lim:
		l := e.Bucket.Limit()
		if _, err := tx.Exec(ctx, `UPDATE rl.quota_bucket SET fill = $2, fill_interval = $3, burst = $4 WHERE key = $1`,
			[]byte(key), l.Fill, l.FillInterval, l.Burst); err != nil {
			return 0, err
		}
	}
	delta := 0
	if created {
		delta = 1
	}
	return delta, writeClients(ctx, tx, key, before, e.Bucket.Clients())
}

// load reads and locks the bucket of key and its clients: nil when it has
// no row. before holds the clients as read, to tell which fn changed.
func (p *PGStore) load(ctx context.Context, tx pgx.Tx, key string) (*Entry, map[string]quota.Client, error) {
	var (
		idBytes []byte
		l       quota.Limit
	)
	err := tx.QueryRow(ctx, `SELECT bucket_id, fill, fill_interval, burst FROM rl.quota_bucket WHERE key = $1 FOR UPDATE`,
		[]byte(key)).Scan(&idBytes, &l.Fill, &l.FillInterval, &l.Burst)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	id := &rlqsv3.BucketId{}
	if err := proto.Unmarshal(idBytes, id); err != nil {
		return nil, nil, fmt.Errorf("rlqs: rl.quota_bucket row %q: bucket_id: %w", key, err)
	}
	b, err := quota.NewBucket(l, p.cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("rlqs: rl.quota_bucket row %q: %w", key, err)
	}
	rows, err := tx.Query(ctx, `SELECT client, seq, demand, used, denied, since, starved, last_report, last_usage,
		sent_fill, sent_tokens, prev_fill, prev_tokens, sent_at, acked, unsent, refreshed, gone
		FROM rl.quota_client WHERE key = $1`, []byte(key))
	if err != nil {
		return nil, nil, err
	}
	before := map[string]quota.Client{}
	var c quota.Client
	var seq, used, denied int64
	_, err = pgx.ForEachRow(rows, []any{&c.ID, &seq, &c.Demand, &used, &denied, &c.Since, &c.Starved, &c.LastReport, &c.LastUsage,
		&c.Sent.Fill, &c.Sent.Tokens, &c.Prev.Fill, &c.Prev.Tokens, &c.SentAt, &c.Acked, &c.Unsent, &c.Refreshed, &c.Gone}, func() error {
		if seq < 0 || used < 0 || denied < 0 {
			return fmt.Errorf("rlqs: rl.quota_client row %q, %q: seq %d, used %d, denied %d: want none negative", key, c.ID, seq, used, denied)
		}
		c.Seq, c.Used, c.Denied = uint64(seq), uint64(used), uint64(denied)
		b.Restore(c)
		before[c.ID] = c
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return &Entry{ID: id, Bucket: b}, before, nil
}

// writeClients writes the clients that differ from before and deletes
// those no longer there, in one round trip.
func writeClients(ctx context.Context, tx pgx.Tx, key string, before map[string]quota.Client, after []*quota.Client) error {
	var batch pgx.Batch
	k := []byte(key)
	for _, c := range after {
		old, had := before[c.ID]
		delete(before, c.ID)
		if had && exported(old) == exported(*c) {
			continue
		}
		if c.Seq > math.MaxInt64 {
			return fmt.Errorf("rlqs: client %q: report sequence %d does not fit a bigint (at most %d)", c.ID, c.Seq, int64(math.MaxInt64))
		}
		batch.Queue(`INSERT INTO rl.quota_client (key, client, seq, demand, used, denied, since, starved, last_report, last_usage,
				sent_fill, sent_tokens, prev_fill, prev_tokens, sent_at, acked, unsent, refreshed, gone)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
			ON CONFLICT (key, client) DO UPDATE SET seq = EXCLUDED.seq, demand = EXCLUDED.demand, used = EXCLUDED.used,
				denied = EXCLUDED.denied, since = EXCLUDED.since, starved = EXCLUDED.starved, last_report = EXCLUDED.last_report,
				last_usage = EXCLUDED.last_usage, sent_fill = EXCLUDED.sent_fill, sent_tokens = EXCLUDED.sent_tokens,
				prev_fill = EXCLUDED.prev_fill, prev_tokens = EXCLUDED.prev_tokens, sent_at = EXCLUDED.sent_at,
				acked = EXCLUDED.acked, unsent = EXCLUDED.unsent, refreshed = EXCLUDED.refreshed, gone = EXCLUDED.gone`,
			k, c.ID, int64(c.Seq), c.Demand, clampInt64(c.Used), clampInt64(c.Denied), c.Since, c.Starved, c.LastReport, c.LastUsage,
			c.Sent.Fill, c.Sent.Tokens, c.Prev.Fill, c.Prev.Tokens, c.SentAt, c.Acked, c.Unsent, c.Refreshed, c.Gone)
	}
	if len(before) > 0 {
		gone := make([]string, 0, len(before))
		for id := range before {
			gone = append(gone, id)
		}
		batch.Queue(`DELETE FROM rl.quota_client WHERE key = $1 AND client = ANY($2)`, k, gone)
	}
	if batch.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, &batch).Close()
}

// exported returns c as the row holds it: its exported fields, the counts
// clamped as written (the unexported ones are never pending between
// Updates: Step clears them).
func exported(c quota.Client) quota.Client {
	return quota.Client{ID: c.ID, Seq: c.Seq, Demand: c.Demand, Used: uint64(clampInt64(c.Used)), Denied: uint64(clampInt64(c.Denied)),
		Since: c.Since, Starved: c.Starved, LastReport: c.LastReport, LastUsage: c.LastUsage, Sent: c.Sent, Prev: c.Prev,
		SentAt: c.SentAt, Acked: c.Acked, Unsent: c.Unsent, Refreshed: c.Refreshed, Gone: c.Gone}
}

func clampInt64(v uint64) int64 { return int64(min(v, math.MaxInt64)) }

// Keys implements Store.
func (p *PGStore) Keys(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	rows, err := p.pool.Query(ctx, `SELECT key FROM rl.quota_bucket ORDER BY key`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var k []byte
		err := r.Scan(&k)
		return string(k), err
	})
}

// Len implements Store. It counts the table at most once a second, and
// adds this store's own creations and deletions since: other servers'
// show within a second.
func (p *PGStore) Len(ctx context.Context) (int, error) {
	p.mu.Lock()
	if !p.counted.IsZero() && time.Since(p.counted) < lenFresh {
		n := p.n
		p.mu.Unlock()
		return n, nil
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	var n int
	if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM rl.quota_bucket`).Scan(&n); err != nil {
		return 0, err
	}
	p.mu.Lock()
	p.n, p.counted = n, time.Now()
	p.mu.Unlock()
	return n, nil
}
