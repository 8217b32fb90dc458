-- Reverts 0008: the functions as 0007 left them (their texts copied from
-- 0002, 0003 and 0007), without the helpers 0008 added. GCRA states written
-- since carry their admission time in y, which 0007's rl._eval reports as a
-- corrupt state (RL008): it is cleared, leaving the states as 0007 wrote
-- them.
SET LOCAL search_path = pg_catalog, pg_temp;

UPDATE rl.state SET y = 0 WHERE algorithm = 6 AND y <> 0;

-- rl._eval, as in 0007.
CREATE OR REPLACE FUNCTION rl._eval(
    p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
    s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[],
    p_now bigint, p_cost bigint, p_take boolean)
    RETURNS rl._eval_result
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
DECLARE
    r     rl._eval_result;
    w     ALIAS FOR p_win;
    lim   ALIAS FOR p_lim;
    now   ALIAS FOR p_now;
    cost  ALIAS FOR p_cost;
    rate  ALIAS FOR p_rate;
    n_log integer;
    e     bigint;
    prev  bigint;
    start bigint;
    cnt   bigint;
    curr  bigint;
    room  bigint;
    k     bigint;
    ne    bigint;
    lo    integer;
    hi    integer;
    mid   integer;
    i0    integer;
    newest bigint;
    need  bigint;
    capacity bigint;
    last  bigint;
    lvl   bigint;
    el    bigint;
    dt    bigint;
    is_full boolean;
BEGIN
    -- Every statement costs (and each distinct expression is compiled once
    -- per transaction): the common path runs few. NULLs: one test.
    IF p_alg IS NULL OR lim IS NULL OR w IS NULL OR rate IS NULL OR now IS NULL OR cost IS NULL
            OR s_alg IS NULL OR s_t IS NULL OR s_x IS NULL OR s_y IS NULL OR s_log IS NULL THEN
        p_alg := coalesce(p_alg, 0);
        lim := coalesce(lim, 0);
        w := coalesce(w, 0);
        rate := coalesce(rate, -1);
        now := coalesce(now, -1);
        cost := coalesce(cost, -1);
        s_alg := coalesce(s_alg, 0);
        s_t := coalesce(s_t, 0);
        s_x := coalesce(s_x, 0);
        s_y := coalesce(s_y, 0);
        s_log := coalesce(s_log, '{}');
    END IF;

    -- The range checks below in one test, true exactly when none of them
    -- fails (greatest: w >= 1 is tested before); only a failing call runs
    -- them one by one, in the core's order, for its error.
    IF NOT (p_alg BETWEEN 1 AND 6 AND lim BETWEEN 1 AND 1099511627776 AND (p_alg <> 3 OR lim <= 4096)
            AND w BETWEEN 1 AND 1000000000000000
            AND (p_alg <= 3 AND rate = 0 OR p_alg > 3 AND rate BETWEEN 0 AND 1099511627776)
            AND (p_alg = 1 OR p_alg = 3 OR lim <= 2305843009213693952 / greatest(w, 1))
            AND now BETWEEN 0 AND 253402300799999999 AND cost BETWEEN 0 AND 1099511627776
            AND s_t BETWEEN 0 AND 4611686018427387904 AND s_x BETWEEN 0 AND 4611686018427387904
            AND s_y BETWEEN 0 AND 4611686018427387904) THEN
        -- l.check()
        IF p_alg < 1 OR p_alg > 6 THEN
            r.err := 1; RETURN r;                          -- ErrAlgorithm
        END IF;
        IF lim < 1 OR lim > 1099511627776 OR (p_alg = 3 AND lim > 4096) THEN
            r.err := 2; RETURN r;                          -- ErrLimit: MaxLimit 2^40, MaxLogLimit
        END IF;
        IF w < 1 OR w > 1000000000000000 THEN
            r.err := 3; RETURN r;                          -- ErrWindow: MaxWindow 10^15
        END IF;
        IF p_alg <= 3 THEN
            IF rate <> 0 THEN
                r.err := 4; RETURN r;                      -- ErrRate
            END IF;
        ELSIF rate < 0 OR rate > 1099511627776 THEN
            r.err := 4; RETURN r;                          -- ErrRate
        END IF;
        IF p_alg <> 1 AND p_alg <> 3 AND lim > 2305843009213693952 / w THEN
            r.err := 5; RETURN r;                          -- ErrUnits: MaxUnits 2^61
        END IF;
        -- checkCall
        IF now < 0 OR now > 253402300799999999 THEN
            r.err := 7; RETURN r;                          -- ErrTime: MaxTime
        END IF;
        IF cost < 0 OR cost > 1099511627776 THEN
            r.err := 6; RETURN r;                          -- ErrCost: MaxCost 2^40
        END IF;
        -- checkState (MaxStateValue 2^62)
        IF s_t < 0 OR s_t > 4611686018427387904 OR s_x < 0 OR s_x > 4611686018427387904
                OR s_y < 0 OR s_y > 4611686018427387904 THEN
            r.err := 8; RETURN r;
        END IF;
    END IF;
    n_log := cardinality(s_log);
    CASE s_alg
    WHEN 0 THEN
        IF s_t <> 0 OR s_x <> 0 OR s_y <> 0 OR n_log <> 0 THEN
            r.err := 8; RETURN r;
        END IF;
    WHEN 1, 4, 5 THEN
        IF s_y <> 0 THEN
            r.err := 8; RETURN r;
        END IF;
    WHEN 6 THEN
        -- X: the TAT's fraction numerator, below Rate (<= MaxLimit 2^40).
        IF s_y <> 0 OR s_x > 1099511627776 THEN
            r.err := 8; RETURN r;
        END IF;
    WHEN 2 THEN
        NULL;
    WHEN 3 THEN
        IF s_t <> 0 OR s_x <> 0 OR s_y <> 0 OR n_log > 4096 THEN
            r.err := 8; RETURN r;
        END IF;
        IF n_log > 0 THEN
            -- SQL arrays can be multidimensional, hold NULLs or start at
            -- another index than 1; Go slices cannot. The first two are
            -- corrupt; the last is normalized.
            IF array_ndims(s_log) <> 1 THEN
                r.err := 8; RETURN r;
            END IF;
            IF array_position(s_log, NULL) IS NOT NULL THEN
                r.err := 8; RETURN r;
            END IF;
            IF array_lower(s_log, 1) <> 1 THEN
                s_log := array(SELECT unnest(s_log));
            END IF;
            prev := 0;
            FOREACH e IN ARRAY s_log LOOP
                IF e < prev OR e > 4611686018427387904 THEN
                    r.err := 8; RETURN r;
                END IF;
                prev := e;
            END LOOP;
        END IF;
    ELSE
        r.err := 8; RETURN r;
    END CASE;

    -- n = *s: a call that admits nothing returns the state unchanged.
    r := ROW(0, false, lim, 0, 0, 0, 0, s_alg, s_t, s_x, s_y, s_log)::rl._eval_result;

    CASE p_alg
    WHEN 1 THEN
        -- fixedWindow
        start := now - now % w;
        cnt := 0;
        IF s_alg = 1 AND s_t >= start THEN
            start := s_t;
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

    WHEN 2 THEN
        -- slidingWindow
        start := now - now % w;
        curr := 0;
        prev := 0;
        IF s_alg = 2 THEN
            IF s_t >= start THEN
                start := s_t; curr := s_x; prev := s_y;
            ELSIF s_t + w = start THEN
                prev := s_x;
            END IF;
        END IF;
        curr := least(curr, lim);
        prev := least(prev, lim);
        e := greatest(now, start) - start;
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
            -- slidingRetry(w, lim, start, e, curr, prev, cost) - now
            k := NULL;
            IF curr + cost <= lim AND prev > 0 THEN
                k := (lim - curr - cost) * w / prev;
                IF w - k < w THEN
                    r.retry_after := start + (w - k) - now;
                ELSE
                    k := NULL;
                END IF;
            END IF;
            IF k IS NULL THEN
                IF curr = 0 THEN
                    r.retry_after := start + w - now;
                ELSE
                    k := (lim - cost) * w / curr;
                    r.retry_after := start + w + greatest(0, w - k) - now;
                END IF;
            END IF;
        END IF;
        IF room > 0 THEN
            r.remaining := room / w;
        END IF;
        IF curr > 0 THEN
            r.reset_after := start + 2 * w - now;
        ELSIF prev > 0 THEN
            r.reset_after := start + w - now;
        END IF;

    WHEN 3 THEN
        -- slidingLog
        IF s_alg <> 3 THEN
            s_log := '{}';
            n_log := 0;
        END IF;
        ne := now;
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
                need := cnt + cost;
                IF p_take THEN
                    r.algorithm := 3; r.t := 0; r.x := 0; r.y := 0;
                    r.log := s_log[i0 + 1 : n_log] || array_fill(ne, ARRAY[cost::integer]);
                END IF;
                cnt := need;
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

    WHEN 6 THEN
        -- gcra
        rate := CASE WHEN rate = 0 THEN lim ELSE rate END;
        capacity := lim * w;
        lvl := 0;
        is_full := false;
        IF s_alg = 6 THEN
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
                    r.algorithm := 6; r.t := now + lvl / rate; r.x := lvl % rate; r.y := 0; r.log := '{}';
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

    ELSE
        -- bucket: TokenBucket (4) and LeakyBucket (5)
        rate := CASE WHEN rate = 0 THEN lim ELSE rate END;
        capacity := lim * w;
        last := now;
        lvl := 0;
        IF s_alg = p_alg THEN
            last := s_t;
            lvl := least(s_x, capacity);
        END IF;
        ne := greatest(now, last);
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
    END CASE;
    RETURN r;
END
$fn$;

-- rl.decide, as in 0002.
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
    d rl.decision_state;
BEGIN
    IF op IS NULL OR op NOT IN ('take', 'peek') THEN
        RAISE EXCEPTION 'rl.decide: op must be ''take'' or ''peek'', not %', coalesce(quote_literal(op), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    r := rl._eval($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, op = 'take');
    IF r.err <> 0 THEN
        PERFORM rl._raise(r.err, NULL);
    END IF;
    d := ROW(0, r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, 0,
             r.algorithm, r.t, r.x, r.y, r.log);
    RETURN d;
END
$fn$;

-- rl.decide_all, as in 0002.
CREATE OR REPLACE FUNCTION rl.decide_all(
    limits rl.limit_spec[], states rl.state_words[], now_us bigint, cost bigint, op text DEFAULT 'take')
    RETURNS SETOF rl.decision_state
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    n      integer := coalesce(cardinality(limits), 0);
    lo     integer;
    slo    integer;
    take   boolean;
    rs     rl._eval_result[];
    r      rl._eval_result;
    l      rl.limit_spec;
    s      rl.state_words;
    denied integer := -1;
    best   integer := 0;
    i      integer;
BEGIN
    IF op IS NULL OR op NOT IN ('take', 'peek') THEN
        RAISE EXCEPTION 'rl.decide_all: op must be ''take'' or ''peek'', not %', coalesce(quote_literal(op), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    take := op = 'take';
    IF n = 0 OR (states IS NOT NULL AND cardinality(states) < n) THEN
        PERFORM rl._raise(10, 'limit index 0');
    END IF;
    IF array_ndims(limits) <> 1 OR (states IS NOT NULL AND array_ndims(states) <> 1) THEN
        PERFORM rl._raise(10, 'limit index 0');
    END IF;
    lo := array_lower(limits, 1);
    slo := coalesce(array_lower(states, 1), 1);
    -- First pass: decide every limit without changing anything.
    FOR i IN 0 .. n - 1 LOOP
        l := limits[lo + i];
        s := states[slo + i];
        r := rl._eval(l.algorithm, l.lim, l.window_us, l.rate, s.algorithm, s.t, s.x, s.y, s.log,
                      now_us, cost, false);
        IF r.err <> 0 THEN
            PERFORM rl._raise(r.err, 'limit index ' || i);
        END IF;
        rs[i] := r;
        IF NOT r.allowed THEN
            -- later(r.retry_after, rs[denied].retry_after): Never (-1) counts as latest.
            IF denied < 0 THEN
                denied := i;
            ELSIF (rs[denied]).retry_after <> -1 AND (r.retry_after = -1 OR r.retry_after > (rs[denied]).retry_after) THEN
                denied := i;
            END IF;
        END IF;
    END LOOP;
    IF denied < 0 THEN
        FOR i IN 0 .. n - 1 LOOP
            IF take THEN
                l := limits[lo + i];
                s := states[slo + i];
                r := rl._eval(l.algorithm, l.lim, l.window_us, l.rate, s.algorithm, s.t, s.x, s.y, s.log,
                              now_us, cost, true);
                IF r.err <> 0 THEN -- not reached: the first pass accepted the same input
                    PERFORM rl._raise(r.err, 'limit index ' || i);
                END IF;
                rs[i] := r;
            END IF;
            IF (rs[i]).remaining < (rs[best]).remaining THEN
                best := i;
            END IF;
        END LOOP;
    ELSE
        best := denied;
        -- Nothing was taken: a limit that would have admitted the cost
        -- reports its state as it is (its decision for cost 0).
        IF cost > 0 THEN
            FOR i IN 0 .. n - 1 LOOP
                CONTINUE WHEN NOT (rs[i]).allowed;
                l := limits[lo + i];
                s := states[slo + i];
                rs[i] := rl._eval(l.algorithm, l.lim, l.window_us, l.rate, s.algorithm, s.t, s.x, s.y, s.log,
                                  now_us, 0, false);
            END LOOP;
        END IF;
    END IF;
    FOR i IN 0 .. n - 1 LOOP
        r := rs[i];
        RETURN NEXT ROW(i, r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, best,
                        r.algorithm, r.t, r.x, r.y, r.log)::rl.decision_state;
    END LOOP;
    RETURN;
END
$fn$;

-- rl._take1, as in 0003.
CREATE OR REPLACE FUNCTION rl._take1(p_key text, p_name text, p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
                          p_cost bigint, p_now bigint, p_take boolean)
    RETURNS rl.decision
    LANGUAGE plpgsql
AS $fn$
DECLARE
    s_alg   integer;
    s_t     bigint;
    s_x     bigint;
    s_y     bigint;
    s_log   bigint[];
    have    boolean;
    r       rl._eval_result;
    attempt integer := 0;
BEGIN
    -- Each distinct PL/pgSQL expression is compiled once per transaction and
    -- every statement has a cost: the common path runs few (see sql/README.md,
    -- "Durability and speed").
    IF (octet_length(p_key) BETWEEN 1 AND 256 AND octet_length(p_name) BETWEEN 1 AND 256) IS NOT TRUE THEN
        PERFORM rl._check_key(p_key, 'key');
        PERFORM rl._check_key(p_name, 'limit name');
    END IF;
    IF p_now IS NULL THEN
        -- rl._now() without a call when rl.now_us is not set.
        p_now := CASE WHEN coalesce(current_setting('rl.now_us', true), '') = '' THEN rl._clock() ELSE rl._now() END;
    END IF;
    LOOP
        IF p_take THEN
            SELECT s.algorithm, s.t, s.x, s.y, s.log INTO s_alg, s_t, s_x, s_y, s_log
              FROM rl.state s WHERE s.key = p_key AND s.name = p_name FOR UPDATE;
        ELSE
            SELECT s.algorithm, s.t, s.x, s.y, s.log INTO s_alg, s_t, s_x, s_y, s_log
              FROM rl.state s WHERE s.key = p_key AND s.name = p_name;
        END IF;
        have := FOUND; -- not found: the NULLs read as a fresh state
        r := rl._eval(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, s_log, p_now, p_cost, p_take);
        IF r.err <> 0 THEN
            PERFORM rl._raise(r.err, NULL);
        END IF;
        -- Denied, peeked or cost 0: the state is unchanged; write nothing.
        EXIT WHEN NOT p_take OR NOT r.allowed OR p_cost = 0;
        IF have THEN
            UPDATE rl.state s
               SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log,
                   expires_at = p_now + r.reset_after
             WHERE s.key = p_key AND s.name = p_name;
            EXIT;
        END IF;
        -- A new key: whoever inserts first wins; the loser decides again
        -- against the winner's row (READ COMMITTED sees it on the next
        -- statement; REPEATABLE READ raises a serialization failure).
        INSERT INTO rl.state AS s (key, name, algorithm, t, x, y, log, expires_at)
        VALUES (p_key, p_name, r.algorithm, r.t, r.x, r.y, r.log, p_now + r.reset_after)
        ON CONFLICT DO NOTHING;
        EXIT WHEN FOUND;
        attempt := attempt + 1;
        IF attempt >= 100 THEN
            RAISE EXCEPTION 'ratelimit: the state row kept changing; retry the transaction'
                USING ERRCODE = 'serialization_failure';
        END IF;
    END LOOP;
    RETURN ROW(r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, p_now)::rl.decision;
END
$fn$;

-- rl._take_many, as in 0003.
CREATE OR REPLACE FUNCTION rl._take_many(p_key text, p_names text[], p_algs integer[], p_lims bigint[], p_wins bigint[],
                              p_rates bigint[], p_cost bigint, p_now bigint, p_take boolean)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plpgsql
AS $fn$
DECLARE
    n        integer := cardinality(p_names);
    lock_ord integer[];
    ss       rl.state_words[];
    have     boolean[];
    rs       rl._eval_result[];
    r        rl._eval_result;
    st       rl.state_words;
    created  text[] := '{}';
    denied   integer;
    best     integer;
    i        integer;
    tries    integer;
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
    IF p_now IS NULL THEN
        -- rl._now() without a call when rl.now_us is not set.
        p_now := CASE WHEN coalesce(current_setting('rl.now_us', true), '') = '' THEN rl._clock() ELSE rl._now() END;
    END IF;
    lock_ord := ARRAY(SELECT j FROM generate_subscripts(p_names, 1) AS j ORDER BY p_names[j] COLLATE "C");
    -- Lock (take) or read (peek) the rows in name order. A missing row is
    -- created fresh at once, at its place in that order, so every session
    -- acquires a key's rows in one order and none can wait for a row while
    -- holding one that the other waits for. Fresh rows that end up unused
    -- (denied, cost 0) are deleted again: the call leaves nothing behind.
    FOREACH i IN ARRAY lock_ord LOOP
        tries := 0;
        LOOP
            IF p_take THEN
                SELECT s.algorithm, s.t, s.x, s.y, s.log INTO st
                  FROM rl.state s WHERE s.key = p_key AND s.name = p_names[i] FOR UPDATE;
            ELSE
                SELECT s.algorithm, s.t, s.x, s.y, s.log INTO st
                  FROM rl.state s WHERE s.key = p_key AND s.name = p_names[i];
            END IF;
            EXIT WHEN FOUND OR NOT p_take; -- not found: st is NULL, a fresh state
            tries := tries + 1;
            IF tries > 100 THEN
                RAISE EXCEPTION 'ratelimit: the state row kept changing; retry the transaction'
                    USING ERRCODE = 'serialization_failure';
            END IF;
            -- Waits if another session is creating the same row; READ
            -- COMMITTED then sees its row on the next SELECT (REPEATABLE READ
            -- raises a serialization failure instead).
            INSERT INTO rl.state AS s (key, name) VALUES (p_key, p_names[i]) ON CONFLICT DO NOTHING;
            IF FOUND THEN
                created := created || p_names[i];
            END IF;
        END LOOP;
        ss[i] := st;
    END LOOP;
    -- core.all: the first pass decides without changing anything.
    denied := 0; -- 1-based; 0: none
    FOR i IN 1 .. n LOOP
        st := ss[i];
        r := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                      p_now, p_cost, false);
        IF r.err <> 0 THEN
            PERFORM rl._raise(r.err, format('limit index %s (name %L)', i - 1, p_names[i]));
        END IF;
        rs[i] := r;
        IF NOT r.allowed THEN
            -- later(r.retry_after, rs[denied].retry_after): Never (-1) counts as latest.
            IF denied = 0 THEN
                denied := i;
            ELSIF (rs[denied]).retry_after <> -1
                  AND (r.retry_after = -1 OR r.retry_after > (rs[denied]).retry_after) THEN
                denied := i;
            END IF;
        END IF;
    END LOOP;
    IF denied > 0 THEN
        best := denied;
        -- Nothing is taken: a limit that would have admitted the cost
        -- reports its state as it is (its decision for cost 0).
        IF p_cost > 0 THEN
            FOR i IN 1 .. n LOOP
                CONTINUE WHEN NOT (rs[i]).allowed;
                st := ss[i];
                rs[i] := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                                  p_now, 0, false);
            END LOOP;
        END IF;
    ELSE
        best := 1;
        FOR i IN 1 .. n LOOP
            IF p_take THEN
                st := ss[i];
                r := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                              p_now, p_cost, true);
                IF r.err <> 0 THEN -- not reached: the first pass accepted the same input
                    PERFORM rl._raise(r.err, format('limit index %s (name %L)', i - 1, p_names[i]));
                END IF;
                rs[i] := r;
            END IF;
            IF (rs[i]).remaining < (rs[best]).remaining THEN
                best := i;
            END IF;
        END LOOP;
        IF p_take AND p_cost > 0 THEN
            FOREACH i IN ARRAY lock_ord LOOP
                r := rs[i];
                UPDATE rl.state s
                   SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log,
                       expires_at = p_now + r.reset_after
                 WHERE s.key = p_key AND s.name = p_names[i];
            END LOOP;
            created := '{}';
        END IF;
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

-- rl._interval_us, as in 0003.
CREATE OR REPLACE FUNCTION rl._interval_us(win interval) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN greatest(-1, least(1000000000000001, extract(epoch FROM win) * 1000000))::bigint;

-- rl._parse_limits, as in 0007.
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

-- rl.rl_allow, as in 0007.
CREATE OR REPLACE FUNCTION rl.rl_allow(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1,
                            rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN rl._take1($1, $7, rl._alg($2), $3, rl._interval_us($4), $6, $5, rl._request_now($8), true);
END
$fn$;

-- rl.rl_allow_us, as in 0007.
CREATE OR REPLACE FUNCTION rl.rl_allow_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1,
                               rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN rl._take1($1, $7, rl._alg($2), $3, $4, $6, $5, rl._request_now($8), true);
END
$fn$;

-- rl.rl_peek, as in 0007.
CREATE OR REPLACE FUNCTION rl.rl_peek(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1,
                           rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN rl._take1($1, $7, rl._alg($2), $3, rl._interval_us($4), $6, $5, rl._request_now($8), false);
END
$fn$;

-- rl.rl_peek_us, as in 0007.
CREATE OR REPLACE FUNCTION rl.rl_peek_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1,
                              rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN rl._take1($1, $7, rl._alg($2), $3, $4, $6, $5, rl._request_now($8), false);
END
$fn$;

-- rl.rl_decide_multi, as in 0007.
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
    nm      text;
    s_alg   integer;
    s_t     bigint;
    s_x     bigint;
    s_y     bigint;
    s_log   bigint[];
    r       rl._eval_result;
    tries   integer;
BEGIN
    -- Who may use the key, and the time to decide at (see the top of 0007):
    -- rl._take_many and the path below take p_now as given.
    PERFORM rl._check_tenant_key(p_key, NULL);
    p_now := rl._request_now(p_now);
    -- One limit with well-formed arguments, the common call: core.TakeAll
    -- decides it in one pass, exactly as core.Take, so it is decided and
    -- stored like rl._take1 does, with few statements (each distinct
    -- PL/pgSQL expression is compiled once per transaction, each query has
    -- a cost): lock or read the row, decide once, write only an admitted
    -- cost above 0. One row is locked, so there is no order to keep; a
    -- missing row is inserted with its new state (ON CONFLICT DO NOTHING,
    -- the loser decides again against the winner's row), so a call that
    -- writes nothing creates nothing. Anything else goes to rl._take_many,
    -- which validates and raises in the documented order.
    IF cardinality(p_names) = 1 AND octet_length(p_key) BETWEEN 1 AND 256
            AND octet_length(p_names[1]) BETWEEN 1 AND 256
            AND array_ndims(p_names) = 1 AND array_lower(p_names, 1) = 1
            AND cardinality(p_algs) = 1 AND cardinality(p_lims) = 1
            AND cardinality(p_wins) = 1 AND cardinality(p_rates) = 1
            AND array_lower(p_algs, 1) = 1 AND array_lower(p_lims, 1) = 1
            AND array_lower(p_wins, 1) = 1 AND array_lower(p_rates, 1) = 1 THEN
        nm := p_names[1];
        tries := 0;
        LOOP
            IF p_take THEN
                SELECT s.algorithm, s.t, s.x, s.y, s.log INTO s_alg, s_t, s_x, s_y, s_log
                  FROM rl.state s WHERE s.key = p_key AND s.name = nm FOR UPDATE;
            ELSE
                SELECT s.algorithm, s.t, s.x, s.y, s.log INTO s_alg, s_t, s_x, s_y, s_log
                  FROM rl.state s WHERE s.key = p_key AND s.name = nm;
            END IF;
            -- FOUND is false: the NULLs read as a fresh state.
            r := rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], s_alg, s_t, s_x, s_y, s_log,
                          p_now, p_cost, p_take);
            IF r.err <> 0 THEN
                PERFORM rl._raise(r.err, format('limit index 0 (name %L)', nm));
            END IF;
            -- Denied, peeked or cost 0: the state is unchanged; write nothing.
            EXIT WHEN NOT p_take OR NOT r.allowed OR p_cost = 0;
            IF FOUND THEN -- set by the SELECT: nothing run since changes it
                UPDATE rl.state s
                   SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log,
                       expires_at = p_now + r.reset_after
                 WHERE s.key = p_key AND s.name = nm;
                EXIT;
            END IF;
            INSERT INTO rl.state AS s (key, name, algorithm, t, x, y, log, expires_at)
            VALUES (p_key, nm, r.algorithm, r.t, r.x, r.y, r.log, p_now + r.reset_after)
            ON CONFLICT DO NOTHING;
            EXIT WHEN FOUND;
            tries := tries + 1;
            IF tries >= 100 THEN
                RAISE EXCEPTION 'ratelimit: the state row kept changing; retry the transaction'
                    USING ERRCODE = 'serialization_failure';
            END IF;
        END LOOP;
        RETURN NEXT ROW(0, nm, r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, true,
                        p_now)::rl.multi_decision;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM rl._take_many($1, $2, $3, $4, $5, $6, $7, $8, p_take);
END
$fn$;

-- rl.enforce_limit, as in 0007.
CREATE OR REPLACE FUNCTION rl.enforce_limit() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    usage  constant text := 'rl.enforce_limit(key_column, algorithm, limit, window [, cost [, key_prefix [, name]]])';
    col    text;
    lim    bigint;
    win    bigint;
    cost   bigint := 1;
    prefix text := '';
    lname  text;
    rec    jsonb;
    val    text;
    d      rl.decision;
    secs   bigint;
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
    IF TG_ARGV[2] !~ '^\s*-?[0-9]{1,19}\s*$' THEN
        RAISE EXCEPTION 'ratelimit: trigger %: limit must be an integer, not %', TG_NAME, quote_literal(TG_ARGV[2])
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    lim := TG_ARGV[2]::bigint;
    win := rl._interval_us(TG_ARGV[3]::interval);
    IF TG_NARGS > 4 AND TG_ARGV[4] <> '' THEN
        IF TG_ARGV[4] !~ '^\s*-?[0-9]{1,19}\s*$' THEN
            RAISE EXCEPTION 'ratelimit: trigger %: cost must be an integer, not %', TG_NAME, quote_literal(TG_ARGV[4])
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        cost := TG_ARGV[4]::bigint;
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
        RAISE EXCEPTION 'ratelimit: trigger %: table %.% has no column %', TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME,
            quote_ident(col)
            USING ERRCODE = 'undefined_column';
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
    d := rl._take1(prefix || val, lname, rl._alg(TG_ARGV[1]), lim, win, 0, cost, rl._clock(), true);
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

-- rl.lock_states, as in 0007.
CREATE OR REPLACE FUNCTION rl.lock_states(p_key text, p_names text[])
    RETURNS TABLE (name text, algorithm integer, t bigint, x bigint, y bigint, log bigint[], now_us bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    nm    text;
    tries integer;
    v_now bigint;
BEGIN
    -- The caller writes the rows back itself (UPDATE rl.state), so only a
    -- trusted role may lock them: one with the table's privileges anyway.
    PERFORM rl._require_trusted('rl.lock_states');
    PERFORM rl._check_key(p_key, 'key');
    v_now := rl._request_now(NULL);
    FOR nm IN SELECT d.n FROM (SELECT DISTINCT u.n FROM unnest(p_names) AS u(n)) d ORDER BY d.n COLLATE "C" LOOP
        PERFORM rl._check_key(nm, 'limit name');
        tries := 0;
        LOOP
            RETURN QUERY SELECT s.name, s.algorithm, s.t, s.x, s.y, s.log, v_now
                           FROM rl.state s WHERE s.key = p_key AND s.name = nm FOR UPDATE;
            EXIT WHEN FOUND;
            tries := tries + 1;
            IF tries > 100 THEN
                RAISE EXCEPTION 'ratelimit: the state row kept changing; retry the transaction'
                    USING ERRCODE = 'serialization_failure';
            END IF;
            INSERT INTO rl.state AS s (key, name) VALUES (p_key, nm) ON CONFLICT DO NOTHING;
        END LOOP;
    END LOOP;
END
$fn$;

DROP FUNCTION rl._decide1(text, text, integer, bigint, bigint, bigint, bigint, bigint, boolean, boolean);
DROP FUNCTION rl._lock_state(text, text);
DROP FUNCTION rl._all(integer[], bigint[], bigint[], bigint[], rl.state_words[], bigint, bigint, boolean, text[]);
DROP FUNCTION rl._limit_detail(integer, text[]);
DROP FUNCTION rl._gcra(bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint, bigint, boolean, rl._eval_result);
DROP FUNCTION rl._bucket(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint, boolean, rl._eval_result);
DROP FUNCTION rl._sliding_log(bigint, bigint, integer, bigint[], bigint, bigint, boolean, rl._eval_result);
DROP FUNCTION rl._sliding_window(bigint, bigint, integer, bigint, bigint, bigint, bigint, bigint, boolean, rl._eval_result);
DROP FUNCTION rl._sliding_retry(bigint, bigint, bigint, bigint, bigint, bigint, bigint);
DROP FUNCTION rl._bad_window(interval, integer, bigint, bigint, text);
DROP FUNCTION rl._fixed_window(bigint, bigint, integer, bigint, bigint, bigint, bigint, boolean, rl._eval_result);
DROP FUNCTION rl._unknown_algorithm(text, text);
DROP FUNCTION rl._fail(integer, integer, bigint, bigint, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], text);
DROP FUNCTION rl._explain(integer, integer, bigint, bigint, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[]);
DROP FUNCTION rl._later(bigint, bigint);
DROP FUNCTION rl._state_error(integer, bigint, bigint, bigint, bigint[]);
DROP FUNCTION rl._log_error(bigint[]);
DROP FUNCTION rl._call_error(bigint, bigint);
DROP FUNCTION rl._limit_error(integer, bigint, bigint, bigint);
DROP FUNCTION rl._lock_tries();
DROP FUNCTION rl._max_state_value();
DROP FUNCTION rl._max_units();
DROP FUNCTION rl._max_log_limit();
DROP FUNCTION rl._max_cost();
DROP FUNCTION rl._max_limit();
DROP FUNCTION rl._max_window();
DROP FUNCTION rl._max_time();
