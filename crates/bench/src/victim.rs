//! The latency-sensitive client's pacing and sample buffer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pspat::Clock;

use crate::BenchConfig;

pub(crate) fn victim_capacity(cfg: &BenchConfig) -> usize {
    cfg.victim.map_or(0, |v| {
        (v.pps as f64 * (cfg.duration.as_secs_f64() + 2.0)).min(20_000_000.0) as usize
    })
}

/// Paces the victim: sleeps or spins until `deadline` ns on `clock`.
pub(crate) fn wait_until(clock: &Clock, deadline: u64, stop: &AtomicBool) {
    loop {
        let now = clock.now().as_nanos();
        // Relaxed: `stop` only ends loops; it publishes no data (results
        // travel through the thread's join).
        if now >= deadline || stop.load(Ordering::Relaxed) {
            return;
        }
        if deadline - now > 100_000 {
            std::thread::sleep(Duration::from_nanos(deadline - now - 50_000));
        } else {
            std::thread::yield_now();
        }
    }
}
