-- 0010 down: the functions as 0009 left them (rl.rl_decide_multi's text
-- copied from 0008).
SET LOCAL search_path = pg_catalog, pg_temp;

ALTER FUNCTION rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[])
    RESET plan_cache_mode;
ALTER FUNCTION rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[])
    RESET enable_seqscan;
ALTER FUNCTION rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[])
    RESET enable_hashjoin;
ALTER FUNCTION rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[])
    RESET enable_mergejoin;
ALTER FUNCTION rl.lock_states_batch(text[], text[]) RESET plan_cache_mode;
ALTER FUNCTION rl.lock_states_batch(text[], text[]) RESET enable_seqscan;
ALTER FUNCTION rl.lock_states_batch(text[], text[]) RESET enable_hashjoin;
ALTER FUNCTION rl.lock_states_batch(text[], text[]) RESET enable_mergejoin;

-- rl.rl_decide_multi, as in 0007: the checks first; one well-formed limit is
-- decided by rl._decide1, anything else by rl._take_many, which validates
-- and raises in the documented order.
CREATE OR REPLACE FUNCTION rl.rl_decide_multi(key text, names text[], algorithms integer[], lims bigint[], windows_us bigint[],
                                   rates bigint[], cost bigint DEFAULT 1, now_us bigint DEFAULT NULL,
                                   take boolean DEFAULT true)
    RETURNS SETOF rl.multi_decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    p_key   ALIAS FOR $1;
    p_names ALIAS FOR $2;
    p_algs  ALIAS FOR $3;
    p_lims  ALIAS FOR $4;
    p_wins  ALIAS FOR $5;
    p_rates ALIAS FOR $6;
    p_cost  ALIAS FOR $7;
    p_now   ALIAS FOR $8;
    p_take  boolean := coalesce($9, true);
    r       rl._eval_result;
BEGIN
    -- Who may use the key, and the time to decide at (see the top of 0007):
    -- rl._decide1 and rl._take_many take p_now as given.
    PERFORM rl._check_tenant_key(p_key, NULL);
    p_now := rl._request_now(p_now);
    IF cardinality(p_names) = 1 AND octet_length(p_key) BETWEEN 1 AND 256
            AND octet_length(p_names[1]) BETWEEN 1 AND 256
            AND array_ndims(p_names) = 1 AND array_lower(p_names, 1) = 1
            AND cardinality(p_algs) = 1 AND cardinality(p_lims) = 1
            AND cardinality(p_wins) = 1 AND cardinality(p_rates) = 1
            AND array_lower(p_algs, 1) = 1 AND array_lower(p_lims, 1) = 1
            AND array_lower(p_wins, 1) = 1 AND array_lower(p_rates, 1) = 1 THEN
        r := rl._decide1(p_key, p_names[1], p_algs[1], p_lims[1], p_wins[1], p_rates[1], p_cost, p_now, p_take, true);
        RETURN NEXT ROW(0, p_names[1], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, true,
                        p_now)::rl.multi_decision;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM rl._take_many($1, $2, $3, $4, $5, $6, $7, $8, p_take);
END
$fn$;
