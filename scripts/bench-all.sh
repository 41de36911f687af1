#!/usr/bin/env bash
# Runs every benchmark behind docs/BENCHMARKS.md and keeps the raw output in
# bench-results/ (not committed). Run it on a quiet machine: the bench's
# clients yield when out of descriptors, so any other busy process on either
# core distorts the many-client figures. Each figure in BENCHMARKS.md names
# the exact command; this script is those commands in one place.
# Usage: scripts/bench-all.sh [DURATION_S] [REPEAT]
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-2}
rep=${2:-5}
out=bench-results
mkdir -p "$out"
cargo build --release -p pspat-cli
bin=target/release/pspat
log() { echo "== $*" >&2; }

# Issue 2: decisions/s with 1, 8, 64, 1000 clients; pspat vs lock vs none in the same run.
for n in 1 8 64 1000; do
  log "bench $n clients"
  "$bin" bench --mode pspat,lock,none --clients "$n" --alg drr --pkt-len 60 \
    --duration "$dur" --repeat "$rep" --json > "$out/bench-drr-$n.json"
done
log "client-transmit and one dispatcher, 64 clients"
"$bin" bench --mode pspat --clients 64 --tx-mode client --duration "$dur" --repeat 3 --json > "$out/bench-client-64.json"
"$bin" bench --mode pspat --clients 64 --dispatchers 1 --duration "$dur" --repeat 3 --json > "$out/bench-disp1-64.json"

# Issues 3 and 4 through the runtime: algorithms alternated run by run, five times (8 clients).
for r in 1 2 3 4 5; do
  for alg in drr qfq srpt; do
    log "bench --alg $alg run $r"
    "$bin" bench --mode pspat --clients 8 --alg "$alg" --duration "$dur" --json > "$out/bench-alg-$alg-$r.json"
  done
done

# Issue 3: algorithm cost alone.
for alg in fifo drr qfq qfq+ wf2q+; do
  log "sched-bench $alg 32k"
  "$bin" sched-bench --alg "$alg" --flowsets 1:60:32768 --repeat 5 --json > "$out/sched-$alg-32k.json"
done
"$bin" sched-bench --alg qfq --flowsets 1:60:64 --repeat 5 --json > "$out/sched-qfq-64.json"
log "sched-bench sweep"
"$bin" sched-bench --sweep --repeat 3 > "$out/sched-sweep.txt"

# Issue 4: priority queues and the hierarchy.
log "pq-bench 1M"
"$bin" pq-bench --ranks 1000000 --repeat 5 > "$out/pq-1m.txt"
"$bin" sched-bench --alg htb --flowsets 1:60:10000 --repeat 5 --json > "$out/sched-htb-10k.json"

# The demo, and its victim's latency under each fair-queueing algorithm.
for alg in drr qfq wf2q+; do
  log "demo --alg $alg"
  "$bin" demo --alg "$alg" --json > "$out/demo-$alg.json"
done

# Mailbox against rtrb and crossbeam, cross-core, same run.
log "mailbox-compare"
cargo run --release --manifest-path benches/comparison/Cargo.toml -- --json > "$out/mailbox-compare.json"
log "results in $out/"
