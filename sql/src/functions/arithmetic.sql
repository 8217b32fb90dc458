
-- core.ceilDiv: ⌈a/b⌉ for a >= 0, b > 0 (q*b != a  <=>  a % b != 0).
CREATE FUNCTION rl._ceil_div(a bigint, b bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN a / b + CASE WHEN a % b <> 0 THEN 1 ELSE 0 END;

-- core.ceilDivSigned: ⌈a/b⌉ for any a, b > 0.
CREATE FUNCTION rl._ceil_div_signed(a bigint, b bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN a >= 0 THEN a / b + CASE WHEN a % b <> 0 THEN 1 ELSE 0 END ELSE -((-a) / b) END;

CREATE FUNCTION rl._expires_at(now bigint, reset_after bigint)
    RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (now + reset_after + 67108863) / 67108864 * 67108864;
COMMENT ON FUNCTION rl._expires_at(bigint, bigint) IS 'rl: expires_at of a row written at now with this reset_after: now + reset_after rounded up to a multiple of 2^26 µs (migration 0013)';

-- rl._jint_ok: v, a member of a limits element, is one rl._jint reads
-- without an error (missing, null or an integer).
CREATE FUNCTION rl._jint_ok(v jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN v IS NULL OR jsonb_typeof(v) = 'null' THEN true
                WHEN jsonb_typeof(v) <> 'number' THEN false
                ELSE v::numeric = trunc(v::numeric) END;

-- rl._jint reads an integer member of a limits element: NULL when missing,
-- clamped to bigint (out-of-range values are then reported by the decision).
CREATE FUNCTION rl._jint(v jsonb, what text, i integer) RETURNS bigint
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
DECLARE
    n numeric;
BEGIN
    IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(v) <> 'number' THEN
        RAISE EXCEPTION 'ratelimit: limits[%].% must be an integer, not %', i, what, v
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    n := v::numeric;
    IF n <> trunc(n) THEN
        RAISE EXCEPTION 'ratelimit: limits[%].% must be an integer, not %', i, what, v
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN greatest(-9223372036854775808, least(9223372036854775807, n))::bigint;
END
$fn$;

-- rl._later is core later: retry-after a is later than b (-1, never, is latest).
CREATE FUNCTION rl._later(a bigint, b bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN b <> -1 AND (a = -1 OR a > b);

-- rl._interval_us, as in 0003, with the bound as rl._max_window(): a window
-- interval in µs, clamped to [-1, MaxWindow + 1] so that an out-of-range
-- window is reported as ErrWindow in check order.
CREATE OR REPLACE FUNCTION rl._interval_us(win interval) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN greatest(-1, least(rl._max_window() + 1, extract(epoch FROM win) * 1000000))::bigint;

-- rl._wrap64 is v as Go's int64 arithmetic leaves it: v modulo 2^64, in
-- [-2^63, 2^63). The core computes a few values that can overflow int64
-- when it reads a state in debt exactly (a sliding window's room, with
-- counts far above the limit; a bucket's times, with a level near
-- MaxStateValue); where they can, the port computes them in numeric and
-- wraps them here, so that it decides as the core does.
CREATE FUNCTION rl._wrap64(v numeric) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (mod(mod(v + 9223372036854775808, 18446744073709551616) + 18446744073709551616, 18446744073709551616)
            - 9223372036854775808)::bigint;
