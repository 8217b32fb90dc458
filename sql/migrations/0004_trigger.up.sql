-- 0004: rl.enforce_limit, a trigger function that rate-limits row inserts.
--
--   CREATE TRIGGER comments_rate_limit
--       BEFORE INSERT ON comments
--       FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit('user_id', 'sliding_window', '5', '1 minute');
--
-- Arguments (TG_ARGV): key column, algorithm, limit, window (an interval),
-- then optionally cost (default 1), a key prefix (default '') and the limit
-- name (default '<schema>.<table>'). The key is prefix || the column's value
-- as text, read with to_jsonb(NEW) ->> column: values are data, never SQL.
-- A denied row raises SQLSTATE RL429 'rate limit exceeded'; DETAIL gives
-- the retry-after in seconds (rounded up) and µs. Time is the database clock
-- (the rl.now_us setting is ignored here: inserters must not choose it).
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE FUNCTION rl.enforce_limit() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    usage  constant text := 'rl.enforce_limit(key_column, algorithm, limit, window [, cost [, key_prefix [, name]]])';
    col    text;
    lim    bigint;
    win    bigint;
    cost   bigint := 1;
    prefix text := '';
    lname  text;
    rec    jsonb;
    val    text;
    d      rl.decision;
    secs   bigint;
BEGIN
    IF TG_WHEN <> 'BEFORE' OR TG_LEVEL <> 'ROW' OR TG_OP NOT IN ('INSERT', 'UPDATE') THEN
        RAISE EXCEPTION 'ratelimit: % must run BEFORE INSERT (or UPDATE) FOR EACH ROW', usage
            USING ERRCODE = 'invalid_object_definition';
    END IF;
    IF TG_NARGS < 4 OR TG_NARGS > 7 THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %.% has % arguments; usage: %',
            TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_NARGS, usage
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    col := TG_ARGV[0];
    IF TG_ARGV[2] !~ '^\s*-?[0-9]{1,19}\s*$' THEN
        RAISE EXCEPTION 'ratelimit: trigger %: limit must be an integer, not %', TG_NAME, quote_literal(TG_ARGV[2])
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    lim := TG_ARGV[2]::bigint;
    win := rl._interval_us(TG_ARGV[3]::interval);
    IF TG_NARGS > 4 AND TG_ARGV[4] <> '' THEN
        IF TG_ARGV[4] !~ '^\s*-?[0-9]{1,19}\s*$' THEN
            RAISE EXCEPTION 'ratelimit: trigger %: cost must be an integer, not %', TG_NAME, quote_literal(TG_ARGV[4])
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        cost := TG_ARGV[4]::bigint;
    END IF;
    IF TG_NARGS > 5 THEN
        prefix := TG_ARGV[5];
    END IF;
    lname := TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME;
    IF TG_NARGS > 6 AND TG_ARGV[6] <> '' THEN
        lname := TG_ARGV[6];
    END IF;
    rec := to_jsonb(NEW);
    IF NOT rec ? col THEN
        RAISE EXCEPTION 'ratelimit: trigger %: table %.% has no column %', TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME,
            quote_ident(col)
            USING ERRCODE = 'undefined_column';
    END IF;
    val := rec ->> col;
    IF val IS NULL THEN
        RAISE EXCEPTION 'ratelimit: invalid key: column % is NULL', quote_ident(col)
            USING ERRCODE = 'RL011',
                  HINT = format('To exempt such rows, add WHEN (NEW.%s IS NOT NULL) to trigger %s.', quote_ident(col), TG_NAME);
    END IF;
    -- The database clock, never rl.now_us: a session inserting rows must not
    -- be able to move its own time forward past the limit.
    d := rl._take1(prefix || val, lname, rl._alg(TG_ARGV[1]), lim, win, 0, cost, rl._clock(), true);
    IF NOT d.allowed THEN
        IF d.retry_after_us < 0 THEN
            RAISE EXCEPTION 'rate limit exceeded'
                USING ERRCODE = 'RL429',
                      DETAIL = format('The cost %s is above the limit %s (%s): never admitted.', cost, lim, lname),
                      HINT = 'Lower the cost or raise the limit.';
        END IF;
        secs := (d.retry_after_us + 999999) / 1000000;
        RAISE EXCEPTION 'rate limit exceeded'
            USING ERRCODE = 'RL429',
                  DETAIL = format('Retry after %s s (%s µs); limit %s: %s per %s.', secs, d.retry_after_us, lname,
                                  lim, TG_ARGV[3]),
                  HINT = format('Wait %s seconds before inserting again.', secs);
    END IF;
    RETURN NEW;
END
$fn$;
