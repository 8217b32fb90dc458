-- Who may do what. The roles belong to the cluster, not to a database: each
-- is created only if missing and shared by every database holding rl; the
-- loop copes with another database creating or dropping one at the same
-- moment. Neither is ever dropped with the schema (sql/README.md, "Roles,
-- trust and tenants").
--
-- * rl_app (NOLOGIN) may use the schema rl and EXECUTE its public
--   functions, which are SECURITY DEFINER; it has no access to rl.state.
--   Grant it to the application's login role: GRANT rl_app TO myapp;
-- * rl_admin (NOLOGIN): trusted. It has what rl_app has (it is a member),
--   rl_expire and rl.lock_states, and SELECT and UPDATE on rl.state with
--   rl._now() for pgstore's Go/WebAssembly path (lock, decide, write back),
--   and SELECT on the view rl.states.
DO $do$
BEGIN
    FOR attempt IN 1 .. 5 LOOP
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'rl_app') THEN
                CREATE ROLE rl_app NOLOGIN;
                COMMENT ON ROLE rl_app IS 'rl: created by the rl migrations (0005_role); runs the rl.* functions, no table access';
            END IF;
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'rl_admin') THEN
                CREATE ROLE rl_admin NOLOGIN;
                COMMENT ON ROLE rl_admin IS 'rl: created by the rl migrations (0007_trust); trusted: its request times are honoured, runs rl_expire and rl.lock_states';
            END IF;
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_auth_members m
                            WHERE m.roleid = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = 'rl_app')
                              AND m.member = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = 'rl_admin')) THEN
                GRANT rl_app TO rl_admin;
            END IF;
            RETURN;
        EXCEPTION WHEN duplicate_object OR unique_violation OR undefined_object THEN
            IF attempt = 5 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
END
$do$;

-- No function of rl is anyone's but its owner's unless granted below.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rl FROM PUBLIC;

GRANT USAGE ON SCHEMA rl TO rl_app, rl_admin;

GRANT EXECUTE ON FUNCTION
    rl.algorithm_id(text),
    rl.algorithm_name(integer),
    rl.decide(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint, text, bigint, bigint, bigint),
    rl.decide_all(rl.limit_spec[], rl.state_words[], bigint, bigint, text),
    rl.enforce_limit(),
    rl._enforce_limit(oid, text, text[], boolean, text),
    rl.rl_allow(text, text, bigint, interval, bigint, bigint, text, bigint),
    rl.rl_allow_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
    rl.rl_peek(text, text, bigint, interval, bigint, bigint, text, bigint),
    rl.rl_peek_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
    rl.rl_settle(text, text, bigint, interval, bigint, bigint, text, bigint),
    rl.rl_settle_us(text, text, bigint, bigint, bigint, bigint, text, bigint),
    rl.rl_allow_multi(text, jsonb, bigint, bigint),
    rl.rl_peek_multi(text, jsonb, bigint, bigint),
    rl.rl_settle_multi(text, jsonb, bigint, bigint),
    rl.rl_decide_multi(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint, boolean, boolean[]),
    rl.rl_settle_decide(text, text[], integer[], bigint[], bigint[], bigint[], bigint, bigint),
    rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[], boolean[], boolean[]),
    rl.rl_reset(text, text),
    rl.us_to_interval(bigint),
    rl.us_to_timestamptz(bigint),
    rl.readable(rl.decision),
    rl.readable(rl.multi_decision),
    rl.check_limit_trigger(regclass, name),
    rl._check_limit_trigger_args(regclass, name, text[]),
    rl.create_limit_trigger(regclass, text, text, bigint, interval, bigint, text, text, name)
    TO rl_app;

GRANT EXECUTE ON FUNCTION
    rl._now(),
    rl.rl_expire(bigint, integer),
    rl.lock_states(text, text[]),
    rl.lock_states_batch(text[], text[]),
    rl.drop_fresh_states(text[], text[]),
    rl._state_peek(integer, bigint, bigint, bigint, bigint[], bigint, bigint, bigint, bigint, bigint)
    TO rl_admin;

GRANT SELECT, UPDATE ON rl.state TO rl_admin;

-- rl.states shows every key: trusted roles only, as rl.state.
GRANT SELECT ON rl.states TO rl_admin;
