-- rl_native 1: rl._eval in C (rl_native.c). sql/native/README.md.
\echo Use "CREATE EXTENSION rl_native" to load this file. \quit

-- The native step under a name of its own: rl._eval's signature and
-- semantics, for comparing the two ports side by side.
CREATE FUNCTION rl_native.eval(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer, s_t bigint,
                               s_x bigint, s_y bigint, s_log bigint[], p_now bigint, p_cost bigint, p_take boolean)
    RETURNS rl._eval_result
    LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'rl_eval';

-- The definition rl._eval had before rl_native.enable() replaced it.
CREATE TABLE rl_native.saved (definition text NOT NULL);

-- enable: rl._eval becomes the C function (the same OID, owner, grants and
-- comment: every decision function calls it by name). A superuser runs it
-- once per database (CREATE FUNCTION ... LANGUAGE c needs one); returns what
-- it did. A migration or ALTER EXTENSION rl UPDATE that redefines rl._eval
-- puts the PL/pgSQL port back: run it again afterwards.
CREATE FUNCTION rl_native.enable()
    RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    f    regprocedure := to_regprocedure('rl._eval(integer,bigint,bigint,bigint,integer,bigint,bigint,bigint,bigint[],bigint,bigint,boolean)');
    lang name;
BEGIN
    IF f IS NULL THEN
        RAISE EXCEPTION 'rl_native: schema rl has no rl._eval: install rl first (rl-migrate up, or CREATE EXTENSION rl)'
            USING ERRCODE = 'undefined_function';
    END IF;
    SELECT l.lanname INTO lang FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.oid = f;
    IF lang = 'c' THEN
        RETURN 'rl._eval is already native';
    END IF;
    DELETE FROM rl_native.saved;
    INSERT INTO rl_native.saved (definition) VALUES (pg_get_functiondef(f));
    EXECUTE 'CREATE OR REPLACE FUNCTION rl._eval(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer,'
            ' s_t bigint, s_x bigint, s_y bigint, s_log bigint[], p_now bigint, p_cost bigint, p_take boolean)'
            ' RETURNS rl._eval_result LANGUAGE c IMMUTABLE PARALLEL SAFE AS ''MODULE_PATHNAME'', ''rl_eval''';
    RETURN 'rl._eval is native (was ' || lang || ')';
END
$fn$;

-- disable: rl._eval as it was before enable(), if enable() made it native
-- and nothing has redefined it since. Run it before DROP EXTENSION
-- rl_native; returns what it did.
CREATE FUNCTION rl_native.disable()
    RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    f    regprocedure := to_regprocedure('rl._eval(integer,bigint,bigint,bigint,integer,bigint,bigint,bigint,bigint[],bigint,bigint,boolean)');
    lang name;
    def  text;
BEGIN
    SELECT l.lanname INTO lang FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.oid = f;
    SELECT s.definition INTO def FROM rl_native.saved s;
    IF lang IS DISTINCT FROM 'c' OR def IS NULL THEN
        DELETE FROM rl_native.saved;
        RETURN 'rl._eval is not native: nothing to do';
    END IF;
    EXECUTE def;
    DELETE FROM rl_native.saved;
    RETURN 'rl._eval is the PL/pgSQL port again';
END
$fn$;

REVOKE EXECUTE ON FUNCTION rl_native.enable() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rl_native.disable() FROM PUBLIC;
