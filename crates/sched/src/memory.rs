//! How much memory a scheduler configuration needs, computed before it is
//! built, so a front end can refuse one the machine cannot hold.
//!
//! The packet arena ([`crate::PacketQueues`]) dominates: chunks of
//! [`crate::queue::CHUNK_PACKETS`] packets (64 bytes each, plus an 8-byte
//! link and free-list entry), about `capacity / 4 + 1.5 · min(queues,
//! capacity)` of them, and one 12-byte record per queue, counted as one
//! queue per flow (FIFO keeps one queue for all flows and PRIO one per
//! priority, so for them the figure is an upper bound). Per-flow algorithm
//! state (weights, deficits, timestamps, ranks) and the algorithm's fixed
//! tables are added from per-algorithm constants measured on x86-64
//! (resident bytes after filling the arena); the test
//! `crates/cli/tests/memory_estimate.rs` checks the whole estimate within
//! ±30% of the measured growth of the resident set. The figure is what the configuration needs at full load: an empty
//! scheduler may touch less.

use crate::queue::arena_chunks;
use crate::{AlgKind, SchedulerConfig};

/// Bytes of one arena chunk (four 16-byte packets, cache-line aligned).
const CHUNK_BYTES: u64 = 64;
/// Per chunk besides its packets: its link and its free-list entry.
const CHUNK_OVERHEAD_BYTES: u64 = 8;
/// One queue's record (oldest packet's slot, tail chunk, length).
const FIFO_BYTES: u64 = 12;

impl SchedulerConfig {
    /// The bytes this configuration needs over `flows` flows once its arena
    /// is full; see the module docs for what is counted.
    pub fn memory_estimate(&self, flows: usize) -> u64 {
        let flows = flows.max(1) as u64;
        // One queue per flow: FIFO and PRIO keep fewer, so the figure is
        // an upper bound for them.
        let chunks = arena_chunks(flows as usize, self.capacity) as u64;
        let arena = chunks * (CHUNK_BYTES + CHUNK_OVERHEAD_BYTES) + flows * FIFO_BYTES;
        let (per_flow, fixed) = algorithm_state(self.alg);
        // The hierarchy included: measured at one arena's worth of
        // `capacity` packets, like the flat algorithms.
        arena + flows * per_flow + fixed
    }
}

/// (bytes per flow, fixed bytes) of an algorithm's own state. Every
/// algorithm keeps the flow's parameters in its [`crate::FlowTable`]
/// (8 B per slot, 12 B before they were packed: each figure below was
/// measured then and is 4 B less since; the hierarchy's leaves keep a
/// table of their own as well, so 8 B less).
fn algorithm_state(alg: AlgKind) -> (u64, u64) {
    match alg {
        AlgKind::Fifo => (12, 0),
        AlgKind::Prio => (12, 0),
        AlgKind::Drr => (44, 0),
        // FQ: the flow's parameters (8 B) and its state (16 B: deficit,
        // quantum, list link and tag); estimated from the layout, not
        // measured.
        AlgKind::Fq => (24, 0),
        AlgKind::Wf2qPlus => (60, 0),
        // QFQ: the flow's parameters (8 B) and its entity (16 B; 20 B
        // before its inverse weight moved to a table of the distinct
        // weights, of which the few a configuration uses stay resident).
        AlgKind::Qfq => (24, 64 * 1024),
        // QFQ+ keeps the same entity per aggregate, one per flow slot: 4 B
        // less than measured at 20 B.
        AlgKind::QfqPlus => (88, 64 * 1024),
        AlgKind::Hierarchy => (248, 64 * 1024),
        // Eiffel: per-flow ranks and the bucket bitmaps of the FFS queues
        // (fixed, a few MiB at the default granularity).
        AlgKind::Srpt
        | AlgKind::Edf
        | AlgKind::Lstf
        | AlgKind::Stfq
        | AlgKind::EiffelPrio
        | AlgKind::ShapedDrr => (92, 4 * 1024 * 1024),
    }
}
