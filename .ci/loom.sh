#!/usr/bin/env bash
# Model-checks the mailbox with loom: every interleaving of the models in
# crates/mailbox/tests/loom.rs (E = 8, Λ = 2), bounded to 2 preemptions.
# Builds in its own target dir so the normal build cache stays valid.
# Expected run time: about a minute on 2 cores, after the build.
set -euo pipefail
cd "$(dirname "$0")/.."

export RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/loom}"

cargo build --release -p pspat-mailbox --tests
start=$(date +%s)
cargo test --release -p pspat-mailbox --test tests -- --test-threads=1 "$@"
end=$(date +%s)
echo "loom: models passed in $((end - start)) s (LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS)"
