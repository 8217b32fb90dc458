-- rl._trigger_args reads the arguments of a trigger of rl.enforce_limit()
-- (a, counted from 1) on the table tbl (its name, for messages): the key
-- column, the limit, the cost, the key prefix and the limit's name
-- (default: the table's name). A bad argument, or the key column missing
-- when p_has_col is not true, is an error that names it, returned as code,
-- message, detail and hint for the caller to raise (all NULL when the
-- arguments are good): the one rule that the trigger applies at each row
-- and rl.check_limit_trigger and rl.create_limit_trigger apply at once.
CREATE FUNCTION rl._trigger_args(tbl text, p_trigger text, a text[], p_has_col boolean,
                                 OUT col text, OUT alg integer, OUT lim bigint, OUT win bigint, OUT cost bigint,
                                 OUT prefix text, OUT lname text,
                                 OUT code text, OUT message text, OUT detail text, OUT hint text)
    LANGUAGE plpgsql STABLE
AS $fn$
DECLARE
    usage constant text := 'rl.enforce_limit(key_column, algorithm, limit, window [, cost [, key_prefix [, name]]])';
    nargs integer;
    e     integer;
    what  text;
BEGIN
    cost := 1;
    prefix := '';
    nargs := pg_catalog.cardinality(a);
    IF nargs < 4 OR nargs > 7 THEN
        code := '22023'; -- invalid_parameter_value
        message := pg_catalog.format('ratelimit: trigger %s on %s has %s arguments; usage: %s', p_trigger, tbl, nargs, usage);
        RETURN;
    END IF;
    hint := 'usage: ' || usage; -- of every error below
    col := a[1];
    alg := rl._alg(a[2]);
    IF alg = 0 THEN
        code := 'RL001';
        message := pg_catalog.format('ratelimit: trigger %s on %s, argument 2 (algorithm): %s is not an algorithm (want %s)',
                                     p_trigger, tbl, pg_catalog.quote_literal(a[2]), rl._algorithm_list('plain'));
        RETURN;
    END IF;
    IF a[3] !~ '^\s*-?[0-9]{1,19}\s*$' THEN
        code := '22023';
        message := pg_catalog.format('ratelimit: trigger %s on %s, argument 3 (limit): %s is not an integer',
                                     p_trigger, tbl, pg_catalog.quote_literal(a[3]));
        RETURN;
    END IF;
    lim := a[3]::bigint;
    BEGIN
        win := rl._interval_us(a[4]::interval);
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
        code := '22023';
        message := pg_catalog.format('ratelimit: trigger %s on %s, argument 4 (window): %s is not an interval such as ''1 minute''',
                                     p_trigger, tbl, pg_catalog.quote_literal(a[4]));
        RETURN;
    END;
    IF nargs > 4 AND a[5] <> '' THEN
        IF a[5] !~ '^\s*-?[0-9]{1,19}\s*$' THEN
            code := '22023';
            message := pg_catalog.format('ratelimit: trigger %s on %s, argument 5 (cost): %s is not an integer',
                                         p_trigger, tbl, pg_catalog.quote_literal(a[5]));
            RETURN;
        END IF;
        cost := a[5]::bigint;
    END IF;
    -- The limit's parameters and the cost, checked as the decision would,
    -- naming the argument at fault.
    e := coalesce(nullif(rl._limit_error(alg, lim, win, 0), 0), nullif(rl._call_error(0, cost), 0), 0);
    IF e <> 0 THEN
        what := CASE e WHEN 2 THEN 'argument 3 (limit)' WHEN 3 THEN 'argument 4 (window)'
                       WHEN 5 THEN 'arguments 3 and 4 (limit and window)' ELSE 'argument 5 (cost)' END;
        code := 'RL0' || pg_catalog.lpad(e::text, 2, '0');
        message := pg_catalog.format('ratelimit: trigger %s on %s, %s: %s', p_trigger, tbl, what,
            CASE WHEN e = 3 THEN pg_catalog.format('%L: outside [1 µs, %s µs]', a[4], rl._max_window())
                 ELSE pg_catalog.substr(rl._explain(e, alg, lim, win, 0, 0, cost, 0, 0, 0, 0, '{}', 0, 0, 0, false), 12) END);
        RETURN;
    END IF;
    IF nargs > 5 THEN
        prefix := a[6];
    END IF;
    lname := tbl;
    IF nargs > 6 AND a[7] <> '' THEN
        lname := a[7];
    END IF;
    IF p_has_col IS NOT TRUE THEN
        code := '42703'; -- undefined_column
        message := pg_catalog.format('ratelimit: trigger %s on %s, argument 1 (key_column): the table has no column %s',
                                     p_trigger, tbl, pg_catalog.quote_ident(col));
        RETURN;
    END IF;
    hint := NULL;
END
$fn$;

-- rl.check_limit_trigger checks a trigger of rl.enforce_limit() on table
-- tbl at once, as the first INSERT would: it runs BEFORE INSERT (or UPDATE)
-- FOR EACH ROW, its arguments are good and the table has its key column.
-- It raises the error the first INSERT would raise, naming the argument at
-- fault, and returns the trigger's arguments otherwise.
CREATE FUNCTION rl.check_limit_trigger(tbl regclass, trigger_name name) RETURNS text[]
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    tg   record;
    p    record;
    rest bytea;
    k    integer;
    args text[] := '{}';
BEGIN
    SELECT t.tgfoid, t.tgtype, t.tgnargs, t.tgargs INTO tg
      FROM pg_catalog.pg_trigger t WHERE t.tgrelid = tbl AND t.tgname = trigger_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ratelimit: table % has no trigger %', tbl, pg_catalog.quote_ident(trigger_name)
            USING ERRCODE = 'undefined_object';
    END IF;
    IF tg.tgfoid <> 'rl.enforce_limit()'::pg_catalog.regprocedure THEN
        RAISE EXCEPTION 'ratelimit: trigger % on % does not run rl.enforce_limit()', pg_catalog.quote_ident(trigger_name), tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- tgtype: 1 row, 2 before, 4 insert, 8 delete, 16 update (pg_trigger.h).
    IF tg.tgtype & 3 <> 3 OR tg.tgtype & 8 <> 0 THEN
        RAISE EXCEPTION 'ratelimit: % must run BEFORE INSERT (or UPDATE) FOR EACH ROW',
            'rl.enforce_limit(key_column, algorithm, limit, window [, cost [, key_prefix [, name]]])'
            USING ERRCODE = 'invalid_object_definition',
                  DETAIL = pg_catalog.format('Trigger %s on %s does not.', pg_catalog.quote_ident(trigger_name), tbl);
    END IF;
    -- tgargs: each argument followed by a zero byte.
    rest := tg.tgargs;
    FOR i IN 1 .. tg.tgnargs LOOP
        k := pg_catalog.position(rest, '\x00'::bytea);
        args[i] := pg_catalog.convert_from(pg_catalog.substr(rest, 1, k - 1), pg_catalog.getdatabaseencoding());
        rest := pg_catalog.substr(rest, k + 1);
    END LOOP;
    p := rl._check_limit_trigger_args(tbl, trigger_name, args);
    IF p.code IS NOT NULL THEN
        -- Raised here, not by a helper: the error's CONTEXT is one line, this function's.
        IF p.detail IS NULL AND p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
        ELSIF p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
        ELSIF p.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
    END IF;
    RETURN args;
END
$fn$;
COMMENT ON FUNCTION rl.check_limit_trigger(regclass, name) IS
    'Checks a trigger of rl.enforce_limit() at once, raising the error its first INSERT would; returns its arguments';

-- rl._check_limit_trigger_args checks the arguments of a trigger of
-- rl.enforce_limit() on table tbl, the key column included, as the first
-- INSERT would (rl._trigger_args), and returns the error that INSERT would
-- raise as OUT values (all NULL when they are good), for its caller to
-- raise.
CREATE FUNCTION rl._check_limit_trigger_args(tbl regclass, trigger_name name, args text[],
                                             OUT code text, OUT message text, OUT detail text, OUT hint text)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    tname text;
BEGIN
    -- The table as the trigger names it: schema.table.
    SELECT n.nspname::text || '.' || c.relname::text INTO tname
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = tbl;
    SELECT t.code, t.message, t.detail, t.hint INTO code, message, detail, hint
      FROM rl._trigger_args(tname, trigger_name::text, args,
                            EXISTS (SELECT FROM pg_catalog.pg_attribute c
                                     WHERE c.attrelid = tbl AND c.attname::text = args[1] AND c.attnum > 0
                                       AND NOT c.attisdropped)) t;
END
$fn$;

-- rl.create_limit_trigger checks the arguments of a trigger of
-- rl.enforce_limit() at once, as the first INSERT would, then creates it on
-- table tbl (BEFORE INSERT FOR EACH ROW), with the rights of its caller,
-- who needs the TRIGGER privilege on the table. It returns the trigger's
-- name (default: rl_limit_ and the limit's name, else the key column).
CREATE FUNCTION rl.create_limit_trigger(tbl regclass, key_column text, algorithm text, lim bigint, win interval,
                                        cost bigint DEFAULT 1, key_prefix text DEFAULT '', name text DEFAULT NULL,
                                        trigger_name name DEFAULT NULL) RETURNS name
    LANGUAGE plpgsql VOLATILE SECURITY INVOKER
    SET search_path = pg_catalog, pg_temp
    SET IntervalStyle = postgres
AS $fn$
DECLARE
    -- As the trigger will be given them: text, NULL as '' (a NULL cost is the default, 1).
    args text[] := ARRAY[coalesce(key_column, ''), coalesce(algorithm, ''), coalesce(lim::text, ''),
                         coalesce(win::text, ''), coalesce(cost::text, ''), coalesce(key_prefix, ''), coalesce(name, '')];
    tg   text := coalesce(trigger_name::text, 'rl_limit_' || coalesce(nullif(name, ''), key_column));
    p    record;
BEGIN
    p := rl._check_limit_trigger_args(tbl, tg::pg_catalog.name, args);
    IF p.code IS NOT NULL THEN
        -- Raised here, not by a helper: the error's CONTEXT is one line, this function's.
        IF p.detail IS NULL AND p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message;
        ELSIF p.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
        ELSIF p.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, HINT = p.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail, HINT = p.hint;
    END IF;
    EXECUTE pg_catalog.format('CREATE TRIGGER %I BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit(%s)',
                              tg, tbl, (SELECT pg_catalog.string_agg(pg_catalog.quote_literal(v), ', ')
                                          FROM pg_catalog.unnest(args) AS u(v)));
    RETURN tg::pg_catalog.name;
END
$fn$;
COMMENT ON FUNCTION rl.create_limit_trigger(regclass, text, text, bigint, interval, bigint, text, text, name) IS
    'Checks the arguments of a trigger of rl.enforce_limit() at once, as the first INSERT would, then creates it (BEFORE INSERT FOR EACH ROW); returns its name';

CREATE OR REPLACE FUNCTION rl._enforce_limit(p_relid oid, p_trigger text, p_args text[], p_has_col boolean, p_val text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    a      text[];
    tbl    text;
    owner  name;
    col    text;
    alg    integer;
    lim    bigint;
    win    bigint;
    cost   bigint;
    prefix text;
    lname  text;
    ta     record;
    d      rl.decision;
    secs   bigint;
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
    SELECT * INTO ta FROM rl._trigger_args(tbl, p_trigger, a, p_has_col);
    IF ta.code IS NOT NULL THEN
        -- Raised here, not by a helper: no CONTEXT line of rl's internals but this function's.
        IF ta.detail IS NULL AND ta.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = ta.code, MESSAGE = ta.message;
        ELSIF ta.hint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = ta.code, MESSAGE = ta.message, DETAIL = ta.detail;
        ELSIF ta.detail IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = ta.code, MESSAGE = ta.message, HINT = ta.hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = ta.code, MESSAGE = ta.message, DETAIL = ta.detail, HINT = ta.hint;
    END IF;
    col := ta.col;
    alg := ta.alg;
    lim := ta.lim;
    win := ta.win;
    cost := ta.cost;
    prefix := ta.prefix;
    lname := ta.lname;
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
