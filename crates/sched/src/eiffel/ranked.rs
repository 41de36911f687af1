//! The Eiffel scheduler: per-flow FIFOs ordered by flow rank in an integer
//! priority queue. Saeed et al., "Eiffel", NSDI 2019 (the pFabric example of
//! the slides: one priority queue of flows, one FIFO per flow, the flow's
//! rank updated on enqueue and on dequeue).
//!
//! A flow is in the rank queue iff it is backlogged. When a flow becomes
//! backlogged its head is ranked by the [`RankPolicy`] and the flow is pushed;
//! `dequeue` pops the flow of lowest rank, sends its head packet and, if the
//! flow is still backlogged, ranks its new head and pushes it again (at the
//! tail of its bucket, so flows of equal rank take turns).
//!
//! # Complexity
//! Enqueue O(1); dequeue one pop and one push of the rank queue, each O(L)
//! word operations with L ≤ 4 (no comparisons, no dependence on the number of
//! flows).
//! # Guarantees
//! FIFO within a flow; the flow served is one of lowest `rank / granularity`
//! (exact when the granularity is 1 and no rank was clamped). Ranks outside
//! the queue's window are clamped, or, under
//! [`OutOfWindow::Reject`](super::OutOfWindow::Reject), refused
//! with [`DropReason::OutOfWindow`] when the flow is first ranked (a re-rank
//! after a departure always clamps: the packets are already accepted).
//! # Deviations
//! Per-packet stamps ride in a second [`PacketQueues`] kept in lock step with
//! the packet FIFOs (the `token` field carries the stamp), costing 24 bytes
//! per arena slot; `Packet` itself is unchanged. Policies with
//! [`RankPolicy::STAMPS`] `= false` (SRPT, strict priority) skip it.
//!
//! # Flow lifecycle
//! The packet and stamp queues and the rank queue are sized by the table's
//! capacity at construction; the policy follows through its lifecycle
//! hooks ([`RankPolicy::on_flow_added`] and the others), so nothing is
//! allocated later.
//! * **Add**: the policy sets up the slot (a derived deadline from the
//!   weight, a fresh SRPT run, an STFQ flow starting at V, ...). O(1).
//! * **Change**: the policy takes the new parameters; queued packets keep
//!   the stamps (deadlines, start tags) they were given on arrival, and a
//!   queued flow is re-ranked at once from its head (one rank-queue removal
//!   and push, clamped into the window), so a new priority applies to the
//!   next dequeue. The rank is computed at the time of the last `enqueue`
//!   or `dequeue`.
//! * **Remove**: the flow leaves the rank queue, its packets go to `purge`
//!   with [`DropReason::FlowRemoved`] (without
//!   [`RankPolicy::on_departure`]), and the policy forgets its state.

use crate::scheduler::purged;
use crate::{
    ConfigError, DropReason, FlowError, FlowId, FlowParams, FlowTable, Instant, Packet,
    PacketQueues, Rejected, Scheduler,
};

use super::{Cffs, Hffs, PushError, RankPolicy, RankQueue};

enum FlowQueue {
    Fixed(Hffs),
    Sliding(Cffs),
}

impl FlowQueue {
    #[inline]
    fn push(&mut self, id: u32, rank: u64, clamp: bool) -> Result<(), PushError> {
        match self {
            FlowQueue::Fixed(q) if clamp => q.push_clamped(id, rank),
            FlowQueue::Fixed(q) => q.push(id, rank),
            FlowQueue::Sliding(q) if clamp => q.push_clamped(id, rank),
            FlowQueue::Sliding(q) => q.push(id, rank),
        }
    }
    #[inline]
    fn pop(&mut self) -> Option<(u32, u64)> {
        match self {
            FlowQueue::Fixed(q) => q.pop(),
            FlowQueue::Sliding(q) => q.pop(),
        }
    }
    #[inline]
    fn set_floor(&mut self, floor: u64) {
        if let FlowQueue::Sliding(q) = self {
            q.set_floor(floor);
        }
    }
    fn remove(&mut self, id: u32) -> Option<u64> {
        match self {
            FlowQueue::Fixed(q) => q.remove(id),
            FlowQueue::Sliding(q) => q.remove(id),
        }
    }
    fn rank_of(&self, id: u32) -> Option<u64> {
        match self {
            FlowQueue::Fixed(q) => q.rank_of(id),
            FlowQueue::Sliding(q) => q.rank_of(id),
        }
    }
}

/// A [`Scheduler`] ranking flows with a [`RankPolicy`].
///
/// # Examples
/// ```
/// use pspat_sched::eiffel::{Ranked, Srpt};
/// use pspat_sched::{FlowId, FlowTable, Instant, Packet, Scheduler};
/// let flows = FlowTable::uniform(2).unwrap();
/// let srpt = Srpt::new(&flows, 1_000_000, &[]).unwrap();
/// let mut s = Ranked::new(flows, 1024, srpt).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(0), 1500, 7)).unwrap();
/// assert_eq!(s.dequeue(Instant::ZERO).map(|p| p.token), Some(7));
/// ```
pub struct Ranked<P> {
    flows: FlowTable,
    queues: PacketQueues,
    stamps: PacketQueues,
    pq: FlowQueue,
    policy: P,
    /// The time of the last `enqueue` or `dequeue`, for re-ranking a flow
    /// whose parameters change.
    now: Instant,
}

impl<P: RankPolicy> Ranked<P> {
    /// `policy` over `flows`, holding at most `capacity` packets, with the
    /// rank queue the policy asks for.
    ///
    /// # Errors
    /// A capacity out of range, or a bad queue shape from the policy.
    pub fn new(flows: FlowTable, capacity: usize, policy: P) -> Result<Self, ConfigError> {
        let shape = policy.queue();
        Self::with_queue(flows, capacity, policy, shape)
    }

    /// As [`Ranked::new`] with an explicit rank queue.
    ///
    /// # Errors
    /// A capacity out of range, levels outside 1..=4, a zero granularity.
    pub fn with_queue(
        flows: FlowTable,
        capacity: usize,
        policy: P,
        queue: RankQueue,
    ) -> Result<Self, ConfigError> {
        let n = flows.capacity();
        let pq = match queue {
            RankQueue::Fixed(c) => FlowQueue::Fixed(Hffs::new(c, n)?),
            RankQueue::Sliding(c) => FlowQueue::Sliding(Cffs::new(c, n)?),
        };
        Ok(Ranked {
            queues: PacketQueues::new(n, capacity, None)?,
            // Without stamps the second arena is never used: keep it tiny.
            stamps: PacketQueues::new(n, if P::STAMPS { capacity } else { 1 }, None)?,
            flows,
            pq,
            policy,
            now: Instant::ZERO,
        })
    }

    /// The policy.
    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// The current rank of `flow`, if it is backlogged.
    pub fn rank_of(&self, flow: FlowId) -> Option<u64> {
        self.pq.rank_of(flow.0)
    }
}

impl<P: RankPolicy> Scheduler for Ranked<P> {
    #[inline]
    fn enqueue(&mut self, now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.flows.admit(&pkt)?;
        self.now = now;
        let f = pkt.flow.index();
        self.queues.push(f, pkt)?;
        let stamp = self.policy.on_arrival(now, &pkt);
        if P::STAMPS {
            // Same arena size and the same push/pop sequence: cannot refuse.
            let _ = self.stamps.push(f, Packet::new(pkt.flow, 1, stamp));
        }
        if let Some(floor) = self.policy.rank_floor(now) {
            self.pq.set_floor(floor);
        }
        if self.queues.len(f) == 1 {
            let rank = self.policy.rank(now, &pkt, stamp);
            if self.pq.push(pkt.flow.0, rank, false).is_err() {
                self.queues.pop(f);
                if P::STAMPS {
                    self.stamps.pop(f);
                }
                return Err(Rejected {
                    packet: pkt,
                    reason: DropReason::OutOfWindow,
                });
            }
        } else if let Some(current) = self.pq.rank_of(pkt.flow.0) {
            if let Some(rank) = self.policy.rerank_on_arrival(now, &pkt, current) {
                self.pq.remove(pkt.flow.0);
                let _ = self.pq.push(pkt.flow.0, rank, true);
            }
        }
        Ok(())
    }

    #[inline]
    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        self.now = now;
        if let Some(floor) = self.policy.rank_floor(now) {
            self.pq.set_floor(floor);
        }
        let (f, _) = self.pq.pop()?;
        let fi = f as usize;
        // Invariant: a queued flow is backlogged.
        let pkt = self.queues.pop(fi)?;
        let stamp = if P::STAMPS {
            self.stamps.pop(fi).map_or(0, |s| s.token)
        } else {
            0
        };
        self.policy.on_departure(now, &pkt, stamp);
        if let Some(head) = self.queues.front(fi) {
            let hs = if P::STAMPS {
                self.stamps.front(fi).map_or(0, |s| s.token)
            } else {
                0
            };
            let rank = self.policy.rank(now, head, hs);
            // Clamping never refuses and `f` was just popped.
            let _ = self.pq.push(f, rank, true);
        }
        Some(pkt)
    }

    fn queued(&self) -> usize {
        self.queues.total()
    }

    fn name(&self) -> &'static str {
        self.policy.name()
    }

    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.insert(flow, params)?;
        self.policy.on_flow_added(flow, &params);
        Ok(())
    }

    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.update(flow, params)?;
        self.policy.on_flow_changed(flow, &params);
        let f = flow.index();
        if self.pq.rank_of(flow.0).is_some() {
            if let Some(head) = self.queues.front(f).copied() {
                let stamp = if P::STAMPS {
                    self.stamps.front(f).map_or(0, |s| s.token)
                } else {
                    0
                };
                let rank = self.policy.rank(self.now, &head, stamp);
                self.pq.remove(flow.0);
                // Clamping never refuses and `flow` was just removed.
                let _ = self.pq.push(flow.0, rank, true);
            }
        }
        Ok(())
    }

    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        self.flows.remove(flow)?;
        self.pq.remove(flow.0);
        let f = flow.index();
        while let Some(p) = self.queues.pop(f) {
            purge(purged(p));
        }
        while self.stamps.pop(f).is_some() {}
        self.policy.on_flow_removed(flow);
        Ok(())
    }

    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        self.flows
            .contains(flow)
            .then(|| self.queues.len(flow.index()))
    }
}
