-- 0013 (after 0012): updates PostgreSQL can apply as HOT (heap-only
-- tuples). An UPDATE that changes no indexed column, and whose new row
-- version fits on the same page, writes no index entry: it costs about what
-- the one-statement upsert floor costs. rl.state has two indexes, the
-- primary key (key, name), which a decision never changes, and expires_at
-- (rl_expire's), which every write used to move to now + reset_after.
--
-- * expires_at is now a coarse upper bound: the time the row is back to a
--   fresh state (now + reset_after), rounded up to a multiple of 2^26 µs
--   (about 67 s), rl._expires_at. It is never earlier than the exact time,
--   so rl_expire never deletes a row that still counts (which would be a
--   refund), and it changes only when that time crosses a multiple of 2^26
--   µs: a key decided at least once a minute gets one non-HOT update about
--   once a minute; every other decision is HOT. A row may stay up to 67 s
--   longer before rl_expire deletes it. Every writer computes it the same
--   way: these functions, and pgstore's Go path (expiresAt in pgstore).
--
-- * fillfactor 80: inserts leave a fifth of each page free, so the new
--   version of a row finds room on its own page (a sliding log's row grows
--   and shrinks with its entries).
--
-- The decisions are unchanged; only the stored expires_at differs.
SET LOCAL search_path = pg_catalog, pg_temp;

ALTER TABLE rl.state SET (fillfactor = 80);

CREATE FUNCTION rl._expires_at(now bigint, reset_after bigint)
    RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (now + reset_after + 67108863) / 67108864 * 67108864;

COMMENT ON FUNCTION rl._expires_at(bigint, bigint) IS 'rl: expires_at of a row written at now with this reset_after: now + reset_after rounded up to a multiple of 2^26 µs (migration 0013)';

REVOKE EXECUTE ON FUNCTION rl._expires_at(bigint, bigint) FROM PUBLIC;

COMMENT ON COLUMN rl.state.expires_at IS 'µs since the Unix epoch: an upper bound of the time the row is back to a fresh state, now + reset_after of the latest write rounded up to a multiple of 2^26 µs (rl._expires_at). The row is idle (deletable) once expires_at <= now.';

CREATE OR REPLACE FUNCTION rl._decide1(p_key text, p_name text, p_alg integer, p_lim bigint, p_win bigint, p_rate bigint, p_cost bigint, p_now bigint, p_take boolean, p_multi boolean)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
AS $function$
DECLARE
    st      rl.state_words;
    created boolean := false;
    lk      record;
    r       rl._eval_result;
BEGIN
    IF (octet_length(p_key) BETWEEN 1 AND 256 AND octet_length(p_name) BETWEEN 1 AND 256) IS NOT TRUE THEN
        PERFORM rl._check_key(p_key, 'key');
        PERFORM rl._check_key(p_name, 'limit name');
    END IF;
    p_now := coalesce(p_now, rl._now());
    IF p_take THEN
        SELECT s.algorithm, s.t, s.x, s.y, s.log INTO st
          FROM rl.state s WHERE s.key = p_key AND s.name = p_name FOR UPDATE;
    ELSE
        SELECT s.algorithm, s.t, s.x, s.y, s.log INTO st
          FROM rl.state s WHERE s.key = p_key AND s.name = p_name;
    END IF;
    -- Not found: st is NULL, a fresh state.
    r := rl._eval(p_alg, p_lim, p_win, p_rate, st.algorithm, st.t, st.x, st.y, st.log, p_now, p_cost, p_take);
    IF r.err <> 0 THEN
        PERFORM rl._fail(r.err, p_alg, p_lim, p_win, p_rate, p_now, p_cost, st.algorithm, st.t, st.x, st.y, st.log,
                         CASE WHEN p_multi THEN rl._limit_detail(0, ARRAY[p_name]) END);
    END IF;
    -- Denied, peeked or cost 0: the state is unchanged; write nothing.
    IF NOT p_take OR NOT r.allowed OR p_cost = 0 THEN
        RETURN r;
    END IF;
    IF st.algorithm IS NULL THEN
        INSERT INTO rl.state AS s (key, name, algorithm, t, x, y, log, expires_at)
        VALUES (p_key, p_name, r.algorithm, r.t, r.x, r.y, r.log, rl._expires_at(p_now, r.reset_after))
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN r;
        END IF;
        -- Another session created the row first: decide against its state.
        lk := rl._lock_state(p_key, p_name);
        st := lk.st;
        created := lk.created;
        r := rl._eval(p_alg, p_lim, p_win, p_rate, st.algorithm, st.t, st.x, st.y, st.log, p_now, p_cost, true);
        IF NOT r.allowed THEN -- err is 0: the same limit passed above
            IF created THEN
                DELETE FROM rl.state s WHERE s.key = p_key AND s.name = p_name;
            END IF;
            RETURN r;
        END IF;
    END IF;
    UPDATE rl.state s
       SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log, expires_at = rl._expires_at(p_now, r.reset_after)
     WHERE s.key = p_key AND s.name = p_name;
    RETURN r;
END
$function$;

CREATE OR REPLACE FUNCTION rl._take_many(p_key text, p_names text[], p_algs integer[], p_lims bigint[], p_wins bigint[], p_rates bigint[], p_cost bigint, p_now bigint, p_take boolean)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
AS $function$
DECLARE
    n        integer := cardinality(p_names);
    lock_ord integer[];
    ss       rl.state_words[];
    rs       rl._eval_result[];
    r        rl._eval_result;
    st       rl.state_words;
    lk       record;
    created  text[] := '{}';
    best     integer;
    i        integer;
BEGIN
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 256 THEN
        PERFORM rl._check_key(p_key, 'key');
    END IF;
    IF n IS NULL OR n = 0 OR array_ndims(p_names) <> 1 OR array_lower(p_names, 1) <> 1 THEN
        PERFORM rl._raise(10, 'limit index 0: no limits');
    END IF;
    IF cardinality(p_algs) IS DISTINCT FROM n OR cardinality(p_lims) IS DISTINCT FROM n
            OR cardinality(p_wins) IS DISTINCT FROM n OR cardinality(p_rates) IS DISTINCT FROM n
            OR array_lower(p_algs, 1) <> 1 OR array_lower(p_lims, 1) <> 1
            OR array_lower(p_wins, 1) <> 1 OR array_lower(p_rates, 1) <> 1 THEN
        PERFORM rl._raise(10, 'limit index 0: the parameter arrays differ in length');
    END IF;
    FOR i IN 1 .. n LOOP
        IF (octet_length(p_names[i]) BETWEEN 1 AND 256) IS NOT TRUE THEN
            PERFORM rl._check_key(p_names[i], 'limit name');
        END IF;
        IF p_names[i] = ANY (p_names[1 : i - 1]) THEN
            PERFORM rl._raise(10, format('limit index %s: duplicate name %L', i - 1, p_names[i]));
        END IF;
    END LOOP;
    p_now := coalesce(p_now, rl._now());
    lock_ord := ARRAY(SELECT j FROM generate_subscripts(p_names, 1) AS j ORDER BY p_names[j] COLLATE "C");
    FOREACH i IN ARRAY lock_ord LOOP
        IF p_take THEN
            lk := rl._lock_state(p_key, p_names[i]);
            st := lk.st;
            IF lk.created THEN
                created := created || p_names[i];
            END IF;
        ELSE
            SELECT s.algorithm, s.t, s.x, s.y, s.log INTO st
              FROM rl.state s WHERE s.key = p_key AND s.name = p_names[i];
        END IF;
        ss[i] := st; -- not found: NULL, a fresh state
    END LOOP;
    SELECT a.rs, a.best INTO rs, best FROM rl._all(p_algs, p_lims, p_wins, p_rates, ss, p_now, p_cost, p_take, p_names) a;
    IF p_take AND p_cost > 0 AND (rs[best]).allowed THEN
        FOREACH i IN ARRAY lock_ord LOOP
            r := rs[i];
            UPDATE rl.state s
               SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log,
                   expires_at = rl._expires_at(p_now, r.reset_after)
             WHERE s.key = p_key AND s.name = p_names[i];
        END LOOP;
        created := '{}';
    END IF;
    IF cardinality(created) > 0 THEN
        DELETE FROM rl.state s WHERE s.key = p_key AND s.name = ANY (created);
    END IF;
    FOR i IN 1 .. n LOOP
        r := rs[i];
        RETURN NEXT ROW(i - 1, p_names[i], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay,
                        i = best, p_now)::rl.multi_decision;
    END LOOP;
    RETURN;
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_decide_multi(key text, names text[], algorithms integer[], lims bigint[], windows_us bigint[], rates bigint[], cost bigint DEFAULT 1, now_us bigint DEFAULT NULL::bigint, take boolean DEFAULT true)
 RETURNS SETOF rl.multi_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    p_key   ALIAS FOR $1;
    p_names ALIAS FOR $2;
    p_algs  ALIAS FOR $3;
    p_lims  ALIAS FOR $4;
    p_wins  ALIAS FOR $5;
    p_rates ALIAS FOR $6;
    p_cost  ALIAS FOR $7;
    p_now   ALIAS FOR $8;
    p_take  boolean := coalesce($9, true);
    one     boolean;
    r       rl._eval_result;
    st      rl.state_words;
    v_now   bigint;
BEGIN
    one := cardinality(p_names) = 1 AND octet_length(p_key) BETWEEN 1 AND 256
            AND octet_length(p_names[1]) BETWEEN 1 AND 256
            AND array_ndims(p_names) = 1 AND array_lower(p_names, 1) = 1
            AND cardinality(p_algs) = 1 AND cardinality(p_lims) = 1
            AND cardinality(p_wins) = 1 AND cardinality(p_rates) = 1
            AND array_lower(p_algs, 1) = 1 AND array_lower(p_lims, 1) = 1
            AND array_lower(p_wins, 1) = 1 AND array_lower(p_rates, 1) = 1;
    -- The common call: one limit, its row there, no tenants. The row is
    -- locked as rl._decide1 locks it (the only row of the call), and only
    -- when rl.tenants is empty: a tenant's call locks nothing here.
    IF one THEN
        IF p_take THEN
            SELECT s.algorithm, s.t, s.x, s.y, s.log
              INTO st.algorithm, st.t, st.x, st.y, st.log
              FROM rl.state s WHERE s.key = p_key AND s.name = p_names[1] AND NOT EXISTS (SELECT FROM rl.tenants)
               FOR UPDATE OF s;
        ELSE
            SELECT s.algorithm, s.t, s.x, s.y, s.log
              INTO st.algorithm, st.t, st.x, st.y, st.log
              FROM rl.state s WHERE s.key = p_key AND s.name = p_names[1] AND NOT EXISTS (SELECT FROM rl.tenants);
        END IF;
        IF FOUND THEN
            v_now := rl._request_now(p_now);
            r := rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], st.algorithm, st.t, st.x, st.y, st.log,
                          v_now, p_cost, p_take);
            IF r.err = 0 THEN
                IF p_take AND r.allowed AND p_cost <> 0 THEN
                    UPDATE rl.state s
                       SET algorithm = r.algorithm, t = r.t, x = r.x, y = r.y, log = r.log,
                           expires_at = rl._expires_at(v_now, r.reset_after)
                     WHERE s.key = p_key AND s.name = p_names[1];
                END IF;
                RETURN NEXT ROW(0, p_names[1], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay,
                                true, v_now)::rl.multi_decision;
                RETURN;
            END IF;
        END IF;
    END IF;
    -- Everything else, as in 0008.
    PERFORM rl._check_tenant_key(p_key, NULL);
    v_now := rl._request_now(p_now);
    IF one THEN
        r := rl._decide1(p_key, p_names[1], p_algs[1], p_lims[1], p_wins[1], p_rates[1], p_cost, v_now, p_take, true);
        RETURN NEXT ROW(0, p_names[1], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, true,
                        v_now)::rl.multi_decision;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM rl._take_many($1, $2, $3, $4, $5, $6, $7, v_now, p_take);
END
$function$;

CREATE OR REPLACE FUNCTION rl.rl_decide_batch(keys text[], names text[], algorithms integer[], lims bigint[], windows_us bigint[], rates bigint[], costs bigint[] DEFAULT NULL::bigint[], limit_counts integer[] DEFAULT NULL::integer[], now_us bigint[] DEFAULT NULL::bigint[], take boolean[] DEFAULT NULL::boolean[])
 RETURNS SETOF rl.batch_decision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
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
                sexp[slot[f]] := rl._expires_at(p_now, r.reset_after);
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
                sexp[slot[f + i - 1]] := rl._expires_at(p_now, r.reset_after);
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
$function$;

