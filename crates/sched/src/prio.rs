//! PRIO: strict priority, as dummynet's `dn_sched_prio.c`.
//!
//! Each flow has a priority 0 (highest) ..= 63. All packets of one priority
//! share one FIFO (the reference code's behaviour, so flows of equal priority
//! leave in arrival order). A 64-bit occupancy bitmap finds the highest
//! non-empty priority with one `trailing_zeros`.
//!
//! # Complexity
//! O(1) per enqueue and dequeue.
//! # Guarantees
//! A packet of priority p leaves before any packet of priority > p that is
//! queued at the same time. Lower priorities can starve.
//! # Deviations
//! The shift is done on a `u64`, so priorities 31..=63 work (dummynet's
//! `1 << ix` on an `int` is undefined there). Round-robin among equal
//! priorities is not offered yet.
//!
//! # Flow lifecycle
//! Adding a flow is O(1). Changing a flow's priority moves its queued
//! packets, in order, from its old level to the tail of its new one (O(packets
//! of the old level)); a flow's packets stay in one level, so its order is
//! kept. Weight and lmax are not used. Removing a flow takes its packets
//! out of its level (O(packets of the level)); `flow_queued` walks the level.

use crate::scheduler::purged;
use crate::{
    ConfigError, FlowError, FlowId, FlowParams, FlowTable, Instant, Packet, PacketQueues, Rejected,
    Scheduler, PRIORITIES,
};

/// Strict priority over [`PRIORITIES`] levels.
///
/// # Examples
/// ```
/// use pspat_sched::{FlowId, FlowParams, FlowTable, Instant, Packet, Prio, Scheduler};
/// let low = FlowParams { priority: 5, ..FlowParams::default() };
/// let high = FlowParams { priority: 0, ..FlowParams::default() };
/// let mut s = Prio::new(FlowTable::new(vec![low, high]).unwrap(), 16).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(0), 60, 1)).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(1), 60, 2)).unwrap();
/// assert_eq!(s.dequeue(Instant::ZERO).unwrap().token, 2);
/// ```
pub struct Prio {
    flows: FlowTable,
    levels: PacketQueues,
    occupied: u64,
}

impl Prio {
    /// Strict priority over `flows`, holding at most `capacity` packets.
    ///
    /// # Errors
    /// A zero or oversized capacity.
    pub fn new(flows: FlowTable, capacity: usize) -> Result<Self, ConfigError> {
        Ok(Prio {
            flows,
            levels: PacketQueues::new(usize::from(PRIORITIES), capacity, None)?,
            occupied: 0,
        })
    }
}

impl Scheduler for Prio {
    #[inline]
    fn enqueue(&mut self, _now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.flows.admit(&pkt)?;
        let level = self.flows.slot(pkt.flow).priority;
        self.levels.push(usize::from(level), pkt)?;
        self.occupied |= 1u64 << level;
        Ok(())
    }

    #[inline]
    fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
        if self.occupied == 0 {
            return None;
        }
        let level = self.occupied.trailing_zeros() as usize;
        let pkt = self.levels.pop(level);
        if self.levels.is_empty(level) {
            self.occupied &= !(1u64 << level);
        }
        pkt
    }

    fn queued(&self) -> usize {
        self.levels.total()
    }

    fn name(&self) -> &'static str {
        "prio"
    }

    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.insert(flow, params)
    }

    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        let old = self.flows.update(flow, params)?;
        let (from, to) = (usize::from(old.priority), usize::from(params.priority));
        if from != to {
            for _ in 0..self.levels.len(from) {
                let Some(p) = self.levels.pop(from) else {
                    break;
                };
                let level = if p.flow == flow { to } else { from };
                // Cannot fail: the pop made room, and levels have no limit.
                let _ = self.levels.push(level, p);
            }
            for level in [from, to] {
                if self.levels.is_empty(level) {
                    self.occupied &= !(1u64 << level);
                } else {
                    self.occupied |= 1u64 << level;
                }
            }
        }
        Ok(())
    }

    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        let old = self.flows.remove(flow)?;
        let level = usize::from(old.priority);
        self.levels
            .retain(level, |p| p.flow != flow, |p| purge(purged(p)));
        if self.levels.is_empty(level) {
            self.occupied &= !(1u64 << level);
        }
        Ok(())
    }

    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        let level = usize::from(self.flows.get(flow)?.priority);
        Some(self.levels.iter(level).filter(|p| p.flow == flow).count())
    }
}
