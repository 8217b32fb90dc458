
-- rl._alg returns the number of an algorithm name as core.ParseAlgorithm
-- accepts it, or 0 (which the decision reports as ErrAlgorithm in its turn).
CREATE FUNCTION rl._alg(name text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE name
        WHEN 'fixed_window' THEN 1 WHEN 'fixed' THEN 1
        WHEN 'sliding_window' THEN 2 WHEN 'sliding' THEN 2 WHEN 'sliding_window_counter' THEN 2
        WHEN 'sliding_log' THEN 3 WHEN 'log' THEN 3 WHEN 'sliding_window_log' THEN 3
        WHEN 'token_bucket' THEN 4 WHEN 'token' THEN 4
        WHEN 'leaky_bucket' THEN 5 WHEN 'leaky' THEN 5
        WHEN 'gcra' THEN 6
        ELSE 0
    END;

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

-- rl.algorithm_name is core.Algorithm.String.
CREATE FUNCTION rl.algorithm_name(algorithm integer) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE algorithm
        WHEN 1 THEN 'fixed_window' WHEN 2 THEN 'sliding_window' WHEN 3 THEN 'sliding_log'
        WHEN 4 THEN 'token_bucket' WHEN 5 THEN 'leaky_bucket' WHEN 6 THEN 'gcra'
        ELSE 'unknown'
    END;

-- rl._unknown_algorithm raises RL001 for an algorithm name rl._alg does not
-- know, after checking the limit name (the check order of rl._take1).
CREATE FUNCTION rl._unknown_algorithm(p_algorithm text, p_name text) RETURNS void
    LANGUAGE plpgsql
AS $fn$
BEGIN
    PERFORM rl._check_key(p_name, 'limit name');
    RAISE EXCEPTION USING ERRCODE = 'RL001',
        MESSAGE = pg_catalog.format('ratelimit: algorithm %s: unknown (want %s, %s, %s, %s, %s or %s)',
            coalesce(quote_literal(p_algorithm), 'NULL'), rl.algorithm_name(1), rl.algorithm_name(2),
            rl.algorithm_name(3), rl.algorithm_name(4), rl.algorithm_name(5), rl.algorithm_name(6)),
        HINT = 'The short names fixed, sliding, log, token and leaky are accepted too.';
END
$fn$;
