//! The flowlet guard: a flow changes target only when none of its packets is
//! in flight, so a placement that moves flows (AHRW, CA-AHRW) never reorders
//! a flow's packets.
//!
//! # Why
//! AHRW relaxes affinity packet by packet (\[H\] §5.2), and \[H\] adds no guard
//! against reordering. pspat keeps, per flow, the current target and the
//! count of its packets sent there and not yet completed; a proposal to move
//! is honoured only when that count is 0. Packets of one flow on one target
//! leave in order (a target is a FIFO), so the flow is never reordered: the
//! packet-level relaxation becomes a flowlet-level one.
//!
//! # Use
//! Per packet: `let t = guard.route(digest, proposed)`, send to `t`, then
//! `guard.sent(digest)`; when the target reports the packet done,
//! `guard.completed(digest)`.
//!
//! # Capacity and overflow policy
//! A fixed open-addressing table (linear probing, load at most 1/2) holds the
//! flows routed and not yet drained; an entry is deleted when its count
//! returns to 0 (backward-shift deletion, no tombstones), and an entry left
//! at 0 (routed, never sent) is reused by the next insertion that passes it,
//! or freed by [`FlowletGuard::forget`].
//! When `capacity` flows have packets in flight, a new flow cannot be
//! tracked: `route` returns the proposal unchanged, `sent`/`completed` for it
//! return `false`, and [`FlowletGuard::untracked`] counts such packets; that
//! flow may then be reordered. Size `capacity` at least to the number of
//! packets that can be in flight (a flow with a packet in flight takes one
//! entry), and overflow cannot happen.
//!
//! # Complexity
//! O(1) expected per call, no allocation after construction.
//!
//! \[H\] D. Guo, *Multicore Scheduling for Network Applications Based on
//! Highest Random Weight*, PhD thesis, UC Riverside, 2010.

use super::digest::FlowDigest;
use super::error::PlaceError;

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    used: bool,
    key: u64,
    target: u32,
    in_flight: u32,
}

/// Per-flow current target and in-flight count, fixed capacity.
///
/// # Examples
/// ```
/// use pspat_sched::place::{FlowDigest, FlowletGuard};
/// let mut g = FlowletGuard::new(1024).unwrap();
/// let f = FlowDigest::of_u64(1);
/// assert_eq!(g.route(f, 3), 3);
/// g.sent(f);
/// assert_eq!(g.route(f, 5), 3); // one packet still in flight on 3
/// g.sent(f);
/// g.completed(f);
/// g.completed(f);
/// assert_eq!(g.route(f, 5), 5); // drained: the flow may move
/// ```
#[derive(Clone, Debug)]
pub struct FlowletGuard {
    slots: Vec<Entry>,
    mask: usize,
    capacity: usize,
    occupied: usize,
    untracked: u64,
}

impl FlowletGuard {
    /// A guard tracking up to `capacity` flows at once.
    ///
    /// # Errors
    /// [`PlaceError::OutOfRange`] for `capacity` 0 or above 2^30.
    pub fn new(capacity: usize) -> Result<Self, PlaceError> {
        if !(1..=1 << 30).contains(&capacity) {
            return Err(PlaceError::OutOfRange {
                what: "flowlet guard capacity",
                value: capacity.to_string(),
                allowed: "1..=1073741824",
            });
        }
        let size = (2 * capacity).next_power_of_two();
        Ok(FlowletGuard {
            slots: vec![Entry::default(); size],
            mask: size - 1,
            capacity,
            occupied: 0,
            untracked: 0,
        })
    }

    /// The number of flows tracked at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Flows tracked now (routed and not drained).
    pub fn tracked(&self) -> usize {
        self.occupied
    }

    /// Calls for flows that could not be tracked (see the overflow policy).
    pub fn untracked(&self) -> u64 {
        self.untracked
    }

    /// The flow's current target and in-flight count, if tracked.
    pub fn state(&self, flow: FlowDigest) -> Option<(u32, u32)> {
        self.find(flow.0)
            .map(|i| (self.slots[i].target, self.slots[i].in_flight))
    }

    /// The target for the flow's next packet: its current target while it
    /// has packets in flight, else `proposed` (which becomes current).
    pub fn route(&mut self, flow: FlowDigest, proposed: u32) -> u32 {
        let key = flow.0;
        let mut i = (mix(key) as usize) & self.mask;
        let mut reusable = None;
        loop {
            let e = &self.slots[i];
            if !e.used {
                break;
            }
            if e.key == key {
                let e = &mut self.slots[i];
                if e.in_flight == 0 {
                    e.target = proposed;
                }
                return e.target;
            }
            if e.in_flight == 0 && reusable.is_none() {
                reusable = Some(i);
            }
            i = (i + 1) & self.mask;
        }
        let slot = match reusable {
            Some(r) => r,
            None if self.occupied < self.capacity => {
                self.occupied += 1;
                i
            }
            None => {
                self.untracked += 1;
                return proposed;
            }
        };
        self.slots[slot] = Entry {
            used: true,
            key,
            target: proposed,
            in_flight: 0,
        };
        proposed
    }

    /// One more packet of the flow is in flight on its current target.
    /// Returns false (and counts it) when the flow is not tracked.
    pub fn sent(&mut self, flow: FlowDigest) -> bool {
        match self.find(flow.0) {
            Some(i) => {
                let e = &mut self.slots[i];
                e.in_flight = e.in_flight.saturating_add(1);
                true
            }
            None => {
                self.untracked += 1;
                false
            }
        }
    }

    /// One packet of the flow completed; the flow's entry is freed when none
    /// is left in flight. Returns false (and counts it) when the flow is not
    /// tracked or had nothing in flight.
    pub fn completed(&mut self, flow: FlowDigest) -> bool {
        match self.find(flow.0) {
            Some(i) if self.slots[i].in_flight > 0 => {
                self.slots[i].in_flight -= 1;
                if self.slots[i].in_flight == 0 {
                    self.remove_at(i);
                }
                true
            }
            _ => {
                self.untracked += 1;
                false
            }
        }
    }

    /// Frees the flow's entry if it has nothing in flight (a packet routed
    /// and then dropped before `sent`). Returns whether an entry was freed.
    pub fn forget(&mut self, flow: FlowDigest) -> bool {
        match self.find(flow.0) {
            Some(i) if self.slots[i].in_flight == 0 => {
                self.remove_at(i);
                true
            }
            _ => false,
        }
    }

    fn find(&self, key: u64) -> Option<usize> {
        let mut i = (mix(key) as usize) & self.mask;
        loop {
            let e = &self.slots[i];
            if !e.used {
                return None;
            }
            if e.key == key {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Backward-shift deletion: later entries of the cluster move up so
    /// that every lookup still finds them before an empty slot.
    fn remove_at(&mut self, mut hole: usize) {
        self.occupied -= 1;
        let mut i = hole;
        loop {
            i = (i + 1) & self.mask;
            let e = self.slots[i];
            if !e.used {
                break;
            }
            let home = (mix(e.key) as usize) & self.mask;
            // Move e into the hole when its home is not in (hole, i].
            let dist_home = i.wrapping_sub(home) & self.mask;
            let dist_hole = i.wrapping_sub(hole) & self.mask;
            if dist_home >= dist_hole {
                self.slots[hole] = e;
                hole = i;
            }
        }
        self.slots[hole] = Entry::default();
    }
}

/// Table index from a digest: digests are already well mixed, but callers
/// may pass raw keys, so mix once more (SplitMix64's finalizer).
#[inline]
fn mix(key: u64) -> u64 {
    let mut z = key;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
