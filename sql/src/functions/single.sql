
CREATE OR REPLACE FUNCTION rl._decide1(p_key text, p_name text, p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, p_cost bigint, p_now bigint, p_take boolean, p_multi boolean)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
AS $function$
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
        SELECT s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r INTO st
          FROM rl.state s WHERE s.key = p_key AND s.name = p_name FOR UPDATE;
    ELSE
        SELECT s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r INTO st
          FROM rl.state s WHERE s.key = p_key AND s.name = p_name;
    END IF;
    -- Not found: st is NULL, a fresh state.
    r := rl._eval(p_alg, p_lim, p_win, p_rate, st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, p_now,
                  p_cost, p_take);
    IF r.err <> 0 THEN
        PERFORM rl._fail(r.err, p_alg, p_lim, p_win, p_rate, p_now, p_cost, st.algorithm, st.t, st.x, st.y, st.log,
                         st.l, st.w, st.r, false, CASE WHEN p_multi THEN rl._limit_detail(0, ARRAY[p_name]) END);
    END IF;
    -- Denied, peeked or cost 0: the state is unchanged; write nothing.
    IF NOT p_take OR NOT r.allowed OR p_cost = 0 THEN
        RETURN r;
    END IF;
    IF st.algorithm IS NULL THEN
        INSERT INTO rl.state AS s (key, name, algorithm, t, x, y, log, l, w, r, expires_at)
        VALUES (p_key, p_name, r.algorithm, r.t, r.x, r.y, r.log, r.l, r.w, r.r, rl._expires_at(p_now, r.reset_after))
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN r;
        END IF;
        -- Another session created the row first: decide against its state.
        lk := rl._lock_state(p_key, p_name);
        st := lk.st;
        created := lk.created;
        r := rl._eval(p_alg, p_lim, p_win, p_rate, st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, p_now,
                      p_cost, true);
        IF NOT r.allowed THEN -- err is 0: the same limit passed above
            IF created THEN
                DELETE FROM rl.state s WHERE s.key = p_key AND s.name = p_name;
            END IF;
            RETURN r;
        END IF;
    END IF;
    UPDATE rl.state s
       SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log, l = r.l, w = r.w, r = r.r,
           expires_at = rl._expires_at(p_now, r.reset_after)
     WHERE s.key = p_key AND s.name = p_name;
    RETURN r;
END
$function$;

-- rl._settle1 settles p_delta on the limit p_name of p_key (rl_settle): the
-- row locked (created if missing) and written, even with a fresh state,
-- unless the delta is 0, which changes nothing and locks nothing.
CREATE FUNCTION rl._settle1(p_key text, p_name text, p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, p_delta bigint, p_now bigint)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
AS $function$
DECLARE
    st rl.state_words;
    r  rl._eval_result;
BEGIN
    IF (octet_length(p_key) BETWEEN 1 AND 256 AND octet_length(p_name) BETWEEN 1 AND 256) IS NOT TRUE THEN
        PERFORM rl._check_key(p_key, 'key');
        PERFORM rl._check_key(p_name, 'limit name');
    END IF;
    p_now := coalesce(p_now, rl._now());
    IF p_delta = 0 THEN
        SELECT s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r INTO st
          FROM rl.state s WHERE s.key = p_key AND s.name = p_name;
    ELSE
        st := (rl._lock_state(p_key, p_name)).st;
    END IF;
    r := rl._settle(p_alg, p_lim, p_win, p_rate, st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, p_now,
                    p_delta);
    IF r.err <> 0 THEN
        PERFORM rl._fail(r.err, p_alg, p_lim, p_win, p_rate, p_now, p_delta, st.algorithm, st.t, st.x, st.y, st.log,
                         st.l, st.w, st.r, true, NULL);
    END IF;
    IF p_delta <> 0 THEN
        UPDATE rl.state s
           SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log, l = r.l, w = r.w, r = r.r,
               expires_at = rl._expires_at(p_now, r.reset_after)
         WHERE s.key = p_key AND s.name = p_name;
    END IF;
    RETURN r;
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

CREATE OR REPLACE FUNCTION rl.rl_allow(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1, rate bigint DEFAULT 0, name text DEFAULT 'default'::text, now_us bigint DEFAULT NULL::bigint)
 RETURNS rl.decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_alg integer;
    v_w bigint;
    v_now bigint;
    p record;
    res rl.decision;
BEGIN
    -- 0015: the common call (its row there, rl.tenants empty, valid input) in one statement, rl._eval
    -- evaluated once: e decides on the row as the statement's snapshot has it, and the UPDATE writes e's
    -- state when the row it locks is still that row. If another decision wrote the row meanwhile (a hot
    -- key: the UPDATE waited for the row and reads its latest version), it decides again on that
    -- version, as 0014's did. Anything else, or an error, the way below, which raises it.
    -- 0021: the algorithm's number and the window are computed once, here, not in each of the
    -- statement's expressions (the executor prepares every expression of the statement at each call),
    -- and rl.tenants is read as empty through its index (a sequential scan asks the kernel for the
    -- table's size at every call). BENCHMARKS.md, "Where a take's time goes".
    v_alg := rl._alg($2);
    v_w := rl._interval_us($4);
    WITH e AS MATERIALIZED (
             SELECT o.now, o.algorithm, o.t, o.x, o.y, o.log, o.l AS sl, o.w AS sw, o.r AS sr,
                    rl._eval(v_alg, $3, v_w, $6, o.algorithm, o.t, o.x, o.y, o.log, o.l, o.w, o.r, o.now, $5, true) AS r
               FROM (SELECT rl._request_now($8) AS now, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r
                       FROM rl.state s
                      WHERE s.key = $1 AND s.name = $7 AND (SELECT tn.role FROM rl.tenants tn ORDER BY tn.role LIMIT 1) IS NULL
                        AND octet_length($1) BETWEEN 1 AND 256 AND octet_length($7) BETWEEN 1 AND 256
                        AND $5 > 0) o),
         u AS (UPDATE rl.state s
                  SET (algorithm, t, x, y, log, l, w, r, expires_at) =
                      (SELECT (v.r).algorithm, (v.r).t, (v.r).x, (v.r).y, (v.r).log, (v.r).l, (v.r).w, (v.r).r, rl._expires_at(e.now, (v.r).reset_after)
                         FROM (SELECT CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = (e.algorithm, e.t, e.x, e.y, e.log, e.sl, e.sw, e.sr)
                                           THEN e.r
                                           ELSE rl._eval(v_alg, $3, v_w, $6, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, $5, true)
                                      END AS r
                               OFFSET 0) v)
                 FROM e
                WHERE s.key = $1 AND s.name = $7
                  AND CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = (e.algorithm, e.t, e.x, e.y, e.log, e.sl, e.sw, e.sr)
                           THEN (e.r).err = 0 AND (e.r).allowed
                           ELSE (SELECT ev.err = 0 AND ev.allowed
                                   FROM rl._eval(v_alg, $3, v_w, $6, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, $5, false) AS ev)
                      END
            RETURNING e.now, s.t, s.x,
                      (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log, (e.r).l, (e.r).w, (e.r).r) AS same,
                      CASE WHEN (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log, (e.r).l, (e.r).w, (e.r).r)
                           THEN e.r
                           ELSE rl._eval(v_alg, $3, v_w, $6, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, 0, false)
                      END AS r)
    SELECT true, (u.r).lim, (u.r).remaining, (u.r).reset_after, 0::bigint,
           CASE WHEN u.same THEN (u.r).delay
                WHEN v_alg = 5 AND u.x - $5 * v_w > 0
                THEN rl._ceil_div(u.x - $5 * v_w, CASE WHEN $6 = 0 THEN $3 ELSE $6 END) + u.t - u.now
                ELSE 0 END, u.now, (u.r).next_after
      INTO res
      FROM u;
    IF FOUND THEN
        RETURN res;
    END IF;
    v_now := rl._request_now($8);
    p := rl._single_problem($1, $7, $2, $3, v_w, true, $4, $6, $5, v_now, false);
    IF p.code IS NOT NULL THEN
        -- Raised here, not by a helper: the error's CONTEXT is one line, this function's.
        IF p.detail IS NULL AND p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
        ELSIF p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
        ELSIF p.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
    END IF;
    RETURN rl._take1($1, $7, v_alg, $3, v_w, $6, $5, v_now, true);
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
    v_alg integer;
    v_now bigint;
    p record;
    res rl.decision;
BEGIN
    -- 0015: the common call (its row there, rl.tenants empty, valid input) in one statement, rl._eval
    -- evaluated once: e decides on the row as the statement's snapshot has it, and the UPDATE writes e's
    -- state when the row it locks is still that row. If another decision wrote the row meanwhile (a hot
    -- key: the UPDATE waited for the row and reads its latest version), it decides again on that
    -- version, as 0014's did. Anything else, or an error, the way below, which raises it.
    -- 0021: as in rl_allow, the algorithm's number once, rl.tenants through its index.
    v_alg := rl._alg($2);
    WITH e AS MATERIALIZED (
             SELECT o.now, o.algorithm, o.t, o.x, o.y, o.log, o.l AS sl, o.w AS sw, o.r AS sr,
                    rl._eval(v_alg, $3, $4, $6, o.algorithm, o.t, o.x, o.y, o.log, o.l, o.w, o.r, o.now, $5, true) AS r
               FROM (SELECT rl._request_now($8) AS now, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r
                       FROM rl.state s
                      WHERE s.key = $1 AND s.name = $7 AND (SELECT tn.role FROM rl.tenants tn ORDER BY tn.role LIMIT 1) IS NULL
                        AND octet_length($1) BETWEEN 1 AND 256 AND octet_length($7) BETWEEN 1 AND 256
                        AND $5 > 0) o),
         u AS (UPDATE rl.state s
                  SET (algorithm, t, x, y, log, l, w, r, expires_at) =
                      (SELECT (v.r).algorithm, (v.r).t, (v.r).x, (v.r).y, (v.r).log, (v.r).l, (v.r).w, (v.r).r, rl._expires_at(e.now, (v.r).reset_after)
                         FROM (SELECT CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = (e.algorithm, e.t, e.x, e.y, e.log, e.sl, e.sw, e.sr)
                                           THEN e.r
                                           ELSE rl._eval(v_alg, $3, $4, $6, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, $5, true)
                                      END AS r
                               OFFSET 0) v)
                 FROM e
                WHERE s.key = $1 AND s.name = $7
                  AND CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = (e.algorithm, e.t, e.x, e.y, e.log, e.sl, e.sw, e.sr)
                           THEN (e.r).err = 0 AND (e.r).allowed
                           ELSE (SELECT ev.err = 0 AND ev.allowed
                                   FROM rl._eval(v_alg, $3, $4, $6, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, $5, false) AS ev)
                      END
            RETURNING e.now, s.t, s.x,
                      (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log, (e.r).l, (e.r).w, (e.r).r) AS same,
                      CASE WHEN (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log, (e.r).l, (e.r).w, (e.r).r)
                           THEN e.r
                           ELSE rl._eval(v_alg, $3, $4, $6, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, 0, false)
                      END AS r)
    SELECT true, (u.r).lim, (u.r).remaining, (u.r).reset_after, 0::bigint,
           CASE WHEN u.same THEN (u.r).delay
                WHEN v_alg = 5 AND u.x - $5 * $4 > 0
                THEN rl._ceil_div(u.x - $5 * $4, CASE WHEN $6 = 0 THEN $3 ELSE $6 END) + u.t - u.now
                ELSE 0 END, u.now, (u.r).next_after
      INTO res
      FROM u;
    IF FOUND THEN
        RETURN res;
    END IF;
    v_now := rl._request_now($8);
    p := rl._single_problem($1, $7, $2, $3, $4, false, NULL, $6, $5, v_now, false);
    IF p.code IS NOT NULL THEN
        -- Raised here, not by a helper: the error's CONTEXT is one line, this function's.
        IF p.detail IS NULL AND p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
        ELSIF p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
        ELSIF p.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
    END IF;
    RETURN rl._take1($1, $7, v_alg, $3, $4, $6, $5, v_now, true);
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
    v_alg integer;
    v_w bigint;
    v_now bigint;
    p record;
    res rl.decision;
BEGIN
    -- 0014: the common call (its row there, rl.tenants empty, valid input) in one statement;
    -- anything else, or an error, the way below, which raises it. 0021: as in rl_allow, the
    -- algorithm's number (and the window) once, rl.tenants through its index.
    v_alg := rl._alg($2);
    v_w := rl._interval_us($4);
    WITH d AS MATERIALIZED (
             SELECT rl._request_now($8) AS now, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r
               FROM rl.state s
              WHERE s.key = $1 AND s.name = $7 AND (SELECT tn.role FROM rl.tenants tn ORDER BY tn.role LIMIT 1) IS NULL
                AND octet_length($1) BETWEEN 1 AND 256 AND octet_length($7) BETWEEN 1 AND 256),
         e AS MATERIALIZED (
             SELECT d.now, rl._eval(v_alg, $3, v_w, $6, d.algorithm, d.t, d.x, d.y, d.log, d.l, d.w, d.r, d.now, $5, false) AS r
               FROM d)
    SELECT (d.r).allowed, (d.r).lim, (d.r).remaining, (d.r).reset_after, (d.r).retry_after, (d.r).delay, d.now,
           (d.r).next_after
      INTO res FROM e d WHERE (d.r).err = 0;
    IF FOUND THEN
        RETURN res;
    END IF;
    v_now := rl._request_now($8);
    p := rl._single_problem($1, $7, $2, $3, v_w, true, $4, $6, $5, v_now, false);
    IF p.code IS NOT NULL THEN
        -- Raised here, not by a helper: the error's CONTEXT is one line, this function's.
        IF p.detail IS NULL AND p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
        ELSIF p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
        ELSIF p.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
    END IF;
    RETURN rl._take1($1, $7, v_alg, $3, v_w, $6, $5, v_now, false);
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
    v_alg integer;
    v_now bigint;
    p record;
    res rl.decision;
BEGIN
    -- 0014: the common call (its row there, rl.tenants empty, valid input) in one statement;
    -- anything else, or an error, the way below, which raises it. 0021: as in rl_allow, the
    -- algorithm's number (and the window) once, rl.tenants through its index.
    v_alg := rl._alg($2);
    WITH d AS MATERIALIZED (
             SELECT rl._request_now($8) AS now, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r
               FROM rl.state s
              WHERE s.key = $1 AND s.name = $7 AND (SELECT tn.role FROM rl.tenants tn ORDER BY tn.role LIMIT 1) IS NULL
                AND octet_length($1) BETWEEN 1 AND 256 AND octet_length($7) BETWEEN 1 AND 256),
         e AS MATERIALIZED (
             SELECT d.now, rl._eval(v_alg, $3, $4, $6, d.algorithm, d.t, d.x, d.y, d.log, d.l, d.w, d.r, d.now, $5, false) AS r
               FROM d)
    SELECT (d.r).allowed, (d.r).lim, (d.r).remaining, (d.r).reset_after, (d.r).retry_after, (d.r).delay, d.now,
           (d.r).next_after
      INTO res FROM e d WHERE (d.r).err = 0;
    IF FOUND THEN
        RETURN res;
    END IF;
    v_now := rl._request_now($8);
    p := rl._single_problem($1, $7, $2, $3, $4, false, NULL, $6, $5, v_now, false);
    IF p.code IS NOT NULL THEN
        -- Raised here, not by a helper: the error's CONTEXT is one line, this function's.
        IF p.detail IS NULL AND p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
        ELSIF p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
        ELSIF p.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
    END IF;
    RETURN rl._take1($1, $7, v_alg, $3, $4, $6, $5, v_now, false);
END
$function$;

CREATE FUNCTION rl.rl_settle(key text, algorithm text, lim bigint, win interval, delta bigint, rate bigint DEFAULT 0, name text DEFAULT 'default'::text, now_us bigint DEFAULT NULL::bigint)
 RETURNS rl.decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    w     bigint;
    v_now bigint;
    p     record;
    r     rl._eval_result;
BEGIN
    v_now := coalesce(rl._request_now($8), rl._now());
    w := rl._interval_us($4);
    p := rl._single_problem($1, $7, $2, $3, w, true, $4, $6, $5, v_now, true);
    IF p.code IS NOT NULL THEN
        -- Raised here, not by a helper: the error's CONTEXT is one line, this function's.
        IF p.detail IS NULL AND p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
        ELSIF p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
        ELSIF p.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
    END IF;
    r := rl._settle1($1, $7, rl._alg($2), $3, w, $6, $5, v_now);
    RETURN ROW(r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, v_now, r.next_after)::rl.decision;
END
$function$;
COMMENT ON FUNCTION rl.rl_settle(text,text,bigint,interval,bigint,bigint,text,bigint) IS 'Settles delta units on the limit name of key (core.Settle): positive, a debt beyond the limit; negative, a refund never below nothing used. The decision of a call of cost 0 afterwards. See sql/README.md.';

CREATE FUNCTION rl.rl_settle_us(key text, algorithm text, lim bigint, window_us bigint, delta bigint, rate bigint DEFAULT 0, name text DEFAULT 'default'::text, now_us bigint DEFAULT NULL::bigint)
 RETURNS rl.decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    v_now bigint;
    p     record;
    r     rl._eval_result;
BEGIN
    v_now := coalesce(rl._request_now($8), rl._now());
    p := rl._single_problem($1, $7, $2, $3, $4, false, NULL, $6, $5, v_now, true);
    IF p.code IS NOT NULL THEN
        -- Raised here, not by a helper: the error's CONTEXT is one line, this function's.
        IF p.detail IS NULL AND p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
        ELSIF p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
        ELSIF p.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
    END IF;
    r := rl._settle1($1, $7, rl._alg($2), $3, $4, $6, $5, v_now);
    RETURN ROW(r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, v_now, r.next_after)::rl.decision;
END
$function$;
COMMENT ON FUNCTION rl.rl_settle_us(text,text,bigint,bigint,bigint,bigint,text,bigint) IS 'rl_settle with the window in µs';
