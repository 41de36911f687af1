//! The system virtual time V of the fair-queueing algorithms (WF²Q+ and
//! QFQ, docs/REFERENCE.md §4): its fixed point, its wrap-safe comparison and the
//! accumulator that advances it by the bytes served.
//!
//! # Arithmetic
//! * Virtual times are u64 with [`FRAC_BITS`] fraction bits (a tag is
//!   bytes × 2⁴⁰ / weight) and wrap; `a > b` is `(a − b) as i64 > 0`
//!   ([`vt_gt`]), correct while the two are less than 2⁶³ apart.
//! * V advances by `len / Σw` per byte served, Σw over all configured
//!   flows. The accumulator keeps [`EXTRA_BITS`] more fraction bits in a
//!   u128 and adds `len · 2⁶⁴/Σw` with the reciprocal rounded down once, so
//!   V's drift against the exact `len · 2⁴⁰/Σw` is at most one unit per 2²⁴
//!   bytes (tested below, V wrapping on the way).
//!
//! # Complexity
//! O(1): one widening multiply per charge applied.

/// Fraction bits of the fixed-point virtual times.
pub const FRAC_BITS: u32 = 40;
/// Extra fraction bits of the V accumulator.
const EXTRA_BITS: u32 = 24;

/// `a > b` for wrapping u64 virtual times.
#[inline]
pub(crate) fn vt_gt(a: u64, b: u64) -> bool {
    (a.wrapping_sub(b) as i64) > 0
}

/// V's advance per byte served, 2^(FRAC_BITS + EXTRA_BITS) / Σw in the
/// accumulator's units, rounded down; 2⁶⁴ − 1 when Σw = 1, the one value
/// that does not fit a u64. A u64, so that a charge is one widening
/// multiply.
fn v_per_byte(wsum: u64) -> u64 {
    u64::try_from((1u128 << (FRAC_BITS + EXTRA_BITS)) / u128::from(wsum.max(1))).unwrap_or(u64::MAX)
}

/// V and the service charged to it but not applied yet.
///
/// The algorithms charge a packet when they hand it out and apply the charge
/// ([`VirtualClock::settle`]) at the next dequeue, when the link is free
/// again, as Bennett–Zhang update V at departures: arrivals during a
/// transmission see V as of its start.
#[derive(Clone, Copy, Debug)]
pub(crate) struct VirtualClock {
    /// V with [`EXTRA_BITS`] more fraction bits; V = low 64 bits of
    /// `acc >> EXTRA_BITS`.
    acc: u128,
    /// Bytes charged and not yet applied.
    pending_bytes: u64,
    /// [`v_per_byte`] of Σw.
    per_byte: u64,
}

impl VirtualClock {
    /// V = 0 for flows whose weights sum to `wsum`.
    pub(crate) fn new(wsum: u64) -> Self {
        VirtualClock {
            acc: 0,
            pending_bytes: 0,
            per_byte: v_per_byte(wsum),
        }
    }

    /// The sum of weights changed (a flow was added, changed or removed):
    /// later service advances V by `len / wsum`. Service charged and not
    /// yet applied is applied at the new rate.
    pub(crate) fn set_weight_sum(&mut self, wsum: u64) {
        self.per_byte = v_per_byte(wsum);
    }

    /// The current V.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        (self.acc >> EXTRA_BITS) as u64
    }

    /// Sets V (a jump to the smallest start tag, or a test's start value).
    #[inline]
    pub(crate) fn set(&mut self, v: u64) {
        self.acc = u128::from(v) << EXTRA_BITS;
    }

    /// Charges `bytes` served, applied by the next [`VirtualClock::settle`].
    #[inline]
    pub(crate) fn charge(&mut self, bytes: u64) {
        self.pending_bytes = self.pending_bytes.wrapping_add(bytes);
    }

    /// Applies the pending charge to V.
    #[inline]
    pub(crate) fn settle(&mut self) {
        self.advance(self.pending_bytes);
        self.pending_bytes = 0;
    }

    /// Advances V by `bytes` served now (WF²Q+ with a link rate, whose V
    /// follows the link's progress).
    #[inline]
    pub(crate) fn advance(&mut self, bytes: u64) {
        self.acc = self
            .acc
            .wrapping_add(u128::from(bytes) * u128::from(self.per_byte));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// V advances by len · 2⁴⁰ / Σw, behind the exact value by at most one
    /// unit per 2²⁴ bytes, also for Σw = 1, whose reciprocal 2⁶⁴ does not fit
    /// the u64 and is stored as 2⁶⁴ − 1. V wraps on the way (2³⁰ bytes at
    /// Σw = 1 are 2⁷⁰ units); the odd total keeps a wrong rate from wrapping
    /// to the same value.
    #[test]
    fn v_drift_stays_below_one_unit_per_2_pow_24_bytes() {
        for wsum in [1u64, 3, 8, 65_536, (1 << 40) - 1] {
            let mut v = VirtualClock::new(wsum);
            let total = (1u64 << 30) + 12_345;
            let mut sent = 0u64;
            while sent < total {
                let len = (total - sent).min(65_535);
                v.charge(len);
                v.settle();
                sent += len;
            }
            let exact = ((u128::from(sent) << FRAC_BITS) / u128::from(wsum)) as u64;
            let drift = exact.wrapping_sub(v.now());
            assert!(
                drift <= (sent >> EXTRA_BITS) + 1,
                "Σw {wsum}: V behind the exact value by {drift} units"
            );
        }
    }

    #[test]
    fn comparisons_hold_across_the_wrap() {
        assert!(vt_gt(5, u64::MAX - 5));
        assert!(!vt_gt(u64::MAX - 5, 5));
        assert!(!vt_gt(7, 7));
    }
}
