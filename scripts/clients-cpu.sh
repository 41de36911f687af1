#!/usr/bin/env bash
# Which core limits the runtime as clients grow: CPU time per second of wall
# time of the arbiter thread and of all client threads together while
# `pspat bench --mode pspat --clients N --alg drr --pkt-len 60` runs, with
# the decisions/s of the same run. The bench pins the arbiter to core 0 and
# the clients to core 1 and says so; a share near 100% is the core that
# limits.
#
#   RUNS=5 DURATION=4 CLIENTS="1 1000" [BENCH_ARGS=...] scripts/clients-cpu.sh [BIN]
#
# BIN defaults to target/release/pspat; BENCH_ARGS adds flags to every run
# (for example --descriptors 256). CPU time comes from
# /proc/PID/task/*/schedstat (nanoseconds on CPU), read every DURATION/8
# seconds (at least 0.25 s) from 0.5 s after the start; the samples that
# span the middle half of the run are kept (DURATION at least 2). Prints one
# line per run and the medians per client count.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/pspat}
RUNS=${RUNS:-5} DURATION=${DURATION:-4} CLIENTS=${CLIENTS:-1 1000} BENCH_ARGS=${BENCH_ARGS:-} \
  exec python3 - "$bin" <<'EOF'
import json, os, statistics, subprocess, sys, tempfile, time

binary = sys.argv[1]
runs = int(os.environ["RUNS"])
duration = float(os.environ["DURATION"])
clients = os.environ["CLIENTS"].split()
extra = os.environ["BENCH_ARGS"].split()


def group_of(pid, tid, names):
    """The thread's group, its name read once (a thread keeps its name)."""
    if tid not in names:
        try:
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
        except (FileNotFoundError, ProcessLookupError):
            return None
        if name == "pspat-arbiter":
            names[tid] = "arbiter"
        elif name.startswith("pspat-bench-cli"):
            names[tid] = "clients"
        else:
            names[tid] = "other"
    return names[tid]


def sample(pid, names):
    """CPU ns per thread group: the arbiter, the clients, the rest."""
    groups = {"arbiter": 0, "clients": 0, "other": 0}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return None
    for t in tasks:
        try:
            ns = int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        g = group_of(pid, t, names)
        if g is not None:
            groups[g] += ns
    return groups


# A sample reads every thread's schedstat (1000 files at 1000 clients),
# on one of the two cores the run measures: a few samples a run, not four
# a second (that lowered 1000 clients' decisions/s by about a fifth on a
# 2-vCPU guest).
interval = max(0.25, duration / 8)
results = {n: [] for n in clients}
for r in range(1, runs + 1):
    for n in clients:
        cmd = [binary, "bench", "--mode", "pspat", "--clients", n, "--alg", "drr",
               "--pkt-len", "60", "--duration", str(duration), "--json", *extra]
        # The report goes to a file: with many clients it outgrows a pipe's
        # buffer, and the bench would wait on it while this loop samples.
        out = tempfile.TemporaryFile()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
        samples = []
        names = {}
        time.sleep(0.5)
        while p.poll() is None:
            s = sample(p.pid, names)
            if s is not None:
                samples.append((time.monotonic(), s))
            time.sleep(interval)
        p.wait()
        out.seek(0)
        doc = json.loads(out.read())
        run = doc["runs"][0]
        # The middle half of what was sampled: past the start-up and the
        # clients' warm-up, before the drain.
        k = len(samples)
        if k < 3:
            sys.exit(f"clients-cpu: a {duration} s run gave {k} samples; give DURATION=2 or more")
        a, b = samples[k // 4], samples[max(k // 4 + 1, 3 * k // 4)]
        wall = (b[0] - a[0]) * 1e9
        share = {g: 100.0 * (b[1][g] - a[1][g]) / wall for g in a[1]}
        rate = run["decisions_per_sec"] / 1e6
        results[n].append((rate, share["arbiter"], share["clients"]))
        print(f"run {r} clients {n:>5}: {rate:6.2f} M decisions/s, arbiter {share['arbiter']:5.1f}%, "
              f"clients {share['clients']:5.1f}% of a core; descriptors/client "
              f"{run['descriptors_per_client']}; {run['pinning']}", flush=True)

print()
print(f"{'clients':>7} {'M decisions/s':>14} {'arbiter %':>10} {'clients %':>10}")
for n in clients:
    xs = results[n]
    print(f"{n:>7} {statistics.median(x[0] for x in xs):14.2f} "
          f"{statistics.median(x[1] for x in xs):10.1f} {statistics.median(x[2] for x in xs):10.1f}")
EOF
