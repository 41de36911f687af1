//! Provisional sleep/wake handshake (flag, thread, kick); replaced by the
//! loom-checked version.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;

use crossbeam_utils::CachePadded;

/// How [`Parker::sleep`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// A waker cleared the flag.
    Kicked,
    /// The timeout elapsed first.
    TimedOut,
}

/// One sleeper thread, any number of wakers.
#[derive(Debug, Default)]
pub struct Parker {
    sleeping: CachePadded<AtomicBool>,
    thread: OnceLock<Thread>,
}

/// The waker's full fence, between publishing work and [`Parker::kick`].
#[inline]
pub fn publish_fence() {
    fence(Ordering::SeqCst);
}

impl Parker {
    /// A parker with no thread bound yet.
    pub fn new() -> Parker {
        Parker::default()
    }
    /// Binds the calling thread as the sleeper.
    pub fn bind_current_thread(&self) {
        let _ = self.thread.set(std::thread::current());
    }
    /// Sleeper: announce the intent to sleep; rescan next.
    pub fn prepare_sleep(&self) {
        self.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }
    /// Sleeper: the rescan found work.
    pub fn cancel_sleep(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }
    /// Parks until kicked or `timeout`.
    pub fn sleep(&self, timeout: std::time::Duration) -> Wake {
        std::thread::park_timeout(timeout);
        if self.sleeping.swap(false, Ordering::AcqRel) {
            Wake::TimedOut
        } else {
            Wake::Kicked
        }
    }
    /// Waker: after publishing and [`publish_fence`].
    #[inline]
    pub fn kick(&self) -> bool {
        if self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::AcqRel) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
            return true;
        }
        false
    }
    /// Unconditional wake.
    pub fn kick_force(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }
    /// Whether the sleeper announced a sleep.
    pub fn is_sleeping(&self) -> bool {
        self.sleeping.load(Ordering::Relaxed)
    }
}
