-- 0009 down: drop the batch functions and their row type.
SET LOCAL search_path = pg_catalog, pg_temp;

DROP FUNCTION rl.drop_fresh_states(text[], text[]);
DROP FUNCTION rl.lock_states_batch(text[], text[]);
DROP FUNCTION rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[]);
DROP FUNCTION rl._lock_batch(text[], text[]);
DROP TYPE rl.batch_decision;
