//! Flow queueing: the scheduling half of FQ-CoDel (Hoeiland-Joergensen et
//! al., RFC 8290 §4, and FreeBSD dummynet's `dn_sched_fq_codel.c`), a deficit
//! round robin that serves flows which have just become active before the
//! others.
//!
//! Each active flow sits on one of two lists. A flow that becomes active
//! (a packet arrives while it is on neither list) joins the tail of the
//! *new* list with a deficit of one quantum. A dequeue serves the head of
//! the new list, or of the *old* list when the new one is empty:
//! * a head whose deficit is used up (≤ 0) earns a quantum and moves to the
//!   tail of the old list;
//! * a head with a packet sends it and is charged its length (the deficit
//!   may go below zero: the packet is sent whole, as RFC 8290 does);
//! * a head with no packet leaves: from the new list to the tail of the old
//!   list (so that a flow cannot stay new by emptying and refilling its
//!   queue), from the old list off both lists.
//!
//! Sparse flows (a ping, a DNS query, the first packets of a connection)
//! therefore leave ahead of the backlogged ones, and a flow sending at
//! most one quantum per round never waits behind them. The AQM of
//! FQ-CoDel is not here: a pipe runs CoDel per queue ([`crate::pipe`],
//! `QueueConfig::codel`) on the packets this scheduler hands out, so the
//! two together are FQ-CoDel (`sched N config type fq_codel` in pspat's
//! configuration).
//!
//! # Quanta
//! The configured quantum (default [`DEFAULT_QUANTUM`], 1514 bytes, as
//! dummynet and Linux) is the quantum of a flow of the smallest weight
//! among the present flows; the others get it in proportion to their
//! weights, rounded up: Q_k = ⌈Q·w_k / w_min⌉. With equal weights every
//! flow has Q, as in RFC 8290.
//!
//! # Flow lifecycle
//! Per-flow state is sized by the table's capacity at construction; adding,
//! changing and removing a flow allocate nothing.
//! * **Add**: the flow starts on neither list.
//! * **Change**: the flow keeps its list, place and deficit; its new
//!   quantum counts from the next one it earns. A change that moves the
//!   smallest weight recomputes every quantum (O(capacity)).
//! * **Quantum**: [`Scheduler::set_quantum`] recomputes every flow's
//!   quantum from a new configured one (O(capacity)); as with a change,
//!   lists, places and deficits stay, and each flow's new quantum counts
//!   from the next one it earns.
//! * **Remove**: the flow leaves its list (O(list length), the lists being
//!   singly linked), its packets go to `purge` with
//!   [`crate::DropReason::FlowRemoved`] and its deficit is forgotten.
//!
//! # Complexity
//! O(1) amortised per enqueue and dequeue: a dequeue may pass over flows
//! whose deficit is used up (each then earns a quantum of at least one
//! byte, so a packet of L bytes needs at most ⌈L/Q⌉ passes) and over empty
//! flows (each leaves a list, and joined it by an enqueue). Memory: the
//! [`PacketQueues`] arena, 16 bytes per flow slot (deficit, quantum,
//! list link, list tag) and 160 bytes of read-ahead.
//!
//! # Read-ahead
//! As DRR's (`crate::drr`): the flows after a list's head are served
//! next, and each one's packets are a chain of chunks that serving it
//! alone would walk one dependent cache miss at a time. Each time the head
//! of the list being served leaves, up to two more of the next [`SCOUTS`]
//! flows on that list get a [`Scout`] over at most 16 chunks of their
//! queue, and each dequeue moves one scout one chunk on.
//!
//! # Guarantees
//! Among flows that stay backlogged, a round of the old list gives each
//! its quantum within one maximum packet, as DRR. A flow joins the new
//! list at most once per round of the old list (it has to leave the old
//! list first), so within one round the others can be served ahead of a
//! backlogged flow by at most two quanta each: the new-flow priority at
//! most doubles DRR's worst-case wait, and does not change the long-term
//! shares of backlogged flows.
//!
//! # Deviations from RFC 8290 and dummynet
//! * No hashing: flows are the table's flow ids. In pspat the classifier
//!   gives each 5-tuple its own queue (the `fq_codel` sched type implies
//!   `mask all`), so there are no collisions below the flowset's cap.
//! * No AQM and no limit of its own: CoDel and the limit on all the
//!   queues together (dropping from the head of the longest, through
//!   [`Scheduler::drop_head`]) are the pipe's (`PipeConfig::held_limit`;
//!   the `fq_codel` sched type in docs/CONFIG.md).

use crate::drr::SCOUTS;
use crate::scheduler::purged;
use crate::{
    ConfigError, FlowError, FlowId, FlowParams, FlowTable, Instant, Packet, PacketQueues, Rejected,
    Scheduler, Scout,
};

/// Chunks (of four packets) a scout reads ahead in one flow's queue.
const SCOUT_CHUNKS: u32 = 16;

/// Default quantum in bytes (dummynet's and Linux's: one Ethernet frame
/// with its header).
pub const DEFAULT_QUANTUM: u32 = 1_514;

/// Largest quantum accepted, in bytes.
pub const MAX_QUANTUM: u32 = 65_535;

/// End of a list.
const NIL: u32 = u32::MAX;

/// Which list a flow is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum List {
    None,
    New,
    Old,
}

#[derive(Clone, Copy, Debug)]
struct FlowState {
    /// Bytes the flow may still send this turn (below zero after a packet
    /// longer than what was left).
    deficit: i32,
    /// Bytes earned per turn.
    quantum: u32,
    /// The next flow on the same list, or [`NIL`].
    next: u32,
    list: List,
}

const IDLE: FlowState = FlowState {
    deficit: 0,
    quantum: 0,
    next: NIL,
    list: List::None,
};

/// A singly linked list of flows through [`FlowState::next`].
#[derive(Clone, Copy, Debug)]
struct Chain {
    head: u32,
    tail: u32,
}

impl Chain {
    const EMPTY: Chain = Chain {
        head: NIL,
        tail: NIL,
    };
}

/// Flow queueing (module docs).
pub struct Fq {
    flows: FlowTable,
    queues: PacketQueues,
    state: Box<[FlowState]>,
    new: Chain,
    old: Chain,
    /// The configured quantum (a flow of the smallest weight).
    quantum: u32,
    /// The smallest weight the quanta were computed with.
    min_weight: u32,
    /// Read-ahead (module docs): cursors over the queues of the flows
    /// after the old list's head, stepped one chunk per dequeue.
    scouts: [Scout; SCOUTS],
    /// The scout the next dequeue steps, and the one the next started
    /// replaces.
    scout_turn: usize,
    scout_next: usize,
    /// The last flow given a scout, or [`NIL`], the list it is on, and
    /// how many places it is behind that list's head.
    ahead: u32,
    ahead_on: List,
    ahead_by: usize,
}

/// DRR's ⌈q·w / w_min⌉, capped to what a deficit can hold.
fn quantum_for(q: u32, w_min: u32, weight: u32) -> u32 {
    crate::drr::quantum_for((q, w_min), weight).min(i32::MAX as u32 / 2)
}

impl Fq {
    /// Flow queueing over `flows` with room for `capacity` packets and a
    /// quantum of `quantum` bytes for the flows of the smallest weight.
    ///
    /// # Errors
    /// A quantum outside 1..=[`MAX_QUANTUM`], or an arena that cannot be
    /// built.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::{fq::Fq, FlowId, FlowTable, Instant, Packet, Scheduler};
    /// let mut s = Fq::new(FlowTable::uniform(2).unwrap(), 64, 1500).unwrap();
    /// let t = Instant::ZERO;
    /// for i in 0..4 {
    ///     s.enqueue(t, Packet::new(FlowId(0), 1500, i)).unwrap();
    /// }
    /// s.dequeue(t).unwrap(); // flow 0's first packet: its quantum is spent
    /// // A packet of an idle flow goes ahead of flow 0's backlog.
    /// s.enqueue(t, Packet::new(FlowId(1), 100, 9)).unwrap();
    /// assert_eq!(s.dequeue(t).unwrap().token, 9);
    /// ```
    pub fn new(flows: FlowTable, capacity: usize, quantum: u32) -> Result<Self, ConfigError> {
        ConfigError::check_range("FQ quantum (bytes)", quantum, 1..=MAX_QUANTUM)?;
        let queues = PacketQueues::new(flows.capacity(), capacity, None)?;
        let state = vec![IDLE; flows.capacity()].into_boxed_slice();
        let mut s = Fq {
            flows,
            queues,
            state,
            new: Chain::EMPTY,
            old: Chain::EMPTY,
            quantum,
            min_weight: 0,
            scouts: [Scout::DONE; SCOUTS],
            scout_turn: 0,
            scout_next: 0,
            ahead: NIL,
            ahead_on: List::None,
            ahead_by: 0,
        };
        s.recompute_quanta();
        Ok(s)
    }

    /// The quantum of `flow` in bytes, `None` when absent.
    pub fn quantum(&self, flow: FlowId) -> Option<u32> {
        self.flows
            .contains(flow)
            .then(|| self.state[flow.index()].quantum)
    }

    /// Whether `flow` is on the new list (it became active and has not yet
    /// used its first quantum or emptied).
    pub fn is_new(&self, flow: FlowId) -> bool {
        self.state
            .get(flow.index())
            .is_some_and(|s| s.list == List::New)
    }

    fn recompute_quanta(&mut self) {
        self.min_weight = self.flows.min_weight();
        for (f, p) in self.flows.iter() {
            self.state[f.index()].quantum = quantum_for(self.quantum, self.min_weight, p.weight);
        }
    }

    fn refresh_quanta(&mut self, flow: FlowId) {
        if self.flows.min_weight() != self.min_weight {
            self.recompute_quanta();
        } else if let Some(p) = self.flows.get(flow) {
            self.state[flow.index()].quantum = quantum_for(self.quantum, self.min_weight, p.weight);
        }
    }

    fn chain(&mut self, list: List) -> &mut Chain {
        match list {
            List::New => &mut self.new,
            _ => &mut self.old,
        }
    }

    /// Appends `f` (on no list) to `list`.
    #[inline]
    fn push_tail(&mut self, list: List, f: u32) {
        self.state[f as usize].next = NIL;
        self.state[f as usize].list = list;
        let tail = self.chain(list).tail;
        if tail == NIL {
            self.chain(list).head = f;
        } else {
            self.state[tail as usize].next = f;
        }
        self.chain(list).tail = f;
    }

    /// Takes the head off `list` (not empty); it is then on no list.
    #[inline]
    fn pop_head(&mut self, list: List) -> u32 {
        let f = self.chain(list).head;
        let next = self.state[f as usize].next;
        let c = self.chain(list);
        c.head = next;
        if next == NIL {
            c.tail = NIL;
        }
        self.state[f as usize].next = NIL;
        self.state[f as usize].list = List::None;
        self.read_ahead(list, f);
        f
    }

    /// The head of `list` was taken off: the flows behind it move one
    /// place up, and up to two more flows get a scout over their queues,
    /// so that about [`SCOUTS`] flows behind the head have their first
    /// packets on the way to the cache when their turn comes. Scouts only
    /// read memory; they never change a decision.
    #[inline]
    fn read_ahead(&mut self, list: List, popped: u32) {
        if self.ahead == popped || self.ahead == NIL || self.ahead_on != list {
            self.ahead = self.chain(list).head;
            self.ahead_on = list;
            self.ahead_by = 0;
        } else {
            self.ahead_by = self.ahead_by.saturating_sub(1);
        }
        for _ in 0..2 {
            if self.ahead == NIL || self.ahead_by >= SCOUTS {
                break;
            }
            let next = self.state[self.ahead as usize].next;
            if next == NIL {
                break;
            }
            self.ahead = next;
            self.ahead_by += 1;
            self.scouts[self.scout_next] = self.queues.scout(next as usize, SCOUT_CHUNKS);
            self.scout_next = (self.scout_next + 1) % SCOUTS;
        }
    }

    /// Takes `f` off whichever list holds it.
    fn unlink(&mut self, f: u32) {
        let list = self.state[f as usize].list;
        if list == List::None {
            return;
        }
        // The read-ahead starts again from the head.
        self.ahead = NIL;
        let head = self.chain(list).head;
        if head == f {
            self.pop_head(list);
            return;
        }
        let mut prev = head;
        while prev != NIL && self.state[prev as usize].next != f {
            prev = self.state[prev as usize].next;
        }
        if prev == NIL {
            debug_assert!(false, "flow {f} marked on a list but not found");
        } else {
            let next = self.state[f as usize].next;
            self.state[prev as usize].next = next;
            if self.chain(list).tail == f {
                self.chain(list).tail = prev;
            }
        }
        self.state[f as usize].next = NIL;
        self.state[f as usize].list = List::None;
    }
}

impl Scheduler for Fq {
    #[inline]
    fn enqueue(&mut self, _now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.flows.admit(&pkt)?;
        let f = pkt.flow.0;
        self.queues.push(f as usize, pkt)?;
        if self.state[f as usize].list == List::None {
            self.state[f as usize].deficit = self.state[f as usize].quantum as i32;
            self.push_tail(List::New, f);
        }
        Ok(())
    }

    #[inline]
    fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
        loop {
            let list = if self.new.head != NIL {
                List::New
            } else if self.old.head != NIL {
                List::Old
            } else {
                return None;
            };
            let f = self.chain(list).head;
            let st = &mut self.state[f as usize];
            if st.deficit <= 0 {
                st.deficit = st.deficit.saturating_add(st.quantum.max(1) as i32);
                self.pop_head(list);
                self.push_tail(List::Old, f);
                continue;
            }
            match self.queues.pop(f as usize) {
                Some(pkt) => {
                    let st = &mut self.state[f as usize];
                    st.deficit -= pkt.len as i32;
                    let turn = self.scout_turn;
                    self.scout_turn = (turn + 1) % SCOUTS;
                    self.queues.scout_step(&mut self.scouts[turn]);
                    return Some(pkt);
                }
                None => {
                    self.pop_head(list);
                    if list == List::New {
                        self.push_tail(List::Old, f);
                    }
                }
            }
        }
    }

    fn queued(&self) -> usize {
        self.queues.total()
    }

    fn name(&self) -> &'static str {
        "fq"
    }

    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.insert(flow, params)?;
        self.state[flow.index()] = IDLE;
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
        self.state[f] = IDLE;
        self.refresh_quanta(flow);
        Ok(())
    }

    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        self.flows
            .contains(flow)
            .then(|| self.queues.len(flow.index()))
    }

    /// The flow's oldest packet, out of the schedule for its owner to drop;
    /// the flow keeps its list and deficit (dummynet's and Linux's
    /// `fq_codel` drop from the longest queue's head so).
    fn drop_head(&mut self, flow: FlowId) -> Option<Packet> {
        if !self.flows.contains(flow) {
            return None;
        }
        self.queues.pop(flow.index())
    }

    /// Gives back the deficit a dropped packet was charged (RFC 8290
    /// §4.2: CoDel's drops happen before the charge). The flow keeps its
    /// place, so its next packet goes next if it has one.
    fn uncharge(&mut self, flow: FlowId, len: u32) {
        if let Some(st) = self.state.get_mut(flow.index()) {
            if st.list != List::None {
                st.deficit = st.deficit.saturating_add(len as i32);
            }
        }
    }

    /// A new configured quantum (module docs, *Quantum*): every flow's
    /// quantum is recomputed from it; lists, places and deficits stay.
    fn set_quantum(&mut self, bytes: u32) -> Result<(), ConfigError> {
        ConfigError::check_range("FQ quantum (bytes)", bytes, 1..=MAX_QUANTUM)?;
        self.quantum = bytes;
        self.recompute_quanta();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(weight: u32) -> FlowParams {
        FlowParams {
            weight,
            ..FlowParams::default()
        }
    }

    fn drain(s: &mut Fq) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(p) = s.dequeue(Instant::ZERO) {
            out.push(p.token);
        }
        out
    }

    /// The textbook of RFC 8290 §4.2 on a small case: a backlogged flow, then
    /// a sparse one arriving mid-way goes ahead of it; once the sparse flow
    /// has emptied it waits on the old list as any other.
    #[test]
    fn a_new_flow_goes_first_and_an_emptied_one_joins_the_old_list() {
        let mut s = Fq::new(FlowTable::uniform(3).unwrap(), 64, 1000).unwrap();
        let t = Instant::ZERO;
        for i in 0..6 {
            s.enqueue(t, Packet::new(FlowId(0), 600, i)).unwrap();
        }
        // Flow 0 is new with 1000 bytes: two 600-byte packets, then its
        // deficit (-200) sends it to the old list.
        assert_eq!(s.dequeue(t).unwrap().token, 0);
        assert!(s.is_new(FlowId(0)));
        s.enqueue(t, Packet::new(FlowId(1), 100, 10)).unwrap();
        s.enqueue(t, Packet::new(FlowId(1), 100, 11)).unwrap();
        // Flow 0 is still the head of the new list and has 400 bytes left.
        assert_eq!(s.dequeue(t).unwrap().token, 1);
        // Flow 0 moves to the old list; flow 1 (new) goes next, twice.
        assert_eq!(s.dequeue(t).unwrap().token, 10);
        assert_eq!(s.dequeue(t).unwrap().token, 11);
        // Flow 1 empties: it goes to the old list behind flow 0, so a new
        // packet of flow 1 now waits its turn.
        assert_eq!(s.dequeue(t).unwrap().token, 2);
        assert!(!s.is_new(FlowId(1)));
        s.enqueue(t, Packet::new(FlowId(1), 100, 12)).unwrap();
        assert!(!s.is_new(FlowId(1)), "still on the old list");
        // Flow 0 has 800 - 600 = 200 left after packet 2 (it earned 1000
        // at -200): packet 3 too, then flow 1's turn.
        assert_eq!(drain(&mut s), [3, 12, 4, 5]);
        // Both lists end empty (flows pass off them when found empty).
        assert_eq!(s.new.head, NIL);
        assert_eq!(s.old.head, NIL);
        assert!(!s.is_new(FlowId(0)));
    }

    #[test]
    fn quanta_follow_the_smallest_weight_and_the_table() {
        let flows = FlowTable::with_capacity(4, vec![p(2), p(6)]).unwrap();
        let mut s = Fq::new(flows, 16, 1000).unwrap();
        assert_eq!(
            (s.quantum(FlowId(0)), s.quantum(FlowId(1))),
            (Some(1000), Some(3000))
        );
        s.add_flow(FlowId(2), p(1)).unwrap();
        let q: Vec<_> = (0..3).map(|f| s.quantum(FlowId(f)).unwrap()).collect();
        assert_eq!(q, [2000, 6000, 1000]);
        s.change_flow(FlowId(2), p(4)).unwrap();
        let q: Vec<_> = (0..3).map(|f| s.quantum(FlowId(f)).unwrap()).collect();
        assert_eq!(q, [1000, 3000, 2000]);
        s.remove_flow(FlowId(0), &mut |_| {}).unwrap();
        assert_eq!(s.quantum(FlowId(0)), None);
        assert_eq!(s.quantum(FlowId(2)), Some(1000)); // w_min is now 4
    }

    #[test]
    fn a_quantum_out_of_range_is_refused_by_name() {
        for bad in [0, MAX_QUANTUM + 1] {
            let err = Fq::new(FlowTable::uniform(1).unwrap(), 4, bad)
                .err()
                .expect("refused");
            assert!(err.to_string().contains("FQ quantum"), "{err}");
        }
    }

    /// A new quantum scales every flow's; a bad one changes nothing; queued
    /// packets and deficits stay, and the new quantum shows from each
    /// flow's next turn.
    #[test]
    fn a_new_quantum_applies_from_each_flows_next_turn() {
        let flows = FlowTable::with_capacity(2, vec![p(1), p(1)]).unwrap();
        let mut s = Fq::new(flows, 64, 1000).unwrap();
        let t = Instant::ZERO;
        for i in 0..8 {
            s.enqueue(t, Packet::new(FlowId(0), 1000, i)).unwrap();
            s.enqueue(t, Packet::new(FlowId(1), 1000, 100 + i)).unwrap();
        }
        // One 1000-byte packet a turn each.
        let first: Vec<u64> = (0..2).map(|_| s.dequeue(t).unwrap().token).collect();
        assert_eq!(first, [0, 100]);
        for bad in [0, MAX_QUANTUM + 1] {
            let e = s.set_quantum(bad).unwrap_err();
            assert!(e.to_string().contains("FQ quantum"), "{e}");
            assert_eq!(s.quantum(FlowId(0)), Some(1000));
        }
        s.set_quantum(2000).unwrap();
        assert_eq!(
            (s.quantum(FlowId(0)), s.quantum(FlowId(1))),
            (Some(2000), Some(2000))
        );
        // Flow 0 had earned its 1000 bytes before the change (one packet);
        // flow 1 earns 2000 at its next turn, and from then on both send
        // two packets a turn. Nothing lost or reordered.
        assert_eq!(
            drain(&mut s),
            [1, 101, 102, 2, 3, 103, 104, 4, 5, 105, 106, 6, 7, 107]
        );
        // A scheduler without one refuses by name.
        let mut drr = crate::Drr::new(FlowTable::uniform(1).unwrap(), 4).unwrap();
        let e = drr.set_quantum(1000).unwrap_err();
        assert!(e.to_string().contains("no scheduler-wide quantum"), "{e}");
    }

    /// Backlogged flows of equal weight share by bytes whatever their packet
    /// sizes, within a quantum and a packet.
    #[test]
    fn backlogged_flows_share_bytes_equally() {
        let mut s = Fq::new(FlowTable::uniform(2).unwrap(), 4096, 1514).unwrap();
        let t = Instant::ZERO;
        for i in 0..1000u64 {
            s.enqueue(t, Packet::new(FlowId(0), 1500, i)).unwrap();
            s.enqueue(t, Packet::new(FlowId(1), 100, i)).unwrap();
        }
        let mut bytes = [0u64; 2];
        for _ in 0..400 {
            let p = s.dequeue(t).unwrap();
            bytes[p.flow.index()] += u64::from(p.len);
        }
        let diff = bytes[0].abs_diff(bytes[1]);
        assert!(diff <= 1514 + 1500, "{bytes:?}");
    }

    #[test]
    fn removing_a_flow_on_either_list_purges_it_and_keeps_the_others() {
        let flows = FlowTable::with_capacity(4, vec![p(1); 3]).unwrap();
        let mut s = Fq::new(flows, 64, 100).unwrap();
        let t = Instant::ZERO;
        for i in 0..3u64 {
            for f in 0..3 {
                s.enqueue(t, Packet::new(FlowId(f), 100, 10 * u64::from(f) + i))
                    .unwrap();
            }
        }
        // Each flow sends one packet from the new list, then sits on the old.
        assert_eq!(drain_n(&mut s, 3), [0, 10, 20]);
        let mut purged = Vec::new();
        s.remove_flow(FlowId(1), &mut |r| purged.push(r.packet.token))
            .unwrap();
        assert_eq!(purged, [11, 12]);
        assert_eq!(s.flow_queued(FlowId(1)), None);
        assert_eq!(drain(&mut s), [1, 21, 2, 22]);
        // The id is reused and starts new.
        s.add_flow(FlowId(1), p(1)).unwrap();
        s.enqueue(t, Packet::new(FlowId(1), 100, 99)).unwrap();
        assert!(s.is_new(FlowId(1)));
        assert_eq!(drain(&mut s), [99]);
    }

    /// RFC 8290 §4.2 written plainly: two lists of flow ids, a deficit per
    /// flow, a queue of (token, len) per flow.
    struct Model {
        new: std::collections::VecDeque<usize>,
        old: std::collections::VecDeque<usize>,
        listed: Vec<bool>,
        deficit: Vec<i64>,
        queues: Vec<std::collections::VecDeque<(u64, u32)>>,
        quantum: i64,
    }

    impl Model {
        fn enqueue(&mut self, f: usize, token: u64, len: u32) {
            self.queues[f].push_back((token, len));
            if !self.listed[f] {
                self.listed[f] = true;
                self.deficit[f] = self.quantum;
                self.new.push_back(f);
            }
        }

        fn dequeue(&mut self) -> Option<u64> {
            loop {
                let from_new = !self.new.is_empty();
                let list = if from_new {
                    &mut self.new
                } else {
                    &mut self.old
                };
                let f = *list.front()?;
                if self.deficit[f] <= 0 {
                    self.deficit[f] += self.quantum;
                    list.pop_front();
                    self.old.push_back(f);
                    continue;
                }
                if let Some((token, len)) = self.queues[f].pop_front() {
                    self.deficit[f] -= i64::from(len);
                    return Some(token);
                }
                list.pop_front();
                if from_new {
                    self.old.push_back(f);
                } else {
                    self.listed[f] = false;
                }
            }
        }
    }

    proptest::proptest! {
        /// Any interleaving of arrivals and departures leaves in the order
        /// the plain model of RFC 8290 gives.
        #[test]
        fn service_order_matches_the_rfc_model(
            quantum in 1u32..3000,
            ops in proptest::collection::vec((0usize..5, 40u32..1600, proptest::bool::weighted(0.55)), 1..400),
        ) {
            let mut s = Fq::new(FlowTable::uniform(5).unwrap(), 512, quantum).unwrap();
            let mut m = Model {
                new: Default::default(),
                old: Default::default(),
                listed: vec![false; 5],
                deficit: vec![0; 5],
                queues: vec![Default::default(); 5],
                quantum: i64::from(quantum),
            };
            for (token, (f, len, arrive)) in ops.into_iter().enumerate() {
                if arrive {
                    s.enqueue(Instant::ZERO, Packet::new(FlowId(f as u32), len, token as u64)).unwrap();
                    m.enqueue(f, token as u64, len);
                } else {
                    proptest::prop_assert_eq!(s.dequeue(Instant::ZERO).map(|p| p.token), m.dequeue());
                }
            }
            loop {
                let (a, b) = (s.dequeue(Instant::ZERO).map(|p| p.token), m.dequeue());
                proptest::prop_assert_eq!(a, b);
                if a.is_none() {
                    break;
                }
            }
        }
    }

    /// A packet dropped at the head gives its bytes back: the flow keeps
    /// its turn for the next packet.
    #[test]
    fn an_uncharged_drop_leaves_the_flow_its_turn() {
        let mut s = Fq::new(FlowTable::uniform(2).unwrap(), 16, 1000).unwrap();
        let t = Instant::ZERO;
        for i in 0..2 {
            s.enqueue(t, Packet::new(FlowId(0), 1000, i)).unwrap();
            s.enqueue(t, Packet::new(FlowId(1), 1000, 10 + i)).unwrap();
        }
        let p = s.dequeue(t).unwrap();
        assert_eq!(p.token, 0);
        s.uncharge(p.flow, p.len);
        assert_eq!(s.dequeue(t).unwrap().token, 1, "flow 0 again");
        assert_eq!(drain(&mut s), [10, 11]);
        // A flow on no list gains nothing.
        assert!(!s.is_new(FlowId(0)) && s.state[0].list == List::None);
        let before = s.state[0].deficit;
        s.uncharge(FlowId(0), 1000);
        assert_eq!(s.state[0].deficit, before);
    }

    fn drain_n(s: &mut Fq, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| s.dequeue(Instant::ZERO).unwrap().token)
            .collect()
    }

    /// A packet far longer than the quantum still leaves, after the flow has
    /// earned enough rounds.
    #[test]
    fn a_packet_longer_than_the_quantum_leaves() {
        let mut s = Fq::new(FlowTable::uniform(2).unwrap(), 16, 1).unwrap();
        let t = Instant::ZERO;
        s.enqueue(t, Packet::new(FlowId(0), 1500, 1)).unwrap();
        s.enqueue(t, Packet::new(FlowId(0), 1500, 2)).unwrap();
        s.enqueue(t, Packet::new(FlowId(1), 1500, 3)).unwrap();
        assert_eq!(drain(&mut s), [1, 3, 2]);
        assert_eq!(s.queued(), 0);
    }
}
