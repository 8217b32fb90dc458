
-- rl._read_limits reads the limits of rl_allow_multi, rl_peek_multi and
-- rl_settle_multi (a JSON array of objects: "name", "algorithm" (a name or
-- a number), "limit", "window" (an interval string) or "window_us", "rate",
-- "shadow") as rl_decide_multi takes them, naming an unknown algorithm name
-- where it stands. shadows is NULL unless a limit is a shadow limit (0018).
-- The first error of the list is returned as OUT values (code, message,
-- detail, hint), all NULL when the list is good, for the caller to raise
-- (0021: its CONTEXT is then one line, the caller's); only an interval string
-- PostgreSQL cannot read raises here, its own error. An integer member that
-- is missing is NULL, clamped to bigint (out-of-range values are then
-- reported as the decision reports them).
CREATE FUNCTION rl._read_limits(limits jsonb,
    OUT names text[], OUT algs integer[], OUT lims bigint[], OUT wins bigint[], OUT rates bigint[],
    OUT shadows boolean[], OUT code text, OUT message text, OUT detail text, OUT hint text)
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
DECLARE
    e   jsonb;
    a   jsonb;
    i   integer := 0;
    nm  text;
    bad text;
BEGIN
    names := '{}'; algs := '{}'; lims := '{}'; wins := '{}'; rates := '{}';
    IF limits IS NULL OR jsonb_typeof(limits) <> 'array' OR jsonb_array_length(limits) = 0 THEN
        code := 'RL010';
        message := rl._error_message(10);
        detail := 'limits must be a non-empty JSON array of objects';
        RETURN;
    END IF;
    FOR e IN SELECT v FROM jsonb_array_elements(limits) AS v LOOP
        IF jsonb_typeof(e) <> 'object' THEN
            code := 'RL010';
            message := rl._error_message(10);
            detail := format('limits[%s] is not a JSON object', i);
            RETURN;
        END IF;
        IF jsonb_typeof(e -> 'name') IS DISTINCT FROM 'string' THEN
            code := 'RL010';
            message := rl._error_message(10);
            detail := format('limits[%s] has no "name" string', i);
            RETURN;
        END IF;
        nm := e ->> 'name';
        SELECT * INTO code, message, detail, hint FROM rl._key_problem(nm, 'limit name');
        IF code IS NOT NULL THEN
            RETURN;
        END IF;
        IF nm = ANY (names) THEN
            code := 'RL010';
            message := rl._error_message(10);
            detail := format('limits[%s]: duplicate name %L', i, nm);
            RETURN;
        END IF;
        names := names || nm;
        a := e -> 'algorithm';
        IF jsonb_typeof(a) = 'string' AND rl._alg(a #>> '{}') = 0 THEN
            code := 'RL001';
            message := format('ratelimit: limits[%s].algorithm %s: unknown (want %s)', i,
                              quote_literal(a #>> '{}'), rl._algorithm_list('plain'));
            detail := rl._limit_detail(i, names);
            hint := 'The short names fixed, sliding, log, token and leaky, and the numbers 1 to 6, are accepted too.';
            RETURN;
        END IF;
        -- The integer members, in the order they are read.
        bad := CASE WHEN jsonb_typeof(a) IS DISTINCT FROM 'string' AND NOT rl._jint_ok(a) THEN 'algorithm'
                    WHEN NOT rl._jint_ok(e -> 'limit') THEN 'limit'
                    WHEN (e ? 'window_us' OR NOT e ? 'window') AND NOT rl._jint_ok(e -> 'window_us') THEN 'window_us'
                    WHEN NOT (e ? 'window_us' OR NOT e ? 'window') AND jsonb_typeof(e -> 'window') IS DISTINCT FROM 'string'
                    THEN 'window' END;
        IF bad = 'window' THEN
            code := '22023'; -- invalid_parameter_value
            message := format('ratelimit: limits[%s].window must be an interval string such as "1 minute"', i);
            RETURN;
        ELSIF bad IS NOT NULL THEN
            code := '22023';
            message := format('ratelimit: limits[%s].%s must be an integer, not %s', i, bad,
                              CASE bad WHEN 'algorithm' THEN a ELSE e -> bad END);
            RETURN;
        END IF;
        IF jsonb_typeof(a) = 'string' THEN
            algs := algs || rl._alg(a #>> '{}');
        ELSE
            algs := algs || greatest(-1, least(2147483647, coalesce(rl._jint(a, 'algorithm', i), 0)))::integer;
        END IF;
        lims := lims || rl._jint(e -> 'limit', 'limit', i);
        IF e ? 'window_us' OR NOT e ? 'window' THEN
            wins := wins || rl._jint(e -> 'window_us', 'window_us', i);
        ELSE
            wins := wins || rl._interval_us((e ->> 'window')::interval);
        END IF;
        IF NOT rl._jint_ok(e -> 'rate') THEN
            code := '22023';
            message := format('ratelimit: limits[%s].rate must be an integer, not %s', i, e -> 'rate');
            RETURN;
        END IF;
        -- A missing rate is the default, 0; "rate": null is NULL, ErrRate.
        rates := rates || CASE WHEN e ? 'rate' THEN rl._jint(e -> 'rate', 'rate', i) ELSE 0 END;
        i := i + 1;
    END LOOP;
    -- "shadow": true makes a limit a shadow limit; false, null or missing,
    -- an enforced one.
    SELECT array_agg(coalesce(jsonb_typeof(u.e -> 'shadow') = 'boolean' AND (u.e ->> 'shadow')::boolean, false)
                     ORDER BY u.o),
           min(u.o) FILTER (WHERE jsonb_typeof(u.e -> 'shadow') NOT IN ('boolean', 'null'))
      INTO shadows, i
      FROM jsonb_array_elements(limits) WITH ORDINALITY AS u(e, o);
    IF i IS NOT NULL THEN
        code := 'RL010';
        message := rl._error_message(10);
        detail := format('limits[%s].shadow must be true or false', i - 1);
        RETURN;
    END IF;
    IF NOT true = ANY (shadows) THEN
        shadows := NULL;
    END IF;
END
$fn$;

-- rl._settle_many settles p_delta on several limits of p_key, all or
-- nothing (rl_settle_decide): the rows locked in bytewise name order (created
-- if missing), core SettleAll, every row written, even with a fresh state;
-- a delta of 0 locks and writes nothing.
CREATE FUNCTION rl._settle_many(p_key text, p_names text[], p_algs integer[], p_lims bigint[], p_wins bigint[], p_rates bigint[], p_delta bigint, p_now bigint)
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
        IF p_delta = 0 THEN
            SELECT s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r INTO st
              FROM rl.state s WHERE s.key = p_key AND s.name = p_names[i];
        ELSE
            st := (rl._lock_state(p_key, p_names[i])).st;
        END IF;
        ss[i] := st; -- not found: NULL, a fresh state
    END LOOP;
    SELECT a.rs, a.best INTO rs, best FROM rl._settle_all(p_algs, p_lims, p_wins, p_rates, ss, p_now, p_delta, p_names) a;
    IF p_delta <> 0 THEN
        FOREACH i IN ARRAY lock_ord LOOP
            r := rs[i];
            UPDATE rl.state s
               SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log, l = r.l, w = r.w, r = r.r,
                   expires_at = rl._expires_at(p_now, r.reset_after)
             WHERE s.key = p_key AND s.name = p_names[i];
        END LOOP;
    END IF;
    FOR i IN 1 .. n LOOP
        r := rs[i];
        RETURN NEXT ROW(i - 1, p_names[i], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay,
                        i = best, p_now, r.next_after)::rl.multi_decision;
    END LOOP;
    RETURN;
END
$function$;

CREATE FUNCTION rl._settle_many_shadow(p_key text, p_names text[], p_algs integer[], p_lims bigint[], p_wins bigint[], p_rates bigint[], p_delta bigint, p_now bigint, p_shadows boolean[])
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
AS $function$
DECLARE
    n        integer := cardinality(p_names);
    lock_ord integer[];
    ss       rl.state_words[];
    rs       rl._eval_result[];
    wr       boolean[];
    err      integer;
    at       integer;
    r        rl._eval_result;
    st       rl.state_words;
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
        IF p_delta = 0 THEN
            SELECT s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r INTO st
              FROM rl.state s WHERE s.key = p_key AND s.name = p_names[i];
        ELSE
            st := (rl._lock_state(p_key, p_names[i])).st;
        END IF;
        ss[i] := st; -- not found: NULL, a fresh state
    END LOOP;
    SELECT a.rs, a.best, a.wr, a.err, a.at INTO rs, best, wr, err, at
      FROM rl._settle_shadow(p_algs, p_lims, p_wins, p_rates, ss, p_now, p_delta, p_shadows) a;
    IF err <> 0 THEN
        st := ss[at];
        PERFORM rl._fail(err, p_algs[at], p_lims[at], p_wins[at], p_rates[at], p_now, p_delta,
                         st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, true, rl._limit_detail(at - 1, p_names));
    END IF;
    -- The rows settled (none for a delta of 0); a shadow limit not settled
    -- keeps its row as it is.
    FOREACH i IN ARRAY lock_ord LOOP
        CONTINUE WHEN NOT wr[i];
        r := rs[i];
        UPDATE rl.state s
           SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log, l = r.l, w = r.w, r = r.r,
               expires_at = rl._expires_at(p_now, r.reset_after)
         WHERE s.key = p_key AND s.name = p_names[i];
    END LOOP;
    FOR i IN 1 .. n LOOP
        r := rs[i];
        RETURN NEXT ROW(i - 1, p_names[i], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay,
                        i = best, p_now, r.next_after)::rl.multi_decision;
    END LOOP;
    RETURN;
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
            SELECT s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r INTO st
              FROM rl.state s WHERE s.key = p_key AND s.name = p_names[i];
        END IF;
        ss[i] := st; -- not found: NULL, a fresh state
    END LOOP;
    SELECT a.rs, a.best INTO rs, best FROM rl._all(p_algs, p_lims, p_wins, p_rates, ss, p_now, p_cost, p_take, p_names) a;
    IF p_take AND p_cost > 0 AND (rs[best]).allowed THEN
        FOREACH i IN ARRAY lock_ord LOOP
            r := rs[i];
            UPDATE rl.state s
               SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log, l = r.l, w = r.w, r = r.r,
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

CREATE FUNCTION rl._take_many_shadow(p_key text, p_names text[], p_algs integer[], p_lims bigint[], p_wins bigint[], p_rates bigint[], p_cost bigint, p_now bigint, p_take boolean, p_shadows boolean[])
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
AS $function$
DECLARE
    n        integer := cardinality(p_names);
    lock_ord integer[];
    ss       rl.state_words[];
    rs       rl._eval_result[];
    wr       boolean[];
    r        rl._eval_result;
    st       rl.state_words;
    lk       record;
    created  integer[] := '{}';
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
                created := created || i;
            END IF;
        ELSE
            SELECT s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r INTO st
              FROM rl.state s WHERE s.key = p_key AND s.name = p_names[i];
        END IF;
        ss[i] := st; -- not found: NULL, a fresh state
    END LOOP;
    SELECT a.rs, a.best, a.wr INTO rs, best, wr
      FROM rl._all_shadow(p_algs, p_lims, p_wins, p_rates, ss, p_now, p_cost, p_take, p_names, p_shadows) a;
    FOREACH i IN ARRAY lock_ord LOOP
        CONTINUE WHEN NOT wr[i];
        r := rs[i];
        UPDATE rl.state s
           SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log, l = r.l, w = r.w, r = r.r,
               expires_at = rl._expires_at(p_now, r.reset_after)
         WHERE s.key = p_key AND s.name = p_names[i];
    END LOOP;
    IF EXISTS (SELECT FROM unnest(created) AS u(i) WHERE NOT wr[u.i]) THEN
        DELETE FROM rl.state s
         WHERE s.key = p_key AND s.name = ANY (ARRAY(SELECT p_names[u.i] FROM unnest(created) AS u(i) WHERE NOT wr[u.i]));
    END IF;
    FOR i IN 1 .. n LOOP
        r := rs[i];
        RETURN NEXT ROW(i - 1, p_names[i], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay,
                        i = best, p_now, r.next_after)::rl.multi_decision;
    END LOOP;
    RETURN;
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_decide_multi(key text, names text[], algorithms integer[], lims bigint[], windows_us bigint[], rates bigint[], cost bigint DEFAULT 1, now_us bigint DEFAULT NULL::bigint, take boolean DEFAULT true, shadows boolean[] DEFAULT NULL::boolean[])
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
    p       record;
BEGIN
    -- 0018: shadow limits (store/shadow.go): a call with a shadow flag set
    -- goes the way of 0011 with rl._take_many_shadow, under the same trust
    -- rules; shadows NULL or all false is the call it was.
    IF true = ANY ($10) THEN
        IF cardinality($10) IS DISTINCT FROM n OR array_ndims($10) <> 1 OR array_lower($10, 1) <> 1 THEN
            RAISE EXCEPTION USING ERRCODE = 'RL010', MESSAGE = rl._error_message(10),
                DETAIL = 'limit index 0: shadows needs one flag per limit';
        END IF;
        v_now := rl._request_now(p_now);
        -- 0021: an error of the arguments raised here, not by a helper:
        -- its CONTEXT is one line, this function's.
        p := rl._multi_problem(p_key, p_names, p_algs, p_lims, p_wins, p_rates, p_cost, v_now, false, $10);
        IF p.code IS NOT NULL THEN
            IF p.detail IS NULL AND p.hint IS NULL THEN
                RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
            ELSIF p.hint IS NULL THEN
                RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
            ELSIF p.detail IS NULL THEN
                RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
            END IF;
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
        END IF;
        RETURN QUERY SELECT * FROM rl._take_many_shadow($1, $2, $3, $4, $5, $6, $7, v_now, p_take, $10);
        RETURN;
    END IF;
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
                 SELECT o.now, o.algorithm, o.t, o.x, o.y, o.log, o.l AS sl, o.w AS sw, o.r AS sr,
                        rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], o.algorithm, o.t, o.x, o.y, o.log, o.l, o.w, o.r, o.now, p_cost, true) AS r
                   FROM (SELECT rl._request_now(p_now) AS now, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r
                           FROM rl.state s
                          WHERE s.key = p_key AND s.name = p_names[1] AND (SELECT tn.role FROM rl.tenants tn ORDER BY tn.role LIMIT 1) IS NULL
                            AND octet_length(p_key) BETWEEN 1 AND 256 AND octet_length(p_names[1]) BETWEEN 1 AND 256
                            AND array_ndims(p_names) = 1 AND array_lower(p_names, 1) = 1
                            AND cardinality(p_algs) = 1 AND cardinality(p_lims) = 1
                            AND cardinality(p_wins) = 1 AND cardinality(p_rates) = 1
                            AND array_lower(p_algs, 1) = 1 AND array_lower(p_lims, 1) = 1
                            AND array_lower(p_wins, 1) = 1 AND array_lower(p_rates, 1) = 1
                            AND p_cost > 0) o),
             u AS (UPDATE rl.state s
                      SET (algorithm, t, x, y, log, l, w, r, expires_at) =
                          (SELECT (v.r).algorithm, (v.r).t, (v.r).x, (v.r).y, (v.r).log, (v.r).l, (v.r).w, (v.r).r, rl._expires_at(e.now, (v.r).reset_after)
                             FROM (SELECT CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = (e.algorithm, e.t, e.x, e.y, e.log, e.sl, e.sw, e.sr)
                                               THEN e.r
                                               ELSE rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, p_cost, true)
                                          END AS r
                                   OFFSET 0) v)
                     FROM e
                    WHERE s.key = p_key AND s.name = p_names[1]
                      AND CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = (e.algorithm, e.t, e.x, e.y, e.log, e.sl, e.sw, e.sr)
                               THEN (e.r).err = 0 AND (e.r).allowed
                               ELSE (SELECT ev.err = 0 AND ev.allowed
                                       FROM rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, p_cost, false) AS ev)
                          END
                RETURNING e.now, s.t, s.x,
                          (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log, (e.r).l, (e.r).w, (e.r).r) AS same,
                          CASE WHEN (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log, (e.r).l, (e.r).w, (e.r).r)
                               THEN e.r
                               ELSE rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, 0, false)
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
                 SELECT rl._request_now(p_now) AS now, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r
                   FROM rl.state s
                  WHERE s.key = p_key AND s.name = p_names[1] AND (SELECT tn.role FROM rl.tenants tn ORDER BY tn.role LIMIT 1) IS NULL
                    AND octet_length(p_key) BETWEEN 1 AND 256 AND octet_length(p_names[1]) BETWEEN 1 AND 256
                    AND array_ndims(p_names) = 1 AND array_lower(p_names, 1) = 1
                    AND cardinality(p_algs) = 1 AND cardinality(p_lims) = 1
                    AND cardinality(p_wins) = 1 AND cardinality(p_rates) = 1
                    AND array_lower(p_algs, 1) = 1 AND array_lower(p_lims, 1) = 1
                    AND array_lower(p_wins, 1) = 1 AND array_lower(p_rates, 1) = 1),
             e AS MATERIALIZED (
                 SELECT d.now,
                        rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], d.algorithm, d.t, d.x, d.y, d.log, d.l, d.w, d.r, d.now,
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
                     SELECT s.name, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r
                       FROM rl.state s
                      WHERE s.key = p_key AND s.name = ANY (p_names) AND (SELECT tn.role FROM rl.tenants tn ORDER BY tn.role LIMIT 1) IS NULL
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
                            array_agg(ROW(l.algorithm, l.t, l.x, l.y, l.log, l.l, l.w, l.r)::rl.state_words ORDER BY u.o) AS ss
                       FROM unnest(p_names) WITH ORDINALITY AS u(v, o) LEFT JOIN l ON l.name = u.v),
                 a AS MATERIALIZED (
                     SELECT c.now, x.rs, x.best
                       FROM c, rl._all(p_algs, p_lims, p_wins, p_rates, c.ss, c.now, p_cost, true, p_names) AS x
                      WHERE c.m = n),
                 w AS (UPDATE rl.state s
                          SET algorithm = u.algorithm, t = u.t, x = u.x, y = u.y, log = u.log, l = u.sl, w = u.sw, r = u.sr,
                              expires_at = rl._expires_at(a.now, u.reset_after)
                         FROM a, unnest(p_names, a.rs) AS u(nm, err, allowed, lim, remaining, reset_after, retry_after,
                                                            delay, algorithm, t, x, y, log, next_after, sl, sw, sr)
                        WHERE s.key = p_key AND s.name = u.nm AND p_cost > 0 AND (a.rs[a.best]).allowed)
            SELECT c.m, a.now, a.rs, a.best INTO m, v_now, rs, best FROM c LEFT JOIN a ON true;
            IF m < n THEN
                RAISE EXCEPTION USING ERRCODE = 'RL999', MESSAGE = 'ratelimit: internal: a row is missing';
            END IF;
        EXCEPTION WHEN SQLSTATE 'RL999' THEN
            m := 0;
        -- 0021: a limit's parameters, the time or the cost out of range
        -- (rl._all): raised below, by this function.
        WHEN SQLSTATE 'RL001' OR SQLSTATE 'RL002' OR SQLSTATE 'RL003' OR SQLSTATE 'RL004' OR SQLSTATE 'RL005'
                OR SQLSTATE 'RL006' OR SQLSTATE 'RL007' THEN
            m := 0;
        END;
        IF m = n THEN
            RETURN QUERY SELECT (u.o - 1)::integer, p_names[u.o], u.allowed, u.lim, u.remaining, u.reset_after,
                                u.retry_after, u.delay, u.o = best, v_now, u.next_after
                           FROM unnest(rs) WITH ORDINALITY AS u(err, allowed, lim, remaining, reset_after, retry_after,
                                                                delay, algorithm, t, x, y, log, next_after, sl, sw, sr,
                                                                settle_caps, o);
            RETURN;
        END IF;
    END IF;
    -- Everything else, as in 0011. 0021: an error of the arguments raised
    -- here, not by a helper: its CONTEXT is one line, this function's.
    v_now := rl._request_now(p_now);
    p := rl._multi_problem(p_key, p_names, p_algs, p_lims, p_wins, p_rates, p_cost, v_now, false, NULL);
    IF p.code IS NOT NULL THEN
        IF p.detail IS NULL AND p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
        ELSIF p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
        ELSIF p.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
    END IF;
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

CREATE OR REPLACE FUNCTION rl.rl_allow_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL::bigint)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    l record;
    p record;
BEGIN
    -- 0018: "shadow": true makes a limit a shadow limit (rl._read_limits).
    -- 0021: an error of the arguments raised here, not by a helper or by
    -- rl_decide_multi: its CONTEXT is one line, this function's.
    l := rl._read_limits($2);
    p := l;
    IF p.code IS NULL THEN
        p := rl._multi_problem($1, l.names, l.algs, l.lims, l.wins, l.rates, $3, rl._request_now($4), false, l.shadows);
    END IF;
    IF p.code IS NOT NULL THEN
        IF p.detail IS NULL AND p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
        ELSIF p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
        ELSIF p.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
    END IF;
    RETURN QUERY SELECT * FROM rl.rl_decide_multi($1, l.names, l.algs, l.lims, l.wins, l.rates, $3, $4, true, l.shadows);
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_peek_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL::bigint)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    l record;
    p record;
BEGIN
    -- 0019: shadow limits as rl_allow_multi takes them, peeked as
    -- store.Policy.Decide peeks them. 0021: an error of the arguments raised
    -- here: its CONTEXT is one line, this function's.
    l := rl._read_limits($2);
    p := l;
    IF p.code IS NULL THEN
        p := rl._multi_problem($1, l.names, l.algs, l.lims, l.wins, l.rates, $3, rl._request_now($4), false, l.shadows);
    END IF;
    IF p.code IS NOT NULL THEN
        IF p.detail IS NULL AND p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
        ELSIF p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
        ELSIF p.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
    END IF;
    RETURN QUERY SELECT * FROM rl.rl_decide_multi($1, l.names, l.algs, l.lims, l.wins, l.rates, $3, $4, false, l.shadows);
END
$function$;

CREATE FUNCTION rl.rl_settle_decide(key text, names text[], algorithms integer[], lims bigint[], windows_us bigint[], rates bigint[], delta bigint, now_us bigint DEFAULT NULL::bigint)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    v_now bigint := rl._request_now($8);
    p     record;
BEGIN
    -- 0021: an error of the arguments raised here, not by a helper: its
    -- CONTEXT is one line, this function's.
    p := rl._multi_problem($1, $2, $3, $4, $5, $6, $7, v_now, true, NULL);
    IF p.code IS NOT NULL THEN
        IF p.detail IS NULL AND p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
        ELSIF p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
        ELSIF p.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
    END IF;
    RETURN QUERY SELECT * FROM rl._settle_many($1, $2, $3, $4, $5, $6, $7, v_now);
END
$function$;
COMMENT ON FUNCTION rl.rl_settle_decide(text,text[],integer[],bigint[],bigint[],bigint[],bigint,bigint) IS 'Settles delta units on several limits of key, all or nothing (core.SettleAll), given as rl_decide_multi takes them; one row per limit, the first deciding. See sql/README.md.';

CREATE OR REPLACE FUNCTION rl.rl_settle_multi(key text, limits jsonb, delta bigint, now_us bigint DEFAULT NULL::bigint)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    l     record;
    p     record;
    v_now bigint := rl._request_now($4);
BEGIN
    -- 0019: "shadow" read as rl_allow_multi reads it. A settle with a
    -- shadow limit settles as store.Policy.Decide with store.Settle: the
    -- enforced limits all or nothing, then each shadow limit alone, best
    -- effort (rl._settle_many_shadow), with the trust rules of
    -- rl_settle_decide; without one, every limit all or nothing, as
    -- rl_settle_decide settles them. 0021: an error of the arguments raised
    -- here: its CONTEXT is one line, this function's.
    l := rl._read_limits($2);
    p := l;
    IF p.code IS NULL THEN
        p := rl._multi_problem($1, l.names, l.algs, l.lims, l.wins, l.rates, $3, v_now, true, l.shadows);
    END IF;
    IF p.code IS NOT NULL THEN
        IF p.detail IS NULL AND p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
        ELSIF p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
        ELSIF p.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
    END IF;
    IF l.shadows IS NOT NULL THEN
        RETURN QUERY SELECT * FROM rl._settle_many_shadow($1, l.names, l.algs, l.lims, l.wins, l.rates, $3, v_now, l.shadows);
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM rl._settle_many($1, l.names, l.algs, l.lims, l.wins, l.rates, $3, v_now);
END
$function$;
COMMENT ON FUNCTION rl.rl_settle_multi(text,jsonb,bigint,bigint) IS 'Settles delta units on several limits of key, given as rl_allow_multi takes them: all or nothing (core.SettleAll), the first deciding; with "shadow": true limits as store.Policy.Decide settles them, the enforced ones all or nothing, then each shadow limit alone, best effort. One row per limit. See sql/README.md.';
