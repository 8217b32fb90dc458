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

-- rl.lock_states exists on a router only to say why pgstore's Go/WASM
-- transaction path cannot run through it: its row locks must be taken on
-- the shard itself, which pgstore.NewSharded does.
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
                rl.lock_states(text, text[])
                TO rl_app;
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
