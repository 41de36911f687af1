//! The loom facade: atomics, fences, `Arc` and thread parking come from loom
//! under `cfg(loom)` so the model checker sees every access, and from
//! `core`/`std` otherwise.
//!
//! [`ThreadSlot`] stands in for `OnceLock<Thread>`, which loom lacks: a
//! `std::sync::OnceLock` normally (one Acquire load to read), a loom `Mutex`
//! under loom. [`park`] parks with a timeout normally and without one under
//! loom (loom has no timed park), so a lost wake-up there is a deadlock that
//! loom reports.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Mutex};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex};

#[cfg(loom)]
pub use loom::thread::Thread;
/// A thread's handle, as `std::thread::current()` gives it (loom's under
/// loom).
#[cfg(not(loom))]
pub use std::thread::Thread;

/// Parks the calling thread until it is unparked (or spuriously).
#[cfg(not(loom))]
pub(crate) fn park_until_unparked() {
    std::thread::park();
}

/// Parks the calling thread until it is unparked.
#[cfg(loom)]
pub(crate) fn park_until_unparked() {
    loom::thread::park();
}

/// The handle of one thread, set at most once, readable from any thread.
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(crate) struct ThreadSlot(std::sync::OnceLock<std::thread::Thread>);

#[cfg(not(loom))]
impl ThreadSlot {
    /// Empty.
    pub(crate) fn new() -> Self {
        ThreadSlot(std::sync::OnceLock::new())
    }

    /// Stores the calling thread's handle unless one is stored already;
    /// true if the stored handle is the calling thread's.
    pub(crate) fn bind_current(&self) -> bool {
        let me = std::thread::current();
        self.0.get_or_init(|| me.clone()).id() == me.id()
    }

    /// True once a handle is stored.
    pub(crate) fn is_bound(&self) -> bool {
        self.0.get().is_some()
    }

    /// Unparks the stored thread, if any; true if there was one.
    pub(crate) fn unpark(&self) -> bool {
        match self.0.get() {
            Some(t) => {
                t.unpark();
                true
            }
            None => false,
        }
    }
}

/// Parks the calling thread until it is unparked or `timeout` passes
/// (either may also end early, spuriously).
#[cfg(not(loom))]
pub(crate) fn park(timeout: std::time::Duration) {
    std::thread::park_timeout(timeout);
}

/// The handle of one thread, set at most once, readable from any thread.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct ThreadSlot(loom::sync::Mutex<Option<loom::thread::Thread>>);

#[cfg(loom)]
impl ThreadSlot {
    /// Empty.
    pub(crate) fn new() -> Self {
        ThreadSlot(loom::sync::Mutex::new(None))
    }

    /// Stores the calling thread's handle unless one is stored already;
    /// true if the stored handle is the calling thread's.
    pub(crate) fn bind_current(&self) -> bool {
        let me = loom::thread::current();
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(me.clone()).id() == me.id()
    }

    /// True once a handle is stored.
    pub(crate) fn is_bound(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Unparks the stored thread, if any; true if there was one.
    pub(crate) fn unpark(&self) -> bool {
        match self.0.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            Some(t) => {
                t.unpark();
                true
            }
            None => false,
        }
    }
}

/// Parks the calling thread until it is unparked. loom has no timed park:
/// `_timeout` is ignored, so a wake-up that never comes is a deadlock loom
/// reports rather than a timeout that hides it.
#[cfg(loom)]
pub(crate) fn park(_timeout: std::time::Duration) {
    loom::thread::park();
}
