//! The integration suite of `pspat-mailbox`, one binary (`autotests = false`).
//!
//! Under `RUSTFLAGS="--cfg loom"` only the `loom` and `loom_handshakes`
//! modules are built; see `.ci/loom.sh`.

/// The eleven test vectors of `docs/REFERENCE.md` §2.7 (E = 512, Λ = 16).
#[cfg(not(loom))]
mod vectors;

/// Random operation sequences against a `VecDeque` model, with the exact
/// capacity rule.
#[cfg(not(loom))]
mod model;

/// Random descriptor lifecycles through the recycler (batched returns
/// with a hold limit) against a set model.
#[cfg(not(loom))]
mod recycle_model;

/// Two threads, every sequence number once and in order.
#[cfg(not(loom))]
mod stress;

/// The handshakes (client lists, retire, parker, recycling) on real
/// threads.
#[cfg(not(loom))]
mod handshakes_stress;

/// The handles move to other threads (compile-time and at run time).
#[cfg(not(loom))]
mod send;

/// Exhaustive interleavings on a tiny mailbox (E = 8, Λ = 2).
#[cfg(loom)]
mod loom;

/// The handshakes (client lists and retire, parker, recycling) under loom.
#[cfg(loom)]
mod loom_handshakes;
