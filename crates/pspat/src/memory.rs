//! How much memory a runtime configuration needs, computed before anything
//! starts (so a front end can refuse a configuration the machine cannot
//! hold instead of letting it swap or be killed).
//!
//! Counted for [`RuntimeConfig::max_clients`] clients, all registered: each
//! client's mailbox (`mailbox_entries` slots of 8 bytes), its descriptors
//! (`descriptors_per_client` × 16 bytes) with their two bitmaps, its grant
//! mailbox in client-transmit mode, its padded counters and the arbiter's
//! per-client bookkeeping; then the TX mailboxes of the dispatchers and the
//! arbiter's batches. The scheduler is not included: see
//! `pspat_sched::SchedulerConfig::memory_estimate`.
//!
//! The figure is an estimate of the resident bytes once every slot has been
//! touched, within about a third of what is measured (the test in
//! `tests/memory.rs` checks ±30%); thread stacks are not counted.

use crate::{RuntimeConfig, TxMode};

/// Bytes of one mailbox slot (a `NonZeroU64`).
const SLOT_BYTES: u64 = 8;
/// Bytes of one descriptor (cookie and metadata, two `u64`).
const DESC_BYTES: u64 = 16;
/// A client's fixed share: its padded counters, the arbiter's service
/// state and registry entries (measured about 1 KiB; rounded up).
const CLIENT_FIXED_BYTES: u64 = 2048;
/// Bytes of one released packet in the arbiter's and dispatchers' batches.
const TX_PACKET_BYTES: u64 = 24;

/// The bytes `cfg` needs once every client is registered and busy,
/// excluding the scheduler; see the module docs.
pub fn memory_estimate(cfg: &RuntimeConfig) -> u64 {
    let clients = cfg.max_clients as u64;
    let descs = cfg.descriptors_per_client as u64;
    let mut per_client = cfg.mailbox_entries as u64 * SLOT_BYTES
        + descs * DESC_BYTES
        // `done` and the client's own `free` bitmap: one bit each.
        + 2 * descs / 8
        + CLIENT_FIXED_BYTES;
    if cfg.tx_mode == TxMode::Client {
        // The grant mailbox holds every descriptor plus a line.
        per_client += (descs + 16).next_power_of_two().max(64) * SLOT_BYTES;
        // The client's transmit batch.
        per_client += descs * TX_PACKET_BYTES;
    }
    let dispatchers = cfg.dispatchers as u64;
    let tx = dispatchers
        * (cfg.tx_mailbox_entries as u64 * SLOT_BYTES
            + cfg.dispatch_batch as u64 * TX_PACKET_BYTES);
    let arbiter = u64::from(cfg.arb_batch) * TX_PACKET_BYTES * (1 + dispatchers);
    clients * per_client + tx + arbiter
}
