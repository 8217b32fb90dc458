#!/usr/bin/env bash
# Runs CI (.ci/run) on fresh clones of a commit, several times in a row,
# with load beside it: two busy loops on the CPU and pgbench on the same
# PostgreSQL server (its own database, rl_load). Each run's log, wall time
# and the load average at its end are printed; the script fails when a run
# fails. It checks that the suite decides by events, not by time.
#
#   scripts/ci-under-load.sh [-n RUNS] [-rev REV]     (default: 3 runs of HEAD)
#
# Needs what CI needs (root for the first set-up) and pgbench (Debian's
# postgresql-contrib, which comes with the server package).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
rev=HEAD
while [ $# -gt 0 ]; do
  case "$1" in
    -n) runs=$2; shift 2 ;;
    -rev) rev=$2; shift 2 ;;
    *) echo "usage: $0 [-n RUNS] [-rev REV]" >&2; exit 2 ;;
  esac
done
rev=$(git rev-parse "$rev")
repo=$(pwd)
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  psql -h 127.0.0.1 -U postgres -d postgres -qc 'DROP DATABASE IF EXISTS rl_load WITH (FORCE)' >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

pgbench=$(command -v pgbench || echo /usr/lib/postgresql/15/bin/pgbench)
psql -h 127.0.0.1 -U postgres -d postgres -qc 'DROP DATABASE IF EXISTS rl_load WITH (FORCE)' -c 'CREATE DATABASE rl_load'
"$pgbench" -h 127.0.0.1 -U postgres -i -s 10 -q rl_load >/dev/null 2>&1

for _ in 1 2; do
  (while :; do :; done) &
  pids+=($!)
done
(while :; do "$pgbench" -h 127.0.0.1 -U postgres -c 8 -j 2 -T 600 -n rl_load >/dev/null 2>&1 || sleep 1; done) &
pids+=($!)

failed=0
for i in $(seq 1 "$runs"); do
  dir="$work/run$i"
  git clone -q "$repo" "$dir"
  git -C "$dir" checkout -q "$rev"
  start=$(date +%s)
  if (cd "$dir" && bash .ci/run) >"$work/run$i.log" 2>&1; then result=passed; else result=FAILED; failed=1; fi
  end=$(date +%s)
  printf 'run %d of %s: %s in %d s, load average %s\n' "$i" "${rev:0:7}" "$result" $((end - start)) "$(cut -d' ' -f1-3 /proc/loadavg)"
  if [ "$result" = FAILED ]; then
    grep -E '^(--- FAIL|FAIL|panic:)' "$work/run$i.log" | head -20 || true
    cp "$work/run$i.log" "$repo/ci-under-load-run$i.log"
    echo "log: ci-under-load-run$i.log"
  fi
done
exit $failed
