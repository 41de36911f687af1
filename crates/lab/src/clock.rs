//! `CLOCK_MONOTONIC` in nanoseconds: the clock every namespace of one host
//! shares, so a sender's timestamp and a receiver's reading in another
//! namespace (another process) subtract to a one-way latency.
use rustix::time::{clock_gettime, ClockId};

/// Nanoseconds of `CLOCK_MONOTONIC` (since boot, stopped in suspend).
pub fn monotonic_ns() -> u64 {
    let t = clock_gettime(ClockId::Monotonic);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// `CLOCK_REALTIME` minus `CLOCK_MONOTONIC`, in nanoseconds: what turns a
/// kernel receive timestamp (`SO_TIMESTAMPNS`, realtime) into this module's
/// clock. Read between two monotonic readings; it moves only when the
/// realtime clock is stepped or slewed.
pub fn realtime_offset_ns() -> i128 {
    let before = monotonic_ns();
    let t = clock_gettime(ClockId::Realtime);
    let after = monotonic_ns();
    let real = i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
    real - i128::from(before / 2 + after / 2)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_clock_moves_forward() {
        let a = super::monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = super::monotonic_ns();
        assert!(b >= a + 1_000_000, "{a} then {b}");
    }

    #[test]
    fn the_realtime_offset_is_steady() {
        let a = super::realtime_offset_ns();
        let b = super::realtime_offset_ns();
        // Two readings a moment apart agree to well under a millisecond.
        assert!((a - b).abs() < 1_000_000, "{a} then {b}");
        assert!(
            a > 0,
            "realtime is past the epoch, monotonic counts from boot"
        );
    }
}
