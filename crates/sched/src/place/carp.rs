//! The CARP multipliers of Guo's Theorem 7.1: given target probabilities
//! p_j, multipliers x_j such that `argmax_j x_j·u_j` over i.i.d. uniform
//! u_j picks target j with probability exactly p_j. Weighted HRW's
//! [`WeightForm::Carp`](super::WeightForm::Carp) and PS-HRW's residual
//! spreading both score targets with them.
//!
//! # Complexity
//! O(N log N) for N targets (one sort), no allocation in [`carp_into`].
//!
//! \[H\] D. Guo, *Multicore Scheduling for Network Applications Based on
//! Highest Random Weight*, PhD thesis, UC Riverside, 2010, Ch. 7.

use super::error::PlaceError;

/// The multipliers of \[H\] Theorem 7.1 for target probabilities `p`
/// (normalised to Σ = 1; zeros allowed, they get multiplier 0).
///
/// Sorting p ascending over the M positive entries: x_1 = (M·p_1)^{1/M} and
/// x_n = [(M−n+1)(p_n − p_{n−1}) / Π_{i<n} x_i + x_{n−1}^{M−n+1}]^{1/(M−n+1)},
/// so that Π x = 1.
///
/// # Examples
/// ```
/// use pspat_sched::place::carp_multipliers;
/// let x = carp_multipliers(&[0.1, 0.2, 0.3, 0.4]).unwrap();
/// for (got, want) in x.iter().zip([0.7953, 0.9584, 1.0867, 1.2074]) {
///     assert!((got - want).abs() < 1e-4);
/// }
/// ```
///
/// # Errors
/// [`PlaceError::NoTargets`] for an empty list; [`PlaceError::BadWeight`]
/// for a negative or non-finite entry, or when every entry is 0;
/// [`PlaceError::WeightSum`] when the entries sum past `f64::MAX`.
pub fn carp_multipliers(p: &[f64]) -> Result<Vec<f64>, PlaceError> {
    let mut order = vec![0usize; p.len()];
    let mut x = vec![0.0; p.len()];
    carp_into(p, &mut order, &mut x)?;
    Ok(x)
}

/// [`carp_multipliers`] into caller buffers (`order`, `x`: `p.len()` each).
pub(crate) fn carp_into(p: &[f64], order: &mut [usize], x: &mut [f64]) -> Result<(), PlaceError> {
    if p.is_empty() {
        return Err(PlaceError::NoTargets);
    }
    if let Some((index, &value)) = p
        .iter()
        .enumerate()
        .find(|(_, v)| !(v.is_finite() && **v >= 0.0))
    {
        return Err(PlaceError::BadWeight { index, value });
    }
    let sum: f64 = p.iter().sum();
    if !sum.is_finite() {
        return Err(PlaceError::WeightSum { sum });
    }
    if sum <= 0.0 {
        // Every weight is 0 (each was checked >= 0 above).
        return Err(PlaceError::BadWeight {
            index: 0,
            value: sum,
        });
    }
    for (i, o) in order.iter_mut().enumerate() {
        *o = i;
    }
    order.sort_unstable_by(|&a, &b| p[a].total_cmp(&p[b]).then(a.cmp(&b)));
    let zeros = p.iter().filter(|&&v| v == 0.0).count();
    let m = p.len() - zeros;
    let mut product = 1.0;
    let mut prev_p = 0.0;
    let mut prev_x = 0.0f64;
    for (k, &j) in order.iter().enumerate() {
        if k < zeros {
            x[j] = 0.0;
            continue;
        }
        let n = k - zeros + 1; // 1-based rank among the positive entries
        let e = (m - n + 1) as f64;
        let pn = p[j] / sum;
        let xn = if n == 1 {
            (m as f64 * pn).powf(1.0 / m as f64)
        } else {
            (e * (pn - prev_p) / product + prev_x.powf(e)).powf(1.0 / e)
        };
        x[j] = xn;
        product *= xn;
        prev_p = pn;
        prev_x = xn;
    }
    Ok(())
}
