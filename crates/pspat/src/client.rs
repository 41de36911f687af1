//! Client handles: a private mailbox, a private descriptor pool and, in
//! client-transmit mode, a grant mailbox and a backend (\[J\] §3.1; \[E\] §3).
//!
//! # Submit path
//! Validate, take a descriptor (a bit of a local free bitmap), write its
//! cookie and `(flow, len)` (skipped when nobody reads them: the arbiter
//! transmits to a backend that wants no cookies), count it submitted, push one 64-bit slot
//! `desc << 40 | flow << 16 | len` (non-zero since len >= 1), then one
//! `fence(SeqCst)`, one load of the list's `last` hint and one load of the
//! arbiter's `sleeping` flag (see [`crate::runtime`] for why the fence).
//! [`Client::submit_burst`] pays the fence once per burst. No allocation.
//!
//! # Descriptor recycling
//! Transmitters return descriptors by `fetch_or`-ing bits into the owner's
//! `done` bitmap, aggregated per round or batch (one RMW per client and
//! 64-descriptor word, not per packet). The owner refills its local free
//! bitmap from `done` only when the local one is empty: a few word swaps
//! per `descriptors_per_client` packets. In client-transmit mode the arbiter
//! returns grants and drops through the client's grant mailbox instead, and
//! the client recycles locally.
//!
//! # Guarantees
//! * `submit` never blocks: a full mailbox or an exhausted pool fails at
//!   once and hands the packet back ([`SubmitError::Full`]).
//! * An arbiter drop is reported on the next submit
//!   ([`crate::BackpressurePolicy`]).
//! * Packets of one client and flow are transmitted in submission order.

use std::num::NonZeroU64;
use std::sync::Arc;

use pspat_mailbox::{Consumer, Producer};
use pspat_sched::FlowId;

use crate::runtime::{ClientShared, Shared};
use crate::sync::{fence, Ordering};
use crate::{BackpressurePolicy, SubmitError, TxBackend, TxPacket};

/// Flow ids must be below this to fit the slot (24 bits).
pub const MAX_FLOW_ID: u32 = 1 << 24;

/// One packet offered to [`Client::submit`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Submission {
    /// Flow (class) the packet was classified into, < 2^24.
    pub flow: FlowId,
    /// Length in bytes, 1..=65535.
    pub len: u32,
    /// Opaque value handed to the backend with the packet.
    pub cookie: u64,
}

/// Outcome of an accepted submit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accepted {
    /// The arbiter dropped at least one earlier packet of this client since
    /// the last report ([`BackpressurePolicy::ReportOnly`]).
    pub drop_reported: bool,
}

/// Outcome of [`Client::submit_burst`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Burst {
    /// Packets accepted: a prefix of the burst.
    pub accepted: usize,
    /// As [`Accepted::drop_reported`].
    pub drop_reported: bool,
    /// Why the first refused packet was refused (it is handed back).
    pub error: Option<SubmitError>,
}

const CPU_REFRESH: u32 = 64;
const GRANT_FLAG: u64 = 1 << 63;
const DROPPED_FLAG: u64 = 1 << 62;

#[inline]
pub(crate) fn encode_slot(desc: u32, flow: u32, len: u32) -> NonZeroU64 {
    let v = (u64::from(desc) << 40) | (u64::from(flow) << 16) | u64::from(len);
    // len is 1..=65535 (checked in `submit`), so v != 0.
    NonZeroU64::new(v).unwrap_or(NonZeroU64::MIN)
}

#[inline]
pub(crate) fn decode_slot(v: NonZeroU64) -> (u32, u32, u32) {
    let v = v.get();
    (
        (v >> 40) as u32,
        ((v >> 16) & 0xff_ffff) as u32,
        (v & 0xffff) as u32,
    )
}

#[inline]
pub(crate) fn encode_grant(desc: u32, dropped: bool) -> NonZeroU64 {
    let v = GRANT_FLAG | if dropped { DROPPED_FLAG } else { 0 } | u64::from(desc);
    NonZeroU64::new(v).unwrap_or(NonZeroU64::MIN)
}

/// A client: submits packets to the arbiter through its private mailbox.
/// `Send`, not `Sync`: one thread submits.
///
/// Dropping it retires its mailbox once the arbiter drained it; packets
/// already submitted are still transmitted. In client-transmit mode the drop
/// first waits until every packet of this client was granted and sent.
pub struct Client<B: TxBackend> {
    rt: Arc<Shared>,
    shared: Arc<ClientShared>,
    producer: Option<Producer<NonZeroU64>>,
    free: Box<[u64]>,
    cursor: usize,
    submitted: u64,
    list: usize,
    cpu_countdown: u32,
    policy: BackpressurePolicy,
    grants: Option<Consumer<NonZeroU64>>,
    backend: Option<B>,
    batch: Vec<TxPacket>,
    outstanding: u64,
    slots: Vec<NonZeroU64>,
}

impl<B: TxBackend> Client<B> {
    pub(crate) fn new(
        rt: Arc<Shared>,
        shared: Arc<ClientShared>,
        producer: Producer<NonZeroU64>,
        grants: Option<Consumer<NonZeroU64>>,
        backend: Option<B>,
    ) -> Self {
        let words = shared.descs.len() / 64;
        let policy = rt.cfg.backpressure;
        let batch_cap = if grants.is_some() {
            shared.descs.len()
        } else {
            0
        };
        Client {
            rt,
            shared,
            producer: Some(producer),
            free: vec![u64::MAX; words].into_boxed_slice(),
            cursor: 0,
            submitted: 0,
            list: 0,
            cpu_countdown: 0,
            policy,
            grants,
            backend,
            batch: Vec::with_capacity(batch_cap),
            outstanding: 0,
            slots: Vec::with_capacity(64),
        }
    }

    /// This client's id (index in [`crate::Stats::clients`]).
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    /// Submits one packet.
    ///
    /// # Errors
    /// [`SubmitError`], handing the packet back: mailbox or descriptor pool
    /// full, invalid flow or length, or (under
    /// [`BackpressurePolicy::RejectNext`]) an earlier drop to report.
    #[inline]
    pub fn submit(&mut self, s: Submission) -> Result<Accepted, SubmitError> {
        let b = self.submit_burst(std::slice::from_ref(&s));
        match b.error {
            Some(e) => Err(e),
            None => Ok(Accepted {
                drop_reported: b.drop_reported,
            }),
        }
    }

    /// Submits a prefix of `subs` with one fence and one announcement check;
    /// stops at the first refused packet.
    pub fn submit_burst(&mut self, subs: &[Submission]) -> Burst {
        if self.grants.is_some() {
            self.drain();
        }
        let mut out = Burst {
            accepted: 0,
            drop_reported: false,
            error: None,
        };
        let Some(producer) = self.producer.as_mut() else {
            return out;
        };
        if producer.take_backpressure() {
            match self.policy {
                BackpressurePolicy::ReportOnly => out.drop_reported = true,
                BackpressurePolicy::RejectNext => {
                    if let Some(s) = subs.first() {
                        out.error = Some(SubmitError::DroppedEarlier(*s));
                    }
                    return out;
                }
            }
        }
        let write_descs = self.rt.write_descs;
        let mut i = 0;
        while i < subs.len() && out.error.is_none() {
            self.slots.clear();
            let chunk = &subs[i..subs.len().min(i + 64)];
            for s in chunk {
                if s.flow.0 >= MAX_FLOW_ID || s.len == 0 || s.len > 65_535 {
                    out.error = Some(SubmitError::Invalid(*s));
                    break;
                }
                let Some(desc) = alloc(&mut self.free, &mut self.cursor, &self.shared) else {
                    out.error = Some(SubmitError::Full(*s));
                    break;
                };
                if write_descs {
                    let d = &self.shared.descs[desc as usize];
                    // Relaxed: published by the Release push of the slot
                    // below, which every reader of the descriptor acquires
                    // first.
                    d.cookie.store(s.cookie, Ordering::Relaxed);
                    d.meta.store(
                        (u64::from(s.flow.0) << 32) | u64::from(s.len),
                        Ordering::Relaxed,
                    );
                }
                self.slots.push(encode_slot(desc, s.flow.0, s.len));
            }
            let n = self.slots.len();
            if n == 0 {
                break;
            }
            // Counted before the push (see `stats`): a snapshot may see the
            // packet in flight, never transmitted-but-not-submitted.
            self.shared.submitted.set(self.submitted + n as u64);
            let pushed = producer.push_batch(&self.slots);
            self.submitted += pushed as u64;
            if pushed < n {
                self.shared.submitted.set(self.submitted);
                for v in &self.slots[pushed..] {
                    let (desc, _, _) = decode_slot(*v);
                    self.free[desc as usize / 64] |= 1 << (desc % 64);
                }
                if out.error.is_none() {
                    out.error = Some(SubmitError::Full(chunk[pushed]));
                }
            }
            if self.grants.is_some() {
                self.outstanding += pushed as u64;
            }
            out.accepted += pushed;
            i += pushed;
            if pushed < n {
                break;
            }
        }
        if out.accepted > 0 {
            self.after_push();
        }
        out
    }

    /// Announce if needed, and kick a sleeping arbiter.
    #[inline]
    fn after_push(&mut self) {
        // Pairs with the arbiter's fences (retire handshake, pre-sleep
        // rescan): see the module docs of `runtime`.
        fence(Ordering::SeqCst);
        if self.cpu_countdown == 0 {
            self.cpu_countdown = CPU_REFRESH;
            self.list = crate::sys::current_cpu() % self.rt.lists.len();
        }
        self.cpu_countdown -= 1;
        let id = self.shared.id;
        let list = &self.rt.lists[self.list];
        // Relaxed: after the SeqCst fence above (module docs of `runtime`).
        if list.last.load(Ordering::Relaxed) != id {
            self.announce();
        }
        self.rt.kick_arbiter();
    }

    fn announce(&self) {
        let id = self.shared.id;
        let list = &self.rt.lists[self.list];
        // The hint first, then the bit: an arbiter that acquires the bit
        // (Acquire swap of the word) also sees `last = id`, so its retire
        // `swap` of `last` comes after ours in modification order and resets
        // it (see the handshake in the `runtime` module docs).
        list.last.store(id, Ordering::SeqCst);
        // SeqCst (Release suffices for the data): pairs with the arbiter's
        // Acquire swap of the word, which then sees our pushes and, after a
        // drop, the abandoned mailbox.
        list.announced[id as usize / 64].fetch_or(1 << (id % 64), Ordering::SeqCst);
    }

    /// Client-transmit mode: transmits every packet the arbiter granted so
    /// far and recycles dropped ones; returns how many were transmitted.
    /// In dispatcher mode it does nothing.
    pub fn drain(&mut self) -> usize {
        let Some(grants) = self.grants.as_mut() else {
            return 0;
        };
        let mut got = false;
        while let Some(g) = grants.pop() {
            got = true;
            let g = g.get();
            let desc = (g & 0xffff_ffff) as u32;
            if g & DROPPED_FLAG == 0 {
                let d = &self.shared.descs[desc as usize];
                // Relaxed: our own stores.
                let meta = d.meta.load(Ordering::Relaxed);
                self.batch.push(TxPacket {
                    client: self.shared.id,
                    flow: FlowId((meta >> 32) as u32),
                    len: meta as u32,
                    cookie: d.cookie.load(Ordering::Relaxed),
                });
            }
            self.free[desc as usize / 64] |= 1 << (desc % 64);
            self.outstanding -= 1;
        }
        if !got {
            return 0;
        }
        grants.release();
        let n = self.batch.len();
        if n > 0 {
            if let Some(b) = self.backend.as_mut() {
                b.transmit(self.rt.clock.now(), &self.batch);
            }
            let bytes: u64 = self.batch.iter().map(|p| u64::from(p.len)).sum();
            self.shared.self_tx.packets.add(n as u64);
            self.shared.self_tx.bytes.add(bytes);
            self.batch.clear();
        }
        n
    }

    /// Packets of this client not yet transmitted or dropped, as far as the
    /// client knows (client-transmit mode; 0 in dispatcher mode).
    pub fn outstanding(&self) -> u64 {
        self.outstanding
    }

    /// The runtime clock's time now (for timestamp cookies).
    pub fn now(&self) -> pspat_sched::Instant {
        self.rt.clock.now()
    }

    /// Retires the client like `drop` and returns its backend
    /// (client-transmit mode) after every packet left.
    pub fn into_backend(mut self) -> Option<B> {
        self.retire();
        self.backend.take()
    }

    fn retire(&mut self) {
        if self.producer.is_none() {
            return;
        }
        while self.grants.is_some() && self.outstanding > 0 {
            if self.drain() == 0 {
                std::thread::yield_now();
            }
        }
        // Dropping the producer marks the mailbox abandoned (Release); the
        // announcement below is ordered after it.
        self.producer = None;
        fence(Ordering::SeqCst);
        self.announce();
        self.rt.kick_arbiter();
        // SeqCst: after the announcement; pairs with the arbiter's load in
        // `can_exit`.
        self.rt.live_clients.fetch_sub(1, Ordering::SeqCst);
        self.rt.kick_arbiter_force();
    }
}

impl<B: TxBackend> Drop for Client<B> {
    fn drop(&mut self) {
        self.retire();
    }
}

/// Takes a free descriptor: local bitmap first, then the `done` words.
#[inline]
fn alloc(free: &mut [u64], cursor: &mut usize, shared: &ClientShared) -> Option<u32> {
    let words = free.len();
    for pass in 0..2 {
        for _ in 0..words {
            let w = free[*cursor];
            if w != 0 {
                let bit = w.trailing_zeros();
                free[*cursor] = w & (w - 1);
                return Some((*cursor * 64) as u32 + bit);
            }
            *cursor += 1;
            if *cursor == words {
                *cursor = 0;
            }
        }
        if pass == 0 {
            let mut any = false;
            for (f, d) in free.iter_mut().zip(shared.done.iter()) {
                // Relaxed peek; the swap below is Acquire.
                if d.load(Ordering::Relaxed) != 0 {
                    // Acquire: pairs with the transmitters' Release
                    // `fetch_or`, made after they read the descriptor.
                    *f |= d.swap(0, Ordering::Acquire);
                    any = true;
                }
            }
            if !any {
                return None;
            }
        }
    }
    None
}

impl Shared {
    /// Wakes the arbiter unconditionally (client exit, shutdown).
    pub(crate) fn kick_arbiter_force(&self) {
        self.arbiter_sleeping.store(false, Ordering::SeqCst);
        if let Some(t) = self.arbiter_thread.get() {
            t.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_round_trips_at_the_field_limits() {
        for (d, f, l) in [
            (0, 0, 1),
            ((1 << 24) - 1, MAX_FLOW_ID - 1, 65_535),
            (5, 7, 60),
        ] {
            assert_eq!(decode_slot(encode_slot(d, f, l)), (d, f, l));
        }
    }

    #[test]
    fn grants_carry_the_descriptor_and_the_drop_flag() {
        let g = encode_grant(42, true).get();
        assert_eq!(g & 0xffff_ffff, 42);
        assert_ne!(g & DROPPED_FLAG, 0);
        assert_eq!(encode_grant(42, false).get() & DROPPED_FLAG, 0);
    }
}
