-- GCRA (core.GCRA), the generic cell rate algorithm: the theoretical
-- arrival time of the next unit (T, with the fraction X) and the time of the
-- admission that wrote it (Y). Its functions have the names and signatures
-- the generated dispatch (algorithms.sql) calls, rl._<name>_<role>
-- (ARCHITECTURE.md, "A new algorithm"); its settle is the level arithmetic of
-- levels.sql.

-- rl._gcra_state_error: its part of core checkState (rl._state_error). X:
-- the TAT's fraction numerator, below Rate (<= MaxLimit); Y: the
-- admission's time, never after the TAT it wrote.
CREATE FUNCTION rl._gcra_state_error(s_t bigint, s_x bigint, s_y bigint, s_log bigint[]) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN s_x > rl._max_limit() OR s_y > s_t THEN 8 ELSE 0 END;

-- rl._gcra_step: its decision (core decide).
CREATE FUNCTION rl._gcra_step(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], exact boolean, now bigint, cost bigint, p_take boolean, r rl._eval_result)
 RETURNS rl._eval_result
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    capacity bigint := lim * w;
    lvl      bigint := 0;
    is_full  boolean := false; -- level > capacity, too big to compute
    dt       bigint;
BEGIN
    IF rate = 0 THEN
        rate := lim;
    END IF;
    IF s_alg = 6 THEN
        IF s_y > 0 AND NOT exact THEN
            -- rl._state_error: s_t >= s_y. dt*rate <= capacity when the
            -- first test fails.
            dt := s_t - s_y;
            IF dt > capacity / rate THEN
                s_t := s_y + capacity / rate; s_x := capacity % rate;
            ELSIF dt * rate + s_x > capacity THEN
                s_t := s_y + capacity / rate; s_x := capacity % rate;
            END IF;
        END IF;
        IF s_t >= now THEN
            dt := s_t - now;
            IF dt > capacity / rate THEN
                is_full := true;
            ELSE
                lvl := dt * rate + s_x;
            END IF;
        ELSE
            dt := now - s_t;
            IF s_x > 0 THEN
                IF dt < rl._ceil_div(s_x, rate) THEN
                    lvl := s_x - dt * rate;
                END IF;
            END IF;
        END IF;
    END IF;
    IF cost = 0 THEN
        r.allowed := true;
    ELSIF NOT is_full AND cost <= lim THEN
        IF lvl + cost * w <= capacity THEN
            r.allowed := true;
        END IF;
    END IF;
    IF r.allowed THEN
        IF cost > 0 THEN
            lvl := lvl + cost * w;
            IF p_take THEN
                r.algorithm := 6; r.t := now + lvl / rate; r.x := lvl % rate; r.y := now; r.log := '{}';
                r.l := lim; r.w := w; r.r := rate;
            END IF;
            r.reset_after := rl._ceil_div(lvl, rate);
        END IF;
    ELSIF cost > lim THEN
        r.retry_after := -1;
    ELSE
        -- First t with (T-t)*r + X <= capacity - cost*w.
        r.retry_after := s_t + rl._ceil_div_signed(s_x + cost * w - capacity, rate) - now;
    END IF;
    IF NOT is_full AND lvl < capacity THEN
        r.remaining := (capacity - lvl) / w;
    END IF;
    IF r.reset_after = 0 AND (is_full OR lvl > 0) THEN
        r.reset_after := s_t + rl._ceil_div(s_x, rate) - now;
    END IF;
    IF is_full THEN -- as a retry of one unit
        r.next_after := s_t + rl._ceil_div_signed(s_x + w - capacity, rate) - now;
    ELSIF lvl > 0 THEN
        -- The level drains rate units a µs from now on: the first instant at
        -- which remaining + 1 units fit.
        r.next_after := rl._ceil_div(lvl - capacity + (r.remaining + 1) * w, rate);
    END IF;
    RETURN r;
END
$function$;

-- rl._gcra_settle: its settle (core settleLevel), rl._settle_level's.
CREATE FUNCTION rl._gcra_settle(lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], exact boolean, now bigint, delta bigint)
 RETURNS rl.state_words
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN rl._settle_level(6, lim, w, rate, s_alg, s_t, s_x, s_y, exact, now, delta);

-- rl._gcra_anchor and rl._gcra_usage: what rl._carry carries from a state
-- of it: the level at its last admission (Y), in 1/s_w of a unit,
-- saturating.
CREATE FUNCTION rl._gcra_anchor(s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN s_y;

CREATE FUNCTION rl._gcra_usage(s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN least((s_t - s_y)::numeric * s_r + s_x, rl._max_state_value())::bigint;

-- rl._gcra_carry: the state it holds with the level used (in 1/w of a unit)
-- at anchor a (rl._carry): the arrival time that level gives.
CREATE FUNCTION rl._gcra_carry(a bigint, used bigint, lim bigint, w bigint, rate bigint) RETURNS rl.state_words
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ROW(6, a + used / rate, used % rate, a, '{}', lim, w, rate)::rl.state_words;
