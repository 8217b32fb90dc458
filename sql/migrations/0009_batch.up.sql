-- 0009 (after 0008, whose rl._eval, rl._all and rl._explain it calls): batched decisions. One call decides many requests, on many keys, in
-- one statement and one transaction (one commit, one fsync when durable):
--
--   rl.rl_decide_batch(keys, names, algorithms, lims, windows_us, rates
--                      [, costs [, limit_counts [, now_us [, take]]]])
--       -> SETOF rl.batch_decision, one row per limit of each request, in
--          input order (an invalid request: one row with its error).
--   rl.lock_states_batch(keys, names) -> the rows of the (key, name) pairs,
--       locked (created fresh when missing) in one order, for programs that
--       decide outside the database (pgstore's batched Go/WASM path); trusted
--       roles only, as rl.lock_states.
--   rl.drop_fresh_states(keys, names) -> deletes those of the rows that are
--       still fresh (never written), which rl.lock_states_batch created for a
--       request that was denied; trusted roles only.
--
-- Locking: every row a batch takes is locked in one order, bytewise by key,
-- then bytewise by name (COLLATE "C"), creating a missing row fresh at its
-- place in that order. A single-request function locks the rows of one key in
-- bytewise name order, which is the same order restricted to that key, so
-- batches, single calls and rl.lock_states never wait for each other in a
-- cycle. The common case (every row exists) is one statement
-- (SELECT ... ORDER BY ... FOR UPDATE locks in output order) inside a
-- subtransaction; if a row is missing the subtransaction is rolled back,
-- releasing what it locked, and the rows are locked one by one in the same
-- order, creating the missing ones.
--
-- Decisions: requests are decided in input order against the locked states,
-- so several requests for one key in a batch are decided one after the other
-- under one lock, exactly as if they had been separate calls in that order.
-- Each request is all or nothing across its limits (core.TakeAll: rl._all,
-- or rl._eval for a single limit), the same PL/pgSQL port of the core the
-- single-request functions use (0008); its checks (rl._limit_error,
-- rl._call_error, rl._state_error) run first so that an invalid request is
-- reported in its row instead of raised for the whole call. An invalid request gets its own error row
-- (error_code: the SQLSTATE the single-request functions raise, RL0NN or
-- 42501) and changes nothing; the others are decided. The new states are
-- written with one UPDATE; rows created for requests that wrote nothing are
-- deleted again.
--
-- Tenants and time: the rules of 0007. Every key is checked as
-- rl._check_tenant_key checks it (one lookup of the caller's prefixes per
-- call); a request time is honoured for trusted roles only, as
-- rl._request_now does.
SET LOCAL search_path = pg_catalog, pg_temp;

-- One row of rl.rl_decide_batch.
CREATE TYPE rl.batch_decision AS (
    req            integer, -- the request's position in keys (0-based)
    ord            integer, -- the limit's position within its request (0-based); NULL on an error row
    name           text,
    allowed        boolean, -- this limit's decision; the request admitted iff all its rows are allowed
    lim            bigint,
    remaining      bigint,
    reset_after_us bigint,
    retry_after_us bigint,  -- 0 when allowed; -1: never (cost above the limit)
    delay_us       bigint,
    deciding       boolean, -- the row core.TakeAll returns as its index
    now_us         bigint,  -- the time the request was decided at
    error_code     text,    -- NULL, or the SQLSTATE of the request's error (RL0NN: core.Error NN; 42501: tenant)
    error_message  text
);

COMMENT ON TYPE rl.batch_decision IS
    'One row of rl.rl_decide_batch: a limit of a request, or a request''s error (error_code set, ord NULL)';

-- rl._lock_batch locks the rows of the (key, name) pairs p_keys[i],
-- p_names[i], which the caller gives distinct, valid (1 to 256 bytes) and in
-- (key, name) bytewise order, creating missing rows fresh in passing, and
-- returns their states and whether this call created them, in that order.
-- Not granted.
CREATE FUNCTION rl._lock_batch(p_keys text[], p_names text[], OUT states rl.state_words[], OUT created boolean[])
    LANGUAGE plpgsql
AS $fn$
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
        SELECT array_agg(ROW(l.algorithm, l.t, l.x, l.y, l.log)::rl.state_words ORDER BY l.o), count(*)
          INTO states, got
          FROM (SELECT u.o, s.algorithm, s.t, s.x, s.y, s.log
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
            SELECT s.algorithm, s.t, s.x, s.y, s.log INTO st
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
$fn$;

-- rl.rl_decide_batch decides many requests in one call (see the top of this
-- file and sql/README.md, "Batched decisions"). Request r (1-based here,
-- 0-based in the result) has key keys[r], cost costs[r] (NULL array: 1),
-- limit_counts[r] limits (NULL array: one each) taken in turn from names,
-- algorithms, lims, windows_us and rates, time now_us[r] (NULL array or
-- element: the database clock; honoured for trusted roles only) and take[r]
-- (false: peek; NULL array or element: take).
CREATE FUNCTION rl.rl_decide_batch(keys text[], names text[], algorithms integer[], lims bigint[],
                                   windows_us bigint[], rates bigint[], costs bigint[] DEFAULT NULL,
                                   limit_counts integer[] DEFAULT NULL, now_us bigint[] DEFAULT NULL,
                                   take boolean[] DEFAULT NULL)
    RETURNS SETOF rl.batch_decision
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    p_keys   ALIAS FOR $1;
    p_names  ALIAS FOR $2;
    p_algs   ALIAS FOR $3;
    p_lims   ALIAS FOR $4;
    p_wins   ALIAS FOR $5;
    p_rates  ALIAS FOR $6;
    p_costs  ALIAS FOR $7;
    p_counts ALIAS FOR $8;
    p_nows   ALIAS FOR $9;
    p_takes  ALIAS FOR $10;
    nreq     integer := coalesce(cardinality(p_keys), 0);
    nlim     integer := coalesce(cardinality(p_names), 0);
    firsts   integer[];
    cnts     integer[];
    ecode    text[];
    emsg     text[];
    nows     bigint[];
    takes    boolean[];
    limkey   text[];
    limtake  boolean[];
    ptake    boolean[];
    lw       rl.state_words[];
    lc       boolean[];
    sk       text[];
    sn       text[];
    sw       rl.state_words[];
    sc       boolean[];
    sexp     bigint[];
    dirty    boolean[];
    slot     integer[];
    v_now    bigint;
    who      name;
    trusted  boolean;
    pfx      text[];
    k        text;
    f        integer;
    c        integer;
    j        integer;
    tk       boolean;
    p_cost   bigint;
    p_now    bigint;
    st       rl.state_words;
    r        rl._eval_result;
    rs       rl._eval_result[];
    ss       rl.state_words[];
    best     integer;
    bad      integer;
    total    bigint;
    any_dirty boolean := false;
BEGIN
    -- The shape of the call: an error here fails the whole call (RL010).
    IF (nreq > 0 AND (array_ndims(p_keys) <> 1 OR array_lower(p_keys, 1) <> 1))
            OR (nlim > 0 AND (array_ndims(p_names) <> 1 OR array_lower(p_names, 1) <> 1))
            OR coalesce(cardinality(p_algs), 0) <> nlim OR coalesce(cardinality(p_lims), 0) <> nlim
            OR coalesce(cardinality(p_wins), 0) <> nlim OR coalesce(cardinality(p_rates), 0) <> nlim
            OR (nlim > 0 AND (array_lower(p_algs, 1) <> 1 OR array_lower(p_lims, 1) <> 1
                              OR array_lower(p_wins, 1) <> 1 OR array_lower(p_rates, 1) <> 1))
            OR (p_costs IS NOT NULL AND (cardinality(p_costs) <> nreq OR (nreq > 0 AND array_lower(p_costs, 1) <> 1)))
            OR (p_nows IS NOT NULL AND (cardinality(p_nows) <> nreq OR (nreq > 0 AND array_lower(p_nows, 1) <> 1)))
            OR (p_takes IS NOT NULL AND (cardinality(p_takes) <> nreq OR (nreq > 0 AND array_lower(p_takes, 1) <> 1))) THEN
        PERFORM rl._raise(10, 'rl_decide_batch: keys, costs, now_us and take need one element per request, '
                              'names, algorithms, lims, windows_us and rates one per limit');
    END IF;
    IF p_counts IS NULL THEN
        IF nlim <> nreq THEN
            PERFORM rl._raise(10, 'rl_decide_batch: without limit_counts, each request has one limit');
        END IF;
    ELSE
        SELECT sum(u.c), count(*) FILTER (WHERE u.c IS NULL OR u.c < 0) INTO total, bad FROM unnest(p_counts) AS u(c);
        IF cardinality(p_counts) <> nreq OR (nreq > 0 AND array_lower(p_counts, 1) <> 1)
                OR bad > 0 OR coalesce(total, 0) <> nlim THEN
            PERFORM rl._raise(10, 'rl_decide_batch: limit_counts needs one count (0 or more) per request, adding up to the number of limits');
        END IF;
    END IF;
    IF nreq = 0 THEN
        RETURN;
    END IF;

    -- Time and tenants, once per call (0007's rules).
    v_now := rl._request_now(NULL);
    IF EXISTS (SELECT FROM rl.tenants) THEN
        who := rl._caller();
        trusted := rl._trusted(who);
        IF NOT trusted THEN
            SELECT array_agg(t.key_prefix ORDER BY t.key_prefix COLLATE "C") INTO pfx
              FROM rl.tenants t WHERE pg_has_role(who, t.role, 'MEMBER');
        END IF;
    END IF;

    -- Each request: check it, or give it its error; note each limit's key
    -- and whether a take uses it. The common call (one valid limit per
    -- request, no tenant restriction, no request times, no peeks) needs no
    -- loop: each statement in one costs per request.
    IF p_counts IS NULL AND pfx IS NULL AND p_nows IS NULL AND p_takes IS NULL
            AND (SELECT bool_and(octet_length(u.k) BETWEEN 1 AND 256 AND octet_length(u.n) BETWEEN 1 AND 256)
                   FROM unnest(p_keys, p_names) AS u(k, n)) THEN
        limkey := p_keys;
        limtake := array_fill(true, ARRAY[nlim]);
        firsts := ARRAY(SELECT generate_series(1, nreq));
        cnts := array_fill(1, ARRAY[nreq]);
        nows := array_fill(v_now, ARRAY[nreq]);
        takes := limtake;
        ecode := array_fill(NULL::text, ARRAY[nreq]);
        nreq := -nreq; -- skip the loop below
    ELSE
        limkey := array_fill(NULL::text, ARRAY[nlim]);
        limtake := array_fill(false, ARRAY[nlim]);
    END IF;
    j := 1;
    FOR q IN 1 .. nreq LOOP
        c := CASE WHEN p_counts IS NULL THEN 1 ELSE p_counts[q] END;
        firsts[q] := j;
        cnts[q] := c;
        j := j + c;
        k := p_keys[q];
        IF (octet_length(k) BETWEEN 1 AND 256) IS NOT TRUE THEN
            ecode[q] := 'RL011';
            emsg[q] := 'ratelimit: invalid key: it must be 1 to 256 bytes';
            CONTINUE;
        END IF;
        IF pfx IS NOT NULL AND NOT EXISTS (SELECT FROM unnest(pfx) AS u(p) WHERE starts_with(k, u.p)) THEN
            ecode[q] := '42501';
            emsg[q] := format('ratelimit: role %s may not use key %s', quote_ident(who), quote_literal(k));
            CONTINUE;
        END IF;
        IF c = 0 THEN
            ecode[q] := 'RL010';
            emsg[q] := rl._error_message(10);
            CONTINUE;
        END IF;
        FOR i IN firsts[q] .. firsts[q] + c - 1 LOOP
            IF (octet_length(p_names[i]) BETWEEN 1 AND 256) IS NOT TRUE THEN
                ecode[q] := 'RL011';
                emsg[q] := 'ratelimit: invalid limit name: it must be 1 to 256 bytes';
                EXIT;
            END IF;
            IF i > firsts[q] AND p_names[i] = ANY (p_names[firsts[q] : i - 1]) THEN
                ecode[q] := 'RL010';
                emsg[q] := rl._error_message(10);
                EXIT;
            END IF;
        END LOOP;
        CONTINUE WHEN ecode[q] IS NOT NULL;
        -- rl._request_now, with the caller's trust looked up once.
        IF p_nows IS NULL OR p_nows[q] IS NULL THEN
            nows[q] := v_now;
        ELSE
            IF trusted IS NULL THEN
                trusted := rl._trusted(rl._caller());
            END IF;
            nows[q] := CASE WHEN trusted THEN p_nows[q] ELSE v_now END;
        END IF;
        takes[q] := p_takes IS NULL OR coalesce(p_takes[q], true);
        FOR i IN firsts[q] .. firsts[q] + c - 1 LOOP
            limkey[i] := k;
            limtake[i] := takes[q];
        END LOOP;
    END LOOP;

    nreq := abs(nreq);
    -- The distinct rows of the valid requests in (key, name) bytewise
    -- order, whether a take uses them, and each limit's row (slot).
    SELECT array_agg(x.r ORDER BY x.j),
           coalesce(array_agg(x.k ORDER BY x.r) FILTER (WHERE x.first AND x.k IS NOT NULL), '{}'),
           coalesce(array_agg(x.n ORDER BY x.r) FILTER (WHERE x.first AND x.k IS NOT NULL), '{}'),
           coalesce(array_agg(x.t ORDER BY x.r) FILTER (WHERE x.first AND x.k IS NOT NULL), '{}')
      INTO slot, sk, sn, ptake
      FROM (SELECT l.j, l.k, l.n,
                   dense_rank() OVER (ORDER BY l.k COLLATE "C", l.n COLLATE "C") AS r,
                   row_number() OVER (PARTITION BY l.k, l.n ORDER BY l.j) = 1 AS first,
                   bool_or(l.t) OVER (PARTITION BY l.k, l.n) AS t
              FROM unnest(limkey, p_names, limtake) WITH ORDINALITY AS l(k, n, t, j)) x;
    -- Lock the rows the takes use, in that order; read the rows only peeked
    -- at.
    IF false = ANY (ptake) THEN
        SELECT l.states, l.created INTO lw, lc
          FROM rl._lock_batch(ARRAY(SELECT u.k FROM unnest(sk, ptake) WITH ORDINALITY AS u(k, t, o) WHERE u.t ORDER BY u.o),
                              ARRAY(SELECT u.n FROM unnest(sn, ptake) WITH ORDINALITY AS u(n, t, o) WHERE u.t ORDER BY u.o)) l;
        SELECT array_agg(CASE WHEN u.t THEN lw[u.lo]
                              ELSE coalesce((SELECT ROW(s.algorithm, s.t, s.x, s.y, s.log)::rl.state_words FROM rl.state s
                                              WHERE s.key = u.k AND s.name = u.n),
                                            ROW(0, 0, 0, 0, '{}')::rl.state_words) END ORDER BY u.o),
               array_agg(u.t AND lc[u.lo] ORDER BY u.o)
          INTO sw, sc
          FROM (SELECT v.k, v.n, v.t, v.o, count(*) FILTER (WHERE v.t) OVER (ORDER BY v.o) AS lo
                  FROM unnest(sk, sn, ptake) WITH ORDINALITY AS v(k, n, t, o)) u;
    ELSE
        SELECT l.states, l.created INTO sw, sc FROM rl._lock_batch(sk, sn) l;
    END IF;
    sexp := array_fill(NULL::bigint, ARRAY[cardinality(sk)]);
    dirty := array_fill(false, ARRAY[cardinality(sk)]);

    -- Decide, in input order.
    FOR q IN 1 .. nreq LOOP
        IF ecode[q] IS NOT NULL THEN
            RETURN NEXT ROW(q - 1, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, false, NULL,
                            ecode[q], emsg[q])::rl.batch_decision;
            CONTINUE;
        END IF;
        f := firsts[q];
        c := cnts[q];
        tk := takes[q];
        p_now := nows[q];
        p_cost := CASE WHEN p_costs IS NULL THEN 1 ELSE p_costs[q] END;
        IF c = 1 THEN
            -- One limit: core.TakeAll is core.Take, decided in one pass (as
            -- rl._all decides it).
            st := sw[slot[f]];
            r := rl._eval(p_algs[f], p_lims[f], p_wins[f], p_rates[f], st.algorithm, st.t, st.x, st.y, st.log,
                          p_now, p_cost, tk);
            IF r.err <> 0 THEN
                RETURN NEXT ROW(q - 1, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, false, p_now,
                                'RL0' || lpad(r.err::text, 2, '0'),
                                rl._explain(r.err, p_algs[f], p_lims[f], p_wins[f], p_rates[f], p_now, p_cost,
                                            st.algorithm, st.t, st.x, st.y, st.log)
                                || format(' (limit index 0, name %L)', p_names[f]))::rl.batch_decision;
                CONTINUE;
            END IF;
            IF tk AND r.allowed AND p_cost > 0 THEN
                sw[slot[f]] := ROW(r.algorithm, r.t, r.x, r.y, r.log)::rl.state_words;
                sexp[slot[f]] := p_now + r.reset_after;
                dirty[slot[f]] := true;
                any_dirty := true;
            END IF;
            RETURN NEXT ROW(q - 1, 0, p_names[f], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after,
                            r.delay, true, p_now, NULL, NULL)::rl.batch_decision;
            CONTINUE;
        END IF;
        -- Several limits: core.TakeAll / core.PeekAll (rl._all). Its checks
        -- first, in its order, so that an invalid request gets its error
        -- here instead of rl._all raising it for the whole call.
        ss := ARRAY(SELECT sw[slot[i]] FROM generate_series(f, f + c - 1) AS i ORDER BY i);
        bad := 0;
        FOR i IN 1 .. c LOOP
            st := ss[i];
            j := f + i - 1;
            bad := coalesce(nullif(rl._limit_error(p_algs[j], p_lims[j], p_wins[j], p_rates[j]), 0),
                            nullif(rl._call_error(p_now, p_cost), 0),
                            rl._state_error(coalesce(st.algorithm, 0), coalesce(st.t, 0), coalesce(st.x, 0),
                                            coalesce(st.y, 0), coalesce(st.log, '{}')));
            IF bad <> 0 THEN
                RETURN NEXT ROW(q - 1, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, false, p_now,
                                'RL0' || lpad(bad::text, 2, '0'),
                                rl._explain(bad, p_algs[j], p_lims[j], p_wins[j], p_rates[j], p_now, p_cost,
                                            st.algorithm, st.t, st.x, st.y, st.log)
                                || format(' (limit index %s, name %L)', i - 1, p_names[j]))::rl.batch_decision;
                EXIT;
            END IF;
        END LOOP;
        CONTINUE WHEN bad <> 0;
        SELECT a.rs, a.best INTO rs, best
          FROM rl._all(p_algs[f : f + c - 1], p_lims[f : f + c - 1], p_wins[f : f + c - 1], p_rates[f : f + c - 1],
                       ss, p_now, p_cost, tk, p_names[f : f + c - 1]) a;
        IF tk AND p_cost > 0 AND (rs[best]).allowed THEN
            FOR i IN 1 .. c LOOP
                r := rs[i];
                sw[slot[f + i - 1]] := ROW(r.algorithm, r.t, r.x, r.y, r.log)::rl.state_words;
                sexp[slot[f + i - 1]] := p_now + r.reset_after;
                dirty[slot[f + i - 1]] := true;
            END LOOP;
            any_dirty := true;
        END IF;
        FOR i IN 1 .. c LOOP
            r := rs[i];
            RETURN NEXT ROW(q - 1, i - 1, p_names[f + i - 1], r.allowed, r.lim, r.remaining, r.reset_after,
                            r.retry_after, r.delay, i = best, p_now, NULL, NULL)::rl.batch_decision;
        END LOOP;
    END LOOP;

    -- Write the new states back in one statement; delete the rows created
    -- for requests that wrote nothing.
    IF any_dirty THEN
        UPDATE rl.state s
           SET algorithm = u.algorithm, t = u.t, x = u.x, y = u.y, log = u.log, expires_at = u.e
          FROM unnest(sk, sn, sexp, dirty, sw) AS u(k, n, e, d, algorithm, t, x, y, log)
         WHERE u.d AND s.key = u.k AND s.name = u.n;
    END IF;
    IF true = ANY (sc) THEN
        DELETE FROM rl.state s
         USING unnest(sk, sn, sc, dirty) AS u(k, n, c, d)
         WHERE u.c AND NOT u.d AND s.key = u.k AND s.name = u.n;
    END IF;
END
$fn$;

COMMENT ON FUNCTION rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[]) IS
    'Decides many requests (each one key, one or more limits, all or nothing) in one call and one transaction; '
    'one row per limit of each request, in input order; an invalid request gets an error row. See sql/README.md.';

-- rl.lock_states_batch: rl.lock_states for a batch. Locks the rows of the
-- distinct (keys[i], names[i]) pairs in (key, name) bytewise order, creating
-- missing ones fresh, and returns them in that order with whether this call
-- created them and the time the functions decide at. Call it in a
-- transaction; decide; UPDATE the rows written; call rl.drop_fresh_states
-- for created rows left unwritten; commit. Trusted roles only.
CREATE FUNCTION rl.lock_states_batch(keys text[], names text[])
    RETURNS TABLE (key text, name text, algorithm integer, t bigint, x bigint, y bigint, log bigint[],
                   created boolean, now_us bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    p_keys  ALIAS FOR $1;
    p_names ALIAS FOR $2;
    v_now   bigint;
    ks      text[];
    ns      text[];
    l       record;
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
    SELECT * INTO l FROM rl._lock_batch(ks, ns);
    RETURN QUERY SELECT u.k, u.n, u.algorithm, u.t, u.x, u.y, u.log, u.c, v_now
                   FROM unnest(ks, ns, l.states, l.created) AS u(k, n, algorithm, t, x, y, log, c);
END
$fn$;

COMMENT ON FUNCTION rl.lock_states_batch(text[], text[]) IS
    'Locks (creating if missing) the state rows of many (key, name) pairs in (key, name) bytewise order; for deciding outside SQL';

-- rl.drop_fresh_states deletes the rows of the pairs that are still fresh
-- (never written: what rl.lock_states_batch creates), so that a batch whose
-- requests were denied leaves nothing behind. A fresh row decides exactly as
-- a missing one, so deleting it changes no decision. Trusted roles only.
CREATE FUNCTION rl.drop_fresh_states(keys text[], names text[]) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    n bigint;
BEGIN
    PERFORM rl._require_trusted('rl.drop_fresh_states');
    DELETE FROM rl.state s
     USING unnest($1, $2) AS u(k, n)
     WHERE s.key = u.k AND s.name = u.n
       AND s.algorithm = 0 AND s.t = 0 AND s.x = 0 AND s.y = 0 AND cardinality(s.log) = 0 AND s.expires_at = 0;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$fn$;

-- New functions are executable by PUBLIC until revoked (see 0007).
REVOKE ALL ON FUNCTION
    rl._lock_batch(text[], text[]),
    rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[]),
    rl.lock_states_batch(text[], text[]),
    rl.drop_fresh_states(text[], text[])
    FROM PUBLIC;

DO $do$
BEGIN
    FOR attempt IN 1 .. 5 LOOP
        BEGIN
            GRANT EXECUTE ON FUNCTION
                rl.rl_decide_batch(text[], text[], integer[], bigint[], bigint[], bigint[], bigint[], integer[], bigint[], boolean[])
                TO rl_app;
            GRANT EXECUTE ON FUNCTION
                rl.lock_states_batch(text[], text[]),
                rl.drop_fresh_states(text[], text[])
                TO rl_admin;
            RETURN;
        EXCEPTION WHEN duplicate_object OR unique_violation OR undefined_object THEN
            IF attempt = 5 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
END
$do$;
