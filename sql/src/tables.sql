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
