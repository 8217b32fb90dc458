-- The composite types of rl: the results of the functions and the words of a
-- state or a limit passed to and from the port of the core.

-- rl._eval_result: what rl._eval and rl._settle return for one limit: the
-- decision (err 0) or the error code, and the new state.
CREATE TYPE rl._eval_result AS (
    err integer,
    allowed boolean,
    lim bigint,
    remaining bigint,
    reset_after bigint,
    retry_after bigint,
    delay bigint,
    algorithm integer,
    t bigint,
    x bigint,
    y bigint,
    log bigint[],
    next_after bigint,
    l bigint,
    w bigint,
    r bigint,
    settle_caps boolean
);

-- rl.batch_decision: a row of rl.rl_decide_batch.
CREATE TYPE rl.batch_decision AS (
    req integer,
    ord integer,
    name text,
    allowed boolean,
    lim bigint,
    remaining bigint,
    reset_after_us bigint,
    retry_after_us bigint,
    delay_us bigint,
    deciding boolean,
    now_us bigint,
    error_code text,
    error_message text,
    next_after_us bigint
);

COMMENT ON TYPE rl.batch_decision IS 'One row of rl.rl_decide_batch: a limit of a request, or a request''s error (error_code set, ord NULL)';

-- rl.decision: the result of rl_allow, rl_peek and rl_settle (one limit).
CREATE TYPE rl.decision AS (
    allowed boolean,
    lim bigint,
    remaining bigint,
    reset_after_us bigint,
    retry_after_us bigint,
    delay_us bigint,
    now_us bigint,
    next_after_us bigint
);

-- rl.decision_state: a row of rl.decide and rl.decide_all: a decision and the
-- new state, for deciding on states given as arguments.
CREATE TYPE rl.decision_state AS (
    ord integer,
    allowed boolean,
    lim bigint,
    remaining bigint,
    reset_after_us bigint,
    retry_after_us bigint,
    delay_us bigint,
    idx integer,
    algorithm integer,
    t bigint,
    x bigint,
    y bigint,
    log bigint[],
    next_after_us bigint,
    l bigint,
    w bigint,
    r bigint
);

-- rl.limit_spec: one limit for rl.decide_all (core.Limit).
CREATE TYPE rl.limit_spec AS (
    algorithm integer,
    lim bigint,
    window_us bigint,
    rate bigint
);

-- rl.multi_decision: a row of the functions deciding several limits of a key.
CREATE TYPE rl.multi_decision AS (
    ord integer,
    name text,
    allowed boolean,
    lim bigint,
    remaining bigint,
    reset_after_us bigint,
    retry_after_us bigint,
    delay_us bigint,
    deciding boolean,
    now_us bigint,
    next_after_us bigint
);

-- rl.state_words: the words of core.State, as rl.state holds them.
CREATE TYPE rl.state_words AS (
    algorithm integer,
    t bigint,
    x bigint,
    y bigint,
    log bigint[],
    l bigint,
    w bigint,
    r bigint
);

