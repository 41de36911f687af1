//! Typed errors of the runtime: configuration (before any thread starts) and
//! the per-call outcome of [`crate::Client::submit`].

use std::fmt;

/// Why a runtime or a benchmark could not start or finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A configuration value is out of its allowed range.
    #[error("{what} = {value} is out of range (allowed: {allowed})")]
    OutOfRange {
        /// The field.
        what: String,
        /// The value given.
        value: String,
        /// The allowed range.
        allowed: String,
    },
    /// A configuration value is invalid for another reason.
    #[error("{what}: {reason}")]
    Invalid {
        /// The field.
        what: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The scheduler or link configuration was rejected.
    #[error(transparent)]
    Sched(#[from] pspat_sched::ConfigError),
    /// The runtime has too many clients already.
    #[error("no client slot left: the runtime was built for {max} clients (raise RuntimeConfig::max_clients)")]
    TooManyClients {
        /// The configured maximum.
        max: usize,
    },
    /// The runtime is shutting down and accepts no new clients.
    #[error("the runtime is shutting down")]
    Closed,
    /// A thread could not be spawned or panicked.
    #[error("runtime thread {what}: {reason}")]
    Thread {
        /// Which thread.
        what: String,
        /// What happened.
        reason: String,
    },
}

impl RuntimeError {
    /// `Ok` when `value` lies in `range`, else [`RuntimeError::OutOfRange`]
    /// with the range written as `lo..=hi` (as
    /// [`pspat_sched::ConfigError::check_range`]).
    pub fn check_range<T: PartialOrd + std::fmt::Display>(
        what: impl Into<String>,
        value: T,
        range: std::ops::RangeInclusive<T>,
    ) -> Result<(), Self> {
        pspat_sched::ConfigError::check_range(what, value, range).map_err(|e| match e {
            pspat_sched::ConfigError::OutOfRange {
                what,
                value,
                allowed,
            } => RuntimeError::OutOfRange {
                what,
                value,
                allowed,
            },
            other => RuntimeError::Sched(other),
        })
    }

    /// `what = value is out of range (allowed: allowed)`.
    pub fn out_of_range(
        what: impl Into<String>,
        value: impl ToString,
        allowed: impl Into<String>,
    ) -> Self {
        RuntimeError::OutOfRange {
            what: what.into(),
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }

    /// `what: reason`.
    pub fn invalid(what: impl Into<String>, reason: impl Into<String>) -> Self {
        RuntimeError::Invalid {
            what: what.into(),
            reason: reason.into(),
        }
    }
}

/// Why [`crate::Client::submit`] refused a packet. The packet is handed back
/// in every case; nothing was counted as submitted.
#[derive(Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubmitError {
    /// The mailbox (or the client's descriptor pool) is full: retry later.
    Full(crate::Submission),
    /// [`crate::BackpressurePolicy::RejectNext`]: the arbiter dropped an
    /// earlier packet of this client; this one was not taken (the reference's
    /// `-ENOBUFS`). The next call proceeds normally.
    DroppedEarlier(crate::Submission),
    /// The flow id does not fit the slot (>= 2^24) or the length is not in
    /// 1..=65535.
    Invalid(crate::Submission),
    /// The runtime is shutting down (or stopped after a fault): no packet is
    /// accepted any more. Stop submitting and drop the client.
    Closed(crate::Submission),
}

impl SubmitError {
    /// The packet handed back.
    pub fn into_inner(self) -> crate::Submission {
        match self {
            SubmitError::Full(s)
            | SubmitError::DroppedEarlier(s)
            | SubmitError::Invalid(s)
            | SubmitError::Closed(s) => s,
        }
    }
}

impl fmt::Debug for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubmitError::Full(_) => f.write_str("client mailbox full"),
            SubmitError::Closed(_) => f.write_str("the runtime is shutting down"),
            SubmitError::DroppedEarlier(_) => {
                f.write_str("an earlier packet of this client was dropped by the arbiter")
            }
            SubmitError::Invalid(s) => write!(
                f,
                "invalid packet: flow {} (allowed: 0..16777216), len {} (allowed: 1..=65535)",
                s.flow.0, s.len
            ),
        }
    }
}

impl std::error::Error for SubmitError {}
