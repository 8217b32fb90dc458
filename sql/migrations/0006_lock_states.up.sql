-- 0006: rl.lock_states, the locking protocol for programs that decide
-- outside the database (pgstore's Go/WASM transaction path).
SET LOCAL search_path = pg_catalog, pg_temp;

-- rl.lock_states locks the rows of names on key, in bytewise name order,
-- creating missing ones fresh in passing, exactly as rl._take_many does
-- (sql/README.md, "Locking protocol"), and returns them with the time the
-- functions decide at (rl._now()). Call it in a transaction; decide; UPDATE
-- the rows; commit, or roll back to leave nothing behind.
CREATE FUNCTION rl.lock_states(p_key text, p_names text[])
    RETURNS TABLE (name text, algorithm integer, t bigint, x bigint, y bigint, log bigint[], now_us bigint)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, rl, pg_temp
AS $fn$
DECLARE
    nm    text;
    tries integer;
    v_now bigint := rl._now();
BEGIN
    PERFORM rl._check_key(p_key, 'key');
    FOR nm IN SELECT d.n FROM (SELECT DISTINCT u.n FROM unnest(p_names) AS u(n)) d ORDER BY d.n COLLATE "C" LOOP
        PERFORM rl._check_key(nm, 'limit name');
        tries := 0;
        LOOP
            RETURN QUERY SELECT s.name, s.algorithm, s.t, s.x, s.y, s.log, v_now
                           FROM rl.state s WHERE s.key = p_key AND s.name = nm FOR UPDATE;
            EXIT WHEN FOUND;
            tries := tries + 1;
            IF tries > 100 THEN
                RAISE EXCEPTION 'ratelimit: the state row kept changing; retry the transaction'
                    USING ERRCODE = 'serialization_failure';
            END IF;
            INSERT INTO rl.state AS s (key, name) VALUES (p_key, nm) ON CONFLICT DO NOTHING;
        END LOOP;
    END LOOP;
END
$fn$;

COMMENT ON FUNCTION rl.lock_states(text, text[]) IS
    'Locks (creating if missing) the state rows of names on key in bytewise name order; for deciding outside SQL';
