//! Quick Fair Queueing. Checconi, Rizzo, Valente, "QFQ: Efficient Packet
//! Scheduling With Tight Guarantees", IEEE/ACM ToN 21(3), 2013; structured
//! as dummynet's `dn_sched_qfq.c` (docs/REFERENCE.md §4.5).
//!
//! An O(1) approximation of WF²Q+: each flow's tags are exact (its finish
//! tag is folded into the next start tag when its packet is served), but
//! flows are sorted only coarsely. A flow goes to group
//! i = max(0, ⌈log₂(lmax·2⁴⁰/w)⌉ − [`MIN_SLOT_SHIFT`]); group i buckets its
//! flows by start tag rounded down to σ_i = 2^(MIN_SLOT_SHIFT + i), and the
//! groups themselves are ordered by four bitmaps (ER, IR, EB, IB) that
//! find-first-set scans. See `engine.rs` for the machinery.
//!
//! # Complexity
//! O(1) per enqueue and dequeue, independent of the number of flows: a
//! handful of bit operations on u64/u32 bitmaps and one bucket list.
//!
//! # Guarantees
//! With φ_k = w_k / Σw over all configured flows (V advances by `len / Σw`,
//! Σ over all configured flows, as Linux `sch_qfq.c` does),
//! T-WFI_QFQ(k) = 6·L_k/(φ_k·B) + (L − L_k)/B (Rizzo and Valente, Comput.
//! Commun. 67, 2015; docs/REFERENCE.md §3.3), where L_k is the flow's lmax and L
//! the largest lmax. `tests/fair.rs` checks it packet by packet on an exact
//! link (worst measured excess 0.80 of the bound over 400 random workloads,
//! weights 1..=65536, packets up to 65535 bytes).
//!
//! # Ranges and constants
//! * Weights 1..=65536, lmax 1..=65535 bytes, any number of flows the
//!   [`crate::FlowTable`] accepts (Σ w < 2⁴⁰). Every combination fits:
//!   [`FRAC_BITS`] = 40, [`MIN_SLOT_SHIFT`] = 24 (σ_0 = the span of one byte
//!   at weight 65536), [`MAX_INDEX`] = 32 (σ_32 = 2⁵⁶ > 65535·2⁴⁰, the span
//!   of 65535 bytes at weight 1), 33 groups in u64 bitmaps, [`MAX_SLOTS`] = 32
//!   buckets per group (a group's window is 2⁶¹ < 2⁶³, so wrap-safe
//!   comparisons hold).
//! * V and all tags are u64 and wrap; comparisons are `(a − b) as i64 > 0`.
//!   V is accumulated in a u128 with 24 extra fraction bits (`V += len ·
//!   2⁶⁴/Σw`, rounded down), so its drift is at most one unit per 2²⁴ bytes.
//! * All shifts are by constants below the width or go through
//!   `checked_shl`.
//!
//! # Deviations
//! * A packet longer than its flow's lmax is refused with
//!   [`DropReason::BadLength`] (the group of a flow is fixed at
//!   construction).
//! * The served flow leaves its bucket for its turn and is re-inserted with
//!   S = F (the QFQ+ structure with one-packet turns); dummynet updates it in
//!   place. The enqueue rule takes S = V when F is stale, without the
//!   refinement that caps S at the F of a higher-indexed ready group.
//! * A packet's service is charged to V at the next dequeue (the link is
//!   free again), so arrivals during a transmission see V as of its start,
//!   closer to Bennett–Zhang's V at departures than dummynet's charge at
//!   dequeue.
//! * Inside one bucket, flows are served last-in first-out, and the flow
//!   just served goes back to the head of its bucket while its rounded S
//!   stays in the same slot (as dummynet and Linux do): with packets much
//!   smaller than lmax, one flow may send up to about 2·lmax bytes in a row.
//!   This is within the bound, which is in units of lmax.
//! * An entity idle for 2⁶³ units of V or more has a stale F that may, by
//!   chance, look like it is within a slot ahead of V; it then restarts at
//!   most one slot late (still within the bound), never earlier.
//! * Bucket indices beyond `MAX_SLOTS − 2` are capped by moving the flow's
//!   tags back, as Linux does; a rotation that would overflow the bucket
//!   window starts the flow later instead of losing it.
//!
//! # Memory
//! * Per flow slot, 16 B of entity: the start tag (8 B), the bucket link
//!   (4 B), and one word holding the group index and the slot of the
//!   flow's inverse weight 2⁴⁰/w in a table shared by all flows (at
//!   7151336 the entity was 20 B, the 41-bit inverse weight inline). Besides
//!   it, the [`FlowTable`]'s 8 B of parameters and the queue's 12 B record.
//! * The weight table has one slot per distinct inverse weight (8 B, and a
//!   4 B count of the entities holding it) and an index of 4 B words,
//!   `2 · slots` rounded up to a power of two. It is allocated once, at
//!   construction, for the worst case of one weight per flow slot (20 to
//!   28 B per slot reserved), zeroed, so only the slots and index words
//!   written become resident: a few pages when few weights are in use (one
//!   under a dummynet flowset, where every dynamic queue has the flowset's
//!   weight), 36 to 44 B per flow in all when every flow has a weight of
//!   its own.
//! * Per packet, the table costs one load at the end of each turn, when
//!   the served bytes are charged (F = S + len · 2⁴⁰/w), from a slot that
//!   stays in the cache while weights are few.
//!
//! # Flow lifecycle
//! Flows are entities sized by the table's capacity at construction;
//! nothing is allocated later. Σw (V's rate) is that of the present flows,
//! updated at every add, change and remove. A weight new to the table
//! takes a free slot (found through the index, O(1) expected); a weight no
//! entity holds any more frees its slot at once, so under any churn the
//! table holds exactly the distinct weights of the present flows, plus the
//! absent slots' default (weight 1).
//! * **Add**: the entity gets its weight and group; its first packet starts
//!   at V.
//! * **Change**: a backlogged flow leaves its bucket (O(flows in the
//!   bucket), repairing its group as a departure does), takes its new
//!   weight and group, and goes back with its start tag S unchanged; its
//!   next finish is S + len/w_new, so the new share applies from its head
//!   packet. An idle flow keeps its remembered F. Packets already queued
//!   that exceed a lowered lmax are still served (the bound then holds from
//!   the first packet within the new lmax); new ones are refused.
//! * **Remove**: the flow leaves its bucket as above, its packets go to
//!   `purge` with [`DropReason::FlowRemoved`], its tags are forgotten, and
//!   its entity takes an absent slot's weight and group.

pub(crate) mod engine;
mod weights;

pub use engine::{FRAC_BITS, MAX_INDEX, MAX_SLOTS, MIN_SLOT_SHIFT};

use crate::scheduler::purged;
use crate::{
    ConfigError, DropReason, FlowError, FlowId, FlowParams, FlowTable, Instant, Packet,
    PacketQueues, Rejected, Scheduler,
};
use engine::Engine;

/// Quick Fair Queueing: O(1) fair queueing with a constant-factor T-WFI.
///
/// # Examples
/// ```
/// use pspat_sched::{FlowId, FlowParams, FlowTable, Instant, Packet, Qfq, Scheduler};
/// let flows = FlowTable::new(vec![FlowParams::weighted(1), FlowParams::weighted(3)]).unwrap();
/// let mut s = Qfq::new(flows, 64).unwrap();
/// for i in 0..40 {
///     s.enqueue(Instant::ZERO, Packet::new(FlowId(i % 2), 1000, i as u64)).unwrap();
/// }
/// let heavy = (0..16).filter(|_| s.dequeue(Instant::ZERO).unwrap().flow.0 == 1).count();
/// assert!((11..=13).contains(&heavy));
/// ```
pub struct Qfq {
    flows: FlowTable,
    queues: PacketQueues,
    engine: Engine,
}

impl Qfq {
    /// QFQ over `flows`, holding at most `capacity` packets.
    ///
    /// # Errors
    /// A capacity out of range. Weights (1..=65536) and lmax (1..=65535) are
    /// validated by the [`FlowTable`]; every such flow fits a group.
    pub fn new(flows: FlowTable, capacity: usize) -> Result<Self, ConfigError> {
        let queues = PacketQueues::new(flows.capacity(), capacity, None)?;
        for (i, f) in flows.slots().enumerate() {
            let (_, span) = inv_w_and_span(&f);
            if engine::group_index(span) > MAX_INDEX {
                return Err(ConfigError::out_of_range(
                    format!("flow {i} lmax/weight (QFQ group)"),
                    format!("{}/{}", f.lmax, f.weight),
                    "lmax 1..=65535 with weight 1..=65536",
                ));
            }
        }
        let engine = Engine::new(
            flows.slots().map(|f| inv_w_and_span(&f)),
            flows.total_weight(),
        );
        Ok(Qfq {
            flows,
            queues,
            engine,
        })
    }

    /// Test hook: starts the virtual clock at `v` (e.g. just below the
    /// wrap). Only meaningful before the first packet.
    #[doc(hidden)]
    #[must_use]
    pub fn with_initial_vtime(mut self, v: u64) -> Self {
        self.engine.set_initial_v(v);
        self
    }

    /// The current system virtual time (fixed point, [`FRAC_BITS`]).
    #[doc(hidden)]
    pub fn vtime(&self) -> u64 {
        self.engine.v()
    }

    /// The QFQ group of `flow` (0..=[`MAX_INDEX`]), if it is present.
    pub fn group(&self, flow: crate::FlowId) -> Option<u32> {
        self.flows
            .contains(flow)
            .then(|| self.engine.group_of(flow.0))
    }
}

/// (2⁴⁰ / w, lmax · 2⁴⁰ / w): a flow's tag span per byte and per maximum
/// packet.
fn inv_w_and_span(f: &FlowParams) -> (u64, u64) {
    let inv_w = (1u64 << FRAC_BITS) / u64::from(f.weight.max(1));
    (inv_w, u64::from(f.lmax) * inv_w)
}

impl Scheduler for Qfq {
    #[inline(always)]
    fn enqueue(&mut self, _now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.flows.admit(&pkt)?;
        let k = pkt.flow.index();
        if self.flows.admitted_exceeds_lmax(&pkt) {
            return Err(Rejected {
                packet: pkt,
                reason: DropReason::BadLength,
            });
        }
        self.queues.push(k, pkt)?;
        if self.queues.len(k) == 1 {
            self.engine.activate(pkt.flow.0);
        }
        Ok(())
    }

    #[inline(always)]
    fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
        self.engine.settle();
        let k = self.engine.pick()?;
        let pkt = self.queues.pop(k as usize)?;
        self.engine.charge(pkt.len);
        if self.queues.is_empty(k as usize) {
            self.engine.finish(k, pkt.len);
        } else {
            self.engine.reinsert(k, pkt.len);
        }
        Some(pkt)
    }

    #[inline]
    fn queued(&self) -> usize {
        self.queues.total()
    }

    fn name(&self) -> &'static str {
        "qfq"
    }

    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.insert(flow, params)?;
        let (inv_w, span) = inv_w_and_span(&params);
        self.engine.set_entity(flow.0, inv_w, span, false);
        self.engine.forget(flow.0);
        self.engine.set_weight_sum(self.flows.total_weight());
        Ok(())
    }

    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.update(flow, params)?;
        self.engine.set_weight_sum(self.flows.total_weight());
        let (inv_w, span) = inv_w_and_span(&params);
        // A backlogged flow is in a bucket (turns end inside `dequeue`).
        let backlogged = !self.queues.is_empty(flow.index());
        if backlogged {
            self.engine.deactivate(flow.0);
        }
        self.engine.set_entity(flow.0, inv_w, span, false);
        if backlogged {
            self.engine.restore(flow.0);
        }
        Ok(())
    }

    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        self.flows.remove(flow)?;
        self.engine.set_weight_sum(self.flows.total_weight());
        let k = flow.index();
        if !self.queues.is_empty(k) {
            self.engine.deactivate(flow.0);
        }
        while let Some(p) = self.queues.pop(k) {
            purge(purged(p));
        }
        // The slot takes an absent slot's parameters, so its weight leaves
        // the table of distinct weights if no other flow holds it.
        let (inv_w, span) = inv_w_and_span(&self.flows.slot(flow));
        self.engine.set_entity(flow.0, inv_w, span, false);
        self.engine.forget(flow.0);
        Ok(())
    }

    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        self.flows
            .contains(flow)
            .then(|| self.queues.len(flow.index()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Adds, changes and removals with weights drawn from the whole range,
    /// interleaved with traffic: the table of inverse weights holds exactly
    /// the distinct weights of the slots (present flows, and the absent
    /// slots' default), never more, and every packet is accounted for.
    #[test]
    fn weight_churn_keeps_the_weight_table_to_the_live_weights() {
        let cap = 48u32;
        let initial = (0..16).map(|i| FlowParams::weighted(1 + i)).collect();
        let flows = FlowTable::with_capacity(cap as usize, initial).unwrap();
        let mut s = Qfq::new(flows, 256).unwrap();
        let mut rng = fastrand::Rng::with_seed(3);
        let (mut sent, mut out, mut purged_n, mut refused) = (0u64, 0u64, 0u64, 0u64);
        let mut max_live = 0;
        for step in 0..60_000u64 {
            let f = FlowId(rng.u32(0..cap));
            // Few distinct weights in some phases, many in others.
            let top = if (step / 5_000) % 2 == 0 { 4 } else { 65_536 };
            let params = FlowParams {
                weight: rng.u32(1..=top),
                lmax: rng.u32(1_000..=1_500),
                ..FlowParams::default()
            };
            match rng.u8(0..10) {
                0 => {
                    let _ = s.add_flow(f, params);
                }
                1 => {
                    let _ = s.change_flow(f, params);
                }
                2 => {
                    let _ = s.remove_flow(f, &mut |_| purged_n += 1);
                }
                3..=6 => {
                    sent += 1;
                    if s.enqueue(Instant::ZERO, Packet::new(f, rng.u32(64..=1_000), step))
                        .is_err()
                    {
                        refused += 1;
                    }
                }
                _ => out += u64::from(s.dequeue(Instant::ZERO).is_some()),
            }
            let held: HashSet<u64> = s.flows.slots().map(|p| inv_w_and_span(&p).0).collect();
            let present: HashSet<u32> = s.flows.iter().map(|(_, p)| p.weight).collect();
            let live = s.engine.distinct_weights();
            assert_eq!(live, held.len(), "step {step}");
            assert!(
                live <= present.len() + 1,
                "step {step}: {live} weights held"
            );
            max_live = max_live.max(live);
        }
        while s.dequeue(Instant::ZERO).is_some() {
            out += 1;
        }
        assert_eq!(sent, out + purged_n + refused);
        // The many-weight phases did fill it (up to one slot per flow).
        assert!(max_live > 32, "{max_live}");
    }
}
