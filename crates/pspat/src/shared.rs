//! The state every thread of one runtime shares: client lists, parkers,
//! per-client descriptors and counters, the client registry.
//!
//! # Client slots
//! A client id names a slot: its descriptors, its returned set and its
//! counters (here and in the per-transmitter rows). When a client handle is
//! dropped its slot is *leaving*; it is handed to a new client only once it
//! is quiescent (see [`Registry::reclaim`]): the arbiter retired the old
//! mailbox (`detached`) and every descriptor came home
//! (`ReturnedSet::holds_all`, after the leaving handle gave back its free
//! ones). Then no packet of the old client is anywhere, its counters are
//! final: they are folded into [`crate::stats::Departed`] and become the new
//! client's base (counters are never reset: each has a single writer), and
//! the id's announcement state is cleared on every list
//! (`ClientList::clear`). The handshake is model-checked in
//! `pspat-mailbox`'s `tests/loom_handshakes.rs`
//! (`slot_handover_after_every_descriptor_came_home`).
//!
//! Nothing here runs a loop: the arbiter ([`crate::arbiter`]), dispatchers
//! ([`crate::dispatcher`]), clients ([`crate::client`]) and the
//! [`crate::Runtime`] that spawns them all import this module, and it imports
//! none of them. The handshakes over these fields (announce/retire, sleep and
//! wake, descriptor recycling) are `pspat-mailbox`'s [`ClientList`],
//! [`Parker`] and [`ReturnedSet`], model-checked there with loom.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};

use crossbeam_utils::CachePadded;
use pspat_mailbox::{ClientList, Consumer, Parker, Producer, ReturnedSet};
use pspat_sched::DropReason;

use crate::stats::{ClientStats, Counter, Departed, Totals, TxCount, NREASONS};
use crate::sync::fence;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::{ArbiterStats, Clock, RuntimeConfig, RuntimeError, Stats};

/// One descriptor: written by its client before the push that publishes it,
/// read by the transmitter, recycled through the owner's [`ReturnedSet`].
#[derive(Default)]
pub(crate) struct Desc {
    pub(crate) cookie: AtomicU64,
    /// `flow << 32 | len`.
    pub(crate) meta: AtomicU64,
}

/// State of one client that other threads read.
pub(crate) struct ClientShared {
    pub(crate) id: u32,
    pub(crate) submitted: CachePadded<Counter>,
    /// Transmit counters of the client itself (client-transmit mode).
    pub(crate) self_tx: CachePadded<TxCount>,
    pub(crate) descs: Box<[Desc]>,
    /// Descriptors transmitters returned (Release `fetch_or`), taken back by
    /// the owner (Acquire swap).
    pub(crate) returned: CachePadded<ReturnedSet>,
    /// The arbiter retired the current client's mailbox (Release store in
    /// collect; Acquire load in [`Registry::reclaim`]); reset when the
    /// slot is handed over.
    pub(crate) detached: AtomicBool,
}

impl ClientShared {
    pub(crate) fn new(id: u32, descriptors: usize) -> Self {
        ClientShared {
            id,
            submitted: CachePadded::new(Counter::default()),
            self_tx: CachePadded::new(TxCount::default()),
            descs: (0..descriptors).map(|_| Desc::default()).collect(),
            returned: CachePadded::new(ReturnedSet::new(descriptors)),
            detached: AtomicBool::new(false),
        }
    }
}

/// Where a slot is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotState {
    /// A client handle exists.
    Live,
    /// The handle was dropped; packets of it may still be in flight.
    Leaving,
    /// Reclaimed: ready for a new client.
    Free,
}

/// The registry's record of one slot.
pub(crate) struct SlotMeta {
    pub(crate) state: SlotState,
    /// The slot's raw counters when its current client got it.
    pub(crate) base: Totals,
}

/// What the arbiter receives when a client is created.
pub(crate) struct Registration {
    pub(crate) shared: Arc<ClientShared>,
    pub(crate) consumer: Consumer<NonZeroU64>,
    /// Client-transmit mode: the arbiter's end of the grant mailbox.
    pub(crate) grants: Option<Producer<NonZeroU64>>,
}

pub(crate) struct Registry {
    /// Every slot ever made, by id (at most `max_clients`; a slot is reused
    /// by later clients, see the module docs).
    pub(crate) all: Vec<Arc<ClientShared>>,
    /// Created, not yet taken by the arbiter.
    pub(crate) pending: Vec<Registration>,
    /// Per slot, by id.
    pub(crate) meta: Vec<SlotMeta>,
    /// Slots whose handle was dropped, oldest first.
    pub(crate) leaving: VecDeque<u32>,
    /// Reclaimed slots.
    pub(crate) free: Vec<u32>,
    /// Totals of the clients whose slots were reclaimed.
    pub(crate) departed: Departed,
}

impl Registry {
    /// Whether leaving slot `id` is quiescent: the arbiter retired its
    /// mailbox and every descriptor came home.
    fn quiescent(&self, id: u32) -> bool {
        let c = &self.all[id as usize];
        // Acquire: pairs with the arbiter's Release store after it retired
        // the mailbox.
        c.detached.load(Ordering::Acquire) && c.returned.holds_all(c.descs.len())
    }

    /// Reclaims leaving slots that became quiescent: the oldest ones while
    /// they are (amortised O(1) per client), or every leaving slot when
    /// `scan` (nothing else is free). Each reclaimed slot's totals are
    /// folded into `departed`, its counters become the next client's base,
    /// its returned set is emptied (the next client starts with every
    /// descriptor free) and its announcement state cleared on every list.
    pub(crate) fn reclaim(&mut self, shared: &Shared, scan: bool) {
        let mut i = 0;
        while i < self.leaving.len() {
            let id = self.leaving[i];
            if !self.quiescent(id) {
                if !scan {
                    return;
                }
                i += 1;
                continue;
            }
            self.leaving.remove(i);
            let now = shared.totals(&self.all[id as usize]);
            let m = &mut self.meta[id as usize];
            self.departed.add(&now.since(&m.base));
            m.base = now;
            m.state = SlotState::Free;
            let c = &self.all[id as usize];
            c.returned.take_all();
            // Relaxed: published to the next client and the arbiter by the
            // registry lock and the registration's Release store.
            c.detached.store(false, Ordering::Relaxed);
            for l in shared.lists.iter() {
                l.clear(id);
            }
            self.free.push(id);
        }
    }
}

/// Arbiter counters published for [`crate::Runtime::arbiter_stats`].
#[derive(Default)]
pub(crate) struct ArbStatCounters {
    pub(crate) rounds: Counter,
    pub(crate) busy_round_ns: Counter,
    pub(crate) busy_rounds: Counter,
    pub(crate) sleeps: Counter,
    pub(crate) decisions: Counter,
    pub(crate) unrequested: Counter,
}

impl ArbStatCounters {
    pub(crate) fn publish(&self, s: &ArbiterStats) {
        self.rounds.set(s.rounds);
        self.busy_rounds.set(s.busy_rounds);
        self.busy_round_ns.set(s.busy_round_ns);
        self.sleeps.set(s.sleeps);
        self.decisions.set(s.decisions);
        self.unrequested.set(s.unrequested_wakeups_with_work);
    }

    pub(crate) fn read(&self) -> ArbiterStats {
        ArbiterStats {
            rounds: self.rounds.read(),
            busy_round_ns: self.busy_round_ns.read(),
            busy_rounds: self.busy_rounds.read(),
            sleeps: self.sleeps.read(),
            decisions: self.decisions.read(),
            unrequested_wakeups_with_work: self.unrequested.read(),
        }
    }
}

/// State shared by every thread of one runtime.
pub(crate) struct Shared {
    pub(crate) cfg: RuntimeConfig,
    pub(crate) clock: Clock,
    /// One per CPU (\[J\] §3.1).
    pub(crate) lists: Box<[ClientList]>,
    pub(crate) arbiter: Parker,
    /// One per dispatcher thread.
    pub(crate) dispatchers: Box<[Parker]>,
    /// Read by every submit burst and written once: on a line of its own, away
    /// from the counters the arbiter writes.
    pub(crate) closing: CachePadded<AtomicBool>,
    /// A thread or backend failed: the runtime discards what it holds.
    pub(crate) failed: AtomicBool,
    /// The first failure: (which thread or backend, what happened).
    pub(crate) fault: Mutex<Option<(String, String)>>,
    pub(crate) arbiter_done: AtomicBool,
    pub(crate) live_clients: AtomicUsize,
    pub(crate) registry_dirty: AtomicBool,
    pub(crate) registry: Mutex<Registry>,
    /// `[transmitter][client]`: transmitter 0 is the arbiter (T = 0) or
    /// dispatcher 0.
    pub(crate) tx_counts: Box<[Box<[TxCount]>]>,
    /// `[client * NREASONS + reason]`, written by the arbiter.
    pub(crate) drops: Box<[Counter]>,
    /// Written by the arbiter every 64 busy rounds: padded off the fields
    /// clients read.
    pub(crate) arb_stats: CachePadded<ArbStatCounters>,
    /// False only when the arbiter transmits (T = 0) to a backend that does
    /// not want cookies: then nobody reads a descriptor (the slot carries
    /// flow and length) and clients skip writing them.
    pub(crate) write_descs: bool,
}

impl Shared {
    /// Builds the shared state for `cfg` with `lists` client lists,
    /// `transmitters` counter rows and `dispatchers` dispatcher parkers.
    pub(crate) fn new(
        cfg: RuntimeConfig,
        lists: usize,
        transmitters: usize,
        dispatchers: usize,
        write_descs: bool,
    ) -> Self {
        let max = cfg.max_clients;
        Shared {
            lists: (0..lists).map(|_| ClientList::new(max)).collect(),
            arbiter: Parker::new(),
            dispatchers: (0..dispatchers).map(|_| Parker::new()).collect(),
            clock: Clock::new(),
            closing: CachePadded::new(AtomicBool::new(false)),
            failed: AtomicBool::new(false),
            fault: Mutex::new(None),
            arbiter_done: AtomicBool::new(false),
            live_clients: AtomicUsize::new(0),
            registry_dirty: AtomicBool::new(false),
            registry: Mutex::new(Registry {
                all: Vec::new(),
                pending: Vec::new(),
                meta: Vec::new(),
                leaving: VecDeque::new(),
                free: Vec::new(),
                departed: Departed::default(),
            }),
            tx_counts: (0..transmitters)
                .map(|_| (0..max).map(|_| TxCount::default()).collect())
                .collect(),
            drops: (0..max * NREASONS).map(|_| Counter::default()).collect(),
            arb_stats: CachePadded::new(ArbStatCounters::default()),
            write_descs,
            cfg,
        }
    }

    /// Locks the registry, recovering from a poisoned lock (the registry's
    /// vectors stay consistent: every critical section only pushes or takes).
    pub(crate) fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        match self.registry.lock() {
            Ok(r) => r,
            Err(p) => p.into_inner(),
        }
    }

    /// Raw counters of slot `c`: every transmitted and dropped counter
    /// first, `submitted` last (see [`crate::stats`] for why).
    pub(crate) fn totals(&self, c: &ClientShared) -> Totals {
        let id = c.id as usize;
        let mut t = Totals {
            transmitted: c.self_tx.packets.read(),
            bytes: c.self_tx.bytes.read(),
            ..Totals::default()
        };
        for row in self.tx_counts.iter() {
            t.transmitted += row[id].packets.read();
            t.bytes += row[id].bytes.read();
        }
        for (r, slot) in t.by.iter_mut().enumerate() {
            *slot = self.drops[id * NREASONS + r].read();
        }
        let fault = DropReason::Fault.index();
        t.by[fault] += c.self_tx.faulted.read();
        for row in self.tx_counts.iter() {
            t.by[fault] += row[id].faulted.read();
        }
        // Last: see the module docs of `stats`.
        t.submitted = c.submitted.read();
        t
    }

    /// Snapshot of every client present (live, or gone with packets still
    /// in flight) and of the departed ones' totals. Holds the registry lock
    /// so that no slot changes hands meanwhile.
    pub(crate) fn stats(&self) -> Stats {
        let reg = self.registry();
        let mut s = Stats::default();
        for (id, m) in reg.meta.iter().enumerate() {
            if m.state == SlotState::Free {
                continue;
            }
            let t = self.totals(&reg.all[id]).since(&m.base);
            let dropped = t.by.iter().sum();
            s.push(ClientStats {
                id: id as u32,
                submitted: t.submitted,
                transmitted: t.transmitted,
                transmitted_bytes: t.bytes,
                dropped,
                dropped_by_reason: t.by,
                in_flight: t.submitted.saturating_sub(t.transmitted + dropped),
            });
        }
        s.add_departed(reg.departed.clone());
        s
    }

    /// Marks the runtime closing and wakes the arbiter.
    pub(crate) fn close(&self) {
        // SeqCst store then fence: the arbiter checks `closing` in its
        // pre-sleep rescan, after its own fence.
        self.closing.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.arbiter.kick_force();
    }

    /// Records a failure of `what` (the first one is kept), marks the
    /// runtime failed and closing: from now on the arbiter discards every
    /// packet it holds as [`DropReason::Fault`] and every submit fails with
    /// [`crate::SubmitError::Closed`].
    pub(crate) fn fail(&self, what: String, reason: String) {
        {
            let mut f = match self.fault.lock() {
                Ok(f) => f,
                Err(p) => p.into_inner(),
            };
            f.get_or_insert((what, reason));
        }
        // Release: pairs with the Acquire in `is_failed`; the message above
        // is behind the mutex anyway.
        self.failed.store(true, Ordering::Release);
        self.close();
        for d in self.dispatchers.iter() {
            d.kick_force();
        }
    }

    /// Whether a thread or backend failed (Acquire: pairs with `fail`).
    #[inline]
    pub(crate) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The first failure as an error, if any.
    pub(crate) fn fault_error(&self) -> Option<RuntimeError> {
        let f = match self.fault.lock() {
            Ok(f) => f,
            Err(p) => p.into_inner(),
        };
        f.as_ref().map(|(what, reason)| RuntimeError::Thread {
            what: what.clone(),
            reason: reason.clone(),
        })
    }

    /// After every runtime thread ended following a failure: counts what
    /// is still in flight for each client as [`DropReason::Fault`] (packets
    /// a dead thread held). The caller must be the only writer of `drops`
    /// now (the arbiter thread was joined).
    pub(crate) fn settle_after_fault(&self) {
        if !self.is_failed() {
            return;
        }
        let fault = DropReason::Fault.index();
        let s = self.stats();
        for c in &s.clients {
            if c.in_flight > 0 {
                self.drops[c.id as usize * NREASONS + fault].add(c.in_flight);
            }
        }
    }

    /// Whether shutdown began (Acquire: pairs with the SeqCst store in
    /// `Runtime::close`).
    #[inline]
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }
}
