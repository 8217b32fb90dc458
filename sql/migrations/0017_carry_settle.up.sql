-- 0017 (after 0016): the parameters a state was written under, usage
-- carried over when a limit changes, and settling a cost known only later,
-- in the SQL port as the core has them (core/core.go, core/decide.go,
-- core/carry.go, core/settle.go: the same integer arithmetic, numeric where
-- the core multiplies or divides in 128 bits).
--
-- * rl.state gains l, w and r (bigint, default 0): the Limit, Window and
--   effective rate (Rate, or Limit when Rate is 0; 0 for the window
--   algorithms) of the limit that wrote the state (core.State L, W, R).
--   Rows written before are legacy states (all three 0), read as before.
--   The composite types that carry a state gain them too, appended:
--   rl._eval_result, rl.state_words and rl.decision_state.
-- * rl._eval takes the state's l, w and r (a new signature: 15 arguments)
--   and reads the state as core's Compiled.read does: exactly, unclamped,
--   when it was written under the limit's own algorithm and parameters (a
--   debt above the limit is kept); carried over by rl._carry when it
--   records other parameters or another algorithm (rl._sliding_log_carried
--   decides a sliding log carried as (t = anchor, x = entries) until an
--   admission writes its entries); clamped as before otherwise. Every state
--   it writes records the limit's parameters. rl._state_error checks l, w
--   and r (those of a valid limit of the state's algorithm, or all 0).
-- * rl._settle (and rl._settle_fixed, _sliding, _log, _level) port
--   core.Settle: a delta, positive a debt beyond the limit, negative a
--   refund never below nothing used; delta 0 changes nothing. The public
--   functions: rl.rl_settle and rl.rl_settle_us (one limit, as rl_allow
--   and rl_allow_us), rl.rl_settle_multi (several limits, all or nothing,
--   a JSON array as rl_allow_multi takes) and rl.rl_settle_decide (the
--   same with the arrays rl_decide_multi takes), with the trust rules of
--   the take functions; rl.decide and rl.decide_all take op 'settle';
--   rl.rl_decide_batch takes a settle flag per request.
-- * Every function that reads or writes a state row carries l, w and r:
--   the row locks (rl._lock_state, rl._lock_batch, rl.lock_states and
--   rl.lock_states_batch, which return them as columns appended), the
--   one-statement paths of 0014 and 0015, rl_decide_multi, rl_decide_batch,
--   the trigger's path, rl.drop_fresh_states.
--
-- This replaces rl._eval (a new signature): a database with the native step
-- enabled (sql/native) is back on the PL/pgSQL port until
-- rl_native.enable() runs again, with rl_native 2.
SET LOCAL search_path = pg_catalog, pg_temp;

ALTER TABLE rl.state
    ADD COLUMN l bigint NOT NULL DEFAULT 0,
    ADD COLUMN w bigint NOT NULL DEFAULT 0,
    ADD COLUMN r bigint NOT NULL DEFAULT 0;
COMMENT ON COLUMN rl.state.l IS 'core.State.L: the Limit of the limit that wrote the state; 0 in a fresh or legacy state';
COMMENT ON COLUMN rl.state.w IS 'core.State.W: the Window (µs) of the limit that wrote the state; 0 in a fresh or legacy state';
COMMENT ON COLUMN rl.state.r IS 'core.State.R: the effective rate of the limit that wrote the state (Rate, or Limit when Rate is 0; 0 for the window algorithms); 0 in a fresh or legacy state';

ALTER TYPE rl._eval_result ADD ATTRIBUTE l bigint, ADD ATTRIBUTE w bigint, ADD ATTRIBUTE r bigint;
ALTER TYPE rl.state_words ADD ATTRIBUTE l bigint, ADD ATTRIBUTE w bigint, ADD ATTRIBUTE r bigint;
ALTER TYPE rl.decision_state ADD ATTRIBUTE l bigint, ADD ATTRIBUTE w bigint, ADD ATTRIBUTE r bigint;

-- Functions whose arguments or result columns change: the new ones below.
DROP FUNCTION rl._eval(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint, boolean);
DROP FUNCTION rl._sliding_window(bigint, bigint, integer, bigint, bigint, bigint, bigint, bigint, boolean, rl._eval_result);
DROP FUNCTION rl._bucket(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint, boolean, rl._eval_result);
DROP FUNCTION rl._gcra(bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint, bigint, boolean, rl._eval_result);
DROP FUNCTION rl._state_error(integer, bigint, bigint, bigint, bigint[]);
DROP FUNCTION rl._fail(integer, integer, bigint, bigint, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], text);
DROP FUNCTION rl._explain(integer, integer, bigint, bigint, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[]);
DROP FUNCTION rl.decide(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint, text);
DROP FUNCTION rl.lock_states(text, text[]);
DROP FUNCTION rl.lock_states_batch(text[], text[]);
DROP FUNCTION rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[]);

-- rl._params_valid is core paramsValid: l, w and r are the parameters of a
-- valid limit of algorithm alg, r its effective rate (0 for the window
-- algorithms, at least 1 for the others).
CREATE FUNCTION rl._params_valid(alg integer, l bigint, w bigint, r bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (alg BETWEEN 1 AND 3 OR r >= 1) AND rl._limit_error(alg, l, w, r) = 0;

-- rl._state_error is core checkState: 8 (ErrState) for a corrupt state.
-- Its recorded parameters are those of a valid limit of its algorithm, or
-- all 0 (a fresh state has none).
CREATE FUNCTION rl._state_error(s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_l bigint,
                                s_w bigint, s_r bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN s_t NOT BETWEEN 0 AND rl._max_state_value() OR s_x NOT BETWEEN 0 AND rl._max_state_value()
             OR s_y NOT BETWEEN 0 AND rl._max_state_value() THEN 8
        WHEN (s_l <> 0 OR s_w <> 0 OR s_r <> 0) AND NOT rl._params_valid(s_alg, s_l, s_w, s_r) THEN 8
        WHEN s_alg = 0 THEN CASE WHEN s_t <> 0 OR s_x <> 0 OR s_y <> 0 OR s_l <> 0 OR s_w <> 0 OR s_r <> 0
                                      OR cardinality(s_log) <> 0 THEN 8 ELSE 0 END
        WHEN s_alg IN (1, 4, 5) THEN CASE WHEN s_y <> 0 THEN 8 ELSE 0 END
        -- X: the TAT's fraction numerator, below Rate (<= MaxLimit); Y: the
        -- admission's time, never after the TAT it wrote.
        WHEN s_alg = 6 THEN CASE WHEN s_x > rl._max_limit() OR s_y > s_t THEN 8 ELSE 0 END
        WHEN s_alg = 2 THEN 0
        WHEN s_alg = 3 THEN CASE WHEN s_t <> 0 OR s_x <> 0 OR s_y <> 0 THEN 8 ELSE rl._log_error(s_log) END
        ELSE 8
    END;

-- rl._explain is the message of an error: the value at fault and why.
-- Arguments as the caller passed them (NULL prints as NULL); p_settle: the
-- call was a settle, whose cost is a delta.
CREATE FUNCTION rl._explain(code integer, p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
                            p_now bigint, p_cost bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint,
                            s_log bigint[], s_l bigint, s_w bigint, s_r bigint, p_settle boolean) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 'ratelimit: ' || CASE code
        WHEN 1 THEN pg_catalog.format('algorithm %s: unknown (want 1 %s, 2 %s, 3 %s, 4 %s, 5 %s or 6 %s)',
            coalesce(p_alg::text, 'NULL'), rl.algorithm_name(1), rl.algorithm_name(2), rl.algorithm_name(3),
            rl.algorithm_name(4), rl.algorithm_name(5), rl.algorithm_name(6))
        WHEN 2 THEN pg_catalog.format('limit %s: outside [1, %s] for %s', coalesce(p_lim::text, 'NULL'),
            CASE WHEN p_alg = 3 THEN rl._max_log_limit() ELSE rl._max_limit() END, rl.algorithm_name(p_alg))
        WHEN 3 THEN pg_catalog.format('window %s µs: outside [1, %s] µs', coalesce(p_win::text, 'NULL'), rl._max_window())
        WHEN 4 THEN CASE WHEN p_alg <= 3
            THEN pg_catalog.format('rate %s: must be 0 or absent for %s (rate applies to %s, %s and %s)',
                coalesce(p_rate::text, 'NULL'), rl.algorithm_name(p_alg), rl.algorithm_name(4), rl.algorithm_name(5),
                rl.algorithm_name(6))
            ELSE pg_catalog.format('rate %s: outside [0, %s] for %s', coalesce(p_rate::text, 'NULL'), rl._max_limit(),
                rl.algorithm_name(p_alg)) END
        WHEN 5 THEN pg_catalog.format('limit %s × window %s µs: too large for %s (limit × window in µs must be at most %s)',
            p_lim, p_win, rl.algorithm_name(p_alg), rl._max_units())
        WHEN 6 THEN CASE
            WHEN p_settle IS NOT TRUE THEN pg_catalog.format('cost %s: outside [0, %s]', coalesce(p_cost::text, 'NULL'), rl._max_cost())
            WHEN p_cost BETWEEN -rl._max_cost() AND rl._max_cost()
            THEN pg_catalog.format('settle delta %s: the debt it leaves on %s would exceed %s (units of 1/window)', p_cost,
                rl.algorithm_name(p_alg), rl._max_state_value())
            ELSE pg_catalog.format('settle delta %s: outside [-%s, %s]', coalesce(p_cost::text, 'NULL'), rl._max_cost(),
                rl._max_cost()) END
        WHEN 7 THEN pg_catalog.format('time %s µs: outside [0, %s] µs since the Unix epoch', coalesce(p_now::text, 'NULL'),
            rl._max_time())
        WHEN 8 THEN pg_catalog.format('stored state (algorithm %s, t %s, x %s, y %s, %s log entries, l %s, w %s, r %s) is corrupt for %s',
            coalesce(s_alg::text, 'NULL'), coalesce(s_t::text, 'NULL'), coalesce(s_x::text, 'NULL'),
            coalesce(s_y::text, 'NULL'), coalesce(cardinality(s_log), 0), coalesce(s_l::text, 'NULL'),
            coalesce(s_w::text, 'NULL'), coalesce(s_r::text, 'NULL'), rl.algorithm_name(p_alg))
        ELSE pg_catalog.substr(rl._error_message(code), 12)
    END;

-- rl._fail raises error code as SQLSTATE RL0NN with rl._explain's message;
-- detail ('limit index N ...') may be NULL.
CREATE FUNCTION rl._fail(code integer, p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
                         p_now bigint, p_cost bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint,
                         s_log bigint[], s_l bigint, s_w bigint, s_r bigint, p_settle boolean, detail text) RETURNS void
    LANGUAGE plpgsql
AS $fn$
DECLARE
    msg text := rl._explain(code, p_alg, p_lim, p_win, p_rate, p_now, p_cost, s_alg, s_t, s_x, s_y, s_log, s_l, s_w, s_r,
                            p_settle);
BEGIN
    IF detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'RL0' || lpad(code::text, 2, '0'), MESSAGE = msg;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'RL0' || lpad(code::text, 2, '0'), MESSAGE = msg, DETAIL = detail;
END
$fn$;

-- rl._wrap64 is v as Go's int64 arithmetic leaves it: v modulo 2^64, in
-- [-2^63, 2^63). The core computes a few values that can overflow int64
-- when it reads a state in debt exactly (a sliding window's room, with
-- counts far above the limit; a bucket's times, with a level near
-- MaxStateValue); where they can, the port computes them in numeric and
-- wraps them here, so that it decides as the core does.
CREATE FUNCTION rl._wrap64(v numeric) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (mod(mod(v + 9223372036854775808, 18446744073709551616) + 18446744073709551616, 18446744073709551616)
            - 9223372036854775808)::bigint;

-- The algorithm functions: each writes the parameters of the limit into
-- the state it builds (l, w and, for the buckets and GCRA, the effective
-- rate). exact: the state was written under exactly this limit's
-- parameters (or carried over), so it is read as it is: units above the
-- limit are a debt from a settle; otherwise, counts above a lowered limit
-- count as the limit (core/decide.go).

CREATE OR REPLACE FUNCTION rl._fixed_window(lim bigint, w bigint, s_alg integer, s_t bigint, s_x bigint, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    start bigint := now - now % w;
    cnt   bigint := 0;
    e     bigint;
BEGIN
    IF s_alg = 1 AND s_t >= start THEN
        -- The current window, or a later one if the clock stepped back. A
        -- state written under another window length may start off the
        -- current one's grid: its window is the one holding T.
        start := s_t - s_t % w;
        cnt := s_x;
    END IF;
    e := start + w; -- end
    IF cost = 0 OR cnt + cost <= lim THEN
        r.allowed := true;
        IF cost > 0 THEN
            cnt := cnt + cost;
            IF p_take THEN
                r.algorithm := 1; r.t := start; r.x := cnt; r.y := 0; r.log := '{}';
                r.l := lim; r.w := w; r.r := 0;
            END IF;
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := e - now;
    END IF;
    r.remaining := greatest(0, lim - cnt);
    IF cnt > 0 THEN
        -- The whole quota comes back when the window ends, none before.
        r.reset_after := e - now;
        r.next_after := e - now;
    END IF;
    RETURN r;
END
$function$;

CREATE FUNCTION rl._sliding_window(lim bigint, w bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, exact boolean, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    start bigint := now - now % w;
    st    bigint;
    curr  bigint := 0;
    prev  bigint := 0;
    e     bigint;
    room  bigint;
BEGIN
    IF s_alg = 2 THEN
        -- The window holding T: T itself unless the state was written
        -- under another window length.
        st := s_t - s_t % w;
        IF st >= start THEN
            start := st; curr := s_x; prev := s_y;
        ELSIF st + w = start THEN
            prev := s_x;
        END IF;
    END IF;
    IF NOT exact THEN
        -- Counts above the limit of a state written under other parameters
        -- come from a lowered limit: they count as full.
        curr := least(curr, lim);
        prev := least(prev, lim);
    END IF;
    e := greatest(now, start) - start; -- elapsed in the current window, < w
    IF curr <= lim AND prev <= lim THEN
        room := (lim - curr) * w - prev * (w - e);
    ELSE -- counts in debt (exact): the core's int64 arithmetic
        room := rl._wrap64((lim - curr)::numeric * w - prev::numeric * (w - e));
    END IF;
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
                r.l := lim; r.w := w; r.r := 0;
            END IF;
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := rl._sliding_retry(w, lim, start, e, curr, prev, cost) - now;
    END IF;
    IF room > 0 THEN
        r.remaining := room / w;
    END IF;
    IF curr > 0 THEN
        r.reset_after := start + 2 * w - now;
    ELSIF prev > 0 THEN
        r.reset_after := start + w - now;
    END IF;
    IF r.remaining < lim THEN
        -- One more unit fits when a call of remaining + 1, denied now, would
        -- pass.
        r.next_after := rl._sliding_retry(w, lim, start, e, curr, prev, r.remaining + 1) - now;
    END IF;
    RETURN r;
END
$function$;

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

-- rl._bucket_debt is the rest of rl._bucket for a level above the capacity
-- (a state in debt, read exactly): nothing is admitted but a cost of 0, and
-- the times, ceil(level / rate) + ne - now, wrap as the core's int64 sums
-- do when they pass 2^63.
CREATE FUNCTION rl._bucket_debt(p_alg integer, lim bigint, w bigint, rate bigint, lvl bigint, ne bigint, now bigint, cost bigint, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    capacity bigint := lim * w;
BEGIN
    IF cost = 0 THEN
        r.allowed := true;
        IF p_alg = 5 THEN
            r.delay := rl._wrap64(rl._ceil_div(lvl, rate)::numeric + ne - now);
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := rl._wrap64(rl._ceil_div(lvl + cost * w - capacity, rate)::numeric + ne - now);
    END IF;
    r.reset_after := rl._wrap64(rl._ceil_div(lvl, rate)::numeric + ne - now);
    r.next_after := rl._wrap64(rl._ceil_div(lvl - capacity + w, rate)::numeric + ne - now);
    RETURN r;
END
$function$;

CREATE FUNCTION rl._bucket(p_alg integer, lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, exact boolean, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    capacity bigint := lim * w;
    last     bigint := now;
    lvl      bigint := 0;
    ne       bigint;
    el       bigint;
BEGIN
    IF rate = 0 THEN
        rate := lim;
    END IF;
    IF s_alg = p_alg THEN
        last := s_t;
        lvl := s_x;
        IF NOT exact THEN -- a legacy state written under other parameters
            lvl := least(lvl, capacity);
        END IF;
    END IF;
    ne := greatest(now, last); -- a clock that stepped back is read as the last update
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
    IF lvl > capacity THEN -- in debt (exact): the core's int64 arithmetic
        RETURN rl._bucket_debt(p_alg, lim, w, rate, lvl, ne, now, cost, r);
    END IF;
    IF r.allowed THEN
        IF p_alg = 5 AND lvl > 0 THEN
            r.delay := rl._ceil_div(lvl, rate) + ne - now;
        END IF;
        IF cost > 0 THEN
            lvl := lvl + cost * w;
            IF p_take THEN
                r.algorithm := p_alg; r.t := ne; r.x := lvl; r.y := 0; r.log := '{}';
                r.l := lim; r.w := w; r.r := rate;
            END IF;
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := rl._ceil_div(lvl + cost * w - capacity, rate) + ne - now;
    END IF;
    IF lvl < capacity THEN -- a debt leaves nothing remaining
        r.remaining := (capacity - lvl) / w;
    END IF;
    IF lvl > 0 THEN
        r.reset_after := rl._ceil_div(lvl, rate) + ne - now;
        -- The first instant at which remaining + 1 units fit.
        r.next_after := rl._ceil_div(lvl - capacity + (r.remaining + 1) * w, rate) + ne - now;
    END IF;
    RETURN r;
END
$function$;

CREATE FUNCTION rl._gcra(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, exact boolean, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    capacity bigint := lim * w;
    lvl      bigint := 0;
    is_full  boolean := false; -- level > capacity, too big to compute
    dt       bigint;
BEGIN
    IF rate = 0 THEN
        rate := lim;
    END IF;
    IF s_alg = 6 THEN
        IF s_y > 0 AND NOT exact THEN
            -- rl._state_error: s_t >= s_y. dt*rate <= capacity when the
            -- first test fails.
            dt := s_t - s_y;
            IF dt > capacity / rate THEN
                s_t := s_y + capacity / rate; s_x := capacity % rate;
            ELSIF dt * rate + s_x > capacity THEN
                s_t := s_y + capacity / rate; s_x := capacity % rate;
            END IF;
        END IF;
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
                r.algorithm := 6; r.t := now + lvl / rate; r.x := lvl % rate; r.y := now; r.log := '{}';
                r.l := lim; r.w := w; r.r := rate;
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
    IF is_full THEN -- as a retry of one unit
        r.next_after := s_t + rl._ceil_div_signed(s_x + w - capacity, rate) - now;
    ELSIF lvl > 0 THEN
        -- The level drains rate units a µs from now on: the first instant at
        -- which remaining + 1 units fit.
        r.next_after := rl._ceil_div(lvl - capacity + (r.remaining + 1) * w, rate);
    END IF;
    RETURN r;
END
$function$;

-- rl._carry is core carry: the state a limit (p_*) holds with the usage of
-- a state recorded under other parameters or by another algorithm (s_*,
-- whose l, w and r are set), read at the state's own time, its anchor (a
-- bucket's last update, GCRA's last admission, a window's start, a log's
-- newest entry), so the result depends on the state and the limit only:
-- between the buckets and GCRA the level is rescaled to the new window,
-- rounded up; otherwise the units used are counted whole (a fraction
-- counts as one) and placed at the anchor. The usage is clamped to the new
-- limit. A sliding log is carried as (t = anchor, x = entries), decided by
-- rl._sliding_log_carried until an admission writes its entries. The
-- products and quotients the core computes in 128 bits are numeric here,
-- saturating at MaxStateValue as the core's do (and the quotient's
-- increment wrapping at 2^64 as its uint64 does).
CREATE FUNCTION rl._carry(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint)
 RETURNS rl.state_words
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    rate     bigint := CASE WHEN p_rate = 0 THEN p_lim ELSE p_rate END; -- the buckets and GCRA
    capacity bigint;
    a        bigint := 0; -- the anchor
    units    bigint := 0; -- whole units used, for a destination that counts them
    lvl      bigint := 0; -- the rescaled level, for a bucket or GCRA destination
    old      numeric;     -- a bucket's or GCRA's level, in 1/s_w of a unit
    q        numeric;
    n        integer;
    fresh    rl.state_words := ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words;
BEGIN
    CASE s_alg
    WHEN 1 THEN
        a := s_t; units := s_x;
    WHEN 2 THEN
        a := s_t; units := least(s_x::numeric + s_y, rl._max_state_value())::bigint;
    WHEN 3 THEN
        n := cardinality(s_log);
        IF n = 0 THEN
            RETURN fresh;
        END IF;
        a := s_log[n];
        SELECT count(*) INTO units FROM unnest(s_log) AS u(e) WHERE u.e > a - s_w;
    ELSE -- 4, 5, 6: a level in 1/s_w of a unit
        IF s_alg = 6 THEN
            a := s_y;
            old := least((s_t - s_y)::numeric * s_r + s_x, rl._max_state_value());
        ELSE
            a := s_t; old := s_x;
        END IF;
        IF p_alg > 3 THEN
            -- ceil(old * p_win / s_w), saturating.
            q := div(old * p_win, s_w);
            IF q >= 18446744073709551616 THEN
                lvl := rl._max_state_value();
            ELSE
                IF q * s_w <> old * p_win THEN
                    q := (q + 1) % 18446744073709551616;
                END IF;
                lvl := least(q, rl._max_state_value())::bigint;
            END IF;
        ELSE
            units := old::bigint / s_w + CASE WHEN old::bigint % s_w <> 0 THEN 1 ELSE 0 END;
        END IF;
    END CASE;
    IF p_alg > 3 THEN
        capacity := p_lim * p_win;
        IF s_alg <= 3 THEN
            lvl := least(units, p_lim) * p_win;
        END IF;
        lvl := least(lvl, capacity);
        IF lvl = 0 THEN
            RETURN fresh;
        END IF;
        IF p_alg = 6 THEN
            RETURN ROW(6, a + lvl / rate, lvl % rate, a, '{}', p_lim, p_win, rate)::rl.state_words;
        END IF;
        RETURN ROW(p_alg, a, lvl, 0, '{}', p_lim, p_win, rate)::rl.state_words;
    END IF;
    units := least(units, p_lim);
    IF units = 0 THEN
        RETURN fresh;
    END IF;
    IF p_alg = 3 THEN
        -- The entries exist only as (a, units) until an admission writes
        -- them (rl._sliding_log_carried).
        RETURN ROW(3, a, units, 0, '{}', p_lim, p_win, 0)::rl.state_words;
    END IF;
    RETURN ROW(p_alg, a - a % p_win, units, 0, '{}', p_lim, p_win, 0)::rl.state_words;
END
$function$;

-- rl._eval is the algorithm step: one limit, one stored state (with the
-- parameters that wrote it: s_l, s_w, s_r) and the request. It checks the
-- input in the core's order, reads the state as core's Compiled.read does
-- (exactly when written under this limit's parameters; carried over by
-- rl._carry when it records other ones or another algorithm, which a
-- window algorithm reading its own state does not need; clamped by the
-- algorithm otherwise) and decides. The state it returns is the input
-- state unless a take admits a cost above 0.
CREATE FUNCTION rl._eval(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_l bigint, s_w bigint, s_r bigint, p_now bigint, p_cost bigint, p_take boolean)
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

-- Settling (core/settle.go). Each rl._settle_* function returns the state
-- a delta leaves (a fresh state: all zero), without the recorded
-- parameters, which rl._settle adds; NULL when the debt it leaves would
-- not fit a state (ErrCost).

-- rl._settle_fixed is core settleFixed: the count of the window holding
-- now (or the state's, if later) changed by delta.
CREATE FUNCTION rl._settle_fixed(w bigint, s_alg integer, s_t bigint, s_x bigint, now bigint, delta bigint)
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

-- rl._settle_sliding is core settleSliding: the current window's count
-- changed by delta; a refund beyond it comes from the previous window's.
CREATE FUNCTION rl._settle_sliding(lim bigint, w bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, exact boolean, now bigint, delta bigint)
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

-- rl._settle_log is core settleLog: live entries kept, the oldest first,
-- then entries at now (or the newest entry's time, if later) for a
-- positive delta, at most up to the limit; a log carried over (s_x set,
-- see rl._carry) is written for the first time.
CREATE FUNCTION rl._settle_log(lim bigint, w bigint, s_alg integer, s_t bigint, s_x bigint, s_log bigint[], now bigint, delta bigint)
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

-- rl._settle_level is core settleLevel, for the buckets and GCRA: the level
-- (in 1/w of a unit) read at the state's latest time or now, whichever is
-- later, changed by delta * w; the 128-bit products of the core in
-- numeric.
CREATE FUNCTION rl._settle_level(p_alg integer, lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, exact boolean, now bigint, delta bigint)
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

-- rl._settle is core Settle: the state after correcting the units used by
-- p_delta at p_now, carried over first as rl._eval reads it, and the
-- decision of a call of cost 0 on it (allowed, with its remaining,
-- reset_after and next_after), in the fields of rl._eval_result; err as
-- rl._eval's (6 for a delta outside [-MaxCost, MaxCost] or a debt that
-- would not fit a state). A delta of 0 changes nothing.
CREATE FUNCTION rl._settle(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_l bigint, s_w bigint, s_r bigint, p_now bigint, p_delta bigint)
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

CREATE OR REPLACE FUNCTION rl._all(p_algs integer[], p_lims bigint[], p_wins bigint[], p_rates bigint[], p_states rl.state_words[], p_now bigint, p_cost bigint, p_take boolean, p_names text[], OUT rs rl._eval_result[], OUT best integer)
 RETURNS record
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    n      integer := cardinality(p_algs);
    r      rl._eval_result;
    st     rl.state_words;
    denied integer := 0; -- 1-based; 0: none
    i      integer;
BEGIN
    best := 1;
    IF n = 1 THEN -- one limit: decide and take in one pass
        st := p_states[1];
        r := rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], st.algorithm, st.t, st.x, st.y, st.log,
                      st.l, st.w, st.r, p_now, p_cost, p_take);
        IF r.err <> 0 THEN
            PERFORM rl._fail(r.err, p_algs[1], p_lims[1], p_wins[1], p_rates[1], p_now, p_cost,
                             st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, false,
                             rl._limit_detail(0, p_names));
        END IF;
        rs[1] := r;
        RETURN;
    END IF;
    -- The first pass decides every limit without changing anything.
    FOR i IN 1 .. n LOOP
        st := p_states[i];
        r := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                      st.l, st.w, st.r, p_now, p_cost, false);
        IF r.err <> 0 THEN
            PERFORM rl._fail(r.err, p_algs[i], p_lims[i], p_wins[i], p_rates[i], p_now, p_cost,
                             st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, false,
                             rl._limit_detail(i - 1, p_names));
        END IF;
        rs[i] := r;
        IF NOT r.allowed THEN
            IF denied = 0 THEN
                denied := i;
            ELSIF rl._later(r.retry_after, (rs[denied]).retry_after) THEN
                denied := i;
            END IF;
        END IF;
    END LOOP;
    IF denied > 0 THEN
        best := denied;
        -- Nothing was taken: a limit that would have admitted the cost
        -- reports its state as it is (its decision for cost 0).
        IF p_cost > 0 THEN
            FOR i IN 1 .. n LOOP
                CONTINUE WHEN NOT (rs[i]).allowed;
                st := p_states[i];
                rs[i] := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y,
                                  st.log, st.l, st.w, st.r, p_now, 0, false);
            END LOOP;
        END IF;
        RETURN;
    END IF;
    FOR i IN 1 .. n LOOP
        IF p_take THEN
            st := p_states[i];
            rs[i] := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                              st.l, st.w, st.r, p_now, p_cost, true);
            -- err is 0: the first pass accepted the same input.
        END IF;
        IF (rs[i]).remaining < (rs[best]).remaining THEN
            best := i;
        END IF;
    END LOOP;
END
$function$;

-- rl._settle_all is core SettleAll: p_delta settled on every limit, each
-- with its state; the first limit that fails raises its error (nothing is
-- written by then); the deciding limit is the first.
CREATE FUNCTION rl._settle_all(p_algs integer[], p_lims bigint[], p_wins bigint[], p_rates bigint[], p_states rl.state_words[], p_now bigint, p_delta bigint, p_names text[], OUT rs rl._eval_result[], OUT best integer)
 RETURNS record
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    n  integer := cardinality(p_algs);
    r  rl._eval_result;
    st rl.state_words;
BEGIN
    best := 1;
    FOR i IN 1 .. n LOOP
        st := p_states[i];
        r := rl._settle(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                        st.l, st.w, st.r, p_now, p_delta);
        IF r.err <> 0 THEN
            PERFORM rl._fail(r.err, p_algs[i], p_lims[i], p_wins[i], p_rates[i], p_now, p_delta,
                             st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, true,
                             rl._limit_detail(i - 1, p_names));
        END IF;
        rs[i] := r;
    END LOOP;
END
$function$;

CREATE OR REPLACE FUNCTION rl._lock_state(p_key text, p_name text, OUT st rl.state_words, OUT created boolean)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    tries integer := 0;
BEGIN
    created := false;
    LOOP
        SELECT s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r INTO st
          FROM rl.state s WHERE s.key = p_key AND s.name = p_name FOR UPDATE;
        EXIT WHEN FOUND;
        tries := tries + 1;
        IF tries > rl._lock_tries() THEN
            RAISE EXCEPTION 'ratelimit: the state row kept changing; retry the transaction'
                USING ERRCODE = 'serialization_failure';
        END IF;
        INSERT INTO rl.state AS s (key, name) VALUES (p_key, p_name) ON CONFLICT DO NOTHING;
        IF FOUND THEN
            created := true;
        END IF;
    END LOOP;
END
$function$;

CREATE OR REPLACE FUNCTION rl._lock_batch(p_keys text[], p_names text[], OUT states rl.state_words[], OUT created boolean[])
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    m     integer := coalesce(cardinality(p_keys), 0);
    got   integer;
    ok    boolean := false;
    st    rl.state_words;
    c     boolean;
    tries integer;
BEGIN
    IF m = 0 THEN
        states := '{}';
        created := '{}';
        RETURN;
    END IF;
    -- Every row present, the common case: one statement locks them in order
    -- (the locking happens above the sort). A row missing (or deleted
    -- meanwhile) rolls the subtransaction back, which releases the locks it
    -- took: nothing stays locked out of order.
    BEGIN
        SELECT array_agg(ROW(l.algorithm, l.t, l.x, l.y, l.log, l.l, l.w, l.r)::rl.state_words ORDER BY l.o), count(*)
          INTO states, got
          FROM (SELECT u.o, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r
                  FROM unnest(p_keys, p_names) WITH ORDINALITY AS u(k, n, o)
                  JOIN rl.state s ON s.key = u.k AND s.name = u.n
                 ORDER BY u.o
                   FOR UPDATE OF s) l;
        IF got < m THEN
            RAISE EXCEPTION USING ERRCODE = 'RL999', MESSAGE = 'ratelimit: internal: a row is missing';
        END IF;
        ok := true;
    EXCEPTION WHEN SQLSTATE 'RL999' THEN
        ok := false;
    END;
    IF ok THEN
        created := array_fill(false, ARRAY[m]);
        RETURN;
    END IF;
    -- Row by row, in the same order, creating the missing ones (the protocol
    -- of rl._take_many and rl.lock_states).
    states := '{}';
    created := '{}';
    FOR i IN 1 .. m LOOP
        tries := 0;
        c := false;
        LOOP
            SELECT s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r INTO st
              FROM rl.state s WHERE s.key = p_keys[i] AND s.name = p_names[i] FOR UPDATE;
            EXIT WHEN FOUND;
            tries := tries + 1;
            IF tries > 100 THEN
                RAISE EXCEPTION 'ratelimit: the state row kept changing; retry the transaction'
                    USING ERRCODE = 'serialization_failure';
            END IF;
            INSERT INTO rl.state AS s (key, name) VALUES (p_keys[i], p_names[i]) ON CONFLICT DO NOTHING;
            c := c OR FOUND;
        END LOOP;
        states[i] := st;
        created[i] := c;
    END LOOP;
END
$function$;

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

CREATE FUNCTION rl.decide(algorithm integer, lim bigint, window_us bigint, rate bigint, state_algorithm integer, state_t bigint, state_x bigint, state_y bigint, state_log bigint[], now_us bigint, cost bigint, op text DEFAULT 'take'::text, state_l bigint DEFAULT 0, state_w bigint DEFAULT 0, state_r bigint DEFAULT 0)
 RETURNS rl.decision_state
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    r rl._eval_result;
BEGIN
    IF op IS NULL OR op NOT IN ('take', 'peek', 'settle') THEN
        RAISE EXCEPTION 'rl.decide: op must be ''take'', ''peek'' or ''settle'', not %', coalesce(quote_literal(op), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF op = 'settle' THEN
        r := rl._settle($1, $2, $3, $4, $5, $6, $7, $8, $9, $13, $14, $15, $10, $11);
    ELSE
        r := rl._eval($1, $2, $3, $4, $5, $6, $7, $8, $9, $13, $14, $15, $10, $11, op = 'take');
    END IF;
    IF r.err <> 0 THEN
        PERFORM rl._fail(r.err, $1, $2, $3, $4, $10, $11, $5, $6, $7, $8, $9, $13, $14, $15, op = 'settle', NULL);
    END IF;
    RETURN ROW(0, r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, 0,
               r.algorithm, r.t, r.x, r.y, r.log, r.next_after, r.l, r.w, r.r)::rl.decision_state;
END
$function$;

COMMENT ON FUNCTION rl.decide(integer,bigint,bigint,bigint,integer,bigint,bigint,bigint,bigint[],bigint,bigint,text,bigint,bigint,bigint) IS 'core.Take (op take), core.Peek (peek) or core.Settle (settle: cost is the delta) of one limit on a state given as arguments (state_l, state_w, state_r: the parameters that wrote it); the new state in the result. Reads no table and no clock.';

CREATE OR REPLACE FUNCTION rl.decide_all(limits rl.limit_spec[], states rl.state_words[], now_us bigint, cost bigint, op text DEFAULT 'take'::text)
 RETURNS SETOF rl.decision_state
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    n     integer := coalesce(cardinality(limits), 0);
    lo    integer;
    slo   integer;
    l     rl.limit_spec;
    algs  integer[];
    lims  bigint[];
    wins  bigint[];
    rates bigint[];
    ss    rl.state_words[];
    rs    rl._eval_result[];
    r     rl._eval_result;
    best  integer;
    i     integer;
BEGIN
    IF op IS NULL OR op NOT IN ('take', 'peek', 'settle') THEN
        RAISE EXCEPTION 'rl.decide_all: op must be ''take'', ''peek'' or ''settle'', not %', coalesce(quote_literal(op), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n = 0 OR (states IS NOT NULL AND cardinality(states) < n) THEN
        PERFORM rl._raise(10, 'limit index 0');
    END IF;
    IF array_ndims(limits) <> 1 OR (states IS NOT NULL AND array_ndims(states) <> 1) THEN
        PERFORM rl._raise(10, 'limit index 0');
    END IF;
    lo := array_lower(limits, 1);
    slo := coalesce(array_lower(states, 1), 1);
    FOR i IN 1 .. n LOOP
        l := limits[lo + i - 1];
        algs[i] := l.algorithm;
        lims[i] := l.lim;
        wins[i] := l.window_us;
        rates[i] := l.rate;
        ss[i] := states[slo + i - 1];
    END LOOP;
    IF op = 'settle' THEN
        SELECT a.rs, a.best INTO rs, best FROM rl._settle_all(algs, lims, wins, rates, ss, now_us, cost, NULL) a;
    ELSE
        SELECT a.rs, a.best INTO rs, best FROM rl._all(algs, lims, wins, rates, ss, now_us, cost, op = 'take', NULL) a;
    END IF;
    FOR i IN 1 .. n LOOP
        r := rs[i];
        RETURN NEXT ROW(i - 1, r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, best - 1,
                        r.algorithm, r.t, r.x, r.y, r.log, r.next_after, r.l, r.w, r.r)::rl.decision_state;
    END LOOP;
    RETURN;
END
$function$;

CREATE OR REPLACE FUNCTION rl.drop_fresh_states(keys text[], names text[])
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    n bigint;
BEGIN
    PERFORM rl._require_trusted('rl.drop_fresh_states');
    DELETE FROM rl.state s
     USING unnest($1, $2) AS u(k, n)
     WHERE s.key = u.k AND s.name = u.n
       AND s.algorithm = 0 AND s.t = 0 AND s.x = 0 AND s.y = 0 AND cardinality(s.log) = 0
       AND s.l = 0 AND s.w = 0 AND s.r = 0 AND s.expires_at = 0;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$function$;

CREATE FUNCTION rl.lock_states(p_key text, p_names text[])
 RETURNS TABLE(name text, algorithm integer, t bigint, x bigint, y bigint, log bigint[], now_us bigint, l bigint, w bigint, r bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    nm    text;
    st    rl.state_words;
    v_now bigint;
BEGIN
    -- The caller writes the rows back itself (UPDATE rl.state), so only a
    -- trusted role may lock them: one with the table's privileges anyway.
    PERFORM rl._require_trusted('rl.lock_states');
    PERFORM rl._check_key(p_key, 'key');
    v_now := rl._request_now(NULL);
    FOR nm IN SELECT d.n FROM (SELECT DISTINCT u.n FROM unnest(p_names) AS u(n)) d ORDER BY d.n COLLATE "C" LOOP
        PERFORM rl._check_key(nm, 'limit name');
        st := (rl._lock_state(p_key, nm)).st;
        name := nm; algorithm := st.algorithm; t := st.t; x := st.x; y := st.y; log := st.log; now_us := v_now;
        l := st.l; w := st.w; r := st.r;
        RETURN NEXT;
    END LOOP;
END
$function$;

COMMENT ON FUNCTION rl.lock_states(text,text[]) IS 'Locks (creating if missing) the state rows of names on key in bytewise name order; for deciding outside SQL';

CREATE FUNCTION rl.lock_states_batch(keys text[], names text[])
 RETURNS TABLE(key text, name text, algorithm integer, t bigint, x bigint, y bigint, log bigint[], created boolean, now_us bigint, l bigint, w bigint, r bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
DECLARE
    p_keys  ALIAS FOR $1;
    p_names ALIAS FOR $2;
    v_now   bigint;
    ks      text[];
    ns      text[];
    lk      record;
BEGIN
    PERFORM rl._require_trusted('rl.lock_states_batch');
    IF cardinality(p_keys) IS DISTINCT FROM cardinality(p_names) THEN
        PERFORM rl._raise(10, 'rl.lock_states_batch: keys and names differ in length');
    END IF;
    IF EXISTS (SELECT FROM unnest(p_keys, p_names) AS u(k, n)
                WHERE (octet_length(u.k) BETWEEN 1 AND 256 AND octet_length(u.n) BETWEEN 1 AND 256) IS NOT TRUE) THEN
        PERFORM rl._check_key(u.k, 'key'), rl._check_key(u.n, 'limit name')
           FROM unnest(p_keys, p_names) AS u(k, n);
    END IF;
    v_now := rl._request_now(NULL);
    SELECT coalesce(array_agg(d.k ORDER BY d.k COLLATE "C", d.n COLLATE "C"), '{}'),
           coalesce(array_agg(d.n ORDER BY d.k COLLATE "C", d.n COLLATE "C"), '{}')
      INTO ks, ns
      FROM (SELECT DISTINCT u.k, u.n FROM unnest(p_keys, p_names) AS u(k, n)) d;
    SELECT * INTO lk FROM rl._lock_batch(ks, ns);
    RETURN QUERY SELECT u.k, u.n, u.sa, u.st, u.sx, u.sy, u.slog, u.c, v_now, u.sl, u.sw, u.sr
                   FROM unnest(ks, ns, lk.states, lk.created) AS u(k, n, sa, st, sx, sy, slog, sl, sw, sr, c);
END
$function$;

COMMENT ON FUNCTION rl.lock_states_batch(text[],text[]) IS 'Locks (creating if missing) the state rows of many (key, name) pairs in (key, name) bytewise order; for deciding outside SQL';

CREATE OR REPLACE FUNCTION rl._enforce_limit(p_relid oid, p_trigger text, p_args text[], p_has_col boolean, p_val text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    usage  constant text := 'rl.enforce_limit(key_column, algorithm, limit, window [, cost [, key_prefix [, name]]])';
    a      text[];
    nargs  integer;
    tbl    text;
    owner  name;
    col    text;
    alg    integer;
    lim    bigint;
    win    bigint;
    cost   bigint := 1;
    prefix text := '';
    lname  text;
    d      rl.decision;
    secs   bigint;
    e      integer;
    what   text;
BEGIN
    -- The table, as the trigger names it in messages, and its owner.
    SELECT n.nspname::text || '.' || c.relname::text, r.rolname
      INTO tbl, owner
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      JOIN pg_catalog.pg_roles r ON r.oid = c.relowner
     WHERE c.oid = p_relid;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ratelimit: % is called by rl.enforce_limit() with its trigger''s table, not %', 'rl._enforce_limit', p_relid
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- TG_ARGV counts from 0: the arguments, counted from 1.
    a := ARRAY(SELECT u.v FROM pg_catalog.unnest(p_args) WITH ORDINALITY AS u(v, i) ORDER BY u.i);
    nargs := pg_catalog.cardinality(a);
    IF nargs < 4 OR nargs > 7 THEN
        RAISE EXCEPTION 'ratelimit: trigger % on % has % arguments; usage: %', p_trigger, tbl, nargs, usage
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    col := a[1];
    alg := rl._alg(a[2]);
    IF alg = 0 THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %, argument 2 (algorithm): % is not an algorithm (want %, %, %, %, % or %)',
            p_trigger, tbl, pg_catalog.quote_literal(a[2]), rl.algorithm_name(1),
            rl.algorithm_name(2), rl.algorithm_name(3), rl.algorithm_name(4), rl.algorithm_name(5), rl.algorithm_name(6)
            USING ERRCODE = 'RL001', HINT = 'usage: ' || usage;
    END IF;
    IF a[3] !~ '^\s*-?[0-9]{1,19}\s*$' THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %, argument 3 (limit): % is not an integer',
            p_trigger, tbl, pg_catalog.quote_literal(a[3])
            USING ERRCODE = 'invalid_parameter_value', HINT = 'usage: ' || usage;
    END IF;
    lim := a[3]::bigint;
    BEGIN
        win := rl._interval_us(a[4]::interval);
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %, argument 4 (window): % is not an interval such as ''1 minute''',
            p_trigger, tbl, pg_catalog.quote_literal(a[4])
            USING ERRCODE = 'invalid_parameter_value', HINT = 'usage: ' || usage;
    END;
    IF nargs > 4 AND a[5] <> '' THEN
        IF a[5] !~ '^\s*-?[0-9]{1,19}\s*$' THEN
            RAISE EXCEPTION 'ratelimit: trigger % on %, argument 5 (cost): % is not an integer',
                p_trigger, tbl, pg_catalog.quote_literal(a[5])
                USING ERRCODE = 'invalid_parameter_value', HINT = 'usage: ' || usage;
        END IF;
        cost := a[5]::bigint;
    END IF;
    -- The limit's parameters and the cost, checked as the decision would,
    -- naming the argument at fault.
    e := coalesce(nullif(rl._limit_error(alg, lim, win, 0), 0), nullif(rl._call_error(0, cost), 0), 0);
    IF e <> 0 THEN
        what := CASE e WHEN 2 THEN 'argument 3 (limit)' WHEN 3 THEN 'argument 4 (window)'
                       WHEN 5 THEN 'arguments 3 and 4 (limit and window)' ELSE 'argument 5 (cost)' END;
        RAISE EXCEPTION 'ratelimit: trigger % on %, %: %', p_trigger, tbl, what,
            CASE WHEN e = 3 THEN pg_catalog.format('%L: outside [1 µs, %s µs]', a[4], rl._max_window())
                 ELSE pg_catalog.substr(rl._explain(e, alg, lim, win, 0, 0, cost, 0, 0, 0, 0, '{}', 0, 0, 0, false), 12) END
            USING ERRCODE = 'RL0' || pg_catalog.lpad(e::text, 2, '0'), HINT = 'usage: ' || usage;
    END IF;
    IF nargs > 5 THEN
        prefix := a[6];
    END IF;
    lname := tbl;
    IF nargs > 6 AND a[7] <> '' THEN
        lname := a[7];
    END IF;
    IF p_has_col IS NOT TRUE THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %, argument 1 (key_column): the table has no column %',
            p_trigger, tbl, pg_catalog.quote_ident(col)
            USING ERRCODE = 'undefined_column', HINT = 'usage: ' || usage;
    END IF;
    IF p_val IS NULL THEN
        RAISE EXCEPTION 'ratelimit: invalid key: column % is NULL', pg_catalog.quote_ident(col)
            USING ERRCODE = 'RL011',
                  HINT = pg_catalog.format('To exempt such rows, add WHEN (NEW.%s IS NOT NULL) to trigger %s.',
                                           pg_catalog.quote_ident(col), p_trigger);
    END IF;
    -- Tenants: the key must be one that the inserting role may use, and one
    -- that the table's owner may use, since the owner (or whoever it let
    -- create triggers) chose the trigger's arguments.
    PERFORM rl._check_tenant_key(prefix || p_val, NULL);
    IF EXISTS (SELECT FROM rl.tenants) THEN
        PERFORM rl._check_tenant_key(prefix || p_val, owner);
    END IF;
    -- The database clock, never rl.now_us: a session inserting rows must not
    -- be able to move its own time forward past the limit.
    d := rl._take1(prefix || p_val, lname, alg, lim, win, 0, cost, rl._clock(), true);
    IF NOT d.allowed THEN
        IF d.retry_after_us < 0 THEN
            RAISE EXCEPTION 'rate limit exceeded'
                USING ERRCODE = 'RL429',
                      DETAIL = pg_catalog.format('The cost %s is above the limit %s (%s): never admitted.', cost, lim, lname),
                      HINT = 'Lower the cost or raise the limit.';
        END IF;
        secs := (d.retry_after_us + 999999) / 1000000;
        RAISE EXCEPTION 'rate limit exceeded'
            USING ERRCODE = 'RL429',
                  DETAIL = pg_catalog.format('Retry after %s s (%s µs); limit %s: %s per %s.', secs, d.retry_after_us,
                                             lname, lim, a[4]),
                  HINT = pg_catalog.format('Wait %s seconds before inserting again.', secs);
    END IF;
END
$function$;

COMMENT ON FUNCTION rl._enforce_limit(oid,text,text[],boolean,text) IS 'rl: the definer-rights part of rl.enforce_limit(): plain values in (the trigger''s table, name, arguments and key as text), the decision on the database clock';


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
             SELECT o.now, o.algorithm, o.t, o.x, o.y, o.log, o.l AS sl, o.w AS sw, o.r AS sr,
                    rl._eval(rl._alg($2), $3, rl._interval_us($4), $6, o.algorithm, o.t, o.x, o.y, o.log, o.l, o.w, o.r, o.now, $5, true) AS r
               FROM (SELECT rl._request_now($8) AS now, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r
                       FROM rl.state s
                      WHERE s.key = $1 AND s.name = $7 AND NOT EXISTS (SELECT FROM rl.tenants)
                        AND octet_length($1) BETWEEN 1 AND 256 AND octet_length($7) BETWEEN 1 AND 256
                        AND $5 > 0) o),
         u AS (UPDATE rl.state s
                  SET (algorithm, t, x, y, log, l, w, r, expires_at) =
                      (SELECT (v.r).algorithm, (v.r).t, (v.r).x, (v.r).y, (v.r).log, (v.r).l, (v.r).w, (v.r).r, rl._expires_at(e.now, (v.r).reset_after)
                         FROM (SELECT CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = (e.algorithm, e.t, e.x, e.y, e.log, e.sl, e.sw, e.sr)
                                           THEN e.r
                                           ELSE rl._eval(rl._alg($2), $3, rl._interval_us($4), $6, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, $5, true)
                                      END AS r
                               OFFSET 0) v)
                 FROM e
                WHERE s.key = $1 AND s.name = $7
                  AND CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = (e.algorithm, e.t, e.x, e.y, e.log, e.sl, e.sw, e.sr)
                           THEN (e.r).err = 0 AND (e.r).allowed
                           ELSE (SELECT ev.err = 0 AND ev.allowed
                                   FROM rl._eval(rl._alg($2), $3, rl._interval_us($4), $6, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, $5, false) AS ev)
                      END
            RETURNING e.now, s.t, s.x,
                      (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log, (e.r).l, (e.r).w, (e.r).r) AS same,
                      CASE WHEN (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log, (e.r).l, (e.r).w, (e.r).r)
                           THEN e.r
                           ELSE rl._eval(rl._alg($2), $3, rl._interval_us($4), $6, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, 0, false)
                      END AS r)
    SELECT true, (u.r).lim, (u.r).remaining, (u.r).reset_after, 0::bigint,
           CASE WHEN u.same THEN (u.r).delay
                WHEN rl._alg($2) = 5 AND u.x - $5 * rl._interval_us($4) > 0
                THEN rl._ceil_div(u.x - $5 * rl._interval_us($4), CASE WHEN $6 = 0 THEN $3 ELSE $6 END) + u.t - u.now
                ELSE 0 END, u.now, (u.r).next_after
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
             SELECT o.now, o.algorithm, o.t, o.x, o.y, o.log, o.l AS sl, o.w AS sw, o.r AS sr,
                    rl._eval(rl._alg($2), $3, $4, $6, o.algorithm, o.t, o.x, o.y, o.log, o.l, o.w, o.r, o.now, $5, true) AS r
               FROM (SELECT rl._request_now($8) AS now, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r
                       FROM rl.state s
                      WHERE s.key = $1 AND s.name = $7 AND NOT EXISTS (SELECT FROM rl.tenants)
                        AND octet_length($1) BETWEEN 1 AND 256 AND octet_length($7) BETWEEN 1 AND 256
                        AND $5 > 0) o),
         u AS (UPDATE rl.state s
                  SET (algorithm, t, x, y, log, l, w, r, expires_at) =
                      (SELECT (v.r).algorithm, (v.r).t, (v.r).x, (v.r).y, (v.r).log, (v.r).l, (v.r).w, (v.r).r, rl._expires_at(e.now, (v.r).reset_after)
                         FROM (SELECT CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = (e.algorithm, e.t, e.x, e.y, e.log, e.sl, e.sw, e.sr)
                                           THEN e.r
                                           ELSE rl._eval(rl._alg($2), $3, $4, $6, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, $5, true)
                                      END AS r
                               OFFSET 0) v)
                 FROM e
                WHERE s.key = $1 AND s.name = $7
                  AND CASE WHEN (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = (e.algorithm, e.t, e.x, e.y, e.log, e.sl, e.sw, e.sr)
                           THEN (e.r).err = 0 AND (e.r).allowed
                           ELSE (SELECT ev.err = 0 AND ev.allowed
                                   FROM rl._eval(rl._alg($2), $3, $4, $6, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, $5, false) AS ev)
                      END
            RETURNING e.now, s.t, s.x,
                      (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log, (e.r).l, (e.r).w, (e.r).r) AS same,
                      CASE WHEN (e.r).allowed AND (s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r) = ((e.r).algorithm, (e.r).t, (e.r).x, (e.r).y, (e.r).log, (e.r).l, (e.r).w, (e.r).r)
                           THEN e.r
                           ELSE rl._eval(rl._alg($2), $3, $4, $6, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r, e.now, 0, false)
                      END AS r)
    SELECT true, (u.r).lim, (u.r).remaining, (u.r).reset_after, 0::bigint,
           CASE WHEN u.same THEN (u.r).delay
                WHEN rl._alg($2) = 5 AND u.x - $5 * $4 > 0
                THEN rl._ceil_div(u.x - $5 * $4, CASE WHEN $6 = 0 THEN $3 ELSE $6 END) + u.t - u.now
                ELSE 0 END, u.now, (u.r).next_after
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

CREATE OR REPLACE FUNCTION rl.rl_peek(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1, rate bigint DEFAULT 0, name text DEFAULT 'default'::text, now_us bigint DEFAULT NULL::bigint)
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
    -- 0014: the common call (its row there, rl.tenants empty, valid input) in one statement;
    -- anything else, or an error, the way below, which raises it.
    WITH d AS MATERIALIZED (
             SELECT rl._request_now($8) AS now, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r
               FROM rl.state s
              WHERE s.key = $1 AND s.name = $7 AND NOT EXISTS (SELECT FROM rl.tenants)
                AND octet_length($1) BETWEEN 1 AND 256 AND octet_length($7) BETWEEN 1 AND 256),
         e AS MATERIALIZED (
             SELECT d.now, rl._eval(rl._alg($2), $3, rl._interval_us($4), $6, d.algorithm, d.t, d.x, d.y, d.log, d.l, d.w, d.r, d.now, $5, false) AS r
               FROM d)
    SELECT (d.r).allowed, (d.r).lim, (d.r).remaining, (d.r).reset_after, (d.r).retry_after, (d.r).delay, d.now,
           (d.r).next_after
      INTO res FROM e d WHERE (d.r).err = 0;
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
    RETURN rl._take1($1, $7, a, $3, w, $6, $5, rl._request_now($8), false);
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
    a integer;
    res rl.decision;
BEGIN
    -- 0014: the common call (its row there, rl.tenants empty, valid input) in one statement;
    -- anything else, or an error, the way below, which raises it.
    WITH d AS MATERIALIZED (
             SELECT rl._request_now($8) AS now, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r
               FROM rl.state s
              WHERE s.key = $1 AND s.name = $7 AND NOT EXISTS (SELECT FROM rl.tenants)
                AND octet_length($1) BETWEEN 1 AND 256 AND octet_length($7) BETWEEN 1 AND 256),
         e AS MATERIALIZED (
             SELECT d.now, rl._eval(rl._alg($2), $3, $4, $6, d.algorithm, d.t, d.x, d.y, d.log, d.l, d.w, d.r, d.now, $5, false) AS r
               FROM d)
    SELECT (d.r).allowed, (d.r).lim, (d.r).remaining, (d.r).reset_after, (d.r).retry_after, (d.r).delay, d.now,
           (d.r).next_after
      INTO res FROM e d WHERE (d.r).err = 0;
    IF FOUND THEN
        RETURN res;
    END IF;
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

CREATE FUNCTION rl.rl_decide_batch(keys text[], names text[], algorithms integer[], lims bigint[], windows_us bigint[], rates bigint[], costs bigint[] DEFAULT NULL::bigint[], limit_counts integer[] DEFAULT NULL::integer[], now_us bigint[] DEFAULT NULL::bigint[], take boolean[] DEFAULT NULL::boolean[], settle boolean[] DEFAULT NULL::boolean[])
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
            OR (p_sets IS NOT NULL AND (cardinality(p_sets) <> nreq OR (nreq > 0 AND array_lower(p_sets, 1) <> 1))) THEN
        PERFORM rl._raise(10, 'rl_decide_batch: keys, costs, now_us, take and settle need one element per request, '
                              'names, algorithms, lims, windows_us and rates one per limit');
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
        IF sets[q] THEN
            best := 1;
        ELSE
            SELECT a.rs, a.best INTO rs, best
              FROM rl._all(p_algs[f : f + c - 1], p_lims[f : f + c - 1], p_wins[f : f + c - 1], p_rates[f : f + c - 1],
                           ss, p_now, p_cost, tk, p_names[f : f + c - 1]) a;
        END IF;
        IF (sets[q] AND p_cost <> 0) OR (NOT sets[q] AND tk AND p_cost > 0 AND (rs[best]).allowed) THEN
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

COMMENT ON FUNCTION rl.rl_decide_batch(text[],text[],integer[],bigint[],bigint[],bigint[],bigint[],integer[],bigint[],boolean[],boolean[]) IS 'Decides many requests (each one key, one or more limits, all or nothing: a take, a peek or a settle) in one call and one transaction; one row per limit of each request, in input order; an invalid request gets an error row. See sql/README.md.';

-- The settle functions: the take functions' signatures with delta, the
-- units to correct (the real cost minus the estimate taken), in place of
-- cost, and their trust rules: the key checked against the caller's tenant
-- prefixes, the request time honoured for trusted callers only.

CREATE FUNCTION rl.rl_settle(key text, algorithm text, lim bigint, win interval, delta bigint, rate bigint DEFAULT 0, name text DEFAULT 'default'::text, now_us bigint DEFAULT NULL::bigint)
 RETURNS rl.decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    a     integer;
    w     bigint;
    v_now bigint;
    r     rl._eval_result;
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
    v_now := coalesce(rl._request_now($8), rl._now());
    r := rl._settle1($1, $7, a, $3, w, $6, $5, v_now);
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
    a     integer;
    v_now bigint;
    r     rl._eval_result;
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    a := rl._alg($2);
    IF a = 0 THEN
        PERFORM rl._unknown_algorithm($2, $7);
    END IF;
    v_now := coalesce(rl._request_now($8), rl._now());
    r := rl._settle1($1, $7, a, $3, $4, $6, $5, v_now);
    RETURN ROW(r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, v_now, r.next_after)::rl.decision;
END
$function$;

COMMENT ON FUNCTION rl.rl_settle_us(text,text,bigint,bigint,bigint,bigint,text,bigint) IS 'rl_settle with the window in µs';

CREATE FUNCTION rl.rl_settle_decide(key text, names text[], algorithms integer[], lims bigint[], windows_us bigint[], rates bigint[], delta bigint, now_us bigint DEFAULT NULL::bigint)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN QUERY SELECT * FROM rl._settle_many($1, $2, $3, $4, $5, $6, $7, rl._request_now($8));
END
$function$;

COMMENT ON FUNCTION rl.rl_settle_decide(text,text[],integer[],bigint[],bigint[],bigint[],bigint,bigint) IS 'Settles delta units on several limits of key, all or nothing (core.SettleAll), given as rl_decide_multi takes them; one row per limit, the first deciding. See sql/README.md.';

CREATE FUNCTION rl.rl_settle_multi(key text, limits jsonb, delta bigint, now_us bigint DEFAULT NULL::bigint)
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

-- New functions are executable by PUBLIC until revoked (see 0007).
REVOKE ALL ON FUNCTION
    rl._params_valid(integer, bigint, bigint, bigint),
    rl._state_error(integer, bigint, bigint, bigint, bigint[], bigint, bigint, bigint),
    rl._explain(integer, integer, bigint, bigint, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint, bigint, boolean),
    rl._fail(integer, integer, bigint, bigint, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint, bigint, boolean, text),
    rl._sliding_window(bigint, bigint, integer, bigint, bigint, bigint, boolean, bigint, bigint, boolean, rl._eval_result),
    rl._sliding_log_carried(bigint, bigint, bigint, bigint, bigint, bigint, boolean, rl._eval_result),
    rl._bucket(integer, bigint, bigint, bigint, integer, bigint, bigint, boolean, bigint, bigint, boolean, rl._eval_result),
    rl._bucket_debt(integer, bigint, bigint, bigint, bigint, bigint, bigint, bigint, rl._eval_result),
    rl._wrap64(numeric),
    rl._gcra(bigint, bigint, bigint, integer, bigint, bigint, bigint, boolean, bigint, bigint, boolean, rl._eval_result),
    rl._carry(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint),
    rl._eval(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint, bigint, bigint, bigint, boolean),
    rl._settle_fixed(bigint, integer, bigint, bigint, bigint, bigint),
    rl._settle_sliding(bigint, bigint, integer, bigint, bigint, bigint, boolean, bigint, bigint),
    rl._settle_log(bigint, bigint, integer, bigint, bigint, bigint[], bigint, bigint),
    rl._settle_level(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, boolean, bigint, bigint),
    rl._settle(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint, bigint, bigint, bigint),
    rl._settle_all(integer[], bigint[], bigint[], bigint[], rl.state_words[], bigint, bigint, text[]),
    rl._settle1(text, text, integer, bigint, bigint, bigint, bigint, bigint),
    rl._settle_many(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint),
    rl.decide(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint, text, bigint, bigint, bigint),
    rl.lock_states(text, text[]),
    rl.lock_states_batch(text[], text[]),
    rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[], boolean[]),
    rl.rl_settle(text, text, bigint, interval, bigint, bigint, text, bigint),
    rl.rl_settle_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
    rl.rl_settle_decide(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint),
    rl.rl_settle_multi(text, jsonb, bigint, bigint)
    FROM PUBLIC;

DO $do$
BEGIN
    FOR attempt IN 1 .. 5 LOOP
        BEGIN
            GRANT EXECUTE ON FUNCTION
                rl.decide(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint, text, bigint, bigint, bigint),
                rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[], boolean[]),
                rl.rl_settle(text, text, bigint, interval, bigint, bigint, text, bigint),
                rl.rl_settle_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
                rl.rl_settle_decide(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint),
                rl.rl_settle_multi(text, jsonb, bigint, bigint)
                TO rl_app;
            GRANT EXECUTE ON FUNCTION
                rl.lock_states(text, text[]),
                rl.lock_states_batch(text[], text[])
                TO rl_admin;
            RETURN;
        EXCEPTION WHEN duplicate_object OR unique_violation OR undefined_object THEN
            IF attempt = 5 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
END
$do$;
