//! The runtime clock: nanoseconds since the runtime started, as a
//! [`pspat_sched::Instant`].
//!
//! The arbiter reads it once per round and passes `now` to the scheduler and
//! the link emulator (\[J\] §3.4, `ARCHITECTURE.md` §3), and for a scheduler
//! that counts from arrival (a pipe) once more per chunk of up to 64 packets
//! it takes from a mailbox, so that a packet is never enqueued at a time
//! before its submission; dispatchers read it once per batch. It wraps
//! `std::time::Instant` (a vDSO `clock_gettime`, some 20 ns): at one read
//! per round of up to 512 decisions the cost per decision is a few
//! hundredths of a nanosecond, so a calibrated TSC clock would buy nothing
//! measurable here; a read per chunk of a few packets costs more, which is
//! why only schedulers that need it pay for it.

use pspat_sched::Instant;

/// A monotonic clock shared by every thread of one runtime.
///
/// # Examples
/// ```
/// let c = pspat::Clock::new();
/// let a = c.now();
/// assert!(c.now() >= a);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: std::time::Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock whose zero is now.
    pub fn new() -> Self {
        Clock {
            epoch: std::time::Instant::now(),
        }
    }

    /// Nanoseconds since the clock was created.
    #[inline]
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }
}
