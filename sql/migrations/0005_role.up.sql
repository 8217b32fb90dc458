-- 0005: the role rl_app and the privileges.
--
-- rl_app (NOLOGIN) may use the schema rl and EXECUTE its public functions,
-- which are SECURITY DEFINER; it has no access to rl.state. Grant it to the
-- application's login role: GRANT rl_app TO myapp;
--
-- Roles belong to the cluster, not to a database: rl_app is created only if
-- missing and shared by every database migrated in the cluster. The loop
-- copes with a migration in another database creating or dropping it at the
-- same moment.
SET LOCAL search_path = pg_catalog, pg_temp;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rl FROM PUBLIC;

DO $do$
BEGIN
    FOR attempt IN 1 .. 5 LOOP
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'rl_app') THEN
                CREATE ROLE rl_app NOLOGIN;
                COMMENT ON ROLE rl_app IS 'rl: created by the rl migrations (0005_role); runs the rl.* functions, no table access';
            END IF;
            GRANT USAGE ON SCHEMA rl TO rl_app;
            GRANT EXECUTE ON FUNCTION
                rl.decide(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint, text),
                rl.decide_all(rl.limit_spec[], rl.state_words[], bigint, bigint, text),
                rl.algorithm_id(text),
                rl.algorithm_name(integer),
                rl.rl_allow(text, text, bigint, interval, bigint, bigint, text, bigint),
                rl.rl_allow_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
                rl.rl_peek(text, text, bigint, interval, bigint, bigint, text, bigint),
                rl.rl_peek_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
                rl.rl_allow_multi(text, jsonb, bigint, bigint),
                rl.rl_peek_multi(text, jsonb, bigint, bigint),
                rl.rl_decide_multi(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint, boolean),
                rl.rl_reset(text, text),
                rl.rl_expire(bigint, integer),
                rl.enforce_limit()
                TO rl_app;
            RETURN;
        EXCEPTION WHEN duplicate_object OR unique_violation OR undefined_object THEN
            IF attempt = 5 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
END
$do$;
