-- 0016 (after 0015): NextAfter, the time until more quota is made
-- available, computed by the SQL port as the core computes it
-- (core.Decision.NextAfter, core/decide.go: the same integer arithmetic,
-- every algorithm) and returned by every decision function.
--
-- * rl._eval_result gains next_after (µs): the algorithm functions set it
--   (rl._fixed_window: the end of the window; rl._sliding_window: when a
--   call of remaining + 1 would pass; rl._sliding_log: the expiry of the
--   admission that brings one more unit back; rl._bucket and rl._gcra: the
--   refill or leak of the next whole unit), 0 when remaining is the whole
--   limit.
-- * The result types gain next_after_us, appended so that callers reading
--   the columns they know (by name, or by position up to the last of them)
--   keep working: rl.decision (rl_allow, rl_allow_us, rl_peek,
--   rl_peek_us), rl.multi_decision (rl_allow_multi, rl_peek_multi,
--   rl_decide_multi), rl.batch_decision (rl_decide_batch; NULL on an error
--   row) and rl.decision_state (rl.decide, rl.decide_all).
-- * The functions that build those rows are replaced with the column
--   added; nothing else changes. The decision of a take on one limit comes,
--   as in 0015, from rl._eval of the row (or, when another decision wrote
--   the row meanwhile, of the new row for cost 0, whose next_after is the
--   admission's as its remaining and reset_after are).
--
-- This replaces rl._eval: a database with the native step enabled
-- (sql/native) is back on the PL/pgSQL port until rl_native.enable() runs
-- again, with a build of rl_native that computes next_after.
SET LOCAL search_path = pg_catalog, pg_temp;

ALTER TYPE rl._eval_result ADD ATTRIBUTE next_after bigint;
ALTER TYPE rl.decision ADD ATTRIBUTE next_after_us bigint;
ALTER TYPE rl.multi_decision ADD ATTRIBUTE next_after_us bigint;
ALTER TYPE rl.batch_decision ADD ATTRIBUTE next_after_us bigint;
ALTER TYPE rl.decision_state ADD ATTRIBUTE next_after_us bigint;

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

CREATE OR REPLACE FUNCTION rl._sliding_window(lim bigint, w bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, now bigint, cost bigint, p_take boolean, r rl._eval_result)
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
    IF r.remaining < lim THEN
        -- One more unit fits when a call of remaining + 1, denied now, would
        -- pass.
        r.next_after := rl._sliding_retry(w, lim, start, e, curr, prev, r.remaining + 1) - now;
    END IF;
    RETURN r;
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

CREATE OR REPLACE FUNCTION rl._bucket(p_alg integer, lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, now bigint, cost bigint, p_take boolean, r rl._eval_result)
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
        -- The first instant at which remaining + 1 units fit.
        r.next_after := rl._ceil_div(lvl - capacity + (r.remaining + 1) * w, rate) + ne - now;
    END IF;
    RETURN r;
END
$function$;

CREATE OR REPLACE FUNCTION rl._gcra(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, now bigint, cost bigint, p_take boolean, r rl._eval_result)
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

CREATE OR REPLACE FUNCTION rl._eval(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], p_now bigint, p_cost bigint, p_take boolean)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
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
    r := ROW(0, false, p_lim, 0, 0, 0, 0, s_alg, s_t, s_x, s_y, s_log, 0)::rl._eval_result;
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
$function$;

CREATE OR REPLACE FUNCTION rl._take1(p_key text, p_name text, p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, p_cost bigint, p_now bigint, p_take boolean)
 RETURNS rl.decision
 LANGUAGE plpgsql
AS $function$
DECLARE
    r rl._eval_result;
BEGIN
    p_now := coalesce(p_now, rl._now());
    r := rl._decide1(p_key, p_name, p_alg, p_lim, p_win, p_rate, p_cost, p_now, p_take, false);
    RETURN ROW(r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, p_now, r.next_after)::rl.decision;
END
$function$;

CREATE OR REPLACE FUNCTION rl._take_many(p_key text, p_names text[], p_algs integer[], p_lims bigint[], p_wins bigint[], p_rates bigint[], p_cost bigint, p_now bigint, p_take boolean)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
AS $function$
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
                   expires_at = rl._expires_at(p_now, r.reset_after)
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
                        i = best, p_now, r.next_after)::rl.multi_decision;
    END LOOP;
    RETURN;
END
$function$;

CREATE OR REPLACE FUNCTION rl.decide(algorithm integer, lim bigint, window_us bigint, rate bigint, state_algorithm integer, state_t bigint, state_x bigint, state_y bigint, state_log bigint[], now_us bigint, cost bigint, op text DEFAULT 'take'::text)
 RETURNS rl.decision_state
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
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
               r.algorithm, r.t, r.x, r.y, r.log, r.next_after)::rl.decision_state;
END
$function$;

CREATE OR REPLACE FUNCTION rl.decide_all(limits rl.limit_spec[], states rl.state_words[], now_us bigint, cost bigint, op text DEFAULT 'take'::text)
 RETURNS SETOF rl.decision_state
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
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
                        r.algorithm, r.t, r.x, r.y, r.log, r.next_after)::rl.decision_state;
    END LOOP;
    RETURN;
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_allow(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1, rate bigint DEFAULT 0, name text DEFAULT 'default'::text, now_us bigint DEFAULT NULL::bigint)
 RETURNS rl.decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    a integer;
    w bigint;
    res rl.decision;
BEGIN
    -- 0015: the common call (its row there, rl.tenants empty, valid input) in one statement, rl._eval
    -- evaluated once: e decides on the row as the statement's snapshot has it, and the UPDATE writes e's
    -- state when the row it locks is still that row. If another decision wrote the row meanwhile (a hot
    -- key: the UPDATE waited for the row and reads its latest version), it decides again on that
    -- version, as 0014's did. Anything else, or an error, the way below, which raises it.
    WITH e AS MATERIALIZED (
             SELECT o.now, o.algorithm, o.t, o.x, o.y, o.log,
                    rl._eval(rl._alg($2), $3, rl._interval_us($4), $6, o.algorithm, o.t, o.x, o.y, o.log, o.now, $5, true) AS r
               FROM (SELECT rl._request_now($8) AS now, s.algorithm, s.t, s.x, s.y, s.log
                       FROM rl.state s
                      WHERE s.key = $1 AND s.name = $7 AND NOT EXISTS (SELECT FROM rl.tenants)
                        AND octet_length($1) BETWEEN 1 AND 256 AND octet_length($7) BETWEEN 1 AND 256
                        AND $5 > 0) o),
         u AS (UPDATE rl.state s
                  SET (algorithm, t, x, y, log, expires_at) =
                      (SELECT (v.r).algorithm, (v.r).t, (v.r).x, (v.r).y, (v.r).log, rl._expires_at(e.now, (v.r).reset_after)
                         FROM (SELECT CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log) = (e.algorithm, e.t, e.x, e.y, e.log)
                                           THEN e.r
                                           ELSE rl._eval(rl._alg($2), $3, rl._interval_us($4), $6, s.algorithm, s.t, s.x, s.y, s.log, e.now, $5, true)
                                      END AS r
                               OFFSET 0) v)
                 FROM e
                WHERE s.key = $1 AND s.name = $7
                  AND CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log) = (e.algorithm, e.t, e.x, e.y, e.log)
                           THEN (e.r).err = 0 AND (e.r).allowed
                           ELSE (SELECT ev.err = 0 AND ev.allowed
                                   FROM rl._eval(rl._alg($2), $3, rl._interval_us($4), $6, s.algorithm, s.t, s.x, s.y, s.log, e.now, $5, false) AS ev)
                      END
            RETURNING e.now, s.t, s.x,
                      (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log) AS same,
                      CASE WHEN (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log)
                           THEN e.r
                           ELSE rl._eval(rl._alg($2), $3, rl._interval_us($4), $6, s.algorithm, s.t, s.x, s.y, s.log, e.now, 0, false)
                      END AS r)
    SELECT true, (u.r).lim, (u.r).remaining, (u.r).reset_after, 0::bigint,
           CASE WHEN u.same THEN (u.r).delay
                WHEN rl._alg($2) = 5 AND u.x - $5 * rl._interval_us($4) > 0
                THEN rl._ceil_div(u.x - $5 * rl._interval_us($4), CASE WHEN $6 = 0 THEN $3 ELSE $6 END) + u.t - u.now
                ELSE 0 END, u.now, (u.r).next_after
      INTO res
      FROM u;
    IF FOUND THEN
        RETURN res;
    END IF;
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
$function$;

CREATE OR REPLACE FUNCTION rl.rl_allow_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1, rate bigint DEFAULT 0, name text DEFAULT 'default'::text, now_us bigint DEFAULT NULL::bigint)
 RETURNS rl.decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    a integer;
    res rl.decision;
BEGIN
    -- 0015: the common call (its row there, rl.tenants empty, valid input) in one statement, rl._eval
    -- evaluated once: e decides on the row as the statement's snapshot has it, and the UPDATE writes e's
    -- state when the row it locks is still that row. If another decision wrote the row meanwhile (a hot
    -- key: the UPDATE waited for the row and reads its latest version), it decides again on that
    -- version, as 0014's did. Anything else, or an error, the way below, which raises it.
    WITH e AS MATERIALIZED (
             SELECT o.now, o.algorithm, o.t, o.x, o.y, o.log,
                    rl._eval(rl._alg($2), $3, $4, $6, o.algorithm, o.t, o.x, o.y, o.log, o.now, $5, true) AS r
               FROM (SELECT rl._request_now($8) AS now, s.algorithm, s.t, s.x, s.y, s.log
                       FROM rl.state s
                      WHERE s.key = $1 AND s.name = $7 AND NOT EXISTS (SELECT FROM rl.tenants)
                        AND octet_length($1) BETWEEN 1 AND 256 AND octet_length($7) BETWEEN 1 AND 256
                        AND $5 > 0) o),
         u AS (UPDATE rl.state s
                  SET (algorithm, t, x, y, log, expires_at) =
                      (SELECT (v.r).algorithm, (v.r).t, (v.r).x, (v.r).y, (v.r).log, rl._expires_at(e.now, (v.r).reset_after)
                         FROM (SELECT CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log) = (e.algorithm, e.t, e.x, e.y, e.log)
                                           THEN e.r
                                           ELSE rl._eval(rl._alg($2), $3, $4, $6, s.algorithm, s.t, s.x, s.y, s.log, e.now, $5, true)
                                      END AS r
                               OFFSET 0) v)
                 FROM e
                WHERE s.key = $1 AND s.name = $7
                  AND CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log) = (e.algorithm, e.t, e.x, e.y, e.log)
                           THEN (e.r).err = 0 AND (e.r).allowed
                           ELSE (SELECT ev.err = 0 AND ev.allowed
                                   FROM rl._eval(rl._alg($2), $3, $4, $6, s.algorithm, s.t, s.x, s.y, s.log, e.now, $5, false) AS ev)
                      END
            RETURNING e.now, s.t, s.x,
                      (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log) AS same,
                      CASE WHEN (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log)
                           THEN e.r
                           ELSE rl._eval(rl._alg($2), $3, $4, $6, s.algorithm, s.t, s.x, s.y, s.log, e.now, 0, false)
                      END AS r)
    SELECT true, (u.r).lim, (u.r).remaining, (u.r).reset_after, 0::bigint,
           CASE WHEN u.same THEN (u.r).delay
                WHEN rl._alg($2) = 5 AND u.x - $5 * $4 > 0
                THEN rl._ceil_div(u.x - $5 * $4, CASE WHEN $6 = 0 THEN $3 ELSE $6 END) + u.t - u.now
                ELSE 0 END, u.now, (u.r).next_after
      INTO res
      FROM u;
    IF FOUND THEN
        RETURN res;
    END IF;
    PERFORM rl._check_tenant_key($1, NULL);
    a := rl._alg($2);
    IF a = 0 THEN
        PERFORM rl._unknown_algorithm($2, $7);
    END IF;
    RETURN rl._take1($1, $7, a, $3, $4, $6, $5, rl._request_now($8), true);
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_peek(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1, rate bigint DEFAULT 0, name text DEFAULT 'default'::text, now_us bigint DEFAULT NULL::bigint)
 RETURNS rl.decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    a integer;
    w bigint;
    res rl.decision;
BEGIN
    -- 0014: the common call (its row there, rl.tenants empty, valid input) in one statement;
    -- anything else, or an error, the way below, which raises it.
    WITH d AS MATERIALIZED (
             SELECT rl._request_now($8) AS now, s.algorithm, s.t, s.x, s.y, s.log
               FROM rl.state s
              WHERE s.key = $1 AND s.name = $7 AND NOT EXISTS (SELECT FROM rl.tenants)
                AND octet_length($1) BETWEEN 1 AND 256 AND octet_length($7) BETWEEN 1 AND 256),
         e AS MATERIALIZED (
             SELECT d.now, rl._eval(rl._alg($2), $3, rl._interval_us($4), $6, d.algorithm, d.t, d.x, d.y, d.log, d.now, $5, false) AS r
               FROM d)
    SELECT (d.r).allowed, (d.r).lim, (d.r).remaining, (d.r).reset_after, (d.r).retry_after, (d.r).delay, d.now,
           (d.r).next_after
      INTO res FROM e d WHERE (d.r).err = 0;
    IF FOUND THEN
        RETURN res;
    END IF;
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
$function$;

CREATE OR REPLACE FUNCTION rl.rl_peek_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1, rate bigint DEFAULT 0, name text DEFAULT 'default'::text, now_us bigint DEFAULT NULL::bigint)
 RETURNS rl.decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    a integer;
    res rl.decision;
BEGIN
    -- 0014: the common call (its row there, rl.tenants empty, valid input) in one statement;
    -- anything else, or an error, the way below, which raises it.
    WITH d AS MATERIALIZED (
             SELECT rl._request_now($8) AS now, s.algorithm, s.t, s.x, s.y, s.log
               FROM rl.state s
              WHERE s.key = $1 AND s.name = $7 AND NOT EXISTS (SELECT FROM rl.tenants)
                AND octet_length($1) BETWEEN 1 AND 256 AND octet_length($7) BETWEEN 1 AND 256),
         e AS MATERIALIZED (
             SELECT d.now, rl._eval(rl._alg($2), $3, $4, $6, d.algorithm, d.t, d.x, d.y, d.log, d.now, $5, false) AS r
               FROM d)
    SELECT (d.r).allowed, (d.r).lim, (d.r).remaining, (d.r).reset_after, (d.r).retry_after, (d.r).delay, d.now,
           (d.r).next_after
      INTO res FROM e d WHERE (d.r).err = 0;
    IF FOUND THEN
        RETURN res;
    END IF;
    PERFORM rl._check_tenant_key($1, NULL);
    a := rl._alg($2);
    IF a = 0 THEN
        PERFORM rl._unknown_algorithm($2, $7);
    END IF;
    RETURN rl._take1($1, $7, a, $3, $4, $6, $5, rl._request_now($8), false);
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_decide_multi(key text, names text[], algorithms integer[], lims bigint[], windows_us bigint[], rates bigint[], cost bigint DEFAULT 1, now_us bigint DEFAULT NULL::bigint, take boolean DEFAULT true)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
    n       integer := cardinality($2);
    m       bigint;
    rs      rl._eval_result[];
    best    integer;
    r       rl._eval_result;
    v_now   bigint;
BEGIN
    -- 0014: the common calls in one statement each, when every row of the
    -- call is there, rl.tenants is empty and the call is well formed (which
    -- the statements check): one limit (a take, or a peek that locks
    -- nothing), or several (a take: the rows locked in bytewise name order,
    -- rl._all deciding all or nothing, every row written when admitted).
    -- Anything else, or an error, goes the way of 0011 below, which gives
    -- the same decision or raises the error. 0015: a take on one limit
    -- evaluates rl._eval once (as rl_allow_us does).
    IF n = 1 AND p_take THEN
        RETURN QUERY
        WITH e AS MATERIALIZED (
                 SELECT o.now, o.algorithm, o.t, o.x, o.y, o.log,
                        rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], o.algorithm, o.t, o.x, o.y, o.log, o.now, p_cost, true) AS r
                   FROM (SELECT rl._request_now(p_now) AS now, s.algorithm, s.t, s.x, s.y, s.log
                           FROM rl.state s
                          WHERE s.key = p_key AND s.name = p_names[1] AND NOT EXISTS (SELECT FROM rl.tenants)
                            AND octet_length(p_key) BETWEEN 1 AND 256 AND octet_length(p_names[1]) BETWEEN 1 AND 256
                            AND array_ndims(p_names) = 1 AND array_lower(p_names, 1) = 1
                            AND cardinality(p_algs) = 1 AND cardinality(p_lims) = 1
                            AND cardinality(p_wins) = 1 AND cardinality(p_rates) = 1
                            AND array_lower(p_algs, 1) = 1 AND array_lower(p_lims, 1) = 1
                            AND array_lower(p_wins, 1) = 1 AND array_lower(p_rates, 1) = 1
                            AND p_cost > 0) o),
             u AS (UPDATE rl.state s
                      SET (algorithm, t, x, y, log, expires_at) =
                          (SELECT (v.r).algorithm, (v.r).t, (v.r).x, (v.r).y, (v.r).log, rl._expires_at(e.now, (v.r).reset_after)
                             FROM (SELECT CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log) = (e.algorithm, e.t, e.x, e.y, e.log)
                                               THEN e.r
                                               ELSE rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], s.algorithm, s.t, s.x, s.y, s.log, e.now, p_cost, true)
                                          END AS r
                                   OFFSET 0) v)
                     FROM e
                    WHERE s.key = p_key AND s.name = p_names[1]
                      AND CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log) = (e.algorithm, e.t, e.x, e.y, e.log)
                               THEN (e.r).err = 0 AND (e.r).allowed
                               ELSE (SELECT ev.err = 0 AND ev.allowed
                                       FROM rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], s.algorithm, s.t, s.x, s.y, s.log, e.now, p_cost, false) AS ev)
                          END
                RETURNING e.now, s.t, s.x,
                          (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log) AS same,
                          CASE WHEN (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log)
                               THEN e.r
                               ELSE rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], s.algorithm, s.t, s.x, s.y, s.log, e.now, 0, false)
                          END AS r)
        SELECT 0, p_names[1], true, (u.r).lim, (u.r).remaining, (u.r).reset_after, 0::bigint,
               CASE WHEN u.same THEN (u.r).delay
                    WHEN p_algs[1] = 5 AND u.x - p_cost * p_wins[1] > 0
                    THEN rl._ceil_div(u.x - p_cost * p_wins[1], CASE WHEN p_rates[1] = 0 THEN p_lims[1] ELSE p_rates[1] END) + u.t - u.now
                    ELSE 0 END, true, u.now, (u.r).next_after
          FROM u;
        IF FOUND THEN
            RETURN;
        END IF;
    ELSIF n = 1 THEN
        RETURN QUERY
        WITH d AS MATERIALIZED (
                 SELECT rl._request_now(p_now) AS now, s.algorithm, s.t, s.x, s.y, s.log
                   FROM rl.state s
                  WHERE s.key = p_key AND s.name = p_names[1] AND NOT EXISTS (SELECT FROM rl.tenants)
                    AND octet_length(p_key) BETWEEN 1 AND 256 AND octet_length(p_names[1]) BETWEEN 1 AND 256
                    AND array_ndims(p_names) = 1 AND array_lower(p_names, 1) = 1
                    AND cardinality(p_algs) = 1 AND cardinality(p_lims) = 1
                    AND cardinality(p_wins) = 1 AND cardinality(p_rates) = 1
                    AND array_lower(p_algs, 1) = 1 AND array_lower(p_lims, 1) = 1
                    AND array_lower(p_wins, 1) = 1 AND array_lower(p_rates, 1) = 1),
             e AS MATERIALIZED (
                 SELECT d.now,
                        rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], d.algorithm, d.t, d.x, d.y, d.log, d.now,
                                 p_cost, false) AS r
                   FROM d)
        SELECT 0, p_names[1], (e.r).allowed, (e.r).lim, (e.r).remaining, (e.r).reset_after, (e.r).retry_after,
               (e.r).delay, true, e.now, (e.r).next_after
          FROM e WHERE (e.r).err = 0;
        IF FOUND THEN
            RETURN;
        END IF;
    ELSIF n > 1 AND p_take AND octet_length(p_key) BETWEEN 1 AND 256 THEN
        -- Several limits. If a row is missing, the statement has locked
        -- some rows of the call but not all, and the way below would create
        -- the missing one while holding a later one (out of the protocol's
        -- order): the subtransaction is rolled back, releasing its locks.
        BEGIN
            WITH l AS MATERIALIZED (
                     SELECT s.name, s.algorithm, s.t, s.x, s.y, s.log
                       FROM rl.state s
                      WHERE s.key = p_key AND s.name = ANY (p_names) AND NOT EXISTS (SELECT FROM rl.tenants)
                        AND array_ndims(p_names) = 1 AND array_lower(p_names, 1) = 1
                        AND cardinality(p_algs) = n AND cardinality(p_lims) = n
                        AND cardinality(p_wins) = n AND cardinality(p_rates) = n
                        AND array_lower(p_algs, 1) = 1 AND array_lower(p_lims, 1) = 1
                        AND array_lower(p_wins, 1) = 1 AND array_lower(p_rates, 1) = 1
                        AND (SELECT count(DISTINCT u.v) FROM unnest(p_names) AS u(v)
                              WHERE octet_length(u.v) BETWEEN 1 AND 256) = n
                      ORDER BY s.name COLLATE "C"
                        FOR UPDATE OF s),
                 c AS MATERIALIZED (
                     SELECT count(l.name) AS m, rl._request_now(p_now) AS now,
                            array_agg(ROW(l.algorithm, l.t, l.x, l.y, l.log)::rl.state_words ORDER BY u.o) AS ss
                       FROM unnest(p_names) WITH ORDINALITY AS u(v, o) LEFT JOIN l ON l.name = u.v),
                 a AS MATERIALIZED (
                     SELECT c.now, x.rs, x.best
                       FROM c, rl._all(p_algs, p_lims, p_wins, p_rates, c.ss, c.now, p_cost, true, p_names) AS x
                      WHERE c.m = n),
                 w AS (UPDATE rl.state s
                          SET algorithm = u.algorithm, t = u.t, x = u.x, y = u.y, log = u.log,
                              expires_at = rl._expires_at(a.now, u.reset_after)
                         FROM a, unnest(p_names, a.rs) AS u(nm, err, allowed, lim, remaining, reset_after, retry_after,
                                                            delay, algorithm, t, x, y, log, next_after)
                        WHERE s.key = p_key AND s.name = u.nm AND p_cost > 0 AND (a.rs[a.best]).allowed)
            SELECT c.m, a.now, a.rs, a.best INTO m, v_now, rs, best FROM c LEFT JOIN a ON true;
            IF m < n THEN
                RAISE EXCEPTION USING ERRCODE = 'RL999', MESSAGE = 'ratelimit: internal: a row is missing';
            END IF;
        EXCEPTION WHEN SQLSTATE 'RL999' THEN
            m := 0;
        END;
        IF m = n THEN
            RETURN QUERY SELECT (u.o - 1)::integer, p_names[u.o], u.allowed, u.lim, u.remaining, u.reset_after,
                                u.retry_after, u.delay, u.o = best, v_now, u.next_after
                           FROM unnest(rs) WITH ORDINALITY AS u(err, allowed, lim, remaining, reset_after, retry_after,
                                                                delay, algorithm, t, x, y, log, next_after, o);
            RETURN;
        END IF;
    END IF;
    -- Everything else, as in 0011.
    PERFORM rl._check_tenant_key(p_key, NULL);
    v_now := rl._request_now(p_now);
    IF n = 1 AND array_ndims(p_names) = 1 AND array_lower(p_names, 1) = 1
            AND octet_length(p_names[1]) BETWEEN 1 AND 256
            AND cardinality(p_algs) = 1 AND cardinality(p_lims) = 1
            AND cardinality(p_wins) = 1 AND cardinality(p_rates) = 1
            AND array_lower(p_algs, 1) = 1 AND array_lower(p_lims, 1) = 1
            AND array_lower(p_wins, 1) = 1 AND array_lower(p_rates, 1) = 1 THEN
        r := rl._decide1(p_key, p_names[1], p_algs[1], p_lims[1], p_wins[1], p_rates[1], p_cost, v_now, p_take, true);
        RETURN NEXT ROW(0, p_names[1], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, true,
                        v_now, r.next_after)::rl.multi_decision;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM rl._take_many($1, $2, $3, $4, $5, $6, $7, v_now, p_take);
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_decide_batch(keys text[], names text[], algorithms integer[], lims bigint[], windows_us bigint[], rates bigint[], costs bigint[] DEFAULT NULL::bigint[], limit_counts integer[] DEFAULT NULL::integer[], now_us bigint[] DEFAULT NULL::bigint[], take boolean[] DEFAULT NULL::boolean[])
 RETURNS SETOF rl.batch_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
DECLARE
    p_keys   ALIAS FOR $1;
    p_names  ALIAS FOR $2;
    p_algs   ALIAS FOR $3;
    p_lims   ALIAS FOR $4;
    p_wins   ALIAS FOR $5;
    p_rates  ALIAS FOR $6;
    p_costs  ALIAS FOR $7;
    p_counts ALIAS FOR $8;
    p_nows   ALIAS FOR $9;
    p_takes  ALIAS FOR $10;
    nreq     integer := coalesce(cardinality(p_keys), 0);
    nlim     integer := coalesce(cardinality(p_names), 0);
    firsts   integer[];
    cnts     integer[];
    ecode    text[];
    emsg     text[];
    nows     bigint[];
    takes    boolean[];
    limkey   text[];
    limtake  boolean[];
    ptake    boolean[];
    lw       rl.state_words[];
    lc       boolean[];
    sk       text[];
    sn       text[];
    sw       rl.state_words[];
    sc       boolean[];
    sexp     bigint[];
    dirty    boolean[];
    slot     integer[];
    v_now    bigint;
    who      name;
    trusted  boolean;
    pfx      text[];
    k        text;
    f        integer;
    c        integer;
    j        integer;
    tk       boolean;
    p_cost   bigint;
    p_now    bigint;
    st       rl.state_words;
    r        rl._eval_result;
    rs       rl._eval_result[];
    ss       rl.state_words[];
    best     integer;
    bad      integer;
    total    bigint;
    any_dirty boolean := false;
BEGIN
    -- The shape of the call: an error here fails the whole call (RL010).
    IF (nreq > 0 AND (array_ndims(p_keys) <> 1 OR array_lower(p_keys, 1) <> 1))
            OR (nlim > 0 AND (array_ndims(p_names) <> 1 OR array_lower(p_names, 1) <> 1))
            OR coalesce(cardinality(p_algs), 0) <> nlim OR coalesce(cardinality(p_lims), 0) <> nlim
            OR coalesce(cardinality(p_wins), 0) <> nlim OR coalesce(cardinality(p_rates), 0) <> nlim
            OR (nlim > 0 AND (array_lower(p_algs, 1) <> 1 OR array_lower(p_lims, 1) <> 1
                              OR array_lower(p_wins, 1) <> 1 OR array_lower(p_rates, 1) <> 1))
            OR (p_costs IS NOT NULL AND (cardinality(p_costs) <> nreq OR (nreq > 0 AND array_lower(p_costs, 1) <> 1)))
            OR (p_nows IS NOT NULL AND (cardinality(p_nows) <> nreq OR (nreq > 0 AND array_lower(p_nows, 1) <> 1)))
            OR (p_takes IS NOT NULL AND (cardinality(p_takes) <> nreq OR (nreq > 0 AND array_lower(p_takes, 1) <> 1))) THEN
        PERFORM rl._raise(10, 'rl_decide_batch: keys, costs, now_us and take need one element per request, '
                              'names, algorithms, lims, windows_us and rates one per limit');
    END IF;
    IF p_counts IS NULL THEN
        IF nlim <> nreq THEN
            PERFORM rl._raise(10, 'rl_decide_batch: without limit_counts, each request has one limit');
        END IF;
    ELSE
        SELECT sum(u.c), count(*) FILTER (WHERE u.c IS NULL OR u.c < 0) INTO total, bad FROM unnest(p_counts) AS u(c);
        IF cardinality(p_counts) <> nreq OR (nreq > 0 AND array_lower(p_counts, 1) <> 1)
                OR bad > 0 OR coalesce(total, 0) <> nlim THEN
            PERFORM rl._raise(10, 'rl_decide_batch: limit_counts needs one count (0 or more) per request, adding up to the number of limits');
        END IF;
    END IF;
    IF nreq = 0 THEN
        RETURN;
    END IF;

    -- Time and tenants, once per call (0007's rules).
    v_now := rl._request_now(NULL);
    IF EXISTS (SELECT FROM rl.tenants) THEN
        who := rl._caller();
        trusted := rl._trusted(who);
        IF NOT trusted THEN
            SELECT array_agg(t.key_prefix ORDER BY t.key_prefix COLLATE "C") INTO pfx
              FROM rl.tenants t WHERE pg_has_role(who, t.role, 'MEMBER');
        END IF;
    END IF;

    -- Each request: check it, or give it its error; note each limit's key
    -- and whether a take uses it. The common call (one valid limit per
    -- request, no tenant restriction, no request times, no peeks) needs no
    -- loop: each statement in one costs per request.
    IF p_counts IS NULL AND pfx IS NULL AND p_nows IS NULL AND p_takes IS NULL
            AND (SELECT bool_and(octet_length(u.k) BETWEEN 1 AND 256 AND octet_length(u.n) BETWEEN 1 AND 256)
                   FROM unnest(p_keys, p_names) AS u(k, n)) THEN
        limkey := p_keys;
        limtake := array_fill(true, ARRAY[nlim]);
        firsts := ARRAY(SELECT generate_series(1, nreq));
        cnts := array_fill(1, ARRAY[nreq]);
        nows := array_fill(v_now, ARRAY[nreq]);
        takes := limtake;
        ecode := array_fill(NULL::text, ARRAY[nreq]);
        nreq := -nreq; -- skip the loop below
    ELSE
        limkey := array_fill(NULL::text, ARRAY[nlim]);
        limtake := array_fill(false, ARRAY[nlim]);
    END IF;
    j := 1;
    FOR q IN 1 .. nreq LOOP
        c := CASE WHEN p_counts IS NULL THEN 1 ELSE p_counts[q] END;
        firsts[q] := j;
        cnts[q] := c;
        j := j + c;
        k := p_keys[q];
        IF (octet_length(k) BETWEEN 1 AND 256) IS NOT TRUE THEN
            ecode[q] := 'RL011';
            emsg[q] := 'ratelimit: invalid key: it must be 1 to 256 bytes';
            CONTINUE;
        END IF;
        IF pfx IS NOT NULL AND NOT EXISTS (SELECT FROM unnest(pfx) AS u(p) WHERE starts_with(k, u.p)) THEN
            ecode[q] := '42501';
            emsg[q] := format('ratelimit: role %s may not use key %s', quote_ident(who), quote_literal(k));
            CONTINUE;
        END IF;
        IF c = 0 THEN
            ecode[q] := 'RL010';
            emsg[q] := rl._error_message(10);
            CONTINUE;
        END IF;
        FOR i IN firsts[q] .. firsts[q] + c - 1 LOOP
            IF (octet_length(p_names[i]) BETWEEN 1 AND 256) IS NOT TRUE THEN
                ecode[q] := 'RL011';
                emsg[q] := 'ratelimit: invalid limit name: it must be 1 to 256 bytes';
                EXIT;
            END IF;
            IF i > firsts[q] AND p_names[i] = ANY (p_names[firsts[q] : i - 1]) THEN
                ecode[q] := 'RL010';
                emsg[q] := rl._error_message(10);
                EXIT;
            END IF;
        END LOOP;
        CONTINUE WHEN ecode[q] IS NOT NULL;
        -- rl._request_now, with the caller's trust looked up once.
        IF p_nows IS NULL OR p_nows[q] IS NULL THEN
            nows[q] := v_now;
        ELSE
            IF trusted IS NULL THEN
                trusted := rl._trusted(rl._caller());
            END IF;
            nows[q] := CASE WHEN trusted THEN p_nows[q] ELSE v_now END;
        END IF;
        takes[q] := p_takes IS NULL OR coalesce(p_takes[q], true);
        FOR i IN firsts[q] .. firsts[q] + c - 1 LOOP
            limkey[i] := k;
            limtake[i] := takes[q];
        END LOOP;
    END LOOP;

    nreq := abs(nreq);
    -- The distinct rows of the valid requests in (key, name) bytewise
    -- order, whether a take uses them, and each limit's row (slot).
    SELECT array_agg(x.r ORDER BY x.j),
           coalesce(array_agg(x.k ORDER BY x.r) FILTER (WHERE x.first AND x.k IS NOT NULL), '{}'),
           coalesce(array_agg(x.n ORDER BY x.r) FILTER (WHERE x.first AND x.k IS NOT NULL), '{}'),
           coalesce(array_agg(x.t ORDER BY x.r) FILTER (WHERE x.first AND x.k IS NOT NULL), '{}')
      INTO slot, sk, sn, ptake
      FROM (SELECT l.j, l.k, l.n,
                   dense_rank() OVER (ORDER BY l.k COLLATE "C", l.n COLLATE "C") AS r,
                   row_number() OVER (PARTITION BY l.k, l.n ORDER BY l.j) = 1 AS first,
                   bool_or(l.t) OVER (PARTITION BY l.k, l.n) AS t
              FROM unnest(limkey, p_names, limtake) WITH ORDINALITY AS l(k, n, t, j)) x;
    -- Lock the rows the takes use, in that order; read the rows only peeked
    -- at.
    IF false = ANY (ptake) THEN
        SELECT l.states, l.created INTO lw, lc
          FROM rl._lock_batch(ARRAY(SELECT u.k FROM unnest(sk, ptake) WITH ORDINALITY AS u(k, t, o) WHERE u.t ORDER BY u.o),
                              ARRAY(SELECT u.n FROM unnest(sn, ptake) WITH ORDINALITY AS u(n, t, o) WHERE u.t ORDER BY u.o)) l;
        SELECT array_agg(CASE WHEN u.t THEN lw[u.lo]
                              ELSE coalesce((SELECT ROW(s.algorithm, s.t, s.x, s.y, s.log)::rl.state_words FROM rl.state s
                                              WHERE s.key = u.k AND s.name = u.n),
                                            ROW(0, 0, 0, 0, '{}')::rl.state_words) END ORDER BY u.o),
               array_agg(u.t AND lc[u.lo] ORDER BY u.o)
          INTO sw, sc
          FROM (SELECT v.k, v.n, v.t, v.o, count(*) FILTER (WHERE v.t) OVER (ORDER BY v.o) AS lo
                  FROM unnest(sk, sn, ptake) WITH ORDINALITY AS v(k, n, t, o)) u;
    ELSE
        SELECT l.states, l.created INTO sw, sc FROM rl._lock_batch(sk, sn) l;
    END IF;
    sexp := array_fill(NULL::bigint, ARRAY[cardinality(sk)]);
    dirty := array_fill(false, ARRAY[cardinality(sk)]);

    -- Decide, in input order.
    FOR q IN 1 .. nreq LOOP
        IF ecode[q] IS NOT NULL THEN
            RETURN NEXT ROW(q - 1, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, false, NULL,
                            ecode[q], emsg[q], NULL)::rl.batch_decision;
            CONTINUE;
        END IF;
        f := firsts[q];
        c := cnts[q];
        tk := takes[q];
        p_now := nows[q];
        p_cost := CASE WHEN p_costs IS NULL THEN 1 ELSE p_costs[q] END;
        IF c = 1 THEN
            -- One limit: core.TakeAll is core.Take, decided in one pass (as
            -- rl._all decides it).
            st := sw[slot[f]];
            r := rl._eval(p_algs[f], p_lims[f], p_wins[f], p_rates[f], st.algorithm, st.t, st.x, st.y, st.log,
                          p_now, p_cost, tk);
            IF r.err <> 0 THEN
                RETURN NEXT ROW(q - 1, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, false, p_now,
                                'RL0' || lpad(r.err::text, 2, '0'),
                                rl._explain(r.err, p_algs[f], p_lims[f], p_wins[f], p_rates[f], p_now, p_cost,
                                            st.algorithm, st.t, st.x, st.y, st.log)
                                || format(' (limit index 0, name %L)', p_names[f]), NULL)::rl.batch_decision;
                CONTINUE;
            END IF;
            IF tk AND r.allowed AND p_cost > 0 THEN
                sw[slot[f]] := ROW(r.algorithm, r.t, r.x, r.y, r.log)::rl.state_words;
                sexp[slot[f]] := rl._expires_at(p_now, r.reset_after);
                dirty[slot[f]] := true;
                any_dirty := true;
            END IF;
            RETURN NEXT ROW(q - 1, 0, p_names[f], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after,
                            r.delay, true, p_now, NULL, NULL, r.next_after)::rl.batch_decision;
            CONTINUE;
        END IF;
        -- Several limits: core.TakeAll / core.PeekAll (rl._all). Its checks
        -- first, in its order, so that an invalid request gets its error
        -- here instead of rl._all raising it for the whole call.
        ss := ARRAY(SELECT sw[slot[i]] FROM generate_series(f, f + c - 1) AS i ORDER BY i);
        bad := 0;
        FOR i IN 1 .. c LOOP
            st := ss[i];
            j := f + i - 1;
            bad := coalesce(nullif(rl._limit_error(p_algs[j], p_lims[j], p_wins[j], p_rates[j]), 0),
                            nullif(rl._call_error(p_now, p_cost), 0),
                            rl._state_error(coalesce(st.algorithm, 0), coalesce(st.t, 0), coalesce(st.x, 0),
                                            coalesce(st.y, 0), coalesce(st.log, '{}')));
            IF bad <> 0 THEN
                RETURN NEXT ROW(q - 1, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, false, p_now,
                                'RL0' || lpad(bad::text, 2, '0'),
                                rl._explain(bad, p_algs[j], p_lims[j], p_wins[j], p_rates[j], p_now, p_cost,
                                            st.algorithm, st.t, st.x, st.y, st.log)
                                || format(' (limit index %s, name %L)', i - 1, p_names[j]), NULL)::rl.batch_decision;
                EXIT;
            END IF;
        END LOOP;
        CONTINUE WHEN bad <> 0;
        SELECT a.rs, a.best INTO rs, best
          FROM rl._all(p_algs[f : f + c - 1], p_lims[f : f + c - 1], p_wins[f : f + c - 1], p_rates[f : f + c - 1],
                       ss, p_now, p_cost, tk, p_names[f : f + c - 1]) a;
        IF tk AND p_cost > 0 AND (rs[best]).allowed THEN
            FOR i IN 1 .. c LOOP
                r := rs[i];
                sw[slot[f + i - 1]] := ROW(r.algorithm, r.t, r.x, r.y, r.log)::rl.state_words;
                sexp[slot[f + i - 1]] := rl._expires_at(p_now, r.reset_after);
                dirty[slot[f + i - 1]] := true;
            END LOOP;
            any_dirty := true;
        END IF;
        FOR i IN 1 .. c LOOP
            r := rs[i];
            RETURN NEXT ROW(q - 1, i - 1, p_names[f + i - 1], r.allowed, r.lim, r.remaining, r.reset_after,
                            r.retry_after, r.delay, i = best, p_now, NULL, NULL, r.next_after)::rl.batch_decision;
        END LOOP;
    END LOOP;

    -- Write the new states back in one statement; delete the rows created
    -- for requests that wrote nothing.
    IF any_dirty THEN
        UPDATE rl.state s
           SET algorithm = u.algorithm, t = u.t, x = u.x, y = u.y, log = u.log, expires_at = u.e
          FROM unnest(sk, sn, sexp, dirty, sw) AS u(k, n, e, d, algorithm, t, x, y, log)
         WHERE u.d AND s.key = u.k AND s.name = u.n;
    END IF;
    IF true = ANY (sc) THEN
        DELETE FROM rl.state s
         USING unnest(sk, sn, sc, dirty) AS u(k, n, c, d)
         WHERE u.c AND NOT u.d AND s.key = u.k AND s.name = u.n;
    END IF;
END
$function$;
