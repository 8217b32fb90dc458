-- 0007: who may do what with the state. Before it, any holder of rl_app
-- could pass a request time (now_us, or SET rl.now_us) a century ahead and
-- lock any key for a century, reset or peek anyone's key, and delete every
-- row with rl_expire. Now:
--
--   * the request time is honoured only for a trusted role; everyone else
--     decides on the database clock, whatever time it passes;
--   * rl_expire and rl.lock_states are for trusted roles only;
--   * tenants: a role listed in rl.tenants (or a member of one) may only name
--     keys starting with one of its prefixes, in every function that reads or
--     writes rl.state, and in the trigger rl.enforce_limit();
--   * a NULL rate is ErrRate (RL004), like every other NULL parameter.
--
-- Identity. Inside a SECURITY DEFINER function current_user is the owner, so
-- the functions look at the role the session acts as: the role set with SET
-- ROLE, else the login role (session_user). A session can act only as its
-- login role or roles that role is a member of (SET ROLE checks membership,
-- also via set_config or a function's SET clause, and is refused inside
-- SECURITY DEFINER functions), so no argument, setting or wrapper function
-- can make a call look like another role's: no granted function takes the
-- identity as an argument (the helpers that do are granted to no one, and
-- run as the owner). A SECURITY DEFINER function of someone else's in between does
-- not change it: a tenant calling an owner's wrapper is still that tenant (a
-- wrapper cannot lend more than the session has), and code that a trusted
-- session runs (any function, trigger or view it calls) acts for that
-- session, as PostgreSQL's own SECURITY INVOKER code does.
--
-- Trusted: a member of the owner of rl's functions and schema (the role that
-- ran these migrations; superusers are members of every role) or of the role
-- rl_admin. Trusted roles are never restricted to a prefix.
--
-- Helpers, for the functions of later migrations (none is granted; call them
-- from SECURITY DEFINER functions, whose search_path must put rl after
-- pg_catalog; a migration adding functions must REVOKE EXECUTE ON them FROM
-- PUBLIC, since new functions are executable by PUBLIC):
--
--   rl._caller() -> name
--       the role the session acts as (see Identity).
--   rl._trusted(who name) -> boolean
--       who is a member of the owner of rl's functions or of rl_admin.
--   rl._request_now(p_now bigint) -> bigint
--       the time to decide at: p_now, else the setting rl.now_us, else the
--       database clock, for a trusted caller; the database clock for everyone
--       else (what it passed is ignored). Never NULL. Call it once per call
--       and pass the result down.
--   rl._check_tenant_key(p_key text, p_who name) -> void
--       raises RL011 when p_key is NULL, empty or over 256 bytes, and 42501
--       (insufficient_privilege) when p_who (NULL: rl._caller()) is a tenant
--       and p_key starts with none of its prefixes. Call it before touching a
--       key's rows, for every key.
--   rl._require_trusted(what text) -> void
--       raises 42501 unless rl._caller() is trusted; what names the function.
SET LOCAL search_path = pg_catalog, pg_temp;

-- rl.tenants: which role may use which keys. Maintained by the owner only.
CREATE TABLE rl.tenants (
    role       regrole NOT NULL,
    key_prefix text    NOT NULL CHECK (octet_length(key_prefix) BETWEEN 1 AND 256),
    PRIMARY KEY (role, key_prefix)
);

COMMENT ON TABLE rl.tenants IS
    'A role listed here, or a member of one, may only use keys starting with one of its key_prefix values '
    '(owner and rl_admin members excepted). Maintained by the owner of schema rl.';
COMMENT ON COLUMN rl.tenants.role IS
    'the tenant role (an OID: renaming the role keeps the entry; drop the entry when dropping the role)';
COMMENT ON COLUMN rl.tenants.key_prefix IS
    'a prefix of the keys the role may use, bytewise (not a pattern); end it with a separator such as '':''';

-- rl._caller: the role the session acts as: SET ROLE's, else the login role.
CREATE FUNCTION rl._caller() RETURNS name
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE WHEN pg_catalog.current_setting('role') = 'none' THEN session_user
                ELSE pg_catalog.current_setting('role')::name END;

-- rl._trusted: who may choose the request time, expire and lock rows. It is
-- SECURITY DEFINER so that CURRENT_USER is its owner, the owner of rl's
-- functions, wherever it is called from (no catalog query: about 2 µs); its
-- body is parsed at creation, so no search_path applies.
CREATE FUNCTION rl._trusted(who name) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
    RETURN pg_catalog.pg_has_role(who, CURRENT_USER, 'MEMBER')
        OR coalesce(pg_catalog.pg_has_role(who, pg_catalog.to_regrole('rl_admin'), 'MEMBER'), false);

-- rl._request_now: the time a call decides at (see the top of this file).
-- The common call, no time given, reads the clock without checking anything.
CREATE FUNCTION rl._request_now(p_now bigint) RETURNS bigint
    LANGUAGE sql VOLATILE PARALLEL SAFE
    RETURN CASE
        WHEN p_now IS NULL AND coalesce(pg_catalog.current_setting('rl.now_us', true), '') = '' THEN rl._clock()
        WHEN rl._trusted(rl._caller()) THEN coalesce(p_now, rl._now())
        ELSE rl._clock()
    END;

-- rl._check_tenant_key: RL011 for an invalid key; 42501 when p_who (NULL:
-- the caller) is a tenant and the key is not under one of its prefixes.
CREATE FUNCTION rl._check_tenant_key(p_key text, p_who name) RETURNS void
    LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $fn$
DECLARE
    pfx text[];
BEGIN
    IF (pg_catalog.octet_length(p_key) BETWEEN 1 AND 256) IS NOT TRUE THEN
        PERFORM rl._check_key(p_key, 'key');
    END IF;
    -- One query when rl.tenants is empty (about 6 µs), the common case.
    IF NOT EXISTS (SELECT FROM rl.tenants) THEN
        RETURN;
    END IF;
    p_who := coalesce(p_who, rl._caller());
    IF rl._trusted(p_who) THEN
        RETURN;
    END IF;
    SELECT pg_catalog.array_agg(t.key_prefix ORDER BY t.key_prefix COLLATE "C") INTO pfx
      FROM rl.tenants t WHERE pg_catalog.pg_has_role(p_who, t.role, 'MEMBER');
    IF pfx IS NULL OR EXISTS (SELECT FROM pg_catalog.unnest(pfx) AS u(p) WHERE pg_catalog.starts_with(p_key, u.p)) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'ratelimit: role % may not use key %', pg_catalog.quote_ident(p_who), pg_catalog.quote_literal(p_key)
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = pg_catalog.format('Role %s is a tenant (rl.tenants); its keys start with %s.',
                                         pg_catalog.quote_ident(p_who),
                                         pg_catalog.array_to_string(
                                             ARRAY(SELECT pg_catalog.quote_literal(u.p) FROM pg_catalog.unnest(pfx) AS u(p)),
                                             ' or '));
END
$fn$;

-- rl._require_trusted raises 42501 unless the caller is trusted.
CREATE FUNCTION rl._require_trusted(what text) RETURNS void
    LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $fn$
BEGIN
    IF NOT rl._trusted(rl._caller()) THEN
        RAISE EXCEPTION 'ratelimit: % is for the owner of schema rl and members of rl_admin', what
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('Role %s is neither.', pg_catalog.quote_ident(rl._caller())),
                  HINT = 'GRANT rl_admin TO the role that runs it.';
    END IF;
END
$fn$;

-- rl._eval, as in 0002, except that a NULL rate reads as -1 (ErrRate) where
-- it read as 0 (the default): a NULL is an error for every parameter.
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

-- rl._parse_limits, as in 0003, except that "rate": null is NULL (ErrRate);
-- a missing rate is still the default, 0.
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

-- The table functions check the key (rl._check_tenant_key) and decide at
-- rl._request_now(now_us); the rest is as in 0003.
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

-- rl_allow_multi and rl_peek_multi call rl_decide_multi, which checks.

-- rl.rl_decide_multi, as in 0003, with the checks first.
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

-- rl.rl_reset, as in 0003, for keys the caller may use.
CREATE OR REPLACE FUNCTION rl.rl_reset(key text, name text DEFAULT NULL) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    n     bigint;
    names text[];
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
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

-- rl.rl_expire, as in 0003, for trusted roles only.
CREATE OR REPLACE FUNCTION rl.rl_expire(now_us bigint DEFAULT NULL, batch integer DEFAULT 10000) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    v_now bigint;
    n     bigint;
BEGIN
    -- It deletes any idle row, of every tenant, at any time it is given.
    PERFORM rl._require_trusted('rl.rl_expire');
    v_now := rl._request_now($1);
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

-- rl.enforce_limit, as in 0004, with the tenant checks.
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

-- rl.lock_states, as in 0006, for trusted roles only (SECURITY DEFINER, so
-- that rl_admin needs no EXECUTE on the helpers).
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

-- rl_admin (NOLOGIN): trusted. It has what rl_app has (it is a member),
-- rl_expire and rl.lock_states, and SELECT and UPDATE on rl.state with
-- rl._now() for pgstore's Go/WebAssembly path (lock, decide, write back).
-- Like rl_app it belongs to the cluster: created only if missing, shared by
-- every database migrated in it.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rl FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rl.rl_expire(bigint, integer) FROM rl_app;

DO $do$
BEGIN
    FOR attempt IN 1 .. 5 LOOP
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'rl_admin') THEN
                CREATE ROLE rl_admin NOLOGIN;
                COMMENT ON ROLE rl_admin IS 'rl: created by the rl migrations (0007_trust); trusted: its request times are honoured, runs rl_expire and rl.lock_states';
            END IF;
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_auth_members m
                            WHERE m.roleid = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = 'rl_app')
                              AND m.member = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = 'rl_admin')) THEN
                GRANT rl_app TO rl_admin;
            END IF;
            GRANT USAGE ON SCHEMA rl TO rl_admin;
            GRANT EXECUTE ON FUNCTION
                rl.rl_expire(bigint, integer),
                rl.lock_states(text, text[]),
                rl._now()
                TO rl_admin;
            GRANT SELECT, UPDATE ON rl.state TO rl_admin;
            RETURN;
        EXCEPTION WHEN duplicate_object OR unique_violation OR undefined_object THEN
            IF attempt = 5 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
END
$do$;
