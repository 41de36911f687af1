#!/usr/bin/env bash
# CPU cost of shaping: CPU time of the arbiter thread and of the whole
# process per second of wall time while `pspat bench` shapes one greedy
# flow (one client, 60-byte packets) at 1 Mbit/s, 100 Mbit/s and unlimited.
#
#   scripts/shaping-cpu.sh [BIN...]        (default: target/release/pspat)
#
# With several binaries (for example the binaries of two commits) the runs
# alternate, RUNS (default 5) rounds of every rate and binary, and the
# medians are printed per binary and rate, with the shaped rate (the
# bench's throughput over its measured window). CPU time comes from
# /proc/PID/task/*/schedstat (nanoseconds on CPU), sampled 1 s after the
# start and 0.5 s before the end of a DURATION-second run (default 6), so
# start-up and the final drain are left out. The bench pins the arbiter to
# core 0 and the client to core 1 and says so. RATES picks some of
# the three rates (default "1M 100M unlimited"); BENCH_ARGS adds flags to every run,
# e.g. BENCH_ARGS="--max-wake-delay 2ms --wake-batch 8" (section 10 of
# docs/BENCHMARKS.md: wake-up coalescing against CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
DURATION=${DURATION:-6}
read -r -a rates <<< "${RATES:-1M 100M unlimited}"
read -r -a extra <<< "${BENCH_ARGS:-}"
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(target/release/pspat)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '{"alg":"shaped-drr","eiffel":{"rate_bps":1000000}}' > "$tmp/1M.json"
printf '{"alg":"shaped-drr","eiffel":{"rate_bps":100000000}}' > "$tmp/100M.json"

cpu_ns() { # pid -> "arbiter_ns total_ns"
  local pid=$1 arb=0 tot=0 t ns comm
  for t in /proc/"$pid"/task/*; do
    ns=$(awk '{print $1}' "$t/schedstat" 2>/dev/null || echo 0)
    comm=$(cat "$t/comm" 2>/dev/null || echo "")
    tot=$((tot + ns))
    [ "$comm" = "pspat-arbiter" ] && arb=$((arb + ns))
  done
  echo "$arb $tot"
}

one_run() { # bin rate -> "arbiter_share process_share decisions_M_per_s throughput_kbit_per_s"
  local bin=$1 rate=$2 args
  case $rate in
    unlimited) args=(--alg drr) ;;
    *) args=(--sched-config "$tmp/$rate.json") ;;
  esac
  "$bin" bench --mode pspat --clients 1 --duration "$DURATION" --json "${args[@]}" ${extra[@]+"${extra[@]}"} > "$tmp/out" 2>/dev/null &
  local pid=$!
  sleep 1
  read -r a0 t0 < <(cpu_ns "$pid")
  local w0; w0=$(date +%s%N)
  sleep "$(awk "BEGIN {print $DURATION - 1.5}")"
  read -r a1 t1 < <(cpu_ns "$pid")
  local w1; w1=$(date +%s%N)
  wait "$pid"
  local dps bps
  dps=$(grep -m1 -oE '"decisions_per_sec": ?[0-9.e+-]+' "$tmp/out" | grep -oE '[0-9.e+-]+$' || echo 0)
  bps=$(grep -m1 -oE '"throughput_bps": ?[0-9.e+-]+' "$tmp/out" | grep -oE '[0-9.e+-]+$' || echo 0)
  awk -v a=$((a1 - a0)) -v t=$((t1 - t0)) -v w=$((w1 - w0)) -v d="$dps" -v b="$bps" \
    'BEGIN {print a / w, t / w, d / 1e6, b / 1e3}'
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "pinning: the bench pins the arbiter to core 0 and the client to core 1"
for r in $(seq "$RUNS"); do
  for rate in "${rates[@]}"; do
    for i in "${!bins[@]}"; do
      one_run "${bins[$i]}" "$rate" >> "$tmp/res.$i.$rate"
      echo "run $r/$RUNS ${bins[$i]} $rate: $(tail -1 "$tmp/res.$i.$rate")" >&2
    done
  done
done
printf '%-40s %-10s %16s %16s %14s %16s\n' binary rate arbiter_cpu_% process_cpu_% decisions_M/s shaped_kbit/s
for i in "${!bins[@]}"; do
  for rate in "${rates[@]}"; do
    f="$tmp/res.$i.$rate"
    printf '%-40s %-10s %16.2f %16.2f %14.2f %16.2f\n' "${bins[$i]}" "$rate" \
      "$(awk '{print $1*100}' "$f" | median)" "$(awk '{print $2*100}' "$f" | median)" \
      "$(awk '{print $3}' "$f" | median)" "$(awk '{print $4}' "$f" | median)"
  done
done
