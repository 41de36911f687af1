#!/usr/bin/env bash
# How close `pspat shape` keeps a greedy flow to its configured rate, in the
# lab's namespaces, at 10 Mbit/s, 100 Mbit/s and 1 Gbit/s (RATES).
#
#   sudo scripts/shape-accuracy.sh [BIN]      (default: target/release/pspat)
#
# Per rate and round: `pspat lab up --mode pspat`, then `pspat shape --in
# pspat-shin --out pspat-shout --rate RATE` (DRR, one flow), SENDERS (default
# 2) sender threads of SIZE-byte frames (default 1514) offering together OFFER
# times the rate (default 1.5: a backlog always waits, without the senders
# taking the cores a greedy sender would) for DURATION seconds (default 6).
# Over the steady window (from 2 s after the first packet, DURATION − 3 s
# long), in bit/s of frames without FCS, the unit `--rate` charges: what the
# shaper sent (its output interface's tx_bytes counter: the shaped rate) and
# what the receiver got (less when the receiver, sharing a core with the
# senders, misses some). Prints every run, then per rate the medians, the
# shaped rate's error against the configured one and whether it is within
# 0.5%; the senders' own rate is printed too, so a sender that cannot offer
# the rate is seen. RUNS rounds (default 5), rates alternated; SHAPE_ARGS adds flags to
# `pspat shape` (e.g. "--tx ring", or "--arbiter-cpu 0 --rx-cpus 0
# --dispatchers 0" for the whole shaper on CPU 0); TRAFFIC_CPU pins the
# senders and the receiver to that CPU (default: unpinned). The lab is
# removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/pspat}
RUNS=${RUNS:-5}
RATES=${RATES:-"10M 100M 1G"}
SENDERS=${SENDERS:-2}
SIZE=${SIZE:-1514}
SENT_FOR=${DURATION:-6}
TRAFFIC_PIN=()
[ -n "${TRAFFIC_CPU:-}" ] && TRAFFIC_PIN=(--cpu "$TRAFFIC_CPU")
OFFER=${OFFER:-1.5}
[ "$(id -u)" = 0 ] || { echo "shape-accuracy: needs root (network namespaces)" >&2; exit 2; }
[ "$SENT_FOR" -ge 4 ] || { echo "shape-accuracy: DURATION must be at least 4 (seconds)" >&2; exit 2; }
tmp=$(mktemp -d)
cleanup() { "$BIN" lab down >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
"$BIN" lab up --mode pspat >/dev/null

bits() { # 10M -> 10000000
  awk -v r="$1" 'BEGIN { m = 1; u = substr(r, length(r)); n = r
    if (u == "k" || u == "K") m = 1e3; else if (u == "M") m = 1e6; else if (u == "G") m = 1e9
    if (m > 1) n = substr(r, 1, length(r) - 1); printf "%.0f", n * m }'
}

one_run() { # rate -> "received_bps offered_bps"
  local rate=$1 shaper recv span=$((SENT_FOR - 3))
  ip netns exec pspat-lab-shp "$BIN" shape --in pspat-shin --out pspat-shout --rate "$rate" --alg drr \
    --flows 1 ${SHAPE_ARGS:-} --json > "$tmp/shaper.out" 2> "$tmp/shaper.err" &
  shaper=$!
  for _ in $(seq 100); do grep -q 'ready' "$tmp/shaper.err" 2>/dev/null && break; sleep 0.1; done
  ip netns exec pspat-lab-rcv "$BIN" traffic recv --flows 1 --duration "$((SENT_FOR + 1))s" \
    --steady-skip 2s --steady-span "${span}s" "${TRAFFIC_PIN[@]}" --json > "$tmp/recv.json" 2>/dev/null &
  recv=$!
  # The shaper's output, read from its interface's counter over the same
  # window: frame bytes without FCS, the unit --rate charges.
  ip netns exec pspat-lab-shp python3 -c '
import sys, time
def read():
    with open("/sys/class/net/pspat-shout/statistics/tx_bytes") as f:
        return time.monotonic(), int(f.read())
time.sleep(0.3 + 2.0)
t0, b0 = read()
time.sleep(float(sys.argv[1]))
t1, b1 = read()
print((b1 - b0) * 8 / (t1 - t0))' "$span" > "$tmp/egress" 2>/dev/null &
  egress=$!
  sleep 0.3
  ip netns exec pspat-lab-snd "$BIN" traffic send --flows 1 --threads "$SENDERS" --size "$SIZE" \
    --rate "$(awk -v b="$(bits "$rate")" -v o="$OFFER" 'BEGIN { printf "%.0f", b * o }')" --duration "${SENT_FOR}s" "${TRAFFIC_PIN[@]}" --json > "$tmp/send.json" 2>/dev/null
  wait "$recv"
  wait "$egress" || true
  kill -INT "$shaper"; wait "$shaper" || true
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))
steady = r["flows"][0]["steady_bytes"] * 8 / r["steady_s"]
egress = open(sys.argv[3]).read().strip() or "0"
print(egress, steady, s.get("bps") or 0)' "$tmp/recv.json" "$tmp/send.json" "$tmp/egress"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "shape-accuracy: $RUNS rounds of $RATES, $SENDERS senders of ${SIZE}-byte frames offering ${OFFER}x the rate, ${SENT_FOR}s each" >&2
for r in $(seq "$RUNS"); do
  for rate in $RATES; do
    read -r sent got offered < <(one_run "$rate")
    echo "$sent" >> "$tmp/sent.$rate"
    echo "$got" >> "$tmp/got.$rate"
    printf 'round %d %-5s shaped %14.0f bit/s  received %14.0f bit/s (senders offered %14.0f)\n' "$r" "$rate" "$sent" "$got" "$offered"
  done
done
for rate in $RATES; do
  want=$(bits "$rate"); sent=$(median < "$tmp/sent.$rate"); got=$(median < "$tmp/got.$rate")
  awk -v w="$want" -v s="$sent" -v g="$got" -v r="$rate" 'BEGIN { e = 100 * (s - w) / w
    printf "%-5s median shaped %14.0f bit/s  error %+.3f%%  %s  (received %14.0f bit/s, %+.3f%%)\n", r, s, e, (e < 0.5 && e > -0.5) ? "within 0.5%" : "NOT within 0.5%", g, 100 * (g - w) / w }'
done
