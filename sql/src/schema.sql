-- The schema rl: everything of rl lives in it.
CREATE SCHEMA rl;
COMMENT ON SCHEMA rl IS 'rate limiting: state table and decision functions (github.com/rlcore/rl)';
