-- 0012 down: rl._caller and rl._trusted as in 0007, rl.enforce_limit as in
-- 0008 (SECURITY DEFINER, reading the row itself).
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION rl._caller() RETURNS name
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE WHEN pg_catalog.current_setting('role') = 'none' THEN session_user
                ELSE pg_catalog.current_setting('role')::name END;
COMMENT ON FUNCTION rl._caller() IS NULL;

CREATE OR REPLACE FUNCTION rl._trusted(who name) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
    RESET search_path
    RETURN pg_catalog.pg_has_role(who, CURRENT_USER, 'MEMBER')
        OR coalesce(pg_catalog.pg_has_role(who, pg_catalog.to_regrole('rl_admin'), 'MEMBER'), false);

DROP FUNCTION rl._tenant_role(name);
DROP FUNCTION rl._enforce_limit(oid, text, text[], boolean, text);

-- rl.enforce_limit, as in 0008.
CREATE OR REPLACE FUNCTION rl.enforce_limit() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    usage  constant text := 'rl.enforce_limit(key_column, algorithm, limit, window [, cost [, key_prefix [, name]]])';
    col    text;
    alg    integer;
    lim    bigint;
    win    bigint;
    cost   bigint := 1;
    prefix text := '';
    lname  text;
    rec    jsonb;
    val    text;
    d      rl.decision;
    secs   bigint;
    e      integer;
    what   text;
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
    alg := rl._alg(TG_ARGV[1]);
    IF alg = 0 THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %.%, argument 2 (algorithm): % is not an algorithm (want %, %, %, %, % or %)',
            TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, quote_literal(TG_ARGV[1]), rl.algorithm_name(1),
            rl.algorithm_name(2), rl.algorithm_name(3), rl.algorithm_name(4), rl.algorithm_name(5), rl.algorithm_name(6)
            USING ERRCODE = 'RL001', HINT = 'usage: ' || usage;
    END IF;
    IF TG_ARGV[2] !~ '^\s*-?[0-9]{1,19}\s*$' THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %.%, argument 3 (limit): % is not an integer',
            TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, quote_literal(TG_ARGV[2])
            USING ERRCODE = 'invalid_parameter_value', HINT = 'usage: ' || usage;
    END IF;
    lim := TG_ARGV[2]::bigint;
    BEGIN
        win := rl._interval_us(TG_ARGV[3]::interval);
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %.%, argument 4 (window): % is not an interval such as ''1 minute''',
            TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, quote_literal(TG_ARGV[3])
            USING ERRCODE = 'invalid_parameter_value', HINT = 'usage: ' || usage;
    END;
    IF TG_NARGS > 4 AND TG_ARGV[4] <> '' THEN
        IF TG_ARGV[4] !~ '^\s*-?[0-9]{1,19}\s*$' THEN
            RAISE EXCEPTION 'ratelimit: trigger % on %.%, argument 5 (cost): % is not an integer',
                TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, quote_literal(TG_ARGV[4])
                USING ERRCODE = 'invalid_parameter_value', HINT = 'usage: ' || usage;
        END IF;
        cost := TG_ARGV[4]::bigint;
    END IF;
    -- The limit's parameters and the cost, checked as the decision would,
    -- naming the argument at fault.
    e := coalesce(nullif(rl._limit_error(alg, lim, win, 0), 0), nullif(rl._call_error(0, cost), 0), 0);
    IF e <> 0 THEN
        what := CASE e WHEN 2 THEN 'argument 3 (limit)' WHEN 3 THEN 'argument 4 (window)'
                       WHEN 5 THEN 'arguments 3 and 4 (limit and window)' ELSE 'argument 5 (cost)' END;
        RAISE EXCEPTION 'ratelimit: trigger % on %.%, %: %', TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, what,
            CASE WHEN e = 3 THEN format('%L: outside [1 µs, %s µs]', TG_ARGV[3], rl._max_window())
                 ELSE substr(rl._explain(e, alg, lim, win, 0, 0, cost, 0, 0, 0, 0, '{}'), 12) END
            USING ERRCODE = 'RL0' || lpad(e::text, 2, '0'), HINT = 'usage: ' || usage;
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
        RAISE EXCEPTION 'ratelimit: trigger % on %.%, argument 1 (key_column): the table has no column %',
            TG_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME, quote_ident(col)
            USING ERRCODE = 'undefined_column', HINT = 'usage: ' || usage;
    END IF;
    val := rec ->> col;
    IF val IS NULL THEN
        RAISE EXCEPTION 'ratelimit: invalid key: column % is NULL', quote_ident(col)
            USING ERRCODE = 'RL011',
                  HINT = format('To exempt such rows, add WHEN (NEW.%s IS NOT NULL) to trigger %s.', quote_ident(col), TG_NAME);
    END IF;
    -- Tenants (see the top of 0007): the key must be one that the inserting
    -- role may use, and one that the table's owner may use, since the owner
    -- (or whoever it let create triggers) chose the trigger's arguments.
    PERFORM rl._check_tenant_key(prefix || val, NULL);
    IF EXISTS (SELECT FROM rl.tenants) THEN
        PERFORM rl._check_tenant_key(prefix || val,
            (SELECT r.rolname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_roles r ON r.oid = c.relowner
              WHERE c.oid = TG_RELID));
    END IF;
    -- The database clock, never rl.now_us: a session inserting rows must not
    -- be able to move its own time forward past the limit.
    d := rl._take1(prefix || val, lname, alg, lim, win, 0, cost, rl._clock(), true);
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
