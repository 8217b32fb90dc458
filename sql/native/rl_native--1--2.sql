-- rl_native 2: rl._eval and rl._settle in C (rl_native.c), for schema rl at
-- migration 17 (the states' recorded parameters, carry-over and settle),
-- and rl._eval alone, as version 1, for a schema before it.
-- sql/native/README.md. CREATE EXTENSION rl_native installs version 1,
-- then this.
\echo Use "CREATE EXTENSION rl_native" or "ALTER EXTENSION rl_native UPDATE" to load this file. \quit

-- The native steps under names of their own, with the signatures of
-- migration 17's rl._eval and rl._settle, for comparing the two ports side
-- by side. (One library function serves both signatures of rl._eval: with
-- 12 arguments, before migration 17, a state records no parameters.)
DROP FUNCTION rl_native.eval(integer, bigint, bigint, bigint, integer, bigint, bigint, bigint, bigint[], bigint, bigint, boolean);

CREATE FUNCTION rl_native.eval(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer, s_t bigint,
                               s_x bigint, s_y bigint, s_log bigint[], s_l bigint, s_w bigint, s_r bigint,
                               p_now bigint, p_cost bigint, p_take boolean)
    RETURNS rl._eval_result
    LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'rl_eval';

CREATE FUNCTION rl_native.settle(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer, s_t bigint,
                                 s_x bigint, s_y bigint, s_log bigint[], s_l bigint, s_w bigint, s_r bigint,
                                 p_now bigint, p_delta bigint)
    RETURNS rl._eval_result
    LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'rl_settle';

-- The function each saved definition defines (regprocedure text; NULL in a
-- row saved by version 1: rl._eval before migration 17).
ALTER TABLE rl_native.saved ADD COLUMN fn text;

-- enable: the PL/pgSQL steps become the C functions (the same OIDs, owners,
-- grants and comments: every decision function calls them by name): at
-- migration 17 or later rl._eval and rl._settle, before it rl._eval alone.
-- Their definitions are saved in rl_native.saved. A superuser runs it once
-- per database (CREATE FUNCTION ... LANGUAGE c needs one); returns what it
-- did. A migration or ALTER EXTENSION rl UPDATE that redefines them puts
-- the PL/pgSQL port back: run it again afterwards.
CREATE OR REPLACE FUNCTION rl_native.enable()
    RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e17  regprocedure := to_regprocedure('rl._eval(integer,bigint,bigint,bigint,integer,bigint,bigint,bigint,bigint[],bigint,bigint,bigint,bigint,bigint,boolean)');
    s17  regprocedure := to_regprocedure('rl._settle(integer,bigint,bigint,bigint,integer,bigint,bigint,bigint,bigint[],bigint,bigint,bigint,bigint,bigint)');
    e16  regprocedure := to_regprocedure('rl._eval(integer,bigint,bigint,bigint,integer,bigint,bigint,bigint,bigint[],bigint,bigint,boolean)');
    elang name;
    slang name;
BEGIN
    IF e17 IS NOT NULL AND s17 IS NOT NULL THEN
        SELECT l.lanname INTO elang FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.oid = e17;
        SELECT l.lanname INTO slang FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.oid = s17;
        IF elang = 'c' AND slang = 'c' THEN
            RETURN 'rl._eval and rl._settle are already native';
        END IF;
        DELETE FROM rl_native.saved;
        IF elang <> 'c' THEN
            INSERT INTO rl_native.saved (definition, fn) VALUES (pg_get_functiondef(e17), e17::text);
            EXECUTE 'CREATE OR REPLACE FUNCTION rl._eval(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer,'
                    ' s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_l bigint, s_w bigint, s_r bigint, p_now bigint,'
                    ' p_cost bigint, p_take boolean)'
                    ' RETURNS rl._eval_result LANGUAGE c IMMUTABLE PARALLEL SAFE AS ''MODULE_PATHNAME'', ''rl_eval''';
        END IF;
        IF slang <> 'c' THEN
            INSERT INTO rl_native.saved (definition, fn) VALUES (pg_get_functiondef(s17), s17::text);
            EXECUTE 'CREATE OR REPLACE FUNCTION rl._settle(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer,'
                    ' s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_l bigint, s_w bigint, s_r bigint, p_now bigint,'
                    ' p_delta bigint)'
                    ' RETURNS rl._eval_result LANGUAGE c IMMUTABLE PARALLEL SAFE AS ''MODULE_PATHNAME'', ''rl_settle''';
        END IF;
        RETURN 'rl._eval and rl._settle are native (were ' || CASE WHEN elang = slang THEN elang::text
                                                                   ELSE elang || ' and ' || slang END || ')';
    END IF;
    IF e16 IS NULL THEN
        RAISE EXCEPTION 'rl_native: schema rl has no rl._eval: install rl first (rl-migrate up, or CREATE EXTENSION rl)'
            USING ERRCODE = 'undefined_function';
    END IF;
    -- Before migration 17: rl._eval alone, as version 1 makes it native.
    SELECT l.lanname INTO elang FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.oid = e16;
    IF elang = 'c' THEN
        RETURN 'rl._eval is already native';
    END IF;
    DELETE FROM rl_native.saved;
    INSERT INTO rl_native.saved (definition, fn) VALUES (pg_get_functiondef(e16), e16::text);
    EXECUTE 'CREATE OR REPLACE FUNCTION rl._eval(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, s_alg integer,'
            ' s_t bigint, s_x bigint, s_y bigint, s_log bigint[], p_now bigint, p_cost bigint, p_take boolean)'
            ' RETURNS rl._eval_result LANGUAGE c IMMUTABLE PARALLEL SAFE AS ''MODULE_PATHNAME'', ''rl_eval''';
    RETURN 'rl._eval is native (was ' || elang || ')';
END
$fn$;

-- disable: each function enable() made native, and that nothing has
-- redefined since, as it was before. Run it before DROP EXTENSION
-- rl_native; returns what it did.
CREATE OR REPLACE FUNCTION rl_native.disable()
    RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e17  regprocedure := to_regprocedure('rl._eval(integer,bigint,bigint,bigint,integer,bigint,bigint,bigint,bigint[],bigint,bigint,bigint,bigint,bigint,boolean)');
    back text[] := '{}';
    sv   record;
BEGIN
    FOR sv IN SELECT s.definition, f.oid::regprocedure::text AS fn
                FROM rl_native.saved s
                JOIN pg_proc f ON f.oid = to_regprocedure(coalesce(s.fn,
                    'rl._eval(integer,bigint,bigint,bigint,integer,bigint,bigint,bigint,bigint[],bigint,bigint,boolean)'))
                JOIN pg_language l ON l.oid = f.prolang
               WHERE l.lanname = 'c'
               ORDER BY 2 LOOP
        EXECUTE sv.definition;
        back := back || sv.fn;
    END LOOP;
    DELETE FROM rl_native.saved;
    IF cardinality(back) = 0 THEN
        RETURN 'rl._eval is not native: nothing to do';
    END IF;
    IF e17 IS NOT NULL THEN
        RETURN 'rl._eval and rl._settle are the PL/pgSQL port again';
    END IF;
    RETURN 'rl._eval is the PL/pgSQL port again';
END
$fn$;
