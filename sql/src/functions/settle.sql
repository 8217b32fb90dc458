
CREATE OR REPLACE FUNCTION rl._settle_fixed(w bigint, s_alg integer, s_t bigint, s_x bigint, now bigint, delta bigint)
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

CREATE OR REPLACE FUNCTION rl._settle_level(p_alg integer, lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, exact boolean, now bigint, delta bigint)
 RETURNS rl.state_words
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    capacity bigint := lim * w;
    ne       bigint := now;
    lvl      bigint := 0;
    dt       bigint;
    el       bigint;
    q        bigint;
BEGIN
    IF rate = 0 THEN
        rate := lim;
    END IF;
    IF s_alg = p_alg THEN
        IF p_alg = 6 THEN
            IF s_y > 0 AND NOT exact THEN
                dt := s_t - s_y;
                IF dt > capacity / rate THEN
                    s_t := s_y + capacity / rate; s_x := capacity % rate;
                ELSIF dt * rate + s_x > capacity THEN
                    s_t := s_y + capacity / rate; s_x := capacity % rate;
                END IF;
            END IF;
            ne := greatest(now, s_y);
            IF s_t >= ne THEN
                lvl := least((s_t - ne)::numeric * rate + s_x, rl._max_state_value())::bigint;
            ELSE
                dt := ne - s_t;
                IF s_x > 0 THEN
                    IF dt < rl._ceil_div(s_x, rate) THEN
                        lvl := s_x - dt * rate;
                    END IF;
                END IF;
            END IF;
        ELSE
            ne := greatest(now, s_t);
            lvl := s_x;
            IF NOT exact THEN
                lvl := least(lvl, capacity);
            END IF;
            el := ne - s_t;
            IF el > 0 AND lvl > 0 THEN
                IF el >= rl._ceil_div(lvl, rate) THEN
                    lvl := 0;
                ELSE
                    lvl := lvl - el * rate;
                END IF;
            END IF;
        END IF;
    END IF;
    IF delta >= 0 THEN
        IF delta::numeric * w > rl._max_state_value() - lvl THEN
            lvl := rl._max_state_value(); -- 0019: a debt beyond a state, capped
        ELSE
            lvl := lvl + delta * w;
        END IF;
    ELSIF (-delta)::numeric * w >= lvl THEN
        lvl := 0;
    ELSE
        lvl := lvl + delta * w;
    END IF;
    IF lvl = 0 THEN
        RETURN ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words;
    END IF;
    IF p_alg = 6 THEN
        q := lvl / rate;
        IF q > rl._max_state_value() - ne THEN -- its arrival time would not fit a state: capped (0019)
            q := rl._max_state_value() - ne;
            lvl := q * rate; -- <= the level: no overflow
        END IF;
        RETURN ROW(6, ne + q, lvl - q * rate, ne, '{}', 0, 0, 0)::rl.state_words;
    END IF;
    RETURN ROW(p_alg, ne, lvl, 0, '{}', 0, 0, 0)::rl.state_words;
END
$function$;

-- rl._settle_log is core settleLog: live entries kept, the oldest first,
-- then entries at now (or the newest entry's time, if later) for a
-- positive delta, at most up to the limit; a log carried over (s_x set,
-- see rl._carry) is written for the first time.
CREATE FUNCTION rl._settle_log(lim bigint, w bigint, s_alg integer, s_t bigint, s_x bigint, s_log bigint[], now bigint, delta bigint)
 RETURNS rl.state_words
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    n_log   integer;
    ne      bigint := now;
    i0      integer := 0;
    cnt     bigint;
    carried bigint := 0; -- entries carried over at s_t, not yet written
    keep    bigint;
    old     bigint;
    e       bigint[];
BEGIN
    IF s_alg <> 3 THEN
        s_log := '{}';
    END IF;
    n_log := cardinality(s_log);
    IF n_log > 0 THEN
        ne := greatest(now, s_log[n_log]);
    END IF;
    WHILE i0 < n_log AND s_log[i0 + 1] <= ne - w LOOP
        i0 := i0 + 1;
    END LOOP;
    cnt := n_log - i0;
    IF s_alg = 3 AND s_x <> 0 THEN
        ne := greatest(now, s_t);
        IF s_t > ne - w THEN
            carried := s_x;
        END IF;
        cnt := carried;
    END IF;
    keep := cnt + delta; -- live entries after the settle
    IF delta > 0 THEN
        keep := greatest(cnt, least(keep, lim));
    END IF;
    keep := greatest(0, keep);
    IF keep = 0 THEN
        RETURN ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words;
    END IF;
    old := least(keep, cnt); -- live entries kept, the oldest first
    IF carried > 0 THEN
        e := array_fill(s_t, ARRAY[old::integer]);
    ELSE
        e := s_log[i0 + 1 : i0 + old::integer];
    END IF;
    e := e || array_fill(ne, ARRAY[(keep - old)::integer]);
    RETURN ROW(3, 0, 0, 0, e, 0, 0, 0)::rl.state_words;
END
$function$;

CREATE OR REPLACE FUNCTION rl._settle_sliding(lim bigint, w bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, exact boolean, now bigint, delta bigint)
 RETURNS rl.state_words
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    start bigint := now - now % w;
    st    bigint;
    curr  bigint := 0;
    prev  bigint := 0;
    m     bigint;
BEGIN
    IF s_alg = 2 THEN
        st := s_t - s_t % w;
        IF st >= start THEN
            start := st; curr := s_x; prev := s_y;
        ELSIF st + w = start THEN
            prev := s_x;
        END IF;
    END IF;
    IF NOT exact THEN
        curr := least(curr, lim);
        prev := least(prev, lim);
    END IF;
    curr := curr + delta; -- no overflow: curr <= MaxStateValue, |delta| <= MaxCost
    IF curr < 0 THEN
        prev := greatest(0, prev + curr);
        curr := 0;
    END IF;
    -- A debt is kept while the counts times the window stay within
    -- MaxUnits (core settleSliding); 0019: a larger one is capped there,
    -- never refused.
    m := rl._max_units() / w;
    IF curr > m - least(prev, m) THEN
        prev := least(prev, m);
        curr := m - prev;
    END IF;
    IF curr > 0 OR prev > 0 THEN
        RETURN ROW(2, start, curr, prev, '{}', 0, 0, 0)::rl.state_words;
    END IF;
    RETURN ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words;
END
$function$;

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
    CASE p_alg
    WHEN 1 THEN
        n := rl._settle_fixed(p_win, s_alg, s_t, s_x, p_now, p_delta);
    WHEN 2 THEN
        n := rl._settle_sliding(p_lim, p_win, s_alg, s_t, s_x, s_y, exact, p_now, p_delta);
    WHEN 3 THEN
        n := rl._settle_log(p_lim, p_win, s_alg, s_t, s_x, s_log, p_now, p_delta);
    ELSE
        n := rl._settle_level(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, exact, p_now, p_delta);
    END CASE;
    -- 0019: a debt too large for a state is capped (the rl._settle_*
    -- functions), never refused: n is never NULL.
    IF n.algorithm <> 0 THEN
        n.l := p_lim; n.w := p_win; n.r := srate;
    END IF;
    RETURN rl._eval(p_alg, p_lim, p_win, p_rate, n.algorithm, n.t, n.x, n.y, n.log, n.l, n.w, n.r, p_now, 0, false);
END
$function$;
