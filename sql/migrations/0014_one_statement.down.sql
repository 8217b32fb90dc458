-- 0014 down: the five functions as 0013 left them (their text copied from
-- sql/rl.sql at version 13).
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION rl.rl_allow(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1, rate bigint DEFAULT 0, name text DEFAULT 'default'::text, now_us bigint DEFAULT NULL::bigint)
 RETURNS rl.decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION rl.rl_allow_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1, rate bigint DEFAULT 0, name text DEFAULT 'default'::text, now_us bigint DEFAULT NULL::bigint)
 RETURNS rl.decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION rl.rl_peek(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1, rate bigint DEFAULT 0, name text DEFAULT 'default'::text, now_us bigint DEFAULT NULL::bigint)
 RETURNS rl.decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION rl.rl_peek_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1, rate bigint DEFAULT 0, name text DEFAULT 'default'::text, now_us bigint DEFAULT NULL::bigint)
 RETURNS rl.decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION rl.rl_decide_multi(key text, names text[], algorithms integer[], lims bigint[], windows_us bigint[], rates bigint[], cost bigint DEFAULT 1, now_us bigint DEFAULT NULL::bigint, take boolean DEFAULT true)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
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
    one     boolean;
    r       rl._eval_result;
    st      rl.state_words;
    v_now   bigint;
BEGIN
    one := cardinality(p_names) = 1 AND octet_length(p_key) BETWEEN 1 AND 256
            AND octet_length(p_names[1]) BETWEEN 1 AND 256
            AND array_ndims(p_names) = 1 AND array_lower(p_names, 1) = 1
            AND cardinality(p_algs) = 1 AND cardinality(p_lims) = 1
            AND cardinality(p_wins) = 1 AND cardinality(p_rates) = 1
            AND array_lower(p_algs, 1) = 1 AND array_lower(p_lims, 1) = 1
            AND array_lower(p_wins, 1) = 1 AND array_lower(p_rates, 1) = 1;
    -- The common call: one limit, its row there, no tenants. The row is
    -- locked as rl._decide1 locks it (the only row of the call), and only
    -- when rl.tenants is empty: a tenant's call locks nothing here.
    IF one THEN
        IF p_take THEN
            SELECT s.algorithm, s.t, s.x, s.y, s.log
              INTO st.algorithm, st.t, st.x, st.y, st.log
              FROM rl.state s WHERE s.key = p_key AND s.name = p_names[1] AND NOT EXISTS (SELECT FROM rl.tenants)
               FOR UPDATE OF s;
        ELSE
            SELECT s.algorithm, s.t, s.x, s.y, s.log
              INTO st.algorithm, st.t, st.x, st.y, st.log
              FROM rl.state s WHERE s.key = p_key AND s.name = p_names[1] AND NOT EXISTS (SELECT FROM rl.tenants);
        END IF;
        IF FOUND THEN
            v_now := rl._request_now(p_now);
            r := rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], st.algorithm, st.t, st.x, st.y, st.log,
                          v_now, p_cost, p_take);
            IF r.err = 0 THEN
                IF p_take AND r.allowed AND p_cost <> 0 THEN
                    UPDATE rl.state s
                       SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log,
                           expires_at = rl._expires_at(v_now, r.reset_after)
                     WHERE s.key = p_key AND s.name = p_names[1];
                END IF;
                RETURN NEXT ROW(0, p_names[1], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay,
                                true, v_now)::rl.multi_decision;
                RETURN;
            END IF;
        END IF;
    END IF;
    -- Everything else, as in 0008.
    PERFORM rl._check_tenant_key(p_key, NULL);
    v_now := rl._request_now(p_now);
    IF one THEN
        r := rl._decide1(p_key, p_names[1], p_algs[1], p_lims[1], p_wins[1], p_rates[1], p_cost, v_now, p_take, true);
        RETURN NEXT ROW(0, p_names[1], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, true,
                        v_now)::rl.multi_decision;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM rl._take_many($1, $2, $3, $4, $5, $6, $7, v_now, p_take);
END
$function$;

