-- The extension rl installed as sql/README.md says: by an ordinary owner
-- role, never a superuser. Run by make installcheck (pg_regress) after
-- make install, as a superuser (the test creates its roles).
\set SHOW_CONTEXT never
-- Roles a failed run may have left behind.
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_rl_owner;
DROP ROLE IF EXISTS regress_rl_superuser;
RESET client_min_messages;

-- Once per cluster, as a superuser: the roles rl's grants name (the scripts
-- create them only when missing, which needs CREATEROLE), the owner, an
-- ordinary role allowed to create in this database, and a second superuser
-- whose name the messages below can show.
DO $$
BEGIN
    IF to_regrole('rl_app') IS NULL THEN CREATE ROLE rl_app NOLOGIN; END IF;
    IF to_regrole('rl_admin') IS NULL THEN CREATE ROLE rl_admin NOLOGIN; END IF;
    IF NOT pg_has_role('rl_admin', 'rl_app', 'MEMBER') THEN GRANT rl_app TO rl_admin; END IF;
END
$$;
CREATE ROLE regress_rl_owner NOSUPERUSER NOCREATEROLE NOCREATEDB;
DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO regress_rl_owner', current_database()); END $$;
CREATE ROLE regress_rl_superuser SUPERUSER;

-- A superuser is refused: it would own every definer-rights function of rl.
SET ROLE regress_rl_superuser;
CREATE EXTENSION rl;
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'rl';
SET rl.allow_superuser = maybe;
CREATE EXTENSION rl;
-- Told to, it installs with a WARNING, and the superuser owns it.
SET rl.allow_superuser = on;
CREATE EXTENSION rl;
SELECT extversion, extowner::regrole AS owner FROM pg_extension WHERE extname = 'rl';
DROP EXTENSION rl;
RESET rl.allow_superuser;
RESET ROLE;

-- The owner, an ordinary role: not a word.
SET ROLE regress_rl_owner;
CREATE EXTENSION rl;
SELECT extversion, extowner::regrole AS owner FROM pg_extension WHERE extname = 'rl';
SELECT count(*) AS superuser_owned FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
 WHERE p.pronamespace = 'rl'::regnamespace AND r.rolsuper;

-- A token bucket of 3 a second on user:1, at fixed times in µs since the
-- epoch (the owner is trusted with request times): three pass, the fourth
-- waits a third of a second.
SELECT i, (d).allowed, (d).remaining, (d).retry_after_us, (d).next_after_us
  FROM (SELECT i, rl.rl_allow_us('user:1', 'token_bucket', 3, 1000000, now_us => 1000000000000) AS d
          FROM generate_series(1, 4) i OFFSET 0) calls;
-- A peek takes nothing: cost 0 reads the remaining quota, 100 ms later.
SELECT allowed, remaining, retry_after_us
  FROM rl.rl_peek_us('user:1', 'token_bucket', 3, 1000000, cost => 0, now_us => 1000000100000);
-- At the retry time the fourth passes.
SELECT allowed, remaining, retry_after_us
  FROM rl.rl_allow_us('user:1', 'token_bucket', 3, 1000000, now_us => 1000000333334);
-- A cost known later: 2 more than taken puts the key in debt (a settle
-- never denies; it answers as a peek of cost 0 after it), and a call of
-- cost 1 must wait for the debt and one token, 1 s; a refund of 1 of them
-- shortens that to 2/3 s.
SELECT allowed, remaining, reset_after_us
  FROM rl.rl_settle_us('user:1', 'token_bucket', 3, 1000000, 2, now_us => 1000000333334);
SELECT allowed, remaining, retry_after_us
  FROM rl.rl_peek_us('user:1', 'token_bucket', 3, 1000000, now_us => 1000000333334);
SELECT allowed, remaining, reset_after_us
  FROM rl.rl_settle_us('user:1', 'token_bucket', 3, 1000000, -1, now_us => 1000000333334);
SELECT allowed, remaining, retry_after_us
  FROM rl.rl_peek_us('user:1', 'token_bucket', 3, 1000000, now_us => 1000000333334);
-- The interval form, and a sliding window of 2 a minute on another key.
SELECT allowed, remaining, retry_after_us
  FROM rl.rl_allow('user:2', 'sliding_window', 2, '1 minute', cost => 2, now_us => 1000000000000);
SELECT allowed, remaining, retry_after_us
  FROM rl.rl_allow('user:2', 'sliding_window', 2, '1 minute', now_us => 1000030000000);
SELECT key, algorithm FROM rl.state ORDER BY key;

-- Errors name the value and the allowed range.
SELECT * FROM rl.rl_allow_us('user:1', 'token_bucket', 0, 1000000, now_us => 1000000000000);
SELECT * FROM rl.rl_allow_us('user:1', 'bucket_of_tokens', 3, 1000000, now_us => 1000000000000);
SELECT * FROM rl.rl_allow_us('user:1', 'token_bucket', 3, 1000000, cost => -1, now_us => 1000000000000);

DROP EXTENSION rl;
RESET ROLE;
DROP OWNED BY regress_rl_owner;
DROP ROLE regress_rl_owner;
DROP ROLE regress_rl_superuser;
