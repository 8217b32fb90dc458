-- rl._carry is core carry: the state a limit (p_*) holds with the usage of
-- a state recorded under other parameters or by another algorithm (s_*,
-- whose l, w and r are set), read at the state's own time, its anchor (a
-- bucket's last update, GCRA's last admission, a window's start, a log's
-- newest entry), so the result depends on the state and the limit only:
-- between the buckets and GCRA the level is rescaled to the new window,
-- rounded up; otherwise the units used are counted whole (a fraction
-- counts as one) and placed at the anchor. The usage is clamped to the new
-- limit. Each algorithm gives its anchor and usage (rl._alg_anchor,
-- rl._alg_usage: whole units for a window algorithm, a level in 1/s_w of a
-- unit for the others) and the state it holds with a usage
-- (rl._alg_carry); a sliding log is carried as (t = anchor, x = entries),
-- decided by rl._sliding_log_carried until an admission writes its
-- entries. The products and quotients the core computes in 128 bits are
-- numeric here, saturating at MaxStateValue as the core's do (and the
-- quotient's increment wrapping at 2^64 as its uint64 does).
CREATE FUNCTION rl._carry(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint)
 RETURNS rl.state_words
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    a    bigint := rl._alg_anchor(s_alg, s_t, s_x, s_y, s_log, s_w, s_r);
    used bigint := rl._alg_usage(s_alg, s_t, s_x, s_y, s_log, s_w, s_r);
    q    numeric;
BEGIN
    IF NOT rl._windowed(s_alg) THEN -- a level in 1/s_w of a unit
        IF NOT rl._windowed(p_alg) THEN
            -- ceil(used * p_win / s_w), saturating.
            q := div(used::numeric * p_win, s_w);
            IF q >= 18446744073709551616 THEN
                used := rl._max_state_value();
            ELSE
                IF q * s_w <> used::numeric * p_win THEN
                    q := (q + 1) % 18446744073709551616;
                END IF;
                used := least(q, rl._max_state_value())::bigint;
            END IF;
        ELSE
            used := used / s_w + CASE WHEN used % s_w <> 0 THEN 1 ELSE 0 END;
        END IF;
    ELSIF NOT rl._windowed(p_alg) THEN
        used := least(used, p_lim) * p_win;
    END IF;
    used := least(used, CASE WHEN rl._windowed(p_alg) THEN p_lim ELSE p_lim * p_win END);
    IF used = 0 THEN
        RETURN ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words;
    END IF;
    RETURN rl._alg_carry(p_alg, a, used, p_lim, p_win, CASE WHEN p_rate = 0 THEN p_lim ELSE p_rate END);
END
$function$;

CREATE OR REPLACE FUNCTION rl._eval(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_l bigint, s_w bigint, s_r bigint, p_now bigint, p_cost bigint, p_take boolean)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    r     rl._eval_result;
    exact boolean;
    c     rl.state_words;
BEGIN
    IF p_alg IS NULL OR p_lim IS NULL OR p_win IS NULL OR p_rate IS NULL OR p_now IS NULL OR p_cost IS NULL
            OR s_alg IS NULL OR s_t IS NULL OR s_x IS NULL OR s_y IS NULL OR s_log IS NULL
            OR s_l IS NULL OR s_w IS NULL OR s_r IS NULL THEN
        p_alg := coalesce(p_alg, 0);
        p_lim := coalesce(p_lim, 0);
        p_win := coalesce(p_win, 0);
        p_rate := coalesce(p_rate, -1);
        p_now := coalesce(p_now, -1);
        p_cost := coalesce(p_cost, -1);
        s_alg := coalesce(s_alg, 0);
        s_t := coalesce(s_t, 0);
        s_x := coalesce(s_x, 0);
        s_y := coalesce(s_y, 0);
        s_log := coalesce(s_log, '{}');
        s_l := coalesce(s_l, 0);
        s_w := coalesce(s_w, 0);
        s_r := coalesce(s_r, 0);
    END IF;
    -- l.check(), checkCall, checkState, in the core's order.
    r.err := coalesce(nullif(rl._limit_error(p_alg, p_lim, p_win, p_rate), 0),
                      nullif(rl._call_error(p_now, p_cost), 0),
                      rl._state_error(s_alg, s_t, s_x, s_y, s_log, s_l, s_w, s_r));
    IF r.err <> 0 THEN
        RETURN r;
    END IF;
    IF s_alg = 3 AND array_lower(s_log, 1) <> 1 THEN
        s_log := array(SELECT unnest(s_log)); -- an array starting at another index than 1
    END IF;
    -- n = *s: a call that admits nothing returns the state unchanged.
    -- settle_caps (0019) is true in every result that is not an error.
    r := ROW(0, false, p_lim, 0, 0, 0, 0, s_alg, s_t, s_x, s_y, s_log, 0, s_l, s_w, s_r, true)::rl._eval_result;
    -- core read: exact when written under this limit's own parameters (the
    -- recorded rate is the effective one, 0 for the window algorithms).
    exact := s_alg = p_alg AND s_w = p_win AND s_l = p_lim
             AND s_r = CASE WHEN rl._windowed(p_alg) THEN 0 WHEN p_rate = 0 THEN p_lim ELSE p_rate END;
    -- Recorded under other parameters and converted (core converts: a
    -- window algorithm reads its own state as it is): the carried state,
    -- within the new limit, reads as exact.
    IF NOT exact AND s_w <> 0 AND (s_alg <> p_alg OR NOT rl._windowed(s_alg)) THEN
        c := rl._carry(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, s_log, s_w, s_r);
        s_alg := c.algorithm; s_t := c.t; s_x := c.x; s_y := c.y; s_log := c.log;
        exact := true;
    END IF;
    -- The algorithm's step (rl._<name>_step), which the planner inlines:
    -- one PL/pgSQL call.
    RETURN rl._alg_step(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, s_log, exact, p_now, p_cost, p_take, r);
END
$function$;
