#!/usr/bin/env bash
# Model-checks the mailbox crate with loom, in two steps:
#   crates/mailbox/tests/loom.rs            the mailbox (E = 8, Λ = 2),
#     bounded to LOOM_MAX_PREEMPTIONS (default 2) preemptions;
#   crates/mailbox/tests/loom_handshakes.rs the client lists' retire
#     handshake, the parker's sleep/wake-up and descriptor recycling, on the
#     same tiny mailbox, bounded to LOOM_HANDSHAKES_PREEMPTIONS (default 4:
#     these models are small, so they afford the deeper search).
# Both files are modules of the one `tests` binary.
# Builds in its own target dir so the normal build cache stays valid.
# Expected run time after the build: seconds per step on 2 cores (a first
# build of loom and the dev-dependencies takes several minutes).
# Extra arguments go to both steps (e.g. `--nocapture`).
set -euo pipefail
cd "$(dirname "$0")/.."

export RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/loom}"
mailbox_bound="${LOOM_MAX_PREEMPTIONS:-2}"
handshakes_bound="${LOOM_HANDSHAKES_PREEMPTIONS:-4}"

cargo build --release -p pspat-mailbox --tests
run() { # run FILTER BOUND
    local start end
    start=$(date +%s)
    LOOM_MAX_PREEMPTIONS="$2" cargo test --release -p pspat-mailbox --test tests -- \
        --test-threads=1 "$1" "${@:3}"
    end=$(date +%s)
    echo "loom: ${1%::} models passed in $((end - start)) s (LOOM_MAX_PREEMPTIONS=$2)"
}
run loom:: "$mailbox_bound" "$@"
run loom_handshakes:: "$handshakes_bound" "$@"
