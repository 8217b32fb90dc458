-- The sliding window (core.SlidingWindow): the counts of the current and
-- the previous window of the grid, the previous one weighted by the part of
-- it still inside a window ending now. Its functions have the names and
-- signatures the generated dispatch (algorithms.sql) calls,
-- rl._<name>_<role> (ARCHITECTURE.md, "A new algorithm").

-- rl._sliding_window_state_error: its part of core checkState
-- (rl._state_error): any counts.
CREATE FUNCTION rl._sliding_window_state_error(s_t bigint, s_x bigint, s_y bigint, s_log bigint[]) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 0;

-- rl._sliding_retry is core slidingRetry: the first instant at which cost
-- (<= lim) fits a sliding window at (start, curr, prev), elapsed e.
CREATE FUNCTION rl._sliding_retry(w bigint, lim bigint, start bigint, e bigint, curr bigint, prev bigint, cost bigint)
    RETURNS bigint
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
DECLARE
    k bigint;
BEGIN
    IF curr + cost <= lim AND prev > 0 THEN
        -- Later in this window, once enough of prev has slid out.
        k := (lim - curr - cost) * w / prev;
        IF w - k < w THEN
            RETURN start + (w - k);
        END IF;
    END IF;
    -- In the next window curr becomes prev.
    IF curr = 0 THEN
        RETURN start + w;
    END IF;
    k := (lim - cost) * w / curr;
    RETURN start + w + greatest(0, w - k);
END
$fn$;

-- rl._sliding_window_step: its decision (core decide).
CREATE FUNCTION rl._sliding_window_step(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], exact boolean, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    start bigint := now - now % w;
    st    bigint;
    curr  bigint := 0;
    prev  bigint := 0;
    e     bigint;
    room  bigint;
BEGIN
    IF s_alg = 2 THEN
        -- The window holding T: T itself unless the state was written
        -- under another window length.
        st := s_t - s_t % w;
        IF st >= start THEN
            start := st; curr := s_x; prev := s_y;
        ELSIF st + w = start THEN
            prev := s_x;
        END IF;
    END IF;
    IF NOT exact THEN
        -- Counts above the limit of a state written under other parameters
        -- come from a lowered limit: they count as full.
        curr := least(curr, lim);
        prev := least(prev, lim);
    END IF;
    e := greatest(now, start) - start; -- elapsed in the current window, < w
    IF curr <= lim AND prev <= lim THEN
        room := (lim - curr) * w - prev * (w - e);
    ELSE -- counts in debt (exact): the core's int64 arithmetic
        room := rl._wrap64((lim - curr)::numeric * w - prev::numeric * (w - e));
    END IF;
    IF cost = 0 THEN
        r.allowed := true;
    ELSIF cost <= lim - curr THEN
        IF cost * w <= room THEN
            r.allowed := true;
        END IF;
    END IF;
    IF r.allowed THEN
        IF cost > 0 THEN
            curr := curr + cost;
            room := room - cost * w;
            IF p_take THEN
                r.algorithm := 2; r.t := start; r.x := curr; r.y := prev; r.log := '{}';
                r.l := lim; r.w := w; r.r := 0;
            END IF;
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := rl._sliding_retry(w, lim, start, e, curr, prev, cost) - now;
    END IF;
    IF room > 0 THEN
        r.remaining := room / w;
    END IF;
    IF curr > 0 THEN
        r.reset_after := start + 2 * w - now;
    ELSIF prev > 0 THEN
        r.reset_after := start + w - now;
    END IF;
    IF r.remaining < lim THEN
        -- One more unit fits when a call of remaining + 1, denied now, would
        -- pass.
        r.next_after := rl._sliding_retry(w, lim, start, e, curr, prev, r.remaining + 1) - now;
    END IF;
    RETURN r;
END
$function$;

-- rl._sliding_window_settle: its settle (core settleSliding).
CREATE FUNCTION rl._sliding_window_settle(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], exact boolean, now bigint, delta bigint)
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

-- rl._sliding_window_anchor and rl._sliding_window_usage: what rl._carry
-- carries from a state of it, the current window's start and both counts
-- (the previous one weighs fully at the window's start), saturating.
CREATE FUNCTION rl._sliding_window_anchor(s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN s_t;

CREATE FUNCTION rl._sliding_window_usage(s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN least(s_x::numeric + s_y, rl._max_state_value())::bigint;

-- rl._sliding_window_carry: the state it holds with units used at anchor a
-- (rl._carry): the current count of the window holding a.
CREATE FUNCTION rl._sliding_window_carry(a bigint, used bigint, lim bigint, w bigint, rate bigint) RETURNS rl.state_words
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ROW(2, a - a % w, used, 0, '{}', lim, w, 0)::rl.state_words;
