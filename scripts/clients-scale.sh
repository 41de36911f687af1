#!/usr/bin/env bash
# Runtime decisions/s as clients grow, two builds alternated run by run:
# `pspat bench --mode pspat,none --clients N --alg drr --pkt-len 60` for each
# N (the flows declare bench's default lmax, 1500 bytes, so DRR sends 25
# packets a visit; BENCH_ARGS="--lmax 60" for one), RUNS rounds, each round
# running BEFORE then AFTER once. Prints one line per run and, per build and
# client count, the median of each mode and the same-build ratios (N clients
# over 1 client, pspat over none).
# Usage: RUNS=5 DURATION=2 CLIENTS="1 64 1000" [BENCH_ARGS=...] scripts/clients-scale.sh BEFORE/pspat AFTER/pspat
set -euo pipefail
before=${1:?usage: $0 BEFORE_BINARY AFTER_BINARY}
after=${2:?usage: $0 BEFORE_BINARY AFTER_BINARY}
runs=${RUNS:-5}
dur=${DURATION:-2}
clients=${CLIENTS:-1 64 1000}
read -r -a extra <<< "${BENCH_ARGS:-}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$runs"); do
  for n in $clients; do
    for which in before after; do
      bin=$before
      [ "$which" = after ] && bin=$after
      f="$out/$which-$n-$r.json"
      "$bin" bench --mode pspat,none --clients "$n" --alg drr --pkt-len 60 --duration "$dur" "${extra[@]}" --json \
        > "$f" 2>/dev/null
      python3 - "$f" "$which" "$n" "$r" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for run in d["runs"]:
    silent = sum(1 for c in run["per_client"] if c["submitted"] == 0)
    print(f"run {sys.argv[4]} {sys.argv[2]:6} {sys.argv[3]:>5} clients {run['mode']:5} "
          f"{run['decisions_per_sec'] / 1e6:7.2f} M/s  clients that never submitted: {silent}")
EOF
    done
  done
done
python3 - "$out" "$clients" <<'EOF'
import glob, json, os, statistics, sys
out, clients = sys.argv[1], sys.argv[2].split()
med = {}
for which in ("before", "after"):
    for n in clients:
        for mode in ("pspat", "none"):
            xs = []
            for f in glob.glob(os.path.join(out, f"{which}-{n}-*.json")):
                for run in json.load(open(f))["runs"]:
                    if run["mode"] == mode:
                        xs.append(run["decisions_per_sec"] / 1e6)
            med[which, n, mode] = statistics.median(xs)
print()
print(f"{'build':6} {'clients':>7} {'pspat M/s':>10} {'none M/s':>9} {'pspat/none':>10} {'vs 1 client':>11}")
for which in ("before", "after"):
    for n in clients:
        p, z = med[which, n, "pspat"], med[which, n, "none"]
        one = med.get((which, "1", "pspat"))
        rel = f"{p / one:11.2f}" if one else f"{'-':>11}"
        print(f"{which:6} {n:>7} {p:10.2f} {z:9.2f} {p / z:10.2f} {rel}")
EOF
