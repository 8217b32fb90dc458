
-- rl._key_problem is the error of an invalid key (what names it: 'key',
-- 'limit name'), RL011 unless it is 1 to 256 bytes, as the OUT values a
-- caller raises; all NULL for a valid one. Any bytes are accepted: the rule
-- of the stores (pgstore, memstore), not the printable-ASCII default of
-- rl.Limiter (sql/README.md, "Keys").
CREATE FUNCTION rl._key_problem(key text, what text, OUT code text, OUT message text, OUT detail text, OUT hint text)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN key IS NULL OR key = '' OR octet_length(key) > 256
                THEN ROW('RL011'::text, pg_catalog.format('ratelimit: invalid %s: it must be 1 to 256 bytes', what),
                         CASE WHEN key IS NULL THEN pg_catalog.format('The %s is NULL.', what)
                              ELSE pg_catalog.format('The %s is %s bytes long.', what, octet_length(key)) END,
                         NULL::text)
                ELSE ROW(NULL::text, NULL::text, NULL::text, NULL::text)
           END;

-- rl._check_key raises RL011 unless key is 1 to 256 bytes. what names it.
CREATE FUNCTION rl._check_key(key text, what text) RETURNS void
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

CREATE OR REPLACE FUNCTION rl._trusted(who name) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
    RETURN pg_catalog.pg_has_role(who, CURRENT_USER, 'MEMBER')
        OR coalesce(pg_catalog.pg_has_role(who, pg_catalog.to_regrole('rl_admin'), 'MEMBER'), false);

-- rl._tenant_role: true when who is held to prefixes: not trusted, and a
-- member (directly or through other roles) of a role listed in rl.tenants.
CREATE FUNCTION rl._tenant_role(who name) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN NOT rl._trusted(who)
       AND EXISTS (SELECT FROM rl.tenants t WHERE pg_catalog.pg_has_role(who, t.role, 'MEMBER'));
COMMENT ON FUNCTION rl._tenant_role(name) IS
    'rl: whether the role is held to key prefixes (untrusted and a member of a role in rl.tenants)';

-- rl._caller: the role the functions hold the session to. The current role
-- (SET ROLE's, else the login role), except that a tenant login is never
-- less restricted than itself: when the login is a tenant and the current
-- role is not, the login. See point 1 above for why this is the more
-- restricted of the two in every case. Cheap when no SET ROLE is active.
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

-- rl._tenant_problem is the error of a key p_who (NULL: the caller) may not
-- use, as OUT values a caller raises (all NULL when it may): RL011 for an
-- invalid key; 42501 when p_who is a tenant and the key is not under one of
-- its prefixes.
CREATE FUNCTION rl._tenant_problem(p_key text, p_who name, OUT code text, OUT message text, OUT detail text, OUT hint text)
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
CREATE FUNCTION rl._check_tenant_key(p_key text, p_who name) RETURNS void
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

-- rl._request_now: the time a call decides at (see the top of this file).
-- The common call, no time given, reads the clock without checking anything.
CREATE FUNCTION rl._request_now(p_now bigint) RETURNS bigint
    LANGUAGE sql VOLATILE PARALLEL SAFE
    RETURN CASE
        WHEN p_now IS NULL AND coalesce(pg_catalog.current_setting('rl.now_us', true), '') = '' THEN rl._clock()
        WHEN rl._trusted(rl._caller()) THEN coalesce(p_now, rl._now())
        ELSE rl._clock()
    END;

-- rl._require_trusted raises 42501 unless the caller is trusted.
CREATE FUNCTION rl._require_trusted(what text) RETURNS void
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
