//! The measured window: per-client counters sampled when it opens and when
//! it closes, so every rate a report gives counts only what was transmitted
//! inside the window, never the packets drained after it (a run at 1 Mbit/s
//! reports at most 1 Mbit/s plus one packet, whatever its length).
//!
//! Each mode supplies a sampler returning a [`Sample`]: the PSPAT runtime's
//! statistics, the none mode's per-client atomics, or, in lock mode, the
//! exact tallies kept under the scheduler's lock, copied by the next client
//! that holds it ([`LockedSampler`]; the measuring thread never contends for
//! that lock itself).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::Progress;

/// Per-client counters at one instant.
#[derive(Clone, Debug)]
pub(crate) struct Sample {
    /// When the counters were read.
    pub(crate) at: Instant,
    /// Packets transmitted so far, per client.
    pub(crate) transmitted: Vec<u64>,
    /// Bytes transmitted so far, per client.
    pub(crate) bytes: Vec<u64>,
}

impl Sample {
    /// A sample taken now.
    pub(crate) fn now(transmitted: Vec<u64>, bytes: Vec<u64>) -> Self {
        Sample {
            at: Instant::now(),
            transmitted,
            bytes,
        }
    }
}

/// What happened between the window's two samples.
#[derive(Clone, Debug, Default)]
pub(crate) struct Window {
    /// Length, s (between the two samples).
    pub(crate) elapsed: f64,
    /// Packets transmitted inside the window, per client.
    pub(crate) transmitted: Vec<u64>,
    /// Bytes transmitted inside the window, per client.
    pub(crate) bytes: Vec<u64>,
}

fn delta(end: &[u64], start: &[u64]) -> Vec<u64> {
    end.iter()
        .enumerate()
        .map(|(i, &e)| e.saturating_sub(start.get(i).copied().unwrap_or(0)))
        .collect()
}

/// Samples, waits `duration` (calling `progress` about once a second with
/// the packets transmitted since the window opened), samples again.
pub(crate) fn measure(
    duration: Duration,
    progress: &mut dyn FnMut(Progress),
    sample: &mut dyn FnMut() -> Sample,
) -> Window {
    let start = sample();
    let t0 = Instant::now();
    let mut next = Duration::from_secs(1);
    loop {
        let el = t0.elapsed();
        if el >= duration {
            break;
        }
        std::thread::sleep(
            (duration - el)
                .min(next.saturating_sub(el))
                .max(Duration::from_millis(1)),
        );
        if t0.elapsed() >= next && t0.elapsed() < duration {
            let now = sample();
            progress(Progress {
                elapsed_s: now.at.duration_since(start.at).as_secs_f64(),
                transmitted: delta(&now.transmitted, &start.transmitted).iter().sum(),
            });
            next += Duration::from_secs(1);
        }
    }
    let end = sample();
    Window {
        elapsed: end
            .at
            .duration_since(start.at)
            .as_secs_f64()
            .max(f64::MIN_POSITIVE),
        transmitted: delta(&end.transmitted, &start.transmitted),
        bytes: delta(&end.bytes, &start.bytes),
    }
}

/// Lock mode's sampler: the measuring thread raises `requested`; the next
/// client inside the critical section copies the exact tallies into `slot`
/// and lowers it.
#[derive(Default)]
pub(crate) struct LockedSampler {
    requested: AtomicBool,
    slot: Mutex<Option<Sample>>,
}

impl LockedSampler {
    /// Called by a client holding the scheduler's lock: serves a pending
    /// request. One Relaxed load when none is pending.
    pub(crate) fn serve(&self, transmitted: &[u64], bytes: &[u64]) {
        // Relaxed: the flag only asks for a copy; the copy itself travels
        // through `slot`'s mutex, which orders it before the reader's lock.
        if self.requested.load(Ordering::Relaxed) && self.requested.swap(false, Ordering::Relaxed) {
            let s = Sample::now(transmitted.to_vec(), bytes.to_vec());
            *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
        }
    }

    /// Asks the clients for a copy and waits for it (they hold the lock in
    /// turn all the time, so the wait is one critical section or a few).
    pub(crate) fn sample(&self) -> Sample {
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = None;
        // Relaxed: see `serve`.
        self.requested.store(true, Ordering::Relaxed);
        loop {
            if let Some(s) = self.slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
                return s;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}
