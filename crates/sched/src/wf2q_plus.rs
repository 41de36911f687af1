//! WF²Q+. Bennett and Zhang, "Hierarchical Packet Fair Queueing Algorithms",
//! SIGCOMM 1996 / IEEE/ACM ToN 1997; heaps structured as dummynet's
//! `dn_sched_wf2q.c` (docs/REFERENCE.md §4.4).
//!
//! Every backlogged flow carries a virtual start tag S and finish tag
//! F = S + len/w_k for its head packet. The system virtual time advances by
//! `len / Σw` per packet sent and never lags the smallest S of a backlogged
//! flow: V = max(V + W/Σw, min S) (Bennett–Zhang). Among *eligible* flows
//! (S ≤ V) the one with the smallest F sends. Three preallocated 4-ary heaps
//! of flow indices hold the flows:
//!
//! * `eligible` (S ≤ V), keyed by F;
//! * `pending` (S > V), keyed by S;
//! * `idle`: flows with an empty queue whose F is still ahead of V, keyed by
//!   F. A flow that comes back before V passes its F restarts from S = F (it
//!   was served ahead of its fluid schedule and pays it back); once V passes
//!   F the flow is retired and restarts from S = V. Retiring keeps every
//!   remembered tag within 2⁶³ of V, so wrap-safe comparisons stay valid
//!   for flows idle arbitrarily long.
//!
//! A position map per flow (a flow is in at most one heap) lets `idle`
//! remove a flow from the middle.
//!
//! # Complexity
//! O(log N) per enqueue and dequeue. Retiring idle flows and the flush when
//! a new busy period starts are amortised O(log N) per packet (each flow
//! enters `idle` at most once per packet served). No division per packet.
//!
//! # Guarantees
//! With φ_k = w_k / Σw over all configured flows, a packet of flow k that
//! arrives at `a` when `Q_k(a)` bytes of k are not yet transmitted leaves an
//! exact link of rate B (driven one packet at a time) by
//!
//! * with the link rate hint ([`Wf2qPlus::with_link_rate`]), the
//!   one-maximum-packet bound of Bennett–Zhang
//!
//!   d ≤ a + Q_k(a)/(φ_k·B) + L_k/(φ_k·B) + L/B
//!
//!   V then grows with the work the link has done, at every `enqueue` and
//!   `dequeue` (V(t+τ) = max(V(t) + W(t, t+τ)/Σw, min S)), so a flow that
//!   arrives in the middle of a transmission gets the fluid system's V(a).
//!   L_k/(φ_k·B) is the flow's own head start (when its packet starts,
//!   S ≤ V, so its F — the next S — is at most V + L_k/w_k); L/B is
//!   non-preemption (the lower bound of docs/REFERENCE.md §3.1).
//! * without the hint, d ≤ a + Q_k(a)/(φ_k·B) + L_k/(φ_k·B) + 2·L/B. The
//!   scheduler does not know B, so V moves in whole-packet steps: a
//!   packet's service is charged to V when the next dequeue comes (or a new
//!   backlog starts), and an arrival during a transmission sees V at its
//!   start. The one-packet form is *not* guaranteed here: with 64 KB
//!   packets it was exceeded by up to 0.51·L/B.
//!
//! `tests/fair.rs` checks both packet by packet on random workloads
//! (lengths up to 65535, extreme weights, V wraps). Smallest c with
//! e ≤ L_k/(φ_k·B) + c·L/B measured over the 400 stress runs: 0.949 with
//! the hint, 1.507 without (`stress_lag_bounds_many_seeds`).
//!
//! # Ranges and arithmetic
//! * Weights 1..=65536 ([`crate::MAX_WEIGHT`]), packets 1..=65535 bytes, up
//!   to [`crate::FlowTable::MAX_FLOWS`] flows (Σw < 2⁴⁰).
//! * Tags are u64 fixed point with [`FRAC_BITS`] = 40 fraction bits:
//!   `inv_w = 2⁴⁰ / w` (relative error ≤ 2⁻²⁴), so one packet spans at most
//!   65535·2⁴⁰ < 2⁵⁶ and every live tag lies within 2⁵⁷ of V. Comparisons are
//!   wrap-safe (`(a − b) as i64 > 0`), so V wraps freely; with small Σw it
//!   wraps every few thousand packets, and the tests run past the wrap.
//! * V is accumulated in a u128 with 24 extra fraction bits,
//!   `V += len · 2⁶⁴/Σw` (reciprocal computed once, rounded down), so V's
//!   drift against the exact `len·2⁴⁰/Σw` is at most one unit per 2²⁴ bytes.
//!   This arithmetic (the crate's `vclock` module) is shared with QFQ.
//!
//! # Deviations
//! * V advances by len/Σw with Σ over *all configured* flows, as in
//!   Bennett–Zhang's normalised rates and Linux QFQ+; dummynet divides by
//!   the weights of the backlogged and idle-heap flows. The `max(V, min S)`
//!   jump still hands unused capacity to the backlogged flows.
//! * Without the link rate hint, V is charged at the next dequeue (see
//!   Guarantees) rather than growing during the transmission. With it, the
//!   work is counted in whole bytes (the remainder carried), capped at the
//!   bytes handed out and not yet charged: a caller that dequeues ahead of
//!   the link only delays V, a late one never over-charges it.
//! * When a packet arrives with no flow backlogged, the idle heap is flushed
//!   (dummynet flushes it in dequeue); V is never reset to 0, as
//!   wrap-safety makes it unnecessary.
//! * All idle flows whose F ≤ V are retired at each step, not one per call.
//! * Invalid timestamps are a location enum, not dummynet's S = F + 1.
//!
//! # Flow lifecycle
//! Per-flow state and the three heaps are sized by the table's capacity at
//! construction; nothing is allocated later. Σw is that of the *present*
//! flows and is updated at every add, change and remove (the service
//! already charged to V and not yet applied, or on the wire with the link
//! rate hint, is applied at the new Σw).
//! * **Add**: the flow starts off (no tags); its first packet starts at V.
//! * **Change**: a backlogged flow keeps its start tag S; its head's finish
//!   tag is recomputed with the new weight, F = S + len/w_new, and the flow
//!   re-sorted (O(log N)), so the new share applies from the packet at its
//!   head. An idle-heap flow keeps its remembered F.
//! * **Remove**: the flow leaves whichever heap holds it (O(log N)), its
//!   packets go to `purge` with [`crate::DropReason::FlowRemoved`], and its
//!   tags are forgotten, so a flow added again in the slot starts afresh.
//!   The remaining flows keep their tags; V keeps its invariant
//!   (V ≥ min S of the backlogged flows) through the usual catch-up.

use crate::scheduler::purged;
use crate::vclock::{vt_gt, VirtualClock};
use crate::{
    ConfigError, FlowError, FlowId, FlowParams, FlowTable, Instant, Packet, PacketQueues, Rejected,
    Scheduler,
};

pub use crate::vclock::FRAC_BITS;

/// A 4-ary min-heap of flow indices keyed by wrapping virtual times, with
/// the position of each flow kept in a map shared by all heaps of the
/// scheduler (a flow is in at most one heap at a time).
pub(crate) struct IndexHeap {
    entries: Box<[Entry]>,
    len: usize,
}

#[derive(Clone, Copy, Default)]
pub(crate) struct Entry {
    pub key: u64,
    pub id: u32,
}

const ARITY: usize = 4;

impl IndexHeap {
    pub(crate) fn new(n: usize) -> Self {
        IndexHeap {
            entries: vec![Entry::default(); n].into_boxed_slice(),
            len: 0,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn peek(&self) -> Option<Entry> {
        (self.len > 0).then(|| self.entries[0])
    }

    #[inline]
    pub(crate) fn push(&mut self, pos: &mut [u32], key: u64, id: u32) {
        let i = self.len;
        self.len += 1;
        self.sift_up(pos, i, Entry { key, id });
    }

    #[inline]
    pub(crate) fn pop(&mut self, pos: &mut [u32]) -> Option<Entry> {
        if self.len == 0 {
            return None;
        }
        let top = self.entries[0];
        self.len -= 1;
        if self.len > 0 {
            let last = self.entries[self.len];
            self.sift_down(pos, 0, last);
        }
        Some(top)
    }

    /// Removes the entry at position `i`.
    #[inline]
    pub(crate) fn remove_at(&mut self, pos: &mut [u32], i: usize) {
        if i >= self.len {
            return;
        }
        self.len -= 1;
        if i == self.len {
            return;
        }
        let last = self.entries[self.len];
        if vt_gt(self.entries[i].key, last.key) {
            self.sift_up(pos, i, last);
        } else {
            self.sift_down(pos, i, last);
        }
    }

    #[inline]
    fn sift_up(&mut self, pos: &mut [u32], mut i: usize, ent: Entry) {
        while i > 0 {
            let p = (i - 1) / ARITY;
            let pe = self.entries[p];
            if !vt_gt(pe.key, ent.key) {
                break;
            }
            self.entries[i] = pe;
            pos[pe.id as usize] = i as u32;
            i = p;
        }
        self.entries[i] = ent;
        pos[ent.id as usize] = i as u32;
    }

    #[inline]
    fn sift_down(&mut self, pos: &mut [u32], mut i: usize, ent: Entry) {
        loop {
            let c0 = i * ARITY + 1;
            if c0 >= self.len {
                break;
            }
            let end = (c0 + ARITY).min(self.len);
            let mut m = c0;
            for c in c0 + 1..end {
                if vt_gt(self.entries[m].key, self.entries[c].key) {
                    m = c;
                }
            }
            let me = self.entries[m];
            if !vt_gt(ent.key, me.key) {
                break;
            }
            self.entries[i] = me;
            pos[me.id as usize] = i as u32;
            i = m;
        }
        self.entries[i] = ent;
        pos[ent.id as usize] = i as u32;
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Loc {
    /// Not backlogged; no timestamp to remember.
    Off,
    /// Backlogged, S ≤ V.
    Eligible,
    /// Backlogged, S > V.
    Pending,
    /// Empty, but F > V: returns with S = F.
    Idle,
}

#[derive(Clone, Copy)]
struct FlowState {
    s: u64,
    f: u64,
    inv_w: u64,
    loc: Loc,
}

/// Worst-case Fair Weighted Fair Queueing+ with O(log N) indexed heaps.
///
/// # Examples
/// ```
/// use pspat_sched::{FlowId, FlowParams, FlowTable, Instant, Packet, Scheduler, Wf2qPlus};
/// let flows = FlowTable::new(vec![FlowParams::weighted(1), FlowParams::weighted(2)]).unwrap();
/// let mut s = Wf2qPlus::new(flows, 64).unwrap();
/// for i in 0..6 {
///     s.enqueue(Instant::ZERO, Packet::new(FlowId(i % 2), 100, i as u64)).unwrap();
/// }
/// let order: Vec<u32> = (0..6).map(|_| s.dequeue(Instant::ZERO).unwrap().flow.0).collect();
/// assert_eq!(order, [1, 0, 1, 1, 0, 0]);
/// ```
pub struct Wf2qPlus {
    flows: FlowTable,
    queues: PacketQueues,
    st: Box<[FlowState]>,
    pos: Box<[u32]>,
    eligible: IndexHeap,
    pending: IndexHeap,
    idle: IndexHeap,
    /// V over Σw of all configured flows. Without the link-rate hint a
    /// packet's service is charged to it and applied at the next dequeue
    /// (see [`VirtualClock`]).
    clock: VirtualClock,
    /// Link rate hint in bit/s; 0 = none (V moves in whole-packet steps).
    rate_bps: u64,
    /// With the hint: time of the last V advance, ns.
    last_ns: u64,
    /// With the hint: bytes handed to the link and not yet charged to V.
    wire: u64,
    /// With the hint: work done beyond the charged whole bytes, in
    /// bit·ns/s units (< [`BIT_NS_PER_BYTE`]).
    wire_frac: u128,
}

/// One byte in the units of `rate_bps × elapsed_ns` (8 bits × 10⁹ ns/s).
const BIT_NS_PER_BYTE: u128 = 8_000_000_000;

impl Wf2qPlus {
    /// WF²Q+ over `flows`, holding at most `capacity` packets.
    ///
    /// # Errors
    /// A capacity out of range (the flow table is already validated:
    /// weights 1..=65536, lmax 1..=65535).
    pub fn new(flows: FlowTable, capacity: usize) -> Result<Self, ConfigError> {
        let n = flows.capacity();
        let wsum = flows.total_weight();
        let queues = PacketQueues::new(n, capacity, None)?;
        let st = flows
            .slots()
            .map(|f| FlowState {
                s: 0,
                f: 0,
                inv_w: (1u64 << FRAC_BITS) / u64::from(f.weight.max(1)),
                loc: Loc::Off,
            })
            .collect();
        Ok(Wf2qPlus {
            flows,
            queues,
            st,
            pos: vec![0; n].into_boxed_slice(),
            eligible: IndexHeap::new(n),
            pending: IndexHeap::new(n),
            idle: IndexHeap::new(n),
            clock: VirtualClock::new(wsum),
            rate_bps: 0,
            last_ns: 0,
            wire: 0,
            wire_frac: 0,
        })
    }

    /// Tells the scheduler the rate B of the link it feeds, so that V grows
    /// continuously while a packet is on the wire, as Bennett–Zhang's
    /// V(t + τ) = max(V(t) + W(t, t + τ)/Σw, min S): at every `enqueue` and
    /// `dequeue`, V first advances by the bytes the link has sent since the
    /// previous call (`rate × elapsed`, at most the bytes handed out and not
    /// yet charged), then takes the `max(·, min S)` jump. With the hint the
    /// one-packet bound L_k/(φ_k·B) + L/B holds (module docs). The caller
    /// must pass times that follow the link (the `now` of each call).
    ///
    /// # Errors
    /// A rate outside [`crate::rate::MIN_RATE_BPS`]`..=`[`crate::rate::MAX_RATE_BPS`].
    pub fn with_link_rate(mut self, rate_bps: u64) -> Result<Self, ConfigError> {
        let rate = crate::rate::Rate::checked("WF2Q+ link rate hint (bit/s)", rate_bps)?;
        self.rate_bps = rate.bps();
        Ok(self)
    }

    /// The link rate hint, bit/s, if set.
    pub fn link_rate(&self) -> Option<u64> {
        (self.rate_bps != 0).then_some(self.rate_bps)
    }

    /// With the hint: charges V with the bytes the link sent since the last
    /// call (at most the bytes on the wire).
    #[inline]
    fn advance(&mut self, now: Instant) {
        if self.rate_bps == 0 {
            return;
        }
        let t = now.as_nanos();
        let elapsed = t.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(t);
        if self.wire == 0 {
            self.wire_frac = 0;
            return;
        }
        // ≤ 2⁴⁰ · 2⁶⁴ + 2³³: no overflow.
        let units = u128::from(self.rate_bps) * u128::from(elapsed) + self.wire_frac;
        let done = units / BIT_NS_PER_BYTE;
        let bytes = if done >= u128::from(self.wire) {
            self.wire_frac = 0;
            self.wire
        } else {
            self.wire_frac = units % BIT_NS_PER_BYTE;
            done as u64
        };
        self.wire -= bytes;
        self.clock.advance(bytes);
    }

    /// Test hook: starts the virtual clock at `v` (e.g. just below the wrap).
    /// Only meaningful before the first packet.
    #[doc(hidden)]
    #[must_use]
    pub fn with_initial_vtime(mut self, v: u64) -> Self {
        self.set_v(v);
        self
    }

    /// The current system virtual time (fixed point, [`FRAC_BITS`]).
    #[doc(hidden)]
    pub fn vtime(&self) -> u64 {
        self.v()
    }

    #[inline]
    fn v(&self) -> u64 {
        self.clock.now()
    }

    #[inline]
    fn set_v(&mut self, v: u64) {
        self.clock.set(v);
    }

    /// Charges `len` bytes to V (`len / Σw`), applied by the
    /// next [`Wf2qPlus::settle`].
    #[inline]
    fn charge(&mut self, len: u32) {
        if self.rate_bps != 0 {
            self.wire = self.wire.saturating_add(u64::from(len));
            return;
        }
        self.clock.charge(u64::from(len));
    }

    /// Applies the charged service to V, retires finished idle flows and
    /// keeps V ≥ the smallest S of a backlogged flow.
    #[inline]
    fn settle(&mut self) {
        self.clock.settle();
        self.retire_idle();
        self.catch_up();
    }

    /// Moves pending flows whose S ≤ V to the eligible heap.
    #[inline]
    fn promote(&mut self) {
        let v = self.v();
        while let Some(top) = self.pending.peek() {
            if vt_gt(top.key, v) {
                break;
            }
            self.pending.pop(&mut self.pos);
            let st = &mut self.st[top.id as usize];
            st.loc = Loc::Eligible;
            self.eligible.push(&mut self.pos, st.f, top.id);
        }
    }

    /// Retires idle flows whose F ≤ V: the fluid system has finished them.
    #[inline]
    fn retire_idle(&mut self) {
        let v = self.v();
        while let Some(top) = self.idle.peek() {
            if vt_gt(top.key, v) {
                break;
            }
            self.idle.pop(&mut self.pos);
            let st = &mut self.st[top.id as usize];
            st.loc = Loc::Off;
        }
    }

    /// V = max(V, min S of the pending flows) when nothing is eligible.
    #[inline]
    fn catch_up(&mut self) {
        if self.eligible.len() == 0 {
            if let Some(top) = self.pending.peek() {
                if vt_gt(top.key, self.v()) {
                    self.set_v(top.key);
                }
            }
        }
        self.promote();
    }

    fn flush_idle(&mut self) {
        while let Some(top) = self.idle.pop(&mut self.pos) {
            self.st[top.id as usize].loc = Loc::Off;
        }
    }

    /// 2⁴⁰ / w: the tag span of one byte at weight `w`.
    fn inv_weight(params: &FlowParams) -> u64 {
        (1u64 << FRAC_BITS) / u64::from(params.weight.max(1))
    }

    /// Takes `k` out of the heap that holds it, if any.
    fn unplace(&mut self, k: u32) {
        let at = self.pos[k as usize] as usize;
        match self.st[k as usize].loc {
            Loc::Off => {}
            Loc::Eligible => self.eligible.remove_at(&mut self.pos, at),
            Loc::Pending => self.pending.remove_at(&mut self.pos, at),
            Loc::Idle => self.idle.remove_at(&mut self.pos, at),
        }
        self.st[k as usize].loc = Loc::Off;
    }

    #[inline]
    fn place(&mut self, k: u32) {
        let v = self.v();
        let st = &mut self.st[k as usize];
        if vt_gt(st.s, v) {
            st.loc = Loc::Pending;
            self.pending.push(&mut self.pos, st.s, k);
        } else {
            st.loc = Loc::Eligible;
            self.eligible.push(&mut self.pos, st.f, k);
        }
    }
}

impl Scheduler for Wf2qPlus {
    #[inline]
    fn enqueue(&mut self, now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.flows.admit(&pkt)?;
        self.advance(now);
        let k = pkt.flow.0;
        self.queues.push(k as usize, pkt)?;
        if self.queues.len(k as usize) != 1 {
            return Ok(());
        }
        let idle_backlog = self.eligible.len() == 0 && self.pending.len() == 0;
        if idle_backlog {
            // A new busy period: what was charged has been served, and the
            // idle flows of the last one are forgotten (dummynet's flush).
            self.settle();
            self.flush_idle();
        }
        let v = self.v();
        let st = &mut self.st[k as usize];
        match st.loc {
            Loc::Idle => {
                let at = self.pos[k as usize] as usize;
                self.idle.remove_at(&mut self.pos, at);
                if !vt_gt(st.f, v) {
                    st.s = v;
                } else {
                    st.s = st.f;
                }
            }
            _ => st.s = v,
        }
        st.f = st.s.wrapping_add(u64::from(pkt.len) * st.inv_w);
        let s = st.s;
        if idle_backlog && vt_gt(s, v) {
            self.set_v(s);
        }
        self.place(k);
        self.retire_idle();
        Ok(())
    }

    #[inline]
    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        self.advance(now);
        self.settle();
        if self.eligible.len() == 0 && self.pending.len() == 0 {
            self.flush_idle();
            return None;
        }
        let top = self.eligible.pop(&mut self.pos)?;
        let k = top.id as usize;
        let pkt = self.queues.pop(k)?;
        self.charge(pkt.len);
        let next_len = self.queues.front(k).map(|p| p.len);
        let st = &mut self.st[k];
        st.s = st.f;
        match next_len {
            Some(len) => {
                st.f = st.s.wrapping_add(u64::from(len) * st.inv_w);
                self.place(k as u32);
            }
            None => {
                // Remembers F until V passes it (`retire_idle`).
                st.loc = Loc::Idle;
                self.idle.push(&mut self.pos, st.f, k as u32);
            }
        }
        Some(pkt)
    }

    #[inline]
    fn queued(&self) -> usize {
        self.queues.total()
    }

    fn name(&self) -> &'static str {
        "wf2q+"
    }

    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.insert(flow, params)?;
        self.st[flow.index()] = FlowState {
            s: 0,
            f: 0,
            inv_w: Self::inv_weight(&params),
            loc: Loc::Off,
        };
        self.clock.set_weight_sum(self.flows.total_weight());
        Ok(())
    }

    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.update(flow, params)?;
        self.clock.set_weight_sum(self.flows.total_weight());
        let k = flow.index();
        self.st[k].inv_w = Self::inv_weight(&params);
        let loc = self.st[k].loc;
        if matches!(loc, Loc::Eligible | Loc::Pending) {
            if let Some(head) = self.queues.front(k).map(|p| p.len) {
                self.unplace(flow.0);
                let st = &mut self.st[k];
                st.f = st.s.wrapping_add(u64::from(head) * st.inv_w);
                self.place(flow.0);
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
        self.clock.set_weight_sum(self.flows.total_weight());
        let k = flow.index();
        self.unplace(flow.0);
        while let Some(p) = self.queues.pop(k) {
            purge(purged(p));
        }
        self.st[k].s = 0;
        self.st[k].f = 0;
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
    use crate::{FlowId, FlowParams};

    #[test]
    fn heap_orders_and_removes_from_the_middle() {
        let mut pos = vec![0u32; 16];
        let mut h = IndexHeap::new(16);
        let keys = [9u64, 3, 7, 1, 12, 5, 8, 2, 11, 4];
        for (i, k) in keys.iter().enumerate() {
            h.push(&mut pos, *k, i as u32);
        }
        // Remove key 7 (id 2) from the middle.
        let at = pos[2] as usize;
        h.remove_at(&mut pos, at);
        let mut out = Vec::new();
        while let Some(e) = h.pop(&mut pos) {
            out.push(e.key);
        }
        assert_eq!(out, [1, 2, 3, 4, 5, 8, 9, 11, 12]);
    }

    #[test]
    fn heap_is_wrap_safe() {
        let mut pos = vec![0u32; 4];
        let mut h = IndexHeap::new(4);
        h.push(&mut pos, 5, 0);
        h.push(&mut pos, u64::MAX - 5, 1);
        assert_eq!(h.pop(&mut pos).map(|e| e.id), Some(1));
    }

    #[test]
    fn idle_flow_restarts_from_its_finish_until_v_passes_it() {
        let flows = FlowTable::new(vec![FlowParams::weighted(1), FlowParams::weighted(1)]).unwrap();
        let mut s = Wf2qPlus::new(flows, 16).unwrap();
        let now = Instant::ZERO;
        s.enqueue(now, Packet::new(FlowId(0), 1000, 0)).unwrap();
        s.enqueue(now, Packet::new(FlowId(1), 1000, 1)).unwrap();
        s.enqueue(now, Packet::new(FlowId(1), 1000, 2)).unwrap();
        assert_eq!(s.dequeue(now).unwrap().token, 0);
        // Flow 0 sent its only packet; its F (1000/1) is ahead of V.
        assert!(s.st[0].loc == Loc::Idle);
        s.enqueue(now, Packet::new(FlowId(0), 1000, 3)).unwrap();
        assert_eq!(s.st[0].s, 1000u64 << FRAC_BITS, "restarts from F");
        let order: Vec<u64> = (0..3).map(|_| s.dequeue(now).unwrap().token).collect();
        assert_eq!(order, [1, 3, 2]);
        assert!(s.dequeue(now).is_none());
        assert!(s.st.iter().all(|f| f.loc == Loc::Off), "flushed when empty");
    }

    #[test]
    fn link_rate_hint_is_validated() {
        let flows = || FlowTable::new(vec![FlowParams::weighted(1)]).unwrap();
        for bad in [0, 999, crate::rate::MAX_RATE_BPS + 1] {
            let err = Wf2qPlus::new(flows(), 4)
                .unwrap()
                .with_link_rate(bad)
                .err()
                .expect("refused");
            let msg = err.to_string();
            assert!(
                msg.contains("link rate") && msg.contains("1000..="),
                "{msg}"
            );
        }
        let s = Wf2qPlus::new(flows(), 4).unwrap();
        assert_eq!(s.link_rate(), None);
        let s = s.with_link_rate(8_000_000_000).unwrap();
        assert_eq!(s.link_rate(), Some(8_000_000_000));
    }

    /// With the hint V grows while a packet is on the wire, by the bytes
    /// sent (Σw = 4, 1 byte/ns), and never past the packet's length.
    #[test]
    fn hinted_v_follows_the_wire_and_stops_at_the_packet_end() {
        let flows = FlowTable::new(vec![FlowParams::weighted(1), FlowParams::weighted(3)]).unwrap();
        let mut s = Wf2qPlus::new(flows, 16)
            .unwrap()
            .with_link_rate(8_000_000_000)
            .unwrap();
        let t = Instant::from_nanos;
        let unit = 1u64 << FRAC_BITS;
        s.enqueue(t(0), Packet::new(FlowId(0), 1000, 0)).unwrap();
        assert_eq!(s.dequeue(t(0)).unwrap().token, 0);
        assert_eq!(s.vtime(), 0);
        // 400 of the 1000 bytes are out: V = 400/4.
        s.enqueue(t(400), Packet::new(FlowId(1), 300, 1)).unwrap();
        assert_eq!(s.vtime(), 100 * unit);
        assert_eq!(s.st[1].s, 100 * unit, "starts from the interpolated V");
        // Long after the packet ended: only its 1000 bytes count.
        s.enqueue(t(50_000), Packet::new(FlowId(1), 300, 2))
            .unwrap();
        assert_eq!(s.vtime(), 250 * unit);
        assert_eq!(s.dequeue(t(50_000)).unwrap().token, 1);
        // The same steps without the hint: the whole packet is charged at
        // once (here by the enqueue that starts a new backlog).
        let flows = FlowTable::new(vec![FlowParams::weighted(1), FlowParams::weighted(3)]).unwrap();
        let mut p = Wf2qPlus::new(flows, 16).unwrap();
        p.enqueue(t(0), Packet::new(FlowId(0), 1000, 0)).unwrap();
        p.dequeue(t(0)).unwrap();
        p.enqueue(t(400), Packet::new(FlowId(1), 300, 1)).unwrap();
        assert_eq!(p.vtime(), 250 * unit);
    }
}
