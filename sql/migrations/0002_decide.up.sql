-- 0002: the pure decision functions, a line-by-line port of core/decide.go and
-- core/multi.go. They read no clock and no table: rl.decide and rl.decide_all
-- are IMMUTABLE. The vectors in tests/vectors and a randomized differential
-- test against the Go core (sql/migrations/*_test.go) pin them bit for bit.
--
-- Integer arithmetic is PostgreSQL bigint: / truncates toward zero and % takes
-- the sign of the dividend, as in Go. Within the core's documented bounds
-- nothing overflows; an overflow error ("bigint out of range") would mean a
-- porting bug. Every AND whose right side could overflow when the left side is
-- false is written as nested IFs, keeping Go's short-circuit order.
SET LOCAL search_path = pg_catalog, pg_temp;

-- Parameters of one limit (core.Limit).
CREATE TYPE rl.limit_spec AS (
    algorithm integer, -- 1 fixed_window .. 6 gcra
    lim       bigint,  -- core.Limit.Limit
    window_us bigint,  -- core.Limit.Window
    rate      bigint   -- core.Limit.Rate (0: lim)
);

-- The words of core.State.
CREATE TYPE rl.state_words AS (
    algorithm integer,
    t         bigint,
    x         bigint,
    y         bigint,
    log       bigint[]
);

-- One decision (core.Decision), the deciding index and the state after it.
CREATE TYPE rl.decision_state AS (
    ord            integer, -- position of this limit in the call (0-based)
    allowed        boolean,
    lim            bigint,
    remaining      bigint,
    reset_after_us bigint,
    retry_after_us bigint,  -- -1: never (cost above the limit)
    delay_us       bigint,
    idx            integer, -- the deciding limit, as core.TakeAll returns it
    algorithm      integer, -- the state after the call
    t              bigint,
    x              bigint,
    y              bigint,
    log            bigint[]
);

-- Internal result of rl._eval: err is a core.Error code, 0 on success.
CREATE TYPE rl._eval_result AS (
    err         integer,
    allowed     boolean,
    lim         bigint,
    remaining   bigint,
    reset_after bigint,
    retry_after bigint,
    delay       bigint,
    algorithm   integer,
    t           bigint,
    x           bigint,
    y           bigint,
    log         bigint[]
);

-- core.ceilDiv: ⌈a/b⌉ for a >= 0, b > 0 (q*b != a  <=>  a % b != 0).
CREATE FUNCTION rl._ceil_div(a bigint, b bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN a / b + CASE WHEN a % b <> 0 THEN 1 ELSE 0 END;

-- core.ceilDivSigned: ⌈a/b⌉ for any a, b > 0.
CREATE FUNCTION rl._ceil_div_signed(a bigint, b bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN a >= 0 THEN a / b + CASE WHEN a % b <> 0 THEN 1 ELSE 0 END ELSE -((-a) / b) END;

-- rl._error_message returns core.Error.Error() of a code, with its name.
CREATE FUNCTION rl._error_message(code integer) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN CASE code
        WHEN 1 THEN 'ratelimit: unknown algorithm (ErrAlgorithm)'
        WHEN 2 THEN 'ratelimit: limit out of range (ErrLimit)'
        WHEN 3 THEN 'ratelimit: window out of range (ErrWindow)'
        WHEN 4 THEN 'ratelimit: rate out of range (ErrRate)'
        WHEN 5 THEN 'ratelimit: limit × window too large (ErrUnits)'
        WHEN 6 THEN 'ratelimit: cost out of range (ErrCost)'
        WHEN 7 THEN 'ratelimit: time out of range (ErrTime)'
        WHEN 8 THEN 'ratelimit: corrupt state (ErrState)'
        WHEN 9 THEN 'ratelimit: sliding log storage too small (ErrLogCapacity)'
        WHEN 10 THEN 'ratelimit: bad limit list (ErrLimits)'
        ELSE 'ratelimit: unknown error'
    END;

-- rl._raise raises core error code as SQLSTATE RL0NN. detail may be NULL.
CREATE FUNCTION rl._raise(code integer, detail text) RETURNS void
    LANGUAGE plpgsql
AS $fn$
BEGIN
    IF detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'RL0' || lpad(code::text, 2, '0'), MESSAGE = rl._error_message(code);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'RL0' || lpad(code::text, 2, '0'), MESSAGE = rl._error_message(code),
        DETAIL = detail;
END
$fn$;

-- rl._alg returns the number of an algorithm name as core.ParseAlgorithm
-- accepts it, or 0 (which the decision reports as ErrAlgorithm in its turn).
CREATE FUNCTION rl._alg(name text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE name
        WHEN 'fixed_window' THEN 1 WHEN 'fixed' THEN 1
        WHEN 'sliding_window' THEN 2 WHEN 'sliding' THEN 2 WHEN 'sliding_window_counter' THEN 2
        WHEN 'sliding_log' THEN 3 WHEN 'log' THEN 3 WHEN 'sliding_window_log' THEN 3
        WHEN 'token_bucket' THEN 4 WHEN 'token' THEN 4
        WHEN 'leaky_bucket' THEN 5 WHEN 'leaky' THEN 5
        WHEN 'gcra' THEN 6
        ELSE 0
    END;

-- rl._eval is core.eval: one limit, one state. p_take false is modePeek (and
-- modeCheck: arrays have no capacity, so ErrLogCapacity never occurs here)
-- and returns the state unchanged, as Peek and the first pass of TakeAll
-- discard the new state.
-- It never raises for bad input; it returns the core.Error code in err.
-- NULLs: parameters read as 0 (rate 0 is the default, a 0 limit or window is
-- out of range), now and cost as -1 (out of range), state words as 0 and the
-- log as empty, so a missing row (NULLs from an outer join) is a fresh state.
CREATE FUNCTION rl._eval(
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
        rate := coalesce(rate, 0);
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

-- rl.decide is core.Take (op 'take') and core.Peek (op 'peek'): one limit
-- decided against one state at now_us for cost. It returns the decision, idx
-- 0 and the state after the call (unchanged when denied, for cost 0 and for
-- peek). Invalid input raises SQLSTATE RL0NN, NN the core.Error code.
-- NULLs: see rl._eval.
CREATE FUNCTION rl.decide(
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

-- rl.decide_all is core.TakeAll (op 'take') and core.PeekAll (op 'peek'):
-- cost decided against several limits at once, all or nothing. It returns
-- one row per limit, in order: its decision, the deciding index idx (the
-- same in every row) and its state after the call. states needs at least as
-- many elements as limits (ErrLimits otherwise); a NULL element, or a NULL
-- array, is a fresh state. An error raises SQLSTATE RL0NN with DETAIL
-- 'limit index N', N the limit that caused it.
CREATE FUNCTION rl.decide_all(
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

-- rl.algorithm_id returns the number of an algorithm name accepted by
-- core.ParseAlgorithm ('token_bucket', 'token', ...); unknown names raise RL001.
CREATE FUNCTION rl.algorithm_id(name text) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    a integer := rl._alg(name);
BEGIN
    IF a = 0 THEN
        PERFORM rl._raise(1, format('unknown algorithm name %L', name));
    END IF;
    RETURN a;
END
$fn$;

-- rl.algorithm_name is core.Algorithm.String.
CREATE FUNCTION rl.algorithm_name(algorithm integer) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE algorithm
        WHEN 1 THEN 'fixed_window' WHEN 2 THEN 'sliding_window' WHEN 3 THEN 'sliding_log'
        WHEN 4 THEN 'token_bucket' WHEN 5 THEN 'leaky_bucket' WHEN 6 THEN 'gcra'
        ELSE 'unknown'
    END;
