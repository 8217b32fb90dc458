-- 0006 down: drop rl.lock_states.
SET LOCAL search_path = pg_catalog, pg_temp;
DROP FUNCTION rl.lock_states(text, text[]);
