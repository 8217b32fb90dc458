
CREATE OR REPLACE FUNCTION rl._fixed_window(lim bigint, w bigint, s_alg integer, s_t bigint, s_x bigint, now bigint, cost bigint, p_take boolean, r rl._eval_result)
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

CREATE FUNCTION rl._gcra(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, exact boolean, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    capacity bigint := lim * w;
    lvl      bigint := 0;
    is_full  boolean := false; -- level > capacity, too big to compute
    dt       bigint;
BEGIN
    IF rate = 0 THEN
        rate := lim;
    END IF;
    IF s_alg = 6 THEN
        IF s_y > 0 AND NOT exact THEN
            -- rl._state_error: s_t >= s_y. dt*rate <= capacity when the
            -- first test fails.
            dt := s_t - s_y;
            IF dt > capacity / rate THEN
                s_t := s_y + capacity / rate; s_x := capacity % rate;
            ELSIF dt * rate + s_x > capacity THEN
                s_t := s_y + capacity / rate; s_x := capacity % rate;
            END IF;
        END IF;
        IF s_t >= now THEN
            dt := s_t - now;
            IF dt > capacity / rate THEN
                is_full := true;
            ELSE
                lvl := dt * rate + s_x;
            END IF;
        ELSE
            dt := now - s_t;
            IF s_x > 0 THEN
                IF dt < rl._ceil_div(s_x, rate) THEN
                    lvl := s_x - dt * rate;
                END IF;
            END IF;
        END IF;
    END IF;
    IF cost = 0 THEN
        r.allowed := true;
    ELSIF NOT is_full AND cost <= lim THEN
        IF lvl + cost * w <= capacity THEN
            r.allowed := true;
        END IF;
    END IF;
    IF r.allowed THEN
        IF cost > 0 THEN
            lvl := lvl + cost * w;
            IF p_take THEN
                r.algorithm := 6; r.t := now + lvl / rate; r.x := lvl % rate; r.y := now; r.log := '{}';
                r.l := lim; r.w := w; r.r := rate;
            END IF;
            r.reset_after := rl._ceil_div(lvl, rate);
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        -- First t with (T-t)*r + X <= capacity - cost*w.
        r.retry_after := s_t + rl._ceil_div_signed(s_x + cost * w - capacity, rate) - now;
    END IF;
    IF NOT is_full AND lvl < capacity THEN
        r.remaining := (capacity - lvl) / w;
    END IF;
    IF r.reset_after = 0 AND (is_full OR lvl > 0) THEN
        r.reset_after := s_t + rl._ceil_div(s_x, rate) - now;
    END IF;
    IF is_full THEN -- as a retry of one unit
        r.next_after := s_t + rl._ceil_div_signed(s_x + w - capacity, rate) - now;
    ELSIF lvl > 0 THEN
        -- The level drains rate units a µs from now on: the first instant at
        -- which remaining + 1 units fit.
        r.next_after := rl._ceil_div(lvl - capacity + (r.remaining + 1) * w, rate);
    END IF;
    RETURN r;
END
$function$;

-- rl._carry is core carry: the state a limit (p_*) holds with the usage of
-- a state recorded under other parameters or by another algorithm (s_*,
-- whose l, w and r are set), read at the state's own time, its anchor (a
-- bucket's last update, GCRA's last admission, a window's start, a log's
-- newest entry), so the result depends on the state and the limit only:
-- between the buckets and GCRA the level is rescaled to the new window,
-- rounded up; otherwise the units used are counted whole (a fraction
-- counts as one) and placed at the anchor. The usage is clamped to the new
-- limit. A sliding log is carried as (t = anchor, x = entries), decided by
-- rl._sliding_log_carried until an admission writes its entries. The
-- products and quotients the core computes in 128 bits are numeric here,
-- saturating at MaxStateValue as the core's do (and the quotient's
-- increment wrapping at 2^64 as its uint64 does).
CREATE FUNCTION rl._carry(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint)
 RETURNS rl.state_words
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    rate     bigint := CASE WHEN p_rate = 0 THEN p_lim ELSE p_rate END; -- the buckets and GCRA
    capacity bigint;
    a        bigint := 0; -- the anchor
    units    bigint := 0; -- whole units used, for a destination that counts them
    lvl      bigint := 0; -- the rescaled level, for a bucket or GCRA destination
    old      numeric;     -- a bucket's or GCRA's level, in 1/s_w of a unit
    q        numeric;
    n        integer;
    fresh    rl.state_words := ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words;
BEGIN
    CASE s_alg
    WHEN 1 THEN
        a := s_t; units := s_x;
    WHEN 2 THEN
        a := s_t; units := least(s_x::numeric + s_y, rl._max_state_value())::bigint;
    WHEN 3 THEN
        n := cardinality(s_log);
        IF n = 0 THEN
            RETURN fresh;
        END IF;
        a := s_log[n];
        SELECT count(*) INTO units FROM unnest(s_log) AS u(e) WHERE u.e > a - s_w;
    ELSE -- 4, 5, 6: a level in 1/s_w of a unit
        IF s_alg = 6 THEN
            a := s_y;
            old := least((s_t - s_y)::numeric * s_r + s_x, rl._max_state_value());
        ELSE
            a := s_t; old := s_x;
        END IF;
        IF NOT rl._windowed(p_alg) THEN
            -- ceil(old * p_win / s_w), saturating.
            q := div(old * p_win, s_w);
            IF q >= 18446744073709551616 THEN
                lvl := rl._max_state_value();
            ELSE
                IF q * s_w <> old * p_win THEN
                    q := (q + 1) % 18446744073709551616;
                END IF;
                lvl := least(q, rl._max_state_value())::bigint;
            END IF;
        ELSE
            units := old::bigint / s_w + CASE WHEN old::bigint % s_w <> 0 THEN 1 ELSE 0 END;
        END IF;
    END CASE;
    IF NOT rl._windowed(p_alg) THEN
        capacity := p_lim * p_win;
        IF rl._windowed(s_alg) THEN
            lvl := least(units, p_lim) * p_win;
        END IF;
        lvl := least(lvl, capacity);
        IF lvl = 0 THEN
            RETURN fresh;
        END IF;
        IF p_alg = 6 THEN
            RETURN ROW(6, a + lvl / rate, lvl % rate, a, '{}', p_lim, p_win, rate)::rl.state_words;
        END IF;
        RETURN ROW(p_alg, a, lvl, 0, '{}', p_lim, p_win, rate)::rl.state_words;
    END IF;
    units := least(units, p_lim);
    IF units = 0 THEN
        RETURN fresh;
    END IF;
    IF p_alg = 3 THEN
        -- The entries exist only as (a, units) until an admission writes
        -- them (rl._sliding_log_carried).
        RETURN ROW(3, a, units, 0, '{}', p_lim, p_win, 0)::rl.state_words;
    END IF;
    RETURN ROW(p_alg, a - a % p_win, units, 0, '{}', p_lim, p_win, 0)::rl.state_words;
END
$function$;

CREATE OR REPLACE FUNCTION rl._sliding_log(lim bigint, w bigint, s_alg integer, s_log bigint[], now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    n_log  integer := cardinality(s_log);
    ne     bigint := now;
    lo     integer;
    hi     integer;
    mid    integer;
    i0     integer;
    cnt    bigint;
    newest bigint;
    j      bigint;
BEGIN
    IF s_alg <> 3 THEN
        s_log := '{}';
        n_log := 0;
    END IF;
    IF n_log > 0 THEN
        ne := greatest(now, s_log[n_log]);
    END IF;
    -- First live entry: the first with e > ne - w (0-based lo, hi).
    lo := 0;
    hi := n_log;
    WHILE lo < hi LOOP
        mid := (lo + hi) / 2;
        IF s_log[mid + 1] > ne - w THEN
            hi := mid;
        ELSE
            lo := mid + 1;
        END IF;
    END LOOP;
    i0 := lo;
    cnt := n_log - i0;
    newest := ne;
    IF cnt > 0 THEN
        newest := s_log[n_log];
    END IF;
    IF cost = 0 OR cnt + cost <= lim THEN
        r.allowed := true;
        IF cost > 0 THEN
            -- The admission whose expiry brings one more unit back (core's
            -- logNext: of the live entries, then cost units at ne, the
            -- (n + r + 1 - lim)-th oldest, r = max(0, lim - n) remaining).
            j := greatest(0, cnt + cost - lim);
            r.next_after := CASE WHEN j < n_log - i0 THEN s_log[i0 + j + 1] ELSE ne END + w - now;
            IF p_take THEN
                r.algorithm := 3; r.t := 0; r.x := 0; r.y := 0;
                r.log := s_log[i0 + 1 : n_log] || array_fill(ne, ARRAY[cost::integer]);
                r.l := lim; r.w := w; r.r := 0;
            END IF;
            cnt := cnt + cost;
            newest := ne;
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        -- The (count+cost-lim)-th live entry must expire.
        r.retry_after := s_log[i0 + (cnt + cost - lim)::integer] + w - now;
    END IF;
    r.remaining := greatest(0, lim - cnt);
    IF cnt > 0 THEN
        r.reset_after := newest + w - now;
        IF r.next_after = 0 THEN -- not an admission: the log is as it was
            j := greatest(0, cnt - lim);
            r.next_after := CASE WHEN j < n_log - i0 THEN s_log[i0 + j + 1] ELSE ne END + w - now;
        END IF;
    END IF;
    RETURN r;
END
$function$;

-- rl._sliding_log_carried is core slidingLogCarried: a sliding log carried
-- over from a state written under other parameters (rl._carry), held as
-- units entries at time a until an admission writes them, decided as
-- rl._sliding_log decides a log of those entries.
CREATE FUNCTION rl._sliding_log_carried(lim bigint, w bigint, a bigint, units bigint, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    ne     bigint := greatest(now, a);
    cnt    bigint := units;
    live   bigint;
    newest bigint;
    j      bigint;
BEGIN
    IF a <= ne - w THEN
        cnt := 0;
    END IF;
    live := cnt; -- carried entries still live, all at a
    newest := ne;
    IF cnt > 0 THEN
        newest := a;
    END IF;
    IF cost = 0 OR cnt + cost <= lim THEN
        r.allowed := true;
        IF cost > 0 THEN
            -- The admission whose expiry brings one more unit back: a while
            -- it is a carried entry, else ne.
            j := greatest(0, cnt + cost - lim);
            r.next_after := CASE WHEN j < live THEN a ELSE ne END + w - now;
            IF p_take THEN
                r.algorithm := 3; r.t := 0; r.x := 0; r.y := 0;
                r.log := array_fill(a, ARRAY[live::integer]) || array_fill(ne, ARRAY[cost::integer]);
                r.l := lim; r.w := w; r.r := 0;
            END IF;
            cnt := cnt + cost;
            newest := ne;
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := a + w - now; -- every live entry is at a
    END IF;
    r.remaining := greatest(0, lim - cnt);
    IF cnt > 0 THEN
        r.reset_after := newest + w - now;
        IF r.next_after = 0 THEN
            j := greatest(0, cnt - lim);
            r.next_after := CASE WHEN j < live THEN a ELSE ne END + w - now;
        END IF;
    END IF;
    RETURN r;
END
$function$;

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

-- rl._bucket_debt is the rest of rl._bucket for a level above the capacity
-- (a state in debt, read exactly): nothing is admitted but a cost of 0, and
-- the times, ceil(level / rate) + ne - now, wrap as the core's int64 sums
-- do when they pass 2^63.
CREATE FUNCTION rl._bucket_debt(p_alg integer, lim bigint, w bigint, rate bigint, lvl bigint, ne bigint, now bigint, cost bigint, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    capacity bigint := lim * w;
BEGIN
    IF cost = 0 THEN
        r.allowed := true;
        IF p_alg = 5 THEN
            r.delay := rl._wrap64(rl._ceil_div(lvl, rate)::numeric + ne - now);
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := rl._wrap64(rl._ceil_div(lvl + cost * w - capacity, rate)::numeric + ne - now);
    END IF;
    r.reset_after := rl._wrap64(rl._ceil_div(lvl, rate)::numeric + ne - now);
    r.next_after := rl._wrap64(rl._ceil_div(lvl - capacity + w, rate)::numeric + ne - now);
    RETURN r;
END
$function$;

CREATE FUNCTION rl._bucket(p_alg integer, lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, exact boolean, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    capacity bigint := lim * w;
    last     bigint := now;
    lvl      bigint := 0;
    ne       bigint;
    el       bigint;
BEGIN
    IF rate = 0 THEN
        rate := lim;
    END IF;
    IF s_alg = p_alg THEN
        last := s_t;
        lvl := s_x;
        IF NOT exact THEN -- a legacy state written under other parameters
            lvl := least(lvl, capacity);
        END IF;
    END IF;
    ne := greatest(now, last); -- a clock that stepped back is read as the last update
    el := ne - last;
    IF el > 0 AND lvl > 0 THEN
        IF el >= rl._ceil_div(lvl, rate) THEN
            lvl := 0;
        ELSE
            lvl := lvl - el * rate;
        END IF;
    END IF;
    IF cost = 0 THEN
        r.allowed := true;
    ELSIF cost <= lim THEN
        IF lvl + cost * w <= capacity THEN
            r.allowed := true;
        END IF;
    END IF;
    IF lvl > capacity THEN -- in debt (exact): the core's int64 arithmetic
        RETURN rl._bucket_debt(p_alg, lim, w, rate, lvl, ne, now, cost, r);
    END IF;
    IF r.allowed THEN
        IF p_alg = 5 AND lvl > 0 THEN
            r.delay := rl._ceil_div(lvl, rate) + ne - now;
        END IF;
        IF cost > 0 THEN
            lvl := lvl + cost * w;
            IF p_take THEN
                r.algorithm := p_alg; r.t := ne; r.x := lvl; r.y := 0; r.log := '{}';
                r.l := lim; r.w := w; r.r := rate;
            END IF;
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := rl._ceil_div(lvl + cost * w - capacity, rate) + ne - now;
    END IF;
    IF lvl < capacity THEN -- a debt leaves nothing remaining
        r.remaining := (capacity - lvl) / w;
    END IF;
    IF lvl > 0 THEN
        r.reset_after := rl._ceil_div(lvl, rate) + ne - now;
        -- The first instant at which remaining + 1 units fit.
        r.next_after := rl._ceil_div(lvl - capacity + (r.remaining + 1) * w, rate) + ne - now;
    END IF;
    RETURN r;
END
$function$;

CREATE FUNCTION rl._sliding_window(lim bigint, w bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, exact boolean, now bigint, cost bigint, p_take boolean, r rl._eval_result)
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
    CASE p_alg
    WHEN 1 THEN
        RETURN rl._fixed_window(p_lim, p_win, s_alg, s_t, s_x, p_now, p_cost, p_take, r);
    WHEN 2 THEN
        RETURN rl._sliding_window(p_lim, p_win, s_alg, s_t, s_x, s_y, exact, p_now, p_cost, p_take, r);
    WHEN 3 THEN
        IF s_alg = 3 AND s_x <> 0 THEN -- carried over, not yet written
            RETURN rl._sliding_log_carried(p_lim, p_win, s_t, s_x, p_now, p_cost, p_take, r);
        END IF;
        RETURN rl._sliding_log(p_lim, p_win, s_alg, s_log, p_now, p_cost, p_take, r);
    WHEN 6 THEN
        RETURN rl._gcra(p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, exact, p_now, p_cost, p_take, r);
    ELSE
        RETURN rl._bucket(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, exact, p_now, p_cost, p_take, r);
    END CASE;
END
$function$;
