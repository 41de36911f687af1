//! How a run starts its clients: every client thread waits at a
//! [`pspat_mailbox::StartGate`] (a `std::sync::Barrier` convoys with
//! hundreds of threads on one core; see the gate's docs), the run opens it
//! once every client arrived, and the measured window opens once every
//! client has run.
//!
//! Measured at aa01399 with the barrier (AMD EPYC guest,
//! `pspat bench --mode pspat,none --clients 1000 --duration 2`, seven runs):
//! 113–492 of the 1000 pspat clients and 0–341 of the none clients had not
//! submitted a single packet by the end of the run. With the gate every one
//! of the 1000 clients runs within 6–80 ms of the release.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pspat_mailbox::StartGate;

/// How a run started: the clients running when its window opened.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StartReport {
    /// Clients that had left the gate (been scheduled at least once) when
    /// the measured window opened.
    pub(crate) clients_running: usize,
    /// Time from opening the gate to opening the window, s.
    pub(crate) wait_s: f64,
}

/// The longest a run waits for its clients to be scheduled once before its
/// window opens anyway (the report then says how many were running).
pub(crate) const WARM_UP_LIMIT: Duration = Duration::from_secs(10);

/// How often the opener polls the gate's counts.
const POLL: Duration = Duration::from_millis(1);

/// Opens `gate` once every client thread of `handles` arrived (or one of
/// them ended early), then waits until every client runs, for at most
/// [`WARM_UP_LIMIT`].
pub(crate) fn open_and_warm_up<T>(gate: &StartGate, handles: &[JoinHandle<T>]) -> StartReport {
    let n = handles.len() as u64;
    while gate.arrived() < n && !handles.iter().any(|h| h.is_finished()) {
        std::thread::sleep(POLL);
    }
    let opened = Instant::now();
    gate.open(handles.iter().map(|h| h.thread()));
    // A client that ended without leaving the gate (it failed before it
    // arrived) never will: more threads ended than left.
    let failed = || handles.iter().filter(|h| h.is_finished()).count() as u64 > gate.left();
    while gate.left() < n && opened.elapsed() < WARM_UP_LIMIT && !failed() {
        std::thread::sleep(POLL);
    }
    StartReport {
        clients_running: gate.left() as usize,
        wait_s: opened.elapsed().as_secs_f64(),
    }
}

/// A run that fails while it starts its clients: stops and releases the
/// threads already started, joins them, and hands back `error`.
pub(crate) fn abandon<T, E>(
    error: E,
    stop: &AtomicBool,
    gate: &StartGate,
    handles: Vec<JoinHandle<T>>,
) -> E {
    // Relaxed: a stop signal only; the joins below order the rest.
    stop.store(true, Ordering::Relaxed);
    gate.open(handles.iter().map(|h| h.thread()));
    for h in handles {
        // The run already failed with `error`; a client that panicked
        // while leaving adds nothing to report.
        let _ = h.join();
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_window_opens_once_every_client_ran() {
        let gate = Arc::new(StartGate::new());
        let handles: Vec<_> = (0..32)
            .map(|_| {
                let gate = Arc::clone(&gate);
                std::thread::spawn(move || gate.wait())
            })
            .collect();
        let r = open_and_warm_up(&gate, &handles);
        assert_eq!(r.clients_running, 32);
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn a_client_that_ends_before_arriving_does_not_hang_the_start() {
        let gate = Arc::new(StartGate::new());
        let waiter = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || gate.wait())
        };
        let quitter = std::thread::spawn(|| ());
        let handles = vec![waiter, quitter];
        let r = open_and_warm_up(&gate, &handles);
        assert!(r.clients_running <= 1, "{r:?}");
        assert!(r.wait_s < WARM_UP_LIMIT.as_secs_f64());
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(gate.left(), 1, "the waiter was released");
    }
}
