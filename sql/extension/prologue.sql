-- Refuse a superuser owner unless rl.allow_superuser is on (sql/README.md, "Who may install it")
-- ==============================================================================================
--
-- Whoever runs the script owns what it creates, and every SECURITY DEFINER
-- function of rl runs as its owner: a superuser is refused (42501), or
-- warned when rl.allow_superuser is on. It creates nothing. The same check
-- begins every install and update script (sql/extension/prologue.sql).

DO $rl_owner_check$
DECLARE
    action CONSTANT text := '@ACTION@';
    allow text := pg_catalog.lower(pg_catalog.btrim(coalesce(pg_catalog.current_setting('rl.allow_superuser', true), '')));
    alternative CONSTANT text := CASE WHEN pg_catalog.starts_with(action, 'install')
        THEN 'Create an ordinary owner role (no SUPERUSER) that owns the database and install it as that role: '
             'CREATE ROLE rl_owner LOGIN; ALTER DATABASE ... OWNER TO rl_owner; then, connected as rl_owner, CREATE EXTENSION rl '
             '(sql/README.md, "Installing without a superuser").'
        ELSE 'Connect as the ordinary role that owns schema rl and run ALTER EXTENSION rl UPDATE as it '
             '(sql/README.md, "Installing without a superuser").'
    END;
BEGIN
    IF NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER), false) THEN
        RETURN;
    END IF;
    IF allow IN ('on', 'true', 'yes', '1') THEN
        RAISE WARNING 'the superuser "%" is about to %: every SECURITY DEFINER function of rl will run with superuser rights for any caller', CURRENT_USER, action
            USING DETAIL = 'rl.allow_superuser is on. The owner of schema rl must be an ordinary role, never a superuser.',
                  HINT = alternative;
    ELSIF allow IN ('', 'off', 'false', 'no', '0') THEN
        RAISE EXCEPTION 'refusing to % as the superuser "%": every SECURITY DEFINER function of rl would run with superuser rights for any caller', action, CURRENT_USER
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The owner of schema rl must be an ordinary role, never a superuser: whoever runs the script owns what it creates. Nothing was changed.',
                  HINT = alternative || ' To do it as a superuser anyway, SET rl.allow_superuser = on first.';
    ELSE
        RAISE EXCEPTION 'rl.allow_superuser is "%": want on or off', pg_catalog.current_setting('rl.allow_superuser', true)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$rl_owner_check$;
