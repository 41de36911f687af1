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
//! # Client-transmit mode
//! The arbiter grants; the client transmits its granted packets in
//! [`Client::drain`], which the caller calls: [`Client::wait_for_room`]
//! (the answer to [`SubmitError::Full`]) and dropping the client call it
//! too. `submit` never does: it would then take as long as the backend's
//! `transmit` (a slow or blocked backend would block the submit), which an
//! earlier version did.
//!
//! # Guarantees
//! * `submit` never blocks and never calls a backend: it takes no lock,
//!   waits for nothing, and a full mailbox or an exhausted pool fails at
//!   once and hands the packet back ([`SubmitError::Full`]). Its cost is
//!   bounded by the burst's length (one fence per burst, at most one
//!   announcement).
//! * An arbiter drop is reported on the next submit
//!   ([`crate::BackpressurePolicy`]).
//! * Packets of one client and flow are transmitted in submission order.

use std::num::NonZeroU64;
use std::sync::Arc;

use pspat_mailbox::{publish_fence, Consumer, FreeDescriptors, Producer};
use pspat_sched::FlowId;

use crate::shared::{ClientShared, Shared};
use crate::stats::panic_text;
use crate::sync::Ordering;
use crate::token::{ClientSlot, Grant, MAX_FLOW_ID};
use crate::{BackpressurePolicy, SubmitError, TxBackend, TxPacket};

/// One packet offered to [`Client::submit`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Submission {
    /// Flow (class) the packet was classified into, < 2^24.
    pub flow: FlowId,
    /// Length in bytes, 1..=65535.
    pub len: u32,
    /// Opaque value handed to the backend with the packet.
    pub cookie: u64,
    /// Whether the packet is ECN-capable (its IP header's ECN field is not
    /// zero): a pipe whose RED has `ecn` marks it Congestion Experienced
    /// ([`crate::TxPacket::ce`]) where it would drop one that is not.
    pub ect: bool,
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
    free: FreeDescriptors,
    submitted: u64,
    list: usize,
    cpu_countdown: u32,
    policy: BackpressurePolicy,
    grants: Option<Consumer<NonZeroU64>>,
    backend: Option<B>,
    batch: Vec<TxPacket>,
    outstanding: u64,
    slots: Vec<NonZeroU64>,
    /// The backend panicked once: it is never called again.
    failed: bool,
    /// The slot [`Client::next_slot`] named: the next accepted packet takes
    /// it (in client-transmit mode a drain may free lower slots first).
    peeked: Option<u32>,
    /// How long the last [`Client::wait_for_room`] waited: a slow link's
    /// next wait starts with a long sleep instead of yielding.
    last_wait: std::time::Duration,
    /// Descriptors per second that came back during the last wait, if it
    /// was a slow one (over a millisecond); 0 otherwise.
    return_rate: f64,
    /// Under [`BackpressurePolicy::ReportOnly`]: the arbiter dropped a
    /// packet and no accepted submit has said so yet. The mailbox's flag is
    /// taken into this field, and only an accepted submit clears it, so a
    /// submit refused as `Full` does not swallow the report.
    drop_report_pending: bool,
}

impl<B: TxBackend> Client<B> {
    pub(crate) fn new(
        rt: Arc<Shared>,
        shared: Arc<ClientShared>,
        producer: Producer<NonZeroU64>,
        grants: Option<Consumer<NonZeroU64>>,
        backend: Option<B>,
    ) -> Self {
        let policy = rt.cfg.backpressure;
        let batch_cap = if grants.is_some() {
            shared.descs.len()
        } else {
            0
        };
        // A reused slot's counter goes on from where its last client left
        // it (single writer: that client is gone).
        let submitted = shared.submitted.read();
        Client {
            rt,
            free: FreeDescriptors::new(shared.descs.len()),
            shared,
            producer: Some(producer),
            submitted,
            list: 0,
            cpu_countdown: 0,
            policy,
            drop_report_pending: false,
            grants,
            backend,
            batch: Vec::with_capacity(batch_cap),
            outstanding: 0,
            slots: Vec::with_capacity(64),
            failed: false,
            peeked: None,
            last_wait: std::time::Duration::ZERO,
            return_rate: 0.0,
        }
    }

    /// This client's id (its [`crate::ClientStats::id`]). Unique among
    /// the clients present; reused after a client departed.
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    /// The descriptor slot (`0..descriptors_per_client`) the next accepted
    /// packet of this client will travel in, or `None` while every slot is
    /// in flight.
    ///
    /// This lets a client keep each packet's bytes in a buffer tied to its
    /// slot ("frames are descriptors", as in the packet I/O crate): write
    /// the packet into buffer `slot`, then submit it (usually with the slot
    /// in its cookie). The next accepted packet of [`Client::submit`] or the
    /// first of [`Client::submit_burst`] takes exactly this slot; a refused
    /// submit leaves it free (ask `next_slot` again before the next try:
    /// in client-transmit mode a drain may have freed others). Nobody else
    /// touches that slot until the packet was transmitted (the backend's
    /// `transmit` returned) or dropped, and the client's next use of the
    /// slot happens-after whatever the transmitter did.
    ///
    /// # Examples
    /// ```
    /// use pspat::{NullTx, Runtime, RuntimeConfig, Submission};
    /// use pspat_sched::{AlgKind, FlowId, FlowTable, SchedulerConfig};
    /// let sched = SchedulerConfig::new(AlgKind::Fifo).build(FlowTable::uniform(1).unwrap()).unwrap();
    /// let rt = Runtime::start(RuntimeConfig::default(), sched, |_| NullTx::new()).unwrap();
    /// let mut c = rt.client().unwrap();
    /// let slot = c.next_slot().unwrap();
    /// // ... write the packet into this client's buffer `slot` ...
    /// c.submit(Submission { flow: FlowId(0), len: 60, cookie: u64::from(slot), ect: false }).unwrap();
    /// drop(c);
    /// assert_eq!(rt.shutdown().unwrap().stats.transmitted, 1);
    /// ```
    #[inline]
    pub fn next_slot(&mut self) -> Option<u32> {
        if let Some(d) = self.peeked {
            return Some(d);
        }
        self.peeked = self.free.peek(&self.shared.returned);
        self.peeked
    }

    /// Submits one packet. Never blocks and never calls the backend (in
    /// client-transmit mode granted packets wait for [`Client::drain`]).
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
        let mut out = Burst {
            accepted: 0,
            drop_reported: false,
            error: None,
        };
        let Some(producer) = self.producer.as_mut() else {
            return out;
        };
        if self.rt.is_closing() {
            out.error = subs.first().map(|s| SubmitError::Closed(*s));
            return out;
        }
        if producer.take_backpressure() {
            match self.policy {
                BackpressurePolicy::ReportOnly => self.drop_report_pending = true,
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
                let peeked = self.peeked.take().filter(|&d| self.free.take(d));
                let Some(desc) = peeked.or_else(|| self.free.alloc(&self.shared.returned)) else {
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
                self.slots.push(
                    ClientSlot {
                        desc,
                        flow: s.flow,
                        len: s.len,
                        ect: s.ect,
                    }
                    .encode(),
                );
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
                    self.free.free(ClientSlot::decode(*v).desc);
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
            out.drop_reported = std::mem::take(&mut self.drop_report_pending);
            self.after_push();
        }
        out
    }

    /// Announce if needed, and kick a sleeping arbiter.
    #[inline]
    fn after_push(&mut self) {
        // Pairs with the arbiter's fences (retire handshake, pre-sleep
        // rescan): see `pspat_mailbox::client_list` and `parker`.
        publish_fence();
        if self.cpu_countdown == 0 {
            self.cpu_countdown = crate::sys::CPU_REFRESH;
            self.list = crate::sys::current_cpu() % self.rt.lists.len();
        }
        self.cpu_countdown -= 1;
        self.rt.lists[self.list].announce_if_needed(self.shared.id);
        self.rt.arbiter.kick();
    }

    /// Client-transmit mode: transmits every packet the arbiter granted so
    /// far and recycles dropped ones; returns how many were transmitted.
    /// It calls the backend (once, with every granted packet), so it takes
    /// as long as the backend does. Call it regularly (or
    /// [`Client::wait_for_room`] after a `Full`): granted packets wait for
    /// it and their descriptors are free again only after it. In dispatcher
    /// mode it does nothing.
    pub fn drain(&mut self) -> usize {
        let Some(grants) = self.grants.as_mut() else {
            return 0;
        };
        let mut got = false;
        while let Some(g) = grants.pop() {
            got = true;
            let Grant {
                desc,
                dropped,
                marks,
            } = Grant::decode(g);
            if !dropped {
                let d = &self.shared.descs[desc as usize];
                // Relaxed: our own stores.
                let meta = d.meta.load(Ordering::Relaxed);
                self.batch.push(TxPacket {
                    client: self.shared.id,
                    flow: FlowId((meta >> 32) as u32),
                    len: meta as u32,
                    cookie: d.cookie.load(Ordering::Relaxed),
                    copies: marks.copies,
                    corrupt: marks.corrupt,
                    ce: marks.ce,
                });
            }
            self.free.free(desc);
            self.outstanding -= 1;
        }
        if !got {
            return 0;
        }
        grants.release();
        let n = self.batch.len();
        if n == 0 {
            return 0;
        }
        if let (Some(b), false) = (self.backend.as_mut(), self.failed) {
            let (now, batch) = (self.rt.clock.now(), &self.batch);
            let sent =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.transmit(now, batch)));
            if let Err(p) = sent {
                // Contained: the runtime fails and closes, this client's
                // next submit gets `Closed`, and the backend is not called
                // again (not even by `drop`).
                self.failed = true;
                self.rt.fail(
                    format!("client {}'s backend", self.shared.id),
                    panic_text(&*p),
                );
            }
        }
        if self.failed {
            self.shared.self_tx.faulted.add(n as u64);
            self.batch.clear();
            return 0;
        }
        let bytes: u64 = self.batch.iter().map(|p| u64::from(p.len)).sum();
        self.shared.self_tx.packets.add(n as u64);
        self.shared.self_tx.bytes.add(bytes);
        self.batch.clear();
        n
    }

    /// Descriptors of this client in flight now: packets submitted and not
    /// yet transmitted or dropped (it takes back the returned descriptors
    /// first). 0 means every packet this client submitted has left, so a
    /// flow may move to another link without being reordered
    /// ([`crate::node`]).
    pub fn in_flight(&mut self) -> usize {
        self.free.descriptors() - self.free.take_back(&self.shared.returned)
    }

    /// Packets of this client not yet transmitted or dropped, as far as the
    /// client knows (client-transmit mode; 0 in dispatcher mode).
    pub fn outstanding(&self) -> u64 {
        self.outstanding
    }

    /// Waits until submits can go on: the mailbox has room and a batch of
    /// descriptors is free (a sixteenth of the pool, at most 64; a quarter
    /// of the pool after a slow wait, see below), or the runtime is
    /// closing, or `timeout` passed. Returns whether there is room now.
    ///
    /// Call it after [`SubmitError::Full`] instead of spinning. Like a
    /// socket's send low-water mark, waiting for a batch rather than one
    /// descriptor lets a client behind a slow or shaped link wake once per
    /// batch of released packets instead of once per packet. A wait first
    /// yields the core once, whatever the link: when other threads share
    /// the core, the yield lasts until they have run, and the descriptors
    /// usually come back meanwhile (with 1000 clients on one core a timed
    /// sleep here cost a futex call, a timer and a wake-up per turn: about
    /// 17 µs of core time per turn against 10 µs with the yield, measured
    /// on a 2-vCPU AMD EPYC guest). Then it yields for up to
    /// 100 µs in all (a fast link returns descriptors a round at a time,
    /// within microseconds), then sleeps: the first sleep
    /// 50 µs, each next one as long as the descriptors' return rate seen so
    /// far says the batch needs (doubling while nothing came back), between
    /// 50 µs and 20 ms.
    ///
    /// A client whose previous wait lasted over a millisecond (a slow link)
    /// waits for a quarter of its pool instead (never fewer than the batch
    /// above): the other three quarters keep the scheduler busy for at
    /// least three times as long as the wait, so the link does not run
    /// dry, and its waits, with the kicks of the arbiter that follow them,
    /// come a quarter as often. It yields only the once and first sleeps
    /// as long as the rate its descriptors came back at during that wait
    /// says the usual batch (a sixteenth of the pool) needs, an eighth more
    /// (three quarters of that wait when no rate was measured), so a wait
    /// that was slow only by a hiccup costs no longer a sleep; each later
    /// sleep, sized by the rate seen since the last one, takes the same
    /// eighth; these sleeps last at most 100 ms. The rate counts the
    /// descriptors that came back over the whole wait, oversleep included,
    /// so a late wake-up does not lengthen the next sleep. So a client with
    /// 1024 descriptors behind a 1 Mbit/s link wakes about 16 times a second
    /// at 60-byte packets (29 when it waited for 64, 83 with shorter sleeps
    /// per batch), not once per packet. In
    /// client-transmit mode it also transmits granted packets while it
    /// waits.
    pub fn wait_for_room(&mut self, timeout: std::time::Duration) -> bool {
        use std::time::Duration;
        const YIELD_FOR: Duration = Duration::from_micros(100);
        const MIN_STEP: Duration = Duration::from_micros(50);
        const MAX_STEP: Duration = Duration::from_millis(20);
        // The longest sleep behind a slow link, whose length comes from a
        // measured return rate rather than from doubling.
        const MAX_RATE_STEP: Duration = Duration::from_millis(100);
        // A sleep sized by a return rate is an eighth longer than the rate
        // says, so that one wake-up usually finds the batch back.
        const MARGIN: f64 = 9.0 / 8.0;
        const SLOW: Duration = Duration::from_millis(1);
        let start = std::time::Instant::now();
        let slow = self.last_wait > SLOW;
        let batch = pspat_mailbox::return_batch(self.free.descriptors());
        let want = if slow {
            slow_return_batch(self.free.descriptors())
        } else {
            batch
        };
        let yield_for = if slow { Duration::ZERO } else { YIELD_FOR };
        let mut step = if slow {
            (self.last_wait * 3 / 4).clamp(MIN_STEP, MAX_STEP)
        } else {
            MIN_STEP
        };
        let mut slept: Option<(std::time::Instant, usize)> = None;
        let mut yielded = false;
        let mut free_at_start: Option<usize> = None;
        loop {
            if self.grants.is_some() {
                self.drain();
            }
            let free = self.free.take_back(&self.shared.returned);
            let first_free = *free_at_start.get_or_insert(free);
            let room = self.producer.as_ref().is_some_and(|p| !p.is_full()) && free >= want;
            let waited = start.elapsed();
            if room || waited >= timeout || self.rt.is_closing() {
                self.last_wait = waited;
                // Came back over the whole wait, oversleep included: the
                // rate is not lengthened by a late wake-up.
                self.return_rate = match free.checked_sub(first_free) {
                    Some(got) if got > 0 && waited > SLOW => got as f64 / waited.as_secs_f64(),
                    _ => 0.0,
                };
                return room;
            }
            if !yielded || waited < yield_for {
                yielded = true;
                std::thread::yield_now();
                continue;
            }
            if let Some((since, before)) = slept {
                // Sleep as long as the return rate seen over the last sleep
                // says the rest of the batch needs; double while none came.
                step = match free.checked_sub(before).filter(|&got| got > 0) {
                    Some(got) => since
                        .elapsed()
                        .mul_f64((want - free.min(want)) as f64 / got as f64 * MARGIN),
                    None => step * 2,
                }
                .clamp(MIN_STEP, if slow { MAX_RATE_STEP } else { MAX_STEP });
            } else if slow && self.return_rate > 0.0 {
                // The first sleep behind a slow link: as long as the last
                // wait's return rate says the first batch needs, not the
                // quarter of the pool, so that a wait that was slow only
                // by a hiccup (a fast link whose arbiter lost its core for
                // a while) costs no longer a sleep than before.
                let missing = batch.saturating_sub(free) as f64;
                step = Duration::from_secs_f64(missing / self.return_rate * MARGIN)
                    .clamp(MIN_STEP, MAX_RATE_STEP);
            }
            slept = Some((std::time::Instant::now(), free));
            std::thread::park_timeout(step.min(timeout - waited));
        }
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
        // Acquire on `arbiter_done`: pairs with the Release store of an
        // arbiter that ended (or died): no grant comes any more.
        while self.grants.is_some()
            && self.outstanding > 0
            && !self.rt.arbiter_done.load(Ordering::Acquire)
        {
            if self.drain() == 0 {
                std::thread::yield_now();
            }
        }
        // Dropping the producer marks the mailbox abandoned (Release); the
        // announcement below is ordered after it.
        self.producer = None;
        publish_fence();
        self.rt.lists[self.list].announce(self.shared.id);
        self.rt.arbiter.kick();
        // SeqCst: after the announcement; pairs with the arbiter's load in
        // `can_exit`.
        self.rt.live_clients.fetch_sub(1, Ordering::SeqCst);
        self.rt.arbiter.kick_force();
        // Last: every descriptor this handle holds goes home (Release), after
        // its final announcement, so that a slot found with every
        // descriptor home can be handed on (see the `shared` module).
        self.peeked = None;
        self.free.give_back_all(&self.shared.returned);
        crate::runtime::client_left(&self.rt, self.shared.id);
    }
}

impl<B: TxBackend> Drop for Client<B> {
    fn drop(&mut self) {
        self.retire();
    }
}

/// How many free descriptors [`Client::wait_for_room`] waits for after a
/// slow wait (over a millisecond): a quarter of the pool, never fewer than
/// [`pspat_mailbox::return_batch`].
fn slow_return_batch(descriptors: usize) -> usize {
    (descriptors / 4).max(pspat_mailbox::return_batch(descriptors))
}
