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
//! O(N) per decision, no allocation: N weight evaluations and multiplies
//! (vectorised in blocks of eight), plus N divisions for Q_min / Q_p when the
//! queues changed since the previous decision.
//!
//! \[H\] D. Guo, *Multicore Scheduling for Network Applications Based on
//! Highest Random Weight*, PhD thesis, UC Riverside, 2010.
//!
//! [`FlowletGuard`]: super::FlowletGuard

use super::digest::{target_seed, FlowDigest, WEIGHT_A, WEIGHT_B, WEIGHT_RANGE};
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

/// Targets per block of a decision: one block's weights and keys live in
/// fixed-size arrays, so their loops vectorise.
const LANES: usize = 4;

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
    /// The targets in id order ("ranks"): `position[rank]`.
    position: Vec<usize>,
    /// `rank[position]`.
    rank: Vec<usize>,
    /// What a decision reads, by rank, in blocks of [`LANES`] targets; the
    /// last block padded with zeros (seed 0, r 0, tie-break 0).
    blocks: Vec<Block>,
    /// Low mantissa bits of a score that carry the tie-break: ⌈log₂ N⌉.
    rank_bits: u32,
    /// The queues may have changed since the multipliers were computed.
    stale: bool,
}

impl Ahrw {
    /// AHRW over targets `ids`, all queues empty.
    ///
    /// # Errors
    /// [`PlaceError::NoTargets`], [`PlaceError::DuplicateTarget`].
    pub fn new(ids: Vec<u32>, min_queue: MinQueue) -> Result<Self, PlaceError> {
        check_ids(&ids)?;
        let n = ids.len();
        let mut position: Vec<usize> = (0..n).collect();
        position.sort_unstable_by_key(|&p| ids[p]);
        let mut rank = vec![0; n];
        for (r, &p) in position.iter().enumerate() {
            rank[p] = r;
        }
        let mut blocks = vec![Block::default(); n.div_ceil(LANES)];
        for (rank, &p) in position.iter().enumerate() {
            let block = &mut blocks[rank / LANES];
            block.seeds[rank % LANES] = target_seed(ids[p]);
            block.tie_breaks[rank % LANES] = (n - 1 - rank) as u64;
        }
        let rank_bits = usize::BITS - (n - 1).leading_zeros();
        Ok(Ahrw {
            queues: vec![0; n],
            min_queue,
            position,
            rank,
            blocks,
            rank_bits,
            stale: true,
            ids,
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
    /// The next decision recomputes the multipliers.
    pub fn queues_mut(&mut self) -> &mut [u64] {
        self.stale = true;
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
        self.stale = true;
        Ok(())
    }

    /// The resolution of a decision: the low ⌈log₂ N⌉ of a score's 52
    /// mantissa bits carry the tie-break, so scores are compared to a
    /// relative `2^-(52 - ⌈log₂ N⌉)` (2^-49 at 5 to 8 targets).
    pub fn score_bits(&self) -> u32 {
        52 - self.rank_bits
    }

    /// Recomputes r_p = Q_min / Q_p (1 for an idle target) from the queues:
    /// N divisions, once per queue snapshot rather than per decision. Kept
    /// out of line so the decision's fast path stays small.
    #[cold]
    #[inline(never)]
    fn refresh(&mut self) {
        let q_min = self.min_queue.of(self.queues.iter().map(|&b| b as f64));
        for (p, &q) in self.queues.iter().enumerate() {
            let rank = self.rank[p];
            self.blocks[rank / LANES].multipliers[rank % LANES] = multiplier(q_min, q as f64);
        }
        self.stale = false;
    }

    /// The position of the target that wins `digest` under the current
    /// queues: `argmax_p r_p·g(c, p)`, ties to the lowest id.
    ///
    /// Each score r_p·g is computed in `f64` as [`multiplier`] states it;
    /// a non-negative `f64` orders as its bits do, so the low ⌈log₂ N⌉
    /// mantissa bits are replaced by a tie-break field (larger for a lower
    /// id) and the decision is the largest of N such keys, compared as
    /// floats. Per block of eight targets: eight 32-bit weight evaluations
    /// from precomputed seeds, eight conversions and multiplies, a mask and
    /// a max tree, with no branch. Idle and least-loaded targets have r = 1
    /// exactly, so with equal queues AHRW decides exactly as HRW; scores
    /// within a relative 2^-[`Ahrw::score_bits`] of each other may be
    /// decided either way. When the queues changed since the last decision,
    /// the multipliers are recomputed first (N divisions). No allocation.
    pub fn decide(&mut self, digest: FlowDigest) -> usize {
        if self.stale {
            self.refresh();
        }
        let d31 = digest.d31() as u32;
        let tie_mask = (1u64 << self.rank_bits) - 1;
        // Lane by lane, the best key seen in that lane of every block.
        let mut best_in_lane = [0.0f64; LANES];
        for block in &self.blocks {
            for (j, best) in best_in_lane.iter_mut().enumerate() {
                // The weight in a 64-bit lane: a 32 × 32 → 64 multiply.
                let x = u64::from(block.seeds[j] ^ d31);
                let g = (WEIGHT_A.wrapping_mul(x) + WEIGHT_B) & (WEIGHT_RANGE - 1);
                // g < 2^31: the conversion is exact.
                let score = g as f64 * block.multipliers[j];
                let key = f64::from_bits((score.to_bits() & !tie_mask) | block.tie_breaks[j]);
                *best = max(*best, key);
            }
        }
        let best = max_of_lanes(&best_in_lane);
        // Padding keys are 0.0; a real key is 0.0 only for the highest id
        // with score 0, and then every real key is at most its tie-break:
        // the decoded rank is right either way.
        let tie = best.to_bits() & tie_mask;
        self.position[self.position.len() - 1 - tie as usize]
    }
}

/// [`LANES`] targets as a decision reads them, lane by lane.
#[derive(Clone, Copy, Debug, Default)]
struct Block {
    /// [`target_seed`] of each id.
    seeds: [u32; LANES],
    /// r_p at the last refresh.
    multipliers: [f64; LANES],
    /// The low bits of each key: `N − 1 − rank`, the lowest id the largest.
    tie_breaks: [u64; LANES],
}

/// The larger of two keys (never NaN: scores are finite and at least 0).
#[inline]
fn max(a: f64, b: f64) -> f64 {
    if a > b {
        a
    } else {
        b
    }
}

/// The largest of one block's keys, as a tree.
#[inline]
fn max_of_lanes(k: &[f64; LANES]) -> f64 {
    max(max(k[0], k[2]), max(k[1], k[3]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::place::digest::weight;
    use crate::place::hrw::argmax_by_score;

    /// The decision is the argmax of the score formula r_p·g_p evaluated in
    /// floating point, up to the documented resolution: whenever it differs
    /// from the floating-point argmax, the two scores are within a relative
    /// 2^-score_bits. Both minimum rules, idle and busy targets
    /// mixed, ids in any order, across block boundaries (17 and 19 targets).
    #[test]
    fn decisions_are_the_argmax_of_the_formula_to_the_resolution() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            rng >> 11
        };
        let (mut decisions, mut differing) = (0u32, 0u32);
        for rule in [MinQueue::NonZero, MinQueue::All] {
            for ids in [
                vec![0],
                vec![0, 1],
                vec![5, 2, 9],
                (0..8).collect(),
                (0..17).collect(),
                (0..19u32).map(|i| (i * 7 + 11) % 19).collect::<Vec<u32>>(),
            ] {
                let n = ids.len();
                let mut a = Ahrw::new(ids, rule).unwrap();
                let resolution = 2f64.powi(-(a.score_bits() as i32));
                for round in 0..4_000u64 {
                    for q in a.queues_mut() {
                        // A third of the targets idle, the rest loaded.
                        let v = next();
                        *q = if v % 3 == 0 { 0 } else { v % 1_000_000 };
                    }
                    if round % 50 == 0 {
                        a.queues_mut().fill(0);
                    }
                    let d = FlowDigest(next() ^ (next() << 20));
                    let q = a.queues().to_vec();
                    let q_min = rule.of(q.iter().map(|&b| b as f64));
                    let ids = a.ids().to_vec();
                    let score =
                        |p: usize| multiplier(q_min, q[p] as f64) * weight(d, ids[p]) as f64;
                    let reference = argmax_by_score(&ids, |p, _| score(p));
                    let got = a.decide(d);
                    assert!(got < n);
                    decisions += 1;
                    if got != reference {
                        differing += 1;
                        assert!(
                            score(reference) - score(got) <= score(reference) * resolution,
                            "{rule:?} n={n} q={q:?}: {got} scores {} against {reference}'s {}",
                            score(got),
                            score(reference)
                        );
                    }
                    if q.iter().all(|&b| b == q[0]) {
                        assert_eq!(got, reference, "equal queues decide as HRW");
                    }
                }
            }
        }
        assert!(
            differing * 1000 < decisions,
            "{differing} of {decisions} differ"
        );
    }

    /// Exact ties go to the lowest id, within a block and across blocks,
    /// whatever the order of the ids: every multiplier 0 makes every score
    /// 0.
    #[test]
    fn exact_ties_go_to_the_lowest_id_across_blocks() {
        let ids: Vec<u32> = (0..19u32).map(|i| (i * 7 + 11) % 19 + 100).collect();
        let lowest = ids.iter().position(|&id| id == 100).unwrap();
        let mut a = Ahrw::new(ids, MinQueue::NonZero).unwrap();
        a.refresh();
        a.blocks
            .iter_mut()
            .for_each(|b| b.multipliers = [0.0; LANES]);
        for k in 0..100u64 {
            assert_eq!(a.decide(FlowDigest::of_u64(k)), lowest);
        }
        // A tie inside the last block only.
        let mut b = Ahrw::new(vec![9, 4, 6], MinQueue::NonZero).unwrap();
        b.refresh();
        b.blocks
            .iter_mut()
            .for_each(|b| b.multipliers = [0.0; LANES]);
        assert_eq!(b.decide(FlowDigest::of_u64(1)), 1);
    }
}
