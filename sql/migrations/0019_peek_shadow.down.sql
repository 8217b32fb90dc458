-- 0019 down: the functions as 0018 left them (their text copied from
-- sql/rl.sql at version 18): "shadow" read by rl_allow_multi alone, ignored
-- by the peek and the settles; a settle's debt too large for a state
-- refused (RL006); rl._parse_shadows, rl._settle_shadow and
-- rl._settle_many_shadow dropped; then rl._eval_result without
-- settle_caps. States are unchanged: a state written at 19 (a capped debt
-- included) is a state 18 reads.
SET LOCAL search_path = pg_catalog, pg_temp;

DROP FUNCTION rl._settle_many_shadow(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint, boolean[]);
DROP FUNCTION rl._settle_shadow(integer[], bigint[], bigint[], bigint[], rl.state_words[], bigint, bigint, boolean[]);

CREATE OR REPLACE FUNCTION rl._eval(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_l bigint, s_w bigint, s_r bigint, p_now bigint, p_cost bigint, p_take boolean)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    r     rl._eval_result;
    exact boolean;
    c     rl.state_words;
BEGIN
    IF p_alg IS NULL OR p_lim IS NULL OR p_win IS NULL OR p_rate IS NULL OR p_now IS NULL OR p_cost IS NULL
            OR s_alg IS NULL OR s_t IS NULL OR s_x IS NULL OR s_y IS NULL OR s_log IS NULL
            OR s_l IS NULL OR s_w IS NULL OR s_r IS NULL THEN
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
        s_l := coalesce(s_l, 0);
        s_w := coalesce(s_w, 0);
        s_r := coalesce(s_r, 0);
    END IF;
    -- l.check(), checkCall, checkState, in the core's order.
    r.err := coalesce(nullif(rl._limit_error(p_alg, p_lim, p_win, p_rate), 0),
                      nullif(rl._call_error(p_now, p_cost), 0),
                      rl._state_error(s_alg, s_t, s_x, s_y, s_log, s_l, s_w, s_r));
    IF r.err <> 0 THEN
        RETURN r;
    END IF;
    IF s_alg = 3 AND array_lower(s_log, 1) <> 1 THEN
        s_log := array(SELECT unnest(s_log)); -- an array starting at another index than 1
    END IF;
    -- n = *s: a call that admits nothing returns the state unchanged.
    r := ROW(0, false, p_lim, 0, 0, 0, 0, s_alg, s_t, s_x, s_y, s_log, 0, s_l, s_w, s_r)::rl._eval_result;
    -- core read: exact when written under this limit's own parameters (the
    -- recorded rate is the effective one, 0 for the window algorithms).
    exact := s_alg = p_alg AND s_w = p_win AND s_l = p_lim
             AND s_r = CASE WHEN p_alg <= 3 THEN 0 WHEN p_rate = 0 THEN p_lim ELSE p_rate END;
    -- Recorded under other parameters and converted (core converts: a
    -- window algorithm reads its own state as it is): the carried state,
    -- within the new limit, reads as exact.
    IF NOT exact AND s_w <> 0 AND (s_alg <> p_alg OR s_alg > 3) THEN
        c := rl._carry(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, s_log, s_w, s_r);
        s_alg := c.algorithm; s_t := c.t; s_x := c.x; s_y := c.y; s_log := c.log;
        exact := true;
    END IF;
    CASE p_alg
    WHEN 1 THEN
        RETURN rl._fixed_window(p_lim, p_win, s_alg, s_t, s_x, p_now, p_cost, p_take, r);
    WHEN 2 THEN
        RETURN rl._sliding_window(p_lim, p_win, s_alg, s_t, s_x, s_y, exact, p_now, p_cost, p_take, r);
    WHEN 3 THEN
        IF s_alg = 3 AND s_x <> 0 THEN -- carried over, not yet written
            RETURN rl._sliding_log_carried(p_lim, p_win, s_t, s_x, p_now, p_cost, p_take, r);
        END IF;
        RETURN rl._sliding_log(p_lim, p_win, s_alg, s_log, p_now, p_cost, p_take, r);
    WHEN 6 THEN
        RETURN rl._gcra(p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, exact, p_now, p_cost, p_take, r);
    ELSE
        RETURN rl._bucket(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, exact, p_now, p_cost, p_take, r);
    END CASE;
END
$function$;

CREATE OR REPLACE FUNCTION rl._settle_fixed(w bigint, s_alg integer, s_t bigint, s_x bigint, now bigint, delta bigint)
 RETURNS rl.state_words
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    start bigint := now - now % w;
    cnt   bigint := 0;
BEGIN
    IF s_alg = 1 AND s_t >= start THEN
        start := s_t - s_t % w;
        cnt := s_x;
    END IF;
    cnt := cnt + delta;
    IF cnt > rl._max_state_value() THEN
        RETURN NULL;
    END IF;
    IF cnt > 0 THEN
        RETURN ROW(1, start, cnt, 0, '{}', 0, 0, 0)::rl.state_words;
    END IF;
    RETURN ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words;
END
$function$;

CREATE OR REPLACE FUNCTION rl._settle_sliding(lim bigint, w bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, exact boolean, now bigint, delta bigint)
 RETURNS rl.state_words
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    start bigint := now - now % w;
    st    bigint;
    curr  bigint := 0;
    prev  bigint := 0;
BEGIN
    IF s_alg = 2 THEN
        st := s_t - s_t % w;
        IF st >= start THEN
            start := st; curr := s_x; prev := s_y;
        ELSIF st + w = start THEN
            prev := s_x;
        END IF;
    END IF;
    IF NOT exact THEN
        curr := least(curr, lim);
        prev := least(prev, lim);
    END IF;
    curr := curr + delta;
    IF curr > rl._max_state_value() THEN
        RETURN NULL;
    END IF;
    IF curr < 0 THEN
        prev := greatest(0, prev + curr);
        curr := 0;
    END IF;
    -- A debt is kept while the counts times the window stay within
    -- MaxUnits (core settleSliding): beyond, ErrCost.
    IF curr > rl._max_units() / w OR prev > rl._max_units() / w - curr THEN
        RETURN NULL;
    END IF;
    IF curr > 0 OR prev > 0 THEN
        RETURN ROW(2, start, curr, prev, '{}', 0, 0, 0)::rl.state_words;
    END IF;
    RETURN ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words;
END
$function$;

CREATE OR REPLACE FUNCTION rl._settle_level(p_alg integer, lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, exact boolean, now bigint, delta bigint)
 RETURNS rl.state_words
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    capacity bigint := lim * w;
    ne       bigint := now;
    lvl      bigint := 0;
    dt       bigint;
    el       bigint;
    q        bigint;
BEGIN
    IF rate = 0 THEN
        rate := lim;
    END IF;
    IF s_alg = p_alg THEN
        IF p_alg = 6 THEN
            IF s_y > 0 AND NOT exact THEN
                dt := s_t - s_y;
                IF dt > capacity / rate THEN
                    s_t := s_y + capacity / rate; s_x := capacity % rate;
                ELSIF dt * rate + s_x > capacity THEN
                    s_t := s_y + capacity / rate; s_x := capacity % rate;
                END IF;
            END IF;
            ne := greatest(now, s_y);
            IF s_t >= ne THEN
                lvl := least((s_t - ne)::numeric * rate + s_x, rl._max_state_value())::bigint;
            ELSE
                dt := ne - s_t;
                IF s_x > 0 THEN
                    IF dt < rl._ceil_div(s_x, rate) THEN
                        lvl := s_x - dt * rate;
                    END IF;
                END IF;
            END IF;
        ELSE
            ne := greatest(now, s_t);
            lvl := s_x;
            IF NOT exact THEN
                lvl := least(lvl, capacity);
            END IF;
            el := ne - s_t;
            IF el > 0 AND lvl > 0 THEN
                IF el >= rl._ceil_div(lvl, rate) THEN
                    lvl := 0;
                ELSE
                    lvl := lvl - el * rate;
                END IF;
            END IF;
        END IF;
    END IF;
    IF delta >= 0 THEN
        IF delta::numeric * w > rl._max_state_value() - lvl THEN
            RETURN NULL;
        END IF;
        lvl := lvl + delta * w;
    ELSIF (-delta)::numeric * w >= lvl THEN
        lvl := 0;
    ELSE
        lvl := lvl + delta * w;
    END IF;
    IF lvl = 0 THEN
        RETURN ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words;
    END IF;
    IF p_alg = 6 THEN
        q := lvl / rate;
        IF q > rl._max_state_value() - ne THEN -- its arrival time would not fit a state
            RETURN NULL;
        END IF;
        RETURN ROW(6, ne + q, lvl - q * rate, ne, '{}', 0, 0, 0)::rl.state_words;
    END IF;
    RETURN ROW(p_alg, ne, lvl, 0, '{}', 0, 0, 0)::rl.state_words;
END
$function$;

CREATE OR REPLACE FUNCTION rl._settle(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_l bigint, s_w bigint, s_r bigint, p_now bigint, p_delta bigint)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    r     rl._eval_result;
    exact boolean;
    srate bigint;
    c     rl.state_words;
    n     rl.state_words;
BEGIN
    IF p_alg IS NULL OR p_lim IS NULL OR p_win IS NULL OR p_rate IS NULL OR p_now IS NULL OR p_delta IS NULL
            OR s_alg IS NULL OR s_t IS NULL OR s_x IS NULL OR s_y IS NULL OR s_log IS NULL
            OR s_l IS NULL OR s_w IS NULL OR s_r IS NULL THEN
        p_alg := coalesce(p_alg, 0);
        p_lim := coalesce(p_lim, 0);
        p_win := coalesce(p_win, 0);
        p_rate := coalesce(p_rate, -1);
        p_now := coalesce(p_now, -1);
        p_delta := coalesce(p_delta, rl._max_cost() + 1);
        s_alg := coalesce(s_alg, 0);
        s_t := coalesce(s_t, 0);
        s_x := coalesce(s_x, 0);
        s_y := coalesce(s_y, 0);
        s_log := coalesce(s_log, '{}');
        s_l := coalesce(s_l, 0);
        s_w := coalesce(s_w, 0);
        s_r := coalesce(s_r, 0);
    END IF;
    -- The limit, now, the delta, then the state, in the core's order.
    r.err := coalesce(nullif(rl._limit_error(p_alg, p_lim, p_win, p_rate), 0),
                      nullif(rl._call_error(p_now, 0), 0),
                      CASE WHEN p_delta NOT BETWEEN -rl._max_cost() AND rl._max_cost() THEN 6 END,
                      rl._state_error(s_alg, s_t, s_x, s_y, s_log, s_l, s_w, s_r));
    IF r.err <> 0 THEN
        RETURN r;
    END IF;
    IF p_delta = 0 THEN -- nothing to correct: the state stays as it is
        RETURN rl._eval(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, s_log, s_l, s_w, s_r, p_now, 0, false);
    END IF;
    IF s_alg = 3 AND array_lower(s_log, 1) <> 1 THEN
        s_log := array(SELECT unnest(s_log));
    END IF;
    srate := CASE WHEN p_alg <= 3 THEN 0 WHEN p_rate = 0 THEN p_lim ELSE p_rate END;
    exact := s_alg = p_alg AND s_w = p_win AND s_l = p_lim AND s_r = srate;
    IF NOT exact AND s_w <> 0 AND (s_alg <> p_alg OR s_alg > 3) THEN
        c := rl._carry(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, s_log, s_w, s_r);
        s_alg := c.algorithm; s_t := c.t; s_x := c.x; s_y := c.y; s_log := c.log;
        exact := true;
    END IF;
    CASE p_alg
    WHEN 1 THEN
        n := rl._settle_fixed(p_win, s_alg, s_t, s_x, p_now, p_delta);
    WHEN 2 THEN
        n := rl._settle_sliding(p_lim, p_win, s_alg, s_t, s_x, s_y, exact, p_now, p_delta);
    WHEN 3 THEN
        n := rl._settle_log(p_lim, p_win, s_alg, s_t, s_x, s_log, p_now, p_delta);
    ELSE
        n := rl._settle_level(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, exact, p_now, p_delta);
    END CASE;
    IF n IS NULL THEN
        r.err := 6;
        RETURN r;
    END IF;
    IF n.algorithm <> 0 THEN
        n.l := p_lim; n.w := p_win; n.r := srate;
    END IF;
    RETURN rl._eval(p_alg, p_lim, p_win, p_rate, n.algorithm, n.t, n.x, n.y, n.log, n.l, n.w, n.r, p_now, 0, false);
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
BEGIN
    -- 0018: shadow limits (store/shadow.go): a call with a shadow flag set
    -- goes the way of 0011 with rl._take_many_shadow, under the same trust
    -- rules; shadows NULL or all false is the call it was.
    IF true = ANY ($10) THEN
        IF cardinality($10) IS DISTINCT FROM n OR array_ndims($10) <> 1 OR array_lower($10, 1) <> 1 THEN
            PERFORM rl._raise(10, 'limit index 0: shadows needs one flag per limit');
        END IF;
        PERFORM rl._check_tenant_key(p_key, NULL);
        v_now := rl._request_now(p_now);
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
                          WHERE s.key = p_key AND s.name = p_names[1] AND NOT EXISTS (SELECT FROM rl.tenants)
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
                  WHERE s.key = p_key AND s.name = p_names[1] AND NOT EXISTS (SELECT FROM rl.tenants)
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
        END;
        IF m = n THEN
            RETURN QUERY SELECT (u.o - 1)::integer, p_names[u.o], u.allowed, u.lim, u.remaining, u.reset_after,
                                u.retry_after, u.delay, u.o = best, v_now, u.next_after
                           FROM unnest(rs) WITH ORDINALITY AS u(err, allowed, lim, remaining, reset_after, retry_after,
                                                                delay, algorithm, t, x, y, log, next_after, sl, sw, sr, o);
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

CREATE OR REPLACE FUNCTION rl.rl_decide_batch(keys text[], names text[], algorithms integer[], lims bigint[], windows_us bigint[], rates bigint[], costs bigint[] DEFAULT NULL::bigint[], limit_counts integer[] DEFAULT NULL::integer[], now_us bigint[] DEFAULT NULL::bigint[], take boolean[] DEFAULT NULL::boolean[], settle boolean[] DEFAULT NULL::boolean[], shadows boolean[] DEFAULT NULL::boolean[])
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
    p_sets   ALIAS FOR $11;
    p_shs    ALIAS FOR $12;
    wr       boolean[];
    shd      boolean;
    nreq     integer := coalesce(cardinality(p_keys), 0);
    nlim     integer := coalesce(cardinality(p_names), 0);
    firsts   integer[];
    cnts     integer[];
    ecode    text[];
    emsg     text[];
    nows     bigint[];
    takes    boolean[];
    sets     boolean[];
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
            OR (p_takes IS NOT NULL AND (cardinality(p_takes) <> nreq OR (nreq > 0 AND array_lower(p_takes, 1) <> 1)))
            OR (p_sets IS NOT NULL AND (cardinality(p_sets) <> nreq OR (nreq > 0 AND array_lower(p_sets, 1) <> 1)))
            OR (p_shs IS NOT NULL AND (cardinality(p_shs) <> nlim OR (nlim > 0 AND array_lower(p_shs, 1) <> 1))) THEN
        PERFORM rl._raise(10, 'rl_decide_batch: keys, costs, now_us, take and settle need one element per request, '
                              'names, algorithms, lims, windows_us, rates and shadows one per limit');
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
    -- loop: each statement in one costs per request. A settle request
    -- (settle[q]) settles its cost, a delta, on its limits (core.SettleAll)
    -- and writes its rows, as a take does.
    sets := array_fill(false, ARRAY[nreq]);
    IF p_counts IS NULL AND pfx IS NULL AND p_nows IS NULL AND p_takes IS NULL AND p_sets IS NULL
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
        sets[q] := coalesce(p_sets[q], false);
        FOR i IN firsts[q] .. firsts[q] + c - 1 LOOP
            limkey[i] := k;
            limtake[i] := takes[q] OR sets[q];
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
                              ELSE coalesce((SELECT ROW(s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r)::rl.state_words
                                               FROM rl.state s WHERE s.key = u.k AND s.name = u.n),
                                            ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words) END ORDER BY u.o),
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
            -- rl._all decides it); core.SettleAll is core.Settle.
            st := sw[slot[f]];
            IF sets[q] THEN
                r := rl._settle(p_algs[f], p_lims[f], p_wins[f], p_rates[f], st.algorithm, st.t, st.x, st.y, st.log,
                                st.l, st.w, st.r, p_now, p_cost);
            ELSE
                r := rl._eval(p_algs[f], p_lims[f], p_wins[f], p_rates[f], st.algorithm, st.t, st.x, st.y, st.log,
                              st.l, st.w, st.r, p_now, p_cost, tk);
            END IF;
            IF r.err <> 0 THEN
                RETURN NEXT ROW(q - 1, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, false, p_now,
                                'RL0' || lpad(r.err::text, 2, '0'),
                                rl._explain(r.err, p_algs[f], p_lims[f], p_wins[f], p_rates[f], p_now, p_cost,
                                            st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, sets[q])
                                || format(' (limit index 0, name %L)', p_names[f]), NULL)::rl.batch_decision;
                CONTINUE;
            END IF;
            IF (sets[q] AND p_cost <> 0) OR (NOT sets[q] AND tk AND r.allowed AND p_cost > 0) THEN
                sw[slot[f]] := ROW(r.algorithm, r.t, r.x, r.y, r.log, r.l, r.w, r.r)::rl.state_words;
                sexp[slot[f]] := rl._expires_at(p_now, r.reset_after);
                dirty[slot[f]] := true;
                any_dirty := true;
            END IF;
            RETURN NEXT ROW(q - 1, 0, p_names[f], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after,
                            r.delay, true, p_now, NULL, NULL, r.next_after)::rl.batch_decision;
            CONTINUE;
        END IF;
        -- Several limits: core.TakeAll / core.PeekAll (rl._all), or
        -- core.SettleAll (rl._settle on each). Their checks first, in their
        -- order, so that an invalid request gets its error here instead of
        -- rl._all raising it for the whole call.
        ss := ARRAY(SELECT sw[slot[i]] FROM generate_series(f, f + c - 1) AS i ORDER BY i);
        bad := 0;
        FOR i IN 1 .. c LOOP
            st := ss[i];
            j := f + i - 1;
            IF sets[q] THEN
                r := rl._settle(p_algs[j], p_lims[j], p_wins[j], p_rates[j], st.algorithm, st.t, st.x, st.y, st.log,
                                st.l, st.w, st.r, p_now, p_cost);
                rs[i] := r;
                bad := r.err;
            ELSE
                bad := coalesce(nullif(rl._limit_error(p_algs[j], p_lims[j], p_wins[j], p_rates[j]), 0),
                                nullif(rl._call_error(p_now, p_cost), 0),
                                rl._state_error(coalesce(st.algorithm, 0), coalesce(st.t, 0), coalesce(st.x, 0),
                                                coalesce(st.y, 0), coalesce(st.log, '{}'), coalesce(st.l, 0),
                                                coalesce(st.w, 0), coalesce(st.r, 0)));
            END IF;
            IF bad <> 0 THEN
                RETURN NEXT ROW(q - 1, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, false, p_now,
                                'RL0' || lpad(bad::text, 2, '0'),
                                rl._explain(bad, p_algs[j], p_lims[j], p_wins[j], p_rates[j], p_now, p_cost,
                                            st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, sets[q])
                                || format(' (limit index %s, name %L)', i - 1, p_names[j]), NULL)::rl.batch_decision;
                EXIT;
            END IF;
        END LOOP;
        CONTINUE WHEN bad <> 0;
        -- 0018: a take or peek with a shadow flag set is decided as
        -- store.Policy.Decide decides shadow limits (rl._all_shadow): only
        -- the rows it charges are written.
        shd := NOT sets[q] AND p_shs IS NOT NULL AND true = ANY (p_shs[f : f + c - 1]);
        IF sets[q] THEN
            best := 1;
        ELSIF shd THEN
            SELECT a.rs, a.best, a.wr INTO rs, best, wr
              FROM rl._all_shadow(p_algs[f : f + c - 1], p_lims[f : f + c - 1], p_wins[f : f + c - 1], p_rates[f : f + c - 1],
                                  ss, p_now, p_cost, tk, p_names[f : f + c - 1], p_shs[f : f + c - 1]) a;
            FOR i IN 1 .. c LOOP
                CONTINUE WHEN NOT wr[i];
                r := rs[i];
                sw[slot[f + i - 1]] := ROW(r.algorithm, r.t, r.x, r.y, r.log, r.l, r.w, r.r)::rl.state_words;
                sexp[slot[f + i - 1]] := rl._expires_at(p_now, r.reset_after);
                dirty[slot[f + i - 1]] := true;
                any_dirty := true;
            END LOOP;
        ELSE
            SELECT a.rs, a.best INTO rs, best
              FROM rl._all(p_algs[f : f + c - 1], p_lims[f : f + c - 1], p_wins[f : f + c - 1], p_rates[f : f + c - 1],
                           ss, p_now, p_cost, tk, p_names[f : f + c - 1]) a;
        END IF;
        IF (sets[q] AND p_cost <> 0) OR (NOT sets[q] AND NOT shd AND tk AND p_cost > 0 AND (rs[best]).allowed) THEN
            FOR i IN 1 .. c LOOP
                r := rs[i];
                sw[slot[f + i - 1]] := ROW(r.algorithm, r.t, r.x, r.y, r.log, r.l, r.w, r.r)::rl.state_words;
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
           SET algorithm = u.algorithm, t = u.t, x = u.x, y = u.y, log = u.log, l = u.ul, w = u.uw, r = u.ur,
               expires_at = u.e
          FROM unnest(sk, sn, sexp, dirty, sw) AS u(k, n, e, d, algorithm, t, x, y, log, ul, uw, ur)
         WHERE u.d AND s.key = u.k AND s.name = u.n;
    END IF;
    IF true = ANY (sc) THEN
        DELETE FROM rl.state s
         USING unnest(sk, sn, sc, dirty) AS u(k, n, c, d)
         WHERE u.c AND NOT u.d AND s.key = u.k AND s.name = u.n;
    END IF;
END
$function$;


CREATE OR REPLACE FUNCTION rl.rl_allow_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL::bigint)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    p record;
    sh  boolean[];
    bad bigint;
BEGIN
    p := rl._parse_limits($2);
    -- 0018: "shadow": true makes a limit a shadow limit; false, null or
    -- missing, an enforced one.
    SELECT array_agg(CASE jsonb_typeof(u.e -> 'shadow') WHEN 'boolean' THEN (u.e ->> 'shadow')::boolean
                                                        WHEN 'null' THEN false END ORDER BY u.o),
           min(u.o) FILTER (WHERE u.e ? 'shadow' AND jsonb_typeof(u.e -> 'shadow') NOT IN ('boolean', 'null'))
      INTO sh, bad
      FROM jsonb_array_elements($2) WITH ORDINALITY AS u(e, o);
    IF bad IS NOT NULL THEN
        PERFORM rl._raise(10, format('limits[%s].shadow must be true or false', bad - 1));
    END IF;
    IF true = ANY (sh) THEN
        RETURN QUERY SELECT * FROM rl.rl_decide_multi($1, p.names, p.algs, p.lims, p.wins, p.rates, $3, $4, true,
                                                      ARRAY(SELECT coalesce(v, false) FROM unnest(sh) AS v));
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM rl.rl_decide_multi($1, p.names, p.algs, p.lims, p.wins, p.rates, $3, $4, true);
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_peek_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL::bigint)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    p record;
BEGIN
    p := rl._parse_limits($2);
    RETURN QUERY SELECT * FROM rl.rl_decide_multi($1, p.names, p.algs, p.lims, p.wins, p.rates, $3, $4, false);
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_settle_multi(key text, limits jsonb, delta bigint, now_us bigint DEFAULT NULL::bigint)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    p record;
BEGIN
    p := rl._parse_limits($2);
    RETURN QUERY SELECT * FROM rl.rl_settle_decide($1, p.names, p.algs, p.lims, p.wins, p.rates, $3, $4);
END
$function$;

COMMENT ON FUNCTION rl.rl_settle_multi(text,jsonb,bigint,bigint) IS 'Settles delta units on several limits of key, all or nothing (core.SettleAll), given as rl_allow_multi takes them; one row per limit, the first deciding. See sql/README.md.';

DROP FUNCTION rl._parse_shadows(jsonb);

ALTER TYPE rl._eval_result DROP ATTRIBUTE settle_caps;
