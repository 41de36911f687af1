//! The bridge's live counters: one block per RX thread, per transmitter and
//! for the reverse direction, each with a single writer.
//!
//! A writer updates a counter with a plain load and a `Release` store (no
//! read-modify-write); a reader loads with `Acquire`. A frame is counted
//! received by its RX thread before it is submitted, and counted sent or
//! dropped by its transmitter after it was taken from the runtime, which
//! acquired the RX thread's push: so a reader that loads the transmitters'
//! counters first and the RX threads' last never sees a frame finished
//! before it was received (in-flight counts are never negative).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A counter with one writer.
#[derive(Default, Debug)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`; only the single writer calls this.
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        // Relaxed load: the writer reads its own last store.
        let v = self.0.load(Ordering::Relaxed);
        // Release: pairs with the Acquire in `read` (module docs).
        self.0.store(v + n, Ordering::Release);
    }

    /// The value (pairs with the Release in `add`).
    #[inline]
    pub(crate) fn read(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

fn counters(n: usize) -> Box<[Counter]> {
    (0..n).map(|_| Counter::default()).collect()
}

/// Which counter group a flow id counts in: its own (one group per flow),
/// or `flow % groups` ([`crate::FlowCounters`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grouping {
    groups: usize,
}

impl Grouping {
    /// `groups` counter groups, at least 1.
    pub(crate) fn new(groups: usize) -> Self {
        Grouping {
            groups: groups.max(1),
        }
    }

    /// How many groups there are.
    pub(crate) fn groups(self) -> usize {
        self.groups
    }

    /// The group of flow id `flow`.
    #[inline]
    pub(crate) fn of(self, flow: u32) -> usize {
        let f = flow as usize;
        if f < self.groups {
            f
        } else {
            f % self.groups
        }
    }
}

/// Counters per group in an RX thread's block: `received`,
/// `received_bytes` and one `flow_drops` per [`RxReason`].
pub(crate) const RX_PER_GROUP: usize = 2 + NRX;
/// Counters per group in a transmitter's block, besides one `done` per RX
/// thread: `sent`, `sent_bytes`, `duplicated`, `corrupted`, `ce_marked`
/// and one `drops` per [`TxReason`].
pub(crate) const TX_PER_GROUP: usize = 5 + NTX;

/// Why an RX thread dropped a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxReason {
    /// Longer than the output link sends (its MTU plus the Ethernet
    /// header, plus 4 bytes when VLAN-tagged), or than the ring kept: it
    /// could never leave, and does not fit a frame buffer.
    TooLong,
    /// The classifier dropped it by policy.
    Filtered,
    /// The classifier named a flow the bridge does not have.
    BadFlow,
    /// The flow already had its queue limit of packets in the runtime.
    FlowLimit,
    /// The runtime refused it: the RX thread's mailbox or frame pool is
    /// full.
    MailboxFull,
    /// The runtime was closing.
    Closed,
}

impl RxReason {
    /// Every reason, in counter order.
    pub const ALL: [RxReason; 6] = [
        RxReason::TooLong,
        RxReason::Filtered,
        RxReason::BadFlow,
        RxReason::FlowLimit,
        RxReason::MailboxFull,
        RxReason::Closed,
    ];

    /// The counter name.
    pub const fn name(self) -> &'static str {
        match self {
            RxReason::TooLong => "too_long",
            RxReason::Filtered => "filtered",
            RxReason::BadFlow => "bad_flow",
            RxReason::FlowLimit => "flow_limit",
            RxReason::MailboxFull => "mailbox_full",
            RxReason::Closed => "closed",
        }
    }
}

/// Why a transmitter did not send a frame the runtime released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxReason {
    /// The kernel had no room for it within the retry budget.
    TxFull,
    /// The send failed (an error other than the link's loss).
    TxError,
    /// The output interface went down or away.
    LinkLost,
    /// The socket refused its length.
    TxTooLong,
    /// Its frame was not in flight (an internal inconsistency; never
    /// expected).
    FrameState,
}

impl TxReason {
    /// Every reason, in counter order.
    pub const ALL: [TxReason; 5] = [
        TxReason::TxFull,
        TxReason::TxError,
        TxReason::LinkLost,
        TxReason::TxTooLong,
        TxReason::FrameState,
    ];

    /// The counter name.
    pub const fn name(self) -> &'static str {
        match self {
            TxReason::TxFull => "tx_full",
            TxReason::TxError => "tx_error",
            TxReason::LinkLost => "link_lost",
            TxReason::TxTooLong => "tx_too_long",
            TxReason::FrameState => "frame_state",
        }
    }
}

pub(crate) const NRX: usize = RxReason::ALL.len();
pub(crate) const NTX: usize = TxReason::ALL.len();
pub(crate) const NPARSE: usize = pspat_io::parse::ParseReason::ALL.len();

/// The first error of a thread that ended it (a lost link), kept for the
/// report.
#[derive(Default, Debug)]
pub(crate) struct ErrorSlot {
    set: AtomicBool,
    text: Mutex<Option<String>>,
}

impl ErrorSlot {
    pub(crate) fn set(&self, text: String) {
        if let Ok(mut slot) = self.text.lock() {
            if slot.is_none() {
                *slot = Some(text);
            }
        }
        // Release: pairs with the Acquire in `is_set`; the text is under the
        // mutex anyway.
        self.set.store(true, Ordering::Release);
    }

    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    pub(crate) fn get(&self) -> Option<String> {
        self.text.lock().ok().and_then(|t| t.clone())
    }
}

/// One RX thread's counters (single writer: that thread).
#[derive(Debug)]
pub(crate) struct RxShared {
    /// Frames the ring gave (this host's own outgoing frames excluded).
    pub(crate) frames: Counter,
    pub(crate) bytes: Counter,
    /// Drops by [`RxReason`] (classified or not).
    pub(crate) drops: [Counter; NRX],
    /// Drops under a parse reason ([`crate::Unparsed::Drop`]).
    pub(crate) unparsed: [Counter; NPARSE],
    /// Parse outcomes of every frame (forwarded or not).
    pub(crate) parsed: Counter,
    pub(crate) refused: [Counter; NPARSE],
    /// Per counter group ([`Grouping`]): frames classified into its flows,
    /// their bytes, and its share of `drops` (flow_limit, mailbox_full,
    /// closed).
    pub(crate) received: Box<[Counter]>,
    pub(crate) received_bytes: Box<[Counter]>,
    pub(crate) flow_drops: Box<[Counter]>,
    /// The kernel's ring drops (`tp_drops`): never received.
    pub(crate) kernel_drops: Counter,
    /// The CPU the thread last ran on, plus one (0: not known yet).
    pub(crate) cpu: AtomicU64,
    pub(crate) error: ErrorSlot,
}

impl RxShared {
    pub(crate) fn new(groups: usize) -> Self {
        RxShared {
            frames: Counter::default(),
            bytes: Counter::default(),
            drops: Default::default(),
            unparsed: Default::default(),
            parsed: Counter::default(),
            refused: Default::default(),
            received: counters(groups),
            received_bytes: counters(groups),
            flow_drops: counters(groups * NRX),
            kernel_drops: Counter::default(),
            cpu: AtomicU64::new(0),
            error: ErrorSlot::default(),
        }
    }
}

/// One transmitter's counters (single writer: the thread running that
/// backend).
#[derive(Debug)]
pub(crate) struct TxShared {
    pub(crate) grouping: Grouping,
    /// Per (RX thread, counter group): frames finished (sent or dropped),
    /// for the queue limit.
    pub(crate) done: Box<[Counter]>,
    /// Per counter group: frames sent (copies included), their bytes,
    /// drops by [`TxReason`].
    pub(crate) sent: Box<[Counter]>,
    pub(crate) sent_bytes: Box<[Counter]>,
    pub(crate) drops: Box<[Counter]>,
    /// Per counter group: copies of duplicated packets the backend was
    /// given (each then sent or dropped, like a frame received).
    pub(crate) duplicated: Box<[Counter]>,
    /// Per counter group: packets marked corrupt the backend was given,
    /// once per packet (a duplicated one's copy carries the same flipped
    /// bit and is not counted again); not extra frames: each is sent or
    /// dropped as the packet it is.
    pub(crate) corrupted: Box<[Counter]>,
    /// Per counter group: packets a pipe marked Congestion Experienced
    /// whose IP header the backend set to CE, once per packet (a
    /// duplicated one's copy carries the same mark).
    pub(crate) ce_marked: Box<[Counter]>,
    /// Packets a pipe marked Congestion Experienced that the backend could
    /// not mark (no ECN-capable IPv4 or IPv6 header where the parser looks
    /// for one), sent as they came: one count for the transmitter, not per
    /// group (never expected: only packets the RX threads found
    /// ECN-capable are marked).
    pub(crate) ce_unmarkable: Counter,
    /// The seed the transmitters' corruption draws follow
    /// ([`crate::BridgeConfig::corrupt_seed`], then each
    /// [`crate::Bridge::set_corrupt_seed`]): one for the whole bridge.
    pub(crate) corrupt_seed: Arc<AtomicU64>,
    pub(crate) cpu: AtomicU64,
    pub(crate) error: ErrorSlot,
}

impl TxShared {
    /// Counters for a transmitter whose corruption draws follow
    /// `corrupt_seed`.
    pub(crate) fn new(rx_threads: usize, grouping: Grouping, corrupt_seed: Arc<AtomicU64>) -> Self {
        let groups = grouping.groups();
        TxShared {
            grouping,
            done: counters(rx_threads * groups),
            sent: counters(groups),
            sent_bytes: counters(groups),
            drops: counters(groups * NTX),
            duplicated: counters(groups),
            corrupted: counters(groups),
            ce_marked: counters(groups),
            ce_unmarkable: Counter::default(),
            corrupt_seed,
            cpu: AtomicU64::new(0),
            error: ErrorSlot::default(),
        }
    }
}

/// The reverse direction's counters (single writer: its thread).
#[derive(Debug, Default)]
pub(crate) struct ReverseShared {
    pub(crate) received: Counter,
    /// Bytes of `received` (reported only where the reverse direction can
    /// be shaped: [`crate::ReverseSwitch`]).
    pub(crate) received_bytes: Counter,
    pub(crate) sent: Counter,
    pub(crate) sent_bytes: Counter,
    pub(crate) drops: [Counter; NRX + NTX],
    pub(crate) kernel_drops: Counter,
    pub(crate) cpu: AtomicU64,
    pub(crate) error: ErrorSlot,
}

/// Records the calling thread's CPU in `slot` (plus one; 0 = unknown).
pub(crate) fn note_cpu(slot: &AtomicU64) {
    if let Some(cpu) = pspat_io::cpu::current_cpu() {
        // Relaxed: a report's hint, it orders nothing.
        slot.store(cpu as u64 + 1, Ordering::Relaxed);
    }
}

/// The CPU recorded by [`note_cpu`].
pub(crate) fn read_cpu(slot: &AtomicU64) -> Option<usize> {
    // Relaxed: as in `note_cpu`.
    match slot.load(Ordering::Relaxed) {
        0 => None,
        c => Some(c as usize - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_counts_in_its_own_group_or_in_its_residue() {
        let own = Grouping::new(8);
        assert_eq!((own.of(0), own.of(7)), (0, 7));
        let folded = Grouping::new(3);
        assert_eq!(
            (0..7).map(|f| folded.of(f)).collect::<Vec<_>>(),
            [0, 1, 2, 0, 1, 2, 0]
        );
        assert_eq!(folded.of(u32::MAX), (u32::MAX % 3) as usize);
        assert_eq!(Grouping::new(0).groups(), 1);
    }

    #[test]
    fn the_blocks_hold_the_counters_per_group_the_estimate_counts() {
        let groups = 5;
        let rx = RxShared::new(groups);
        assert_eq!(
            rx.received.len() + rx.received_bytes.len() + rx.flow_drops.len(),
            groups * RX_PER_GROUP
        );
        let rx_threads = 3;
        let tx = TxShared::new(rx_threads, Grouping::new(groups), Arc::default());
        assert_eq!(tx.done.len(), rx_threads * groups);
        assert_eq!(
            tx.sent.len()
                + tx.sent_bytes.len()
                + tx.drops.len()
                + tx.duplicated.len()
                + tx.corrupted.len()
                + tx.ce_marked.len(),
            groups * TX_PER_GROUP
        );
    }
}
