//! Shaping decoupled from scheduling: per-flow rate limits by earliest
//! departure time (EDT) in a time-indexed cFFS, releasing packets into any
//! [`Scheduler`]. Saeed et al., "Carousel: Scalable Traffic Shaping at End
//! Hosts", SIGCOMM 2017; "Eiffel", NSDI 2019 (decoupled shaping).
//!
//! Each flow keeps `next`, the earliest time its next packet may leave. The
//! packet at the head of a flow's shaping FIFO becomes eligible at
//! `t = max(now_of_arrival, next)` if the flow was idle, or at `next` if it
//! was backlogged; releasing it sets `next = t + len × 8 / rate`. So a
//! backlogged flow sends exactly `rate` over any long interval, whatever the
//! granularity of the calls, and an idle flow banks no credit.
//!
//! Only flow heads sit in the time queue, keyed by their EDT (one entry per
//! shaped flow, so the queue holds flow ids and never grows with the
//! backlog). `dequeue(now)` first releases every head due by `now` into the
//! inner scheduler, then asks the inner scheduler. While nothing is due it
//! returns `None` and [`Scheduler::next_eligible`] reports when to come back.
//!
//! # Complexity
//! O(1) per packet: one cFFS push and one pop (plus the inner scheduler).
//! # Guarantees
//! * Rate: over `[0, T]` a permanently backlogged flow releases between
//!   `rate × T − lmax` and `rate × T + lmax` bytes (the `eiffel` tests check
//!   10 000 flows to 0.5 % over one simulated second).
//! * A packet is released at most one granularity (default 1024 ns) before
//!   its EDT, never after the first `dequeue` call at or past it.
//! * At most `capacity` packets are held in all, shaper and inner scheduler
//!   together.
//! # Deviations
//! Transmission times come from one [`Pacer`] per flow (32.32 fixed-point
//! ns per byte with the remainder carried, as in the
//! [`LinkEmulator`](crate::LinkEmulator)), so long runs lose no rate to
//! rounding; see [`crate::rate`] for the exactness and the range of rates.
//! # Flow lifecycle
//! State is sized by the table's capacity. Adding, changing and removing a
//! flow are passed to the inner scheduler too. A flow's rate follows its
//! weight (`rate per weight × weight`) on add and change when the shaper
//! was given a rate per weight ([`Shaped::with_rate_per_weight`]) for its
//! slot; otherwise the slot keeps its configured rate. A change keeps the
//! EDT already computed for the head; removing a flow purges the inner
//! scheduler's packets, then the held ones (oldest first), and forgets its
//! EDT.

use crate::rate::{Pacer, Rate};
use crate::scheduler::purged;
use crate::{
    ConfigError, DropReason, FlowError, FlowId, FlowParams, FlowTable, Instant, Packet,
    PacketQueues, Rejected, Scheduler,
};

use super::{Cffs, QueueConfig};

/// Smallest shaping rate accepted, in bit/s: [`crate::rate::MIN_RATE_BPS`].
pub const MIN_SHAPING_RATE_BPS: u64 = crate::rate::MIN_RATE_BPS;
/// Default granularity of the shaper's time queue, in ns.
pub const DEFAULT_SHAPER_GRANULARITY_NS: u64 = 1_024;

#[derive(Clone, Copy)]
struct FlowRate {
    pacer: Pacer,
    next: u64,
}

/// Per-flow EDT rate limits in front of the scheduler `S`.
///
/// # Examples
/// ```
/// use pspat_sched::eiffel::Shaped;
/// use pspat_sched::{Fifo, FlowId, FlowTable, Instant, Packet, Scheduler};
/// let flows = FlowTable::uniform(1).unwrap();
/// let inner = Fifo::new(flows.clone(), 16).unwrap();
/// // 8 Mbit/s: 1000 bytes take 1 ms.
/// let mut s = Shaped::new(inner, flows, 16, &[8_000_000], 1_024, "shaped-fifo").unwrap();
/// for i in 0..2 {
///     s.enqueue(Instant::ZERO, Packet::new(FlowId(0), 1000, i)).unwrap();
/// }
/// assert_eq!(s.dequeue(Instant::ZERO).unwrap().token, 0);
/// assert!(s.dequeue(Instant::ZERO).is_none());
/// let t = s.next_eligible(Instant::ZERO).unwrap();
/// assert!(t.as_nanos() <= 1_000_000 && t.as_nanos() > 998_000);
/// assert_eq!(s.dequeue(Instant::from_nanos(1_000_000)).unwrap().token, 1);
/// ```
pub struct Shaped<S> {
    flows: FlowTable,
    held: PacketQueues,
    timers: Cffs,
    rates: Box<[FlowRate]>,
    inner: S,
    capacity: usize,
    lost: u64,
    name: &'static str,
    /// Rate per unit of weight for slots from `derived_from` on (0: none).
    rate_per_weight: u64,
    derived_from: usize,
}

impl<S: Scheduler> Shaped<S> {
    /// Shapes each flow slot `i` of `flows` to `rates_bps[i]` bit/s in front of
    /// `inner`, holding at most `capacity` packets in all; the time queue has
    /// 3 levels of `granularity_ns` (a window of 262 144 buckets).
    ///
    /// `inner` should be able to hold `capacity` packets (it is never offered
    /// more than that).
    ///
    /// # Errors
    /// A rate outside the range of a [`Rate`] (named by flow), a rate list
    /// whose length is not the number of flow slots, a zero granularity, a
    /// capacity out of range.
    pub fn new(
        inner: S,
        flows: FlowTable,
        capacity: usize,
        rates_bps: &[u64],
        granularity_ns: u64,
        name: &'static str,
    ) -> Result<Self, ConfigError> {
        if rates_bps.len() != flows.capacity() {
            return Err(ConfigError::invalid(
                "eiffel.rates_bps",
                format!(
                    "{} rates for {} flows: give one per flow",
                    rates_bps.len(),
                    flows.capacity()
                ),
            ));
        }
        if granularity_ns == 0 {
            return Err(ConfigError::out_of_range(
                "eiffel.shaper_granularity_ns",
                0,
                "1..",
            ));
        }
        let mut rates = Vec::with_capacity(flows.capacity());
        for (i, &r) in rates_bps.iter().enumerate() {
            let rate = Rate::checked(format!("flow {i} shaping rate (bit/s)"), r)?;
            rates.push(FlowRate {
                pacer: Pacer::new(rate),
                next: 0,
            });
        }
        let cfg = QueueConfig {
            levels: 3,
            granularity: granularity_ns,
            ..QueueConfig::default()
        };
        Ok(Shaped {
            held: PacketQueues::new(flows.capacity(), capacity, None)?,
            timers: Cffs::new(cfg, flows.capacity())?,
            rates: rates.into_boxed_slice(),
            flows,
            inner,
            capacity,
            lost: 0,
            name,
            rate_per_weight: 0,
            derived_from: usize::MAX,
        })
    }

    /// Flows of slots `from_slot..` added or changed later are shaped to
    /// `bps × weight` (see the module docs); the other slots keep their
    /// configured rate.
    ///
    /// # Errors
    /// A rate below [`MIN_SHAPING_RATE_BPS`].
    pub fn with_rate_per_weight(mut self, bps: u64, from_slot: usize) -> Result<Self, ConfigError> {
        ConfigError::check_range(
            "shaping rate per unit of weight (bit/s)",
            bps,
            MIN_SHAPING_RATE_BPS..=u64::MAX,
        )?;
        self.rate_per_weight = bps;
        self.derived_from = from_slot;
        Ok(self)
    }

    /// The rate of a flow slot with `params`, if it follows the weight.
    fn derived_rate(&self, flow: FlowId, params: &FlowParams) -> Option<u64> {
        (self.rate_per_weight != 0 && flow.index() >= self.derived_from).then(|| {
            self.rate_per_weight
                .saturating_mul(u64::from(params.weight))
        })
    }

    /// The inner scheduler.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Packets the inner scheduler refused on release (0 unless `inner`
    /// holds fewer than `capacity` packets or refuses by policy).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Packets waiting for their departure time (not yet in `inner`).
    pub fn held(&self) -> usize {
        self.held.total()
    }

    /// Moves every head due by `now` into the inner scheduler.
    #[inline]
    fn release(&mut self, now: Instant) {
        let t_now = now.as_nanos();
        while let Some((f, t)) = self.timers.pop_due(t_now) {
            let fi = f as usize;
            let Some(pkt) = self.held.pop(fi) else {
                continue; // a queued flow always has a head
            };
            let r = &mut self.rates[fi];
            r.next = t.saturating_add(r.pacer.advance(pkt.len));
            let next = r.next;
            if self.inner.enqueue(now, pkt).is_err() {
                self.lost += 1;
            }
            if !self.held.is_empty(fi) {
                // Backlogged: the next head is due at `next`, even if that is
                // already past (catching up after a late call).
                let _ = self.timers.push_timed(f, next, t_now);
            }
        }
    }
}

impl<S: Scheduler> Scheduler for Shaped<S> {
    #[inline]
    fn enqueue(&mut self, now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.flows.admit(&pkt)?;
        if self.held.total() + self.inner.queued() >= self.capacity {
            return Err(Rejected {
                packet: pkt,
                reason: DropReason::QueueFull,
            });
        }
        let f = pkt.flow.index();
        self.held.push(f, pkt)?;
        if self.held.len(f) == 1 {
            let t = self.rates[f].next.max(now.as_nanos());
            // Clamping (the default) never refuses; the flow was not queued.
            let _ = self.timers.push_timed(pkt.flow.0, t, now.as_nanos());
        }
        Ok(())
    }

    #[inline]
    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        self.release(now);
        self.inner.dequeue(now)
    }

    fn queued(&self) -> usize {
        self.held.total() + self.inner.queued()
    }

    fn next_eligible(&self, now: Instant) -> Option<Instant> {
        let mine = self.timers.next_due().map(Instant::from_nanos);
        match (mine, self.inner.next_eligible(now)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.check_insert(flow, &params)?;
        self.inner.add_flow(flow, params)?;
        self.flows.insert(flow, params)?;
        let f = flow.index();
        if let Some(r) = self.derived_rate(flow, &params) {
            self.rates[f].pacer = Pacer::new(Rate::saturating(r));
        }
        self.rates[f].next = 0;
        self.rates[f].pacer.reset();
        Ok(())
    }

    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.check_update(flow, &params)?;
        self.inner.change_flow(flow, params)?;
        self.flows.update(flow, params)?;
        if let Some(r) = self.derived_rate(flow, &params) {
            self.rates[flow.index()].pacer = Pacer::new(Rate::saturating(r));
        }
        Ok(())
    }

    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        self.flows.check_present(flow)?;
        self.inner.remove_flow(flow, purge)?;
        self.flows.remove(flow)?;
        self.timers.remove(flow.0);
        let f = flow.index();
        while let Some(p) = self.held.pop(f) {
            purge(purged(p));
        }
        self.rates[f].next = 0;
        self.rates[f].pacer.reset();
        Ok(())
    }

    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        if !self.flows.contains(flow) {
            return None;
        }
        let inner = self.inner.flow_queued(flow).unwrap_or(0);
        Some(self.held.len(flow.index()) + inner)
    }
}
