#!/usr/bin/env bash
# Instruction counts per scheduling decision, for comparing commits when wall
# time is too noisy (a shared or loaded machine). Counts from
# `valgrind --tool=callgrind` do not depend on the clock, the other guests or
# the caches; they move only when the code executed changes. They are not a
# speed: two commits with the same count can differ in time through cache
# misses and dependency chains (docs/BENCHMARKS.md, "How to measure").
#
# Usage: scripts/callgrind.sh [COMMIT...]      (default: HEAD~1 HEAD)
# Each commit is built (`cargo build --release -p pspat-cli`) in a temporary
# git worktree, sharing the target directory target/callgrind so that
# dependencies compile once; the binary is kept as
# target/callgrind/bins/pspat-<commit>, so a second comparison involving the
# same commit does not build it again. Then, for each algorithm, `pspat sched-bench`
# runs twice under callgrind with the same flowsets: once with 1 timed
# iteration and once with ITERATIONS. The difference of the two instruction
# totals, divided by the difference of their dequeues (decisions), is the
# cost of one decision in the steady loop: the flow table, the allocation and
# the warm-up cycle (identical in both runs) cancel out. The enqueue that goes
# with each dequeue is included, as in sched-bench's ns per pair. By default
# ITERATIONS covers exactly two fill/drain cycles of the harness
# (4 × (qmax − qmin) steps, read from the first run's JSON), so enqueues and
# dequeues balance: at 32 768 flows that is 2 490 368 steps, about 20 s per
# run under callgrind on a loaded 2-core machine, 4 runs per commit.
#
# Environment: ALGS (default "drr qfq"), FLOWSETS (default 1:60:32768),
# ITERATIONS (default: two full cycles, above), BENCH_ARGS (more arguments
# for sched-bench, e.g. "--dummynet" for the classifier, masks and pipe in
# front of the algorithm: run once without and once with it for the ratio). Needs git, cargo and valgrind; when valgrind
# is missing it is installed with apt-get if running as root (Debian's
# package), otherwise the script says how and stops. Nothing else is
# downloaded beyond what cargo fetches for the build.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

algs=${ALGS:-"drr qfq"}
flowsets=${FLOWSETS:-1:60:32768}
iterations=${ITERATIONS:-}
read -r -a bench_args <<< "${BENCH_ARGS:-}"

. scripts/lib/need-valgrind.sh

if [ "$#" -eq 0 ]; then
  set -- HEAD~1 HEAD
fi
commits=()
for c in "$@"; do
  sha=$(git rev-parse --verify --quiet "$c^{commit}") || {
    echo "callgrind.sh: '$c' is not a commit of this repository (a shallow clone may lack parents: git fetch --unshallow)" >&2
    exit 2
  }
  commits+=("$sha")
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pspat-callgrind.XXXXXX")
worktrees=()
cleanup() {
  for w in "${worktrees[@]}"; do
    git -C "$repo" worktree remove --force "$w" 2> /dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

export CARGO_TARGET_DIR="$repo/target/callgrind"
bins="$CARGO_TARGET_DIR/bins"
mkdir -p "$bins"
for sha in "${commits[@]}"; do
  short=${sha:0:7}
  if [ ! -x "$bins/pspat-$sha" ]; then
    wt="$tmp/src-$short"
    git worktree add --detach --quiet "$wt" "$sha"
    worktrees+=("$wt")
    echo "== building $short" >&2
    (cd "$wt" && cargo build --release --quiet -p pspat-cli)
    cp "$CARGO_TARGET_DIR/release/pspat" "$bins/pspat-$sha.partial"
    mv "$bins/pspat-$sha.partial" "$bins/pspat-$sha"
  fi
  ln -sf "$bins/pspat-$sha" "$tmp/pspat-$short"
done

# Total instructions (Ir) of one run, its dequeues and the harness's
# hysteresis bounds, as "IR DEQUEUES QMIN QMAX".
count() {
  local bin=$1 alg=$2 iters=$3 out="$tmp/cg.out" json="$tmp/cg.json"
  valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$bin" sched-bench --alg "$alg" --flowsets "$flowsets" "${bench_args[@]}" \
    --iterations "$iters" --repeat 1 --json > "$json" 2> "$tmp/cg.err" || {
    echo "callgrind.sh: $bin sched-bench --alg $alg failed:" >&2
    tail -5 "$tmp/cg.err" >&2
    exit 1
  }
  local ir deq qmin qmax
  ir=$(sed -n -E 's/^(summary|totals): *([0-9]+).*/\2/p' "$out" | head -1)
  deq=$(sed -n -E 's/.*"dequeues": *([0-9]+).*/\1/p' "$json" | head -1)
  qmin=$(sed -n -E 's/.*"qmin": *([0-9]+).*/\1/p' "$json" | head -1)
  qmax=$(sed -n -E 's/.*"qmax": *([0-9]+).*/\1/p' "$json" | head -1)
  if [ -z "$ir" ] || [ -z "$deq" ] || [ -z "$qmin" ] || [ -z "$qmax" ]; then
    echo "callgrind.sh: could not read the instruction total or the harness counters of $bin --alg $alg" >&2
    exit 1
  fi
  echo "$ir $deq $qmin $qmax"
}

if [ -n "$iterations" ]; then
  echo "workload: sched-bench --flowsets $flowsets ${BENCH_ARGS:-} under callgrind, $iterations timed iterations less a 1-iteration run"
else
  echo "workload: sched-bench --flowsets $flowsets ${BENCH_ARGS:-} under callgrind, two fill/drain cycles (4 x (qmax - qmin) timed iterations) less a 1-iteration run"
fi
printf '%-9s %-6s %14s %12s %16s %10s\n' commit alg instructions decisions instr/decision ratio
declare -A first
for alg in $algs; do
  for sha in "${commits[@]}"; do
    short=${sha:0:7}
    echo "== callgrind $short $alg" >&2
    base=$(count "$tmp/pspat-$short" "$alg" 1)
    read -r ir1 deq1 qmin qmax <<< "$base"
    iters=${iterations:-$((4 * (qmax - qmin)))}
    full=$(count "$tmp/pspat-$short" "$alg" "$iters")
    read -r ir2 deq2 _ _ <<< "$full"
    dir=$((ir2 - ir1))
    ddeq=$((deq2 - deq1))
    if [ "$ddeq" -le 0 ]; then
      echo "callgrind.sh: no decisions in the timed part ($alg, $short): raise ITERATIONS" >&2
      exit 1
    fi
    per=$(awk -v i="$dir" -v d="$ddeq" 'BEGIN { printf "%.2f", i / d }')
    if [ -z "${first[$alg]:-}" ]; then
      first[$alg]=$per
      ratio="1"
    else
      ratio=$(awk -v a="$per" -v b="${first[$alg]}" 'BEGIN { printf "%.4f", a / b }')
    fi
    printf '%-9s %-6s %14s %12s %16s %10s\n' "$short" "$alg" "$dir" "$ddeq" "$per" "$ratio"
  done
done
echo "ratio: instructions per decision against the first commit listed (${commits[0]:0:7}), same algorithm"
