-- ALTER EXTENSION rl UPDATE from the oldest installable version (11) to
-- the default one, by the ordinary owner, keeping the rows. Run by make
-- installcheck after make install, as a superuser.
\set SHOW_CONTEXT never
-- Roles a failed run may have left behind.
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_rl_owner;
RESET client_min_messages;

DO $$
BEGIN
    IF to_regrole('rl_app') IS NULL THEN CREATE ROLE rl_app NOLOGIN; END IF;
    IF to_regrole('rl_admin') IS NULL THEN CREATE ROLE rl_admin NOLOGIN; END IF;
    IF NOT pg_has_role('rl_admin', 'rl_app', 'MEMBER') THEN GRANT rl_app TO rl_admin; END IF;
END
$$;
CREATE ROLE regress_rl_owner NOSUPERUSER NOCREATEROLE NOCREATEDB;
DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO regress_rl_owner', current_database()); END $$;

SELECT name, version FROM pg_available_extension_versions WHERE name = 'rl' ORDER BY version::int;
SELECT path FROM pg_extension_update_paths('rl') WHERE source = '11' AND target = '21';

SET ROLE regress_rl_owner;
CREATE EXTENSION rl VERSION '11';
SELECT extversion FROM pg_extension WHERE extname = 'rl';
-- In use at 11: a GCRA limit of 2 a second, both taken.
SELECT i, (d).allowed, (d).remaining, (d).retry_after_us
  FROM (SELECT i, rl.rl_allow_us('user:1', 'gcra', 2, 1000000, now_us => 1000000000000) AS d
          FROM generate_series(1, 3) i OFFSET 0) calls;

ALTER EXTENSION rl UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'rl';
-- The row is kept: still empty at the same time, and the later versions'
-- columns are there (next_after_us, since 16), their functions
-- (rl_settle_us, since 17) and 20's algorithm table (rl._windowed).
SELECT allowed, remaining, retry_after_us, next_after_us
  FROM rl.rl_peek_us('user:1', 'gcra', 2, 1000000, now_us => 1000000000000);
SELECT allowed, remaining, retry_after_us
  FROM rl.rl_settle_us('user:1', 'gcra', 2, 1000000, -1, now_us => 1000000000000);
SELECT to_regprocedure('rl._windowed(integer)') IS NOT NULL AS has_algorithm_table;
SELECT count(*) AS superuser_owned FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
 WHERE p.pronamespace = 'rl'::regnamespace AND r.rolsuper;

DROP EXTENSION rl;
RESET ROLE;
DROP OWNED BY regress_rl_owner;
DROP ROLE regress_rl_owner;
