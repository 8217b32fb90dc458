-- The sliding log (core.SlidingLog): the time of every admitted unit
-- within the window. Its functions have the names and signatures the
-- generated dispatch (algorithms.sql) calls, rl._<name>_<role>
-- (ARCHITECTURE.md, "A new algorithm").

-- rl._log_error is the sliding-log part of core checkState. SQL arrays can be
-- multidimensional or hold NULLs, Go slices cannot: both are corrupt.
CREATE FUNCTION rl._log_error(s_log bigint[]) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
DECLARE
    e    bigint;
    prev bigint := 0;
BEGIN
    IF cardinality(s_log) = 0 THEN
        RETURN 0;
    END IF;
    IF cardinality(s_log) > rl._max_log_limit() OR array_ndims(s_log) <> 1
            OR array_position(s_log, NULL) IS NOT NULL THEN
        RETURN 8;
    END IF;
    FOREACH e IN ARRAY s_log LOOP
        IF e < prev OR e > rl._max_state_value() THEN
            RETURN 8;
        END IF;
        prev := e;
    END LOOP;
    RETURN 0;
END
$fn$;

-- rl._sliding_log_state_error: its part of core checkState
-- (rl._state_error): a log alone, sorted.
CREATE FUNCTION rl._sliding_log_state_error(s_t bigint, s_x bigint, s_y bigint, s_log bigint[]) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN s_t <> 0 OR s_x <> 0 OR s_y <> 0 THEN 8 ELSE rl._log_error(s_log) END;

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
                r.l := lim; r.w := w; r.r := 0;
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

-- rl._sliding_log_carried is core slidingLogCarried: a sliding log carried
-- over from a state written under other parameters (rl._carry), held as
-- units entries at time a until an admission writes them, decided as
-- rl._sliding_log decides a log of those entries.
CREATE FUNCTION rl._sliding_log_carried(lim bigint, w bigint, a bigint, units bigint, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    ne     bigint := greatest(now, a);
    cnt    bigint := units;
    live   bigint;
    newest bigint;
    j      bigint;
BEGIN
    IF a <= ne - w THEN
        cnt := 0;
    END IF;
    live := cnt; -- carried entries still live, all at a
    newest := ne;
    IF cnt > 0 THEN
        newest := a;
    END IF;
    IF cost = 0 OR cnt + cost <= lim THEN
        r.allowed := true;
        IF cost > 0 THEN
            -- The admission whose expiry brings one more unit back: a while
            -- it is a carried entry, else ne.
            j := greatest(0, cnt + cost - lim);
            r.next_after := CASE WHEN j < live THEN a ELSE ne END + w - now;
            IF p_take THEN
                r.algorithm := 3; r.t := 0; r.x := 0; r.y := 0;
                r.log := array_fill(a, ARRAY[live::integer]) || array_fill(ne, ARRAY[cost::integer]);
                r.l := lim; r.w := w; r.r := 0;
            END IF;
            cnt := cnt + cost;
            newest := ne;
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := a + w - now; -- every live entry is at a
    END IF;
    r.remaining := greatest(0, lim - cnt);
    IF cnt > 0 THEN
        r.reset_after := newest + w - now;
        IF r.next_after = 0 THEN
            j := greatest(0, cnt - lim);
            r.next_after := CASE WHEN j < live THEN a ELSE ne END + w - now;
        END IF;
    END IF;
    RETURN r;
END
$function$;

-- rl._sliding_log_step: its decision (core decide): of a log carried over
-- and not yet written (s_x set, see rl._carry), or of the log. An SQL
-- function of one expression, which the planner inlines into rl._eval: a
-- decision calls one PL/pgSQL function, either.
CREATE FUNCTION rl._sliding_log_step(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], exact boolean, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN s_alg = 3 AND s_x <> 0 THEN rl._sliding_log_carried(lim, w, s_t, s_x, now, cost, p_take, r)
                ELSE rl._sliding_log(lim, w, s_alg, s_log, now, cost, p_take, r) END;

-- rl._sliding_log_settle: its settle (core settleLog): live entries kept, the oldest first,
-- then entries at now (or the newest entry's time, if later) for a
-- positive delta, at most up to the limit; a log carried over (s_x set,
-- see rl._carry) is written for the first time.
CREATE FUNCTION rl._sliding_log_settle(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], exact boolean, now bigint, delta bigint)
 RETURNS rl.state_words
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    n_log   integer;
    ne      bigint := now;
    i0      integer := 0;
    cnt     bigint;
    carried bigint := 0; -- entries carried over at s_t, not yet written
    keep    bigint;
    old     bigint;
    e       bigint[];
BEGIN
    IF s_alg <> 3 THEN
        s_log := '{}';
    END IF;
    n_log := cardinality(s_log);
    IF n_log > 0 THEN
        ne := greatest(now, s_log[n_log]);
    END IF;
    WHILE i0 < n_log AND s_log[i0 + 1] <= ne - w LOOP
        i0 := i0 + 1;
    END LOOP;
    cnt := n_log - i0;
    IF s_alg = 3 AND s_x <> 0 THEN
        ne := greatest(now, s_t);
        IF s_t > ne - w THEN
            carried := s_x;
        END IF;
        cnt := carried;
    END IF;
    keep := cnt + delta; -- live entries after the settle
    IF delta > 0 THEN
        keep := greatest(cnt, least(keep, lim));
    END IF;
    keep := greatest(0, keep);
    IF keep = 0 THEN
        RETURN ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words;
    END IF;
    old := least(keep, cnt); -- live entries kept, the oldest first
    IF carried > 0 THEN
        e := array_fill(s_t, ARRAY[old::integer]);
    ELSE
        e := s_log[i0 + 1 : i0 + old::integer];
    END IF;
    e := e || array_fill(ne, ARRAY[(keep - old)::integer]);
    RETURN ROW(3, 0, 0, 0, e, 0, 0, 0)::rl.state_words;
END
$function$;

-- rl._sliding_log_anchor and rl._sliding_log_usage: what rl._carry carries
-- from a state of it, its newest entry and the entries within its window
-- before it (the log is sorted: rl._log_error), none for an empty log.
CREATE FUNCTION rl._sliding_log_anchor(s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN coalesce(s_log[cardinality(s_log)], 0);

CREATE FUNCTION rl._sliding_log_usage(s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN coalesce(cardinality(s_log) - width_bucket(s_log[cardinality(s_log)] - s_w, s_log), 0);

-- rl._sliding_log_carry: the state it holds with units used at anchor a
-- (rl._carry): the entries exist only as (a, units) until an admission
-- writes them (rl._sliding_log_carried).
CREATE FUNCTION rl._sliding_log_carry(a bigint, used bigint, lim bigint, w bigint, rate bigint) RETURNS rl.state_words
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ROW(3, a, used, 0, '{}', lim, w, 0)::rl.state_words;
