
-- rl._error_message returns core.Error.Error() of a code, with its name.
CREATE FUNCTION rl._error_message(code integer) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN CASE code
        WHEN 1 THEN 'ratelimit: unknown algorithm (ErrAlgorithm)'
        WHEN 2 THEN 'ratelimit: limit out of range (ErrLimit)'
        WHEN 3 THEN 'ratelimit: window out of range (ErrWindow)'
        WHEN 4 THEN 'ratelimit: rate out of range (ErrRate)'
        WHEN 5 THEN 'ratelimit: limit × window too large (ErrUnits)'
        WHEN 6 THEN 'ratelimit: cost out of range (ErrCost)'
        WHEN 7 THEN 'ratelimit: time out of range (ErrTime)'
        WHEN 8 THEN 'ratelimit: corrupt state (ErrState)'
        WHEN 9 THEN 'ratelimit: sliding log storage too small (ErrLogCapacity)'
        WHEN 10 THEN 'ratelimit: bad limit list (ErrLimits)'
        ELSE 'ratelimit: unknown error'
    END;

-- rl._limit_detail is the DETAIL of an error of limit i (0-based) of a
-- multi-limit call: 'limit index i', and its name when names are known.
CREATE FUNCTION rl._limit_detail(i integer, p_names text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 'limit index ' || i || CASE WHEN p_names IS NULL THEN ''
                                       ELSE pg_catalog.format(' (name %L)', p_names[i + 1]) END;

-- rl._call_error is core checkCall.
CREATE FUNCTION rl._call_error(p_now bigint, p_cost bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN p_now NOT BETWEEN 0 AND rl._max_time() THEN 7
        WHEN p_cost NOT BETWEEN 0 AND rl._max_cost() THEN 6
        ELSE 0
    END;

-- rl._limit_error is core Limit.check: 0 or the core.Error code. All
-- arguments non-NULL (rl._eval replaces NULLs first).
CREATE FUNCTION rl._limit_error(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN NOT rl._alg_valid(p_alg) THEN 1
        WHEN p_lim NOT BETWEEN 1 AND rl._max_limit() OR (p_alg = 3 AND p_lim > rl._max_log_limit()) THEN 2
        WHEN p_win NOT BETWEEN 1 AND rl._max_window() THEN 3
        WHEN rl._windowed(p_alg) AND p_rate <> 0 OR NOT rl._windowed(p_alg) AND p_rate NOT BETWEEN 0 AND rl._max_limit() THEN 4
        WHEN rl._units_bounded(p_alg) AND p_lim > rl._max_units() / greatest(p_win, 1) THEN 5
        ELSE 0
    END;

-- rl._params_valid is core paramsValid: l, w and r are the parameters of a
-- valid limit of algorithm alg, r its effective rate (0 for the window
-- algorithms, at least 1 for the others).
CREATE FUNCTION rl._params_valid(alg integer, l bigint, w bigint, r bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (rl._windowed(alg) OR r >= 1) AND rl._limit_error(alg, l, w, r) = 0;

-- rl._raise raises core error code as SQLSTATE RL0NN. detail may be NULL.
CREATE FUNCTION rl._raise(code integer, detail text) RETURNS void
    LANGUAGE plpgsql
AS $fn$
BEGIN
    IF detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'RL0' || lpad(code::text, 2, '0'), MESSAGE = rl._error_message(code);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'RL0' || lpad(code::text, 2, '0'), MESSAGE = rl._error_message(code),
        DETAIL = detail;
END
$fn$;

-- rl._state_error is core checkState: 8 (ErrState) for a corrupt state.
-- Its recorded parameters are those of a valid limit of its algorithm, or
-- all 0 (a fresh state has none); its words are its algorithm's.
CREATE FUNCTION rl._state_error(s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_l bigint,
                                s_w bigint, s_r bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN s_t NOT BETWEEN 0 AND rl._max_state_value() OR s_x NOT BETWEEN 0 AND rl._max_state_value()
             OR s_y NOT BETWEEN 0 AND rl._max_state_value() THEN 8
        WHEN (s_l <> 0 OR s_w <> 0 OR s_r <> 0) AND NOT rl._params_valid(s_alg, s_l, s_w, s_r) THEN 8
        WHEN s_alg = 0 THEN CASE WHEN s_t <> 0 OR s_x <> 0 OR s_y <> 0 OR s_l <> 0 OR s_w <> 0 OR s_r <> 0
                                      OR cardinality(s_log) <> 0 THEN 8 ELSE 0 END
        -- The algorithm's words (rl._<name>_state_error), 8 for another
        -- number: inlined, as this function is.
        ELSE rl._alg_state_error(s_alg, s_t, s_x, s_y, s_log)
    END;

-- rl._explain is the message of an error: the value at fault and why.
-- Arguments as the caller passed them (NULL prints as NULL); p_settle: the
-- call was a settle, whose cost is a delta.
CREATE FUNCTION rl._explain(code integer, p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
                            p_now bigint, p_cost bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint,
                            s_log bigint[], s_l bigint, s_w bigint, s_r bigint, p_settle boolean) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 'ratelimit: ' || CASE code
        WHEN 1 THEN pg_catalog.format('algorithm %s: unknown (want %s)',
            coalesce(p_alg::text, 'NULL'), rl._algorithm_list('numbered'))
        WHEN 2 THEN pg_catalog.format('limit %s: outside [1, %s] for %s', coalesce(p_lim::text, 'NULL'),
            CASE WHEN p_alg = 3 THEN rl._max_log_limit() ELSE rl._max_limit() END, rl.algorithm_name(p_alg))
        WHEN 3 THEN pg_catalog.format('window %s µs: outside [1, %s] µs', coalesce(p_win::text, 'NULL'), rl._max_window())
        WHEN 4 THEN CASE WHEN rl._windowed(p_alg)
            THEN pg_catalog.format('rate %s: must be 0 or absent for %s (rate applies to %s)',
                coalesce(p_rate::text, 'NULL'), rl.algorithm_name(p_alg), rl._algorithm_list('rated'))
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

-- rl.algorithm_id returns the number of an algorithm name accepted by
-- core.ParseAlgorithm ('token_bucket', 'token', ...); unknown names raise RL001.
CREATE FUNCTION rl.algorithm_id(name text) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    a integer := rl._alg(name);
BEGIN
    IF a = 0 THEN
        PERFORM rl._raise(1, format('unknown algorithm name %L', name));
    END IF;
    RETURN a;
END
$fn$;

-- rl._single_problem is the first error of a call of one limit (rl_allow,
-- rl_peek, rl_settle and their _us forms) that its arguments alone decide,
-- in the order the decision would report it, as OUT values (all NULL when
-- the arguments are good): the key and the tenant's prefixes, the
-- algorithm, the window given as an interval (p_win_iv, when p_interval),
-- the limit name, then the limit, the time and the cost (p_settle: a
-- settle's delta). The caller raises it itself, so that the error carries
-- no CONTEXT lines of rl's internal functions. Only a corrupt stored state
-- (RL008) and a settle's debt are found later, by the decision.
CREATE FUNCTION rl._single_problem(p_key text, p_name text, p_algorithm text, p_lim bigint, p_win bigint,
                                   p_interval boolean, p_win_iv interval, p_rate bigint, p_cost bigint,
                                   p_now bigint, p_settle boolean,
                                   OUT code text, OUT message text, OUT detail text, OUT hint text)
    LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $fn$
DECLARE
    a integer := rl._alg(p_algorithm);
    e integer;
BEGIN
    SELECT * INTO code, message, detail, hint FROM rl._tenant_problem(p_key, NULL);
    IF code IS NOT NULL THEN
        RETURN;
    END IF;
    IF (octet_length(p_name) BETWEEN 1 AND 256) IS NOT TRUE THEN
        SELECT * INTO code, message, detail, hint FROM rl._key_problem(p_name, 'limit name');
        RETURN;
    END IF;
    IF a = 0 THEN
        code := 'RL001';
        message := pg_catalog.format('ratelimit: algorithm %s: unknown (want %s)',
                                     coalesce(quote_literal(p_algorithm), 'NULL'), rl._algorithm_list('plain'));
        hint := 'The short names fixed, sliding, log, token and leaky are accepted too.';
        RETURN;
    END IF;
    e := coalesce(nullif(rl._limit_error(a, coalesce(p_lim, 0), coalesce(p_win, 0), coalesce(p_rate, -1)), 0),
                  CASE WHEN NOT p_settle THEN nullif(rl._call_error(coalesce(p_now, -1), coalesce(p_cost, -1)), 0)
                       ELSE coalesce(nullif(rl._call_error(coalesce(p_now, -1), 0), 0),
                                     CASE WHEN (p_cost BETWEEN -rl._max_cost() AND rl._max_cost()) IS NOT TRUE THEN 6 END)
                  END,
                  0);
    IF e = 0 THEN
        RETURN;
    END IF;
    code := 'RL0' || pg_catalog.lpad(e::text, 2, '0');
    IF e = 3 AND p_interval THEN
        message := pg_catalog.format('ratelimit: window %s: outside [1 µs, %s µs]', coalesce(quote_literal(p_win_iv), 'NULL'),
                                     rl._max_window());
        hint := 'The longest window is about 31.7 years.';
        RETURN;
    END IF;
    message := rl._explain(e, a, p_lim, p_win, p_rate, p_now, p_cost, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                           p_settle);
END
$fn$;

-- rl._multi_problem is the first error of a call of several limits
-- (rl_decide_multi, rl_settle_decide, and the jsonb forms once their limits
-- are read) that its arguments alone decide, as OUT values (all NULL when the
-- arguments are good): the key and the tenant's prefixes, the limit list
-- (none, arrays of different lengths), each limit's name, then each limit's
-- parameters, the time and the cost (p_settle: a settle's delta), limit by
-- limit, as the decision checks them. With a shadow limit (p_shadows) in the
-- order of the shadow way: a take checks the shadow limits first
-- (rl._all_shadow), a settle the time and the delta first (rl._settle_shadow).
-- The caller raises it itself, so that the error carries one CONTEXT line,
-- its own. Every limit's parameters come before any stored state, as in Go's
-- pgstore: a corrupt stored state (RL008) and a settle's debt are found
-- later, by the decision.
CREATE FUNCTION rl._multi_problem(p_key text, p_names text[], p_algs integer[], p_lims bigint[], p_wins bigint[],
                                  p_rates bigint[], p_cost bigint, p_now bigint, p_settle boolean, p_shadows boolean[],
                                  OUT code text, OUT message text, OUT detail text, OUT hint text)
    LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $fn$
DECLARE
    n   integer := cardinality(p_names);
    sh  boolean := true = ANY (p_shadows);
    ord integer[];
    e   integer;
    i   integer;
BEGIN
    SELECT * INTO code, message, detail, hint FROM rl._tenant_problem(p_key, NULL);
    IF code IS NOT NULL THEN
        RETURN;
    END IF;
    IF n IS NULL OR n = 0 OR array_ndims(p_names) <> 1 OR array_lower(p_names, 1) <> 1 THEN
        code := 'RL010';
        message := rl._error_message(10);
        detail := 'limit index 0: no limits';
        RETURN;
    END IF;
    IF cardinality(p_algs) IS DISTINCT FROM n OR cardinality(p_lims) IS DISTINCT FROM n
            OR cardinality(p_wins) IS DISTINCT FROM n OR cardinality(p_rates) IS DISTINCT FROM n
            OR array_lower(p_algs, 1) <> 1 OR array_lower(p_lims, 1) <> 1
            OR array_lower(p_wins, 1) <> 1 OR array_lower(p_rates, 1) <> 1 THEN
        code := 'RL010';
        message := rl._error_message(10);
        detail := 'limit index 0: the parameter arrays differ in length';
        RETURN;
    END IF;
    FOR i IN 1 .. n LOOP
        IF (octet_length(p_names[i]) BETWEEN 1 AND 256) IS NOT TRUE THEN
            SELECT * INTO code, message, detail, hint FROM rl._key_problem(p_names[i], 'limit name');
            RETURN;
        END IF;
        IF p_names[i] = ANY (p_names[1 : i - 1]) THEN
            code := 'RL010';
            message := rl._error_message(10);
            detail := pg_catalog.format('limit index %s: duplicate name %L', i - 1, p_names[i]);
            RETURN;
        END IF;
    END LOOP;
    IF sh AND p_settle THEN
        e := CASE WHEN (p_now BETWEEN 0 AND rl._max_time()) IS NOT TRUE THEN 7
                  WHEN (p_cost BETWEEN -rl._max_cost() AND rl._max_cost()) IS NOT TRUE THEN 6
                  ELSE 0 END;
        IF e <> 0 THEN
            code := 'RL0' || pg_catalog.lpad(e::text, 2, '0');
            message := rl._explain(e, p_algs[1], p_lims[1], p_wins[1], p_rates[1], p_now, p_cost, NULL, NULL, NULL, NULL,
                                   NULL, NULL, NULL, NULL, true);
            detail := rl._limit_detail(0, p_names);
            RETURN;
        END IF;
    END IF;
    ord := CASE WHEN sh AND NOT p_settle
                THEN ARRAY(SELECT j FROM generate_series(1, n) AS j ORDER BY NOT coalesce(p_shadows[j], false), j)
                ELSE ARRAY(SELECT generate_series(1, n)) END;
    FOREACH i IN ARRAY ord LOOP
        e := coalesce(nullif(rl._limit_error(coalesce(p_algs[i], 0), coalesce(p_lims[i], 0), coalesce(p_wins[i], 0),
                                             coalesce(p_rates[i], -1)), 0),
                      CASE WHEN NOT p_settle THEN nullif(rl._call_error(coalesce(p_now, -1), coalesce(p_cost, -1)), 0)
                           ELSE coalesce(nullif(rl._call_error(coalesce(p_now, -1), 0), 0),
                                         CASE WHEN (p_cost BETWEEN -rl._max_cost() AND rl._max_cost()) IS NOT TRUE THEN 6 END)
                      END,
                      0);
        IF e <> 0 THEN
            code := 'RL0' || pg_catalog.lpad(e::text, 2, '0');
            message := rl._explain(e, p_algs[i], p_lims[i], p_wins[i], p_rates[i], p_now, p_cost, NULL, NULL, NULL, NULL,
                                   NULL, NULL, NULL, NULL, p_settle);
            detail := rl._limit_detail(i - 1, p_names);
            RETURN;
        END IF;
    END LOOP;
END
$fn$;
