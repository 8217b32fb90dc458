-- Reverts 0005: revokes rl_app's privileges here and drops the role only if
-- these migrations created it and nothing else uses it: no member roles, no
-- privileges or objects in any database of the cluster. Otherwise it stays
-- (with a NOTICE), so another database's rl, or an admin's setup, keeps working.
SET LOCAL search_path = pg_catalog, pg_temp;

GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA rl TO PUBLIC;

DO $do$
DECLARE
    rid oid;
BEGIN
    SELECT oid INTO rid FROM pg_catalog.pg_roles WHERE rolname = 'rl_app';
    IF rid IS NULL THEN
        RETURN;
    END IF;
    REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rl FROM rl_app;
    REVOKE ALL ON SCHEMA rl FROM rl_app;
    IF pg_catalog.shobj_description(rid, 'pg_authid') IS DISTINCT FROM
            'rl: created by the rl migrations (0005_role); runs the rl.* functions, no table access' THEN
        RAISE NOTICE 'role rl_app kept: it was not created by the rl migrations';
        RETURN;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_auth_members WHERE roleid = rid) THEN
        RAISE NOTICE 'role rl_app kept: it is granted to other roles';
        RETURN;
    END IF;
    BEGIN
        DROP ROLE rl_app;
    EXCEPTION WHEN SQLSTATE '2BP01' OR insufficient_privilege OR object_in_use THEN
        RAISE NOTICE 'role rl_app kept: %', SQLERRM;
    END;
END
$do$;
