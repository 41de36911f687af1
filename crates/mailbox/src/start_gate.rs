//! A start gate: threads wait at it until one opener releases all of them
//! at once, with no lock they would queue on.
//!
//! `std::sync::Barrier` releases its waiters through one mutex: each woken
//! thread takes it, leaves, and its unlock wakes the next. With hundreds of
//! threads on one core, every hand-off waits until the woken thread gets
//! the core among those already released, so the release is a convoy that
//! can take seconds. Here each waiter parks on its own, and opening the
//! gate unparks every waiter directly: the opener pays one wake-up per
//! thread, and no waiter needs anything from another to leave.
//!
//! # Guarantee
//! No waiter leaves [`StartGate::wait`] before [`StartGate::open`] began,
//! and every waiter leaves once it has (no lost wake-up): the flag is
//! stored before the unparks, a waiter checks it after each park, and a
//! thread's unpark that comes before its park makes that park return at
//! once. Everything the opener wrote before `open` is visible to every
//! waiter after `wait` (a waiter that parked also has the unpark-to-park
//! edge; one that arrives after `open` has only the flag). loom checks that
//! every waiter leaves and sees the opener's write
//! (`tests/loom_handshakes.rs`, `start_gate_releases_every_waiter_after_open`).
//!
//! # Memory ordering
//! | Operation | Side | Ordering | Pairs with |
//! |---|---|---|---|
//! | `open` store | opener | Release | the Acquire load in `wait` |
//! | `open` load in `wait` | waiter | Acquire | the Release store in `open` |
//! | `arrived`, `left` counts | both | Relaxed | none: counts the opener polls, nothing is read on their strength |
//!
//! # Complexity
//! `wait`: one atomic add, then a park per wake-up until open (normally
//! one); `open`: one store and one unpark per thread.

use crate::sync::{AtomicBool, AtomicU64, Ordering, Thread};

/// See the module docs.
#[derive(Debug, Default)]
pub struct StartGate {
    /// Threads that reached the gate.
    arrived: AtomicU64,
    /// Threads that left it after it opened.
    left: AtomicU64,
    open: AtomicBool,
}

impl StartGate {
    /// A closed gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Called by a waiting thread: counts itself in, parks until the gate
    /// is open, then counts itself out.
    pub fn wait(&self) {
        // Relaxed: a count the opener polls (see the module docs).
        self.arrived.fetch_add(1, Ordering::Relaxed);
        // Acquire: pairs with the Release store in `open`. `park` may
        // return spuriously, hence the loop.
        while !self.open.load(Ordering::Acquire) {
            crate::sync::park_until_unparked();
        }
        // Relaxed: a count only.
        self.left.fetch_add(1, Ordering::Relaxed);
    }

    /// Opens the gate and unparks `threads` (the waiters' handles). A
    /// thread that reaches [`StartGate::wait`] later passes straight
    /// through.
    pub fn open<'a>(&self, threads: impl IntoIterator<Item = &'a Thread>) {
        // Release: pairs with the Acquire load in `wait`.
        self.open.store(true, Ordering::Release);
        for t in threads {
            t.unpark();
        }
    }

    /// True once [`StartGate::open`] was called.
    pub fn is_open(&self) -> bool {
        // Acquire, as in `wait`.
        self.open.load(Ordering::Acquire)
    }

    /// Threads that reached the gate so far.
    pub fn arrived(&self) -> u64 {
        // Relaxed: a count (see the module docs).
        self.arrived.load(Ordering::Relaxed)
    }

    /// Threads that left the gate so far (each has run since it opened).
    pub fn left(&self) -> u64 {
        // Relaxed: a count (see the module docs).
        self.left.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn releases_every_waiter_once_open() {
        let gate = Arc::new(StartGate::new());
        let handles: Vec<_> = (0..64)
            .map(|_| {
                let gate = Arc::clone(&gate);
                std::thread::spawn(move || gate.wait())
            })
            .collect();
        while gate.arrived() < 64 {
            std::thread::yield_now();
        }
        assert_eq!(gate.left(), 0);
        gate.open(handles.iter().map(|h| h.thread()));
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(gate.left(), 64);
    }

    #[test]
    fn spurious_unparks_do_not_open_it() {
        let gate = Arc::new(StartGate::new());
        let h = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || gate.wait())
        };
        while gate.arrived() < 1 {
            std::thread::yield_now();
        }
        for _ in 0..10 {
            h.thread().unpark();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(gate.left(), 0);
        assert!(!gate.is_open());
        gate.open([h.thread()]);
        h.join().unwrap();
        assert_eq!(gate.left(), 1);
    }

    #[test]
    fn a_late_thread_passes_an_open_gate() {
        let gate = StartGate::new();
        gate.open([]);
        gate.wait();
        assert_eq!((gate.arrived(), gate.left()), (1, 1));
    }
}
