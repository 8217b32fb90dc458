
CREATE FUNCTION rl._settle_shadow(p_algs integer[], p_lims bigint[], p_wins bigint[], p_rates bigint[], p_states rl.state_words[], p_now bigint, p_delta bigint, p_shadows boolean[], OUT rs rl._eval_result[], OUT best integer, OUT wr boolean[], OUT err integer, OUT at integer)
 RETURNS record
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    n      integer := cardinality(p_algs);
    failed boolean[]; -- shadow limits not settled
    r      rl._eval_result;
    st     rl.state_words;
    i      integer;
BEGIN
    wr := array_fill(false, ARRAY[n]);
    failed := array_fill(false, ARRAY[n]);
    best := 0;
    at := 1;
    -- The call's own errors first, at index 0 (core.CheckSettle): the
    -- time, then the delta.
    err := CASE WHEN p_now IS NULL OR p_now NOT BETWEEN 0 AND rl._max_time() THEN 7
                WHEN p_delta IS NULL OR p_delta NOT BETWEEN -rl._max_cost() AND rl._max_cost() THEN 6
                ELSE 0 END;
    IF err <> 0 THEN
        RETURN;
    END IF;
    -- Then every limit's parameters, in order: a store.Policy holds valid
    -- limits only.
    FOR i IN 1 .. n LOOP
        err := rl._limit_error(coalesce(p_algs[i], 0), coalesce(p_lims[i], 0), coalesce(p_wins[i], 0),
                               coalesce(p_rates[i], -1));
        IF err <> 0 THEN
            at := i;
            RETURN;
        END IF;
    END LOOP;
    -- The enforced limits all or nothing (core.SettleAll), as if the shadow
    -- limits were not there: the first of them decides.
    FOR i IN 1 .. n LOOP
        CONTINUE WHEN coalesce(p_shadows[i], false);
        st := p_states[i];
        r := rl._settle(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                        st.l, st.w, st.r, p_now, p_delta);
        IF r.err <> 0 THEN
            err := r.err;
            at := i;
            RETURN;
        END IF;
        rs[i] := r;
        wr[i] := p_delta <> 0;
        IF best = 0 THEN
            best := i;
        END IF;
    END LOOP;
    -- Then each shadow limit alone. One that cannot be settled (its state
    -- is corrupt: rl._settle reports it, it raises nothing) is left as it
    -- was, its row allowed false with its limit and zeros: a shadow limit
    -- never fails a settle, nor cancels the enforced limits' correction.
    FOR i IN 1 .. n LOOP
        CONTINUE WHEN NOT coalesce(p_shadows[i], false);
        st := p_states[i];
        r := rl._settle(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                        st.l, st.w, st.r, p_now, p_delta);
        IF r.err <> 0 THEN
            r := NULL;
            r.err := 0; r.allowed := false; r.lim := p_lims[i]; r.remaining := 0; r.reset_after := 0;
            r.retry_after := 0; r.delay := 0; r.next_after := 0;
            failed[i] := true;
        ELSE
            wr[i] := p_delta <> 0;
        END IF;
        rs[i] := r;
    END LOOP;
    IF best = 0 THEN -- only shadow limits: the settled one closest to exhaustion
        FOR i IN 1 .. n LOOP
            IF best = 0 OR failed[best] OR (NOT failed[i] AND (rs[i]).remaining < (rs[best]).remaining) THEN
                best := i;
            END IF;
        END LOOP;
    END IF;
    err := 0;
END
$function$;

CREATE OR REPLACE FUNCTION rl._all(p_algs integer[], p_lims bigint[], p_wins bigint[], p_rates bigint[], p_states rl.state_words[], p_now bigint, p_cost bigint, p_take boolean, p_names text[], OUT rs rl._eval_result[], OUT best integer)
 RETURNS record
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    n      integer := cardinality(p_algs);
    r      rl._eval_result;
    st     rl.state_words;
    denied integer := 0; -- 1-based; 0: none
    i      integer;
BEGIN
    best := 1;
    IF n = 1 THEN -- one limit: decide and take in one pass
        st := p_states[1];
        r := rl._eval(p_algs[1], p_lims[1], p_wins[1], p_rates[1], st.algorithm, st.t, st.x, st.y, st.log,
                      st.l, st.w, st.r, p_now, p_cost, p_take);
        IF r.err <> 0 THEN
            PERFORM rl._fail(r.err, p_algs[1], p_lims[1], p_wins[1], p_rates[1], p_now, p_cost,
                             st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, false,
                             rl._limit_detail(0, p_names));
        END IF;
        rs[1] := r;
        RETURN;
    END IF;
    -- The first pass decides every limit without changing anything.
    FOR i IN 1 .. n LOOP
        st := p_states[i];
        r := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                      st.l, st.w, st.r, p_now, p_cost, false);
        IF r.err <> 0 THEN
            PERFORM rl._fail(r.err, p_algs[i], p_lims[i], p_wins[i], p_rates[i], p_now, p_cost,
                             st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, false,
                             rl._limit_detail(i - 1, p_names));
        END IF;
        rs[i] := r;
        IF NOT r.allowed THEN
            IF denied = 0 THEN
                denied := i;
            ELSIF rl._later(r.retry_after, (rs[denied]).retry_after) THEN
                denied := i;
            END IF;
        END IF;
    END LOOP;
    IF denied > 0 THEN
        best := denied;
        -- Nothing was taken: a limit that would have admitted the cost
        -- reports its state as it is (its decision for cost 0).
        IF p_cost > 0 THEN
            FOR i IN 1 .. n LOOP
                CONTINUE WHEN NOT (rs[i]).allowed;
                st := p_states[i];
                rs[i] := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y,
                                  st.log, st.l, st.w, st.r, p_now, 0, false);
            END LOOP;
        END IF;
        RETURN;
    END IF;
    FOR i IN 1 .. n LOOP
        IF p_take THEN
            st := p_states[i];
            rs[i] := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                              st.l, st.w, st.r, p_now, p_cost, true);
            -- err is 0: the first pass accepted the same input.
        END IF;
        IF (rs[i]).remaining < (rs[best]).remaining THEN
            best := i;
        END IF;
    END LOOP;
END
$function$;

CREATE FUNCTION rl._all_shadow(p_algs integer[], p_lims bigint[], p_wins bigint[], p_rates bigint[], p_states rl.state_words[], p_now bigint, p_cost bigint, p_take boolean, p_names text[], p_shadows boolean[], OUT rs rl._eval_result[], OUT best integer, OUT wr boolean[])
 RETURNS record
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    n     integer := cardinality(p_algs);
    e     integer[] := '{}'; -- the enforced limits, in order
    ers   rl._eval_result[];
    eb    integer;
    r     rl._eval_result;
    st    rl.state_words;
    take  boolean := p_take AND p_cost > 0;
    ok    boolean := true;
    i     integer;
BEGIN
    wr := array_fill(false, ARRAY[n]);
    best := 0;
    -- Every shadow limit peeked first: its decision should the enforced
    -- limits deny, and its checks, before anything is charged.
    FOR i IN 1 .. n LOOP
        IF coalesce(p_shadows[i], false) THEN
            st := p_states[i];
            r := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                          st.l, st.w, st.r, p_now, p_cost, false);
            IF r.err <> 0 THEN
                PERFORM rl._fail(r.err, p_algs[i], p_lims[i], p_wins[i], p_rates[i], p_now, p_cost,
                                 st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, false,
                                 rl._limit_detail(i - 1, p_names));
            END IF;
            rs[i] := r;
        ELSE
            e := e || i;
        END IF;
    END LOOP;
    -- The enforced limits all or nothing, as if the shadow ones were not
    -- there.
    IF cardinality(e) > 0 THEN
        SELECT a.rs, a.best INTO ers, eb
          FROM rl._all(ARRAY(SELECT p_algs[u.j] FROM unnest(e) WITH ORDINALITY AS u(j, o) ORDER BY u.o),
                       ARRAY(SELECT p_lims[u.j] FROM unnest(e) WITH ORDINALITY AS u(j, o) ORDER BY u.o),
                       ARRAY(SELECT p_wins[u.j] FROM unnest(e) WITH ORDINALITY AS u(j, o) ORDER BY u.o),
                       ARRAY(SELECT p_rates[u.j] FROM unnest(e) WITH ORDINALITY AS u(j, o) ORDER BY u.o),
                       ARRAY(SELECT p_states[u.j] FROM unnest(e) WITH ORDINALITY AS u(j, o) ORDER BY u.o),
                       p_now, p_cost, p_take,
                       ARRAY(SELECT p_names[u.j] FROM unnest(e) WITH ORDINALITY AS u(j, o) ORDER BY u.o)) a;
        FOR i IN 1 .. cardinality(e) LOOP
            rs[e[i]] := ers[i];
        END LOOP;
        best := e[eb];
        ok := (ers[eb]).allowed;
        IF ok AND take THEN
            FOR i IN 1 .. cardinality(e) LOOP
                wr[e[i]] := true;
            END LOOP;
        END IF;
    END IF;
    -- Admitted: each shadow limit that would admit the cost is charged
    -- alone; a would-deny is not.
    IF ok AND take THEN
        FOR i IN 1 .. n LOOP
            CONTINUE WHEN NOT coalesce(p_shadows[i], false) OR NOT (rs[i]).allowed;
            st := p_states[i];
            rs[i] := rl._eval(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                              st.l, st.w, st.r, p_now, p_cost, true);
            -- err is 0: the peek accepted the same input.
            wr[i] := true;
        END LOOP;
    END IF;
    IF best = 0 THEN -- only shadow limits: the one closest to exhaustion
        FOR i IN 1 .. n LOOP
            IF best = 0 OR (rs[i]).remaining < (rs[best]).remaining THEN
                best := i;
            END IF;
        END LOOP;
    END IF;
END
$function$;

-- rl._settle_all is core SettleAll: p_delta settled on every limit, each
-- with its state; the first limit that fails raises its error (nothing is
-- written by then); the deciding limit is the first.
CREATE FUNCTION rl._settle_all(p_algs integer[], p_lims bigint[], p_wins bigint[], p_rates bigint[], p_states rl.state_words[], p_now bigint, p_delta bigint, p_names text[], OUT rs rl._eval_result[], OUT best integer)
 RETURNS record
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    n  integer := cardinality(p_algs);
    r  rl._eval_result;
    st rl.state_words;
BEGIN
    best := 1;
    FOR i IN 1 .. n LOOP
        st := p_states[i];
        r := rl._settle(p_algs[i], p_lims[i], p_wins[i], p_rates[i], st.algorithm, st.t, st.x, st.y, st.log,
                        st.l, st.w, st.r, p_now, p_delta);
        IF r.err <> 0 THEN
            PERFORM rl._fail(r.err, p_algs[i], p_lims[i], p_wins[i], p_rates[i], p_now, p_delta,
                             st.algorithm, st.t, st.x, st.y, st.log, st.l, st.w, st.r, true,
                             rl._limit_detail(i - 1, p_names));
        END IF;
        rs[i] := r;
    END LOOP;
END
$function$;

CREATE FUNCTION rl.decide(algorithm integer, lim bigint, window_us bigint, rate bigint, state_algorithm integer, state_t bigint, state_x bigint, state_y bigint, state_log bigint[], now_us bigint, cost bigint, op text DEFAULT 'take'::text, state_l bigint DEFAULT 0, state_w bigint DEFAULT 0, state_r bigint DEFAULT 0)
 RETURNS rl.decision_state
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    r rl._eval_result;
BEGIN
    IF op IS NULL OR op NOT IN ('take', 'peek', 'settle') THEN
        RAISE EXCEPTION 'rl.decide: op must be ''take'', ''peek'' or ''settle'', not %', coalesce(quote_literal(op), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF op = 'settle' THEN
        r := rl._settle($1, $2, $3, $4, $5, $6, $7, $8, $9, $13, $14, $15, $10, $11);
    ELSE
        r := rl._eval($1, $2, $3, $4, $5, $6, $7, $8, $9, $13, $14, $15, $10, $11, op = 'take');
    END IF;
    IF r.err <> 0 THEN
        PERFORM rl._fail(r.err, $1, $2, $3, $4, $10, $11, $5, $6, $7, $8, $9, $13, $14, $15, op = 'settle', NULL);
    END IF;
    RETURN ROW(0, r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, 0,
               r.algorithm, r.t, r.x, r.y, r.log, r.next_after, r.l, r.w, r.r)::rl.decision_state;
END
$function$;
COMMENT ON FUNCTION rl.decide(integer,bigint,bigint,bigint,integer,bigint,bigint,bigint,bigint[],bigint,bigint,text,bigint,bigint,bigint) IS 'core.Take (op take), core.Peek (peek) or core.Settle (settle: cost is the delta) of one limit on a state given as arguments (state_l, state_w, state_r: the parameters that wrote it); the new state in the result. Reads no table and no clock.';

CREATE OR REPLACE FUNCTION rl.decide_all(limits rl.limit_spec[], states rl.state_words[], now_us bigint, cost bigint, op text DEFAULT 'take'::text)
 RETURNS SETOF rl.decision_state
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'rl', 'pg_temp'
AS $function$
DECLARE
    n     integer := coalesce(cardinality(limits), 0);
    lo    integer;
    slo   integer;
    l     rl.limit_spec;
    algs  integer[];
    lims  bigint[];
    wins  bigint[];
    rates bigint[];
    ss    rl.state_words[];
    rs    rl._eval_result[];
    r     rl._eval_result;
    best  integer;
    i     integer;
BEGIN
    IF op IS NULL OR op NOT IN ('take', 'peek', 'settle') THEN
        RAISE EXCEPTION 'rl.decide_all: op must be ''take'', ''peek'' or ''settle'', not %', coalesce(quote_literal(op), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n = 0 OR (states IS NOT NULL AND cardinality(states) < n) THEN
        PERFORM rl._raise(10, 'limit index 0');
    END IF;
    IF array_ndims(limits) <> 1 OR (states IS NOT NULL AND array_ndims(states) <> 1) THEN
        PERFORM rl._raise(10, 'limit index 0');
    END IF;
    lo := array_lower(limits, 1);
    slo := coalesce(array_lower(states, 1), 1);
    FOR i IN 1 .. n LOOP
        l := limits[lo + i - 1];
        algs[i] := l.algorithm;
        lims[i] := l.lim;
        wins[i] := l.window_us;
        rates[i] := l.rate;
        ss[i] := states[slo + i - 1];
    END LOOP;
    IF op = 'settle' THEN
        SELECT a.rs, a.best INTO rs, best FROM rl._settle_all(algs, lims, wins, rates, ss, now_us, cost, NULL) a;
    ELSE
        SELECT a.rs, a.best INTO rs, best FROM rl._all(algs, lims, wins, rates, ss, now_us, cost, op = 'take', NULL) a;
    END IF;
    FOR i IN 1 .. n LOOP
        r := rs[i];
        RETURN NEXT ROW(i - 1, r.allowed, r.lim, r.remaining, r.reset_after, r.retry_after, r.delay, best - 1,
                        r.algorithm, r.t, r.x, r.y, r.log, r.next_after, r.l, r.w, r.r)::rl.decision_state;
    END LOOP;
    RETURN;
END
$function$;
