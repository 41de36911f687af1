//! Configuration errors: every constructor in the core validates its input
//! and answers with one of these instead of panicking.

/// Why a scheduler, link or flow table could not be built.
///
/// Messages name the item, the value and the allowed range, so the CLI can
/// print them as they are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A numeric parameter lies outside its documented range.
    #[error("{what} = {value} is out of range (allowed: {allowed})")]
    OutOfRange {
        /// The parameter, e.g. `flow 3 weight`.
        what: String,
        /// The value given.
        value: String,
        /// The allowed range, e.g. `1..=65536`.
        allowed: String,
    },
    /// A structural problem (empty flow table, malformed description, ...).
    #[error("{what}: {reason}")]
    Invalid {
        /// The item at fault.
        what: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// An algorithm name that no scheduler answers to.
    #[error("unknown algorithm {name:?} (known: {known})")]
    UnknownAlgorithm {
        /// The name given.
        name: String,
        /// The names accepted, comma separated.
        known: String,
    },
}

impl ConfigError {
    /// `Ok` when `value` lies in `range`, else [`ConfigError::OutOfRange`] with
    /// the range written as `lo..=hi`.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::ConfigError;
    /// assert!(ConfigError::check_range("weight", 3u32, 1..=65_536).is_ok());
    /// let e = ConfigError::check_range("weight", 0u32, 1..=65_536).unwrap_err();
    /// assert_eq!(e.to_string(), "weight = 0 is out of range (allowed: 1..=65536)");
    /// ```
    pub fn check_range<T: PartialOrd + std::fmt::Display>(
        what: impl Into<String>,
        value: T,
        range: std::ops::RangeInclusive<T>,
    ) -> Result<(), Self> {
        if range.contains(&value) {
            Ok(())
        } else {
            Err(Self::out_of_range(
                what,
                value,
                format!("{}..={}", range.start(), range.end()),
            ))
        }
    }

    /// Shorthand for [`ConfigError::OutOfRange`].
    pub fn out_of_range(
        what: impl Into<String>,
        value: impl ToString,
        allowed: impl Into<String>,
    ) -> Self {
        ConfigError::OutOfRange {
            what: what.into(),
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }

    /// Shorthand for [`ConfigError::Invalid`].
    pub fn invalid(what: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError::Invalid {
            what: what.into(),
            reason: reason.into(),
        }
    }
}

/// Why a flow could not be added, changed or removed at run time
/// ([`crate::Scheduler::add_flow`], [`crate::Scheduler::change_flow`],
/// [`crate::Scheduler::remove_flow`]).
///
/// The scheduler is left as it was when one of these is returned.
///
/// # Examples
/// ```
/// use pspat_sched::{FlowError, FlowId, FlowParams, FlowTable};
/// let mut t = FlowTable::with_capacity(2, vec![FlowParams::weighted(1)]).unwrap();
/// assert_eq!(t.insert(FlowId(0), FlowParams::default()), Err(FlowError::Present { flow: 0 }));
/// let e = t.insert(FlowId(1), FlowParams::weighted(0)).unwrap_err();
/// assert_eq!(e.to_string(), "flow 1 weight = 0 is out of range (allowed: 1..=65536)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FlowError {
    /// The flow is not present (never added, or removed).
    #[error("flow {flow} is not present")]
    Absent {
        /// The flow id.
        flow: u32,
    },
    /// The flow is already present: change it, or remove it first.
    #[error("flow {flow} is already present")]
    Present {
        /// The flow id.
        flow: u32,
    },
    /// The flow id lies beyond the slots the scheduler was built with.
    #[error("flow {flow} is out of capacity (flow slots: 0..{capacity})")]
    OutOfCapacity {
        /// The flow id.
        flow: u32,
        /// Number of flow slots.
        capacity: usize,
    },
    /// A parameter lies outside its range.
    #[error("flow {flow} {field} = {value} is out of range (allowed: {allowed})")]
    InvalidParams {
        /// The flow id.
        flow: u32,
        /// The field, e.g. `weight`.
        field: &'static str,
        /// The value given.
        value: String,
        /// The allowed range, e.g. `1..=65536`.
        allowed: String,
    },
    /// This algorithm (or this configuration of it) cannot do what was asked.
    #[error("{alg}: {reason}")]
    Unsupported {
        /// The algorithm's name.
        alg: &'static str,
        /// What cannot be done and why.
        reason: String,
    },
}

impl FlowError {
    /// Shorthand for [`FlowError::Unsupported`].
    pub fn unsupported(alg: &'static str, reason: impl Into<String>) -> Self {
        FlowError::Unsupported {
            alg,
            reason: reason.into(),
        }
    }
}
