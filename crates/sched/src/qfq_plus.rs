//! QFQ+. Valente, "Reducing the execution time of fair-queueing
//! schedulers", Comput. Commun. 47, 2014; as Linux `sch_qfq.c` (≥ 3.8).
//!
//! Flows with the same (weight, lmax) are grouped into *aggregates* of up to
//! [`AGG_MAX_FLOWS`] flows, in flow-id order. An aggregate of n flows has
//! weight n·w and budget n·lmax and is scheduled by the QFQ machinery of
//! [`crate::Qfq`] as one entity. The aggregate chosen keeps the link for a
//! *turn* while its remaining budget covers the next packet; inside it, the
//! flows are served by DRR with quantum lmax. At the end of a turn the
//! aggregate is charged what it actually sent (F = S + used/(n·w)) and
//! re-queued with S = F and a full budget. Scheduling decisions on the QFQ
//! structure happen once per turn instead of once per packet.
//!
//! # Complexity
//! O(1) per enqueue and dequeue; the DRR inside an aggregate rotates at most
//! [`AGG_MAX_FLOWS`] times per packet.
//!
//! # Guarantees
//! QFQ's bound, T-WFI_QFQ(k) = 6·L_k/(φ_k·B) + (L − L_k)/B (Rizzo and
//! Valente, Comput. Commun. 67, 2015), does **not** hold for QFQ+: once an
//! aggregate is chosen it keeps the link for its whole turn, up to
//! [`AGG_MAX_FLOWS`] packets of its flows, and a packet of another flow
//! arriving meanwhile waits for all of them, not for one. With weights
//! 65536, 1, …, 1 (nine flows, the eight light ones in one aggregate),
//! 1500-byte packets at 10 Gbit/s, the heavy flow is measured 9.5 µs late
//! against QFQ's 7.2 µs.
//!
//! With φ_k = w_k / Σw over all configured flows, flow k's aggregate A of n
//! flows is a QFQ entity of weight φ_A = n·φ_k whose "packets" are turns of
//! at most L_A = n·L_k bytes (its timestamps are computed from the budget,
//! and it is charged what the turn used), so L_A/φ_A = L_k/φ_k. In the
//! shape of Valente's guarantee for QFQ+ (Valente 2014: a packet's worst-case
//! completion time under QFQ, plus the delay added by aggregation), our
//! derivation, not a published figure, is
//!
//! **T-WFI_QFQ+(k) ≤ 8·L_k/(φ_k·B) + (L_turn + L)/B**
//!
//! * 6·L_A/(φ_A·B) = 6·L_k/(φ_k·B): QFQ's bound for the entity A, a turn
//!   standing for a packet;
//! * L_turn/B, where L_turn is the largest budget n·L_j of any aggregate:
//!   QFQ's non-preemption term (L − L_A)/B with a whole turn of another
//!   aggregate in place of one packet (at most 8·L);
//! * 2·L_k/(φ_k·B): DRR inside A (quantum L_k). Before a packet of k
//!   leaves, each of the n − 1 siblings sends at most what k sends plus its
//!   carried deficit and one quantum (< 2·L_k), all of it at A's rate
//!   φ_A·B = n·φ_k·B, so (n − 1)·2·L_k/(n·φ_k·B) < 2·L_k/(φ_k·B); the
//!   bytes k and its siblings send in step drain at A's rate within
//!   Q_k(a)/(φ_k·B), the term the T-WFI definition already subtracts;
//! * L/B: V moves in whole-packet steps (see [`crate::wf2q_plus`]).
//!
//! For a flow alone in its aggregate (n = 1) the DRR term vanishes and the
//! bound is QFQ's with one turn in place of one packet; QFQ's own form is
//! the special case where every aggregate holds a single flow, except for
//! the V-step term.
//!
//! `pspat_eval::wfi::twfi_bound("qfq+")` returns this bound (with L_turn
//! computed from the flow table as [`QfqPlus::new`] groups the flows), so
//! `pspat wfi --alg qfq+` measures QFQ+ against it. It is checked packet by
//! packet by `tests/fair.rs` here (400 random workloads, worst 0.69 of it;
//! the tighter 7·L_k/(φ_k·B) + L_turn/B form was never exceeded either,
//! worst 0.85, but is not asserted) and by `pspat-eval`'s
//! `tests/guarantees.rs` (weights drawn over 1..=65536 with both ends in
//! every workload, lengths mixed within each flow, lmax up to 65535; the
//! nine-flow case above measures 9.5 µs against 20.4 µs).
//!
//! Valente 2014: P. Valente, "Reducing the execution time of fair-queueing
//! schedulers", Computer Communications 47, 2014.
//!
//! # Ranges and constants
//! As [`crate::Qfq`]: weights 1..=65536, lmax 1..=65535, the same
//! [`crate::qfq::FRAC_BITS`], slots and groups (an aggregate's span n·lmax ·
//! 2⁴⁰/(n·w) equals its flows' span, so it lands in the same group range).
//! Aggregate weights reach 8·65536 and budgets 8·65535, both within u32.
//!
//! # Deviations
//! * A packet longer than its flow's lmax is refused with
//!   [`DropReason::BadLength`]; Linux moves the class to an aggregate with
//!   lmax = len, which would need allocation or spare aggregates.
//! * Aggregates are fixed at construction (flows are configured up front).
//! * A turn ends lazily: an aggregate that empties keeps its turn until the
//!   next dequeue, so a packet arriving in between may still use its budget.

use crate::qfq::engine::Engine;
use crate::qfq::FRAC_BITS;
use crate::{
    ConfigError, DropReason, FlowTable, Instant, Packet, PacketQueues, Rejected, Scheduler,
};

/// Largest number of flows in one aggregate (Linux's cap).
pub const AGG_MAX_FLOWS: u32 = 8;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct FlowState {
    agg: u32,
    deficit: u32,
    next: u32,
    active: bool,
}

#[derive(Clone, Copy)]
struct Agg {
    budget_max: u32,
    budget: u32,
    quantum: u32,
    head: u32,
    tail: u32,
    nactive: u32,
}

/// QFQ over aggregates of equal-weight, equal-lmax flows, DRR inside.
///
/// # Examples
/// ```
/// use pspat_sched::{FlowId, FlowParams, FlowTable, Instant, Packet, QfqPlus, Scheduler};
/// let flows = FlowTable::new(vec![FlowParams::weighted(1), FlowParams::weighted(3)]).unwrap();
/// let mut s = QfqPlus::new(flows, 64).unwrap();
/// assert_eq!(s.aggregates(), 2);
/// for i in 0..40 {
///     s.enqueue(Instant::ZERO, Packet::new(FlowId(i % 2), 1500, i as u64)).unwrap();
/// }
/// let heavy = (0..16).filter(|_| s.dequeue(Instant::ZERO).unwrap().flow.0 == 1).count();
/// assert!((10..=14).contains(&heavy));
/// ```
pub struct QfqPlus {
    flows: FlowTable,
    queues: PacketQueues,
    st: Box<[FlowState]>,
    aggs: Box<[Agg]>,
    engine: Engine,
    in_service: u32,
}

impl QfqPlus {
    /// QFQ+ over `flows`, holding at most `capacity` packets.
    ///
    /// # Errors
    /// A capacity out of range. Weights (1..=65536) and lmax (1..=65535) are
    /// validated by the [`FlowTable`].
    pub fn new(flows: FlowTable, capacity: usize) -> Result<Self, ConfigError> {
        let queues = PacketQueues::new(flows.len(), capacity, None)?;
        // Aggregate by (weight, lmax), in flow order, up to AGG_MAX_FLOWS each.
        let mut order: Vec<u32> = (0..flows.len() as u32).collect();
        let params = flows.as_slice();
        order.sort_by_key(|&i| (params[i as usize].weight, params[i as usize].lmax, i));
        let mut st = vec![
            FlowState {
                agg: 0,
                deficit: 0,
                next: NIL,
                active: false,
            };
            flows.len()
        ];
        let mut members: Vec<(u32, u32, u32)> = Vec::new(); // (weight, lmax, n)
        for &i in &order {
            let p = params[i as usize];
            let join = matches!(members.last(), Some(&(w, l, n)) if w == p.weight && l == p.lmax && n < AGG_MAX_FLOWS);
            if !join {
                members.push((p.weight, p.lmax, 0));
            }
            let last = members.len() - 1;
            members[last].2 += 1;
            st[i as usize].agg = last as u32;
        }
        let aggs: Box<[Agg]> = members
            .iter()
            .map(|&(_, lmax, n)| Agg {
                budget_max: lmax * n,
                budget: 0,
                quantum: lmax,
                head: NIL,
                tail: NIL,
                nactive: 0,
            })
            .collect();
        let engine = Engine::new(
            members.iter().map(|&(w, lmax, n)| {
                let inv_w = (1u64 << FRAC_BITS) / (u64::from(w) * u64::from(n));
                (inv_w, u64::from(lmax * n) * inv_w)
            }),
            flows.total_weight(),
        );
        Ok(QfqPlus {
            flows,
            queues,
            st: st.into_boxed_slice(),
            aggs,
            engine,
            in_service: NIL,
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

    /// Number of aggregates.
    pub fn aggregates(&self) -> usize {
        self.aggs.len()
    }

    /// The aggregate of `flow` and its budget in bytes.
    pub fn aggregate_of(&self, flow: crate::FlowId) -> Option<(u32, u32)> {
        let a = self.st.get(flow.index())?.agg;
        Some((a, self.aggs[a as usize].budget_max))
    }

    /// The next flow of aggregate `a` by DRR and its head length, rotating
    /// the ring as needed.
    #[inline]
    fn drr_peek(&mut self, a: u32) -> Option<(u32, u32)> {
        let agg = &mut self.aggs[a as usize];
        loop {
            let f = agg.head;
            if f == NIL {
                return None;
            }
            let len = self.queues.front(f as usize)?.len;
            let fs = &mut self.st[f as usize];
            if fs.deficit >= len {
                return Some((f, len));
            }
            fs.deficit += agg.quantum;
            if agg.head != agg.tail {
                agg.head = fs.next;
                fs.next = NIL;
                self.st[agg.tail as usize].next = f;
                agg.tail = f;
            }
        }
    }

    /// Ends the turn of the aggregate in service, if any.
    #[inline]
    fn end_turn(&mut self, a: u32, more: bool) {
        let agg = &mut self.aggs[a as usize];
        let used = agg.budget_max - agg.budget;
        if more {
            self.engine.reinsert(a, used);
        } else {
            self.engine.finish(a, used);
        }
        self.in_service = NIL;
    }
}

impl Scheduler for QfqPlus {
    #[inline]
    fn enqueue(&mut self, _now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.flows.admit(&pkt)?;
        let k = pkt.flow.index();
        if pkt.len > self.flows.as_slice()[k].lmax {
            return Err(Rejected {
                packet: pkt,
                reason: DropReason::BadLength,
            });
        }
        self.queues.push(k, pkt)?;
        if self.st[k].active {
            return Ok(());
        }
        let a = self.st[k].agg;
        let agg = &mut self.aggs[a as usize];
        let fs = &mut self.st[k];
        fs.active = true;
        fs.deficit = agg.quantum;
        fs.next = NIL;
        if agg.tail == NIL {
            agg.head = k as u32;
        } else {
            self.st[agg.tail as usize].next = k as u32;
        }
        agg.tail = k as u32;
        agg.nactive += 1;
        if agg.nactive == 1 && self.in_service != a {
            self.engine.activate(a);
        }
        Ok(())
    }

    #[inline]
    fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
        self.engine.settle();
        loop {
            let a = self.in_service;
            if a != NIL {
                match self.drr_peek(a) {
                    Some((f, len)) if len <= self.aggs[a as usize].budget => {
                        let pkt = self.queues.pop(f as usize)?;
                        let agg = &mut self.aggs[a as usize];
                        agg.budget -= len;
                        let fs = &mut self.st[f as usize];
                        fs.deficit -= len;
                        if self.queues.is_empty(f as usize) {
                            fs.active = false;
                            agg.head = fs.next;
                            fs.next = NIL;
                            if agg.head == NIL {
                                agg.tail = NIL;
                            }
                            agg.nactive -= 1;
                        }
                        self.engine.charge(len);
                        return Some(pkt);
                    }
                    Some(_) => self.end_turn(a, true),
                    None => self.end_turn(a, false),
                }
            }
            let a = self.engine.pick()?;
            let agg = &mut self.aggs[a as usize];
            agg.budget = agg.budget_max;
            self.in_service = a;
        }
    }

    #[inline]
    fn queued(&self) -> usize {
        self.queues.total()
    }

    fn name(&self) -> &'static str {
        "qfq+"
    }
}
