#!/usr/bin/env bash
# Fuzzes pspat's parsers on the stable toolchain (fuzz/, outside the
# workspace): the --sched-config JSON, durations, rates, weight lists, mode
# lists, flowsets, the error-message guard, ipfw and TOML configurations,
# control lines and tc-netem options (targets ipfw, config_toml, control,
# netem), received frames
# (frame) and the classifier on a configuration and a packet sequence
# (classify). Every text target must never panic, print accepted input back
# to the same value, and refuse bad input with one short line (a
# configuration error naming its file, line and column); frame and classify
# check what their crates' docs promise (fuzz/src/lib.rs).
#   FUZZ_SECONDS  budget for all targets together (default 40; CI keeps the
#                 default, longer runs e.g. FUZZ_SECONDS=3600 bash .ci/fuzz.sh)
#   FUZZ_SEED     the generator's seed (default: the time; printed on failure)
# Extra arguments name the targets to run (default: all).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export FUZZ_SECONDS="${FUZZ_SECONDS:-40}"
# Debug build: overflow checks turn silent arithmetic bugs into findings.
cargo build --bin fuzz-driver
./target/debug/fuzz-driver "$@"
