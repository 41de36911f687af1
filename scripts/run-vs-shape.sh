#!/usr/bin/env bash
# Forwarding rate of the daemon (`pspat run`) against the bare bridge
# (`pspat shape`) on the same traffic, alternated, in the lab's namespaces.
#
#   sudo scripts/run-vs-shape.sh [BIN]      (default: target/release/pspat)
#
# The lab (`pspat lab up --mode pspat`: sender, shaper and receiver
# namespaces, addresses in 10.199.100.0/24) carries greedy 60-byte UDP frames
# of FLOWS flows (default 4) from SENDERS sender threads (default 2) for
# DURATION seconds (default 4) through, in turn,
#   shape: pspat shape --in pspat-shin --out pspat-shout --rate RATE --alg drr
#          --flows FLOWS --flow-key dst-port --queue-limit QUEUE/FLOWS
#   run:   pspat run CONF --in pspat-shin --out pspat-shout --no-control, CONF
#          being `pipe 1 config bw RATE queue QUEUE` and
#          `add 100 pipe 1 ip from any to any`
# (RATE default 10G: far above what the path forwards, so both forward as
# fast as they can; QUEUE default 256 packets held in all, as shape's default
# 64 per flow over 4 flows: dummynet's default pipe queue of 50 slots drops
# the RX thread's bursts at this rate), RUNS rounds (default 5). No thread is
# pinned in either.
# Prints the packets/s the receiver counted per run, the medians and the
# ratio run / shape. The lab is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/pspat}
RUNS=${RUNS:-5}
SECONDS_SENT=${DURATION:-4}
FLOWS=${FLOWS:-4}
SENDERS=${SENDERS:-2}
RATE=${RATE:-10G}
QUEUE=${QUEUE:-256}
[ "$(id -u)" = 0 ] || { echo "run-vs-shape: needs root (network namespaces)" >&2; exit 2; }
tmp=$(mktemp -d)
cleanup() { "$BIN" lab down >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
printf 'pipe 1 config bw %sbit/s queue %s\nadd 100 pipe 1 ip from any to any\n' "$RATE" "$QUEUE" > "$tmp/run.conf"
"$BIN" lab up --mode pspat >/dev/null

one_run() { # kind -> packets/s at the receiver
  local kind=$1 shaper
  case $kind in
    shape) ip netns exec pspat-lab-shp "$BIN" shape --in pspat-shin --out pspat-shout --rate "$RATE" \
             --alg drr --flows "$FLOWS" --flow-key dst-port --queue-limit "$((QUEUE / FLOWS))" --json > "$tmp/shaper.out" 2> "$tmp/shaper.err" & ;;
    run) ip netns exec pspat-lab-shp "$BIN" run "$tmp/run.conf" --in pspat-shin --out pspat-shout \
           --no-control --json > "$tmp/shaper.out" 2> "$tmp/shaper.err" & ;;
  esac
  shaper=$!
  # Ready once it says so on stderr.
  for _ in $(seq 100); do grep -q 'ready' "$tmp/shaper.err" 2>/dev/null && break; sleep 0.1; done
  ip netns exec pspat-lab-rcv "$BIN" traffic recv --flows "$FLOWS" --duration "$((SECONDS_SENT + 2))s" \
    --steady-skip 1s --steady-span "$((SECONDS_SENT - 2))s" --json > "$tmp/recv.json" 2>/dev/null &
  local recv=$!
  sleep 0.3
  ip netns exec pspat-lab-snd "$BIN" traffic send --flows "$FLOWS" --threads "$SENDERS" --size 60 \
    --duration "${SECONDS_SENT}s" --json > "$tmp/send.json"
  wait "$recv"
  kill -INT "$shaper"; wait "$shaper" || true
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["steady_pps"] or 0)' "$tmp/recv.json"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "run-vs-shape: $RUNS rounds, $FLOWS flows, $SENDERS senders, 60-byte frames, ${SECONDS_SENT}s each, no pinning" >&2
for r in $(seq "$RUNS"); do
  for kind in shape run; do
    pps=$(one_run "$kind")
    echo "$pps" >> "$tmp/$kind"
    printf 'round %d %-5s %12.0f packets/s\n' "$r" "$kind" "$pps"
  done
done
s=$(median < "$tmp/shape"); d=$(median < "$tmp/run")
printf 'median shape %.0f packets/s, run %.0f packets/s, run/shape %.3f\n' "$s" "$d" "$(awk -v a="$d" -v b="$s" 'BEGIN {print a / b}')"
