//! Which dispatcher transmits a released packet (\[J\] §3.3 places by flow;
//! Guo's dissertation, `docs/REFERENCE.md` §7, places by Highest Random
//! Weight).
//!
//! * [`DispatchPlacement::Modulo`]: `flow % T`, as the paper's prototype.
//! * [`DispatchPlacement::Hrw`]: the flow's HRW winner among the T
//!   dispatchers (`pspat_sched::place::hrw`): fixed per flow, computed once
//!   and cached.
//! * [`DispatchPlacement::Ahrw`]: queue-adjusted HRW
//!   (`pspat_sched::place::Ahrw`): the weights are scaled by each
//!   dispatcher's backlog (packets handed to it and not yet transmitted), so
//!   a flow leaves a loaded dispatcher. A flow is re-placed only at a
//!   *flowlet boundary*: when every packet it handed to its current
//!   dispatcher was transmitted.
//! * [`DispatchPlacement::RoundRobin`]: packet by packet, ignoring flows.
//!   A baseline for measurements only: it reorders packets of a flow.
//!
//! # Order (the flowlet guard)
//! Each dispatcher counts the packets it has transmitted (`done`, stored
//! with Release after its backend's `transmit` returned, and after a
//! failed backend counted them). Its TX mailbox is FIFO, so the arbiter
//! numbers the packets it hands to each dispatcher and keeps, per flow, the
//! number of the last one. When the dispatcher's `done` (loaded with
//! Acquire once per round) has reached that number, the flow has nothing in
//! flight there: its next packet may go elsewhere and cannot overtake an
//! earlier one, because the earlier ones were all transmitted. Under
//! Modulo and HRW a flow never moves; under AHRW it moves only so; under
//! round robin order is not kept.
//!
//! # State and cost
//! Per flow slot 16 bytes (the dispatcher and the last number), in a table
//! of 2^16 slots indexed by `flow % 2^16` (flows sharing a slot are placed
//! together, which keeps the guard exact), allocated at start only for HRW
//! and AHRW. Per packet: O(1) (a slot read and write); a decision (HRW or
//! AHRW, O(T) weight evaluations) for a flow's first packet under HRW and
//! at each flowlet boundary under AHRW. Per round: one load of each
//! dispatcher's `done`. No allocation after start.

use crossbeam_utils::CachePadded;
use pspat_sched::place::{Ahrw, FlowDigest, Hrw, MinQueue};
use pspat_sched::FlowId;

use crate::sync::{AtomicU64, Ordering};

/// How released packets are spread over the dispatchers
/// ([`crate::RuntimeConfig::dispatch_placement`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DispatchPlacement {
    /// `flow % T` (the default; the reference prototype's rule).
    #[default]
    Modulo,
    /// Highest Random Weight per flow, fixed.
    Hrw,
    /// Queue-adjusted HRW, re-decided at flowlet boundaries.
    Ahrw,
    /// Packet by packet in turn; reorders a flow's packets (a baseline).
    RoundRobin,
}

impl DispatchPlacement {
    /// Every variant, in documentation order.
    pub const ALL: [DispatchPlacement; 4] = [
        DispatchPlacement::Modulo,
        DispatchPlacement::Hrw,
        DispatchPlacement::Ahrw,
        DispatchPlacement::RoundRobin,
    ];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            DispatchPlacement::Modulo => "modulo",
            DispatchPlacement::Hrw => "hrw",
            DispatchPlacement::Ahrw => "ahrw",
            DispatchPlacement::RoundRobin => "round-robin",
        }
    }
}

impl std::fmt::Display for DispatchPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DispatchPlacement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        DispatchPlacement::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| "expected modulo, hrw, ahrw or round-robin".to_string())
    }
}

/// Slots of the per-flow table.
const FLOW_SLOTS: usize = 1 << 16;
/// A slot whose flow was never placed.
const UNPLACED: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct FlowSlot {
    /// Dispatcher position, or [`UNPLACED`].
    target: u32,
    /// Number of the last packet handed to `target` for this slot.
    last: u64,
}

/// The arbiter's side of placement: one per [`super::Sink::Dispatch`].
pub(crate) struct Placer {
    kind: DispatchPlacement,
    targets: usize,
    /// Packets handed to each dispatcher so far (the numbers).
    handed: Vec<u64>,
    /// Each dispatcher's `done`, as loaded at the start of the round.
    done_seen: Vec<u64>,
    flows: Vec<FlowSlot>,
    hrw: Option<Hrw>,
    ahrw: Option<Ahrw>,
    next_rr: usize,
    /// Flows that changed dispatcher at a flowlet boundary.
    #[cfg_attr(not(test), allow(dead_code))]
    moves: u64,
}

impl Placer {
    pub(crate) fn new(kind: DispatchPlacement, targets: usize) -> Self {
        let tracked = matches!(kind, DispatchPlacement::Hrw | DispatchPlacement::Ahrw);
        let ahrw = (kind == DispatchPlacement::Ahrw)
            .then(|| Ahrw::with_targets(targets, MinQueue::default()).ok())
            .flatten();
        Placer {
            kind,
            targets,
            handed: vec![0; targets],
            done_seen: vec![0; targets],
            flows: if tracked {
                vec![
                    FlowSlot {
                        target: UNPLACED,
                        last: 0,
                    };
                    FLOW_SLOTS
                ]
            } else {
                Vec::new()
            },
            hrw: tracked.then(|| Hrw::with_targets(targets).ok()).flatten(),
            ahrw,
            next_rr: 0,
            moves: 0,
        }
    }

    /// Start of a hand-off: reads every dispatcher's `done` once.
    pub(crate) fn begin_round(&mut self, done: &[CachePadded<AtomicU64>]) {
        if self.kind != DispatchPlacement::Ahrw {
            return;
        }
        for (seen, d) in self.done_seen.iter_mut().zip(done) {
            // Acquire: pairs with the dispatcher's Release store made after
            // its backend returned (module docs, *Order*).
            *seen = d.load(Ordering::Acquire);
        }
        if let Some(a) = self.ahrw.as_mut() {
            for (q, (h, s)) in a
                .queues_mut()
                .iter_mut()
                .zip(self.handed.iter().zip(&self.done_seen))
            {
                *q = h.saturating_sub(*s);
            }
        }
    }

    /// The dispatcher position for the next packet of `flow`.
    #[inline]
    pub(crate) fn place(&mut self, flow: FlowId) -> usize {
        let t = match self.kind {
            DispatchPlacement::Modulo => flow.index() % self.targets,
            DispatchPlacement::RoundRobin => {
                let t = self.next_rr;
                self.next_rr = (t + 1) % self.targets;
                t
            }
            DispatchPlacement::Hrw => {
                let slot = &mut self.flows[flow.index() % FLOW_SLOTS];
                if slot.target == UNPLACED {
                    slot.target = winner(self.hrw.as_ref(), flow) as u32;
                }
                slot.target as usize
            }
            DispatchPlacement::Ahrw => {
                let slot = &mut self.flows[flow.index() % FLOW_SLOTS];
                let idle =
                    slot.target == UNPLACED || self.done_seen[slot.target as usize] >= slot.last;
                if idle {
                    let digest = FlowDigest::of_u64(u64::from(flow.0));
                    let to = match self.ahrw.as_mut() {
                        Some(a) => a.decide(digest),
                        None => winner(self.hrw.as_ref(), flow),
                    } as u32;
                    if slot.target != UNPLACED && slot.target != to {
                        self.moves += 1;
                    }
                    slot.target = to;
                }
                slot.target as usize
            }
        };
        self.handed[t] += 1;
        if let Some(slot) = self.flows.get_mut(flow.index() % FLOW_SLOTS) {
            slot.last = self.handed[t];
        }
        if let Some(a) = self.ahrw.as_mut() {
            a.queues_mut()[t] += 1;
        }
        t
    }

    /// Flows moved at flowlet boundaries so far (AHRW).
    #[cfg(test)]
    pub(crate) fn moves(&self) -> u64 {
        self.moves
    }
}

/// The flow's HRW winner (position 0 if there is no HRW: never with T ≥ 1).
fn winner(hrw: Option<&Hrw>, flow: FlowId) -> usize {
    hrw.map_or(0, |h| h.decide(FlowDigest::of_u64(u64::from(flow.0))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(n: usize) -> Vec<CachePadded<AtomicU64>> {
        (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect()
    }

    #[test]
    fn modulo_and_hrw_never_move_a_flow() {
        for kind in [DispatchPlacement::Modulo, DispatchPlacement::Hrw] {
            let mut p = Placer::new(kind, 4);
            let first: Vec<usize> = (0..100).map(|f| p.place(FlowId(f))).collect();
            for _ in 0..3 {
                let again: Vec<usize> = (0..100).map(|f| p.place(FlowId(f))).collect();
                assert_eq!(again, first, "{kind}");
            }
            assert!(first.iter().all(|&t| t < 4));
            assert_eq!(p.moves(), 0);
        }
    }

    #[test]
    fn hrw_spreads_flows_over_every_dispatcher() {
        let mut p = Placer::new(DispatchPlacement::Hrw, 4);
        let mut per = [0usize; 4];
        for f in 0..4000 {
            per[p.place(FlowId(f))] += 1;
        }
        assert!(per.iter().all(|&n| (800..1200).contains(&n)), "{per:?}");
    }

    #[test]
    fn ahrw_moves_a_flow_only_when_its_packets_have_left() {
        let done = done(2);
        let mut p = Placer::new(DispatchPlacement::Ahrw, 2);
        p.begin_round(&done);
        let home = p.place(FlowId(7));
        // Load the home dispatcher heavily with another flow's packets.
        let mut heavy = 0;
        while p.place(FlowId(heavy)) != home {
            heavy += 1;
        }
        for _ in 0..10_000 {
            assert_eq!(p.place(FlowId(heavy)), home, "in flight: no move");
        }
        // One packet in flight at the other dispatcher (under the default
        // non-zero minimum, an idle target does not lower a busy one).
        let mut light = heavy + 1;
        while p.place(FlowId(light)) == home {
            light += 1;
        }
        // Flow 7's one packet (number 1 at `home`) was transmitted, the
        // heavy flow's behind it were not: flow 7 is idle and its home is
        // loaded, so it moves now, and then sticks while in flight there.
        assert_eq!(p.flows[7].last, 1);
        done[home].store(1, Ordering::Release);
        p.begin_round(&done);
        let moved_to = p.place(FlowId(7));
        assert_ne!(moved_to, home, "a loaded home is left at a boundary");
        assert_eq!(p.moves(), 1);
        p.begin_round(&done);
        assert_eq!(p.place(FlowId(7)), moved_to, "in flight at its new place");
    }

    #[test]
    fn round_robin_turns_packet_by_packet() {
        let mut p = Placer::new(DispatchPlacement::RoundRobin, 3);
        let got: Vec<usize> = (0..6).map(|_| p.place(FlowId(1))).collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn names_round_trip() {
        for k in DispatchPlacement::ALL {
            assert_eq!(k.name().parse::<DispatchPlacement>(), Ok(k));
        }
        assert!("nope".parse::<DispatchPlacement>().is_err());
    }
}
