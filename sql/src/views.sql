-- rl.states: rl.state for people, readable by rl_admin only (it shows every
-- tenant's keys). One row per limit of a key: the algorithm by name, the
-- limit that wrote the state, and the state as peeks at the current time
-- read it (rl._state_peek: the decision functions, not a copy of their
-- arithmetic): how many units remain (a peek of cost 0) and whether the key
-- is limited now (a peek of cost 1 is denied). Each row is decided when
-- read: filter by key to read few. A state that does not record its limit
-- (written before migration 17) has NULL there until its next decision.
CREATE VIEW rl.states AS
SELECT v.key, v.name, rl.algorithm_name(v.algorithm) AS algorithm, nullif(v.l, 0) AS lim,
       rl.us_to_interval(nullif(v.w, 0)) AS win, nullif(v.r, 0) AS rate,
       (v.p0).remaining AS remaining, NOT (v.p1).allowed AS limited,
       CASE WHEN NOT (v.p1).allowed THEN rl.us_to_timestamptz(v.now + (v.p1).retry_after) END AS retry_at,
       rl.us_to_timestamptz(v.now + (v.p0).reset_after) AS reset_at,
       rl.us_to_timestamptz(v.expires_at) AS expires_at,
       rl.us_to_timestamptz(v.now) AS as_of
  FROM (SELECT s.key, s.name, s.algorithm, s.l, s.w, s.r, s.expires_at, n.now,
               rl._state_peek(s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, n.now, 0) AS p0,
               rl._state_peek(s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, n.now, 1) AS p1
          FROM rl.state s CROSS JOIN (SELECT rl._now() AS now) n
        OFFSET 0) v;
COMMENT ON VIEW rl.states IS
    'rl.state for people (rl_admin): algorithm names, timestamptz, and what peeks now answer: remaining units, limited now';
COMMENT ON COLUMN rl.states.lim IS 'the limit that wrote the state (NULL: not recorded, a state written before migration 17)';
COMMENT ON COLUMN rl.states.win IS 'the window of that limit';
COMMENT ON COLUMN rl.states.rate IS 'its rate, units per window (token_bucket, leaky_bucket, gcra; NULL for the window algorithms)';
COMMENT ON COLUMN rl.states.remaining IS 'units a call could take now (a peek of cost 0 at as_of)';
COMMENT ON COLUMN rl.states.limited IS 'true when a call of cost 1 would be denied now (a peek of cost 1 at as_of)';
COMMENT ON COLUMN rl.states.retry_at IS 'when a call of cost 1 passes again; NULL when not limited';
COMMENT ON COLUMN rl.states.reset_at IS 'when the state is back to a fresh one if nothing more is taken';
COMMENT ON COLUMN rl.states.expires_at IS 'after this time rl_expire may delete the row (an upper bound of reset_at)';
COMMENT ON COLUMN rl.states.as_of IS 'the time the row was read at (rl.now_us if set, else the database clock)';
