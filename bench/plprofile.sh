#!/usr/bin/env bash
# plprofile.sh: where the SQL path's time goes, per PL/pgSQL line and per
# decision, on a scratch database of the server at DATABASE_URL (default: the
# tests' server). Not needed by the tests. Needs psql and the plprofiler
# extension (Debian: postgresql-15-plprofiler); it says so and stops when
# the extension is missing.
#
#   bash bench/plprofile.sh            # profile + CPU per call, 2000 calls each
#   N=5000 bash bench/plprofile.sh
#   RL_VERSION=14 bash bench/plprofile.sh   # another schema version (rl-migrate goto)
#   RL_VERSIONS="14 16" bash bench/plprofile.sh   # several, a database each, their rounds interleaved
#
# Every call runs as a transaction of its own, as a client's would (PL/pgSQL
# sets up each expression and statement once per transaction, so a loop
# inside one transaction hides most of the cost). Two measures:
#   1. plprofiler's line and function times (wall clock: inflated by a busy
#      machine, read them as shares), with rl._eval in PL/pgSQL;
#   2. the backend's CPU time per call (/proc/self/schedstat, read through
#      pg_read_file, so a superuser is needed), beside the one-statement
#      upsert of BenchmarkFloor: ratios that a shared machine disturbs less
#      than wall time; again with the native step (sql/native) enabled when
#      the server has it installed. With several versions, every round runs
#      each statement on each version in turn, so that a change of load hits
#      them alike; the profile (1.) is of the last version.
set -euo pipefail
cd "$(dirname "$0")/.."
URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
N=${N:-2000}
VERSIONS=${RL_VERSIONS:-${RL_VERSION:-latest}}
BASE=${URL%%\?*}; BASE=${BASE%/*}
dburl() { echo "$BASE/rlprof_$$_$1?sslmode=disable"; } # dburl version

if [ ! -e "$(pg_config --sharedir 2>/dev/null || echo /usr/share/postgresql/15)/extension/plprofiler.control" ] &&
   [ ! -e /usr/share/postgresql/15/extension/plprofiler.control ]; then
	echo "plprofile.sh needs PL/Profiler on the PostgreSQL server: install the Debian package" >&2
	echo "  postgresql-15-plprofiler   (apt-get update && apt-get install postgresql-15-plprofiler)" >&2
	exit 2
fi

drop_all() { for v in $VERSIONS; do psql "$URL" -qc "DROP DATABASE IF EXISTS rlprof_$$_$v WITH (FORCE)"; done; }
trap drop_all EXIT
for v in $VERSIONS; do
	DBURL=$(dburl "$v")
	psql "$URL" -qc "CREATE DATABASE rlprof_$$_$v"
	GOFLAGS=-buildvcs=false go run ./cmd/rl-migrate -allow-superuser -database "$DBURL" up
	if [ "$v" != latest ]; then
		GOFLAGS=-buildvcs=false go run ./cmd/rl-migrate -allow-superuser -database "$DBURL" goto "$v"
	fi
	psql "$DBURL" -q <<'SQL'
CREATE EXTENSION plprofiler;
CREATE TABLE bench_upsert (k text PRIMARY KEY, n bigint NOT NULL);
CREATE SCHEMA bench;
CREATE FUNCTION bench.cpu_ns() RETURNS bigint LANGUAGE sql
    AS $$ SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint $$;
-- bench.run: the prepared statement p($1 = 0..999) n times, each in a
-- transaction of its own; prints backend CPU µs per call.
CREATE PROCEDURE bench.run(label text, n int) LANGUAGE plpgsql AS $$
DECLARE c0 bigint;
BEGIN
    FOR i IN 1 .. 1000 LOOP EXECUTE format('EXECUTE p(%s)', i % 1000); COMMIT; END LOOP; -- rows, plans
    c0 := bench.cpu_ns();
    FOR i IN 1 .. n LOOP EXECUTE format('EXECUTE p(%s)', i % 1000); COMMIT; END LOOP;
    RAISE NOTICE '% µs CPU per call: %', to_char((bench.cpu_ns() - c0) / 1e3 / n, '9990.0'), label;
END $$;
SQL
done

single="SELECT * FROM rl.rl_decide_multi('p-' || \$1, '{default}', '{4}', '{1073741824}', '{1000000}', '{0}', 1, NULL, true)"
batch1="SELECT * FROM rl.rl_decide_batch(ARRAY['p-' || \$1], '{default}', '{4}', '{1073741824}', '{1000000}', '{0}')"
k5="ARRAY['p-' || \$1, 'p-' || (\$1 + 1000), 'p-' || (\$1 + 2000), 'p-' || (\$1 + 3000), 'p-' || (\$1 + 4000)]"
batch5="SELECT * FROM rl.rl_decide_batch($k5, array_fill('default'::text, ARRAY[5]), array_fill(4, ARRAY[5]), array_fill(1073741824::bigint, ARRAY[5]), array_fill(1000000::bigint, ARRAY[5]), array_fill(0::bigint, ARRAY[5]))"
# five requests on one key (a hot key's batch)
batch5one="SELECT * FROM rl.rl_decide_batch(array_fill('h-' || \$1, ARRAY[5]), array_fill('default'::text, ARRAY[5]), array_fill(4, ARRAY[5]), array_fill(1073741824::bigint, ARRAY[5]), array_fill(1000000::bigint, ARRAY[5]), array_fill(0::bigint, ARRAY[5]))"
upsert="INSERT INTO bench_upsert SELECT 'k' || \$1, 1 ON CONFLICT (k) DO UPDATE SET n = bench_upsert.n + 1"
allow="SELECT * FROM rl.rl_allow('a-' || \$1, 'token_bucket', 1073741824, '1 second')"
multi2="SELECT * FROM rl.rl_decide_multi('m-' || \$1, '{a,b}', '{4,6}', '{1073741824,1073741824}', '{1000000,60000000}', '{0,0}', 1, NULL, true)"

rounds() { # rounds label-suffix statement-names...
	local sfx=$1; shift
	for round in 1 2 3; do
		for v in $VERSIONS; do
			local label=$sfx
			[ "$VERSIONS" = latest ] || label=" [$v]$sfx"
			for q in "$@"; do
				printf "SET synchronous_commit = off; PREPARE p(int) AS %s; CALL bench.run('%s', %d); DEALLOCATE p;\n" "${!q}" "$q$label" "$N"
			done | psql "$(dburl "$v")" -q 2>&1 | sed -n 's/^NOTICE:  //p'
		done
	done
}
echo "== backend CPU per call, synchronous_commit = off (three rounds)"
rounds "" upsert single allow multi2 batch1 batch5 batch5one
# The native step (sql/native), when the server has it: rl._eval in C.
native=1
for v in $VERSIONS; do
	psql "$(dburl "$v")" -qAtc "CREATE EXTENSION rl_native" -c "SELECT rl_native.enable()" >/dev/null 2>&1 || native=0
done
if [ "$native" = 1 ]; then
	echo "== the same with rl_native enabled (rl._eval in C)"
	rounds " (native)" upsert single allow multi2 batch1 batch5 batch5one
	for v in $VERSIONS; do
		psql "$(dburl "$v")" -qAtc "SELECT rl_native.disable()" -c "DROP EXTENSION rl_native" >/dev/null
	done
else
	echo "== rl_native is not installed (make -C sql/native install): no native rounds"
fi

for q in single batch5; do
	echo "== plprofiler: $q, $N calls"
	{
		echo "LOAD 'plprofiler'; SET synchronous_commit = off;"
		echo "PREPARE p(int) AS ${!q};"
		echo "SELECT pl_profiler_set_enabled_local(true);"
		for i in $(seq 1 200); do echo "EXECUTE p($((i % 1000)));"; done
		echo "SELECT pl_profiler_reset_local();"
		for i in $(seq 1 "$N"); do echo "EXECUTE p($((i % 1000)));"; done
		cat <<SQL
\\pset footer off
SELECT s.stack[cardinality(s.stack)]::regprocedure::text AS function, sum(s.call_count) AS calls,
       round(sum(s.us_total)::numeric / $N, 1) AS "µs total per decision", round(sum(s.us_self)::numeric / $N, 1) AS "µs self"
  FROM pl_profiler_callgraph_local() s GROUP BY 1 ORDER BY sum(s.us_self) DESC;
SELECT l.func_oid::regproc AS function, l.line_number AS line, round(l.total_time::numeric / $N, 1) AS "µs per decision",
       left(btrim(src.source), 70) AS source
  FROM pl_profiler_linestats_local() l
  JOIN pl_profiler_funcs_source(pl_profiler_func_oids_local()) src USING (func_oid, line_number)
 WHERE l.line_number > 0 AND l.total_time > 0 ORDER BY l.total_time DESC LIMIT 25;
SQL
	} | psql "$DBURL" -q 2>&1 | awk '/^ *function *\|/{p=1} p'
done
