-- Reverts 0003.
SET LOCAL search_path = pg_catalog, pg_temp;

DROP FUNCTION rl.rl_expire(bigint, integer);
DROP FUNCTION rl.rl_reset(text, text);
DROP FUNCTION rl.rl_decide_multi(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint, boolean);
DROP FUNCTION rl.rl_peek_multi(text, jsonb, bigint, bigint);
DROP FUNCTION rl.rl_allow_multi(text, jsonb, bigint, bigint);
DROP FUNCTION rl.rl_peek_us(text, text, bigint, bigint, bigint, bigint, text, bigint);
DROP FUNCTION rl.rl_peek(text, text, bigint, interval, bigint, bigint, text, bigint);
DROP FUNCTION rl.rl_allow_us(text, text, bigint, bigint, bigint, bigint, text, bigint);
DROP FUNCTION rl.rl_allow(text, text, bigint, interval, bigint, bigint, text, bigint);
DROP FUNCTION rl._take_many(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint, boolean);
DROP FUNCTION rl._take1(text, text, integer, bigint, bigint, bigint, bigint, bigint, boolean);
DROP FUNCTION rl._parse_limits(jsonb);
DROP FUNCTION rl._jint(jsonb, text, integer);
DROP FUNCTION rl._interval_us(interval);
DROP FUNCTION rl._check_key(text, text);
DROP FUNCTION rl._now();
DROP FUNCTION rl._clock();
DROP TYPE rl.multi_decision;
DROP TYPE rl.decision;
