#!/usr/bin/env bash
# Soak with faults (docs/RELIABILITY.md): 1000 clients for ten minutes by
# default, clients created and dropped continuously, a backend that panics
# now and then (the runtime then fails, is shut down, checked and replaced),
# a change to the running scheduler every few seconds;
# conservation checked in snapshots and at every shutdown, packets lost must
# be 0, resident memory must stay flat. Exits 1 if a check failed.
#
# Parameters by environment or flags (flags win):
#   SOAK_SECONDS (--duration, 600)   SOAK_CLIENTS (--clients, 1000)
#   SOAK_WORKERS (--workers, 8)      SOAK_EPOCH_SECONDS (--epoch, 5)
#   SOAK_FAULT_CHANCE (--fault-chance, 0.7)   SOAK_SEED (--seed, 1)
#   SOAK_RECONFIGURE_SECONDS (--reconfigure, 2)
# Example: SOAK_SECONDS=120 bash scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p pspat --example soak
exec ./target/release/examples/soak "$@"
