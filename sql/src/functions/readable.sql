-- rl.us_to_interval is µs as an interval, for people reading a result of
-- the functions (retry_after_us, reset_after_us, ...); a negative value,
-- -1 for never, is NULL.
CREATE FUNCTION rl.us_to_interval(us bigint) RETURNS interval
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN CASE WHEN us >= 0 THEN us * interval '1 microsecond' END;
COMMENT ON FUNCTION rl.us_to_interval(bigint) IS 'µs as an interval; a negative value (-1: never) is NULL';

-- rl.us_to_timestamptz is a time in µs since the Unix epoch (now_us,
-- rl.state.expires_at) as a timestamptz, exact to the µs.
CREATE FUNCTION rl.us_to_timestamptz(us bigint) RETURNS timestamptz
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    RETURN pg_catalog.to_timestamp(0) + us * interval '1 microsecond';
COMMENT ON FUNCTION rl.us_to_timestamptz(bigint) IS 'a time in µs since the Unix epoch as a timestamptz';

-- rl.readable is a decision of rl_allow, rl_peek or rl_settle (and their
-- _us forms) for people: durations as intervals, instants as timestamptz;
-- retry_after and retry_at are NULL when the cost can never pass (-1 in
-- retry_after_us). Call it in FROM, after the decision, so that the
-- decision runs once: SELECT r.* FROM rl.rl_allow(...) d, rl.readable(d) r.
CREATE FUNCTION rl.readable(d rl.decision, OUT allowed boolean, OUT lim bigint, OUT remaining bigint,
                            OUT retry_after interval, OUT reset_after interval, OUT delay interval,
                            OUT next_after interval, OUT decided_at timestamptz, OUT retry_at timestamptz,
                            OUT reset_at timestamptz)
    LANGUAGE sql STABLE PARALLEL SAFE
AS $fn$
        SELECT d.allowed, d.lim, d.remaining, rl.us_to_interval(d.retry_after_us), rl.us_to_interval(d.reset_after_us),
               rl.us_to_interval(d.delay_us), rl.us_to_interval(d.next_after_us), rl.us_to_timestamptz(d.now_us),
               CASE WHEN d.retry_after_us >= 0 THEN rl.us_to_timestamptz(d.now_us + d.retry_after_us) END,
               rl.us_to_timestamptz(d.now_us + d.reset_after_us)
$fn$;
COMMENT ON FUNCTION rl.readable(rl.decision) IS
    'A decision (rl_allow, rl_peek, rl_settle) with intervals and timestamptz instead of µs; NULL retry_after: never. Call it in FROM: SELECT r.* FROM rl.rl_allow(...) d, rl.readable(d) r';

-- rl.readable of a row of the functions deciding several limits
-- (rl_allow_multi, rl_peek_multi, rl_settle_multi, rl_decide_multi, ...):
-- SELECT r.* FROM rl.rl_allow_multi(...) d, rl.readable(d) r.
CREATE FUNCTION rl.readable(d rl.multi_decision, OUT ord integer, OUT name text, OUT allowed boolean, OUT lim bigint,
                            OUT remaining bigint, OUT retry_after interval, OUT reset_after interval,
                            OUT delay interval, OUT deciding boolean, OUT next_after interval,
                            OUT decided_at timestamptz, OUT retry_at timestamptz, OUT reset_at timestamptz)
    LANGUAGE sql STABLE PARALLEL SAFE
AS $fn$
        SELECT d.ord, d.name, d.allowed, d.lim, d.remaining, rl.us_to_interval(d.retry_after_us),
               rl.us_to_interval(d.reset_after_us), rl.us_to_interval(d.delay_us), d.deciding,
               rl.us_to_interval(d.next_after_us), rl.us_to_timestamptz(d.now_us),
               CASE WHEN d.retry_after_us >= 0 THEN rl.us_to_timestamptz(d.now_us + d.retry_after_us) END,
               rl.us_to_timestamptz(d.now_us + d.reset_after_us)
$fn$;
COMMENT ON FUNCTION rl.readable(rl.multi_decision) IS
    'A row of the multi-limit functions with intervals and timestamptz instead of µs; NULL retry_after: never. Call it in FROM: SELECT r.* FROM rl.rl_allow_multi(...) d, rl.readable(d) r';

-- rl._state_peek is a peek of cost p_cost at p_now on a stored state, under
-- the limit that wrote it (its l, w, r), by the decision functions
-- (rl._eval): what rl_peek with that limit would answer at that time
-- (rl.states). NULL for a state that does not record its limit (fresh, or
-- written before migration 17); err set for a corrupt one. It raises
-- nothing.
CREATE FUNCTION rl._state_peek(s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_l bigint,
                               s_w bigint, s_r bigint, p_now bigint, p_cost bigint) RETURNS rl._eval_result
    LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
    RETURN CASE WHEN s_l <> 0 THEN rl._eval(s_alg, s_l, s_w, s_r, s_alg, s_t, s_x, s_y, s_log, s_l, s_w, s_r, p_now, p_cost, false) END;
