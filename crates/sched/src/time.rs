//! Time as a parameter: the core never reads a clock.
//!
//! [`Instant`] counts nanoseconds from an arbitrary origin chosen by the caller
//! (the runtime uses its calibrated clock, simulations start at zero). It is a
//! plain `u64`, so it wraps after 584 years; arithmetic saturates.

use serde::{Deserialize, Serialize};

/// A point in time, in nanoseconds since an origin the caller chose.
///
/// # Examples
/// ```
/// use pspat_sched::Instant;
/// let t = Instant::from_nanos(1_000);
/// assert_eq!(t.saturating_add_nanos(500).as_nanos(), 1_500);
/// ```
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Instant(u64);

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant(0);
    /// The largest representable instant ("never").
    pub const MAX: Instant = Instant(u64::MAX);

    /// An instant `ns` nanoseconds after the origin.
    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + ns`, saturating at [`Instant::MAX`].
    #[must_use]
    pub const fn saturating_add_nanos(self, ns: u64) -> Self {
        Instant(self.0.saturating_add(ns))
    }

    /// Nanoseconds from `earlier` to `self`, or 0 if `earlier` is later.
    pub const fn saturating_nanos_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}
