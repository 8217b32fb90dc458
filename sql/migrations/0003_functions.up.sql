-- 0003: the table functions. Each decision is one call, one round trip:
-- lock the state rows (SELECT ... FOR UPDATE), decide with rl._eval, write
-- the new state only when the call admitted a cost above 0.
--
-- Time: now_us NULL means the session's rl.now_us setting when set (tests and
-- replays), else the database clock, so every app instance shares one clock.
-- The trigger function (0004) always uses the database clock.
SET LOCAL search_path = pg_catalog, pg_temp;

-- The result of rl_allow and rl_peek (core.Decision, durations in µs).
CREATE TYPE rl.decision AS (
    allowed        boolean,
    lim            bigint,  -- the limit's quota, capacity or burst
    remaining      bigint,
    reset_after_us bigint,
    retry_after_us bigint,  -- 0 when allowed; -1: never (cost above the limit)
    delay_us       bigint,  -- leaky_bucket: wait this long before proceeding
    now_us         bigint   -- the time the call was decided at
);

-- One row of rl_allow_multi and rl_peek_multi.
CREATE TYPE rl.multi_decision AS (
    ord            integer, -- position in the limits array (0-based)
    name           text,
    allowed        boolean, -- this limit's decision; the call admitted iff all rows are allowed
    lim            bigint,
    remaining      bigint,
    reset_after_us bigint,
    retry_after_us bigint,
    delay_us       bigint,
    deciding       boolean, -- the row core.TakeAll returns as its index
    now_us         bigint
);

-- rl._clock: the database clock, clock_timestamp(), in µs since the epoch.
CREATE FUNCTION rl._clock() RETURNS bigint
    LANGUAGE sql VOLATILE PARALLEL SAFE
    RETURN (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;

-- rl._now: the rl.now_us setting if set, else rl._clock(). Only the table
-- functions read it: their callers could pass now_us anyway. The trigger does
-- not: whoever inserts must not choose the time.
CREATE FUNCTION rl._now() RETURNS bigint
    LANGUAGE plpgsql VOLATILE PARALLEL SAFE
AS $fn$
DECLARE
    v text := current_setting('rl.now_us', true);
BEGIN
    IF v IS NULL OR v = '' THEN
        RETURN rl._clock();
    END IF;
    IF v !~ '^-?[0-9]{1,19}$' THEN
        RAISE EXCEPTION 'ratelimit: rl.now_us must be an integer (µs since the Unix epoch), not %', quote_literal(v)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v::bigint;
END
$fn$;

-- rl._check_key raises RL011 unless key is 1 to 256 bytes. what names it.
CREATE FUNCTION rl._check_key(key text, what text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'ratelimit: invalid %: it must be 1 to 256 bytes', what
            USING ERRCODE = 'RL011', DETAIL = format('The %s is NULL.', what);
    END IF;
    IF key = '' OR octet_length(key) > 256 THEN
        RAISE EXCEPTION 'ratelimit: invalid %: it must be 1 to 256 bytes', what
            USING ERRCODE = 'RL011', DETAIL = format('The %s is %s bytes long.', what, octet_length(key));
    END IF;
END
$fn$;

-- rl._interval_us converts a window interval to µs (extract(epoch): a month
-- is 30 days, a year 365.25 days), clamped to [-1, 10^15 + 1] so that an
-- out-of-range window is reported as ErrWindow in check order.
CREATE FUNCTION rl._interval_us(win interval) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN greatest(-1, least(1000000000000001, extract(epoch FROM win) * 1000000))::bigint;

-- rl._jint reads an integer member of a limits element: NULL when missing,
-- clamped to bigint (out-of-range values are then reported by the decision).
CREATE FUNCTION rl._jint(v jsonb, what text, i integer) RETURNS bigint
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
DECLARE
    n numeric;
BEGIN
    IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(v) <> 'number' THEN
        RAISE EXCEPTION 'ratelimit: limits[%].% must be an integer, not %', i, what, v
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    n := v::numeric;
    IF n <> trunc(n) THEN
        RAISE EXCEPTION 'ratelimit: limits[%].% must be an integer, not %', i, what, v
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN greatest(-9223372036854775808, least(9223372036854775807, n))::bigint;
END
$fn$;

-- rl._parse_limits reads the limits array of rl_allow_multi:
--   [{"name": "burst", "algorithm": "token_bucket", "limit": 10, "window_us": 1000000, "rate": 0}, ...]
-- algorithm is a name (as rl_allow takes it) or its number; "window" (an
-- interval string such as "1 minute") may replace "window_us"; rate is
-- optional. Names must be distinct. A malformed list raises RL010.
CREATE FUNCTION rl._parse_limits(limits jsonb,
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

-- rl._take1 decides one limit on one key and stores the new state: core.Take
-- (p_take) or core.Peek (no lock, no write) against the row (key, name).
CREATE FUNCTION rl._take1(p_key text, p_name text, p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
                          p_cost bigint, p_now bigint, p_take boolean)
    RETURNS rl.decision
    LANGUAGE plpgsql
AS $fn$
DECLARE
    s_alg   integer;
    s_t     bigint;
    s_x     bigint;
    s_y     bigint;
    s_log   bigint[];
    have    boolean;
    r       rl._eval_result;
    attempt integer := 0;
BEGIN
    -- Each distinct PL/pgSQL expression is compiled once per transaction and
    -- every statement has a cost: the common path runs few (see sql/README.md,
    -- "Durability and speed").
    IF (octet_length(p_key) BETWEEN 1 AND 256 AND octet_length(p_name) BETWEEN 1 AND 256) IS NOT TRUE THEN
        PERFORM rl._check_key(p_key, 'key');
        PERFORM rl._check_key(p_name, 'limit name');
    END IF;
    IF p_now IS NULL THEN
        -- rl._now() without a call when rl.now_us is not set.
        p_now := CASE WHEN coalesce(current_setting('rl.now_us', true), '') = '' THEN rl._clock() ELSE rl._now() END;
    END IF;
    LOOP
        IF p_take THEN
            SELECT s.algorithm, s.t, s.x, s.y, s.log INTO s_alg, s_t, s_x, s_y, s_log
              FROM rl.state s WHERE s.key = p_key AND s.name = p_name FOR UPDATE;
        ELSE
            SELECT s.algorithm, s.t, s.x, s.y, s.log INTO s_alg, s_t, s_x, s_y, s_log
              FROM rl.state s WHERE s.key = p_key AND s.name = p_name;
        END IF;
        have := FOUND; -- not found: the NULLs read as a fresh state
        r := rl._eval(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, s_log, p_now, p_cost, p_take);
        IF r.err <> 0 THEN
            PERFORM rl._raise(r.err, NULL);
        END IF;
        -- Denied, peeked or cost 0: the state is unchanged; write nothing.
        EXIT WHEN NOT p_take OR NOT r.allowed OR p_cost = 0;
        IF have THEN
            UPDATE rl.state s
               SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log,
                   expires_at = p_now + r.reset_after
             WHERE s.key = p_key AND s.name = p_name;
            EXIT;
        END IF;
        -- A new key: whoever inserts first wins; the loser decides again
        -- against the winner's row (READ COMMITTED sees it on the next
        -- statement; REPEATABLE READ raises a serialization failure).
        INSERT INTO rl.state AS s (key, name, algorithm, t, x, y, log, expires_at)
        VALUES (p_key, p_name, r.algorithm, r.t, r.x, r.y, r.log, p_now + r.reset_after)
        ON CONFLICT DO NOTHING;
        EXIT WHEN FOUND;
        attempt := attempt + 1;
        IF attempt >= 100 THEN
            RAISE EXCEPTION 'ratelimit: the state row kept changing; retry the transaction'
                USING ERRCODE = 'serialization_failure';
        END IF;
    END LOOP;
    RETURN ROW(r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, p_now)::rl.decision;
END
$fn$;

-- rl._take_many decides several limits on one key, all or nothing
-- (core.TakeAll / core.PeekAll). Rows are locked in name order (COLLATE "C",
-- i.e. bytewise), creating missing ones in passing, so concurrent calls on
-- overlapping names cannot deadlock; decisions and the returned index follow
-- the caller's order. Other writers of rl.state must lock the same way (see
-- sql/README.md, "Locking protocol").
CREATE FUNCTION rl._take_many(p_key text, p_names text[], p_algs integer[], p_lims bigint[], p_wins bigint[],
                              p_rates bigint[], p_cost bigint, p_now bigint, p_take boolean)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plpgsql
AS $fn$
DECLARE
    n        integer := cardinality(p_names);
    lock_ord integer[];
    ss       rl.state_words[];
    have     boolean[];
    rs       rl._eval_result[];
    r        rl._eval_result;
    st       rl.state_words;
    created  text[] := '{}';
    denied   integer;
    best     integer;
    i        integer;
    tries    integer;
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
    IF p_now IS NULL THEN
        -- rl._now() without a call when rl.now_us is not set.
        p_now := CASE WHEN coalesce(current_setting('rl.now_us', true), '') = '' THEN rl._clock() ELSE rl._now() END;
    END IF;
    lock_ord := ARRAY(SELECT j FROM generate_subscripts(p_names, 1) AS j ORDER BY p_names[j] COLLATE "C");
    -- Lock (take) or read (peek) the rows in name order. A missing row is
    -- created fresh at once, at its place in that order, so every session
    -- acquires a key's rows in one order and none can wait for a row while
    -- holding one that the other waits for. Fresh rows that end up unused
    -- (denied, cost 0) are deleted again: the call leaves nothing behind.
    FOREACH i IN ARRAY lock_ord LOOP
        tries := 0;
        LOOP
            IF p_take THEN
                SELECT s.algorithm, s.t, s.x, s.y, s.log INTO st
                  FROM rl.state s WHERE s.key = p_key AND s.name = p_names[i] FOR UPDATE;
            ELSE
                SELECT s.algorithm, s.t, s.x, s.y, s.log INTO st
                  FROM rl.state s WHERE s.key = p_key AND s.name = p_names[i];
            END IF;
            EXIT WHEN FOUND OR NOT p_take; -- not found: st is NULL, a fresh state
            tries := tries + 1;
            IF tries > 100 THEN
                RAISE EXCEPTION 'ratelimit: the state row kept changing; retry the transaction'
                    USING ERRCODE = 'serialization_failure';
            END IF;
            -- Waits if another session is creating the same row; READ
            -- COMMITTED then sees its row on the next SELECT (REPEATABLE READ
            -- raises a serialization failure instead).
            INSERT INTO rl.state AS s (key, name) VALUES (p_key, p_names[i]) ON CONFLICT DO NOTHING;
            IF FOUND THEN
                created := created || p_names[i];
            END IF;
        END LOOP;
        ss[i] := st;
    END LOOP;
    -- core.all: the first pass decides without changing anything.
    denied := 0; -- 1-based; 0: none
    FOR i IN 1 .. n LOOP
        st := ss[i];
        r := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                      p_now, p_cost, false);
        IF r.err <> 0 THEN
            PERFORM rl._raise(r.err, format('limit index %s (name %L)', i - 1, p_names[i]));
        END IF;
        rs[i] := r;
        IF NOT r.allowed THEN
            -- later(r.retry_after, rs[denied].retry_after): Never (-1) counts as latest.
            IF denied = 0 THEN
                denied := i;
            ELSIF (rs[denied]).retry_after <> -1
                  AND (r.retry_after = -1 OR r.retry_after > (rs[denied]).retry_after) THEN
                denied := i;
            END IF;
        END IF;
    END LOOP;
    IF denied > 0 THEN
        best := denied;
        -- Nothing is taken: a limit that would have admitted the cost
        -- reports its state as it is (its decision for cost 0).
        IF p_cost > 0 THEN
            FOR i IN 1 .. n LOOP
                CONTINUE WHEN NOT (rs[i]).allowed;
                st := ss[i];
                rs[i] := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                                  p_now, 0, false);
            END LOOP;
        END IF;
    ELSE
        best := 1;
        FOR i IN 1 .. n LOOP
            IF p_take THEN
                st := ss[i];
                r := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                              p_now, p_cost, true);
                IF r.err <> 0 THEN -- not reached: the first pass accepted the same input
                    PERFORM rl._raise(r.err, format('limit index %s (name %L)', i - 1, p_names[i]));
                END IF;
                rs[i] := r;
            END IF;
            IF (rs[i]).remaining < (rs[best]).remaining THEN
                best := i;
            END IF;
        END LOOP;
        IF p_take AND p_cost > 0 THEN
            FOREACH i IN ARRAY lock_ord LOOP
                r := rs[i];
                UPDATE rl.state s
                   SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log,
                       expires_at = p_now + r.reset_after
                 WHERE s.key = p_key AND s.name = p_names[i];
            END LOOP;
            created := '{}';
        END IF;
    END IF;
    IF cardinality(created) > 0 THEN
        DELETE FROM rl.state s WHERE s.key = p_key AND s.name = ANY (created);
    END IF;
    FOR i IN 1 .. n LOOP
        r := rs[i];
        RETURN NEXT ROW(i - 1, p_names[i], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay,
                        i = best, p_now)::rl.multi_decision;
    END LOOP;
    RETURN;
END
$fn$;

-- rl.rl_allow takes cost units from the limit name on key, if they fit:
--   SELECT * FROM rl.rl_allow('user:42', 'token_bucket', 100, '1 minute');
-- algorithm: a name core.ParseAlgorithm accepts; lim: quota, capacity or
-- burst; win: the window (buckets and gcra: the period in which rate units
-- come back; rate 0 means lim). now_us NULL: rl.now_us if set, else the
-- database clock. Denied calls and cost 0 change nothing.
CREATE FUNCTION rl.rl_allow(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1,
                            rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    RETURN rl._take1($1, $7, rl._alg($2), $3, rl._interval_us($4), $6, $5, $8, true);
END
$fn$;

-- rl.rl_allow_us is rl.rl_allow with the window in µs.
CREATE FUNCTION rl.rl_allow_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1,
                               rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    RETURN rl._take1($1, $7, rl._alg($2), $3, $4, $6, $5, $8, true);
END
$fn$;

-- rl.rl_peek returns what rl_allow with the same arguments would return,
-- changing nothing and taking no lock. Pass cost => 0 to read the current
-- remaining quota.
CREATE FUNCTION rl.rl_peek(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1,
                           rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    RETURN rl._take1($1, $7, rl._alg($2), $3, rl._interval_us($4), $6, $5, $8, false);
END
$fn$;

-- rl.rl_peek_us is rl.rl_peek with the window in µs.
CREATE FUNCTION rl.rl_peek_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1,
                              rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    RETURN rl._take1($1, $7, rl._alg($2), $3, $4, $6, $5, $8, false);
END
$fn$;

-- rl.rl_allow_multi takes cost from every limit in limits on key, or from
-- none: if any limit denies, nothing changes. One row per limit, in order;
-- the deciding row is the denying limit with the latest retry-after, or when
-- admitted the limit with the fewest remaining.
CREATE FUNCTION rl.rl_allow_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    p record;
BEGIN
    p := rl._parse_limits($2);
    RETURN QUERY SELECT * FROM rl.rl_decide_multi($1, p.names, p.algs, p.lims, p.wins, p.rates, $3, $4, true);
END
$fn$;

-- rl.rl_peek_multi returns what rl_allow_multi would return, changing nothing.
CREATE FUNCTION rl.rl_peek_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    p record;
BEGIN
    p := rl._parse_limits($2);
    RETURN QUERY SELECT * FROM rl.rl_decide_multi($1, p.names, p.algs, p.lims, p.wins, p.rates, $3, $4, false);
END
$fn$;

-- rl.rl_decide_multi is rl_allow_multi (take true) and rl_peek_multi (take
-- false) with the limits as parallel arrays instead of JSON, for programs:
-- element i of names, algorithms (core.Algorithm numbers), lims, windows_us
-- and rates is limit i. Unequal lengths, an empty list or a duplicate name
-- raise RL010.
CREATE FUNCTION rl.rl_decide_multi(key text, names text[], algorithms integer[], lims bigint[], windows_us bigint[],
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

-- rl.rl_reset forgets the state of limit name on key (NULL: every limit of
-- the key) and returns the number of rows deleted.
CREATE FUNCTION rl.rl_reset(key text, name text DEFAULT NULL) RETURNS bigint
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

-- rl.rl_expire deletes up to batch idle rows (expires_at <= now_us; NULL:
-- rl.now_us or the database clock), oldest first, skipping rows locked by a
-- decision in flight, and returns how many it deleted. batch NULL: no limit.
-- Call it periodically (e.g. every minute from pg_cron or the app) until it
-- returns less than batch.
CREATE FUNCTION rl.rl_expire(now_us bigint DEFAULT NULL, batch integer DEFAULT 10000) RETURNS bigint
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
