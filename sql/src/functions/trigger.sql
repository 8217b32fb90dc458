
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
        RAISE EXCEPTION 'ratelimit: trigger % on %, argument 2 (algorithm): % is not an algorithm (want %)',
            p_trigger, tbl, pg_catalog.quote_literal(a[2]), rl._algorithm_list('plain')
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

-- rl.enforce_limit: the trigger function, with the caller's rights. Reading
-- the row may run code the row's types define (casts to json): it runs as
-- the role inserting, never as the owner of schema rl.
CREATE OR REPLACE FUNCTION rl.enforce_limit() RETURNS trigger
    LANGUAGE plpgsql SECURITY INVOKER
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    rec jsonb;
BEGIN
    IF TG_WHEN <> 'BEFORE' OR TG_LEVEL <> 'ROW' OR TG_OP NOT IN ('INSERT', 'UPDATE') THEN
        RAISE EXCEPTION 'ratelimit: % must run BEFORE INSERT (or UPDATE) FOR EACH ROW',
            'rl.enforce_limit(key_column, algorithm, limit, window [, cost [, key_prefix [, name]]])'
            USING ERRCODE = 'invalid_object_definition';
    END IF;
    rec := pg_catalog.to_jsonb(NEW);
    PERFORM rl._enforce_limit(TG_RELID, TG_NAME::text, TG_ARGV, rec ? TG_ARGV[0], rec ->> TG_ARGV[0]);
    RETURN NEW;
END
$fn$;
