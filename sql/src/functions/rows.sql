
CREATE OR REPLACE FUNCTION rl._lock_batch(p_keys text[], p_names text[], OUT states rl.state_words[], OUT created boolean[])
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    m     integer := coalesce(cardinality(p_keys), 0);
    got   integer;
    ok    boolean := false;
    st    rl.state_words;
    c     boolean;
    tries integer;
BEGIN
    IF m = 0 THEN
        states := '{}';
        created := '{}';
        RETURN;
    END IF;
    -- Every row present, the common case: one statement locks them in order
    -- (the locking happens above the sort). A row missing (or deleted
    -- meanwhile) rolls the subtransaction back, which releases the locks it
    -- took: nothing stays locked out of order.
    BEGIN
        SELECT array_agg(ROW(l.algorithm, l.t, l.x, l.y, l.log, l.l, l.w, l.r)::rl.state_words ORDER BY l.o), count(*)
          INTO states, got
          FROM (SELECT u.o, s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r
                  FROM unnest(p_keys, p_names) WITH ORDINALITY AS u(k, n, o)
                  JOIN rl.state s ON s.key = u.k AND s.name = u.n
                 ORDER BY u.o
                   FOR UPDATE OF s) l;
        IF got < m THEN
            RAISE EXCEPTION USING ERRCODE = 'RL999', MESSAGE = 'ratelimit: internal: a row is missing';
        END IF;
        ok := true;
    EXCEPTION WHEN SQLSTATE 'RL999' THEN
        ok := false;
    END;
    IF ok THEN
        created := array_fill(false, ARRAY[m]);
        RETURN;
    END IF;
    -- Row by row, in the same order, creating the missing ones (the protocol
    -- of rl._take_many and rl.lock_states).
    states := '{}';
    created := '{}';
    FOR i IN 1 .. m LOOP
        tries := 0;
        c := false;
        LOOP
            SELECT s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r INTO st
              FROM rl.state s WHERE s.key = p_keys[i] AND s.name = p_names[i] FOR UPDATE;
            EXIT WHEN FOUND;
            tries := tries + 1;
            IF tries > 100 THEN
                RAISE EXCEPTION 'ratelimit: the state row kept changing; retry the transaction'
                    USING ERRCODE = 'serialization_failure';
            END IF;
            INSERT INTO rl.state AS s (key, name) VALUES (p_keys[i], p_names[i]) ON CONFLICT DO NOTHING;
            c := c OR FOUND;
        END LOOP;
        states[i] := st;
        created[i] := c;
    END LOOP;
END
$function$;

CREATE OR REPLACE FUNCTION rl._lock_state(p_key text, p_name text, OUT st rl.state_words, OUT created boolean)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    tries integer := 0;
BEGIN
    created := false;
    LOOP
        SELECT s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r INTO st
          FROM rl.state s WHERE s.key = p_key AND s.name = p_name FOR UPDATE;
        EXIT WHEN FOUND;
        tries := tries + 1;
        IF tries > rl._lock_tries() THEN
            RAISE EXCEPTION 'ratelimit: the state row kept changing; retry the transaction'
                USING ERRCODE = 'serialization_failure';
        END IF;
        INSERT INTO rl.state AS s (key, name) VALUES (p_key, p_name) ON CONFLICT DO NOTHING;
        IF FOUND THEN
            created := true;
        END IF;
    END LOOP;
END
$function$;

CREATE OR REPLACE FUNCTION rl.drop_fresh_states(keys text[], names text[])
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    n bigint;
BEGIN
    PERFORM rl._require_trusted('rl.drop_fresh_states');
    DELETE FROM rl.state s
     USING unnest($1, $2) AS u(k, n)
     WHERE s.key = u.k AND s.name = u.n
       AND s.algorithm = 0 AND s.t = 0 AND s.x = 0 AND s.y = 0 AND cardinality(s.log) = 0
       AND s.l = 0 AND s.w = 0 AND s.r = 0 AND s.expires_at = 0;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$function$;

CREATE FUNCTION rl.lock_states(p_key text, p_names text[])
 RETURNS TABLE(name text, algorithm integer, t bigint, x bigint, y bigint, log bigint[], now_us bigint, l bigint, w bigint, r bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    nm    text;
    st    rl.state_words;
    v_now bigint;
BEGIN
    -- The caller writes the rows back itself (UPDATE rl.state), so only a
    -- trusted role may lock them: one with the table's privileges anyway.
    PERFORM rl._require_trusted('rl.lock_states');
    PERFORM rl._check_key(p_key, 'key');
    v_now := rl._request_now(NULL);
    FOR nm IN SELECT d.n FROM (SELECT DISTINCT u.n FROM unnest(p_names) AS u(n)) d ORDER BY d.n COLLATE "C" LOOP
        PERFORM rl._check_key(nm, 'limit name');
        st := (rl._lock_state(p_key, nm)).st;
        name := nm; algorithm := st.algorithm; t := st.t; x := st.x; y := st.y; log := st.log; now_us := v_now;
        l := st.l; w := st.w; r := st.r;
        RETURN NEXT;
    END LOOP;
END
$function$;
COMMENT ON FUNCTION rl.lock_states(text,text[]) IS 'Locks (creating if missing) the state rows of names on key in bytewise name order; for deciding outside SQL';

CREATE FUNCTION rl.lock_states_batch(keys text[], names text[])
 RETURNS TABLE(key text, name text, algorithm integer, t bigint, x bigint, y bigint, log bigint[], created boolean, now_us bigint, l bigint, w bigint, r bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
DECLARE
    p_keys  ALIAS FOR $1;
    p_names ALIAS FOR $2;
    v_now   bigint;
    ks      text[];
    ns      text[];
    lk      record;
BEGIN
    PERFORM rl._require_trusted('rl.lock_states_batch');
    IF cardinality(p_keys) IS DISTINCT FROM cardinality(p_names) THEN
        PERFORM rl._raise(10, 'rl.lock_states_batch: keys and names differ in length');
    END IF;
    IF EXISTS (SELECT FROM unnest(p_keys, p_names) AS u(k, n)
                WHERE (octet_length(u.k) BETWEEN 1 AND 256 AND octet_length(u.n) BETWEEN 1 AND 256) IS NOT TRUE) THEN
        PERFORM rl._check_key(u.k, 'key'), rl._check_key(u.n, 'limit name')
           FROM unnest(p_keys, p_names) AS u(k, n);
    END IF;
    v_now := rl._request_now(NULL);
    SELECT coalesce(array_agg(d.k ORDER BY d.k COLLATE "C", d.n COLLATE "C"), '{}'),
           coalesce(array_agg(d.n ORDER BY d.k COLLATE "C", d.n COLLATE "C"), '{}')
      INTO ks, ns
      FROM (SELECT DISTINCT u.k, u.n FROM unnest(p_keys, p_names) AS u(k, n)) d;
    SELECT * INTO lk FROM rl._lock_batch(ks, ns);
    RETURN QUERY SELECT u.k, u.n, u.sa, u.st, u.sx, u.sy, u.slog, u.c, v_now, u.sl, u.sw, u.sr
                   FROM unnest(ks, ns, lk.states, lk.created) AS u(k, n, sa, st, sx, sy, slog, sl, sw, sr, c);
END
$function$;
COMMENT ON FUNCTION rl.lock_states_batch(text[],text[]) IS 'Locks (creating if missing) the state rows of many (key, name) pairs in (key, name) bytewise order; for deciding outside SQL';

-- rl.rl_expire, as in 0003, for trusted roles only.
CREATE OR REPLACE FUNCTION rl.rl_expire(now_us bigint DEFAULT NULL, batch integer DEFAULT 10000) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    v_now bigint;
    n     bigint;
BEGIN
    -- It deletes any idle row, of every tenant, at any time it is given.
    PERFORM rl._require_trusted('rl.rl_expire');
    v_now := rl._request_now($1);
    IF batch < 1 THEN
        RAISE EXCEPTION 'ratelimit: batch must be at least 1, not %', batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM rl.state s
     WHERE (s.key, s.name) IN (SELECT d.key, d.name FROM rl.state d
                                WHERE d.expires_at <= v_now
                                ORDER BY d.expires_at
                                LIMIT batch
                                FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$fn$;

-- rl.rl_reset, as in 0003, for keys the caller may use.
CREATE OR REPLACE FUNCTION rl.rl_reset(key text, name text DEFAULT NULL) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    n     bigint;
    names text[];
    p     record;
BEGIN
    SELECT * INTO p FROM rl._tenant_problem($1, NULL);
    IF p.code IS NOT NULL THEN
        -- Raised here, not by a helper: the error's CONTEXT is one line, this function's.
        RAISE EXCEPTION USING ERRCODE = p.code, MESSAGE = p.message, DETAIL = p.detail;
    END IF;
    -- Lock in name order first, as every writer does, then delete exactly
    -- the rows locked (rows created meanwhile are not waited for).
    SELECT array_agg(l.name) INTO names
      FROM (SELECT s.name FROM rl.state s WHERE s.key = $1 AND ($2 IS NULL OR s.name = $2)
             ORDER BY s.name COLLATE "C" FOR UPDATE) l;
    DELETE FROM rl.state s WHERE s.key = $1 AND s.name = ANY (names);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$fn$;
