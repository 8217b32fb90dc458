-- 0019 (after 0018): "shadow" read once, for every function that takes
-- limits as JSON, so that rl_peek_multi decides shadow limits as
-- store.Policy.Decide peeks them (store/shadow.go):
--
-- * rl._parse_shadows(limits jsonb) reads the "shadow" flags of a limits
--   array (as rl._parse_limits reads the rest of it, after which it runs):
--   one flag per limit, true for "shadow": true, false for false, null or
--   missing; NULL when no limit is a shadow limit; anything else RL010
--   'limits[i].shadow must be true or false', the error 0018 raised. It is
--   0018's rule taken out of rl_allow_multi, which now calls it.
-- * rl.rl_peek_multi passes the flags to rl_decide_multi (take false): a
--   peek of a policy with shadow limits peeks every limit, the enforced
--   ones all or nothing as if the shadow ones were not there, its deciding
--   row the deciding enforced limit's, or for a policy of only shadow
--   limits the one with the fewest remaining (rl._all_shadow, as
--   store.Policy.Decide with store.Peek). Until 0019 it ignored "shadow",
--   deciding every limit as enforced. A peek writes nothing, as before.
-- * rl.rl_settle_multi checks the flags and ignores them: Go settles
--   every limit of a policy alike, shadow or not (store.Policy.Decide with
--   store.Settle is core.SettleAll; Limiter.Settle), as rl_settle_decide
--   and rl_decide_batch's settle do since 0018. A bad "shadow" is refused
--   as by rl_allow_multi and rl_peek_multi (0017 and 0018 ignored any
--   value), so the three accept the same limits.
--
-- The trust rules are those of rl_decide_multi and rl_settle_decide, which
-- the three call as before. Calls without a shadow limit are unchanged.
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE FUNCTION rl._parse_shadows(limits jsonb)
 RETURNS boolean[]
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    sh  boolean[];
    bad bigint;
BEGIN
    IF jsonb_typeof(limits) IS DISTINCT FROM 'array' THEN
        RETURN NULL; -- rl._parse_limits refuses it
    END IF;
    SELECT array_agg(coalesce(jsonb_typeof(u.e -> 'shadow') = 'boolean' AND (u.e ->> 'shadow')::boolean, false)
                     ORDER BY u.o),
           min(u.o) FILTER (WHERE jsonb_typeof(u.e -> 'shadow') NOT IN ('boolean', 'null'))
      INTO sh, bad
      FROM jsonb_array_elements(limits) WITH ORDINALITY AS u(e, o);
    IF bad IS NOT NULL THEN
        PERFORM rl._raise(10, format('limits[%s].shadow must be true or false', bad - 1));
    END IF;
    IF true = ANY (sh) THEN
        RETURN sh;
    END IF;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_allow_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL::bigint)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    p  record;
    sh boolean[];
BEGIN
    p := rl._parse_limits($2);
    -- 0018: "shadow": true makes a limit a shadow limit; false, null or
    -- missing, an enforced one (0019: rl._parse_shadows).
    sh := rl._parse_shadows($2);
    RETURN QUERY SELECT * FROM rl.rl_decide_multi($1, p.names, p.algs, p.lims, p.wins, p.rates, $3, $4, true, sh);
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_peek_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL::bigint)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    p  record;
    sh boolean[];
BEGIN
    p := rl._parse_limits($2);
    -- 0019: shadow limits as rl_allow_multi takes them, peeked as
    -- store.Policy.Decide peeks them.
    sh := rl._parse_shadows($2);
    RETURN QUERY SELECT * FROM rl.rl_decide_multi($1, p.names, p.algs, p.lims, p.wins, p.rates, $3, $4, false, sh);
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_settle_multi(key text, limits jsonb, delta bigint, now_us bigint DEFAULT NULL::bigint)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    p record;
BEGIN
    p := rl._parse_limits($2);
    -- 0019: "shadow" checked as rl_allow_multi checks it, then ignored: a
    -- settle corrects every limit alike, shadow or not (store.Policy.Decide
    -- with store.Settle).
    PERFORM rl._parse_shadows($2);
    RETURN QUERY SELECT * FROM rl.rl_settle_decide($1, p.names, p.algs, p.lims, p.wins, p.rates, $3, $4);
END
$function$;

COMMENT ON FUNCTION rl.rl_settle_multi(text,jsonb,bigint,bigint) IS 'Settles delta units on several limits of key, all or nothing (core.SettleAll), given as rl_allow_multi takes them ("shadow" checked and ignored: every limit is settled); one row per limit, the first deciding. See sql/README.md.';

-- New functions are executable by PUBLIC until revoked (see 0007).
-- rl._parse_shadows is internal, granted to nobody; the functions replaced
-- above keep their grants.
REVOKE ALL ON FUNCTION rl._parse_shadows(jsonb) FROM PUBLIC;
