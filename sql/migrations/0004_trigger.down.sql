-- Reverts 0004. Fails while triggers still use rl.enforce_limit(): drop them
-- first (DROP TRIGGER ... ON ...); they are not dropped for you.
SET LOCAL search_path = pg_catalog, pg_temp;

DROP FUNCTION rl.enforce_limit();
