-- 0015 (after 0014): rl._eval once per decision on one limit.
--
-- * A take on one limit (rl_allow, rl_allow_us, rl_decide_multi and through
--   it rl_allow_multi and pgstore's SQL path) stays one UPDATE of the row,
--   the shape of the one-statement upsert, but evaluates rl._eval once where
--   0014's evaluated it three times (to admit in WHERE, for the new state in
--   SET, and for the decision from the new row). The statement reads the
--   row first, as its snapshot has it, and decides on it (rl._eval, once);
--   the UPDATE then writes that decision's state if the row it locks is
--   still that row (the same words: a cheap comparison), and the decision is
--   returned as it is. If another decision wrote the row between the
--   snapshot and the lock (a hot key: the UPDATE waited for the row, and
--   PostgreSQL re-evaluates it on the latest version), the UPDATE decides
--   again on that version, as 0014's did, in its WHERE and SET clauses and
--   for the decision. A denial, a missing row, a tenant, a malformed call or
--   an error still update nothing and go 0011's way.
--
-- * rl_decide_batch keeps its loop over the requests: one statement
--   deciding a batch (in rounds, a recursive query) was tried and measured
--   slower than the loop (BENCHMARKS.md, "Migrations 15 and 16").
--
-- bench/plprofile.sh measures the CPU of a call (RL_VERSION=14 for the
-- version before); TestEvalOnce counts the calls of rl._eval.
SET LOCAL search_path = pg_catalog, pg_temp;

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
                ELSE 0 END, u.now
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
                ELSE 0 END, u.now
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
                    ELSE 0 END, true, u.now
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
               (e.r).delay, true, e.now
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
                                                            delay, algorithm, t, x, y, log)
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
                                u.retry_after, u.delay, u.o = best, v_now
                           FROM unnest(rs) WITH ORDINALITY AS u(err, allowed, lim, remaining, reset_after, retry_after,
                                                                delay, algorithm, t, x, y, log, o);
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
                        v_now)::rl.multi_decision;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM rl._take_many($1, $2, $3, $4, $5, $6, $7, v_now, p_take);
END
$function$;
