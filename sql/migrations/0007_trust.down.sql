-- Reverts 0007: the functions as 0002-0006 left them, rl_expire for rl_app
-- again, no rl.tenants, no helpers. rl_admin loses its privileges here and is
-- dropped only if these migrations created it and nothing else uses it (no
-- member roles, no privileges or objects in any database of the cluster);
-- otherwise it stays, with a NOTICE.
SET LOCAL search_path = pg_catalog, pg_temp;

DO $do$
DECLARE
    rid oid;
BEGIN
    SELECT oid INTO rid FROM pg_catalog.pg_roles WHERE rolname = 'rl_admin';
    IF rid IS NULL THEN
        RETURN;
    END IF;
    REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rl FROM rl_admin;
    REVOKE ALL ON rl.state FROM rl_admin;
    REVOKE ALL ON SCHEMA rl FROM rl_admin;
    IF pg_catalog.shobj_description(rid, 'pg_authid') IS DISTINCT FROM
            'rl: created by the rl migrations (0007_trust); trusted: its request times are honoured, runs rl_expire and rl.lock_states' THEN
        RAISE NOTICE 'role rl_admin kept: it was not created by the rl migrations';
        RETURN;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_auth_members WHERE roleid = rid) THEN
        RAISE NOTICE 'role rl_admin kept: it is granted to other roles';
        RETURN;
    END IF;
    BEGIN
        DROP ROLE rl_admin;
    EXCEPTION WHEN SQLSTATE '2BP01' OR insufficient_privilege OR object_in_use THEN
        RAISE NOTICE 'role rl_admin kept: %', SQLERRM;
    END;
END
$do$;

GRANT EXECUTE ON FUNCTION rl.rl_expire(bigint, integer) TO rl_app;

-- The bodies of 0002, 0003, 0004 and 0006, unchanged.

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
        rates := rates || coalesce(rl._jint(e -> 'rate', 'rate', i), 0);
        i := i + 1;
    END LOOP;
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_allow(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1,
                            rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    RETURN rl._take1($1, $7, rl._alg($2), $3, rl._interval_us($4), $6, $5, $8, true);
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_allow_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1,
                               rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    RETURN rl._take1($1, $7, rl._alg($2), $3, $4, $6, $5, $8, true);
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_peek(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1,
                           rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    RETURN rl._take1($1, $7, rl._alg($2), $3, rl._interval_us($4), $6, $5, $8, false);
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_peek_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1,
                              rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    RETURN rl._take1($1, $7, rl._alg($2), $3, $4, $6, $5, $8, false);
END
$fn$;

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
        IF p_now IS NULL THEN
            -- rl._now() without a call when rl.now_us is not set.
            p_now := CASE WHEN coalesce(current_setting('rl.now_us', true), '') = '' THEN rl._clock() ELSE rl._now() END;
        END IF;
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

CREATE OR REPLACE FUNCTION rl.rl_reset(key text, name text DEFAULT NULL) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    n     bigint;
    names text[];
BEGIN
    PERFORM rl._check_key($1, 'key');
    -- Lock in name order first, as every writer does, then delete exactly
    -- the rows locked (rows created meanwhile are not waited for).
    SELECT array_agg(l.name) INTO names
      FROM (SELECT s.name FROM rl.state s WHERE s.key = $1 AND ($2 IS NULL OR s.name = $2)
             ORDER BY s.name COLLATE "C" FOR UPDATE) l;
    DELETE FROM rl.state s WHERE s.key = $1 AND s.name = ANY (names);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_expire(now_us bigint DEFAULT NULL, batch integer DEFAULT 10000) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    v_now bigint := coalesce($1, rl._now());
    n     bigint;
BEGIN
    IF batch < 1 THEN
        RAISE EXCEPTION 'ratelimit: batch must be at least 1, not %', batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM rl.state s
     WHERE (s.key, s.name) IN (SELECT d.key, d.name FROM rl.state d
                                WHERE d.expires_at <= v_now
                                ORDER BY d.expires_at
                                LIMIT batch
                                FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$fn$;

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

CREATE OR REPLACE FUNCTION rl.lock_states(p_key text, p_names text[])
    RETURNS TABLE (name text, algorithm integer, t bigint, x bigint, y bigint, log bigint[], now_us bigint)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    nm    text;
    tries integer;
    v_now bigint := rl._now();
BEGIN
    PERFORM rl._check_key(p_key, 'key');
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

-- 0006 left rl.lock_states executable by PUBLIC (a SECURITY INVOKER
-- function: it needs the table's privileges anyway).
GRANT EXECUTE ON FUNCTION rl.lock_states(text, text[]) TO PUBLIC;

DROP FUNCTION rl._require_trusted(text);
DROP FUNCTION rl._check_tenant_key(text, name);
DROP FUNCTION rl._request_now(bigint);
DROP FUNCTION rl._trusted(name);
DROP FUNCTION rl._caller();
DROP TABLE rl.tenants;
