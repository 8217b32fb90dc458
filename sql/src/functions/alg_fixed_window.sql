-- The fixed window (core.FixedWindow): a count per window of the grid, the
-- multiples of the window since the epoch. Its functions have the names and
-- signatures the generated dispatch (algorithms.sql) calls, rl._<name>_<role>
-- (ARCHITECTURE.md, "A new algorithm").

-- rl._fixed_window_state_error: its part of core checkState (rl._state_error).
CREATE FUNCTION rl._fixed_window_state_error(s_t bigint, s_x bigint, s_y bigint, s_log bigint[]) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN s_y <> 0 THEN 8 ELSE 0 END;

-- rl._fixed_window_step: its decision (core decide).
CREATE FUNCTION rl._fixed_window_step(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], exact boolean, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    start bigint := now - now % w;
    cnt   bigint := 0;
    e     bigint;
BEGIN
    IF s_alg = 1 AND s_t >= start THEN
        -- The current window, or a later one if the clock stepped back. A
        -- state written under another window length may start off the
        -- current one's grid: its window is the one holding T.
        start := s_t - s_t % w;
        cnt := s_x;
    END IF;
    e := start + w; -- end
    IF cost = 0 OR cnt + cost <= lim THEN
        r.allowed := true;
        IF cost > 0 THEN
            cnt := cnt + cost;
            IF p_take THEN
                r.algorithm := 1; r.t := start; r.x := cnt; r.y := 0; r.log := '{}';
                r.l := lim; r.w := w; r.r := 0;
            END IF;
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := e - now;
    END IF;
    r.remaining := greatest(0, lim - cnt);
    IF cnt > 0 THEN
        -- The whole quota comes back when the window ends, none before.
        r.reset_after := e - now;
        r.next_after := e - now;
    END IF;
    RETURN r;
END
$function$;

-- rl._fixed_window_settle: its settle (core settleFixed).
CREATE FUNCTION rl._fixed_window_settle(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], exact boolean, now bigint, delta bigint)
 RETURNS rl.state_words
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    start bigint := now - now % w;
    cnt   bigint := 0;
BEGIN
    IF s_alg = 1 AND s_t >= start THEN
        start := s_t - s_t % w;
        cnt := s_x;
    END IF;
    -- 0019: a count beyond a state capped at MaxStateValue, never refused
    -- (core settleFixed; no overflow: both within MaxStateValue + MaxCost).
    cnt := least(cnt + delta, rl._max_state_value());
    IF cnt > 0 THEN
        RETURN ROW(1, start, cnt, 0, '{}', 0, 0, 0)::rl.state_words;
    END IF;
    RETURN ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words;
END
$function$;

-- rl._fixed_window_anchor and rl._fixed_window_usage: what rl._carry
-- carries from a state of it, the window's start and its count.
CREATE FUNCTION rl._fixed_window_anchor(s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN s_t;

CREATE FUNCTION rl._fixed_window_usage(s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN s_x;

-- rl._fixed_window_carry: the state it holds with units used at anchor a
-- (rl._carry): the count of the window holding a.
CREATE FUNCTION rl._fixed_window_carry(a bigint, used bigint, lim bigint, w bigint, rate bigint) RETURNS rl.state_words
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ROW(1, a - a % w, used, 0, '{}', lim, w, 0)::rl.state_words;
