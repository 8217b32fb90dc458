
CREATE OR REPLACE FUNCTION rl.rl_decide_batch(keys text[], names text[], algorithms integer[], lims bigint[], windows_us bigint[], rates bigint[], costs bigint[] DEFAULT NULL::bigint[], limit_counts integer[] DEFAULT NULL::integer[], now_us bigint[] DEFAULT NULL::bigint[], take boolean[] DEFAULT NULL::boolean[], settle boolean[] DEFAULT NULL::boolean[], shadows boolean[] DEFAULT NULL::boolean[])
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
    p_sets   ALIAS FOR $11;
    p_shs    ALIAS FOR $12;
    wr       boolean[];
    shd      boolean;
    nreq     integer := coalesce(cardinality(p_keys), 0);
    nlim     integer := coalesce(cardinality(p_names), 0);
    firsts   integer[];
    cnts     integer[];
    ecode    text[];
    emsg     text[];
    nows     bigint[];
    takes    boolean[];
    sets     boolean[];
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
    -- The shape of the call: an error here fails the whole call (RL010),
    -- raised here (0021: its CONTEXT is one line, this function's).
    IF (nreq > 0 AND (array_ndims(p_keys) <> 1 OR array_lower(p_keys, 1) <> 1))
            OR (nlim > 0 AND (array_ndims(p_names) <> 1 OR array_lower(p_names, 1) <> 1))
            OR coalesce(cardinality(p_algs), 0) <> nlim OR coalesce(cardinality(p_lims), 0) <> nlim
            OR coalesce(cardinality(p_wins), 0) <> nlim OR coalesce(cardinality(p_rates), 0) <> nlim
            OR (nlim > 0 AND (array_lower(p_algs, 1) <> 1 OR array_lower(p_lims, 1) <> 1
                              OR array_lower(p_wins, 1) <> 1 OR array_lower(p_rates, 1) <> 1))
            OR (p_costs IS NOT NULL AND (cardinality(p_costs) <> nreq OR (nreq > 0 AND array_lower(p_costs, 1) <> 1)))
            OR (p_nows IS NOT NULL AND (cardinality(p_nows) <> nreq OR (nreq > 0 AND array_lower(p_nows, 1) <> 1)))
            OR (p_takes IS NOT NULL AND (cardinality(p_takes) <> nreq OR (nreq > 0 AND array_lower(p_takes, 1) <> 1)))
            OR (p_sets IS NOT NULL AND (cardinality(p_sets) <> nreq OR (nreq > 0 AND array_lower(p_sets, 1) <> 1)))
            OR (p_shs IS NOT NULL AND (cardinality(p_shs) <> nlim OR (nlim > 0 AND array_lower(p_shs, 1) <> 1))) THEN
        RAISE EXCEPTION USING ERRCODE = 'RL010', MESSAGE = rl._error_message(10),
            DETAIL = 'rl_decide_batch: keys, costs, now_us, take and settle need one element per request, '
                     'names, algorithms, lims, windows_us, rates and shadows one per limit';
    END IF;
    IF p_counts IS NULL THEN
        IF nlim <> nreq THEN
            RAISE EXCEPTION USING ERRCODE = 'RL010', MESSAGE = rl._error_message(10),
                DETAIL = 'rl_decide_batch: without limit_counts, each request has one limit';
        END IF;
    ELSE
        SELECT sum(u.c), count(*) FILTER (WHERE u.c IS NULL OR u.c < 0) INTO total, bad FROM unnest(p_counts) AS u(c);
        IF cardinality(p_counts) <> nreq OR (nreq > 0 AND array_lower(p_counts, 1) <> 1)
                OR bad > 0 OR coalesce(total, 0) <> nlim THEN
            RAISE EXCEPTION USING ERRCODE = 'RL010', MESSAGE = rl._error_message(10),
                DETAIL = 'rl_decide_batch: limit_counts needs one count (0 or more) per request, adding up to the number of limits';
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
    -- loop: each statement in one costs per request. A settle request
    -- (settle[q]) settles its cost, a delta, on its limits (core.SettleAll)
    -- and writes its rows, as a take does.
    sets := array_fill(false, ARRAY[nreq]);
    IF p_counts IS NULL AND pfx IS NULL AND p_nows IS NULL AND p_takes IS NULL AND p_sets IS NULL
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
        sets[q] := coalesce(p_sets[q], false);
        FOR i IN firsts[q] .. firsts[q] + c - 1 LOOP
            limkey[i] := k;
            limtake[i] := takes[q] OR sets[q];
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
                              ELSE coalesce((SELECT ROW(s.algorithm, s.t, s.x, s.y, s.log, s.l, s.w, s.r)::rl.state_words
                                               FROM rl.state s WHERE s.key = u.k AND s.name = u.n),
                                            ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words) END ORDER BY u.o),
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
                            ecode[q], emsg[q], NULL)::rl.batch_decision;
            CONTINUE;
        END IF;
        f := firsts[q];
        c := cnts[q];
        tk := takes[q];
        p_now := nows[q];
        p_cost := CASE WHEN p_costs IS NULL THEN 1 ELSE p_costs[q] END;
        shd := p_shs IS NOT NULL AND true = ANY (p_shs[f : f + c - 1]);
        IF c = 1 AND NOT (sets[q] AND shd) THEN
            -- One limit: core.TakeAll is core.Take, decided in one pass (as
            -- rl._all decides it); core.SettleAll is core.Settle.
            st := sw[slot[f]];
            IF sets[q] THEN
                r := rl._settle(p_algs[f], p_lims[f], p_wins[f], p_rates[f], st.algorithm, st.t, st.x, st.y, st.log,
                                st.l, st.w, st.r, p_now, p_cost);
            ELSE
                r := rl._eval(p_algs[f], p_lims[f], p_wins[f], p_rates[f], st.algorithm, st.t, st.x, st.y, st.log,
                              st.l, st.w, st.r, p_now, p_cost, tk);
            END IF;
            IF r.err <> 0 THEN
                RETURN NEXT ROW(q - 1, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, false, p_now,
                                'RL0' || lpad(r.err::text, 2, '0'),
                                rl._explain(r.err, p_algs[f], p_lims[f], p_wins[f], p_rates[f], p_now, p_cost,
                                            st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, sets[q])
                                || format(' (limit index 0, name %L)', p_names[f]), NULL)::rl.batch_decision;
                CONTINUE;
            END IF;
            IF (sets[q] AND p_cost <> 0) OR (NOT sets[q] AND tk AND r.allowed AND p_cost > 0) THEN
                sw[slot[f]] := ROW(r.algorithm, r.t, r.x, r.y, r.log, r.l, r.w, r.r)::rl.state_words;
                sexp[slot[f]] := rl._expires_at(p_now, r.reset_after);
                dirty[slot[f]] := true;
                any_dirty := true;
            END IF;
            RETURN NEXT ROW(q - 1, 0, p_names[f], r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after,
                            r.delay, true, p_now, NULL, NULL, r.next_after)::rl.batch_decision;
            CONTINUE;
        END IF;
        -- Several limits: core.TakeAll / core.PeekAll (rl._all), or
        -- core.SettleAll (rl._settle on each). Their checks first, in their
        -- order, so that an invalid request gets its error here instead of
        -- rl._all raising it for the whole call.
        ss := ARRAY(SELECT sw[slot[i]] FROM generate_series(f, f + c - 1) AS i ORDER BY i);
        IF sets[q] AND shd THEN
            -- 0019: a settle with a shadow flag set (one limit or more), as
            -- store.Policy.Decide settles a policy with shadow limits
            -- (rl._settle_shadow): the enforced limits all or nothing, then
            -- each shadow limit alone, one that cannot be settled (a
            -- corrupt state) left as it was. Only the rows settled are
            -- written. The call's errors, a limit's and an enforced
            -- limit's state's are the request's error.
            SELECT a.rs, a.best, a.wr, a.err, a.at INTO rs, best, wr, bad, j
              FROM rl._settle_shadow(p_algs[f : f + c - 1], p_lims[f : f + c - 1], p_wins[f : f + c - 1],
                                     p_rates[f : f + c - 1], ss, p_now, p_cost, p_shs[f : f + c - 1]) a;
            IF bad <> 0 THEN
                st := ss[j];
                j := f + j - 1;
                RETURN NEXT ROW(q - 1, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, false, p_now,
                                'RL0' || lpad(bad::text, 2, '0'),
                                rl._explain(bad, p_algs[j], p_lims[j], p_wins[j], p_rates[j], p_now, p_cost,
                                            st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, true)
                                || format(' (limit index %s, name %L)', j - f, p_names[j]), NULL)::rl.batch_decision;
                CONTINUE;
            END IF;
            FOR i IN 1 .. c LOOP
                r := rs[i];
                IF wr[i] THEN
                    sw[slot[f + i - 1]] := ROW(r.algorithm, r.t, r.x, r.y, r.log, r.l, r.w, r.r)::rl.state_words;
                    sexp[slot[f + i - 1]] := rl._expires_at(p_now, r.reset_after);
                    dirty[slot[f + i - 1]] := true;
                    any_dirty := true;
                END IF;
                RETURN NEXT ROW(q - 1, i - 1, p_names[f + i - 1], r.allowed, r.lim, r.remaining, r.reset_after,
                                r.retry_after, r.delay, i = best, p_now, NULL, NULL, r.next_after)::rl.batch_decision;
            END LOOP;
            CONTINUE;
        END IF;
        bad := 0;
        FOR i IN 1 .. c LOOP
            st := ss[i];
            j := f + i - 1;
            IF sets[q] THEN
                r := rl._settle(p_algs[j], p_lims[j], p_wins[j], p_rates[j], st.algorithm, st.t, st.x, st.y, st.log,
                                st.l, st.w, st.r, p_now, p_cost);
                rs[i] := r;
                bad := r.err;
            ELSE
                bad := coalesce(nullif(rl._limit_error(p_algs[j], p_lims[j], p_wins[j], p_rates[j]), 0),
                                nullif(rl._call_error(p_now, p_cost), 0),
                                rl._state_error(coalesce(st.algorithm, 0), coalesce(st.t, 0), coalesce(st.x, 0),
                                                coalesce(st.y, 0), coalesce(st.log, '{}'), coalesce(st.l, 0),
                                                coalesce(st.w, 0), coalesce(st.r, 0)));
            END IF;
            IF bad <> 0 THEN
                RETURN NEXT ROW(q - 1, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, false, p_now,
                                'RL0' || lpad(bad::text, 2, '0'),
                                rl._explain(bad, p_algs[j], p_lims[j], p_wins[j], p_rates[j], p_now, p_cost,
                                            st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, sets[q])
                                || format(' (limit index %s, name %L)', i - 1, p_names[j]), NULL)::rl.batch_decision;
                EXIT;
            END IF;
        END LOOP;
        CONTINUE WHEN bad <> 0;
        -- 0018: a take or peek with a shadow flag set is decided as
        -- store.Policy.Decide decides shadow limits (rl._all_shadow): only
        -- the rows it charges are written. (shd, set above, implies NOT
        -- sets[q] here: a settle with a flag set is decided above, 0019.)
        IF sets[q] THEN
            best := 1;
        ELSIF shd THEN
            SELECT a.rs, a.best, a.wr INTO rs, best, wr
              FROM rl._all_shadow(p_algs[f : f + c - 1], p_lims[f : f + c - 1], p_wins[f : f + c - 1], p_rates[f : f + c - 1],
                                  ss, p_now, p_cost, tk, p_names[f : f + c - 1], p_shs[f : f + c - 1]) a;
            FOR i IN 1 .. c LOOP
                CONTINUE WHEN NOT wr[i];
                r := rs[i];
                sw[slot[f + i - 1]] := ROW(r.algorithm, r.t, r.x, r.y, r.log, r.l, r.w, r.r)::rl.state_words;
                sexp[slot[f + i - 1]] := rl._expires_at(p_now, r.reset_after);
                dirty[slot[f + i - 1]] := true;
                any_dirty := true;
            END LOOP;
        ELSE
            SELECT a.rs, a.best INTO rs, best
              FROM rl._all(p_algs[f : f + c - 1], p_lims[f : f + c - 1], p_wins[f : f + c - 1], p_rates[f : f + c - 1],
                           ss, p_now, p_cost, tk, p_names[f : f + c - 1]) a;
        END IF;
        IF (sets[q] AND p_cost <> 0) OR (NOT sets[q] AND NOT shd AND tk AND p_cost > 0 AND (rs[best]).allowed) THEN
            FOR i IN 1 .. c LOOP
                r := rs[i];
                sw[slot[f + i - 1]] := ROW(r.algorithm, r.t, r.x, r.y, r.log, r.l, r.w, r.r)::rl.state_words;
                sexp[slot[f + i - 1]] := rl._expires_at(p_now, r.reset_after);
                dirty[slot[f + i - 1]] := true;
            END LOOP;
            any_dirty := true;
        END IF;
        FOR i IN 1 .. c LOOP
            r := rs[i];
            RETURN NEXT ROW(q - 1, i - 1, p_names[f + i - 1], r.allowed, r.lim, r.remaining, r.reset_after,
                            r.retry_after, r.delay, i = best, p_now, NULL, NULL, r.next_after)::rl.batch_decision;
        END LOOP;
    END LOOP;

    -- Write the new states back in one statement; delete the rows created
    -- for requests that wrote nothing.
    IF any_dirty THEN
        UPDATE rl.state s
           SET algorithm = u.algorithm, t = u.t, x = u.x, y = u.y, log = u.log, l = u.ul, w = u.uw, r = u.ur,
               expires_at = u.e
          FROM unnest(sk, sn, sexp, dirty, sw) AS u(k, n, e, d, algorithm, t, x, y, log, ul, uw, ur)
         WHERE u.d AND s.key = u.k AND s.name = u.n;
    END IF;
    IF true = ANY (sc) THEN
        DELETE FROM rl.state s
         USING unnest(sk, sn, sc, dirty) AS u(k, n, c, d)
         WHERE u.c AND NOT u.d AND s.key = u.k AND s.name = u.n;
    END IF;
END
$function$;
COMMENT ON FUNCTION rl.rl_decide_batch(text[],text[],integer[],bigint[],bigint[],bigint[],bigint[],integer[],bigint[],boolean[],boolean[],boolean[]) IS 'Decides many requests (each one key, one or more limits, all or nothing: a take, a peek or a settle) in one call and one transaction; one row per limit of each request, in input order; an invalid request gets an error row. See sql/README.md.';
