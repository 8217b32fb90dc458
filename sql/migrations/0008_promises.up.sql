-- 0008: the decision port made one function per Go function, and the core's
-- promises kept.
--
--   * A state written under other parameters never denies longer than one
--     window (two for the sliding window) or one full refill of the new
--     parameters: GCRA keeps the time of the admission that wrote its state
--     in y and clamps a state fuller than its capacity at that time (core
--     gcra). Fixed and sliding window read a stored window start in the new
--     window that holds it, so retry_after stays exact after a window change.
--   * core.TakeAll is ported once (rl._all: rl.decide_all and rl._take_many
--     call it), the lock-or-create retry loop exists once (rl._lock_state),
--     the bounds are IMMUTABLE functions (rl._max_limit() ...) that the
--     planner folds to constants, and each Go function of core has one
--     function here: Limit.check rl._limit_error, checkCall rl._call_error,
--     checkState rl._state_error (rl._log_error for the log), eval rl._eval,
--     fixedWindow rl._fixed_window, slidingWindow rl._sliding_window,
--     slidingRetry rl._sliding_retry, slidingLog rl._sliding_log, bucket
--     rl._bucket, gcra rl._gcra, all rl._all, later rl._later.
--   * Errors name the value and the reason (rl._explain), as the service's
--     configuration errors do; the SQLSTATEs RL0NN stay (pgstore maps them
--     back to core.Error), and so does the DETAIL 'limit index N ...'.
--   * rl.enforce_limit checks its arguments on first use and names the bad
--     one and its position.
--
-- Every tenant and trust check of 0007 stays where it was: the table
-- functions check the key with rl._check_tenant_key and decide at
-- rl._request_now; rl.lock_states requires a trusted caller; the trigger
-- checks the key for the inserting role and the table's owner and decides on
-- the database clock.
SET LOCAL search_path = pg_catalog, pg_temp;

-- The bounds of core (core.MaxTime ...). IMMUTABLE SQL functions with a
-- constant body: the planner inlines them, so they cost nothing.
CREATE FUNCTION rl._max_time() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 253402300799999999;
CREATE FUNCTION rl._max_window() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 1000000000000000;
CREATE FUNCTION rl._max_limit() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 1099511627776; -- 2^40
CREATE FUNCTION rl._max_cost() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 1099511627776; -- 2^40
CREATE FUNCTION rl._max_log_limit() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 4096;
CREATE FUNCTION rl._max_units() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 2305843009213693952; -- 2^61
CREATE FUNCTION rl._max_state_value() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 4611686018427387904; -- 2^62
-- How often a call retries locking a row that another session keeps
-- creating and deleting before it gives up with a serialization failure.
CREATE FUNCTION rl._lock_tries() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 100;

-- rl._interval_us, as in 0003, with the bound as rl._max_window(): a window
-- interval in µs, clamped to [-1, MaxWindow + 1] so that an out-of-range
-- window is reported as ErrWindow in check order.
CREATE OR REPLACE FUNCTION rl._interval_us(win interval) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN greatest(-1, least(rl._max_window() + 1, extract(epoch FROM win) * 1000000))::bigint;

-- rl._limit_error is core Limit.check: 0 or the core.Error code. All
-- arguments non-NULL (rl._eval replaces NULLs first).
CREATE FUNCTION rl._limit_error(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN p_alg NOT BETWEEN 1 AND 6 THEN 1
        WHEN p_lim NOT BETWEEN 1 AND rl._max_limit() OR (p_alg = 3 AND p_lim > rl._max_log_limit()) THEN 2
        WHEN p_win NOT BETWEEN 1 AND rl._max_window() THEN 3
        WHEN p_alg <= 3 AND p_rate <> 0 OR p_alg > 3 AND p_rate NOT BETWEEN 0 AND rl._max_limit() THEN 4
        WHEN p_alg <> 1 AND p_alg <> 3 AND p_lim > rl._max_units() / greatest(p_win, 1) THEN 5
        ELSE 0
    END;

-- rl._call_error is core checkCall.
CREATE FUNCTION rl._call_error(p_now bigint, p_cost bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN p_now NOT BETWEEN 0 AND rl._max_time() THEN 7
        WHEN p_cost NOT BETWEEN 0 AND rl._max_cost() THEN 6
        ELSE 0
    END;

-- rl._log_error is the sliding-log part of core checkState. SQL arrays can be
-- multidimensional or hold NULLs, Go slices cannot: both are corrupt.
CREATE FUNCTION rl._log_error(s_log bigint[]) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
DECLARE
    e    bigint;
    prev bigint := 0;
BEGIN
    IF cardinality(s_log) = 0 THEN
        RETURN 0;
    END IF;
    IF cardinality(s_log) > rl._max_log_limit() OR array_ndims(s_log) <> 1
            OR array_position(s_log, NULL) IS NOT NULL THEN
        RETURN 8;
    END IF;
    FOREACH e IN ARRAY s_log LOOP
        IF e < prev OR e > rl._max_state_value() THEN
            RETURN 8;
        END IF;
        prev := e;
    END LOOP;
    RETURN 0;
END
$fn$;

-- rl._state_error is core checkState: 0 or 8 (ErrState).
CREATE FUNCTION rl._state_error(s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[]) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN s_t NOT BETWEEN 0 AND rl._max_state_value() OR s_x NOT BETWEEN 0 AND rl._max_state_value()
             OR s_y NOT BETWEEN 0 AND rl._max_state_value() THEN 8
        WHEN s_alg = 0 THEN CASE WHEN s_t <> 0 OR s_x <> 0 OR s_y <> 0 OR cardinality(s_log) <> 0 THEN 8 ELSE 0 END
        WHEN s_alg IN (1, 4, 5) THEN CASE WHEN s_y <> 0 THEN 8 ELSE 0 END
        -- X: the TAT's fraction numerator, below Rate (<= MaxLimit); Y: the
        -- admission's time, never after the TAT it wrote.
        WHEN s_alg = 6 THEN CASE WHEN s_x > rl._max_limit() OR s_y > s_t THEN 8 ELSE 0 END
        WHEN s_alg = 2 THEN 0
        WHEN s_alg = 3 THEN CASE WHEN s_t <> 0 OR s_x <> 0 OR s_y <> 0 THEN 8 ELSE rl._log_error(s_log) END
        ELSE 8
    END;

-- rl._later is core later: retry-after a is later than b (-1, never, is latest).
CREATE FUNCTION rl._later(a bigint, b bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN b <> -1 AND (a = -1 OR a > b);

-- rl._explain is the message of an error: the value at fault and why, in
-- the words of the service's configuration errors. Arguments as the caller
-- passed them (NULL prints as NULL).
CREATE FUNCTION rl._explain(code integer, p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
                            p_now bigint, p_cost bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint,
                            s_log bigint[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 'ratelimit: ' || CASE code
        WHEN 1 THEN pg_catalog.format('algorithm %s: unknown (want 1 %s, 2 %s, 3 %s, 4 %s, 5 %s or 6 %s)',
            coalesce(p_alg::text, 'NULL'), rl.algorithm_name(1), rl.algorithm_name(2), rl.algorithm_name(3),
            rl.algorithm_name(4), rl.algorithm_name(5), rl.algorithm_name(6))
        WHEN 2 THEN pg_catalog.format('limit %s: outside [1, %s] for %s', coalesce(p_lim::text, 'NULL'),
            CASE WHEN p_alg = 3 THEN rl._max_log_limit() ELSE rl._max_limit() END, rl.algorithm_name(p_alg))
        WHEN 3 THEN pg_catalog.format('window %s µs: outside [1, %s] µs', coalesce(p_win::text, 'NULL'), rl._max_window())
        WHEN 4 THEN CASE WHEN p_alg <= 3
            THEN pg_catalog.format('rate %s: must be 0 or absent for %s (rate applies to %s, %s and %s)',
                coalesce(p_rate::text, 'NULL'), rl.algorithm_name(p_alg), rl.algorithm_name(4), rl.algorithm_name(5),
                rl.algorithm_name(6))
            ELSE pg_catalog.format('rate %s: outside [0, %s] for %s', coalesce(p_rate::text, 'NULL'), rl._max_limit(),
                rl.algorithm_name(p_alg)) END
        WHEN 5 THEN pg_catalog.format('limit %s × window %s µs: too large for %s (limit × window in µs must be at most %s)',
            p_lim, p_win, rl.algorithm_name(p_alg), rl._max_units())
        WHEN 6 THEN pg_catalog.format('cost %s: outside [0, %s]', coalesce(p_cost::text, 'NULL'), rl._max_cost())
        WHEN 7 THEN pg_catalog.format('time %s µs: outside [0, %s] µs since the Unix epoch', coalesce(p_now::text, 'NULL'),
            rl._max_time())
        WHEN 8 THEN pg_catalog.format('stored state (algorithm %s, t %s, x %s, y %s, %s log entries) is corrupt for %s',
            coalesce(s_alg::text, 'NULL'), coalesce(s_t::text, 'NULL'), coalesce(s_x::text, 'NULL'),
            coalesce(s_y::text, 'NULL'), coalesce(cardinality(s_log), 0), rl.algorithm_name(p_alg))
        ELSE pg_catalog.substr(rl._error_message(code), 12)
    END;

-- rl._fail raises error code as SQLSTATE RL0NN with rl._explain's message;
-- detail ('limit index N ...') may be NULL.
CREATE FUNCTION rl._fail(code integer, p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
                         p_now bigint, p_cost bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint,
                         s_log bigint[], detail text) RETURNS void
    LANGUAGE plpgsql
AS $fn$
DECLARE
    msg text := rl._explain(code, p_alg, p_lim, p_win, p_rate, p_now, p_cost, s_alg, s_t, s_x, s_y, s_log);
BEGIN
    IF detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'RL0' || lpad(code::text, 2, '0'), MESSAGE = msg;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'RL0' || lpad(code::text, 2, '0'), MESSAGE = msg, DETAIL = detail;
END
$fn$;

-- rl._unknown_algorithm raises RL001 for an algorithm name rl._alg does not
-- know, after checking the limit name (the check order of rl._take1).
CREATE FUNCTION rl._unknown_algorithm(p_algorithm text, p_name text) RETURNS void
    LANGUAGE plpgsql
AS $fn$
BEGIN
    PERFORM rl._check_key(p_name, 'limit name');
    RAISE EXCEPTION USING ERRCODE = 'RL001',
        MESSAGE = pg_catalog.format('ratelimit: algorithm %s: unknown (want %s, %s, %s, %s, %s or %s)',
            coalesce(quote_literal(p_algorithm), 'NULL'), rl.algorithm_name(1), rl.algorithm_name(2),
            rl.algorithm_name(3), rl.algorithm_name(4), rl.algorithm_name(5), rl.algorithm_name(6)),
        HINT = 'The short names fixed, sliding, log, token and leaky are accepted too.';
END
$fn$;

-- rl._bad_window raises RL003 naming the interval a caller passed, when the
-- window is the first thing wrong (the limit name, algorithm and limit are
-- checked first, as rl._take1 and the core would); else it returns and the
-- decision reports the first error.
CREATE FUNCTION rl._bad_window(p_win interval, p_alg integer, p_lim bigint, p_rate bigint, p_name text) RETURNS void
    LANGUAGE plpgsql
AS $fn$
BEGIN
    PERFORM rl._check_key(p_name, 'limit name');
    IF rl._limit_error(p_alg, coalesce(p_lim, 0), coalesce(rl._interval_us(p_win), 0), coalesce(p_rate, -1)) = 3 THEN
        RAISE EXCEPTION USING ERRCODE = 'RL003',
            MESSAGE = pg_catalog.format('ratelimit: window %s: outside [1 µs, %s µs]', coalesce(quote_literal(p_win), 'NULL'),
                                        rl._max_window()),
            HINT = 'The longest window is about 31.7 years.';
    END IF;
END
$fn$;

-- rl._fixed_window is core fixedWindow. r holds the unchanged state; the
-- new one is written into it when p_take and cost > 0 is admitted.
CREATE FUNCTION rl._fixed_window(lim bigint, w bigint, s_alg integer, s_t bigint, s_x bigint,
                                 now bigint, cost bigint, p_take boolean, r rl._eval_result)
    RETURNS rl._eval_result
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
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
            END IF;
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := e - now;
    END IF;
    r.remaining := greatest(0, lim - cnt);
    IF cnt > 0 THEN
        r.reset_after := e - now;
    END IF;
    RETURN r;
END
$fn$;

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

-- rl._sliding_window is core slidingWindow.
CREATE FUNCTION rl._sliding_window(lim bigint, w bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint,
                                   now bigint, cost bigint, p_take boolean, r rl._eval_result)
    RETURNS rl._eval_result
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
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
    -- Counts above the limit only arise when the limit was lowered.
    curr := least(curr, lim);
    prev := least(prev, lim);
    e := greatest(now, start) - start; -- elapsed in the current window, < w
    room := (lim - curr) * w - prev * (w - e);
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
    RETURN r;
END
$fn$;

-- rl._sliding_log is core slidingLog. s_log is one-dimensional and starts at
-- index 1 (rl._eval normalizes it).
CREATE FUNCTION rl._sliding_log(lim bigint, w bigint, s_alg integer, s_log bigint[],
                                now bigint, cost bigint, p_take boolean, r rl._eval_result)
    RETURNS rl._eval_result
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
DECLARE
    n_log  integer := cardinality(s_log);
    ne     bigint := now;
    lo     integer;
    hi     integer;
    mid    integer;
    i0     integer;
    cnt    bigint;
    newest bigint;
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
            IF p_take THEN
                r.algorithm := 3; r.t := 0; r.x := 0; r.y := 0;
                r.log := s_log[i0 + 1 : n_log] || array_fill(ne, ARRAY[cost::integer]);
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
    END IF;
    RETURN r;
END
$fn$;

-- rl._bucket is core bucket: TokenBucket (4) and LeakyBucket (5).
CREATE FUNCTION rl._bucket(p_alg integer, lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint,
                           now bigint, cost bigint, p_take boolean, r rl._eval_result)
    RETURNS rl._eval_result
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
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
        lvl := least(s_x, capacity);
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
    IF r.allowed THEN
        IF p_alg = 5 AND lvl > 0 THEN
            r.delay := rl._ceil_div(lvl, rate) + ne - now;
        END IF;
        IF cost > 0 THEN
            lvl := lvl + cost * w;
            IF p_take THEN
                r.algorithm := p_alg; r.t := ne; r.x := lvl; r.y := 0; r.log := '{}';
            END IF;
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := rl._ceil_div(lvl + cost * w - capacity, rate) + ne - now;
    END IF;
    r.remaining := (capacity - lvl) / w;
    IF lvl > 0 THEN
        r.reset_after := rl._ceil_div(lvl, rate) + ne - now;
    END IF;
    RETURN r;
END
$fn$;

-- rl._gcra is core gcra: the TAT is T + X/Rate µs, written at Y. A state
-- whose level at Y exceeds the capacity was written under other parameters
-- and is read as full at Y; Y = 0 is not clamped.
CREATE FUNCTION rl._gcra(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint,
                         now bigint, cost bigint, p_take boolean, r rl._eval_result)
    RETURNS rl._eval_result
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
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
        IF s_y > 0 THEN
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
    RETURN r;
END
$fn$;

-- rl._eval is core eval: one limit, one state. p_take false is modePeek (and
-- modeCheck: arrays have no capacity, so ErrLogCapacity never occurs here)
-- and returns the state unchanged. It never raises for bad input; it returns
-- the core.Error code in err (rl._fail raises it).
-- NULLs: a NULL limit parameter, now or cost is out of range; a NULL state
-- word reads as 0 and a NULL log as empty, so a missing row (NULLs from an
-- outer join) is a fresh state.
CREATE OR REPLACE FUNCTION rl._eval(
    p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
    s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[],
    p_now bigint, p_cost bigint, p_take boolean)
    RETURNS rl._eval_result
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
DECLARE
    r rl._eval_result;
BEGIN
    IF p_alg IS NULL OR p_lim IS NULL OR p_win IS NULL OR p_rate IS NULL OR p_now IS NULL OR p_cost IS NULL
            OR s_alg IS NULL OR s_t IS NULL OR s_x IS NULL OR s_y IS NULL OR s_log IS NULL THEN
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
    END IF;
    -- l.check(), checkCall, checkState, in the core's order.
    r.err := coalesce(nullif(rl._limit_error(p_alg, p_lim, p_win, p_rate), 0),
                      nullif(rl._call_error(p_now, p_cost), 0),
                      rl._state_error(s_alg, s_t, s_x, s_y, s_log));
    IF r.err <> 0 THEN
        RETURN r;
    END IF;
    IF s_alg = 3 AND array_lower(s_log, 1) <> 1 THEN
        s_log := array(SELECT unnest(s_log)); -- an array starting at another index than 1
    END IF;
    -- n = *s: a call that admits nothing returns the state unchanged.
    r := ROW(0, false, p_lim, 0, 0, 0, 0, s_alg, s_t, s_x, s_y, s_log)::rl._eval_result;
    CASE p_alg
    WHEN 1 THEN
        RETURN rl._fixed_window(p_lim, p_win, s_alg, s_t, s_x, p_now, p_cost, p_take, r);
    WHEN 2 THEN
        RETURN rl._sliding_window(p_lim, p_win, s_alg, s_t, s_x, s_y, p_now, p_cost, p_take, r);
    WHEN 3 THEN
        RETURN rl._sliding_log(p_lim, p_win, s_alg, s_log, p_now, p_cost, p_take, r);
    WHEN 6 THEN
        RETURN rl._gcra(p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, p_now, p_cost, p_take, r);
    ELSE
        RETURN rl._bucket(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, p_now, p_cost, p_take, r);
    END CASE;
END
$fn$;

-- rl._limit_detail is the DETAIL of an error of limit i (0-based) of a
-- multi-limit call: 'limit index i', and its name when names are known.
CREATE FUNCTION rl._limit_detail(i integer, p_names text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 'limit index ' || i || CASE WHEN p_names IS NULL THEN ''
                                       ELSE pg_catalog.format(' (name %L)', p_names[i + 1]) END;

-- rl._all is core all (TakeAll with p_take, PeekAll without): cost against
-- several limits at once, all or nothing. Limit i is (p_algs[i], p_lims[i],
-- p_wins[i], p_rates[i]) with state p_states[i] (NULL: fresh), arrays
-- 1-based and of equal length n >= 1. It returns each limit's result (the
-- new states only when admitted and p_take) and best, the deciding limit,
-- 1-based. An invalid limit raises RL0NN with DETAIL rl._limit_detail.
CREATE FUNCTION rl._all(p_algs integer[], p_lims bigint[], p_wins bigint[], p_rates bigint[],
                        p_states rl.state_words[], p_now bigint, p_cost bigint, p_take boolean, p_names text[],
                        OUT rs rl._eval_result[], OUT best integer)
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
DECLARE
    n      integer := cardinality(p_algs);
    r      rl._eval_result;
    st     rl.state_words;
    denied integer := 0; -- 1-based; 0: none
    i      integer;
BEGIN
    best := 1;
    IF n = 1 THEN -- one limit: decide and take in one pass
        st := p_states[1];
        r := rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], st.algorithm, st.t, st.x, st.y, st.log,
                      p_now, p_cost, p_take);
        IF r.err <> 0 THEN
            PERFORM rl._fail(r.err, p_algs[1], p_lims[1], p_wins[1], p_rates[1], p_now, p_cost,
                             st.algorithm, st.t, st.x, st.y, st.log, rl._limit_detail(0, p_names));
        END IF;
        rs[1] := r;
        RETURN;
    END IF;
    -- The first pass decides every limit without changing anything.
    FOR i IN 1 .. n LOOP
        st := p_states[i];
        r := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                      p_now, p_cost, false);
        IF r.err <> 0 THEN
            PERFORM rl._fail(r.err, p_algs[i], p_lims[i], p_wins[i], p_rates[i], p_now, p_cost,
                             st.algorithm, st.t, st.x, st.y, st.log, rl._limit_detail(i - 1, p_names));
        END IF;
        rs[i] := r;
        IF NOT r.allowed THEN
            IF denied = 0 THEN
                denied := i;
            ELSIF rl._later(r.retry_after, (rs[denied]).retry_after) THEN
                denied := i;
            END IF;
        END IF;
    END LOOP;
    IF denied > 0 THEN
        best := denied;
        -- Nothing was taken: a limit that would have admitted the cost
        -- reports its state as it is (its decision for cost 0).
        IF p_cost > 0 THEN
            FOR i IN 1 .. n LOOP
                CONTINUE WHEN NOT (rs[i]).allowed;
                st := p_states[i];
                rs[i] := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y,
                                  st.log, p_now, 0, false);
            END LOOP;
        END IF;
        RETURN;
    END IF;
    FOR i IN 1 .. n LOOP
        IF p_take THEN
            st := p_states[i];
            rs[i] := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                              p_now, p_cost, true);
            -- err is 0: the first pass accepted the same input.
        END IF;
        IF (rs[i]).remaining < (rs[best]).remaining THEN
            best := i;
        END IF;
    END LOOP;
END
$fn$;

-- rl.decide is core.Take (op 'take') and core.Peek (op 'peek'); see 0002.
CREATE OR REPLACE FUNCTION rl.decide(
    algorithm integer, lim bigint, window_us bigint, rate bigint,
    state_algorithm integer, state_t bigint, state_x bigint, state_y bigint, state_log bigint[],
    now_us bigint, cost bigint, op text DEFAULT 'take')
    RETURNS rl.decision_state
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    r rl._eval_result;
BEGIN
    IF op IS NULL OR op NOT IN ('take', 'peek') THEN
        RAISE EXCEPTION 'rl.decide: op must be ''take'' or ''peek'', not %', coalesce(quote_literal(op), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    r := rl._eval($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, op = 'take');
    IF r.err <> 0 THEN
        PERFORM rl._fail(r.err, $1, $2, $3, $4, $10, $11, $5, $6, $7, $8, $9, NULL);
    END IF;
    RETURN ROW(0, r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, 0,
               r.algorithm, r.t, r.x, r.y, r.log)::rl.decision_state;
END
$fn$;

-- rl.decide_all is core.TakeAll (op 'take') and core.PeekAll (op 'peek'); see
-- 0002. It checks the arrays and calls rl._all.
CREATE OR REPLACE FUNCTION rl.decide_all(
    limits rl.limit_spec[], states rl.state_words[], now_us bigint, cost bigint, op text DEFAULT 'take')
    RETURNS SETOF rl.decision_state
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    n     integer := coalesce(cardinality(limits), 0);
    lo    integer;
    slo   integer;
    l     rl.limit_spec;
    algs  integer[];
    lims  bigint[];
    wins  bigint[];
    rates bigint[];
    ss    rl.state_words[];
    rs    rl._eval_result[];
    r     rl._eval_result;
    best  integer;
    i     integer;
BEGIN
    IF op IS NULL OR op NOT IN ('take', 'peek') THEN
        RAISE EXCEPTION 'rl.decide_all: op must be ''take'' or ''peek'', not %', coalesce(quote_literal(op), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n = 0 OR (states IS NOT NULL AND cardinality(states) < n) THEN
        PERFORM rl._raise(10, 'limit index 0');
    END IF;
    IF array_ndims(limits) <> 1 OR (states IS NOT NULL AND array_ndims(states) <> 1) THEN
        PERFORM rl._raise(10, 'limit index 0');
    END IF;
    lo := array_lower(limits, 1);
    slo := coalesce(array_lower(states, 1), 1);
    FOR i IN 1 .. n LOOP
        l := limits[lo + i - 1];
        algs[i] := l.algorithm;
        lims[i] := l.lim;
        wins[i] := l.window_us;
        rates[i] := l.rate;
        ss[i] := states[slo + i - 1];
    END LOOP;
    SELECT a.rs, a.best INTO rs, best FROM rl._all(algs, lims, wins, rates, ss, now_us, cost, op = 'take', NULL) a;
    FOR i IN 1 .. n LOOP
        r := rs[i];
        RETURN NEXT ROW(i - 1, r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, best - 1,
                        r.algorithm, r.t, r.x, r.y, r.log)::rl.decision_state;
    END LOOP;
    RETURN;
END
$fn$;

-- rl._lock_state locks the row (key, name), creating it (fresh: the column
-- defaults) if missing; created reports that this call created it. The one
-- lock-or-create loop: a row that another session keeps creating and
-- deleting is retried rl._lock_tries() times, then a serialization failure.
-- READ COMMITTED sees another session's new row on the next statement;
-- REPEATABLE READ raises a serialization failure instead.
CREATE FUNCTION rl._lock_state(p_key text, p_name text, OUT st rl.state_words, OUT created boolean)
    LANGUAGE plpgsql
AS $fn$
DECLARE
    tries integer := 0;
BEGIN
    created := false;
    LOOP
        SELECT s.algorithm, s.t, s.x, s.y, s.log INTO st
          FROM rl.state s WHERE s.key = p_key AND s.name = p_name FOR UPDATE;
        EXIT WHEN FOUND;
        tries := tries + 1;
        IF tries > rl._lock_tries() THEN
            RAISE EXCEPTION 'ratelimit: the state row kept changing; retry the transaction'
                USING ERRCODE = 'serialization_failure';
        END IF;
        INSERT INTO rl.state AS s (key, name) VALUES (p_key, p_name) ON CONFLICT DO NOTHING;
        IF FOUND THEN
            created := true;
        END IF;
    END LOOP;
END
$fn$;

-- rl._decide1 decides one limit on one key and stores the new state: core.Take
-- (p_take) or core.Peek (no lock, no write) against the row (key, name). The
-- common calls run few statements (each distinct PL/pgSQL expression is
-- compiled once per transaction and every statement has a cost): lock or
-- read the row, decide once, write only an admitted cost above 0. A missing
-- row is inserted with its new state; if another session inserted it first,
-- the call locks that row (rl._lock_state) and decides again. A call that
-- writes nothing creates nothing. p_multi: errors carry the DETAIL of
-- rl_decide_multi ('limit index 0 (name ...)').
CREATE FUNCTION rl._decide1(p_key text, p_name text, p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
                            p_cost bigint, p_now bigint, p_take boolean, p_multi boolean)
    RETURNS rl._eval_result
    LANGUAGE plpgsql
AS $fn$
DECLARE
    st      rl.state_words;
    created boolean := false;
    lk      record;
    r       rl._eval_result;
BEGIN
    IF (octet_length(p_key) BETWEEN 1 AND 256 AND octet_length(p_name) BETWEEN 1 AND 256) IS NOT TRUE THEN
        PERFORM rl._check_key(p_key, 'key');
        PERFORM rl._check_key(p_name, 'limit name');
    END IF;
    p_now := coalesce(p_now, rl._now());
    IF p_take THEN
        SELECT s.algorithm, s.t, s.x, s.y, s.log INTO st
          FROM rl.state s WHERE s.key = p_key AND s.name = p_name FOR UPDATE;
    ELSE
        SELECT s.algorithm, s.t, s.x, s.y, s.log INTO st
          FROM rl.state s WHERE s.key = p_key AND s.name = p_name;
    END IF;
    -- Not found: st is NULL, a fresh state.
    r := rl._eval(p_alg, p_lim, p_win, p_rate, st.algorithm, st.t, st.x, st.y, st.log, p_now, p_cost, p_take);
    IF r.err <> 0 THEN
        PERFORM rl._fail(r.err, p_alg, p_lim, p_win, p_rate, p_now, p_cost, st.algorithm, st.t, st.x, st.y, st.log,
                         CASE WHEN p_multi THEN rl._limit_detail(0, ARRAY[p_name]) END);
    END IF;
    -- Denied, peeked or cost 0: the state is unchanged; write nothing.
    IF NOT p_take OR NOT r.allowed OR p_cost = 0 THEN
        RETURN r;
    END IF;
    IF st.algorithm IS NULL THEN
        INSERT INTO rl.state AS s (key, name, algorithm, t, x, y, log, expires_at)
        VALUES (p_key, p_name, r.algorithm, r.t, r.x, r.y, r.log, p_now + r.reset_after)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN r;
        END IF;
        -- Another session created the row first: decide against its state.
        lk := rl._lock_state(p_key, p_name);
        st := lk.st;
        created := lk.created;
        r := rl._eval(p_alg, p_lim, p_win, p_rate, st.algorithm, st.t, st.x, st.y, st.log, p_now, p_cost, true);
        IF NOT r.allowed THEN -- err is 0: the same limit passed above
            IF created THEN
                DELETE FROM rl.state s WHERE s.key = p_key AND s.name = p_name;
            END IF;
            RETURN r;
        END IF;
    END IF;
    UPDATE rl.state s
       SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log, expires_at = p_now + r.reset_after
     WHERE s.key = p_key AND s.name = p_name;
    RETURN r;
END
$fn$;

-- rl._take1 is rl._decide1 for one limit, returning rl.decision.
CREATE OR REPLACE FUNCTION rl._take1(p_key text, p_name text, p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
                          p_cost bigint, p_now bigint, p_take boolean)
    RETURNS rl.decision
    LANGUAGE plpgsql
AS $fn$
DECLARE
    r rl._eval_result;
BEGIN
    p_now := coalesce(p_now, rl._now());
    r := rl._decide1(p_key, p_name, p_alg, p_lim, p_win, p_rate, p_cost, p_now, p_take, false);
    RETURN ROW(r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, p_now)::rl.decision;
END
$fn$;

-- rl._take_many decides several limits on one key, all or nothing (rl._all).
-- Rows are locked in name order (COLLATE "C", i.e. bytewise), creating
-- missing ones in passing (rl._lock_state), so concurrent calls on
-- overlapping names cannot deadlock; decisions and the returned index follow
-- the caller's order. Fresh rows that end up unused (denied, cost 0) are
-- deleted again: the call leaves nothing behind. Other writers of rl.state
-- must lock the same way (see sql/README.md, "Locking protocol").
CREATE OR REPLACE FUNCTION rl._take_many(p_key text, p_names text[], p_algs integer[], p_lims bigint[], p_wins bigint[],
                              p_rates bigint[], p_cost bigint, p_now bigint, p_take boolean)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plpgsql
AS $fn$
DECLARE
    n        integer := cardinality(p_names);
    lock_ord integer[];
    ss       rl.state_words[];
    rs       rl._eval_result[];
    r        rl._eval_result;
    st       rl.state_words;
    lk       record;
    created  text[] := '{}';
    best     integer;
    i        integer;
BEGIN
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 256 THEN
        PERFORM rl._check_key(p_key, 'key');
    END IF;
    IF n IS NULL OR n = 0 OR array_ndims(p_names) <> 1 OR array_lower(p_names, 1) <> 1 THEN
        PERFORM rl._raise(10, 'limit index 0: no limits');
    END IF;
    IF cardinality(p_algs) IS DISTINCT FROM n OR cardinality(p_lims) IS DISTINCT FROM n
            OR cardinality(p_wins) IS DISTINCT FROM n OR cardinality(p_rates) IS DISTINCT FROM n
            OR array_lower(p_algs, 1) <> 1 OR array_lower(p_lims, 1) <> 1
            OR array_lower(p_wins, 1) <> 1 OR array_lower(p_rates, 1) <> 1 THEN
        PERFORM rl._raise(10, 'limit index 0: the parameter arrays differ in length');
    END IF;
    FOR i IN 1 .. n LOOP
        IF (octet_length(p_names[i]) BETWEEN 1 AND 256) IS NOT TRUE THEN
            PERFORM rl._check_key(p_names[i], 'limit name');
        END IF;
        IF p_names[i] = ANY (p_names[1 : i - 1]) THEN
            PERFORM rl._raise(10, format('limit index %s: duplicate name %L', i - 1, p_names[i]));
        END IF;
    END LOOP;
    p_now := coalesce(p_now, rl._now());
    lock_ord := ARRAY(SELECT j FROM generate_subscripts(p_names, 1) AS j ORDER BY p_names[j] COLLATE "C");
    FOREACH i IN ARRAY lock_ord LOOP
        IF p_take THEN
            lk := rl._lock_state(p_key, p_names[i]);
            st := lk.st;
            IF lk.created THEN
                created := created || p_names[i];
            END IF;
        ELSE
            SELECT s.algorithm, s.t, s.x, s.y, s.log INTO st
              FROM rl.state s WHERE s.key = p_key AND s.name = p_names[i];
        END IF;
        ss[i] := st; -- not found: NULL, a fresh state
    END LOOP;
    SELECT a.rs, a.best INTO rs, best FROM rl._all(p_algs, p_lims, p_wins, p_rates, ss, p_now, p_cost, p_take, p_names) a;
    IF p_take AND p_cost > 0 AND (rs[best]).allowed THEN
        FOREACH i IN ARRAY lock_ord LOOP
            r := rs[i];
            UPDATE rl.state s
               SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log,
                   expires_at = p_now + r.reset_after
             WHERE s.key = p_key AND s.name = p_names[i];
        END LOOP;
        created := '{}';
    END IF;
    IF cardinality(created) > 0 THEN
        DELETE FROM rl.state s WHERE s.key = p_key AND s.name = ANY (created);
    END IF;
    FOR i IN 1 .. n LOOP
        r := rs[i];
        RETURN NEXT ROW(i - 1, p_names[i], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay,
                        i = best, p_now)::rl.multi_decision;
    END LOOP;
    RETURN;
END
$fn$;

-- rl._parse_limits, as in 0007, naming an unknown algorithm name where it
-- stands.
CREATE OR REPLACE FUNCTION rl._parse_limits(limits jsonb,
    OUT names text[], OUT algs integer[], OUT lims bigint[], OUT wins bigint[], OUT rates bigint[])
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
DECLARE
    e jsonb;
    a jsonb;
    i integer := 0;
    nm text;
BEGIN
    names := '{}'; algs := '{}'; lims := '{}'; wins := '{}'; rates := '{}';
    IF limits IS NULL OR jsonb_typeof(limits) <> 'array' OR jsonb_array_length(limits) = 0 THEN
        PERFORM rl._raise(10, 'limits must be a non-empty JSON array of objects');
    END IF;
    FOR e IN SELECT v FROM jsonb_array_elements(limits) AS v LOOP
        IF jsonb_typeof(e) <> 'object' THEN
            PERFORM rl._raise(10, format('limits[%s] is not a JSON object', i));
        END IF;
        IF jsonb_typeof(e -> 'name') IS DISTINCT FROM 'string' THEN
            PERFORM rl._raise(10, format('limits[%s] has no "name" string', i));
        END IF;
        nm := e ->> 'name';
        PERFORM rl._check_key(nm, 'limit name');
        IF nm = ANY (names) THEN
            PERFORM rl._raise(10, format('limits[%s]: duplicate name %L', i, nm));
        END IF;
        names := names || nm;
        a := e -> 'algorithm';
        IF jsonb_typeof(a) = 'string' THEN
            IF rl._alg(a #>> '{}') = 0 THEN
                RAISE EXCEPTION USING ERRCODE = 'RL001',
                    MESSAGE = format('ratelimit: limits[%s].algorithm %s: unknown (want %s, %s, %s, %s, %s or %s)', i,
                        quote_literal(a #>> '{}'), rl.algorithm_name(1), rl.algorithm_name(2), rl.algorithm_name(3),
                        rl.algorithm_name(4), rl.algorithm_name(5), rl.algorithm_name(6)),
                    DETAIL = rl._limit_detail(i, names),
                    HINT = 'The short names fixed, sliding, log, token and leaky, and the numbers 1 to 6, are accepted too.';
            END IF;
            algs := algs || rl._alg(a #>> '{}');
        ELSE
            algs := algs || greatest(-1, least(2147483647, coalesce(rl._jint(a, 'algorithm', i), 0)))::integer;
        END IF;
        lims := lims || rl._jint(e -> 'limit', 'limit', i);
        IF e ? 'window_us' OR NOT e ? 'window' THEN
            wins := wins || rl._jint(e -> 'window_us', 'window_us', i);
        ELSIF jsonb_typeof(e -> 'window') = 'string' THEN
            wins := wins || rl._interval_us((e ->> 'window')::interval);
        ELSE
            RAISE EXCEPTION 'ratelimit: limits[%].window must be an interval string such as "1 minute"', i
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- A missing rate is the default, 0; "rate": null is NULL, ErrRate.
        rates := rates || CASE WHEN e ? 'rate' THEN rl._jint(e -> 'rate', 'rate', i) ELSE 0 END;
        i := i + 1;
    END LOOP;
END
$fn$;

-- The table functions check the key (rl._check_tenant_key), decide at
-- rl._request_now(now_us), and name an unknown algorithm.
CREATE OR REPLACE FUNCTION rl.rl_allow(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1,
                            rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    a integer;
    w bigint;
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    a := rl._alg($2);
    IF a = 0 THEN
        PERFORM rl._unknown_algorithm($2, $7);
    END IF;
    w := rl._interval_us($4);
    IF (w BETWEEN 1 AND rl._max_window()) IS NOT TRUE THEN
        PERFORM rl._bad_window($4, a, $3, $6, $7);
    END IF;
    RETURN rl._take1($1, $7, a, $3, w, $6, $5, rl._request_now($8), true);
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_allow_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1,
                               rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    a integer;
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    a := rl._alg($2);
    IF a = 0 THEN
        PERFORM rl._unknown_algorithm($2, $7);
    END IF;
    RETURN rl._take1($1, $7, a, $3, $4, $6, $5, rl._request_now($8), true);
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_peek(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1,
                           rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    a integer;
    w bigint;
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    a := rl._alg($2);
    IF a = 0 THEN
        PERFORM rl._unknown_algorithm($2, $7);
    END IF;
    w := rl._interval_us($4);
    IF (w BETWEEN 1 AND rl._max_window()) IS NOT TRUE THEN
        PERFORM rl._bad_window($4, a, $3, $6, $7);
    END IF;
    RETURN rl._take1($1, $7, a, $3, w, $6, $5, rl._request_now($8), false);
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_peek_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1,
                              rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    a integer;
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    a := rl._alg($2);
    IF a = 0 THEN
        PERFORM rl._unknown_algorithm($2, $7);
    END IF;
    RETURN rl._take1($1, $7, a, $3, $4, $6, $5, rl._request_now($8), false);
END
$fn$;

-- rl.rl_decide_multi, as in 0007: the checks first; one well-formed limit is
-- decided by rl._decide1, anything else by rl._take_many, which validates
-- and raises in the documented order.
CREATE OR REPLACE FUNCTION rl.rl_decide_multi(key text, names text[], algorithms integer[], lims bigint[], windows_us bigint[],
                                   rates bigint[], cost bigint DEFAULT 1, now_us bigint DEFAULT NULL,
                                   take boolean DEFAULT true)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    p_key   ALIAS FOR $1;
    p_names ALIAS FOR $2;
    p_algs  ALIAS FOR $3;
    p_lims  ALIAS FOR $4;
    p_wins  ALIAS FOR $5;
    p_rates ALIAS FOR $6;
    p_cost  ALIAS FOR $7;
    p_now   ALIAS FOR $8;
    p_take  boolean := coalesce($9, true);
    r       rl._eval_result;
BEGIN
    -- Who may use the key, and the time to decide at (see the top of 0007):
    -- rl._decide1 and rl._take_many take p_now as given.
    PERFORM rl._check_tenant_key(p_key, NULL);
    p_now := rl._request_now(p_now);
    IF cardinality(p_names) = 1 AND octet_length(p_key) BETWEEN 1 AND 256
            AND octet_length(p_names[1]) BETWEEN 1 AND 256
            AND array_ndims(p_names) = 1 AND array_lower(p_names, 1) = 1
            AND cardinality(p_algs) = 1 AND cardinality(p_lims) = 1
            AND cardinality(p_wins) = 1 AND cardinality(p_rates) = 1
            AND array_lower(p_algs, 1) = 1 AND array_lower(p_lims, 1) = 1
            AND array_lower(p_wins, 1) = 1 AND array_lower(p_rates, 1) = 1 THEN
        r := rl._decide1(p_key, p_names[1], p_algs[1], p_lims[1], p_wins[1], p_rates[1], p_cost, p_now, p_take, true);
        RETURN NEXT ROW(0, p_names[1], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, true,
                        p_now)::rl.multi_decision;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM rl._take_many($1, $2, $3, $4, $5, $6, $7, $8, p_take);
END
$fn$;

-- rl.enforce_limit, as in 0007 (the tenant checks, the database clock), with
-- every argument checked on use: an error names the argument, its position
-- and what is wrong with it.
CREATE OR REPLACE FUNCTION rl.enforce_limit() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    usage  constant text := 'rl.enforce_limit(key_column, algorithm, limit, window [, cost [, key_prefix [, name]]])';
    col    text;
    alg    integer;
    lim    bigint;
    win    bigint;
    cost   bigint := 1;
    prefix text := '';
    lname  text;
    rec    jsonb;
    val    text;
    d      rl.decision;
    secs   bigint;
    e      integer;
    what   text;
BEGIN
    IF TG_WHEN <> 'BEFORE' OR TG_LEVEL <> 'ROW' OR TG_OP NOT IN ('INSERT', 'UPDATE') THEN
        RAISE EXCEPTION 'ratelimit: % must run BEFORE INSERT (or UPDATE) FOR EACH ROW', usage
            USING ERRCODE = 'invalid_object_definition';
    END IF;
    IF TG_NARGS < 4 OR TG_NARGS > 7 THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %.% has % arguments; usage: %',
            TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_NARGS, usage
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    col := TG_ARGV[0];
    alg := rl._alg(TG_ARGV[1]);
    IF alg = 0 THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %.%, argument 2 (algorithm): % is not an algorithm (want %, %, %, %, % or %)',
            TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, quote_literal(TG_ARGV[1]), rl.algorithm_name(1),
            rl.algorithm_name(2), rl.algorithm_name(3), rl.algorithm_name(4), rl.algorithm_name(5), rl.algorithm_name(6)
            USING ERRCODE = 'RL001', HINT = 'usage: ' || usage;
    END IF;
    IF TG_ARGV[2] !~ '^\s*-?[0-9]{1,19}\s*$' THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %.%, argument 3 (limit): % is not an integer',
            TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, quote_literal(TG_ARGV[2])
            USING ERRCODE = 'invalid_parameter_value', HINT = 'usage: ' || usage;
    END IF;
    lim := TG_ARGV[2]::bigint;
    BEGIN
        win := rl._interval_us(TG_ARGV[3]::interval);
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %.%, argument 4 (window): % is not an interval such as ''1 minute''',
            TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, quote_literal(TG_ARGV[3])
            USING ERRCODE = 'invalid_parameter_value', HINT = 'usage: ' || usage;
    END;
    IF TG_NARGS > 4 AND TG_ARGV[4] <> '' THEN
        IF TG_ARGV[4] !~ '^\s*-?[0-9]{1,19}\s*$' THEN
            RAISE EXCEPTION 'ratelimit: trigger % on %.%, argument 5 (cost): % is not an integer',
                TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, quote_literal(TG_ARGV[4])
                USING ERRCODE = 'invalid_parameter_value', HINT = 'usage: ' || usage;
        END IF;
        cost := TG_ARGV[4]::bigint;
    END IF;
    -- The limit's parameters and the cost, checked as the decision would,
    -- naming the argument at fault.
    e := coalesce(nullif(rl._limit_error(alg, lim, win, 0), 0), nullif(rl._call_error(0, cost), 0), 0);
    IF e <> 0 THEN
        what := CASE e WHEN 2 THEN 'argument 3 (limit)' WHEN 3 THEN 'argument 4 (window)'
                       WHEN 5 THEN 'arguments 3 and 4 (limit and window)' ELSE 'argument 5 (cost)' END;
        RAISE EXCEPTION 'ratelimit: trigger % on %.%, %: %', TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, what,
            CASE WHEN e = 3 THEN format('%L: outside [1 µs, %s µs]', TG_ARGV[3], rl._max_window())
                 ELSE substr(rl._explain(e, alg, lim, win, 0, 0, cost, 0, 0, 0, 0, '{}'), 12) END
            USING ERRCODE = 'RL0' || lpad(e::text, 2, '0'), HINT = 'usage: ' || usage;
    END IF;
    IF TG_NARGS > 5 THEN
        prefix := TG_ARGV[5];
    END IF;
    lname := TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME;
    IF TG_NARGS > 6 AND TG_ARGV[6] <> '' THEN
        lname := TG_ARGV[6];
    END IF;
    rec := to_jsonb(NEW);
    IF NOT rec ? col THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %.%, argument 1 (key_column): the table has no column %',
            TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, quote_ident(col)
            USING ERRCODE = 'undefined_column', HINT = 'usage: ' || usage;
    END IF;
    val := rec ->> col;
    IF val IS NULL THEN
        RAISE EXCEPTION 'ratelimit: invalid key: column % is NULL', quote_ident(col)
            USING ERRCODE = 'RL011',
                  HINT = format('To exempt such rows, add WHEN (NEW.%s IS NOT NULL) to trigger %s.', quote_ident(col), TG_NAME);
    END IF;
    -- Tenants (see the top of 0007): the key must be one that the inserting
    -- role may use, and one that the table's owner may use, since the owner
    -- (or whoever it let create triggers) chose the trigger's arguments.
    PERFORM rl._check_tenant_key(prefix || val, NULL);
    IF EXISTS (SELECT FROM rl.tenants) THEN
        PERFORM rl._check_tenant_key(prefix || val,
            (SELECT r.rolname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_roles r ON r.oid = c.relowner
              WHERE c.oid = TG_RELID));
    END IF;
    -- The database clock, never rl.now_us: a session inserting rows must not
    -- be able to move its own time forward past the limit.
    d := rl._take1(prefix || val, lname, alg, lim, win, 0, cost, rl._clock(), true);
    IF NOT d.allowed THEN
        IF d.retry_after_us < 0 THEN
            RAISE EXCEPTION 'rate limit exceeded'
                USING ERRCODE = 'RL429',
                      DETAIL = format('The cost %s is above the limit %s (%s): never admitted.', cost, lim, lname),
                      HINT = 'Lower the cost or raise the limit.';
        END IF;
        secs := (d.retry_after_us + 999999) / 1000000;
        RAISE EXCEPTION 'rate limit exceeded'
            USING ERRCODE = 'RL429',
                  DETAIL = format('Retry after %s s (%s µs); limit %s: %s per %s.', secs, d.retry_after_us, lname,
                                  lim, TG_ARGV[3]),
                  HINT = format('Wait %s seconds before inserting again.', secs);
    END IF;
    RETURN NEW;
END
$fn$;

-- rl.lock_states, as in 0007 (trusted roles only), locking through
-- rl._lock_state.
CREATE OR REPLACE FUNCTION rl.lock_states(p_key text, p_names text[])
    RETURNS TABLE (name text, algorithm integer, t bigint, x bigint, y bigint, log bigint[], now_us bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    nm    text;
    st    rl.state_words;
    v_now bigint;
BEGIN
    -- The caller writes the rows back itself (UPDATE rl.state), so only a
    -- trusted role may lock them: one with the table's privileges anyway.
    PERFORM rl._require_trusted('rl.lock_states');
    PERFORM rl._check_key(p_key, 'key');
    v_now := rl._request_now(NULL);
    FOR nm IN SELECT d.n FROM (SELECT DISTINCT u.n FROM unnest(p_names) AS u(n)) d ORDER BY d.n COLLATE "C" LOOP
        PERFORM rl._check_key(nm, 'limit name');
        st := (rl._lock_state(p_key, nm)).st;
        name := nm; algorithm := st.algorithm; t := st.t; x := st.x; y := st.y; log := st.log; now_us := v_now;
        RETURN NEXT;
    END LOOP;
END
$fn$;

-- New functions are executable by PUBLIC until revoked; none of these is
-- granted (the SECURITY DEFINER functions call them as the owner).
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rl FROM PUBLIC;
