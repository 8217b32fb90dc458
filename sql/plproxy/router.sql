-- The rl router schema for PL/Proxy: the public functions of rl with the
-- signatures they have on one node, each sent whole to the shard that holds
-- its key (RUN ON hashtext(key)), so no decision ever involves two shards.
--
-- Apply it to a database of its own (not a shard: the shards run the normal
-- migrations in sql/migrations) with `rl-migrate router`, which also
-- defines the cluster: the SQL/MED server rl_shards with one option pN per
-- partition, a power of two of them. This file is idempotent: types are
-- created when missing, functions replaced.
--
-- The partition of a key is hashtext(key) & (partitions - 1) (PL/Proxy's
-- default mapping), computed on the router. hashtext is PostgreSQL's own
-- text hash (hash_any over the key's bytes, the same on every PostgreSQL
-- release since 8.4 on little-endian machines); the Go function
-- sql/plproxy.Partition computes the same, so pgstore.Sharded and this
-- router agree on which shard owns a key (a test compares them).
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE EXTENSION IF NOT EXISTS plproxy;
CREATE SCHEMA IF NOT EXISTS rl;
COMMENT ON SCHEMA rl IS 'rate limiting: PL/Proxy router to the shards of the SQL/MED server rl_shards (github.com/rlcore/rl, sql/plproxy)';

-- The result types, identical to the shards' (PL/Proxy maps result columns
-- by name).
DO $do$
BEGIN
    IF to_regtype('rl.decision') IS NULL THEN
        CREATE TYPE rl.decision AS (
            allowed        boolean,
            lim            bigint,
            remaining      bigint,
            reset_after_us bigint,
            retry_after_us bigint,
            delay_us       bigint,
            now_us         bigint
        );
    END IF;
    IF to_regtype('rl.multi_decision') IS NULL THEN
        CREATE TYPE rl.multi_decision AS (
            ord            integer,
            name           text,
            allowed        boolean,
            lim            bigint,
            remaining      bigint,
            reset_after_us bigint,
            retry_after_us bigint,
            delay_us       bigint,
            deciding       boolean,
            now_us         bigint
        );
    END IF;
    IF to_regtype('rl.batch_decision') IS NULL THEN
        CREATE TYPE rl.batch_decision AS (
            req            integer,
            ord            integer,
            name           text,
            allowed        boolean,
            lim            bigint,
            remaining      bigint,
            reset_after_us bigint,
            retry_after_us bigint,
            delay_us       bigint,
            deciding       boolean,
            now_us         bigint,
            error_code     text,
            error_message  text
        );
    END IF;
END
$do$;

-- A NULL key still goes to one shard (coalesce), which then reports it as
-- RL011 like a single node does.

CREATE OR REPLACE FUNCTION rl.rl_allow(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1,
                                       rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_allow_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1,
                                          rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_peek(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1,
                                      rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_peek_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1,
                                         rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_allow_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_peek_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
$fn$;

-- pgstore's SQL path calls this one.
CREATE OR REPLACE FUNCTION rl.rl_decide_multi(key text, names text[], algorithms integer[], lims bigint[],
                                              windows_us bigint[], rates bigint[], cost bigint DEFAULT 1,
                                              now_us bigint DEFAULT NULL, take boolean DEFAULT true)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_reset(key text, name text DEFAULT NULL) RETURNS bigint
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
$fn$;

-- rl._expire_all runs rl_expire on every partition, in parallel, one row
-- per partition.
CREATE OR REPLACE FUNCTION rl._expire_all(now_us bigint, batch integer) RETURNS SETOF bigint
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON ALL;
    TARGET rl.rl_expire;
$fn$;

-- rl.rl_expire deletes up to batch idle rows on each shard and returns the
-- total. Partitions that share a database run it once each, harmlessly.
CREATE OR REPLACE FUNCTION rl.rl_expire(now_us bigint DEFAULT NULL, batch integer DEFAULT 10000) RETURNS bigint
    LANGUAGE sql
    SET search_path = pg_catalog, rl, pg_temp
    RETURN (SELECT coalesce(sum(n), 0)::bigint FROM rl._expire_all($1, $2) AS n);

-- rl._batch_split sends each request of a batch to the partition of its
-- key (PL/Proxy's SPLIT: every array is cut per partition, element by
-- element, and the partitions run in parallel). A request's limits travel as
-- one jsonb element, [[name, algorithm, lim, window_us, rate], ...]; the
-- shard rebuilds the flat arrays of rl.rl_decide_batch and maps the request
-- numbers of its part back to the caller's (reqs).
CREATE OR REPLACE FUNCTION rl._batch_split(reqs integer[], keys text[], costs bigint[], counts integer[],
                                           nows bigint[], takes boolean[], specs jsonb[])
    RETURNS SETOF rl.batch_decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    SPLIT reqs, keys, costs, counts, nows, takes, specs;
    RUN ON hashtext(coalesce(keys, ''));
    SELECT ($1)[b.req + 1] AS req, b.ord, b.name, b.allowed, b.lim, b.remaining, b.reset_after_us,
           b.retry_after_us, b.delay_us, b.deciding, b.now_us, b.error_code, b.error_message
      FROM (SELECT coalesce(array_agg(l.v ->> 0 ORDER BY p.i, l.j), '{}') AS f_names,
                   coalesce(array_agg((l.v ->> 1)::integer ORDER BY p.i, l.j), '{}') AS f_algs,
                   coalesce(array_agg((l.v ->> 2)::bigint ORDER BY p.i, l.j), '{}') AS f_lims,
                   coalesce(array_agg((l.v ->> 3)::bigint ORDER BY p.i, l.j), '{}') AS f_wins,
                   coalesce(array_agg((l.v ->> 4)::bigint ORDER BY p.i, l.j), '{}') AS f_rates
              FROM unnest($7) WITH ORDINALITY AS p(e, i)
             CROSS JOIN LATERAL jsonb_array_elements(p.e) WITH ORDINALITY AS l(v, j)) f,
           rl.rl_decide_batch($2, f.f_names, f.f_algs, f.f_lims, f.f_wins, f.f_rates, $3, $4, $5, $6) b;
$fn$;

-- rl.rl_decide_batch on a router: the shard function's checks of the call's
-- shape (RL010 for the whole call), then each request on its key's shard,
-- the rows in input order as on one node. Each shard decides its part of the
-- batch in a transaction of its own: if one shard fails, the call fails,
-- though other shards may have taken their part.
CREATE OR REPLACE FUNCTION rl.rl_decide_batch(keys text[], names text[], algorithms integer[], lims bigint[],
                                              windows_us bigint[], rates bigint[], costs bigint[] DEFAULT NULL,
                                              limit_counts integer[] DEFAULT NULL, now_us bigint[] DEFAULT NULL,
                                              take boolean[] DEFAULT NULL)
    RETURNS SETOF rl.batch_decision
    LANGUAGE plpgsql
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    nreq  integer := coalesce(cardinality($1), 0);
    nlim  integer := coalesce(cardinality($2), 0);
    total bigint;
    bad   integer;
    cnts  integer[];
    specs jsonb[] := '{}';
    j     integer := 1;
BEGIN
    IF (nreq > 0 AND (array_ndims($1) <> 1 OR array_lower($1, 1) <> 1))
            OR (nlim > 0 AND (array_ndims($2) <> 1 OR array_lower($2, 1) <> 1))
            OR coalesce(cardinality($3), 0) <> nlim OR coalesce(cardinality($4), 0) <> nlim
            OR coalesce(cardinality($5), 0) <> nlim OR coalesce(cardinality($6), 0) <> nlim
            OR (nlim > 0 AND (array_lower($3, 1) <> 1 OR array_lower($4, 1) <> 1
                              OR array_lower($5, 1) <> 1 OR array_lower($6, 1) <> 1))
            OR ($7 IS NOT NULL AND (cardinality($7) <> nreq OR (nreq > 0 AND array_lower($7, 1) <> 1)))
            OR ($9 IS NOT NULL AND (cardinality($9) <> nreq OR (nreq > 0 AND array_lower($9, 1) <> 1)))
            OR ($10 IS NOT NULL AND (cardinality($10) <> nreq OR (nreq > 0 AND array_lower($10, 1) <> 1))) THEN
        RAISE EXCEPTION USING ERRCODE = 'RL010', MESSAGE = 'ratelimit: bad limit list (ErrLimits)',
            DETAIL = 'rl_decide_batch: keys, costs, now_us and take need one element per request, '
                     'names, algorithms, lims, windows_us and rates one per limit';
    END IF;
    IF $8 IS NULL THEN
        IF nlim <> nreq THEN
            RAISE EXCEPTION USING ERRCODE = 'RL010', MESSAGE = 'ratelimit: bad limit list (ErrLimits)',
                DETAIL = 'rl_decide_batch: without limit_counts, each request has one limit';
        END IF;
    ELSE
        SELECT sum(u.c), count(*) FILTER (WHERE u.c IS NULL OR u.c < 0) INTO total, bad FROM unnest($8) AS u(c);
        IF cardinality($8) <> nreq OR (nreq > 0 AND array_lower($8, 1) <> 1)
                OR bad > 0 OR coalesce(total, 0) <> nlim THEN
            RAISE EXCEPTION USING ERRCODE = 'RL010', MESSAGE = 'ratelimit: bad limit list (ErrLimits)',
                DETAIL = 'rl_decide_batch: limit_counts needs one count (0 or more) per request, adding up to the number of limits';
        END IF;
    END IF;
    IF nreq = 0 THEN
        RETURN;
    END IF;
    cnts := coalesce($8, array_fill(1, ARRAY[nreq]));
    FOR q IN 1 .. nreq LOOP
        specs := specs || coalesce((SELECT jsonb_agg(jsonb_build_array($2[i], $3[i], $4[i], $5[i], $6[i]) ORDER BY i)
                                      FROM generate_series(j, j + cnts[q] - 1) AS i), '[]');
        j := j + cnts[q];
    END LOOP;
    RETURN QUERY
        SELECT b.* FROM rl._batch_split(ARRAY(SELECT generate_series(0, nreq - 1)), $1,
                                        coalesce($7, array_fill(1::bigint, ARRAY[nreq])), cnts,
                                        coalesce($9, array_fill(NULL::bigint, ARRAY[nreq])),
                                        coalesce($10, array_fill(NULL::boolean, ARRAY[nreq])), specs) b
         ORDER BY b.req, b.ord NULLS FIRST;
END
$fn$;

-- rl.lock_states (and the batch forms of migration 0009) exist on a router
-- only to say why pgstore's Go/WASM transaction path cannot run through it:
-- its row locks must be taken on the shard itself, which pgstore.NewSharded
-- does.
CREATE OR REPLACE FUNCTION rl.lock_states(p_key text, p_names text[])
    RETURNS TABLE (name text, algorithm integer, t bigint, x bigint, y bigint, log bigint[], now_us bigint)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    RAISE EXCEPTION 'ratelimit: this database is a PL/Proxy router: row locks are taken on the shards'
        USING ERRCODE = 'feature_not_supported',
              HINT = 'Decide in SQL (pgstore.ModeSQL) through the router, or use pgstore.NewSharded over the shards'' pools for the Go/WASM path.';
END
$fn$;

CREATE OR REPLACE FUNCTION rl.lock_states_batch(keys text[], names text[])
    RETURNS TABLE (key text, name text, algorithm integer, t bigint, x bigint, y bigint, log bigint[],
                   created boolean, now_us bigint)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    RAISE EXCEPTION 'ratelimit: this database is a PL/Proxy router: row locks are taken on the shards'
        USING ERRCODE = 'feature_not_supported',
              HINT = 'Decide in SQL (rl_decide_batch) through the router, or use pgstore.NewSharded over the shards'' pools for the Go/WASM path.';
END
$fn$;

CREATE OR REPLACE FUNCTION rl.drop_fresh_states(keys text[], names text[]) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    RAISE EXCEPTION 'ratelimit: this database is a PL/Proxy router: row locks are taken on the shards'
        USING ERRCODE = 'feature_not_supported',
              HINT = 'Use pgstore.NewSharded over the shards'' pools for the Go/WASM path.';
END
$fn$;

-- rl._trigger_take decides a trigger's row on the shard of key, on that
-- shard's clock (clock_timestamp() there, as rl._clock() computes it): the
-- trigger never uses a time the inserting session chose.
CREATE OR REPLACE FUNCTION rl._trigger_take(key text, name text, algorithm text, lim bigint, win interval, cost bigint)
    RETURNS rl.decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(key);
    SELECT d.allowed, d.lim, d.remaining, d.reset_after_us, d.retry_after_us, d.delay_us, d.now_us
      FROM rl.rl_allow(key, algorithm, lim, win, cost, 0, name,
                       (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) d;
$fn$;

-- rl.enforce_limit on a router: the trigger function of migration 0004,
-- with the same arguments and errors, deciding on the key's shard. The
-- shard commits the decision by itself (PL/Proxy runs each remote call in a
-- transaction of its own): a row the trigger admitted is counted even when
-- the inserting transaction later rolls back. See docs/scaling.md, "Triggers".
CREATE OR REPLACE FUNCTION rl.enforce_limit() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    usage  constant text := 'rl.enforce_limit(key_column, algorithm, limit, window [, cost [, key_prefix [, name]]])';
    col    text;
    lim    bigint;
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
    d := rl._trigger_take(prefix || val, lname, TG_ARGV[1], lim, TG_ARGV[3]::interval, cost);
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

-- Privileges as on a shard (migrations 0005 and 0007): rl_app may call the
-- routed functions; rl_expire is for rl_admin (a trusted role); the internal
-- functions (rl._*) are not granted. rl-migrate also grants USAGE on the
-- server rl_shards, which every call needs, to both.
--
-- Identity: PL/Proxy connects to a shard with the user mapping of the
-- calling role (current_user), else the mapping for PUBLIC; the shard
-- applies its own checks (trusted request time, tenants, rl_expire) to the
-- role it is connected as. Map tenant roles one to one (see docs/scaling.md,
-- "Roles and tenants"). rl.enforce_limit decides as the owner of this schema, so
-- only rl_admin may create triggers with it here: a tenant could otherwise
-- name another tenant's key prefix in a trigger of its own.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rl FROM PUBLIC;

DO $do$
BEGIN
    FOR attempt IN 1 .. 5 LOOP
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'rl_app') THEN
                CREATE ROLE rl_app NOLOGIN;
                COMMENT ON ROLE rl_app IS 'rl: created by the rl migrations (0005_role); runs the rl.* functions, no table access';
            END IF;
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'rl_admin') THEN
                CREATE ROLE rl_admin NOLOGIN;
                COMMENT ON ROLE rl_admin IS 'rl: created by the rl migrations (0007_trust); trusted: its request times are honoured, runs rl_expire and rl.lock_states';
            END IF;
            IF NOT pg_catalog.pg_has_role('rl_admin', 'rl_app', 'MEMBER') THEN
                GRANT rl_app TO rl_admin;
            END IF;
            GRANT USAGE ON SCHEMA rl TO rl_app, rl_admin;
            GRANT EXECUTE ON FUNCTION
                rl.rl_allow(text, text, bigint, interval, bigint, bigint, text, bigint),
                rl.rl_allow_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
                rl.rl_peek(text, text, bigint, interval, bigint, bigint, text, bigint),
                rl.rl_peek_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
                rl.rl_allow_multi(text, jsonb, bigint, bigint),
                rl.rl_peek_multi(text, jsonb, bigint, bigint),
                rl.rl_decide_multi(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint, boolean),
                rl.rl_reset(text, text),
                rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[]),
                rl._batch_split(integer[], text[], bigint[], integer[], bigint[], boolean[], jsonb[]),
                rl.lock_states(text, text[])
                TO rl_app;
            GRANT EXECUTE ON FUNCTION
                rl.lock_states_batch(text[], text[]),
                rl.drop_fresh_states(text[], text[])
                TO rl_admin;
            -- rl.rl_expire calls rl._expire_all as its caller, so that the
            -- shards see the caller's user mapping.
            GRANT EXECUTE ON FUNCTION
                rl.rl_expire(bigint, integer),
                rl._expire_all(bigint, integer),
                rl.enforce_limit()
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
