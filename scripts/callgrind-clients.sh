#!/usr/bin/env bash
# Instructions and simulated cache misses per decision of the threaded
# runtime (`pspat bench --mode pspat`), by part, at several client counts:
# a repeatable second figure for the 1000-client question of
# docs/BENCHMARKS.md (section 3), whose wall-time figures spread by half
# from run to run on a shared guest.
#
# Usage: scripts/callgrind-clients.sh [PSPAT_BINARY...]
#                                      (default target/release/pspat, built if missing)
# With several binaries (builds of two commits, say) each runs every client
# count, and a last table sets each one's named parts (set-up left out)
# against the first's: the runtime's counterpart of scripts/callgrind.sh.
# The same binary given twice agreed to within 0.2% (1 and 4 clients,
# DURATION=1, 2026-11-28).
# Environment: CLIENTS (default "1 1000"), DURATION (bench seconds, default 2),
# LL (the simulated last-level cache as SIZE,WAYS,LINE; default 3145728,12,64,
# the roughly 3 MiB a small-L3 guest gives one process), BENCH_ARGS (more
# arguments for `pspat bench`, e.g. "--alg qfq").
#
# What it measures: `valgrind --tool=callgrind --cache-sim=yes` runs the
# whole process; every instruction and every simulated miss of the first
# level (32 KiB) and of the last level (LL) is attributed to the function it
# ran in, the functions are grouped into the parts below, and each part is
# divided by the run's decisions (transmitted packets). valgrind runs one
# thread at a time and simulates one cache for all of them, so the misses
# model a single core's caches shared by the arbiter and its clients, not
# the two-core layout of a real run; compare client counts with each other,
# not with a wall-time run. A run is repeatable to about 1% (two 1-client
# runs, 2026-11-28). A 1000-client run takes two to three minutes: under
# valgrind its clients spend most of it in the warm-up, whose decisions count
# like the others.
#
# Needs valgrind (installed with apt-get when running as root on Debian, as
# scripts/callgrind.sh does) and python3.
set -euo pipefail
# Binaries named on the command line are relative to the caller's directory.
bins=()
for b in "$@"; do
  bins+=("$(realpath -m -- "$b")")
done
cd "$(dirname "$0")/.."
if [ "${#bins[@]}" -eq 0 ]; then
  bins=(target/release/pspat)
fi

clients=${CLIENTS:-"1 1000"}
duration=${DURATION:-2}
ll=${LL:-3145728,12,64}
read -r -a bench_args <<< "${BENCH_ARGS:-}"

. scripts/lib/need-valgrind.sh

for bin in "${bins[@]}"; do
  if [ ! -x "$bin" ]; then
    if [ "$bin" = target/release/pspat ]; then
      cargo build --release --quiet -p pspat-cli
    else
      echo "callgrind-clients.sh: $bin is not an executable" >&2
      exit 2
    fi
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pspat-callgrind-clients.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "workload: pspat bench --clients N --duration $duration ${BENCH_ARGS:-} under callgrind, simulated LL $ll (size,ways,line)"
runs=()
for k in "${!bins[@]}"; do
  bin=${bins[$k]}
  for n in $clients; do
    echo "== $bin, $n clients" >&2
    threads=$((n + 64))
    valgrind --tool=callgrind --cache-sim=yes --LL="$ll" --max-threads="$threads" \
      --callgrind-out-file="$tmp/cg.$k.$n" \
      "$bin" bench --mode pspat --clients "$n" --duration "$duration" "${bench_args[@]}" --json \
      > "$tmp/bench.$k.$n.json" 2> "$tmp/err.$k.$n" || {
      echo "callgrind-clients.sh: $bin bench --clients $n failed under valgrind:" >&2
      tail -5 "$tmp/err.$k.$n" >&2
      exit 1
    }
    callgrind_annotate --show=Ir,D1mr,D1mw,DLmr,DLmw --auto=no --threshold=100 "$tmp/cg.$k.$n" \
      > "$tmp/annotate.$k.$n" 2> /dev/null
    runs+=("$k.$n=$bin")
  done
done

python3 - "$tmp" "${runs[@]}" << 'EOF'
import json
import re
import sys

tmp = sys.argv[1]
# Each run as "BINARY_INDEX.CLIENTS=BINARY_PATH", in the order they ran.
runs = [tuple(a.split("=", 1)) for a in sys.argv[2:]]

# Parts, by the function a cost was attributed to (inlined code counts in
# its caller). The arbiter's thread loop inlines its round and the
# scheduler; the clients' loop in the benchmark inlines little besides.
PARTS = [
    ("arbiter: collect", re.compile(r"Arbiter<S,B>>::collect")),
    ("arbiter: hand-off, flush, recycling", re.compile(r"Sink<B>::(hand_off|flush)|Recycler::")),
    ("scheduler (DRR pop)", re.compile(r"drr::Drr::")),
    ("thread loops (round, DRR inlined)", re.compile(r"__rust_begin_short_backtrace")),
    ("clients: submit, descriptors", re.compile(r"Client<B>::submit|FreeDescriptors::")),
    ("clock reads", re.compile(r"Timespec|clock_gettime")),
    ("yield and park", re.compile(r"sched_yield|futex|park")),
]
COLUMN = r"([\d,]+|\.)(?:\s+\(\s*[\d.]+%\))?\s+"
LINE = re.compile(r"^\s*" + COLUMN * 5 + r"(\S+?):(.*?)(\s\[.*\])?$")

tables = {}
for run, path in runs:
    n = run.split(".", 1)[1]
    report = json.load(open(f"{tmp}/bench.{run}.json"))["runs"][0]
    decisions = report["transmitted"]
    sums = {name: [0] * 3 for name, _ in PARTS}
    sums["the rest"] = [0] * 3
    total = [0] * 3
    for line in open(f"{tmp}/annotate.{run}"):
        m = LINE.match(line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        ir, d1r, d1w, llr, llw = (0 if v == "." else int(v.replace(",", "")) for v in m.groups()[:5])
        cost = (ir, d1r + d1w, llr + llw)
        name = next((p for p, rx in PARTS if rx.search(m.group(7))), "the rest")
        for i, c in enumerate(cost):
            sums[name][i] += c
            total[i] += c
    tables[run] = (path, n, decisions, sums, total)

for path, n, decisions, sums, total in tables.values():
    print(f"\n{path}, {n} clients: {decisions} decisions")
    print(f"{'part':<38} {'instr/dec':>10} {'L1 miss/dec':>12} {'LL miss/dec':>12}")
    for name, (ir, d1, ll) in sums.items():
        print(f"{name:<38} {ir / decisions:>10.1f} {d1 / decisions:>12.3f} {ll / decisions:>12.3f}")
    ir, d1, ll = total
    print(f"{'whole process':<38} {ir / decisions:>10.1f} {d1 / decisions:>12.3f} {ll / decisions:>12.3f}")

# More runs than client counts: more than one binary.
if len(tables) > len({n for _, n, *_ in tables.values()}):
    # The named parts only: "the rest" holds the set-up (thread starts,
    # zeroed pools), spread over however many decisions a run made.
    print("\nthe named parts per decision (the rest left out), against the first binary at the same client count")
    print(f"{'clients':>7} {'instr/dec':>10} {'ratio':>7} {'LL miss/dec':>12}  binary")
    first = {}
    for path, n, decisions, sums, _ in tables.values():
        parts = [v for name, v in sums.items() if name != "the rest"]
        per = sum(v[0] for v in parts) / decisions
        ll = sum(v[2] for v in parts) / decisions
        base = first.setdefault(n, per)
        print(f"{n:>7} {per:>10.1f} {per / base:>7.3f} {ll:>12.3f}  {path}")
EOF
