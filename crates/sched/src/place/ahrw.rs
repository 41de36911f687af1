//! Adaptive HRW (AHRW): HRW whose weights are scaled down on loaded targets.
//!
//! # Source
//! \[H\] Def. 5.1–5.2 and Eq. 6.1–6.2: h(c, p) = r_p·g(c, p) with
//! r_p = Q_min / Q_p, and r_p = 1 when Q_p = 0 (an idle target keeps its full
//! weight); the flow goes to `argmax_p h(c, p)`, ties to the lowest id.
//!
//! # Choices
//! * Q_min: \[H\] Ch. 5 takes the minimum over all targets, so one idle target
//!   zeroes every busy target's weight; Ch. 6 takes the minimum over non-zero
//!   queues. [`MinQueue::NonZero`] is the default, [`MinQueue::All`] the
//!   other reading.
//! * Queue unit: bytes (the caller's snapshot, e.g. a dispatcher's backlog
//!   taken once per round).
//!
//! # Guarantees
//! * With all queues equal, or all zero, AHRW decides exactly as HRW
//!   (r_p = 1 everywhere).
//! * The flow's home (its HRW target) is kept when it is idle or has the
//!   smallest non-zero queue; otherwise the flow moves to p only if
//!   Q_home/Q_p > g_home/g_p. With two targets and queue ratio ρ, a fraction
//!   1 − 1/ρ of the loaded target's flows is diverted (\[H\] §5.2's diversion
//!   law for i.i.d. uniform weights).
//! * AHRW relaxes affinity packet by packet, so it can reorder a flow; put a
//!   [`FlowletGuard`] in front to move flows only between flowlets.
//!
//! # Complexity
//! O(N) per decision (one pass for Q_min, one of N weight evaluations), no
//! allocation.
//!
//! \[H\] D. Guo, *Multicore Scheduling for Network Applications Based on
//! Highest Random Weight*, PhD thesis, UC Riverside, 2010.
//! [`FlowletGuard`]: super::FlowletGuard

use super::digest::{weight, FlowDigest};
use super::error::{check_ids, PlaceError};
use super::hrw::ids_upto;

/// Which minimum the multiplier r_p = Q_min / Q_p uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MinQueue {
    /// Minimum over non-zero queues (\[H\] Ch. 6; the default).
    #[default]
    NonZero,
    /// Minimum over all queues (\[H\] Ch. 5): an idle target zeroes every busy
    /// target's weight, so only idle targets can win while one exists.
    All,
}

impl MinQueue {
    /// Q_min of `queues` under this rule (0 when every queue is 0, or, for
    /// [`MinQueue::All`], when any is).
    #[inline]
    pub fn of(self, queues: impl Iterator<Item = f64>) -> f64 {
        let mut min = f64::INFINITY;
        for q in queues {
            if (q > 0.0 || self == MinQueue::All) && q < min {
                min = q;
            }
        }
        if min.is_finite() {
            min
        } else {
            0.0
        }
    }
}

/// The AHRW multiplier r_p: 1 for an idle target, else Q_min / Q_p.
#[inline]
pub fn multiplier(q_min: f64, q: f64) -> f64 {
    if q <= 0.0 {
        1.0
    } else {
        q_min / q
    }
}

/// AHRW over targets with queue lengths the caller keeps up to date.
///
/// # Examples
/// ```
/// use pspat_sched::place::{Ahrw, FlowDigest, MinQueue};
/// let mut a = Ahrw::with_targets(2, MinQueue::NonZero).unwrap();
/// let d = FlowDigest::of_u64(5);
/// let home = a.decide(d);
/// a.queues_mut()[home] = 1_000_000; // the home is loaded ...
/// a.queues_mut()[1 - home] = 1_000; // ... the other target is not
/// // Most flows whose home is loaded move; this one may or may not.
/// assert!(a.decide(d) < 2);
/// ```
#[derive(Clone, Debug)]
pub struct Ahrw {
    ids: Vec<u32>,
    queues: Vec<u64>,
    min_queue: MinQueue,
}

impl Ahrw {
    /// AHRW over targets `ids`, all queues empty.
    ///
    /// # Errors
    /// [`PlaceError::NoTargets`], [`PlaceError::DuplicateTarget`].
    pub fn new(ids: Vec<u32>, min_queue: MinQueue) -> Result<Self, PlaceError> {
        check_ids(&ids)?;
        let queues = vec![0; ids.len()];
        Ok(Ahrw {
            ids,
            queues,
            min_queue,
        })
    }

    /// AHRW over `n` targets with ids `0..n`.
    ///
    /// # Errors
    /// As [`Ahrw::new`].
    pub fn with_targets(n: usize, min_queue: MinQueue) -> Result<Self, PlaceError> {
        Self::new(ids_upto(n)?, min_queue)
    }

    /// The target ids, in decision order.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The queue lengths (bytes), by target position.
    pub fn queues(&self) -> &[u64] {
        &self.queues
    }

    /// The queue lengths to update in place (bytes), by target position.
    pub fn queues_mut(&mut self) -> &mut [u64] {
        &mut self.queues
    }

    /// Sets one target's queue length (bytes).
    ///
    /// # Errors
    /// [`PlaceError::IndexOutOfRange`] for a position beyond the targets.
    pub fn set_queue(&mut self, target: usize, bytes: u64) -> Result<(), PlaceError> {
        let len = self.queues.len();
        let q = self
            .queues
            .get_mut(target)
            .ok_or(PlaceError::IndexOutOfRange {
                what: "target",
                index: target,
                len,
            })?;
        *q = bytes;
        Ok(())
    }

    /// The position of the target that wins `digest` under the current
    /// queues. O(N), no allocation, no division.
    ///
    /// The score r_p·g_p = (Q_min/Q_p)·g_p is compared exactly as a
    /// fraction g_p / e_p with e_p = Q_p for a busy target and Q_min for an
    /// idle one (multiplier 1; Q_min cancels out of every comparison): two
    /// fractions compare by their cross products, below 2^95 in 128-bit
    /// integers. When Q_min is 0 (every queue empty, or [`MinQueue::All`]
    /// with an idle target) idle targets score g_p and busy ones 0. Ties go
    /// to the lowest id, as everywhere in this module. The argmax keeps its
    /// running best with selects, not jumps.
    pub fn decide(&self, digest: FlowDigest) -> usize {
        let q = &self.queues;
        let q_min = match self.min_queue {
            MinQueue::NonZero => q.iter().copied().filter(|&b| b > 0).min().unwrap_or(0),
            MinQueue::All => q.iter().copied().min().unwrap_or(0),
        };
        // Branch-free: (g, e) = (g, Q_p) busy, (g, Q_min) idle, and with
        // Q_min = 0 (g, 1) idle, (0, 1) busy.
        let fraction = |i: usize, id: u32| -> (u64, u64) {
            let g = weight(digest, id);
            let (b, idle, no_min) = (q[i], q[i] == 0, q_min == 0);
            let e = if idle { q_min } else { b };
            let n = if no_min && !idle { 0 } else { g };
            (n, if no_min { 1 } else { e })
        };
        let (mut best, mut best_id) = (0, self.ids[0]);
        let (mut best_n, mut best_e) = fraction(0, best_id);
        for (i, &id) in self.ids.iter().enumerate().skip(1) {
            let (n, e) = fraction(i, id);
            // 64 × 64 → 128-bit products: one widening multiply each.
            let lhs = u128::from(n) * u128::from(best_e);
            let rhs = u128::from(best_n) * u128::from(e);
            let better = lhs > rhs || (lhs == rhs && id < best_id);
            best = if better { i } else { best };
            best_id = if better { id } else { best_id };
            best_n = if better { n } else { best_n };
            best_e = if better { e } else { best_e };
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::place::hrw::argmax_by_score;

    /// The exact, division-free decision agrees with the score formula
    /// r_p·g_p evaluated in floating point, under both minimum rules, with
    /// idle and busy targets mixed.
    #[test]
    fn exact_decisions_match_the_floating_point_formula() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            rng >> 11
        };
        for rule in [MinQueue::NonZero, MinQueue::All] {
            for n in [1usize, 2, 3, 8, 17] {
                let mut a = Ahrw::with_targets(n, rule).unwrap();
                for round in 0..2_000u64 {
                    for q in a.queues_mut() {
                        // A third of the targets idle, the rest loaded.
                        let v = next();
                        *q = if v % 3 == 0 { 0 } else { v % 1_000_000 };
                    }
                    if round % 50 == 0 {
                        a.queues_mut().fill(0);
                    }
                    let d = FlowDigest(next() ^ (next() << 20));
                    let q = a.queues();
                    let q_min = rule.of(q.iter().map(|&b| b as f64));
                    let reference = argmax_by_score(a.ids(), |i, id| {
                        multiplier(q_min, q[i] as f64) * weight(d, id) as f64
                    });
                    assert_eq!(a.decide(d), reference, "{rule:?} n={n} q={q:?}");
                }
            }
        }
    }
}
