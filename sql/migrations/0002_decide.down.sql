-- Reverts 0002.
SET LOCAL search_path = pg_catalog, pg_temp;

DROP FUNCTION rl.algorithm_name(integer);
DROP FUNCTION rl.algorithm_id(text);
DROP FUNCTION rl.decide_all(rl.limit_spec[], rl.state_words[], bigint, bigint, text);
DROP FUNCTION rl.decide(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint, text);
DROP FUNCTION rl._eval(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint, boolean);
DROP FUNCTION rl._alg(text);
DROP FUNCTION rl._raise(integer, text);
DROP FUNCTION rl._error_message(integer);
DROP FUNCTION rl._ceil_div_signed(bigint, bigint);
DROP FUNCTION rl._ceil_div(bigint, bigint);
DROP TYPE rl._eval_result;
DROP TYPE rl.decision_state;
DROP TYPE rl.state_words;
DROP TYPE rl.limit_spec;
