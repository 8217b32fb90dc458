-- 0019 down: rl_allow_multi, rl_peek_multi and rl_settle_multi as 0018
-- left them (their text copied from sql/rl.sql at version 18): "shadow"
-- read by rl_allow_multi alone, ignored by the peek and the settle;
-- rl._parse_shadows dropped. States are unchanged.
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION rl.rl_allow_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL::bigint)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    p record;
    sh  boolean[];
    bad bigint;
BEGIN
    p := rl._parse_limits($2);
    -- 0018: "shadow": true makes a limit a shadow limit; false, null or
    -- missing, an enforced one.
    SELECT array_agg(CASE jsonb_typeof(u.e -> 'shadow') WHEN 'boolean' THEN (u.e ->> 'shadow')::boolean
                                                        WHEN 'null' THEN false END ORDER BY u.o),
           min(u.o) FILTER (WHERE u.e ? 'shadow' AND jsonb_typeof(u.e -> 'shadow') NOT IN ('boolean', 'null'))
      INTO sh, bad
      FROM jsonb_array_elements($2) WITH ORDINALITY AS u(e, o);
    IF bad IS NOT NULL THEN
        PERFORM rl._raise(10, format('limits[%s].shadow must be true or false', bad - 1));
    END IF;
    IF true = ANY (sh) THEN
        RETURN QUERY SELECT * FROM rl.rl_decide_multi($1, p.names, p.algs, p.lims, p.wins, p.rates, $3, $4, true,
                                                      ARRAY(SELECT coalesce(v, false) FROM unnest(sh) AS v));
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM rl.rl_decide_multi($1, p.names, p.algs, p.lims, p.wins, p.rates, $3, $4, true);
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_peek_multi(key text, limits jsonb, cost bigint DEFAULT 1, now_us bigint DEFAULT NULL::bigint)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    p record;
BEGIN
    p := rl._parse_limits($2);
    RETURN QUERY SELECT * FROM rl.rl_decide_multi($1, p.names, p.algs, p.lims, p.wins, p.rates, $3, $4, false);
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
    RETURN QUERY SELECT * FROM rl.rl_settle_decide($1, p.names, p.algs, p.lims, p.wins, p.rates, $3, $4);
END
$function$;

COMMENT ON FUNCTION rl.rl_settle_multi(text,jsonb,bigint,bigint) IS 'Settles delta units on several limits of key, all or nothing (core.SettleAll), given as rl_allow_multi takes them; one row per limit, the first deciding. See sql/README.md.';

DROP FUNCTION rl._parse_shadows(jsonb);
