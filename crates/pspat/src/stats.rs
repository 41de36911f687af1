//! Counters readable while the runtime runs, and the conservation invariant
//! (`ARCHITECTURE.md` §4.1): for every client and in total,
//! `submitted = transmitted + dropped + in_flight`.
//!
//! Each counter has a single writer (the client for `submitted` and, in
//! client-transmit mode, its own `transmitted`; each transmitting thread for
//! its own `transmitted` row and its `faulted` count, the packets it
//! discarded after its backend panicked, reported as drops with reason
//! `"fault"`; the arbiter for `dropped`, and `Runtime::shutdown` after every
//! runtime thread was joined, settling what a dead thread held), which updates it
//! with a plain load and a `Release` store, never a read-modify-write.
//! A snapshot loads, per client, every `transmitted` and `dropped` counter
//! first (`Acquire`) and `submitted` last. Every packet's path from the
//! client's `submitted` store to the counter that finally counts it is a
//! chain of Release/Acquire pairs (client push → arbiter pop → TX push →
//! dispatcher pop → counter store), so a snapshot that sees a packet counted
//! as transmitted or dropped also sees it counted as submitted:
//! `in_flight = submitted - transmitted - dropped` is never negative.
//!
//! # Departed clients
//! Client ids are reused (see the runtime docs): once a dropped client's
//! last packet was transmitted or dropped and its slot handed on, its
//! counters leave [`Stats::clients`] and are added to [`Stats::departed`],
//! one aggregate however many clients came and went. The totals include
//! it: `submitted = transmitted + dropped + in_flight` still holds exactly,
//! with `departed.in_flight` always 0. A client still listed keeps its id
//! until its slot is handed on; counters are never reset (each slot's
//! counters are monotonic and a new client's figures are its slot's counters
//! minus their values when it got the slot).

use std::collections::BTreeMap;

use pspat_sched::DropReason;

use crate::sync::{AtomicU64, Ordering};

/// Number of drop reasons counted per client.
pub(crate) const NREASONS: usize = DropReason::ALL.len();

/// A monotonically increasing counter with one writer.
#[derive(Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`; only the counter's single writer calls this.
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        // Relaxed load: this thread is the only writer, so it reads its own
        // last store.
        let v = self.0.load(Ordering::Relaxed);
        // Release: pairs with the Acquire in `Counter::read` of a snapshot,
        // which then also sees every `submitted` store this packet's path
        // happened after (see the module docs).
        self.0.store(v + n, Ordering::Release);
    }

    /// Sets the value; only the single writer calls this.
    #[inline]
    pub(crate) fn set(&self, v: u64) {
        // Release: as in `add`.
        self.0.store(v, Ordering::Release);
    }

    /// Reads the value (pairs with the Release in `add`/`set`).
    #[inline]
    pub(crate) fn read(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// Packets and bytes transmitted for one client by one transmitting thread.
#[derive(Default)]
pub(crate) struct TxCount {
    pub(crate) packets: Counter,
    pub(crate) bytes: Counter,
    /// Packets this transmitter discarded because its backend had failed
    /// (counted as [`DropReason::Fault`]).
    pub(crate) faulted: Counter,
}

/// Adds a batch a transmitter discarded after its backend failed to its
/// counter row (as [`DropReason::Fault`] drops).
pub(crate) fn count_faulted(row: &[TxCount], batch: &[crate::TxPacket]) {
    for p in batch {
        row[p.client as usize].faulted.add(1);
    }
}

/// The text of a panic payload (`&str` or `String`, else a placeholder).
pub(crate) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panicked (non-text payload)".to_string()
    }
}

/// One client's counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Client id.
    pub id: u32,
    /// Packets accepted by `submit`.
    pub submitted: u64,
    /// Packets handed to a backend.
    pub transmitted: u64,
    /// Bytes handed to a backend.
    pub transmitted_bytes: u64,
    /// Packets dropped by the arbiter, all reasons.
    pub dropped: u64,
    /// Drops by reason, indexed like [`DropReason::ALL`].
    pub dropped_by_reason: [u64; NREASONS],
    /// `submitted - transmitted - dropped`.
    pub in_flight: u64,
}

/// The summed counters of every client that left and whose slot was handed
/// on (none of their packets is in flight any more).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Departed {
    /// How many clients.
    pub clients: u64,
    /// Sum of their `submitted`.
    pub submitted: u64,
    /// Sum of their `transmitted`.
    pub transmitted: u64,
    /// Sum of their `transmitted_bytes`.
    pub transmitted_bytes: u64,
    /// Sum of their `dropped`.
    pub dropped: u64,
    /// Their drops by reason, indexed like [`DropReason::ALL`].
    pub dropped_by_reason: [u64; NREASONS],
}

impl Departed {
    /// Adds one departed client's final counters.
    pub(crate) fn add(&mut self, t: &Totals) {
        self.clients += 1;
        self.submitted += t.submitted;
        self.transmitted += t.transmitted;
        self.transmitted_bytes += t.bytes;
        for (d, n) in self.dropped_by_reason.iter_mut().zip(t.by.iter()) {
            *d += n;
        }
        self.dropped += t.by.iter().sum::<u64>();
    }
}

/// A slot's raw counters (monotonic across the clients that used it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) submitted: u64,
    pub(crate) transmitted: u64,
    pub(crate) bytes: u64,
    pub(crate) by: [u64; NREASONS],
}

impl Totals {
    /// `self - base`, field by field (`base` was read earlier, when the
    /// slot was handed over: every counter is monotonic).
    pub(crate) fn since(&self, base: &Totals) -> Totals {
        let mut by = [0u64; NREASONS];
        for (r, v) in by.iter_mut().enumerate() {
            *v = self.by[r].saturating_sub(base.by[r]);
        }
        Totals {
            submitted: self.submitted.saturating_sub(base.submitted),
            transmitted: self.transmitted.saturating_sub(base.transmitted),
            bytes: self.bytes.saturating_sub(base.bytes),
            by,
        }
    }
}

/// A snapshot of every client's counters and their totals.
///
/// # Examples
/// ```
/// let s = pspat::Stats::default();
/// assert!(s.conserved());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Every client present (alive, or dropped with packets still in
    /// flight), by increasing id. Ids are reused once a client departed.
    pub clients: Vec<ClientStats>,
    /// Totals of the clients that departed (see the module docs).
    pub departed: Departed,
    /// Sum of `submitted`, departed clients included.
    pub submitted: u64,
    /// Sum of `transmitted`, departed clients included.
    pub transmitted: u64,
    /// Sum of `transmitted_bytes`, departed clients included.
    pub transmitted_bytes: u64,
    /// Sum of `dropped`, departed clients included.
    pub dropped: u64,
    /// Sum of `in_flight` (departed clients have none).
    pub in_flight: u64,
}

impl Stats {
    /// True when `submitted = transmitted + dropped + in_flight` holds for
    /// every client with a non-negative `in_flight`, for the departed
    /// clients with none in flight, and for the totals, which are the sums
    /// of the clients and the departed.
    pub fn conserved(&self) -> bool {
        let d = &self.departed;
        let sum = |f: fn(&ClientStats) -> u64| self.clients.iter().map(f).sum::<u64>();
        self.clients.iter().all(|c| {
            c.submitted >= c.transmitted + c.dropped
                && c.dropped_by_reason.iter().sum::<u64>() == c.dropped
        }) && d.submitted == d.transmitted + d.dropped
            && d.dropped_by_reason.iter().sum::<u64>() == d.dropped
            && self.submitted == sum(|c| c.submitted) + d.submitted
            && self.transmitted == sum(|c| c.transmitted) + d.transmitted
            && self.dropped == sum(|c| c.dropped) + d.dropped
            && self.in_flight == sum(|c| c.in_flight)
            && self.submitted == self.transmitted + self.dropped + self.in_flight
    }

    /// Total drops by reason name ([`DropReason::as_str`]), zero counts omitted.
    pub fn dropped_by_reason(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        let rows = self.clients.iter().map(|c| &c.dropped_by_reason);
        for by in rows.chain(std::iter::once(&self.departed.dropped_by_reason)) {
            for (r, &n) in DropReason::ALL.iter().zip(by.iter()) {
                if n > 0 {
                    *m.entry(r.as_str().to_string()).or_insert(0) += n;
                }
            }
        }
        m
    }

    pub(crate) fn push(&mut self, c: ClientStats) {
        self.submitted += c.submitted;
        self.transmitted += c.transmitted;
        self.transmitted_bytes += c.transmitted_bytes;
        self.dropped += c.dropped;
        self.in_flight += c.in_flight;
        self.clients.push(c);
    }

    pub(crate) fn add_departed(&mut self, d: Departed) {
        self.submitted += d.submitted;
        self.transmitted += d.transmitted;
        self.transmitted_bytes += d.transmitted_bytes;
        self.dropped += d.dropped;
        self.departed = d;
    }
}

/// Arbiter counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArbiterStats {
    /// Rounds run.
    pub rounds: u64,
    /// Sum of round durations (clock read to clock read), nanoseconds.
    pub busy_round_ns: u64,
    /// Rounds that collected or released something.
    pub busy_rounds: u64,
    /// Times the arbiter parked for lack of work.
    pub sleeps: u64,
    /// Scheduler dequeues (decisions).
    pub decisions: u64,
    /// Park timeouts (nobody kicked for the whole safety period,
    /// [`crate::RuntimeConfig::idle_safety_wake_ns`])
    /// after which work was found: a lost wake-up would show here. Expected
    /// 0 (a submit racing with the very moment of a timeout could also
    /// count, which is vanishingly rare).
    pub unrequested_wakeups_with_work: u64,
}
