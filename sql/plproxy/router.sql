-- The rl router schema for PL/Proxy: the public functions of rl with the
-- signatures they have on one node, each sent whole to the shard that holds
-- its key (RUN ON hashtext(key)), so no decision ever involves two shards.
--
-- Apply it to a database of its own (not a shard: the shards run the normal
-- migrations in sql/migrations) with `rl-migrate router`, which also
-- defines the cluster: the SQL/MED server rl_shards with one option pN per
-- partition, a power of two of them. This file is idempotent: types and the
-- table rl.tenants are created when missing, functions replaced, and what
-- earlier versions made that is no longer wanted is dropped.
--
-- The partition of a key is hashtext(key) & (partitions - 1) (PL/Proxy's
-- default mapping), computed on the router. hashtext is PostgreSQL's own
-- text hash (hash_any over the key's bytes, the same on every PostgreSQL
-- release since 8.4 on little-endian machines); the Go function
-- sql/plproxy.Partition computes the same, so pgstore.Sharded and this
-- router agree on which shard owns a key (a test compares them).
--
-- Trust. A call through the router has exactly the rights its caller would
-- have on one node (migrations 0007 and 0012), decided here, on the router:
--
--   * Who the caller is, who is trusted and who is a tenant: the node's own
--     functions rl._caller, rl._trusted, rl._tenant_role,
--     rl._check_tenant_key, rl._tenant_problem, rl._require_trusted,
--     rl._request_now, rl._now, rl._check_key and rl._key_problem, copied
--     verbatim below (TestTrustFunctionsMatchNode compares them with a
--     migrated node's, so the copy cannot drift), over the router's own
--     table rl.tenants (maintained by the owner of this schema, as on a
--     node) and the router's roles: trusted means a member of the owner of
--     this schema or of the router's rl_admin.
--   * The public functions are SECURITY DEFINER wrappers: each checks its
--     key with rl._check_tenant_key (42501 for a tenant's foreign key; in
--     rl_decide_batch the request's error row, as on one node), and passes
--     on the request time only for trusted callers (rl._request_now: a
--     trusted caller's now_us or SET rl.now_us; NULL for everyone else).
--     Then they call the PL/Proxy functions rl._proxy_*, granted to nobody,
--     which run as the owner of this schema and so connect to the shards
--     with the owner's user mapping, the only one rl-migrate makes.
--   * The one difference from a node: rl._clock(), "the database clock", is
--     NULL here. A NULL now_us makes the key's shard decide on its own
--     clock, so "decide on the database clock" means the shard's.
--   * The shard login (the user of that mapping) is, by default, an ordinary
--     role on the shards (a member of rl_app only): the shards then ignore
--     any time the router passes, and the router's trusted callers decide on
--     the shards' clocks too. Granting rl_admin to the shard login on the
--     shards makes the shards honour the times the router passes, which are
--     only those of the router's trusted callers: the router is then the
--     trust boundary, and its rl.tenants and trust functions decide.
--     rl_expire through the router needs a trusted shard login (it is for
--     trusted roles on the shards too).
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE EXTENSION IF NOT EXISTS plproxy;
CREATE SCHEMA IF NOT EXISTS rl;
COMMENT ON SCHEMA rl IS 'rate limiting: PL/Proxy router to the shards of the SQL/MED server rl_shards (github.com/rlcore/rl, sql/plproxy)';

-- The result types, identical to the shards' (PL/Proxy maps result columns
-- by name). next_after_us is the shards' since their migration 16: added to
-- the types of a router made before it (migrate the shards first).
DO $do$
DECLARE
    t regtype;
BEGIN
    IF to_regtype('rl.decision') IS NULL THEN
        CREATE TYPE rl.decision AS (
            allowed        boolean,
            lim            bigint,
            remaining      bigint,
            reset_after_us bigint,
            retry_after_us bigint,
            delay_us       bigint,
            now_us         bigint,
            next_after_us  bigint
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
            now_us         bigint,
            next_after_us  bigint
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
            error_message  text,
            next_after_us  bigint
        );
    END IF;
    FOREACH t IN ARRAY ARRAY['rl.decision', 'rl.multi_decision', 'rl.batch_decision']::regtype[] LOOP
        IF NOT EXISTS (SELECT FROM pg_attribute a JOIN pg_type y ON y.typrelid = a.attrelid
                        WHERE y.oid = t AND a.attname = 'next_after_us' AND NOT a.attisdropped) THEN
            EXECUTE format('ALTER TYPE %s ADD ATTRIBUTE next_after_us bigint', t);
        END IF;
    END LOOP;
END
$do$;

-- rl.tenants: the node's table (migration 0007), for the router's roles: a
-- role listed here, or a member of one, may only use keys starting with one
-- of its prefixes, through every function of the router. Maintained by the
-- owner of this schema only.
CREATE TABLE IF NOT EXISTS rl.tenants (
    role       regrole NOT NULL,
    key_prefix text    NOT NULL CHECK (octet_length(key_prefix) BETWEEN 1 AND 256),
    PRIMARY KEY (role, key_prefix)
);

COMMENT ON TABLE rl.tenants IS
    'A role listed here, or a member of one, may only use keys starting with one of its key_prefix values '
    '(owner and rl_admin members excepted). Maintained by the owner of schema rl.';
COMMENT ON COLUMN rl.tenants.role IS
    'the tenant role (an OID: renaming the role keeps the entry; drop the entry when dropping the role)';
COMMENT ON COLUMN rl.tenants.key_prefix IS
    'a prefix of the keys the role may use, bytewise (not a pattern); end it with a separator such as '':''';
REVOKE ALL ON TABLE rl.tenants FROM PUBLIC;

-- rl._clock: the router's "database clock" is the shard's: NULL, which the
-- wrappers pass on as now_us, and the key's shard decides on its own clock.
-- The one trust function whose router definition differs from the node's.
CREATE OR REPLACE FUNCTION rl._clock() RETURNS bigint
    LANGUAGE sql VOLATILE PARALLEL SAFE
    RETURN NULL::bigint;

-- From here to rl._require_trusted: the node's definitions, verbatim
-- (migrations 0003, 0007 and 0012; TestTrustFunctionsMatchNode compares
-- them). Change them there first, then here.

-- rl._now: the rl.now_us setting if set, else rl._clock(). Only the table
-- functions read it: their callers could pass now_us anyway. The trigger does
-- not: whoever inserts must not choose the time.
CREATE OR REPLACE FUNCTION rl._now() RETURNS bigint
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

-- rl._key_problem is the error of an invalid key (what names it: 'key',
-- 'limit name'), RL011 unless it is 1 to 256 bytes, as the OUT values a
-- caller raises; all NULL for a valid one. Any bytes are accepted: the rule
-- of the stores (pgstore, memstore), not the printable-ASCII default of
-- rl.Limiter (sql/README.md, "Keys").
CREATE OR REPLACE FUNCTION rl._key_problem(key text, what text, OUT code text, OUT message text, OUT detail text, OUT hint text)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN key IS NULL OR key = '' OR octet_length(key) > 256
                THEN ROW('RL011'::text, pg_catalog.format('ratelimit: invalid %s: it must be 1 to 256 bytes', what),
                         CASE WHEN key IS NULL THEN pg_catalog.format('The %s is NULL.', what)
                              ELSE pg_catalog.format('The %s is %s bytes long.', what, octet_length(key)) END,
                         NULL::text)
                ELSE ROW(NULL::text, NULL::text, NULL::text, NULL::text)
           END;

-- rl._check_key raises RL011 unless key is 1 to 256 bytes. what names it.
CREATE OR REPLACE FUNCTION rl._check_key(key text, what text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
DECLARE
    p record;
BEGIN
    SELECT * INTO p FROM rl._key_problem(key, what);
    IF p.code IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
    END IF;
END
$fn$;

-- rl._trusted: who may choose the request time and expire rows: a member of
-- the owner of this schema's functions or of rl_admin (SECURITY DEFINER, so
-- that CURRENT_USER is that owner wherever it is called from).
CREATE OR REPLACE FUNCTION rl._trusted(who name) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
    RETURN pg_catalog.pg_has_role(who, CURRENT_USER, 'MEMBER')
        OR coalesce(pg_catalog.pg_has_role(who, pg_catalog.to_regrole('rl_admin'), 'MEMBER'), false);

-- rl._tenant_role: true when who is held to prefixes: not trusted, and a
-- member (directly or through other roles) of a role listed in rl.tenants.
CREATE OR REPLACE FUNCTION rl._tenant_role(who name) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN NOT rl._trusted(who)
       AND EXISTS (SELECT FROM rl.tenants t WHERE pg_catalog.pg_has_role(who, t.role, 'MEMBER'));
COMMENT ON FUNCTION rl._tenant_role(name) IS
    'rl: whether the role is held to key prefixes (untrusted and a member of a role in rl.tenants)';

-- rl._caller: the role the functions hold the session to. The current role
-- (SET ROLE's, else the login role), except that a tenant login is never
-- less restricted than itself: when the login is a tenant and the current
-- role is not, the login (migration 0012, point 1, says why).
CREATE OR REPLACE FUNCTION rl._caller() RETURNS name
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE
        WHEN pg_catalog.current_setting('role') = 'none' THEN session_user
        WHEN rl._tenant_role(session_user)
             AND NOT rl._tenant_role(pg_catalog.current_setting('role')::name) THEN session_user
        ELSE pg_catalog.current_setting('role')::name
    END;
COMMENT ON FUNCTION rl._caller() IS
    'rl: the role a call is held to: the current role, or the login role when the login is a tenant and the current role is not';

-- rl._request_now: the time a call decides at: for a trusted caller its
-- now_us, else the setting rl.now_us, else rl._clock(); rl._clock() for
-- everyone else. On the router rl._clock() is NULL: the shard's clock.
CREATE OR REPLACE FUNCTION rl._request_now(p_now bigint) RETURNS bigint
    LANGUAGE sql VOLATILE PARALLEL SAFE
    RETURN CASE
        WHEN p_now IS NULL AND coalesce(pg_catalog.current_setting('rl.now_us', true), '') = '' THEN rl._clock()
        WHEN rl._trusted(rl._caller()) THEN coalesce(p_now, rl._now())
        ELSE rl._clock()
    END;

-- rl._tenant_problem is the error of a key p_who (NULL: the caller) may not
-- use, as OUT values a caller raises (all NULL when it may): RL011 for an
-- invalid key; 42501 when p_who is a tenant and the key is not under one of
-- its prefixes.
CREATE OR REPLACE FUNCTION rl._tenant_problem(p_key text, p_who name, OUT code text, OUT message text, OUT detail text, OUT hint text)
    LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $fn$
DECLARE
    pfx text[];
BEGIN
    IF (pg_catalog.octet_length(p_key) BETWEEN 1 AND 256) IS NOT TRUE THEN
        SELECT * INTO code, message, detail, hint FROM rl._key_problem(p_key, 'key');
        RETURN;
    END IF;
    -- One query when rl.tenants is empty, the common case: through the table's index (its first role or
    -- NULL), which, unlike a sequential scan, does not ask the kernel for the table's size.
    IF (SELECT tn.role FROM rl.tenants tn ORDER BY tn.role LIMIT 1) IS NULL THEN
        RETURN;
    END IF;
    p_who := coalesce(p_who, rl._caller());
    IF rl._trusted(p_who) THEN
        RETURN;
    END IF;
    SELECT pg_catalog.array_agg(t.key_prefix ORDER BY t.key_prefix COLLATE "C") INTO pfx
      FROM rl.tenants t WHERE pg_catalog.pg_has_role(p_who, t.role, 'MEMBER');
    IF pfx IS NULL OR EXISTS (SELECT FROM pg_catalog.unnest(pfx) AS u(p) WHERE pg_catalog.starts_with(p_key, u.p)) THEN
        RETURN;
    END IF;
    code := '42501'; -- insufficient_privilege
    message := pg_catalog.format('ratelimit: role %s may not use key %s', pg_catalog.quote_ident(p_who),
                                 pg_catalog.quote_literal(p_key));
    detail := pg_catalog.format('Role %s is a tenant (rl.tenants); its keys start with %s.',
                                pg_catalog.quote_ident(p_who),
                                pg_catalog.array_to_string(
                                    ARRAY(SELECT pg_catalog.quote_literal(u.p) FROM pg_catalog.unnest(pfx) AS u(p)),
                                    ' or '));
END
$fn$;

-- rl._check_tenant_key raises rl._tenant_problem's error, if any.
CREATE OR REPLACE FUNCTION rl._check_tenant_key(p_key text, p_who name) RETURNS void
    LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $fn$
DECLARE
    p record;
BEGIN
    IF (pg_catalog.octet_length(p_key) BETWEEN 1 AND 256) IS TRUE AND (SELECT tn.role FROM rl.tenants tn ORDER BY tn.role LIMIT 1) IS NULL THEN
        RETURN; -- the common case, one query
    END IF;
    SELECT * INTO p FROM rl._tenant_problem(p_key, p_who);
    IF p.code IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
    END IF;
END
$fn$;

-- rl._require_trusted raises 42501 unless the caller is trusted.
CREATE OR REPLACE FUNCTION rl._require_trusted(what text) RETURNS void
    LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $fn$
BEGIN
    IF NOT rl._trusted(rl._caller()) THEN
        RAISE EXCEPTION 'ratelimit: % is for the owner of schema rl and members of rl_admin', what
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('Role %s is neither.', pg_catalog.quote_ident(rl._caller())),
                  HINT = 'GRANT rl_admin TO the role that runs it.';
    END IF;
END
$fn$;

-- Earlier versions of this file: routed functions granted to rl_app, run
-- with the caller's user mapping. Their internal functions go. Before the
-- shards' migration 17: rl_decide_batch and its PL/Proxy function without
-- the settle flags, and lock_states stubs without l, w, r (their result
-- columns change: dropped here, made again below).
DROP FUNCTION IF EXISTS rl._batch_split(integer[], text[], bigint[], integer[], bigint[], boolean[], jsonb[]);
DROP FUNCTION IF EXISTS rl._expire_all(bigint, integer);
DROP FUNCTION IF EXISTS rl._trigger_take(text, text, text, bigint, interval, bigint);
DROP FUNCTION IF EXISTS rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[]);
DROP FUNCTION IF EXISTS rl._proxy_rl_decide_batch(integer[], text[], bigint[], integer[], bigint[], boolean[], jsonb[]);
-- Before the shards' migration 18: rl_decide_multi and rl_decide_batch
-- without the shadow flags (their PL/Proxy functions too).
DROP FUNCTION IF EXISTS rl.rl_decide_multi(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint, boolean);
DROP FUNCTION IF EXISTS rl._proxy_rl_decide_multi(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint, boolean);
DROP FUNCTION IF EXISTS rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[], boolean[]);
DO $do$
BEGIN
    IF EXISTS (SELECT FROM pg_proc p WHERE p.oid = to_regprocedure('rl.lock_states(text, text[])')
                 AND NOT 'l' = ANY (p.proargnames)) THEN
        DROP FUNCTION rl.lock_states(text, text[]);
    END IF;
    IF EXISTS (SELECT FROM pg_proc p WHERE p.oid = to_regprocedure('rl.lock_states_batch(text[], text[])')
                 AND NOT 'l' = ANY (p.proargnames)) THEN
        DROP FUNCTION rl.lock_states_batch(text[], text[]);
    END IF;
END
$do$;

-- The PL/Proxy functions, one per routed function (TARGET: the shard's
-- function of that name), granted to nobody: only the wrappers below call
-- them, as the owner of this schema. A NULL key still goes to one shard
-- (coalesce), though the wrappers have refused it before (RL011).

CREATE OR REPLACE FUNCTION rl._proxy_rl_allow(key text, algorithm text, lim bigint, win interval, cost bigint,
                                              rate bigint, name text, now_us bigint)
    RETURNS rl.decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
    TARGET rl.rl_allow;
$fn$;

CREATE OR REPLACE FUNCTION rl._proxy_rl_allow_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint,
                                                 rate bigint, name text, now_us bigint)
    RETURNS rl.decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
    TARGET rl.rl_allow_us;
$fn$;

CREATE OR REPLACE FUNCTION rl._proxy_rl_peek(key text, algorithm text, lim bigint, win interval, cost bigint,
                                             rate bigint, name text, now_us bigint)
    RETURNS rl.decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
    TARGET rl.rl_peek;
$fn$;

CREATE OR REPLACE FUNCTION rl._proxy_rl_peek_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint,
                                                rate bigint, name text, now_us bigint)
    RETURNS rl.decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
    TARGET rl.rl_peek_us;
$fn$;

CREATE OR REPLACE FUNCTION rl._proxy_rl_allow_multi(key text, limits jsonb, cost bigint, now_us bigint)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
    TARGET rl.rl_allow_multi;
$fn$;

CREATE OR REPLACE FUNCTION rl._proxy_rl_peek_multi(key text, limits jsonb, cost bigint, now_us bigint)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
    TARGET rl.rl_peek_multi;
$fn$;

CREATE OR REPLACE FUNCTION rl._proxy_rl_decide_multi(key text, names text[], algorithms integer[], lims bigint[],
                                                     windows_us bigint[], rates bigint[], cost bigint,
                                                     now_us bigint, take boolean, shadows boolean[])
    RETURNS SETOF rl.multi_decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
    TARGET rl.rl_decide_multi;
$fn$;

CREATE OR REPLACE FUNCTION rl._proxy_rl_settle(key text, algorithm text, lim bigint, win interval, delta bigint,
                                               rate bigint, name text, now_us bigint)
    RETURNS rl.decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
    TARGET rl.rl_settle;
$fn$;

CREATE OR REPLACE FUNCTION rl._proxy_rl_settle_us(key text, algorithm text, lim bigint, window_us bigint, delta bigint,
                                                  rate bigint, name text, now_us bigint)
    RETURNS rl.decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
    TARGET rl.rl_settle_us;
$fn$;

CREATE OR REPLACE FUNCTION rl._proxy_rl_settle_multi(key text, limits jsonb, delta bigint, now_us bigint)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
    TARGET rl.rl_settle_multi;
$fn$;

CREATE OR REPLACE FUNCTION rl._proxy_rl_settle_decide(key text, names text[], algorithms integer[], lims bigint[],
                                                      windows_us bigint[], rates bigint[], delta bigint, now_us bigint)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
    TARGET rl.rl_settle_decide;
$fn$;

CREATE OR REPLACE FUNCTION rl._proxy_rl_reset(key text, name text) RETURNS bigint
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON hashtext(coalesce(key, ''));
    TARGET rl.rl_reset;
$fn$;

-- rl._proxy_rl_expire runs rl_expire on every partition, in parallel, one
-- row per partition.
CREATE OR REPLACE FUNCTION rl._proxy_rl_expire(now_us bigint, batch integer) RETURNS SETOF bigint
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    RUN ON ALL;
    TARGET rl.rl_expire;
$fn$;

-- rl._proxy_rl_decide_batch sends each request of a batch to the partition
-- of its key (PL/Proxy's SPLIT: every array is cut per partition, element by
-- element, and the partitions run in parallel). A request's limits travel as
-- one jsonb element, [[name, algorithm, lim, window_us, rate, shadow], ...]; the
-- shard rebuilds the flat arrays of rl.rl_decide_batch and maps the request
-- numbers of its part back to the caller's (reqs).
CREATE OR REPLACE FUNCTION rl._proxy_rl_decide_batch(reqs integer[], keys text[], costs bigint[], counts integer[],
                                                     nows bigint[], takes boolean[], specs jsonb[], settles boolean[])
    RETURNS SETOF rl.batch_decision
    LANGUAGE plproxy
AS $fn$
    CLUSTER 'rl_shards';
    SPLIT reqs, keys, costs, counts, nows, takes, specs, settles;
    RUN ON hashtext(coalesce(keys, ''));
    SELECT ($1)[b.req + 1] AS req, b.ord, b.name, b.allowed, b.lim, b.remaining, b.reset_after_us,
           b.retry_after_us, b.delay_us, b.deciding, b.now_us, b.error_code, b.error_message, b.next_after_us
      FROM (SELECT coalesce(array_agg(l.v ->> 0 ORDER BY p.i, l.j), '{}') AS f_names,
                   coalesce(array_agg((l.v ->> 1)::integer ORDER BY p.i, l.j), '{}') AS f_algs,
                   coalesce(array_agg((l.v ->> 2)::bigint ORDER BY p.i, l.j), '{}') AS f_lims,
                   coalesce(array_agg((l.v ->> 3)::bigint ORDER BY p.i, l.j), '{}') AS f_wins,
                   coalesce(array_agg((l.v ->> 4)::bigint ORDER BY p.i, l.j), '{}') AS f_rates,
                   CASE WHEN bool_or(coalesce((l.v ->> 5)::boolean, false))
                        THEN array_agg(coalesce((l.v ->> 5)::boolean, false) ORDER BY p.i, l.j) END AS f_shadows
              FROM unnest($7) WITH ORDINALITY AS p(e, i)
             CROSS JOIN LATERAL jsonb_array_elements(p.e) WITH ORDINALITY AS l(v, j)) f,
           rl.rl_decide_batch($2, f.f_names, f.f_algs, f.f_lims, f.f_wins, f.f_rates, $3, $4, $5, $6, $8, f.f_shadows) b;
$fn$;

-- The public functions: SECURITY DEFINER wrappers, with the node's
-- signatures and its order of checks (the key first), that hold the caller
-- to the router's rules (see Trust at the top) and call the PL/Proxy
-- function. A shard's error comes through with its SQLSTATE.

CREATE OR REPLACE FUNCTION rl.rl_allow(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1,
                                       rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN rl._proxy_rl_allow($1, $2, $3, $4, $5, $6, $7, rl._request_now($8));
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_allow_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1,
                                          rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN rl._proxy_rl_allow_us($1, $2, $3, $4, $5, $6, $7, rl._request_now($8));
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_peek(key text, algorithm text, lim bigint, win interval, cost bigint DEFAULT 1,
                                      rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN rl._proxy_rl_peek($1, $2, $3, $4, $5, $6, $7, rl._request_now($8));
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_peek_us(key text, algorithm text, lim bigint, window_us bigint, cost bigint DEFAULT 1,
                                         rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN rl._proxy_rl_peek_us($1, $2, $3, $4, $5, $6, $7, rl._request_now($8));
END
$fn$;

-- rl_allow_multi and rl_peek_multi check the key before the shard parses
-- the limits: a call with both a foreign key and bad limits is refused
-- (42501) here, where one node reports the limits first.
CREATE OR REPLACE FUNCTION rl.rl_allow_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN QUERY SELECT * FROM rl._proxy_rl_allow_multi($1, $2, $3, rl._request_now($4));
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_peek_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN QUERY SELECT * FROM rl._proxy_rl_peek_multi($1, $2, $3, rl._request_now($4));
END
$fn$;

-- pgstore's SQL path calls this one.
CREATE OR REPLACE FUNCTION rl.rl_decide_multi(key text, names text[], algorithms integer[], lims bigint[],
                                              windows_us bigint[], rates bigint[], cost bigint DEFAULT 1,
                                              now_us bigint DEFAULT NULL, take boolean DEFAULT true,
                                              shadows boolean[] DEFAULT NULL)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN QUERY SELECT * FROM rl._proxy_rl_decide_multi($1, $2, $3, $4, $5, $6, $7, rl._request_now($8), $9, $10);
END
$fn$;

-- The settle functions (the shards' migration 17).
CREATE OR REPLACE FUNCTION rl.rl_settle(key text, algorithm text, lim bigint, win interval, delta bigint,
                                        rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN rl._proxy_rl_settle($1, $2, $3, $4, $5, $6, $7, rl._request_now($8));
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_settle_us(key text, algorithm text, lim bigint, window_us bigint, delta bigint,
                                           rate bigint DEFAULT 0, name text DEFAULT 'default', now_us bigint DEFAULT NULL)
    RETURNS rl.decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN rl._proxy_rl_settle_us($1, $2, $3, $4, $5, $6, $7, rl._request_now($8));
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_settle_multi(key text, limits jsonb, delta bigint, now_us bigint DEFAULT NULL)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN QUERY SELECT * FROM rl._proxy_rl_settle_multi($1, $2, $3, rl._request_now($4));
END
$fn$;

-- pgstore's SQL path calls this one to settle.
CREATE OR REPLACE FUNCTION rl.rl_settle_decide(key text, names text[], algorithms integer[], lims bigint[],
                                               windows_us bigint[], rates bigint[], delta bigint,
                                               now_us bigint DEFAULT NULL)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN QUERY SELECT * FROM rl._proxy_rl_settle_decide($1, $2, $3, $4, $5, $6, $7, rl._request_now($8));
END
$fn$;

CREATE OR REPLACE FUNCTION rl.rl_reset(key text, name text DEFAULT NULL) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._check_tenant_key($1, NULL);
    RETURN rl._proxy_rl_reset($1, $2);
END
$fn$;

-- rl.rl_expire deletes up to batch idle rows on each shard and returns the
-- total; trusted roles only, as on a node. Partitions that share a database
-- run it once each, harmlessly. The shards check their side too: through a
-- shard login that is not trusted there, the shards refuse it (42501).
CREATE OR REPLACE FUNCTION rl.rl_expire(now_us bigint DEFAULT NULL, batch integer DEFAULT 10000) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
BEGIN
    PERFORM rl._require_trusted('rl.rl_expire');
    RETURN (SELECT coalesce(sum(n), 0)::bigint FROM rl._proxy_rl_expire(rl._request_now($1), $2) AS n);
END
$fn$;

-- rl.rl_decide_batch on a router: the shard function's checks of the call's
-- shape (RL010 for the whole call), then the tenants and the time per
-- request, as one node does them: a key the caller may not use
-- (rl._check_tenant_key) gets the node's error row (error_code 42501) and
-- goes to no shard; an invalid key goes to its shard, which gives it its
-- row (RL011); each request's now_us passes through rl._request_now. Then
-- each request on its key's shard, the rows in input order as on one node.
-- Each shard decides its part of the batch in a transaction of its own: if
-- one shard fails, the call fails, though other shards may have taken their
-- part.
CREATE OR REPLACE FUNCTION rl.rl_decide_batch(keys text[], names text[], algorithms integer[], lims bigint[],
                                              windows_us bigint[], rates bigint[], costs bigint[] DEFAULT NULL,
                                              limit_counts integer[] DEFAULT NULL, now_us bigint[] DEFAULT NULL,
                                              take boolean[] DEFAULT NULL, settle boolean[] DEFAULT NULL,
                                              shadows boolean[] DEFAULT NULL)
    RETURNS SETOF rl.batch_decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    nreq    integer := coalesce(cardinality($1), 0);
    nlim    integer := coalesce(cardinality($2), 0);
    total   bigint;
    bad     integer;
    cnts    integer[];
    who     name;
    refused text[];
    v_now   bigint;
    reqs    integer[] := '{}'::integer[];
    ks      text[] := '{}'::text[];
    cs      bigint[] := '{}'::bigint[];
    ns      integer[] := '{}'::integer[];
    nows    bigint[] := '{}'::bigint[];
    tks     boolean[] := '{}'::boolean[];
    sts     boolean[] := '{}'::boolean[];
    specs   jsonb[] := '{}'::jsonb[];
    j       integer := 1;
BEGIN
    IF (nreq > 0 AND (array_ndims($1) <> 1 OR array_lower($1, 1) <> 1))
            OR (nlim > 0 AND (array_ndims($2) <> 1 OR array_lower($2, 1) <> 1))
            OR coalesce(cardinality($3), 0) <> nlim OR coalesce(cardinality($4), 0) <> nlim
            OR coalesce(cardinality($5), 0) <> nlim OR coalesce(cardinality($6), 0) <> nlim
            OR (nlim > 0 AND (array_lower($3, 1) <> 1 OR array_lower($4, 1) <> 1
                              OR array_lower($5, 1) <> 1 OR array_lower($6, 1) <> 1))
            OR ($7 IS NOT NULL AND (cardinality($7) <> nreq OR (nreq > 0 AND array_lower($7, 1) <> 1)))
            OR ($9 IS NOT NULL AND (cardinality($9) <> nreq OR (nreq > 0 AND array_lower($9, 1) <> 1)))
            OR ($10 IS NOT NULL AND (cardinality($10) <> nreq OR (nreq > 0 AND array_lower($10, 1) <> 1)))
            OR ($11 IS NOT NULL AND (cardinality($11) <> nreq OR (nreq > 0 AND array_lower($11, 1) <> 1)))
            OR ($12 IS NOT NULL AND (cardinality($12) <> nlim OR (nlim > 0 AND array_lower($12, 1) <> 1))) THEN
        RAISE EXCEPTION USING ERRCODE = 'RL010', MESSAGE = 'ratelimit: bad limit list (ErrLimits)',
            DETAIL = 'rl_decide_batch: keys, costs, now_us, take and settle need one element per request, '
                     'names, algorithms, lims, windows_us, rates and shadows one per limit';
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

    -- Tenants: only a tenant can be refused a key (rl._check_tenant_key
    -- refuses exactly when rl._tenant_role holds), so nobody else pays for
    -- the check.
    refused := array_fill(NULL::text, ARRAY[nreq]);
    who := rl._caller();
    IF rl._tenant_role(who) THEN
        FOR q IN 1 .. nreq LOOP
            CONTINUE WHEN (octet_length($1[q]) BETWEEN 1 AND 256) IS NOT TRUE;
            BEGIN
                PERFORM rl._check_tenant_key($1[q], who);
            EXCEPTION WHEN insufficient_privilege THEN
                refused[q] := SQLERRM;
            END;
        END LOOP;
    END IF;

    -- The requests sent to the shards, with their times.
    v_now := rl._request_now(NULL);
    FOR q IN 1 .. nreq LOOP
        IF refused[q] IS NULL THEN
            reqs := reqs || (q - 1);
            ks := ks || $1[q];
            cs := cs || CASE WHEN $7 IS NULL THEN 1::bigint ELSE $7[q] END;
            ns := ns || cnts[q];
            nows := nows || CASE WHEN $9 IS NULL OR $9[q] IS NULL THEN v_now ELSE rl._request_now($9[q]) END;
            tks := tks || CASE WHEN $10 IS NULL THEN NULL::boolean ELSE $10[q] END;
            sts := sts || CASE WHEN $11 IS NULL THEN NULL::boolean ELSE $11[q] END;
            specs := specs || coalesce((SELECT jsonb_agg(CASE WHEN coalesce($12[i], false)
                                                                THEN jsonb_build_array($2[i], $3[i], $4[i], $5[i], $6[i], true)
                                                                ELSE jsonb_build_array($2[i], $3[i], $4[i], $5[i], $6[i]) END ORDER BY i)
                                          FROM generate_series(j, j + cnts[q] - 1) AS i), '[]');
        END IF;
        j := j + cnts[q];
    END LOOP;
    IF cardinality(reqs) = 0 THEN
        RETURN QUERY
            SELECT (ROW((u.q - 1)::integer, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, false, NULL, '42501', u.m, NULL)::rl.batch_decision).*
              FROM unnest(refused) WITH ORDINALITY AS u(m, q)
             ORDER BY u.q;
        RETURN;
    END IF;
    RETURN QUERY
        SELECT b.*
          FROM (SELECT p.* FROM rl._proxy_rl_decide_batch(reqs, ks, cs, ns, nows, tks, specs, sts) p
                UNION ALL
                SELECT (ROW((u.q - 1)::integer, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, false, NULL, '42501', u.m, NULL)::rl.batch_decision).*
                  FROM unnest(refused) WITH ORDINALITY AS u(m, q)
                 WHERE u.m IS NOT NULL) b
         ORDER BY b.req, b.ord NULLS FIRST;
END
$fn$;

-- rl.lock_states (and the batch forms of migration 0009) exist on a router
-- only to say why pgstore's Go/WASM transaction path cannot run through it:
-- its row locks must be taken on the shard itself, which pgstore.NewSharded
-- does.
CREATE OR REPLACE FUNCTION rl.lock_states(p_key text, p_names text[])
    RETURNS TABLE (name text, algorithm integer, t bigint, x bigint, y bigint, log bigint[], now_us bigint, l bigint,
                   w bigint, r bigint)
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
                   created boolean, now_us bigint, l bigint, w bigint, r bigint)
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

-- rl._enforce_limit: the definer-rights part of the router's trigger, with
-- the node's signature (migration 0012): plain values in (the trigger's
-- table, name and arguments, whether the key column exists, the key as
-- text). It checks the arguments it can check here (their count, limit and
-- cost integers, the window an interval, the key column, a NULL key),
-- naming the one at fault as one node does; then the tenants (the caller's
-- prefixes and the table owner's); then decides on the key's shard, on that
-- shard's clock (now_us NULL), raising RL429 on a denial. The algorithm and
-- the limit's ranges are checked by the shard (its rl_allow's errors). The
-- shard commits the decision by itself (PL/Proxy runs each remote call in a
-- transaction of its own): a row the trigger admitted is counted even when
-- the inserting transaction later rolls back. See docs/scaling.md,
-- "Triggers".
CREATE OR REPLACE FUNCTION rl._enforce_limit(p_relid oid, p_trigger text, p_args text[], p_has_col boolean, p_val text)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    usage  constant text := 'rl.enforce_limit(key_column, algorithm, limit, window [, cost [, key_prefix [, name]]])';
    a      text[];
    nargs  integer;
    tbl    text;
    owner  name;
    col    text;
    lim    bigint;
    win    interval;
    cost   bigint := 1;
    prefix text := '';
    lname  text;
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
    nargs := pg_catalog.cardinality(a);
    IF nargs < 4 OR nargs > 7 THEN
        RAISE EXCEPTION 'ratelimit: trigger % on % has % arguments; usage: %', p_trigger, tbl, nargs, usage
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    col := a[1];
    IF a[3] !~ '^\s*-?[0-9]{1,19}\s*$' THEN
        RAISE EXCEPTION 'ratelimit: trigger % on %, argument 3 (limit): % is not an integer',
            p_trigger, tbl, pg_catalog.quote_literal(a[3])
            USING ERRCODE = 'invalid_parameter_value', HINT = 'usage: ' || usage;
    END IF;
    lim := a[3]::bigint;
    BEGIN
        win := a[4]::interval;
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
    -- The shard's clock, never a time the inserting session chose.
    d := rl._proxy_rl_allow(prefix || p_val, a[2], lim, win, cost, 0, lname, NULL);
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
$fn$;
COMMENT ON FUNCTION rl._enforce_limit(oid, text, text[], boolean, text) IS
    'rl: the definer-rights part of rl.enforce_limit() on a router: plain values in, the decision on the key''s shard, on its clock';

-- rl.enforce_limit: the node's trigger function, verbatim (migration 0012;
-- TestTrustFunctionsMatchNode compares it), with the caller's rights.
-- Reading the row may run code the row's types define (casts to json): it
-- runs as the role inserting, never as the owner of schema rl.
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

-- Privileges as on a node (migrations 0005, 0007, 0009 and 0012): rl_app
-- may call the public functions and the trigger's two halves; rl_expire is
-- for rl_admin (and the owner), as are the batch lock helpers; the internal
-- functions (rl._*), above all the PL/Proxy ones, are granted to nobody, and
-- nobody is granted USAGE on the server rl_shards: only the owner of this
-- schema connects to the shards, through the wrappers.
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
            -- Earlier versions granted the PL/Proxy functions themselves.
            REVOKE ALL ON FUNCTION
                rl._proxy_rl_allow(text, text, bigint, interval, bigint, bigint, text, bigint),
                rl._proxy_rl_allow_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
                rl._proxy_rl_peek(text, text, bigint, interval, bigint, bigint, text, bigint),
                rl._proxy_rl_peek_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
                rl._proxy_rl_allow_multi(text, jsonb, bigint, bigint),
                rl._proxy_rl_peek_multi(text, jsonb, bigint, bigint),
                rl._proxy_rl_decide_multi(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint, boolean, boolean[]),
                rl._proxy_rl_reset(text, text),
                rl._proxy_rl_expire(bigint, integer),
                rl._proxy_rl_decide_batch(integer[], text[], bigint[], integer[], bigint[], boolean[], jsonb[], boolean[]),
                rl._proxy_rl_settle(text, text, bigint, interval, bigint, bigint, text, bigint),
                rl._proxy_rl_settle_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
                rl._proxy_rl_settle_multi(text, jsonb, bigint, bigint),
                rl._proxy_rl_settle_decide(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint)
                FROM rl_app, rl_admin;
            GRANT EXECUTE ON FUNCTION
                rl.rl_allow(text, text, bigint, interval, bigint, bigint, text, bigint),
                rl.rl_allow_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
                rl.rl_peek(text, text, bigint, interval, bigint, bigint, text, bigint),
                rl.rl_peek_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
                rl.rl_allow_multi(text, jsonb, bigint, bigint),
                rl.rl_peek_multi(text, jsonb, bigint, bigint),
                rl.rl_decide_multi(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint, boolean, boolean[]),
                rl.rl_reset(text, text),
                rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[], boolean[], boolean[]),
                rl.rl_settle(text, text, bigint, interval, bigint, bigint, text, bigint),
                rl.rl_settle_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
                rl.rl_settle_multi(text, jsonb, bigint, bigint),
                rl.rl_settle_decide(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint),
                rl.lock_states(text, text[]),
                rl.enforce_limit(),
                rl._enforce_limit(oid, text, text[], boolean, text)
                TO rl_app;
            GRANT EXECUTE ON FUNCTION
                rl.rl_expire(bigint, integer),
                rl.lock_states_batch(text[], text[]),
                rl.drop_fresh_states(text[], text[])
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
