//! Highest Random Weight over a flat set of targets, plain and weighted.
//!
//! # Plain HRW (\[H\] §5.1)
//! A flow goes to `argmax_j g(c, S_j)` (see [`weight`]); ties (two equal
//! 31-bit weights) go to the lowest target id. Guarantees, for a well-mixed
//! digest: every target receives 1/N of the flows in expectation; adding a
//! target moves only the flows that the new target wins, 1/(N+1) of them in
//! expectation, and nothing moves between old targets; removing target k
//! moves only k's flows. O(N) weight evaluations per decision, no allocation.
//!
//! # Weighted HRW
//! Targets with weights w_j (e.g. link rates) should win a fraction
//! w_j / Σw of the flows. Two forms, chosen by [`WeightForm`]:
//! * [`WeightForm::Logarithmic`] (the default): score_j = −w_j / ln(u_j),
//!   u_j = (g + ½)/2^31 ∈ (0, 1). For i.i.d. uniform u_j this is exact: −ln(u_j)
//!   is Exp(1), so −ln(u_j)/w_j is Exp(w_j) and the smallest of them (the
//!   largest score) belongs to j with probability w_j/Σw (Schindelhauer &
//!   Schomaker, "Weighted distributed hash tables", SPAA 2005). Changing one
//!   weight moves only flows to or from that target. Cost: one `ln` per
//!   target.
//! * [`WeightForm::Carp`]: score_j = x_j·u_j with the multipliers of \[H\]
//!   Theorem 7.1 ([`carp_multipliers`]); the dissertation's form, also exact
//!   for i.i.d. uniform u_j, one multiply per target, but changing one weight
//!   changes every multiplier and moves flows between unchanged targets.
//!
//! Determinism: `ln` comes from the platform's math library; where it is not
//! correctly rounded, scores can differ in the last bit, which changes a
//! decision only at an exact near-tie.
//!
//! \[H\] D. Guo, *Multicore Scheduling for Network Applications Based on
//! Highest Random Weight*, PhD thesis, UC Riverside, 2010.
//! [`weight`]: super::weight
//! [`carp_multipliers`]: super::carp_multipliers

use super::carp::carp_multipliers;
use super::digest::{seeded_weight, target_seed, unit_weight, weight, FlowDigest};
use super::error::{check_ids, check_weights, PlaceError};

/// Plain HRW over targets named by distinct ids.
///
/// # Examples
/// ```
/// use pspat_sched::place::{FlowDigest, Hrw};
/// let hrw = Hrw::with_targets(4).unwrap();
/// let t = hrw.decide(FlowDigest::of_u64(99));
/// assert!(t < 4);
/// assert_eq!(t, hrw.decide(FlowDigest::of_u64(99)));
/// ```
#[derive(Clone, Debug)]
pub struct Hrw {
    ids: Vec<u32>,
    /// [`target_seed`] of each id.
    seeds: Vec<u32>,
}

impl Hrw {
    /// HRW over targets with the given ids (the S_i of the weight function).
    /// Decisions return positions in `ids`.
    ///
    /// # Errors
    /// [`PlaceError::NoTargets`], [`PlaceError::DuplicateTarget`].
    pub fn new(ids: Vec<u32>) -> Result<Self, PlaceError> {
        check_ids(&ids)?;
        let seeds = ids.iter().map(|&id| target_seed(id)).collect();
        Ok(Hrw { ids, seeds })
    }

    /// HRW over `n` targets with ids `0..n`.
    ///
    /// # Errors
    /// [`PlaceError::NoTargets`] when `n == 0`, [`PlaceError::OutOfRange`]
    /// when `n` does not fit a `u32`.
    pub fn with_targets(n: usize) -> Result<Self, PlaceError> {
        Self::new(ids_upto(n)?)
    }

    /// The target ids, in decision order.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The number of targets.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Always false: an `Hrw` has at least one target.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The position of the target that wins `digest`. O(N), no allocation.
    pub fn decide(&self, digest: FlowDigest) -> usize {
        let d31 = digest.d31() as u32;
        let mut best = 0;
        let mut best_key = 0u64;
        for (i, (&id, &seed)) in self.ids.iter().zip(&self.seeds).enumerate() {
            let key = (u64::from(seeded_weight(seed, d31)) << 32) | u64::from(!id);
            best = if key > best_key { i } else { best };
            best_key = best_key.max(key);
        }
        best
    }
}

/// The position in `ids` with the largest `weight`, ties to the lowest id.
///
/// Branch-free: each target's weight (31 bits) and inverted id (32 bits)
/// form one 64-bit key, so the larger key is the winner with the lower id
/// on a tie, and the running maximum and its position are selected without
/// a jump (a new maximum, random by design, would be a mispredicted branch
/// about ln N times per decision).
#[inline]
pub(crate) fn argmax_plain(ids: &[u32], digest: FlowDigest) -> usize {
    let mut best = 0;
    let mut best_key = 0u64;
    for (i, &id) in ids.iter().enumerate() {
        let key = (weight(digest, id) << 32) | u64::from(!id);
        // Keys are distinct (ids are), so `>=` only matters for position
        // 0 with key 0, which `best = 0` already names.
        best = if key > best_key { i } else { best };
        best_key = best_key.max(key);
    }
    best
}

/// `x` as an integer with the order of [`f64::total_cmp`].
#[inline]
fn ordered_bits(x: f64) -> u64 {
    let b = x.to_bits();
    // Negative numbers: flip every bit; positive: flip the sign bit.
    b ^ ((((b as i64) >> 63) as u64) | (1 << 63))
}

/// The position with the largest `score`, ties to the lowest id. Scores
/// are compared as [`f64::total_cmp`] orders them (they are finite here);
/// branch-free as [`argmax_plain`], with 128-bit keys (score, inverted id).
#[inline]
pub(crate) fn argmax_by_score(ids: &[u32], mut score: impl FnMut(usize, u32) -> f64) -> usize {
    let mut best = 0;
    let mut best_key = 0u128;
    for (i, &id) in ids.iter().enumerate() {
        let key = (u128::from(ordered_bits(score(i, id))) << 32) | u128::from(!id);
        best = if key > best_key { i } else { best };
        best_key = best_key.max(key);
    }
    best
}

/// Ids `0..n`.
pub(crate) fn ids_upto(n: usize) -> Result<Vec<u32>, PlaceError> {
    if n == 0 {
        return Err(PlaceError::NoTargets);
    }
    let n32 = u32::try_from(n).map_err(|_| PlaceError::OutOfRange {
        what: "number of targets",
        value: n.to_string(),
        allowed: "1..=4294967295",
    })?;
    Ok((0..n32).collect())
}

/// How [`WeightedHrw`] turns weights into scores (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightForm {
    /// score = −w / ln(u): exact shares, minimal disruption on weight changes.
    #[default]
    Logarithmic,
    /// score = x·u with \[H\] Theorem 7.1's multipliers: exact shares, one
    /// multiply per target.
    Carp,
}

/// Weighted HRW: target j wins a fraction w_j / Σw of the flows.
///
/// # Examples
/// ```
/// use pspat_sched::place::{FlowDigest, WeightForm, WeightedHrw};
/// // Two links of 10 and 40 Gbit/s: about 80% of the flows go to the second.
/// let w = WeightedHrw::new(vec![0, 1], &[10e9, 40e9], WeightForm::Logarithmic).unwrap();
/// let second = (0..10_000u64).filter(|&k| w.decide(FlowDigest::of_u64(k)) == 1).count();
/// assert!((7_700..8_300).contains(&second));
/// ```
#[derive(Clone, Debug)]
pub struct WeightedHrw {
    ids: Vec<u32>,
    form: WeightForm,
    /// Logarithmic: the weights normalised to Σ = 1; Carp: the multipliers.
    factors: Vec<f64>,
}

impl WeightedHrw {
    /// Weighted HRW over targets `ids` with `weights` (same length).
    ///
    /// # Errors
    /// [`PlaceError::NoTargets`], [`PlaceError::DuplicateTarget`],
    /// [`PlaceError::BadWeight`] (zero, negative or not finite),
    /// [`PlaceError::WeightSum`] (a sum past `f64::MAX`),
    /// [`PlaceError::IndexOutOfRange`] when the lengths differ.
    pub fn new(ids: Vec<u32>, weights: &[f64], form: WeightForm) -> Result<Self, PlaceError> {
        check_ids(&ids)?;
        check_weights(weights)?;
        if weights.len() != ids.len() {
            return Err(PlaceError::IndexOutOfRange {
                what: "weights for targets",
                index: weights.len(),
                len: ids.len(),
            });
        }
        let sum: f64 = weights.iter().sum();
        if !sum.is_finite() {
            return Err(PlaceError::WeightSum { sum });
        }
        let shares: Vec<f64> = weights.iter().map(|w| w / sum).collect();
        let factors = match form {
            WeightForm::Logarithmic => shares,
            WeightForm::Carp => carp_multipliers(&shares)?,
        };
        Ok(WeightedHrw { ids, form, factors })
    }

    /// Weighted HRW over `weights.len()` targets with ids `0..n`.
    ///
    /// # Errors
    /// As [`WeightedHrw::new`].
    pub fn with_weights(weights: &[f64], form: WeightForm) -> Result<Self, PlaceError> {
        Self::new(ids_upto(weights.len())?, weights, form)
    }

    /// The target ids, in decision order.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The form in use.
    pub fn form(&self) -> WeightForm {
        self.form
    }

    /// The position of the target that wins `digest`. O(N), no allocation.
    pub fn decide(&self, digest: FlowDigest) -> usize {
        let f = &self.factors;
        match self.form {
            WeightForm::Logarithmic => {
                argmax_by_score(&self.ids, |i, id| -f[i] / unit_weight(digest, id).ln())
            }
            WeightForm::Carp => argmax_by_score(&self.ids, |i, id| f[i] * unit_weight(digest, id)),
        }
    }
}
