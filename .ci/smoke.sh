#!/usr/bin/env bash
# Short end-to-end runs of the CLI: every command works, bad input exits 2 with
# one line naming the flag. Not a benchmark: durations are tiny.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p pspat-cli
bin=target/release/pspat

"$bin" bench --mode pspat,lock,none --clients 4 --duration 300ms --json > /dev/null
"$bin" bench --rate 1Mbit/s --duration 0.3 --delta-a 2us > /dev/null
"$bin" bench --clients 8 --tx-mode client --duration 0.3 > /dev/null
"$bin" demo --duration 1 > /dev/null
# The measurement script of BENCHMARKS section 3 (which core limits), one tiny round.
RUNS=1 DURATION=2 CLIENTS="1 8" bash scripts/clients-cpu.sh "$bin" > target/smoke-clients-cpu.txt
grep -q "M decisions/s" target/smoke-clients-cpu.txt
"$bin" sched-bench --alg qfq --flowsets 1:60:64 --iterations 100000 --repeat 1 --json > /dev/null
"$bin" sched-bench --sweep --iterations 20000 --repeat 1 > /dev/null
"$bin" sched-bench --alg qfq --flowsets 1:60:1024 --dummynet --delay 10us --iterations 100000 --repeat 1 --json > /dev/null
for part in classifier pipe; do
  "$bin" sched-bench --alg qfq --flowsets 1:60:1024 --dummynet --dummynet-part "$part" --iterations 100000 --repeat 1 --json > /dev/null
done
"$bin" wfi --workload paper --flows 25 --alg qfq --json > /dev/null
"$bin" wfi --workload victim --alg drr --duration 5ms --trace target/smoke-trace.csv > /dev/null
head -1 target/smoke-trace.csv | grep -qx 'flow,weight,len,arrival_ns,departure_ns,fluid_finish_ns'
"$bin" pq-bench --ranks 1000 --ops 10000 --repeat 1 --json > /dev/null
cfgdir=target/smoke-configs
mkdir -p "$cfgdir"
echo '{"alg": "wf2q+"}' > "$cfgdir/wf2q.json"
echo '{"alg": "shaped-drr", "eiffel": {"rate_bps": 1000000000}}' > "$cfgdir/shaped.json"
echo '{"alg": "shaped-drr", "eiffel": {"rate_bps": -5}}' > "$cfgdir/negative-rate.json"
echo '{"alg": "srpt", "eiffel": {"deadline_ns": -1}}' > "$cfgdir/negative-deadline.json"
echo '{"alg": "drr", "quantum": 1500}' > "$cfgdir/unknown-field.json"
echo '{"alg": "htb", "hierarchy": {"nodes": [{"name": "root", "rate_bps": 0}]}}' > "$cfgdir/zero-rate.json"
echo '{"alg": "drr", "capacity": 0}' > "$cfgdir/zero-capacity.json"
echo '[]' > "$cfgdir/array.json"
echo '["fifo", 1]' > "$cfgdir/positional.json"
echo '{"alg":"fifo"} this is not JSON at all !!!' > "$cfgdir/trailing.json"
printf '{"alg": "%s"}' "$(head -c 1000000 /dev/zero | tr '\0' a)" > "$cfgdir/huge-value.json"
echo '{"alg": "drr", "capacity": 1073741823}' > "$cfgdir/max-capacity.json"
"$bin" demo --sched-config "$cfgdir/wf2q.json" --duration 0.5 > /dev/null
"$bin" bench --sched-config "$cfgdir/shaped.json" --clients 2 --duration 0.3 > /dev/null

fails=0
expect_usage_error() {
  local out code
  set +e
  out=$("$bin" "$@" 2>&1 >/dev/null)
  code=$?
  set -e
  local lines
  lines=$(printf '%s\n' "$out" | grep -c . || true)
  if [ "$code" -ne 2 ] || [ "$lines" -ne 1 ]; then
    echo "FAIL: pspat $* -> exit $code, $lines lines: $out"
    fails=$((fails + 1))
  else
    echo "ok: pspat $* -> $out"
  fi
}
expect_usage_error bench --clients 0
expect_usage_error bench --clients 1001
expect_usage_error bench --alg nope
expect_usage_error bench --rate 0
expect_usage_error bench --pkt-len 0
expect_usage_error bench --wake-batch 0
expect_usage_error bench --max-wake-delay 200ms
expect_usage_error bench --pkt-len 65536
expect_usage_error bench --weights 1,x
expect_usage_error bench --weights 0
expect_usage_error bench --mode fast
expect_usage_error bench --clients abc
expect_usage_error demo --rate 0
expect_usage_error demo --victim-pps 0
expect_usage_error sched-bench --alg nope
expect_usage_error sched-bench --flowsets ''
expect_usage_error sched-bench --flowsets 0:60:10
expect_usage_error sched-bench --flowsets 1:70000:10
expect_usage_error sched-bench --flowsets 1:60
expect_usage_error wfi --weights 0,0
expect_usage_error wfi --rate 0
expect_usage_error wfi --workload nope
expect_usage_error pq-bench --ranks 0
expect_usage_error pq-bench --queue nope
expect_usage_error demo --sched-config "$cfgdir/negative-rate.json"
expect_usage_error bench --sched-config "$cfgdir/negative-deadline.json"
expect_usage_error bench --sched-config "$cfgdir/unknown-field.json"
expect_usage_error demo --sched-config "$cfgdir/zero-rate.json"
expect_usage_error demo --sched-config "$cfgdir/zero-capacity.json"
expect_usage_error demo --sched-config "$cfgdir/missing.json"
expect_usage_error demo --sched-config "$cfgdir/wf2q.json" --alg drr
# place-bench: one tiny run (sweep and a given topology) and bad input.
"$bin" place-bench --targets 2,3 --flows 500 --packets 2000 --decisions 1000 --repeat 1 --runtime-dispatchers 2 --runtime-packets 20000 --json > target/smoke-place.json
grep -q '"schema_version":1' target/smoke-place.json
# The runtime part ran every placement; only round robin may reorder.
python3 - target/smoke-place.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["runtime"]
assert [r["variant"] for r in rows] == ["modulo", "hrw", "ahrw", "round-robin"], rows
assert all(r["packets"] == 20000 for r in rows), rows
assert all(r["reorders"] == 0 for r in rows if r["variant"] != "round-robin"), rows
PY
echo '{"cpus": [{"cpu": 0, "package": 0, "l2": 0}, {"cpu": 1, "package": 0, "l2": 0}]}' > "$cfgdir/topo2.json"
echo '[[1, 2], [2, 1]]' > "$cfgdir/cost2.json"
echo '[[1, 2, 2], [2, 1, 2], [2, 2, 1]]' > "$cfgdir/cost3.json"
echo '[[1, 0.5], [2, 1]]' > "$cfgdir/cost-below-one.json"
echo '{"cpus": [{"cpu": 0, "package": "zero"}]}' > "$cfgdir/topo-bad.json"
"$bin" place-bench --targets 2 --flows 200 --packets 500 --decisions 100 --repeat 1 --topology "$cfgdir/topo2.json" --cost-matrix "$cfgdir/cost2.json" > /dev/null
expect_usage_error place-bench --targets 0
expect_usage_error place-bench --runtime-dispatchers 65
expect_usage_error place-bench --runtime-tx-ns 100001
expect_usage_error place-bench --weights 1,0
expect_usage_error place-bench --weights 1,-3
expect_usage_error place-bench --weights nan
expect_usage_error place-bench --topology "$cfgdir/topo2.json" --cost-matrix "$cfgdir/cost3.json"
expect_usage_error place-bench --topology "$cfgdir/topo2.json" --cost-matrix "$cfgdir/cost-below-one.json"
expect_usage_error place-bench --topology "$cfgdir/topo-bad.json"
printf '[[cpus]]\ncpu = 0\npackage = 0\n\n[[cpus]]\ncpu = 1\npackage = 1\n' > "$cfgdir/topo2.toml"
printf '[[cpus]]\ncpu = 0\npackage = zero\n' > "$cfgdir/topo-bad.toml"
"$bin" place-bench --targets 2 --flows 200 --packets 500 --decisions 100 --repeat 1 --topology "$cfgdir/topo2.toml" > /dev/null
expect_usage_error place-bench --topology "$cfgdir/topo-bad.toml"
"$bin" machine --quick --json > target/smoke-machine.json
python3 - target/smoke-machine.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["command"] == "machine", m["command"]
w = m["wake_up"]
assert w is not None and w["wake_ups"] == 100 and w["timed_sleep_cpu_us"] > 0, w
assert m["latency"]["points"], "no latency points"
PY
expect_usage_error demo --sched-config "$cfgdir/array.json"
expect_usage_error demo --sched-config "$cfgdir/positional.json"
expect_usage_error bench --sched-config "$cfgdir/trailing.json"
expect_usage_error bench --sched-config "$cfgdir/huge-value.json"
expect_usage_error bench --clients -1
expect_usage_error bench --duration -1
expect_usage_error pq-bench --ranks -5
expect_usage_error wfi --flows -3
expect_usage_error bench --clients ''
expect_usage_error bench --duration ''
expect_usage_error demo --rate ''
expect_usage_error wfi --duration 11s
expect_usage_error bench --delta-a 5ms
expect_usage_error bench --mode pspat,pspat
expect_usage_error wfi --trace /nonexistent-pspat-dir/trace.csv
huge="$(head -c 100000 /dev/zero | tr '\0' 9)x"
expect_usage_error bench --rate "$huge"
expect_usage_error bench --weights "1,$huge"
expect_usage_error sched-bench --flowsets "$huge"
# A huge value is quoted by a short prefix: the message stays one short line.
for args in "bench --rate" "sched-bench --flowsets" "bench --clients"; do
  # shellcheck disable=SC2086
  len=$("$bin" $args "$huge" 2>&1 >/dev/null | wc -c || true)
  if [ "$len" -gt 400 ]; then
    echo "FAIL: pspat $args <100 kB value> -> a $len-byte message"
    fails=$((fails + 1))
  fi
done
len=$("$bin" bench --sched-config "$cfgdir/huge-value.json" 2>&1 >/dev/null | wc -c || true)
[ "$len" -le 400 ] || { echo "FAIL: a 1 MB config value -> a $len-byte message"; fails=$((fails + 1)); }
# tc-netem's options as a pipe: the output is a configuration that checks.
"$bin" config from-netem tc qdisc add dev eth0 root netem delay 100ms 10ms 25% loss 0.3% rate 10mbit > "$cfgdir/from-netem.ipfw"
"$bin" config check "$cfgdir/from-netem.ipfw" > /dev/null
# A correlated loss becomes the two-state chain with its rate and correlation.
"$bin" config from-netem delay 10ms loss 1% 25% > "$cfgdir/from-netem-gemodel.ipfw"
grep -q "gemodel 0.0075 0.7425 1 0" "$cfgdir/from-netem-gemodel.ipfw" || {
  echo "FAIL: from-netem loss 1% 25% -> $(cat "$cfgdir/from-netem-gemodel.ipfw")"
  fails=$((fails + 1))
}
"$bin" config check "$cfgdir/from-netem-gemodel.ipfw" > /dev/null
"$bin" config from-netem --to toml delay 40ms 5ms distribution normal loss gemodel 1% > "$cfgdir/from-netem.toml"
"$bin" config check "$cfgdir/from-netem.toml" > /dev/null
expect_usage_error config from-netem delay 10ms loss 1% 100%
# A correlated reordering (tc-netem(8)'s example) keeps its correlation.
"$bin" config from-netem delay 10ms reorder 25% 50% > "$cfgdir/from-netem-reorder.ipfw"
grep -q "reorder 0.25 0.5" "$cfgdir/from-netem-reorder.ipfw" || {
  echo "FAIL: from-netem reorder 25% 50% -> $(cat "$cfgdir/from-netem-reorder.ipfw")"
  fails=$((fails + 1))
}
"$bin" config check "$cfgdir/from-netem-reorder.ipfw" > /dev/null
expect_usage_error config from-netem delay 10ms duplicate 1% 100%
expect_usage_error config from-netem delay 10
# tc-netem's ecn marks what its loss would drop: lossecn with the loss, refused without one.
"$bin" config from-netem delay 10ms loss 1% ecn > "$cfgdir/from-netem-ecn.ipfw"
grep -q "plr 0.01 lossecn" "$cfgdir/from-netem-ecn.ipfw" || {
  echo "FAIL: from-netem loss 1% ecn -> $(cat "$cfgdir/from-netem-ecn.ipfw")"
  fails=$((fails + 1))
}
"$bin" config check "$cfgdir/from-netem-ecn.ipfw" > /dev/null
expect_usage_error config from-netem delay 10ms ecn
# dummynet's codel: defaults filled in and printed; converts to TOML and checks there; a zero target exits 2.
printf 'pipe 1 config bw 10Mbit/s codel\nqueue 2 config pipe 1 codel ecn target 2ms\n' > "$cfgdir/codel.ipfw"
"$bin" config check "$cfgdir/codel.ipfw" | grep -q "pipe 1 config bw 10Mbit/s codel target 5ms interval 100ms" || {
  echo "FAIL: config check codel.ipfw -> $("$bin" config check "$cfgdir/codel.ipfw" 2>&1)"
  fails=$((fails + 1))
}
"$bin" config convert "$cfgdir/codel.ipfw" --to toml > "$cfgdir/codel.toml"
grep -q 'codel = { target = "2ms", interval = "100ms", ecn = true }' "$cfgdir/codel.toml" || {
  echo "FAIL: config convert codel.ipfw --to toml -> $(cat "$cfgdir/codel.toml")"
  fails=$((fails + 1))
}
"$bin" config check "$cfgdir/codel.toml" > /dev/null
printf 'pipe 1 config bw 10Mbit/s codel target 0ms\n' > "$cfgdir/codel-zero.ipfw"
expect_usage_error config check "$cfgdir/codel-zero.ipfw"
# dummynet's fq_codel sched type: every parameter printed; to TOML with its table and back; its flowset
# lowered in the plan; a quantum of 0 exits 2.
printf 'ipfw sched 1 config type fq_codel target 2ms flows 256 bw 10Mbit/s\nqueue 1 config sched 1\n' > "$cfgdir/fq-codel.ipfw"
"$bin" config check "$cfgdir/fq-codel.ipfw" | grep -q "sched 1 config type fq_codel target 2ms interval 100ms ecn quantum 1514 limit 10240 flows 256 bw 10Mbit/s" || {
  echo "FAIL: config check fq-codel.ipfw -> $("$bin" config check "$cfgdir/fq-codel.ipfw" 2>&1)"
  fails=$((fails + 1))
}
"$bin" config convert "$cfgdir/fq-codel.ipfw" --to toml > "$cfgdir/fq-codel.toml"
grep -q 'fq_codel = { target = "2ms", interval = "100ms", ecn = true, quantum = 1514, limit = 10240, flows = 256 }' "$cfgdir/fq-codel.toml" || {
  echo "FAIL: config convert fq-codel.ipfw --to toml -> $(cat "$cfgdir/fq-codel.toml")"
  fails=$((fails + 1))
}
"$bin" config check "$cfgdir/fq-codel.toml" > /dev/null
"$bin" config check --json "$cfgdir/fq-codel.ipfw" > "$cfgdir/fq-codel.json"
grep -q '"target_us": 2000' "$cfgdir/fq-codel.json" || {
  echo "FAIL: config check --json fq-codel.ipfw has no lowered CoDel"
  fails=$((fails + 1))
}
# dummynet's pie and fq_pie: every parameter printed; to TOML and back; lowered in the plan; a value out of
# range and pie with codel exit 2.
printf 'sched 1 config type fq_pie target 10ms flows 256 bw 10Mbit/s\nqueue 1 config sched 1\npipe 2 config bw 1Mbit/s pie ts\n' > "$cfgdir/fq-pie.ipfw"
"$bin" config check "$cfgdir/fq-pie.ipfw" | grep -q "sched 1 config type fq_pie target 10ms tupdate 15ms alpha 0.125 beta 1.25 max_burst 150ms max_ecnth 0.1 ecn capdrop derand noonoff ts quantum 1514 limit 10240 flows 256 bw 10Mbit/s" || {
  echo "FAIL: config check fq-pie.ipfw -> $("$bin" config check "$cfgdir/fq-pie.ipfw" 2>&1)"
  fails=$((fails + 1))
}
"$bin" config check "$cfgdir/fq-pie.ipfw" | grep -q "pipe 2 config bw 1Mbit/s pie target 15ms tupdate 15ms alpha 0.125 beta 1.25 max_burst 150ms max_ecnth 0.1 noecn capdrop derand noonoff ts" || {
  echo "FAIL: config check fq-pie.ipfw (pipe 2) -> $("$bin" config check "$cfgdir/fq-pie.ipfw" 2>&1)"
  fails=$((fails + 1))
}
"$bin" config convert "$cfgdir/fq-pie.ipfw" --to toml > "$cfgdir/fq-pie.toml"
grep -q 'fq_pie = { target = "10ms", tupdate = "15ms", alpha = 0.125, beta = 1.25, max_burst = "150ms", max_ecnth = 0.1, ecn = true, capdrop = true, derand = true, onoff = false, estimator = "ts", quantum = 1514, limit = 10240, flows = 256 }' "$cfgdir/fq-pie.toml" || {
  echo "FAIL: config convert fq-pie.ipfw --to toml -> $(cat "$cfgdir/fq-pie.toml")"
  fails=$((fails + 1))
}
"$bin" config check "$cfgdir/fq-pie.toml" > /dev/null
"$bin" config check --json "$cfgdir/fq-pie.ipfw" > "$cfgdir/fq-pie.json"
grep -q '"tupdate_us": 15000' "$cfgdir/fq-pie.json" || {
  echo "FAIL: config check --json fq-pie.ipfw has no lowered PIE"
  fails=$((fails + 1))
}
printf 'pipe 1 config bw 10Mbit/s pie alpha 8\n' > "$cfgdir/pie-alpha.ipfw"
expect_usage_error config check "$cfgdir/pie-alpha.ipfw"
printf 'pipe 1 config bw 10Mbit/s codel pie\n' > "$cfgdir/pie-codel.ipfw"
expect_usage_error config check "$cfgdir/pie-codel.ipfw"
printf 'sched 1 config type fq_codel quantum 0\nqueue 1 config sched 1\n' > "$cfgdir/fq-codel-zero.ipfw"
expect_usage_error config check "$cfgdir/fq-codel-zero.ipfw"
expect_usage_error config from-netem --pipe 0 delay 10ms
# The documented maximum capacity needs about 18 GiB: refused where that is more than half of the memory.
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null || echo 0)
if [ "${avail_kb:-0}" -gt 0 ] && [ "$avail_kb" -lt $((36 * 1024 * 1024)) ]; then
  expect_usage_error demo --sched-config "$cfgdir/max-capacity.json"
  expect_usage_error bench --sched-config "$cfgdir/max-capacity.json"
  expect_usage_error sched-bench --qmax 1000M --flowsets 1::1
else
  echo "skip: over-memory checks (this machine has $((avail_kb / 1024 / 1024)) GiB available)"
fi
[ "$fails" -eq 0 ] || { echo "$fails bad-input checks failed"; exit 1; }
