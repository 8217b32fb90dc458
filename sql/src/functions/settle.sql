CREATE OR REPLACE FUNCTION rl._settle(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_l bigint, s_w bigint, s_r bigint, p_now bigint, p_delta bigint)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    r     rl._eval_result;
    exact boolean;
    srate bigint;
    c     rl.state_words;
    n     rl.state_words;
BEGIN
    IF p_alg IS NULL OR p_lim IS NULL OR p_win IS NULL OR p_rate IS NULL OR p_now IS NULL OR p_delta IS NULL
            OR s_alg IS NULL OR s_t IS NULL OR s_x IS NULL OR s_y IS NULL OR s_log IS NULL
            OR s_l IS NULL OR s_w IS NULL OR s_r IS NULL THEN
        p_alg := coalesce(p_alg, 0);
        p_lim := coalesce(p_lim, 0);
        p_win := coalesce(p_win, 0);
        p_rate := coalesce(p_rate, -1);
        p_now := coalesce(p_now, -1);
        p_delta := coalesce(p_delta, rl._max_cost() + 1);
        s_alg := coalesce(s_alg, 0);
        s_t := coalesce(s_t, 0);
        s_x := coalesce(s_x, 0);
        s_y := coalesce(s_y, 0);
        s_log := coalesce(s_log, '{}');
        s_l := coalesce(s_l, 0);
        s_w := coalesce(s_w, 0);
        s_r := coalesce(s_r, 0);
    END IF;
    -- The limit, now, the delta, then the state, in the core's order.
    r.err := coalesce(nullif(rl._limit_error(p_alg, p_lim, p_win, p_rate), 0),
                      nullif(rl._call_error(p_now, 0), 0),
                      CASE WHEN p_delta NOT BETWEEN -rl._max_cost() AND rl._max_cost() THEN 6 END,
                      rl._state_error(s_alg, s_t, s_x, s_y, s_log, s_l, s_w, s_r));
    IF r.err <> 0 THEN
        RETURN r;
    END IF;
    IF p_delta = 0 THEN -- nothing to correct: the state stays as it is
        RETURN rl._eval(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, s_log, s_l, s_w, s_r, p_now, 0, false);
    END IF;
    IF s_alg = 3 AND array_lower(s_log, 1) <> 1 THEN
        s_log := array(SELECT unnest(s_log));
    END IF;
    srate := CASE WHEN rl._windowed(p_alg) THEN 0 WHEN p_rate = 0 THEN p_lim ELSE p_rate END;
    exact := s_alg = p_alg AND s_w = p_win AND s_l = p_lim AND s_r = srate;
    IF NOT exact AND s_w <> 0 AND (s_alg <> p_alg OR NOT rl._windowed(s_alg)) THEN
        c := rl._carry(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, s_log, s_w, s_r);
        s_alg := c.algorithm; s_t := c.t; s_x := c.x; s_y := c.y; s_log := c.log;
        exact := true;
    END IF;
    -- The algorithm's settle (rl._<name>_settle), which the planner
    -- inlines: one PL/pgSQL call.
    n := rl._alg_settle(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, s_log, exact, p_now, p_delta);
    -- 0019: a debt too large for a state is capped (the rl._<name>_settle
    -- functions), never refused: n is never NULL.
    IF n.algorithm <> 0 THEN
        n.l := p_lim; n.w := p_win; n.r := srate;
    END IF;
    RETURN rl._eval(p_alg, p_lim, p_win, p_rate, n.algorithm, n.t, n.x, n.y, n.log, n.l, n.w, n.r, p_now, 0, false);
END
$function$;
