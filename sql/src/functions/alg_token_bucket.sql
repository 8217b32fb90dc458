-- The token bucket (core.TokenBucket): a level that drains at its rate;
-- an admission adds its cost, if the level stays within the
-- capacity. Its functions have the names and signatures the generated
-- dispatch (algorithms.sql) calls, rl._<name>_<role> (sql/README.md, "A new
-- algorithm"); its step and settle are the level arithmetic of levels.sql.

-- rl._token_bucket_state_error: its part of core checkState (rl._state_error).
CREATE FUNCTION rl._token_bucket_state_error(s_t bigint, s_x bigint, s_y bigint, s_log bigint[]) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN s_y <> 0 THEN 8 ELSE 0 END;

-- rl._token_bucket_step: its decision (core decide), rl._bucket's. An SQL
-- function of one expression, which the planner inlines into rl._eval: a
-- decision calls one PL/pgSQL function, rl._bucket.
CREATE FUNCTION rl._token_bucket_step(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], exact boolean, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN rl._bucket(4, lim, w, rate, s_alg, s_t, s_x, exact, now, cost, p_take, r);

-- rl._token_bucket_settle: its settle (core settleLevel), rl._settle_level's.
CREATE FUNCTION rl._token_bucket_settle(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], exact boolean, now bigint, delta bigint)
 RETURNS rl.state_words
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN rl._settle_level(4, lim, w, rate, s_alg, s_t, s_x, s_y, exact, now, delta);

-- rl._token_bucket_anchor and rl._token_bucket_usage: what rl._carry carries from a
-- state of it:  a level of units that drains at the rate, each admission adding its cost.:its level at T, the last update, in 1/s_w of a unit.
CREATE FUNCTION rl._token_bucket_anchor(s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN s_t;

CREATE FUNCTION rl._token_bucket_usage(s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN s_x;

-- rl._token_bucket_carry: the state it holds with the level used (in 1/w of a
-- unit) at anchor a (rl._carry).
CREATE FUNCTION rl._token_bucket_carry(a bigint, used bigint, lim bigint, w bigint, rate bigint) RETURNS rl.state_words
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ROW(4, a, used, 0, '{}', lim, w, rate)::rl.state_words;
