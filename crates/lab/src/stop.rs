//! One process-wide stop request, set by SIGINT/SIGTERM (the `ctrlc`
//! crate's handler, installed by the command line) and polled by every
//! long loop here at least every 100 ms, so that Ctrl-C ends a run cleanly
//! and the guards remove what was created.
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

/// Asks every loop to stop.
pub fn request() {
    // Relaxed: a flag on its own; nothing is published with it.
    STOP.store(true, Ordering::Relaxed);
}

/// Whether a stop was asked for.
pub fn requested() -> bool {
    // Relaxed: pairs with the Relaxed store in `request`; only the flag matters.
    STOP.load(Ordering::Relaxed)
}
