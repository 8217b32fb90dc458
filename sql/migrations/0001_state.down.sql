-- Reverts 0001. Fails (and changes nothing) if somebody put other objects
-- into the schema rl: move them out first.
SET LOCAL search_path = pg_catalog, pg_temp;

DROP TABLE rl.state;
DROP SCHEMA rl;
