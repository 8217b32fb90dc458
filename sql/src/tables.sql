-- rl.state: one row per (key, limit name): the words of core.State plus
-- expires_at. This row format is the state encoding shared by the SQL
-- functions and the Go pgstore; keep both in step (see sql/README.md, "State
-- rows"). fillfactor 80 leaves room on each page for HOT updates (see
-- "Durability and speed").
CREATE TABLE rl.state (
    key        text     NOT NULL,
    name       text     NOT NULL,
    algorithm  integer  NOT NULL DEFAULT 0,
    t          bigint   NOT NULL DEFAULT 0,
    x          bigint   NOT NULL DEFAULT 0,
    y          bigint   NOT NULL DEFAULT 0,
    log        bigint[] NOT NULL DEFAULT '{}',
    expires_at bigint   NOT NULL DEFAULT 0,
    l          bigint   NOT NULL DEFAULT 0,
    w          bigint   NOT NULL DEFAULT 0,
    r          bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (key, name)
) WITH (fillfactor = 80);

-- rl.rl_expire deletes idle rows oldest first.
CREATE INDEX state_expires_at_idx ON rl.state (expires_at);

COMMENT ON TABLE rl.state IS
    'core.State of one limit (name) on one key. A missing row is a fresh state. '
    'No CHECK constraints on purpose: the decision functions validate the words and report ErrState (RL008).';
COMMENT ON COLUMN rl.state.algorithm IS 'core.Algorithm that wrote the state (0 fresh, 1 fixed_window .. 6 gcra)';
COMMENT ON COLUMN rl.state.t IS 'core.State.T';
COMMENT ON COLUMN rl.state.x IS 'core.State.X';
COMMENT ON COLUMN rl.state.y IS 'core.State.Y';
COMMENT ON COLUMN rl.state.log IS 'core.State.Log: sliding-log entries (µs), ascending; empty for the other algorithms';
COMMENT ON COLUMN rl.state.expires_at IS
    'µs since the Unix epoch: an upper bound of the time the row is back to a fresh state, now + reset_after '
    'of the latest write rounded up to a multiple of 2^26 µs (rl._expires_at). The row is idle (deletable) once expires_at <= now.';
COMMENT ON COLUMN rl.state.l IS 'core.State.L: the Limit of the limit that wrote the state; 0 in a fresh or legacy state';
COMMENT ON COLUMN rl.state.w IS 'core.State.W: the Window (µs) of the limit that wrote the state; 0 in a fresh or legacy state';
COMMENT ON COLUMN rl.state.r IS
    'core.State.R: the effective rate of the limit that wrote the state (Rate, or Limit when Rate is 0; '
    '0 for the window algorithms); 0 in a fresh or legacy state';

-- rl.tenants: which role may use which keys. Maintained by the owner only.
CREATE TABLE rl.tenants (
    role       regrole NOT NULL,
    key_prefix text    NOT NULL CHECK (octet_length(key_prefix) BETWEEN 1 AND 256),
    PRIMARY KEY (role, key_prefix)
);

COMMENT ON TABLE rl.tenants IS
    'A role listed here, or a member of one, may only use keys starting with one of its key_prefix values '
    '(owner and rl_admin members excepted). Maintained by the owner of schema rl.';
COMMENT ON COLUMN rl.tenants.role IS
    'the tenant role (an OID: renaming the role keeps the entry; drop the entry when dropping the role)';
COMMENT ON COLUMN rl.tenants.key_prefix IS
    'a prefix of the keys the role may use, bytewise (not a pattern); end it with a separator such as '':''';

-- rl.quota_bucket and rl.quota_client: the state of rl-wasm-host's RLQS
-- server (internal/frontend/rlqs, PGStore), so that a restarted server or
-- another replica continues the division of each global limit. A bucket's
-- row is locked FOR UPDATE while one report or tick changes it; its client
-- rows are written only under that lock (docs/rlqs.md, "State in
-- PostgreSQL").
CREATE TABLE rl.quota_bucket (
    key           bytea  PRIMARY KEY,
    bucket_id     bytea  NOT NULL,
    fill          bigint NOT NULL,
    fill_interval bigint NOT NULL,
    burst         bigint NOT NULL
);

COMMENT ON TABLE rl.quota_bucket IS
    'One bucket of the RLQS server: a global limit divided among the clients (Envoys) that report for it. '
    'Written by the server only; a bucket with no client left is deleted.';
COMMENT ON COLUMN rl.quota_bucket.key IS 'the server''s key of the bucket: the report''s domain, a zero byte, the bucket_id''s entries sorted, each length-prefixed';
COMMENT ON COLUMN rl.quota_bucket.bucket_id IS 'the BucketId Envoy named the bucket by, protobuf wire form (envoy.service.rate_limit_quota.v3.BucketId)';
COMMENT ON COLUMN rl.quota_bucket.fill IS 'quota.Limit.Fill: tokens the whole bucket regains per fill_interval';
COMMENT ON COLUMN rl.quota_bucket.fill_interval IS 'quota.Limit.FillInterval, µs (whole seconds)';
COMMENT ON COLUMN rl.quota_bucket.burst IS 'quota.Limit.Burst: the most tokens the clients together may hold';

CREATE TABLE rl.quota_client (
    key         bytea   NOT NULL REFERENCES rl.quota_bucket (key) ON DELETE CASCADE,
    client      text    NOT NULL,
    seq         bigint  NOT NULL,
    demand      bigint  NOT NULL,
    used        bigint  NOT NULL,
    denied      bigint  NOT NULL,
    since       bigint  NOT NULL,
    starved     boolean NOT NULL,
    last_report bigint  NOT NULL,
    last_usage  bigint  NOT NULL,
    sent_fill   bigint  NOT NULL,
    sent_tokens bigint  NOT NULL,
    prev_fill   bigint  NOT NULL,
    prev_tokens bigint  NOT NULL,
    sent_at     bigint  NOT NULL,
    acked       boolean NOT NULL,
    unsent      boolean NOT NULL,
    refreshed   bigint  NOT NULL,
    gone        boolean NOT NULL,
    PRIMARY KEY (key, client)
);

COMMENT ON TABLE rl.quota_client IS
    'One client of one RLQS bucket: the exported fields of quota.Client (internal/request/quota). Times are µs since the Unix epoch.';
COMMENT ON COLUMN rl.quota_client.client IS 'quota.Client.ID: the client''s stream, or the identity it presents in gRPC metadata';
COMMENT ON COLUMN rl.quota_client.seq IS 'quota.Client.Seq: the sequence number of the last report applied; a report at or below it is a repeat and counts nothing';
COMMENT ON COLUMN rl.quota_client.demand IS 'quota.Client.Demand: estimated demand, tokens per fill_interval; -1 until measured';
COMMENT ON COLUMN rl.quota_client.used IS 'quota.Client.Used: requests reported since since and not yet measured (saturates at 2^63-1)';
COMMENT ON COLUMN rl.quota_client.denied IS 'quota.Client.Denied: the denied ones among used (saturates at 2^63-1)';
COMMENT ON COLUMN rl.quota_client.since IS 'quota.Client.Since: start of the measurement in progress';
COMMENT ON COLUMN rl.quota_client.starved IS 'quota.Client.Starved: the last measurement saw requests denied';
COMMENT ON COLUMN rl.quota_client.last_report IS 'quota.Client.LastReport';
COMMENT ON COLUMN rl.quota_client.last_usage IS 'quota.Client.LastUsage: the last report with any usage';
COMMENT ON COLUMN rl.quota_client.sent_fill IS 'quota.Client.Sent.Fill: the last grant sent';
COMMENT ON COLUMN rl.quota_client.sent_tokens IS 'quota.Client.Sent.Tokens';
COMMENT ON COLUMN rl.quota_client.prev_fill IS 'quota.Client.Prev.Fill: the largest earlier grant the client may still enforce';
COMMENT ON COLUMN rl.quota_client.prev_tokens IS 'quota.Client.Prev.Tokens';
COMMENT ON COLUMN rl.quota_client.sent_at IS 'quota.Client.SentAt: when sent_* was first sent';
COMMENT ON COLUMN rl.quota_client.acked IS 'quota.Client.Acked: a report has shown the client enforces sent_*';
COMMENT ON COLUMN rl.quota_client.refreshed IS 'quota.Client.Refreshed: when a grant was last sent (-1 never)';
COMMENT ON COLUMN rl.quota_client.unsent IS 'quota.Client.Unsent: sent_* never reached the client (its stream was full, broken or on another server): no report acknowledges it until it is sent again';
COMMENT ON COLUMN rl.quota_client.gone IS 'quota.Client.Gone: the stream closed or the bucket was abandoned; counted until the grant expires';
