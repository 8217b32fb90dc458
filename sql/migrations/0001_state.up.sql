-- 0001: the schema rl and the state table.
--
-- One row per (key, limit name): the words of core.State plus expires_at.
-- This row format is the state encoding shared by the SQL functions and the
-- Go pgstore; keep both in step (see sql/README.md, "State rows").
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE SCHEMA rl;
COMMENT ON SCHEMA rl IS 'rate limiting: state table and decision functions (github.com/rlcore/rl)';

CREATE TABLE rl.state (
    key        text     NOT NULL,
    name       text     NOT NULL,
    algorithm  integer  NOT NULL DEFAULT 0,
    t          bigint   NOT NULL DEFAULT 0,
    x          bigint   NOT NULL DEFAULT 0,
    y          bigint   NOT NULL DEFAULT 0,
    log        bigint[] NOT NULL DEFAULT '{}',
    expires_at bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (key, name)
);

COMMENT ON TABLE rl.state IS
    'core.State of one limit (name) on one key. A missing row is a fresh state. '
    'No CHECK constraints on purpose: the decision functions validate the words and report ErrState (RL008).';
COMMENT ON COLUMN rl.state.algorithm IS 'core.Algorithm that wrote the state (0 fresh, 1 fixed_window .. 6 gcra)';
COMMENT ON COLUMN rl.state.t IS 'core.State.T';
COMMENT ON COLUMN rl.state.x IS 'core.State.X';
COMMENT ON COLUMN rl.state.y IS 'core.State.Y';
COMMENT ON COLUMN rl.state.log IS 'core.State.Log: sliding-log entries (µs), ascending; empty for the other algorithms';
COMMENT ON COLUMN rl.state.expires_at IS
    'µs since the Unix epoch: now + reset_after of the latest write. The row is idle (deletable) once expires_at <= now.';

-- rl.rl_expire deletes idle rows oldest first.
CREATE INDEX state_expires_at_idx ON rl.state (expires_at);
