#!/usr/bin/env bash
# Runs the peer benchmarks and the over-admission program and prints one
# markdown table of the benchmarks (with ratios to rl) and the over-admission
# table. About 8 minutes with the defaults (9 peers) on a 2-core machine.
#
#   bench/peers/run.sh                 # ROUNDS=5 BENCHTIME=1s TRIALS=200
#   ROUNDS=10 BENCHTIME=1s bench/peers/run.sh
#   OUT=/tmp/peers bench/peers/run.sh  # keep the raw output there
#
# Rounds are interleaved (every benchmark once per round, ROUNDS rounds)
# rather than -count=N back to back, so slow drifts of a shared machine
# spread over all peers instead of landing on one.
set -euo pipefail
cd "$(dirname "$0")"

ROUNDS=${ROUNDS:-5}
BENCHTIME=${BENCHTIME:-1s}
TRIALS=${TRIALS:-200}
BENCH=${BENCH:-'Allow'}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

go vet ./... >&2
go test -c -o "$OUT/peers.test" . >&2
go build -o "$OUT/table" ./cmd/table
go build -o "$OUT/overadmit" ./cmd/overadmit

: >"$OUT/bench.txt"
for ((r = 1; r <= ROUNDS; r++)); do
	echo "round $r/$ROUNDS ..." >&2
	"$OUT/peers.test" -test.run '^$' -test.bench "$BENCH" -test.benchmem \
		-test.benchtime "$BENCHTIME" -test.count 1 >>"$OUT/bench.txt" 2>&1 || {
		echo "benchmarks failed; output in $OUT/bench.txt" >&2
		tail -20 "$OUT/bench.txt" >&2
		exit 1
	}
done
"$OUT/overadmit" -trials "$TRIALS" >"$OUT/overadmit.md"

cpu=$(grep -m1 '^cpu:' "$OUT/bench.txt" | sed 's/^cpu: *//;s/ *$//')
echo "## Peer comparison, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "$(go version | cut -d' ' -f3-), $cpu, $(nproc) CPUs, GOMAXPROCS=${GOMAXPROCS:-$(nproc)}; $ROUNDS interleaved rounds × -benchtime $BENCHTIME; limit 1e9/s (admission path). Shared, noisy machine: compare ratios within this run, not absolute times across runs."
echo
"$OUT/table" "$OUT/bench.txt"
echo
cat "$OUT/overadmit.md"
echo
echo "Raw output: $OUT/bench.txt" >&2
