#!/usr/bin/env bash
# Runs every benchmark behind docs/BENCHMARKS.md on a quiet machine and keeps
# the raw JSON in bench-results/ (not committed). Each figure in BENCHMARKS.md
# names the exact command; this script is those commands in one place.
# Usage: scripts/bench-all.sh [DURATION_S] [REPEAT]
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-3}
rep=${2:-5}
out=bench-results
mkdir -p "$out"
cargo build --release -p pspat-cli
bin=target/release/pspat

# Issue "runtime": decisions/s with 1, 8, 64, 1000 clients; pspat vs lock vs none in the same run.
for n in 1 8 64 1000; do
  "$bin" bench --mode pspat,lock,none --clients "$n" --alg drr --pkt-len 60 \
    --duration "$dur" --repeat "$rep" --json > "$out/bench-drr-$n.json"
done
# Client-transmit mode.
"$bin" bench --mode pspat --clients 64 --tx-mode client --duration "$dur" --repeat "$rep" --json > "$out/bench-client-64.json"

# Mailbox against rtrb and crossbeam, cross-core, same run.
cargo run --release --manifest-path benches/comparison/Cargo.toml -- --json > "$out/mailbox-compare.json"
echo "results in $out/"
