//! The loop `pspat shape` and `pspat run` wait in while the bridge forwards:
//! until SIGINT/SIGTERM, the `--duration`, or a lost interface, with a
//! progress line once a second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::doorbell::Doorbell;

/// How often the loop asks whether the bridge failed.
const FAILURE_STEP: Duration = Duration::from_millis(250);

/// Installs the handlers of SIGINT and SIGTERM: each sets `term`, then
/// rings the doorbell [`until_stopped`] waits on.
///
/// # Errors
/// A handler or the doorbell cannot be made.
pub fn stop_signals(term: &std::sync::Arc<AtomicBool>) -> std::io::Result<Doorbell> {
    let bell = Doorbell::new()?;
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, std::sync::Arc::clone(term))?;
        bell.ring_on_signal(signal)?;
    }
    Ok(bell)
}

/// Waits from `start` until `term` is set (by the signal handler, which
/// rings `bell`), until `duration` passed, or until `failure` names one
/// (returned); calls `tick` once a second. Sleeps until the bell rings, the
/// next tick, or [`FAILURE_STEP`], whichever comes first: a signal is seen
/// at once, a failure within 250 ms.
pub fn until_stopped(
    term: &AtomicBool,
    bell: &Doorbell,
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
        bell.wait(
            None::<&std::os::unix::net::UnixListener>,
            until.min(FAILURE_STEP),
        );
    }
}
