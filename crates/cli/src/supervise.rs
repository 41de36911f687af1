//! The loop `pspat shape` and `pspat run` wait in while the bridge forwards:
//! until SIGINT/SIGTERM, the `--duration`, or a lost interface, with a
//! progress line once a second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Waits from `start` until `term` is set (by the signal handler), until
/// `duration` passed, or until `failure` names one (returned); calls `tick`
/// once a second. Sleeps at most 50 ms at a time, so a stop is seen soon.
pub fn until_stopped(
    term: &AtomicBool,
    start: Instant,
    duration: Option<Duration>,
    mut failure: impl FnMut() -> Option<String>,
    mut tick: impl FnMut(),
) -> Option<String> {
    let mut next = start + Duration::from_secs(1);
    loop {
        // Acquire: pairs with signal-hook's store from the handler.
        if term.load(Ordering::Acquire) {
            return None;
        }
        if duration.is_some_and(|d| start.elapsed() >= d) {
            return None;
        }
        if let Some(f) = failure() {
            return Some(f);
        }
        if Instant::now() >= next {
            tick();
            next += Duration::from_secs(1);
        }
        let until = duration
            .map_or(next, |d| next.min(start + d))
            .saturating_duration_since(Instant::now());
        std::thread::sleep(until.min(Duration::from_millis(50)));
    }
}
