#!/usr/bin/env bash
# revisions.sh: compares the core's and memstore's decision benchmarks across git revisions, in one run.
#
#   bash bench/revisions.sh [-rounds N] [-ir] REV...     e.g.  bash bench/revisions.sh 44e1f68 HEAD
#
# Builds `go test -c` of ./core and ./memstore at each revision (in temporary worktrees), then runs
# BenchmarkTake$, BenchmarkTakeInto$ and memstore's BenchmarkDecide$ of every revision in turn, N rounds (default 5),
# under ../shared/bin/quiet when it exists (one benchmark at a time, on an idle machine), and prints each benchmark's
# median ns/op per revision, its ratio to the first revision and each revision's range. Wall time on a 2-core VM
# spreads 10-30% between rounds; -ir adds instructions per call from valgrind's callgrind ((instructions at 2N -
# at N) / N, the benchmark loop included alike), which does not.
set -euo pipefail
rounds=5 ir=0
while [ $# -gt 0 ]; do
  case $1 in
    -rounds) rounds=$2; shift 2 ;;
    -ir) ir=1; shift ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { sed -n 2,10p "$0"; exit 2; }
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'for d in "$work"/src-*; do git -C "$root" worktree remove --force "$d" 2>/dev/null || true; done; rm -rf "$work"' EXIT
names=()
for rev in "$@"; do
  name=$(git -C "$root" rev-parse --short "$rev")
  names+=("$name")
  git -C "$root" worktree add -q --detach "$work/src-$name" "$rev"
  (cd "$work/src-$name" && go test -c -o "$work/core-$name.test" ./core && go test -c -o "$work/mem-$name.test" ./memstore)
done
# The rounds, as a script of their own, so that quiet runs them whole.
{
  echo 'set -e'
  echo "for r in \$(seq $rounds); do"
  for n in "${names[@]}"; do
    echo "  '$work/core-$n.test' -test.run '^\$' -test.bench 'BenchmarkTakeInto\$|BenchmarkTake\$' -test.benchtime 1s | sed -n 's/^\\(Benchmark[^ ]*\\).* \\([0-9.]*\\) ns\\/op.*/$n \\1 \\2/p'"
    echo "  '$work/mem-$n.test' -test.run '^\$' -test.bench 'BenchmarkDecide\$' -test.benchtime 1s | sed -n 's/^\\(Benchmark[^ ]*\\).* \\([0-9.]*\\) ns\\/op.*/$n \\1 \\2/p'"
  done
  echo 'done'
} > "$work/rounds.sh"
quiet=$root/../shared/bin/quiet
if [ -x "$quiet" ]; then
  "$quiet" bash "$work/rounds.sh" > "$work/times"
else
  bash "$work/rounds.sh" > "$work/times"
fi
python3 - "$work/times" "${names[@]}" <<'EOF'
import collections, statistics, sys
path, names = sys.argv[1], sys.argv[2:]
d = collections.defaultdict(list)
for line in open(path):
    n, b, ns = line.split()
    d[(b, n)].append(float(ns))
print("median ns/op (ratio to %s) and range of the rounds" % names[0])
for b in sorted({k[0] for k in d}):
    base = statistics.median(d[(b, names[0])])
    cells = []
    for n in names:
        v = d[(b, n)]
        m = statistics.median(v)
        cells.append("%s %.1f (%.2f) %.1f-%.1f" % (n, m, m / base, min(v), max(v)))
    print("%-42s %s" % (b, "   ".join(cells)))
EOF
if [ "$ir" = 1 ]; then
  command -v valgrind >/dev/null || { echo "revisions.sh: -ir needs valgrind" >&2; exit 1; }
  count() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 | sed -n 's/.*Collected : //p'; }
  echo "instructions per call (callgrind)"
  for spec in core:'BenchmarkTakeInto$' core:'BenchmarkTake$' mem:'BenchmarkDecide$/keys=10000$'; do
    bin=${spec%%:*} pat=${spec#*:}
    for alg in fixed_window sliding_window sliding_log token_bucket leaky_bucket gcra; do
      b=$pat
      [ "$bin" = core ] && b="$pat/alg=$alg$"
      line="$b"
      for n in "${names[@]}"; do
        a=$(count "$work/$bin-$n.test" -test.run '^$' -test.bench "$b" -test.benchtime 100000x -test.cpu 1)
        c=$(count "$work/$bin-$n.test" -test.run '^$' -test.bench "$b" -test.benchtime 200000x -test.cpu 1)
        line="$line  $n $(( (c - a) / 100000 ))"
      done
      echo "$line"
      [ "$bin" = core ] || break
    done
  done
fi
