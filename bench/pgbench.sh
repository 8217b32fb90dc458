#!/usr/bin/env bash
# pgbench.sh: rl_allow against the one-statement upsert floor with pgbench,
# and the HOT ratio of rl.state, on a scratch database of the server at
# DATABASE_URL (default: the tests' server). Not needed by the tests.
#
#   bash bench/pgbench.sh                  # the latest migration
#   RL_VERSION=12 bash bench/pgbench.sh    # another schema version (rl-migrate goto), e.g. before HOT updates
#   NATIVE=1 bash bench/pgbench.sh         # with the native step (sql/native, installed) enabled
#   T=10 CLIENTS="1 16" bash bench/pgbench.sh
#
# Each row is one pgbench run (-M prepared, -T T seconds, every transaction
# one statement): the upsert floor, then rl_allow with each algorithm, on
# 10,000 keys chosen at random, with synchronous_commit off (fast) or on
# (durable), at each client count; then 16 clients on one hot key. Every
# rl_allow call admits (limit 2^30 per second), so each one writes its row,
# as the upsert does. Ratios are to the floor of the same durability and
# clients, within the run. Then exactness: 16 clients on one key, every
# algorithm, exactly its limit admitted. The HOT ratio is n_tup_hot_upd /
# n_tup_upd of rl.state over all the runs. Run it under ../shared/bin/quiet.
set -euo pipefail
cd "$(dirname "$0")/.."
URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
T=${T:-5}
CLIENTS=${CLIENTS:-1 16}
ALGS=${ALGS:-fixed_window sliding_window sliding_log token_bucket leaky_bucket gcra}
DB=rlbench_$$
BASE=${URL%%\?*}; BASE=${BASE%/*}
DBURL="$BASE/$DB?sslmode=disable"
dir=$(mktemp -d)

psql "$URL" -qc "CREATE DATABASE $DB"
trap 'psql "$URL" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"; rm -rf "$dir"' EXIT
# Migrated as the superuser (-allow-superuser): a scratch database for a
# benchmark, not an installation (sql/README.md says how to install).
if [ -n "${RL_VERSION:-}" ]; then
	GOFLAGS=-buildvcs=false go run ./cmd/rl-migrate -allow-superuser -database "$DBURL" goto "$RL_VERSION" >&2
else
	GOFLAGS=-buildvcs=false go run ./cmd/rl-migrate -allow-superuser -database "$DBURL" up >&2
fi
if [ -n "${NATIVE:-}" ]; then
	psql "$DBURL" -qAtc "CREATE EXTENSION rl_native" -c "SELECT rl_native.enable()" >&2
fi
psql "$DBURL" -qc "CREATE TABLE upsert_floor (k text PRIMARY KEY, n bigint NOT NULL)"
version=$(psql "$DBURL" -Atc "SELECT max(version) FROM rl_schema_migrations" 2>/dev/null || echo "?")

# The scripts. sliding_log keeps one entry per admission within the window:
# its limit is 1000 per 10 ms so that rows stay small.
printf '\\set k random(1, 10000)\nINSERT INTO upsert_floor VALUES (:k, 1) ON CONFLICT (k) DO UPDATE SET n = upsert_floor.n + 1;\n' >"$dir/floor.sql"
printf 'INSERT INTO upsert_floor VALUES (0, 1) ON CONFLICT (k) DO UPDATE SET n = upsert_floor.n + 1;\n' >"$dir/floor-hot.sql"
for a in $ALGS; do
	lim=1073741824; win="1 second"
	if [ "$a" = sliding_log ]; then lim=1000; win="10 milliseconds"; fi
	printf "\\\\set k random(1, 10000)\nSELECT allowed FROM rl.rl_allow('k' || :k, '%s', %s, '%s');\n" "$a" "$lim" "$win" >"$dir/$a.sql"
	printf "SELECT allowed FROM rl.rl_allow('hot', '%s', %s, '%s');\n" "$a" "$lim" "$win" >"$dir/$a-hot.sql"
done

tps() { # tps mode clients script
	local opts=""
	[ "$1" = fast ] && opts="-c synchronous_commit=off"
	PGOPTIONS="$opts" pgbench -n -M prepared -T "$T" -c "$2" -j 2 -f "$dir/$3.sql" "$DBURL" 2>/dev/null |
		sed -n 's/^tps = \([0-9.]*\) .*/\1/p' | cut -d. -f1
}
# Rows first, so that every timed call finds its row.
PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -t 20000 -c 2 -j 2 -f "$dir/floor.sql" "$DBURL" >/dev/null 2>&1
for a in $ALGS; do
	PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -t 20000 -c 2 -j 2 -f "$dir/$a.sql" "$DBURL" >/dev/null 2>&1
done
psql "$DBURL" -qc "VACUUM ANALYZE" -c "SELECT pg_stat_reset()" >/dev/null

echo "schema version $version${NATIVE:+, rl_native enabled}; pgbench -M prepared, $T s a row, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| durability | clients | keys | what | tps | × floor |"
echo "|---|---:|---:|---|---:|---:|"
for mode in fast durable; do
	for c in $CLIENTS 16hot; do
		n=${c%hot}; keys=10000; suffix=""
		[ "$c" != "$n" ] && { keys=1; suffix=-hot; }
		f=$(tps "$mode" "$n" "floor$suffix")
		echo "| $mode | $n | $keys | upsert floor | $f | |"
		for a in $ALGS; do
			v=$(tps "$mode" "$n" "$a$suffix")
			echo "| $mode | $n | $keys | rl_allow $a | $v | $(awk -v a="$v" -v b="$f" 'BEGIN{printf "%.2f×", a/b}') |"
		done
	done
done
# Exactness on a hot key: 16 clients on one key whose limit (1000 per 1000
# hours) nothing refills during the run; every admitted call is counted in
# a table of its own (one more statement, not timed). Exactly 1000 admitted.
psql "$DBURL" -qc "CREATE TABLE admitted (alg text NOT NULL)"
echo
echo "| exactness: 16 clients, one key, limit 1000 per 1000 hours, $T s | calls | admitted |"
echo "|---|---:|---:|"
for a in $ALGS; do
	cat >"$dir/exact-$a.sql" <<-SQL
	SELECT allowed::int AS ok FROM rl.rl_allow('exact', '$a', 1000, '1000 hours', name => '$a') \\gset
	\\if :ok
	INSERT INTO admitted VALUES ('$a');
	\\endif
	SQL
	calls=$(PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -T "$T" -c 16 -j 2 -f "$dir/exact-$a.sql" "$DBURL" 2>/dev/null |
		sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
	echo "| rl_allow $a | $calls | $(psql "$DBURL" -Atc "SELECT count(*) FROM admitted WHERE alg = '$a'") |"
done
sleep 1
echo
psql "$DBURL" -Atc "SELECT format('HOT updates: rl.state %s of %s (%s%%), upsert_floor %s of %s (%s%%)',
	s.n_tup_hot_upd, s.n_tup_upd, round(100.0 * s.n_tup_hot_upd / nullif(s.n_tup_upd, 0), 1),
	f.n_tup_hot_upd, f.n_tup_upd, round(100.0 * f.n_tup_hot_upd / nullif(f.n_tup_upd, 0), 1))
	FROM pg_stat_user_tables s, pg_stat_user_tables f WHERE s.relid = 'rl.state'::regclass AND f.relid = 'upsert_floor'::regclass"
