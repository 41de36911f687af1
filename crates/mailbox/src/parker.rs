//! Sleep and wake-up between one sleeper thread (the arbiter, or a
//! dispatcher) and any number of wakers (clients, the arbiter, shutdown),
//! with no lost wake-up and, while the sleeper is awake, one load per kick.
//!
//! Sources: \[J\] Rizzo, Valente, Lettieri, Maffione, "PSPAT: software
//! packet scheduling at hardware speed", §3.5 "Avoiding busy wait"; \[E\] the
//! earlier version of the same design by the same authors, §3.1 and its
//! Fig. 4 (`arb_sleep`, "double checks for new requests before actually
//! blocking", a memory barrier in `kick_arbiter`).
//!
//! # Protocol
//! ```text
//! sleeper                                    waker
//! prepare_sleep: S: flag = true              publish work (mailbox push, bitmap bit, ...)
//!                Fs: fence(SeqCst)           Fw: publish_fence()
//! rescan everything a waker may publish     kick: K: load flag; if true, swap it to false
//! found work → cancel_sleep                       and unpark the sleeper
//! else       → sleep: park; clear the flag
//! ```
//! The sleeper spins a while first (T_w, \[J\] §3.5): a kick costs a waker
//! one load of a line that stays shared while the sleeper is awake, and the
//! expensive unpark only happens for a sleeper that announced its sleep.
//!
//! # Why no wake-up is lost
//! Claim: if a waker publishes work `W` (an atomic store) and then runs
//! `Fw` and `K`, the sleeper does not stay parked with `W` unseen.
//! `Fs` and `Fw` are SeqCst fences, so one precedes the other in the single
//! total order `S` of SeqCst operations (C++20 \[atomics.order\], which Rust
//! follows).
//! * `Fw` before `Fs`: `W` is sequenced before `Fw` and the rescan's load is
//!   sequenced after `Fs`, so the rescan reads `W` or a later value: the
//!   sleeper sees the work and cancels.
//! * `Fs` before `Fw`: by the same rule `K` reads the sleeper's `S` (true)
//!   or a later value of the flag. True: this kick swaps it and unparks.
//!   False written by another waker's swap: that waker unparks. False
//!   written by the sleeper itself (`cancel_sleep`, or the clear after a
//!   park): the sleeper is already past this sleep, and its next
//!   `prepare_sleep` (`S'`, `Fs'`) is later in the flag's modification
//!   order than the value `K` read, so `K` did not read `S'`, so `Fs'` cannot
//!   precede `Fw` in `S`: `Fw` precedes `Fs'` and the next rescan sees `W`
//!   (the first case).
//!
//! An unpark is never absorbed by an earlier park: the swap that wins reads
//! `S`, and is Acquire, so `S` happens-before the unpark; a park sequenced
//! before `S` cannot consume it. A kick that lands after the rescan already
//! found work leaves a stale unpark token, which makes the next `sleep`
//! return at once: one spare round, never a lost one.
//!
//! The argument needs both fences. Without either, the waker's load and
//! the sleeper's rescan may both read old values (the store-buffering
//! pattern) and the sleeper parks with work pending. loom finds it (tried
//! on a local copy, not kept): with the fence of `prepare_sleep` removed,
//! `sleep_wake_in_service`, `sleep_wake_announced` and
//! `sleep_wake_after_retire` in `tests/loom_handshakes.rs` deadlock (a
//! lost wake-up; under loom the park has no timeout); with the waker's
//! [`publish_fence`] removed, the first and the last do (in the second the
//! fence that ends the announcement stands in for it). It also needs every
//! kind of work a waker publishes to be stored *before* its last fence and
//! covered by the rescan: see [`crate::client_list`] for the announcement
//! bit, which a client sets after its first fence and therefore fences
//! again (without that second fence `sleep_wake_announced` deadlocks).
//! [`Parker::kick_force`] needs no fence but must unpark unconditionally
//! (without the unpark, `sleep_wake_client_exit` deadlocks).
//!
//! # Memory ordering
//! | Operation | Ordering | Pairs with |
//! |---|---|---|
//! | `prepare_sleep`: flag store | SeqCst, then `fence(SeqCst)` | the waker's [`publish_fence`] (argument above); the store is also read by `kick`'s Acquire swap |
//! | [`publish_fence`] | `fence(SeqCst)` | the fence in `prepare_sleep` |
//! | `kick`: flag load | Relaxed | ordered by the caller's [`publish_fence`] |
//! | `kick`: flag swap | AcqRel | Acquire: reads `prepare_sleep`'s store, so the unpark follows it; Release: the sleeper's Acquire swap in `sleep` |
//! | `kick_force`: flag store | Release | the sleeper's Acquire swap in `sleep` |
//! | `sleep`: flag swap | Acquire | the Release of `kick` / `kick_force`: after [`Wake::Kicked`] by a kick, the waker's earlier writes are visible |
//! | `cancel_sleep`: flag store | Relaxed | none needed: only the flag's modification order matters (argument above) |
//! | `is_sleeping` | Relaxed | none: a hint |
//!
//! # Complexity
//! `kick` on an awake sleeper: one load. On a sleeping one: one swap and one
//! unpark (a system call). `prepare_sleep`: one store and one fence.
//!
//! # Under loom
//! `sleep` parks without a timeout (loom has none), so a lost wake-up shows
//! as a deadlock that loom reports, and [`Wake::TimedOut`] never occurs.

use std::fmt;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::sync::{fence, AtomicBool, Ordering, ThreadSlot};

/// The waker's side of every handshake in this crate: a `fence(SeqCst)`
/// issued after publishing work (mailbox pushes, announcement bits) and
/// before reading the sleeper's flag ([`Parker::kick`]) or a client list's
/// hint ([`crate::ClientList::announce_if_needed`]).
///
/// It pairs with the fence in [`Parker::prepare_sleep`] (no lost wake-up,
/// module docs) and with the fence in [`crate::try_retire`] (no stranded
/// packet, [`crate::client_list`]). One fence serves both: a client pays it
/// once per submit or burst. On x86-64 it is an `mfence` (or a locked
/// instruction), on aarch64 a `dmb ish`.
///
/// # Examples
/// ```
/// use pspat_mailbox::{publish_fence, Parker};
/// let parker = Parker::new();
/// // ... push into a mailbox ...
/// publish_fence();
/// assert!(!parker.kick(), "nobody sleeps: one load, no unpark");
/// ```
#[inline]
pub fn publish_fence() {
    fence(Ordering::SeqCst);
}

/// How [`Parker::sleep`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wake {
    /// A waker kicked, or the park ended before the timeout (a stale unpark
    /// token from a kick that raced with a successful rescan, a
    /// [`Parker::kick_force`], or a spurious wake-up): look for work.
    Kicked,
    /// The whole timeout passed and nobody kicked. If work is found right
    /// after this, the timeout was the safety net: count it (the runtime's
    /// "unrequested wake-ups with work").
    TimedOut,
}

/// The sleep flag and the sleeper's thread handle: one sleeper, any number
/// of wakers. `Send + Sync`; share it by reference or in an `Arc`.
///
/// The flag sits on its own 128-byte block: wakers read it on every kick,
/// and only the sleeper's sleeps and the kicks that wake it write it.
///
/// # Examples
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use pspat_mailbox::{publish_fence, Parker};
///
/// let parker = Arc::new(Parker::new());
/// let work = Arc::new(AtomicU64::new(0));
/// let (p, w) = (Arc::clone(&parker), Arc::clone(&work));
/// let sleeper = std::thread::spawn(move || {
///     p.bind_current_thread();
///     loop {
///         if w.load(Ordering::Acquire) != 0 {
///             return w.load(Ordering::Acquire);
///         }
///         p.prepare_sleep();
///         if w.load(Ordering::Acquire) != 0 {
///             p.cancel_sleep();
///             continue;
///         }
///         p.sleep(Duration::from_secs(10));
///     }
/// });
/// work.store(7, Ordering::Release);
/// publish_fence();
/// parker.kick();
/// assert_eq!(sleeper.join().unwrap(), 7);
/// ```
pub struct Parker {
    /// True from `prepare_sleep` until the sleeper wakes or a waker claims
    /// the wake-up.
    sleeping: CachePadded<AtomicBool>,
    /// The sleeper, for `unpark`.
    thread: ThreadSlot,
}

impl Parker {
    /// A parker with nobody asleep and no thread bound yet.
    pub fn new() -> Parker {
        Parker {
            sleeping: CachePadded::new(AtomicBool::new(false)),
            thread: ThreadSlot::new(),
        }
    }

    /// Makes the calling thread the sleeper. Call it once, from the
    /// sleeper, before its first sleep ([`Parker::prepare_sleep`] binds the
    /// calling thread too if nobody did). The first binding stays: a call
    /// from another thread later changes nothing (debug builds assert).
    pub fn bind_current_thread(&self) {
        let bound_here = self.thread.bind_current();
        debug_assert!(bound_here, "a Parker has one sleeper thread");
    }

    /// Sleeper, step 1: announces the coming sleep (flag store, SeqCst)
    /// and issues `fence(SeqCst)`. The caller must then rescan everything a
    /// waker publishes before its [`publish_fence`] (mailboxes, client
    /// lists, a closing flag), and call [`Parker::cancel_sleep`] if it
    /// found anything, [`Parker::sleep`] otherwise.
    #[inline]
    pub fn prepare_sleep(&self) {
        if !self.thread.is_bound() {
            // Before the flag: a waker that sees the flag finds the thread.
            self.thread.bind_current();
        }
        // SeqCst store; what orders it before the rescan is the fence below,
        // which pairs with the wakers' `publish_fence` (module docs). The
        // store is also what `kick`'s Acquire swap reads.
        self.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Sleeper: the rescan found work; stay awake. A kick that raced with
    /// the rescan may have left an unpark token: the next
    /// [`Parker::sleep`] then returns at once.
    #[inline]
    pub fn cancel_sleep(&self) {
        // Relaxed: only the flag's modification order matters (module docs);
        // a kicker's swap to false in between is equivalent.
        self.sleeping.store(false, Ordering::Relaxed);
    }

    /// Sleeper, after a rescan that found nothing: parks until a waker
    /// kicks or `timeout` passes, then clears the flag. Returns
    /// [`Wake::TimedOut`] only if the whole timeout passed and nobody
    /// kicked; see [`Wake`].
    ///
    /// Under loom the park has no timeout.
    pub fn sleep(&self, timeout: Duration) -> Wake {
        #[cfg(not(loom))]
        let parked = std::time::Instant::now();
        crate::sync::park(timeout);
        // Acquire: pairs with the Release swap of `kick` and store of
        // `kick_force`. True: nobody cleared the flag, so nobody kicked.
        let unkicked = self.sleeping.swap(false, Ordering::Acquire);
        #[cfg(not(loom))]
        let timed_out = parked.elapsed() >= timeout;
        #[cfg(loom)]
        let timed_out = false;
        if unkicked && timed_out {
            Wake::TimedOut
        } else {
            Wake::Kicked
        }
    }

    /// Waker, after publishing work and a [`publish_fence`]: wakes the
    /// sleeper if it announced a sleep. Returns true if this call unparked
    /// it (exactly one of several concurrent kicks does). While the sleeper
    /// is awake this is one load of a shared line.
    #[inline]
    pub fn kick(&self) -> bool {
        // Relaxed load: ordered after the caller's `publish_fence`, which
        // pairs with the fence in `prepare_sleep` (module docs). AcqRel swap:
        // exactly one kicker wins; Acquire makes the flag's `true` (and so
        // the sleeper's earlier parks) happen-before our unpark; Release
        // pairs with the Acquire swap in `sleep`.
        if self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::AcqRel) {
            self.thread.unpark();
            true
        } else {
            false
        }
    }

    /// Wakes the sleeper unconditionally (shutdown, a client's exit): clears
    /// the flag and unparks the bound thread, if any, whether or not it
    /// sleeps. No fence needed: the unpark comes after everything the caller
    /// did, so either the sleeper is parked and wakes, or its next park
    /// returns at once (the token), and the round after it sees the work.
    pub fn kick_force(&self) {
        // Release: pairs with the Acquire swap in `sleep`.
        self.sleeping.store(false, Ordering::Release);
        self.thread.unpark();
    }

    /// True between [`Parker::prepare_sleep`] and the wake-up. A hint (it
    /// may change at once): use [`Parker::kick`] to wake the sleeper.
    #[inline]
    pub fn is_sleeping(&self) -> bool {
        // Relaxed: a hint; no other memory is read on the strength of it.
        self.sleeping.load(Ordering::Relaxed)
    }
}

impl Default for Parker {
    fn default() -> Self {
        Parker::new()
    }
}

impl fmt::Debug for Parker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parker")
            .field("sleeping", &self.is_sleeping())
            .field("bound", &self.thread.is_bound())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    #[test]
    fn kick_on_an_awake_sleeper_does_nothing() {
        let p = Parker::new();
        p.bind_current_thread();
        assert!(!p.is_sleeping());
        assert!(!p.kick());
        assert!(!p.is_sleeping());
    }

    #[test]
    fn prepare_then_cancel_leaves_it_awake() {
        let p = Parker::new();
        p.prepare_sleep();
        assert!(p.is_sleeping());
        p.cancel_sleep();
        assert!(!p.is_sleeping());
        assert!(!p.kick());
    }

    #[test]
    fn sleep_times_out_without_a_kick() {
        let p = Parker::new();
        p.bind_current_thread();
        p.prepare_sleep();
        assert_eq!(p.sleep(Duration::from_millis(5)), Wake::TimedOut);
        assert!(!p.is_sleeping(), "sleep clears the flag");
    }

    /// A kick between `prepare_sleep` and `sleep` claims the flag and leaves
    /// a token: the sleep returns at once, kicked.
    #[test]
    fn kick_before_the_park_is_not_lost() {
        let p = Parker::new();
        p.bind_current_thread();
        p.prepare_sleep();
        assert!(p.kick(), "the first kick wins");
        assert!(!p.kick(), "and only the first");
        let start = std::time::Instant::now();
        assert_eq!(p.sleep(Duration::from_secs(30)), Wake::Kicked);
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn kick_force_wakes_even_without_a_flag() {
        let p = Parker::new();
        p.bind_current_thread();
        p.kick_force();
        p.prepare_sleep();
        // The token from `kick_force` ends the park at once; the flag is
        // still set (nobody swapped it), but the wait was short: Kicked.
        assert_eq!(p.sleep(Duration::from_secs(30)), Wake::Kicked);
    }

    #[test]
    fn parker_is_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<Parker>();
    }

    /// A kicker on another thread wakes a parked sleeper long before the
    /// timeout.
    #[test]
    fn kick_wakes_a_parked_sleeper() {
        let p = Arc::new(Parker::new());
        let work = Arc::new(AtomicU64::new(0));
        let (p2, w2) = (Arc::clone(&p), Arc::clone(&work));
        let sleeper = std::thread::spawn(move || {
            p2.bind_current_thread();
            let mut wakes = 0;
            loop {
                if w2.load(Ordering::Acquire) != 0 {
                    return wakes;
                }
                p2.prepare_sleep();
                if w2.load(Ordering::Acquire) != 0 {
                    p2.cancel_sleep();
                    continue;
                }
                assert_eq!(p2.sleep(Duration::from_secs(60)), Wake::Kicked);
                wakes += 1;
            }
        });
        while !p.is_sleeping() {
            std::thread::yield_now();
        }
        work.store(1, Ordering::Release);
        publish_fence();
        p.kick();
        let wakes = sleeper.join().unwrap();
        assert!(wakes >= 1, "the sleeper parked at least once");
    }
}
