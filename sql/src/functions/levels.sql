-- The level arithmetic the token and leaky buckets share (their files,
-- alg_token_bucket.sql and alg_leaky_bucket.sql, call it with their
-- numbers), and the settle of a level, theirs and GCRA's.

-- rl._bucket_debt is the rest of rl._bucket for a level above the capacity
-- (a state in debt, read exactly): nothing is admitted but a cost of 0, and
-- the times, ceil(level / rate) + ne - now, wrap as the core's int64 sums
-- do when they pass 2^63.
CREATE FUNCTION rl._bucket_debt(p_alg integer, lim bigint, w bigint, rate bigint, lvl bigint, ne bigint, now bigint, cost bigint, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    capacity bigint := lim * w;
BEGIN
    IF cost = 0 THEN
        r.allowed := true;
        IF p_alg = 5 THEN
            r.delay := rl._wrap64(rl._ceil_div(lvl, rate)::numeric + ne - now);
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := rl._wrap64(rl._ceil_div(lvl + cost * w - capacity, rate)::numeric + ne - now);
    END IF;
    r.reset_after := rl._wrap64(rl._ceil_div(lvl, rate)::numeric + ne - now);
    r.next_after := rl._wrap64(rl._ceil_div(lvl - capacity + w, rate)::numeric + ne - now);
    RETURN r;
END
$function$;

CREATE FUNCTION rl._bucket(p_alg integer, lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, exact boolean, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    capacity bigint := lim * w;
    last     bigint := now;
    lvl      bigint := 0;
    ne       bigint;
    el       bigint;
BEGIN
    IF rate = 0 THEN
        rate := lim;
    END IF;
    IF s_alg = p_alg THEN
        last := s_t;
        lvl := s_x;
        IF NOT exact THEN -- a legacy state written under other parameters
            lvl := least(lvl, capacity);
        END IF;
    END IF;
    ne := greatest(now, last); -- a clock that stepped back is read as the last update
    el := ne - last;
    IF el > 0 AND lvl > 0 THEN
        IF el >= rl._ceil_div(lvl, rate) THEN
            lvl := 0;
        ELSE
            lvl := lvl - el * rate;
        END IF;
    END IF;
    IF cost = 0 THEN
        r.allowed := true;
    ELSIF cost <= lim THEN
        IF lvl + cost * w <= capacity THEN
            r.allowed := true;
        END IF;
    END IF;
    IF lvl > capacity THEN -- in debt (exact): the core's int64 arithmetic
        RETURN rl._bucket_debt(p_alg, lim, w, rate, lvl, ne, now, cost, r);
    END IF;
    IF r.allowed THEN
        IF p_alg = 5 AND lvl > 0 THEN
            r.delay := rl._ceil_div(lvl, rate) + ne - now;
        END IF;
        IF cost > 0 THEN
            lvl := lvl + cost * w;
            IF p_take THEN
                r.algorithm := p_alg; r.t := ne; r.x := lvl; r.y := 0; r.log := '{}';
                r.l := lim; r.w := w; r.r := rate;
            END IF;
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        r.retry_after := rl._ceil_div(lvl + cost * w - capacity, rate) + ne - now;
    END IF;
    IF lvl < capacity THEN -- a debt leaves nothing remaining
        r.remaining := (capacity - lvl) / w;
    END IF;
    IF lvl > 0 THEN
        r.reset_after := rl._ceil_div(lvl, rate) + ne - now;
        -- The first instant at which remaining + 1 units fit.
        r.next_after := rl._ceil_div(lvl - capacity + (r.remaining + 1) * w, rate) + ne - now;
    END IF;
    RETURN r;
END
$function$;

CREATE OR REPLACE FUNCTION rl._settle_level(p_alg integer, lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, exact boolean, now bigint, delta bigint)
 RETURNS rl.state_words
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    capacity bigint := lim * w;
    ne       bigint := now;
    lvl      bigint := 0;
    dt       bigint;
    el       bigint;
    q        bigint;
BEGIN
    IF rate = 0 THEN
        rate := lim;
    END IF;
    IF s_alg = p_alg THEN
        IF p_alg = 6 THEN
            IF s_y > 0 AND NOT exact THEN
                dt := s_t - s_y;
                IF dt > capacity / rate THEN
                    s_t := s_y + capacity / rate; s_x := capacity % rate;
                ELSIF dt * rate + s_x > capacity THEN
                    s_t := s_y + capacity / rate; s_x := capacity % rate;
                END IF;
            END IF;
            ne := greatest(now, s_y);
            IF s_t >= ne THEN
                lvl := least((s_t - ne)::numeric * rate + s_x, rl._max_state_value())::bigint;
            ELSE
                dt := ne - s_t;
                IF s_x > 0 THEN
                    IF dt < rl._ceil_div(s_x, rate) THEN
                        lvl := s_x - dt * rate;
                    END IF;
                END IF;
            END IF;
        ELSE
            ne := greatest(now, s_t);
            lvl := s_x;
            IF NOT exact THEN
                lvl := least(lvl, capacity);
            END IF;
            el := ne - s_t;
            IF el > 0 AND lvl > 0 THEN
                IF el >= rl._ceil_div(lvl, rate) THEN
                    lvl := 0;
                ELSE
                    lvl := lvl - el * rate;
                END IF;
            END IF;
        END IF;
    END IF;
    IF delta >= 0 THEN
        IF delta::numeric * w > rl._max_state_value() - lvl THEN
            lvl := rl._max_state_value(); -- 0019: a debt beyond a state, capped
        ELSE
            lvl := lvl + delta * w;
        END IF;
    ELSIF (-delta)::numeric * w >= lvl THEN
        lvl := 0;
    ELSE
        lvl := lvl + delta * w;
    END IF;
    IF lvl = 0 THEN
        RETURN ROW(0, 0, 0, 0, '{}', 0, 0, 0)::rl.state_words;
    END IF;
    IF p_alg = 6 THEN
        q := lvl / rate;
        IF q > rl._max_state_value() - ne THEN -- its arrival time would not fit a state: capped (0019)
            q := rl._max_state_value() - ne;
            lvl := q * rate; -- <= the level: no overflow
        END IF;
        RETURN ROW(6, ne + q, lvl - q * rate, ne, '{}', 0, 0, 0)::rl.state_words;
    END IF;
    RETURN ROW(p_alg, ne, lvl, 0, '{}', 0, 0, 0)::rl.state_words;
END
$function$;
