//! Link and shaping rates: one type, one range, one pacing arithmetic.
//!
//! A [`Rate`] is a number of bits per second in
//! [`MIN_RATE_BPS`]`..=`[`MAX_RATE_BPS`] (1 kbit/s to 1 Tbit/s). Every rate
//! of the core goes through it: the [`LinkEmulator`](crate::LinkEmulator),
//! WF²Q+'s link-rate hint, the Eiffel shaper and LSTF's link, and the
//! guarantees and ceilings of a hierarchy (which add "unlimited" on top).
//! Building one is the only place the range is checked, and it answers a
//! [`ConfigError`] naming the field, the value and the range.
//!
//! # Two exact representations
//! * **Service units** ([`UNITS_PER_BYTE`]): one byte is 8·10⁹ units of
//!   `bit/s × ns`, so `rate × elapsed_ns` is the service of an interval
//!   with no rounding at all ([`Rate::service_units`]). Token buckets (the
//!   hierarchy), WF²Q+'s virtual clock and the fluid reference of
//!   `pspat-eval` count in this unit (the latter calls it a tick of 1/B ns).
//! * **Pacing** ([`Rate::ns_per_byte_fp`], [`Pacer`]): the time one byte
//!   takes, in ns as 32.32 fixed point, `⌊8·10⁹·2³² / B⌋`. A [`Pacer`]
//!   turns packet lengths into whole ns of transmission time and carries the
//!   fractional ns from one packet to the next, so no rate is lost to
//!   rounding however short the packets (the reference kernel's integer
//!   `picos_per_byte` runs 0.39 % fast at 40 Gbit/s).
//!
//! # Exactness of the pacing (drift per byte)
//! The per-byte constant is truncated by δ < 2⁻³² ns ≈ 2.3·10⁻¹⁰ ns, and the
//! pacer truncates nothing else: after any sequence of packets totalling N
//! bytes the ns handed out are exactly `⌊N·ns_per_byte_fp / 2³²⌋`. So they
//! lie in `(N·8·10⁹/B − N·2⁻³² − 1, N·8·10⁹/B]`: at most one ns plus
//! 2⁻³² ns per byte early, never late. Relative to the true time that is
//! `B / (8·10⁹·2³²)`: 0 at 1 kbit/s (8·10⁶ ns per byte is exact), below
//! 3·10⁻¹⁰ at 10 Gbit/s and below 3·10⁻⁸ at 1 Tbit/s, the top of the range.
//! The top is where that error stays below 10⁻⁷; the bottom keeps
//! `ns_per_byte_fp` (3.4·10¹⁶ at 1 kbit/s) well inside 64 bits.
//!
//! # Complexity
//! Building a rate is one 128-bit division; pacing a packet is one 64×32-bit
//! multiply, an add and a shift.
//!
//! # Examples
//! ```
//! use pspat_sched::rate::{Pacer, Rate};
//! let r = Rate::checked("link rate (bit/s)", 6_400_000_000u64).unwrap(); // 1.25 ns per byte
//! let mut pacer = Pacer::new(r);
//! let ns: u64 = (0..3).map(|_| pacer.advance(1)).sum();
//! assert_eq!(ns, 3); // 3.75 ns: 0.75 carried
//! assert_eq!(pacer.advance(3) + ns, 7); // 6 bytes: 7.5 ns, 7 handed out and 0.5 carried
//! let err = Rate::checked("eiffel.rate_bps", -5).unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "eiffel.rate_bps = -5 is out of range (allowed: 1000..=1000000000000 bit/s)"
//! );
//! ```

use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// Smallest rate accepted anywhere in the core, in bit/s (1 kbit/s).
pub const MIN_RATE_BPS: u64 = 1_000;
/// Largest rate accepted anywhere in the core, in bit/s (1 Tbit/s).
pub const MAX_RATE_BPS: u64 = 1_000_000_000_000;
/// One byte in service units of `bit/s × ns` (8 bits × 10⁹ ns/s).
pub const UNITS_PER_BYTE: u64 = 8_000_000_000;
/// Fractional bits of [`Rate::ns_per_byte_fp`].
pub const FRAC_BITS: u32 = 32;

/// A rate in bit/s within [`MIN_RATE_BPS`]`..=`[`MAX_RATE_BPS`], with its
/// time per byte precomputed.
///
/// Serialised as the bare number of bit/s; deserialising checks the range.
///
/// # Examples
/// ```
/// use pspat_sched::rate::Rate;
/// let r: Rate = serde_json::from_str("8000000000").unwrap(); // 1 byte per ns
/// assert_eq!(r.bps(), 8_000_000_000);
/// assert_eq!(r.ns_per_byte_fp(), 1 << 32);
/// assert_eq!(r.tx_ns(1500), 1500);
/// assert_eq!(serde_json::to_string(&r).unwrap(), "8000000000");
/// assert!(serde_json::from_str::<Rate>("999").is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct Rate {
    bps: u64,
    ns_per_byte_fp: u64,
}

const fn ns_per_byte_fp(bps: u64) -> u64 {
    // 8·10⁹·2³² / 1000 = 3.4·10¹⁶ at most: fits u64.
    (((UNITS_PER_BYTE as u128) << FRAC_BITS) / bps as u128) as u64
}

impl Rate {
    /// The slowest rate, [`MIN_RATE_BPS`].
    pub const MIN: Rate = Rate {
        bps: MIN_RATE_BPS,
        ns_per_byte_fp: ns_per_byte_fp(MIN_RATE_BPS),
    };
    /// The fastest rate, [`MAX_RATE_BPS`].
    pub const MAX: Rate = Rate {
        bps: MAX_RATE_BPS,
        ns_per_byte_fp: ns_per_byte_fp(MAX_RATE_BPS),
    };

    /// The allowed range as `lo..=hi bit/s`, as error messages print it.
    pub fn range_text() -> String {
        format!("{MIN_RATE_BPS}..={MAX_RATE_BPS} bit/s")
    }

    /// `bps` bit/s, checked against the range; `field` names the value in
    /// the error (a config field, a flag). Takes any integer, signed
    /// included, so that a negative number from a config file is refused
    /// here, by name, rather than by the deserialiser.
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] naming `field`, the value as given and
    /// the range.
    pub fn checked(field: impl Into<String>, bps: impl Into<i128>) -> Result<Self, ConfigError> {
        let bps = bps.into();
        match u64::try_from(bps) {
            Ok(b) if (MIN_RATE_BPS..=MAX_RATE_BPS).contains(&b) => Ok(Rate {
                bps: b,
                ns_per_byte_fp: ns_per_byte_fp(b),
            }),
            _ => Err(ConfigError::out_of_range(field, bps, Self::range_text())),
        }
    }

    /// `bps` clamped into the range: for derived rates (a per-unit rate
    /// times a weight) where "faster than the fastest" means the fastest.
    pub fn saturating(bps: u64) -> Self {
        let b = bps.clamp(MIN_RATE_BPS, MAX_RATE_BPS);
        Rate {
            bps: b,
            ns_per_byte_fp: ns_per_byte_fp(b),
        }
    }

    /// `self × k`, clamped at [`Rate::MAX`] (and at [`Rate::MIN`] for k = 0).
    #[must_use]
    pub fn saturating_mul(self, k: u64) -> Self {
        Self::saturating(self.bps.saturating_mul(k))
    }

    /// The rate in bit/s.
    #[inline]
    pub const fn bps(self) -> u64 {
        self.bps
    }

    /// Nanoseconds per byte in 32.32 fixed point, `⌊8·10⁹·2³² / bps⌋`
    /// (see the module docs for the error).
    #[inline]
    pub const fn ns_per_byte_fp(self) -> u64 {
        self.ns_per_byte_fp
    }

    /// Transmission time of `len` bytes in whole ns, `⌊len·8·10⁹ / bps⌋`
    /// exactly (one division; for ranks and estimates: to pace a sequence
    /// of packets use a [`Pacer`], which carries the fractions).
    #[inline]
    pub const fn tx_ns(self, len: u32) -> u64 {
        // len < 2³² and 8·10⁹ < 2³³: the product fits u64 unless len > 2.3·10⁹.
        match (len as u64).checked_mul(UNITS_PER_BYTE) {
            Some(units) => units / self.bps,
            None => (len as u128 * UNITS_PER_BYTE as u128 / self.bps as u128) as u64,
        }
    }

    /// The service of `ns` nanoseconds in units of [`UNITS_PER_BYTE`] per
    /// byte: exactly `bps × ns`.
    #[inline]
    pub const fn service_units(self, ns: u64) -> u128 {
        self.bps as u128 * ns as u128
    }
}

impl TryFrom<u64> for Rate {
    type Error = ConfigError;

    fn try_from(bps: u64) -> Result<Self, ConfigError> {
        Self::checked("rate (bit/s)", bps)
    }
}

impl From<Rate> for u64 {
    fn from(r: Rate) -> u64 {
        r.bps
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bit/s", self.bps)
    }
}

/// Turns packet lengths into transmission times at one rate, carrying the
/// fractional nanoseconds from packet to packet (see the module docs for
/// the exactness). 16 bytes; [`Pacer::UNLIMITED`] paces every packet in 0 ns.
///
/// # Examples
/// ```
/// use pspat_sched::rate::{Pacer, Rate};
/// let mut p = Pacer::new(Rate::checked("rate", 6_400_000_000u64).unwrap()); // 1.25 ns per byte
/// let total: u64 = (0..1000).map(|_| p.advance(61)).sum();
/// assert_eq!(total, 76_250); // 61 000 bytes × 1.25 ns; rounding each packet would give 76 000
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacer {
    ns_per_byte_fp: u64,
    frac: u32,
}

impl Pacer {
    /// A pacer that never delays: every packet takes 0 ns.
    pub const UNLIMITED: Pacer = Pacer {
        ns_per_byte_fp: 0,
        frac: 0,
    };

    /// A pacer at `rate`, with no fraction carried yet.
    pub const fn new(rate: Rate) -> Self {
        Pacer {
            ns_per_byte_fp: rate.ns_per_byte_fp,
            frac: 0,
        }
    }

    /// The whole ns `len` more bytes take; the fraction left is kept for the
    /// next call.
    #[inline]
    pub fn advance(&mut self, len: u32) -> u64 {
        let total = u128::from(self.frac) + u128::from(len) * u128::from(self.ns_per_byte_fp);
        self.frac = total as u32; // keep the low FRAC_BITS bits
        (total >> FRAC_BITS) as u64
    }

    /// Drops the carried fraction (an idle link restarts from a whole ns).
    #[inline]
    pub fn reset(&mut self) {
        self.frac = 0;
    }

    /// The fraction of a ns carried, in units of 2⁻³² ns.
    pub const fn carried(&self) -> u32 {
        self.frac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(bps: u64) -> Rate {
        Rate::checked("test rate", bps).unwrap()
    }

    /// Exact ns of `bytes` at `bps`, as a rational floor.
    fn exact_floor_ns(bytes: u128, bps: u64) -> u128 {
        bytes * u128::from(UNITS_PER_BYTE) / u128::from(bps)
    }

    #[test]
    fn range_ends_are_accepted_and_everything_outside_is_named() {
        assert_eq!(rate(MIN_RATE_BPS), Rate::MIN);
        assert_eq!(rate(MAX_RATE_BPS), Rate::MAX);
        for bad in [
            0i128,
            999,
            -1,
            i128::from(MAX_RATE_BPS) + 1,
            i128::from(u64::MAX),
        ] {
            let e = Rate::checked("node \"a\" rate_bps", bad).unwrap_err();
            let msg = e.to_string();
            assert!(msg.starts_with("node \"a\" rate_bps"), "{msg}");
            assert!(msg.contains(&bad.to_string()), "{msg}");
            assert!(msg.contains("1000..=1000000000000 bit/s"), "{msg}");
        }
        assert_eq!(Rate::saturating(0), Rate::MIN);
        assert_eq!(Rate::saturating(u64::MAX), Rate::MAX);
        assert_eq!(rate(100_000_000).saturating_mul(65_536), Rate::MAX);
        assert_eq!(rate(1_000_000).saturating_mul(3).bps(), 3_000_000);
    }

    #[test]
    fn the_slowest_rate_paces_exactly() {
        // 8·10⁶ ns per byte is an integer: no truncation at all.
        assert_eq!(Rate::MIN.ns_per_byte_fp(), 8_000_000u64 << FRAC_BITS);
        let mut p = Pacer::new(Rate::MIN);
        let mut ns = 0u128;
        for i in 0..100_000u32 {
            ns += u128::from(p.advance(1 + i % 65_535));
        }
        let bytes: u128 = (0..100_000u32).map(|i| u128::from(1 + i % 65_535)).sum();
        assert_eq!(ns, bytes * 8_000_000);
        assert_eq!(p.carried(), 0);
    }

    #[test]
    fn the_fastest_rate_drifts_less_than_two_to_the_minus_32_ns_per_byte() {
        // 0.008 ns per byte; the constant is truncated.
        let r = Rate::MAX;
        let exact_fp = (u128::from(UNITS_PER_BYTE) << FRAC_BITS) as f64 / MAX_RATE_BPS as f64;
        let delta = exact_fp - r.ns_per_byte_fp() as f64;
        assert!((0.0..1.0).contains(&delta), "{delta}");
        // 10⁸ packets of 64 KiB − 1: 6.5·10¹² bytes, 52 s of link time.
        let mut p = Pacer::new(r);
        let (mut ns, mut bytes) = (0u128, 0u128);
        for _ in 0..100_000_000u32 {
            ns += u128::from(p.advance(65_535));
            bytes += 65_535;
        }
        let exact = exact_floor_ns(bytes, MAX_RATE_BPS);
        assert!(ns <= exact, "never late: {ns} > {exact}");
        let slack = bytes.div_ceil(1 << FRAC_BITS) + 1;
        assert!(exact - ns <= slack, "early by {} ns > {slack}", exact - ns);
        let rel = (exact - ns) as f64 / exact as f64;
        assert!(rel < 3e-8, "relative error {rel}");
    }

    #[test]
    fn the_carried_fraction_loses_nothing_over_long_runs() {
        // 3 Gbit/s is 8/3 ns per byte: every packet leaves a fraction.
        for bps in [
            3_000_000_000u64,
            40_000_000_000,
            7_777_777,
            MAX_RATE_BPS - 1,
        ] {
            let r = rate(bps);
            let mut p = Pacer::new(r);
            let (mut ns, mut naive, mut bytes) = (0u128, 0u128, 0u128);
            const LENS: [u32; 7] = [60, 1500, 576, 64, 9000, 1514, 333];
            for i in 0..10_000_000usize {
                let len = LENS[i % LENS.len()];
                ns += u128::from(p.advance(len));
                naive += (u128::from(len) * u128::from(r.ns_per_byte_fp())) >> FRAC_BITS;
                bytes += u128::from(len);
            }
            // The pacer's total is the fixed-point product of all the bytes,
            // as if paced in one piece: the per-packet rounding is carried.
            let one_piece = (bytes * u128::from(r.ns_per_byte_fp())) >> FRAC_BITS;
            assert_eq!(ns, one_piece, "{bps}");
            let exact = exact_floor_ns(bytes, bps);
            assert!(ns <= exact && exact - ns <= bytes.div_ceil(1 << FRAC_BITS) + 1);
            // Rounding each packet on its own would have lost time.
            assert!(naive < ns, "{bps}: {naive} >= {ns}");
        }
    }

    /// The configuration fields that hold rates keep their JSON names and
    /// shapes (bare numbers of bit/s) and are all checked against the one
    /// range, each error naming its field.
    #[test]
    fn config_rate_fields_keep_their_json_and_share_one_range() {
        use crate::{FlowTable, SchedulerConfig};
        let json = |alg: &str, link: &str, unit: &str, root: &str, ceil: &str| {
            format!(
                r#"{{"alg": "{alg}", "link_rate_bps": {link},
                    "eiffel": {{"rate_bps": {unit}, "rates_bps": [], "lstf_link_bps": {link}}},
                    "hierarchy": {{"nodes": [
                        {{"name": "root", "rate_bps": {root}}},
                        {{"name": "a", "parent": "root", "rate_bps": 1000, "ceil_bps": {ceil}, "flows": 2}}
                    ]}}}}"#
            )
        };
        let build = |alg: &str, link: &str, unit: &str, root: &str, ceil: &str| {
            let cfg: SchedulerConfig =
                serde_json::from_str(&json(alg, link, unit, root, ceil)).expect("today's JSON");
            cfg.build(FlowTable::uniform(2).unwrap())
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let (max, over) = (MAX_RATE_BPS.to_string(), (MAX_RATE_BPS + 1).to_string());
        for alg in ["wf2q+", "shaped-drr", "lstf", "htb"] {
            assert_eq!(build(alg, &max, "1000", &max, &max), Ok(()), "{alg}");
        }
        let refused = |alg, link, unit, root, ceil, field: &str| {
            let e = build(alg, link, unit, root, ceil).unwrap_err();
            assert!(
                e.contains(field) && e.contains("1000..=1000000000000"),
                "{e}"
            );
        };
        refused("wf2q+", &over, "1000", &max, &max, "link rate hint");
        refused("lstf", &over, "1000", &max, &max, "eiffel.lstf_link_bps");
        refused("shaped-drr", &max, "999", &max, &max, "eiffel.rate_bps");
        refused("htb", &max, "1000", &over, &max, "node \"root\" rate_bps");
        refused("htb", &max, "1000", &max, "-1", "node \"a\" ceil_bps");
        // Unlimited stays a hierarchy's own value.
        let unlimited = crate::hier::UNLIMITED_BPS.to_string();
        assert_eq!(build("htb", &max, "1000", &unlimited, &unlimited), Ok(()));
    }

    #[test]
    fn service_units_are_exact_and_match_pacing() {
        let r = rate(10_000_000_000);
        assert_eq!(r.service_units(1_200), 1_500 * u128::from(UNITS_PER_BYTE));
        assert_eq!(
            r.tx_ns(1_500),
            1_200,
            "exact, though 0.8 ns is not a binary fraction"
        );
        assert_eq!(r.tx_ns(1_499), 1_199);
        assert_eq!(Rate::MAX.tx_ns(u32::MAX), 34_359_738);
        assert_eq!(Rate::MIN.tx_ns(u32::MAX), u64::from(u32::MAX) * 8_000_000);
        assert_eq!(Pacer::UNLIMITED.clone().advance(65_535), 0);
        let mut p = Pacer::new(rate(3_000_000_000));
        p.advance(1);
        assert_ne!(p.carried(), 0);
        p.reset();
        assert_eq!(p.carried(), 0);
    }
}
