
-- How often a call retries locking a row that another session keeps
-- creating and deleting before it gives up with a serialization failure.
CREATE FUNCTION rl._lock_tries() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 100;

CREATE FUNCTION rl._max_cost() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 1099511627776; -- 2^40

CREATE FUNCTION rl._max_limit() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 1099511627776; -- 2^40

CREATE FUNCTION rl._max_log_limit() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 4096;

CREATE FUNCTION rl._max_state_value() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 4611686018427387904; -- 2^62

-- The bounds of core (core.MaxTime ...). IMMUTABLE SQL functions with a
-- constant body: the planner inlines them, so they cost nothing.
CREATE FUNCTION rl._max_time() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 253402300799999999;

CREATE FUNCTION rl._max_units() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 2305843009213693952; -- 2^61

CREATE FUNCTION rl._max_window() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN 1000000000000000;
