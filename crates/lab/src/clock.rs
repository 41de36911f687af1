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

#[cfg(test)]
mod tests {
    #[test]
    fn the_clock_moves_forward() {
        let a = super::monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = super::monotonic_ns();
        assert!(b >= a + 1_000_000, "{a} then {b}");
    }
}
