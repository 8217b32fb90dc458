#!/usr/bin/env bash
# plinstr.sh: the backend's instructions per call (valgrind's callgrind) of
# rl_allow and of the one-statement upsert floor, for one or more checkouts
# of this repository: a count that a loaded machine does not change, unlike
# times. Runs a private PostgreSQL instance of its own (initdb in a
# temporary directory, as the user postgres; never the tests' server), a
# database per checkout migrated by that checkout's rl-migrate, each call a
# statement and a transaction of its own in a single-user backend. Needs
# valgrind, the server's binaries (pg_config --bindir) and root (to run as
# postgres). Not needed by the tests.
#
#   bash bench/plinstr.sh                                # this checkout
#   TREES="/path/to/main $PWD" bash bench/plinstr.sh     # before and after
#   STMTS="upsert token_bucket gcra" bash bench/plinstr.sh
#
# Each count is (run of 600 calls - run of 100 calls) / 500, both runs after
# the same 50 calls that prepare the session and after a run, not counted,
# that creates the 1000 rows and vacuums, so that the session's set-up, the
# rows' creation and the shutdown cancel out: what remains is one call's
# executor, PL/pgSQL, commit and the single-user backend's printing of the
# result. The profile of the larger run stays in the temporary directory
# (callgrind_annotate --inclusive=yes <file>); KEEP=1 keeps the directory.
set -euo pipefail
cd "$(dirname "$0")/.."
TREES=${TREES:-$PWD}
STMTS=${STMTS:-upsert token_bucket gcra}
BIN=${BIN:-$(pg_config --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)}
dir=$(mktemp -d /tmp/plinstr.XXXXXX)
chown postgres "$dir"
as_pg() { su postgres -c "$1"; }
cleanup() {
	as_pg "$BIN/pg_ctl -D $dir/data -m immediate stop" >/dev/null 2>&1 || true
	[ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
as_pg "$BIN/initdb -D $dir/data -A trust -U postgres" >"$dir/initdb.log"
as_pg "$BIN/pg_ctl -D $dir/data -o '-p 55439 -k $dir -c listen_addresses=' -l $dir/pg.log -w start" >/dev/null
i=0
for tree in $TREES; do
	i=$((i + 1))
	psql "host=$dir port=55439 user=postgres dbname=postgres" -qc "CREATE DATABASE t$i"
	(cd "$tree" && GOFLAGS=-buildvcs=false go run ./cmd/rl-migrate -allow-superuser \
		-database "postgres://postgres@localhost/t$i?host=$dir&port=55439&sslmode=disable" up >/dev/null 2>&1)
	psql "host=$dir port=55439 user=postgres dbname=t$i" -qc "CREATE TABLE bench_upsert (k text PRIMARY KEY, n bigint NOT NULL)"
done
as_pg "$BIN/pg_ctl -D $dir/data -w stop" >/dev/null

stmt() { # stmt name: the statement, of $1
	case $1 in
	upsert) echo "INSERT INTO bench_upsert SELECT 'k' || \$1, 1 ON CONFLICT (k) DO UPDATE SET n = bench_upsert.n + 1" ;;
	*) echo "SELECT * FROM rl.rl_allow('$1-' || \$1, '$1', 1073741824, '1 second')" ;;
	esac
}
count() { # count db name n: instructions of a run of n calls
	local f=$dir/$1.$2.$3.sql pre=$dir/$1.$2.pre.sql
	{ echo "SET synchronous_commit = off;"; echo "PREPARE p(int) AS $(stmt "$2");"
	  for k in $(seq 0 999); do echo "EXECUTE p($k);"; done; echo "VACUUM;"; } >"$pre"
	{ echo "SET synchronous_commit = off;"; echo "PREPARE p(int) AS $(stmt "$2");"
	  for k in $(seq 0 49); do echo "EXECUTE p($k);"; done
	  for k in $(seq 1 "$3"); do echo "EXECUTE p($((k % 1000)));"; done; } >"$f"
	chown postgres "$f" "$pre"
	as_pg "$BIN/postgres --single -D $dir/data $1 < $pre" >/dev/null 2>&1
	as_pg "valgrind --tool=callgrind --callgrind-out-file=$dir/cg.$1.$2.$3.out $BIN/postgres --single -D $dir/data $1 < $f" \
		>/dev/null 2>"$dir/vg.$1.$2.$3.log"
	sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$dir/vg.$1.$2.$3.log"
}
echo "| statement | $(i=0; for t in $TREES; do i=$((i + 1)); printf '%s (t%s) | ' "$(git -C "$t" log -1 --format=%h 2>/dev/null || echo "$t")" "$i"; done)"
echo "|---|$(for t in $TREES; do printf -- '---:|'; done)"
for s in $STMTS; do
	row="| $s |"
	i=0
	for t in $TREES; do
		i=$((i + 1))
		a=$(count "t$i" "$s" 100); b=$(count "t$i" "$s" 600)
		row="$row $(( (b - a) / 500 )) |"
	done
	echo "$row"
done
echo
echo "instructions per call; profiles in $dir${KEEP:+ (kept)}"
