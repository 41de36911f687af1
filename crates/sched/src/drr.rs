//! Deficit Round Robin. Shreedhar and Varghese, "Efficient Fair Queueing
//! Using Deficit Round Robin", SIGCOMM 1995; as dummynet's `dn_sched_rr.c`
//! and Linux `sch_drr.c`.
//!
//! Backlogged flows sit on a ring. The flow at the head sends while its
//! credit covers its head packet; otherwise it earns one quantum and moves
//! to the tail. A flow that empties leaves the ring and starts again from
//! one quantum, so idle flows bank no credit.
//!
//! # Quanta
//! The smallest quantum is the largest packet L (the largest lmax of the
//! present flows) and the others are in proportion to the weights, rounded
//! up: Q_k = ⌈L·w_k / w_min⌉ bytes. This is what the T-WFI bound below
//! assumes (a quantum of `weight × unit` with a fixed unit makes the
//! smallest quantum far larger than L when every weight is large, and the
//! bound fails). Q_k ≤ 65535 · 65536 < 2³², so quanta fit a `u32`.
//! `SchedulerConfig::quantum_unit` no longer sets DRR's quanta (it still
//! sets the hierarchy's).
//!
//! # Flow lifecycle
//! Per-flow state is sized by the table's capacity at construction; adding,
//! changing and removing a flow allocate nothing.
//! * **Quanta follow the table**: an add, change or remove that moves L or
//!   w_min recomputes every quantum (O(capacity)); otherwise only the
//!   flow's own (O(1)), plus the table's O(capacity) rescan when the flow
//!   held the smallest weight or the largest lmax.
//! * **Change**: the flow keeps its place on the ring and its credit; the
//!   new quantum is used the next time it earns one, so a weight change
//!   shows from the next round. Queued packets stay queued.
//! * **Remove**: the flow leaves the ring (O(ring length) to find its
//!   predecessor on the singly linked ring), its packets go to `purge` with
//!   [`crate::DropReason::FlowRemoved`], its credit is forgotten and the
//!   read-ahead restarts from the head.
//!
//! # Read-ahead
//! DRR knows which flows it serves next: those after the head of the ring.
//! A flow's packets are a chain of chunks in [`PacketQueues`], and serving
//! one flow alone walks that chain one dependent cache miss at a time. So
//! the queues of the next [`SCOUTS`] (16) flows on the ring are read ahead
//! by [`crate::Scout`]s, at most 16 chunks (64 packets) each: every dequeue
//! moves one scout one chunk on (round robin), and every change of head
//! starts up to two new ones, so several independent misses are in flight
//! and the flow reaching the head finds its packets in cache. The scouts
//! only fetch memory; they never change a decision (a test checks the
//! service order against a textbook model).
//!
//! # Complexity
//! O(1) per enqueue and dequeue: every quantum is at least every flow's
//! lmax. A packet longer than its flow's lmax (accepted: DRR does not
//! check lmax) may need several rotations, each adding a quantum, so the
//! loop always ends. The read-ahead adds O(1) per dequeue and per change of
//! head. Memory: the [`PacketQueues`] arena, 12 bytes per flow slot
//! (credit, quantum, ring link) and 128 bytes of scouts. A flow earns a
//! quantum only while its credit is below its head packet (at most 65535
//! bytes), so a credit never exceeds 2³² − 2.
//! # Guarantees
//! Over a round each backlogged flow receives its quantum, within one maximum
//! packet. T-WFI_DRR(k) = (1/φ_min + 1/φ_k + N − 1)·L/B (Rizzo and Valente,
//! Comput. Commun. 67, 2015; PSPAT journal paper §5.2): O(N), for any
//! weights (`tests/wfi.rs` measures it with weights 65536).
//! # Deviations
//! None known.

use crate::scheduler::purged;
use crate::{
    ConfigError, FlowError, FlowId, FlowParams, FlowTable, Instant, Packet, PacketQueues, Rejected,
    Scheduler, Scout, MAX_PACKET_LEN,
};

/// Default of `SchedulerConfig::quantum_unit`, in bytes (one Ethernet MTU).
/// DRR's own quanta no longer use it (module docs); the hierarchy's inner
/// rings do.
pub const DEFAULT_QUANTUM_UNIT: u32 = 1_500;

/// Largest quantum unit the hierarchy accepts, in bytes.
pub const MAX_QUANTUM_UNIT: u32 = 65_535;

/// End of the ring.
const NIL: u32 = u32::MAX - 1;
/// `next` of a flow that is not on the ring (flow ids are below 2^24).
const OFF: u32 = u32::MAX;

/// Flows ahead of the one in service whose queues are read ahead.
pub const SCOUTS: usize = 16;
/// Chunks read ahead per scouted flow ([`crate::queue::CHUNK_PACKETS`] packets each).
const SCOUT_CHUNKS: u32 = 16;

/// 12 bytes per flow, so the per-flow state of 32k flows (384 KB) stays in
/// L2 beside the queues' own.
#[derive(Clone, Copy)]
struct FlowState {
    credit: u32,
    quantum: u32,
    /// Ring successor, [`NIL`] for the tail, [`OFF`] when not on the ring.
    next: u32,
}

/// Deficit Round Robin with per-flow quanta derived from the weights.
///
/// # Examples
/// ```
/// use pspat_sched::{Drr, FlowId, FlowParams, FlowTable, Instant, Packet, Scheduler};
/// // lmax 100: quanta 100 and 200 bytes.
/// let flow = |weight| FlowParams { weight, lmax: 100, priority: 0 };
/// let flows = FlowTable::new(vec![flow(1), flow(2)]).unwrap();
/// let mut s = Drr::new(flows, 64).unwrap();
/// assert_eq!((s.quantum(FlowId(0)), s.quantum(FlowId(1))), (Some(100), Some(200)));
/// for i in 0..6 {
///     s.enqueue(Instant::ZERO, Packet::new(FlowId(i % 2), 100, i as u64)).unwrap();
/// }
/// let order: Vec<u32> = (0..6).map(|_| s.dequeue(Instant::ZERO).unwrap().flow.0).collect();
/// assert_eq!(order, [0, 1, 1, 0, 1, 0]);
/// ```
pub struct Drr {
    flows: FlowTable,
    queues: PacketQueues,
    state: Box<[FlowState]>,
    head: u32,
    tail: u32,
    /// Read-ahead of the queues of the `scout_ahead` flows after the head,
    /// one scout per flow in ring order from slot `scout_first`;
    /// `scout_last` is the farthest of them, or the head when there are
    /// none ([`NIL`] when the ring is empty).
    scouts: [Scout; SCOUTS],
    scout_first: usize,
    scout_ahead: usize,
    scout_last: u32,
    /// The scout stepped by the next dequeue (round robin).
    scout_turn: usize,
    /// The (L, w_min) the quanta were computed from.
    quanta_basis: (u32, u32),
}

/// ⌈L·w / w_min⌉: at most 65535 · 65536 < 2³² (module docs).
pub(crate) fn quantum_for(basis: (u32, u32), weight: u32) -> u32 {
    let (l, wmin) = basis;
    let q = (u64::from(l) * u64::from(weight)).div_ceil(u64::from(wmin.max(1)));
    u32::try_from(q).unwrap_or(u32::MAX)
}

impl Drr {
    /// DRR over the flow slots of `flows`, holding at most `capacity`
    /// packets, with quanta ⌈L·w_k / w_min⌉ (module docs).
    ///
    /// # Errors
    /// A capacity out of range.
    pub fn new(flows: FlowTable, capacity: usize) -> Result<Self, ConfigError> {
        let queues = PacketQueues::new(flows.capacity(), capacity, None)?;
        let state = vec![
            FlowState {
                credit: 0,
                quantum: 0,
                next: OFF,
            };
            flows.capacity()
        ]
        .into_boxed_slice();
        let mut s = Drr {
            flows,
            queues,
            state,
            head: NIL,
            tail: NIL,
            scouts: [Scout::DONE; SCOUTS],
            scout_first: 0,
            scout_ahead: 0,
            scout_last: NIL,
            scout_turn: 0,
            quanta_basis: (0, 0),
        };
        s.recompute_quanta();
        Ok(s)
    }

    /// The quantum of `flow` in bytes, if it is present.
    pub fn quantum(&self, flow: FlowId) -> Option<u64> {
        self.flows
            .contains(flow)
            .then(|| u64::from(self.state[flow.index()].quantum))
    }

    /// Recomputes every quantum when L or w_min moved, else only `flow`'s.
    fn refresh_quanta(&mut self, flow: FlowId) {
        let basis = (self.flows.max_lmax(), self.flows.min_weight());
        if basis != self.quanta_basis {
            self.recompute_quanta();
        } else if let Some(p) = self.flows.get(flow) {
            self.state[flow.index()].quantum = quantum_for(basis, p.weight);
        }
    }

    /// Every present flow's quantum from the table. O(capacity).
    fn recompute_quanta(&mut self) {
        let basis = (self.flows.max_lmax(), self.flows.min_weight());
        self.quanta_basis = basis;
        for (f, p) in self.flows.iter() {
            self.state[f.index()].quantum = quantum_for(basis, p.weight);
        }
    }

    /// Takes `f` off the ring wherever it is. O(ring length).
    fn unlink(&mut self, f: u32) {
        if self.state[f as usize].next == OFF {
            return;
        }
        let next = self.state[f as usize].next;
        if self.head == f {
            self.head = next;
        } else {
            let mut prev = self.head;
            while prev != NIL && self.state[prev as usize].next != f {
                prev = self.state[prev as usize].next;
            }
            if prev == NIL {
                debug_assert!(false, "flow {f} marked on the ring but not found");
            } else {
                self.state[prev as usize].next = next;
                if self.tail == f {
                    self.tail = prev;
                }
            }
        }
        if self.head == NIL {
            self.tail = NIL;
        }
        self.state[f as usize].next = OFF;
        // The read-ahead window may have held `f`: restart it after the head.
        self.scout_ahead = 0;
        self.scout_last = self.head;
    }

    #[inline]
    fn append(&mut self, f: u32) {
        self.state[f as usize].next = NIL;
        if self.tail == NIL {
            self.head = f;
        } else {
            self.state[self.tail as usize].next = f;
        }
        self.tail = f;
    }

    /// Takes the head off the ring (marking it off the ring when `off`),
    /// and moves the read-ahead window one flow on.
    #[inline]
    fn pop_head(&mut self, off: bool) -> u32 {
        let f = self.head;
        let st = &mut self.state[f as usize];
        self.head = st.next;
        if off {
            st.next = OFF;
        }
        if self.head == NIL {
            self.tail = NIL;
        }
        self.advance_scouts();
        f
    }

    /// The head changed: the new head was the first scouted flow, so its
    /// scout is done; scout up to two more flows past the farthest one, so
    /// the window grows to [`SCOUTS`] flows.
    #[inline]
    fn advance_scouts(&mut self) {
        if self.head == NIL {
            self.scout_ahead = 0;
            self.scout_last = NIL;
            return;
        }
        let last_on_ring = self
            .state
            .get(self.scout_last as usize)
            .is_some_and(|st| st.next != OFF);
        if self.scout_ahead > 0 && last_on_ring {
            self.scout_first = (self.scout_first + 1) % SCOUTS;
            self.scout_ahead -= 1;
            if self.scout_ahead == 0 {
                self.scout_last = self.head;
            }
        } else {
            // Nothing scouted, or the farthest scouted flow has been served
            // (the window fell behind): restart after the head.
            self.scout_ahead = 0;
            self.scout_last = self.head;
        }
        for _ in 0..2 {
            if self.scout_ahead == SCOUTS {
                break;
            }
            let next = self.state[self.scout_last as usize].next;
            if next == NIL || next == OFF {
                break;
            }
            let slot = (self.scout_first + self.scout_ahead) % SCOUTS;
            self.scouts[slot] = self.queues.scout(next as usize, SCOUT_CHUNKS);
            self.scout_ahead += 1;
            self.scout_last = next;
        }
    }
}

impl Scheduler for Drr {
    #[inline(always)]
    fn enqueue(&mut self, _now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.flows.admit(&pkt)?;
        let f = pkt.flow.0;
        self.queues.push(f as usize, pkt)?;
        let st = &mut self.state[f as usize];
        if st.next == OFF {
            st.credit = st.quantum;
            self.append(f);
        }
        Ok(())
    }

    #[inline(always)]
    fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
        loop {
            if self.head == NIL {
                return None;
            }
            let f = self.head;
            // Invariant: a flow on the ring has a non-empty queue.
            let len = self.queues.front(f as usize)?.len;
            let st = &mut self.state[f as usize];
            if len <= st.credit {
                st.credit -= len;
                let pkt = self.queues.pop(f as usize);
                if self.queues.is_empty(f as usize) {
                    self.pop_head(true);
                }
                let turn = self.scout_turn;
                self.scout_turn = (turn + 1) % SCOUTS;
                self.queues.scout_step(&mut self.scouts[turn]);
                return pkt;
            }
            // credit < len <= MAX_PACKET_LEN, so the sum stays below 2^32
            // (module docs).
            debug_assert!(len <= MAX_PACKET_LEN);
            st.credit += st.quantum;
            self.pop_head(false);
            self.append(f);
        }
    }

    fn queued(&self) -> usize {
        self.queues.total()
    }

    fn name(&self) -> &'static str {
        "drr"
    }

    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.insert(flow, params)?;
        self.state[flow.index()] = FlowState {
            credit: 0,
            quantum: 0,
            next: OFF,
        };
        self.refresh_quanta(flow);
        Ok(())
    }

    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.update(flow, params)?;
        self.refresh_quanta(flow);
        Ok(())
    }

    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        self.flows.remove(flow)?;
        let f = flow.index();
        self.unlink(flow.0);
        while let Some(p) = self.queues.pop(f) {
            purge(purged(p));
        }
        self.state[f].credit = 0;
        self.state[f].quantum = 0;
        self.refresh_quanta(flow);
        Ok(())
    }

    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        self.flows
            .contains(flow)
            .then(|| self.queues.len(flow.index()))
    }

    /// Gives back the credit a packet dropped at the head of its queue was
    /// charged, while the flow is still on the ring (a flow that left it
    /// starts again from one quantum anyway).
    fn uncharge(&mut self, flow: FlowId, len: u32) {
        if let Some(st) = self.state.get_mut(flow.index()) {
            if st.next != OFF {
                st.credit = st.credit.saturating_add(len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FlowId, FlowParams};

    #[test]
    fn quantum_below_packet_still_makes_progress() {
        // lmax 7, so quanta of 7 bytes; DRR accepts longer packets.
        let tiny = FlowParams {
            lmax: 7,
            ..FlowParams::default()
        };
        let flows = FlowTable::new(vec![tiny; 3]).unwrap();
        let mut s = Drr::new(flows, 64).unwrap();
        assert_eq!(s.quantum(FlowId(2)), Some(7));
        for i in 0..9u64 {
            s.enqueue(Instant::ZERO, Packet::new(FlowId((i % 3) as u32), 1500, i))
                .unwrap();
        }
        let mut out = Vec::new();
        while let Some(p) = s.dequeue(Instant::ZERO) {
            out.push(p.token);
        }
        assert_eq!(out, [0, 1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn quanta_scale_the_largest_packet_by_weight_and_follow_the_table() {
        let p = |weight, lmax| FlowParams {
            weight,
            lmax,
            priority: 0,
        };
        // Heavy weights alone: the smallest quantum is still one packet.
        let flows = FlowTable::new(vec![p(65_536, 64), p(65_536, 64)]).unwrap();
        let s = Drr::new(flows, 4).unwrap();
        assert_eq!(s.quantum(FlowId(0)), Some(64));
        // ⌈100 · 7 / 3⌉ = 234.
        let flows = FlowTable::with_capacity(4, vec![p(3, 100), p(7, 100)]).unwrap();
        let mut s = Drr::new(flows, 4).unwrap();
        assert_eq!(
            (s.quantum(FlowId(0)), s.quantum(FlowId(1))),
            (Some(100), Some(234))
        );
        assert_eq!(s.quantum(FlowId(2)), None);
        // A lighter flow with a longer packet moves both L and w_min.
        s.add_flow(FlowId(2), p(1, 200)).unwrap();
        let q: Vec<_> = (0..3).map(|f| s.quantum(FlowId(f)).unwrap()).collect();
        assert_eq!(q, [600, 1400, 200]);
        s.change_flow(FlowId(1), p(2, 200)).unwrap();
        assert_eq!(s.quantum(FlowId(1)), Some(400));
        s.remove_flow(FlowId(2), &mut |_| {}).unwrap();
        let q: Vec<_> = (0..2).map(|f| s.quantum(FlowId(f)).unwrap()).collect();
        assert_eq!(q, [300, 200]); // L = 200 (flow 1), w_min = 2
    }

    #[test]
    fn a_quantum_unit_out_of_range_is_still_refused_by_name() {
        for alg in [crate::AlgKind::Drr, crate::AlgKind::ShapedDrr] {
            for bad in [0, MAX_QUANTUM_UNIT + 1] {
                let mut cfg = crate::SchedulerConfig::new(alg);
                cfg.quantum_unit = bad;
                let err = cfg.build(FlowTable::uniform(2).unwrap()).err().unwrap();
                assert!(err.to_string().contains("quantum unit"), "{err}");
            }
        }
    }

    #[test]
    fn largest_quantum_and_packets_do_not_overflow_the_credit() {
        // lmax 65535 × weight 65536 / 1: the largest quantum; credits reach
        // quantum + 65534 (tests run with overflow checks).
        let flows = FlowTable::new(vec![
            FlowParams {
                weight: crate::MAX_WEIGHT,
                lmax: MAX_PACKET_LEN,
                priority: 0,
            },
            FlowParams::weighted(1),
        ])
        .unwrap();
        let mut s = Drr::new(flows, 64).unwrap();
        assert_eq!(s.quantum(FlowId(0)), Some(65_536 * 65_535));
        for i in 0..40u64 {
            let len = if i % 3 == 0 { MAX_PACKET_LEN } else { 1 };
            s.enqueue(Instant::ZERO, Packet::new(FlowId((i % 2) as u32), len, i))
                .unwrap();
        }
        let mut n = 0;
        while s.dequeue(Instant::ZERO).is_some() {
            n += 1;
        }
        assert_eq!(n, 40);
    }

    /// The textbook algorithm with u64 credits and a `VecDeque` ring.
    struct Model {
        quantum: Vec<u64>,
        credit: Vec<u64>,
        queues: Vec<std::collections::VecDeque<Packet>>,
        ring: std::collections::VecDeque<usize>,
    }

    impl Model {
        fn enqueue(&mut self, p: Packet) {
            let f = p.flow.index();
            if self.queues[f].is_empty() {
                self.credit[f] = self.quantum[f];
                self.ring.push_back(f);
            }
            self.queues[f].push_back(p);
        }

        fn dequeue(&mut self) -> Option<Packet> {
            loop {
                let f = *self.ring.front()?;
                let len = u64::from(self.queues[f].front()?.len);
                if len <= self.credit[f] {
                    self.credit[f] -= len;
                    let p = self.queues[f].pop_front();
                    if self.queues[f].is_empty() {
                        self.ring.pop_front();
                    }
                    return p;
                }
                self.credit[f] += self.quantum[f];
                self.ring.rotate_left(1);
            }
        }
    }

    #[test]
    fn matches_a_textbook_model_with_read_ahead_over_many_flows() {
        // More flows than read-ahead scouts, deep and shallow queues, quanta
        // above and below the packet sizes: the service order is exactly
        // the model's, whatever the read-ahead does.
        for seed in 0..6u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let n = [3usize, 9, 40][seed as usize % 3];
            let weights: Vec<u32> = (0..n).map(|_| rng.u32(1..=8)).collect();
            let lmax = [100u32, 1500, 7][seed as usize % 3];
            let wmin = u64::from(*weights.iter().min().unwrap());
            let flows = FlowTable::new(
                weights
                    .iter()
                    .map(|&weight| FlowParams {
                        weight,
                        lmax,
                        priority: 0,
                    })
                    .collect(),
            )
            .unwrap();
            let capacity = 300;
            let mut s = Drr::new(flows, capacity).unwrap();
            let mut m = Model {
                quantum: weights
                    .iter()
                    .map(|&w| (u64::from(w) * u64::from(lmax)).div_ceil(wmin))
                    .collect(),
                credit: vec![0; n],
                queues: vec![Default::default(); n],
                ring: Default::default(),
            };
            let mut held = 0;
            for token in 0..30_000u64 {
                // Phases of filling and draining, as the harness does.
                let fill = (token / 500) % 2 == 0;
                if held < capacity && rng.u8(..10) < if fill { 8 } else { 3 } {
                    let p = Packet::new(FlowId(rng.u32(..n as u32)), rng.u32(1..=1500), token);
                    s.enqueue(Instant::ZERO, p).unwrap();
                    m.enqueue(p);
                    held += 1;
                } else {
                    let got = s.dequeue(Instant::ZERO);
                    assert_eq!(got, m.dequeue(), "seed {seed} step {token}");
                    held -= usize::from(got.is_some());
                }
                assert_eq!(s.queued(), held);
            }
        }
    }
}
