//! The control inbox: changes sent from any thread to the one thread that
//! owns a piece of state (the arbiter and its scheduler), applied there
//! between rounds, in the order they were sent.
//!
//! Producers ([`Inbox::send`]) push under a mutex and then raise a
//! `pending` hint; the owner checks the hint once per call of its hot path
//! ([`Inbox::has_pending`], one load of a rarely written word) and only
//! then takes the lock ([`Inbox::drain`]). Every value gets a [`Ticket`]
//! (its sequence number); the owner publishes how many values it has
//! applied, so a sender can wait until its change took effect
//! ([`Inbox::is_applied`]).
//!
//! # Guarantees
//! * Nothing is lost: every sent value is drained exactly once, at the
//!   first [`Inbox::drain`] that starts after the send's hint became
//!   visible (or earlier).
//! * Order: values are drained in ticket order (one mutex orders the
//!   senders).
//! * A sender that sees [`Inbox::is_applied`] true also sees every write
//!   the owner made while applying it and anything before.
//!
//! Cost: `has_pending` is one Relaxed load; `send` and `drain` take one
//! uncontended lock. Changes are rare; the hot path pays one load.
//!
//! # Orderings
//! | atomic | writer | reader | pairs with |
//! |---|---|---|---|
//! | `pending` | `send` (Relaxed store true, after the unlock) | `has_pending` (Relaxed), `drain` (Relaxed swap) | none: a hint; the values are published by the mutex |
//! | `applied` | `drain` (Release store, after the values were applied) | `is_applied` (Acquire) | the sender's Acquire sees the owner's writes made while applying |
//!
//! Why a Relaxed hint cannot lose a value: `send` pushes, unlocks, then
//! sets the hint; `drain` clears the hint, then locks. If the owner's clear
//! comes after the sender's store in the hint's modification order, the
//! push came before the clear (program order plus the lock's
//! happens-before when the owner then locks), so this drain sees it. If it
//! comes before, the hint stays set and the next check drains the value.
//! `crates/mailbox/tests/loom_handshakes.rs::inbox_*` checks both.

use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering};

/// A value's place in the order of sends: the number of values sent before
/// it plus one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub u64);

/// A multi-producer, single-consumer queue of changes (see the module
/// docs).
#[derive(Debug)]
pub struct Inbox<T> {
    queue: Mutex<Queue<T>>,
    pending: AtomicBool,
    applied: AtomicU64,
}

#[derive(Debug)]
struct Queue<T> {
    values: Vec<T>,
    sent: u64,
}

impl<T> Default for Inbox<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Inbox<T> {
    /// An empty inbox.
    pub fn new() -> Self {
        Inbox {
            queue: Mutex::new(Queue {
                values: Vec::new(),
                sent: 0,
            }),
            pending: AtomicBool::new(false),
            applied: AtomicU64::new(0),
        }
    }

    /// Queues `value` for the owner; returns its ticket. Never blocks for
    /// longer than another send or drain holds the lock.
    pub fn send(&self, value: T) -> Ticket {
        let ticket = {
            // A poisoned lock only means a sender or the owner panicked
            // while holding it; the queue itself is always consistent.
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.values.push(value);
            q.sent += 1;
            Ticket(q.sent)
        };
        // Relaxed: a hint (module docs); the value is published by the
        // unlock above.
        self.pending.store(true, Ordering::Relaxed);
        ticket
    }

    /// True if a value may be waiting. Owner's hot path: one load.
    #[inline]
    pub fn has_pending(&self) -> bool {
        // Relaxed: a hint; a stale `false` delays the value to the next
        // check, never loses it.
        self.pending.load(Ordering::Relaxed)
    }

    /// Owner only: applies every waiting value in ticket order with
    /// `apply`, then publishes them as applied; returns how many. `apply`
    /// runs outside the lock, so a sender is never held up by it.
    pub fn drain(&self, mut apply: impl FnMut(T)) -> usize {
        // Relaxed: cleared before the lock is taken (module docs).
        if !self.pending.swap(false, Ordering::Relaxed) {
            return 0;
        }
        let (values, sent) = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            (std::mem::take(&mut q.values), q.sent)
        };
        let n = values.len();
        for v in values {
            apply(v);
        }
        // Release: pairs with the Acquire in `is_applied`; everything
        // `apply` wrote is visible to a sender that sees its ticket applied.
        self.applied.store(sent, Ordering::Release);
        n
    }

    /// True once the owner applied the value of `ticket`.
    pub fn is_applied(&self, ticket: Ticket) -> bool {
        // Acquire: pairs with the Release store in `drain`.
        self.applied.load(Ordering::Acquire) >= ticket.0
    }

    /// How many values were applied so far.
    pub fn applied(&self) -> u64 {
        // Acquire: as `is_applied`.
        self.applied.load(Ordering::Acquire)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn values_are_applied_once_in_ticket_order() {
        let inbox = Inbox::new();
        assert!(!inbox.has_pending());
        assert_eq!(inbox.drain(|_: u32| panic!("nothing was sent")), 0);
        let a = inbox.send(10);
        let b = inbox.send(20);
        assert_eq!((a, b), (Ticket(1), Ticket(2)));
        assert!(inbox.has_pending());
        assert!(!inbox.is_applied(a));
        let mut seen = Vec::new();
        assert_eq!(inbox.drain(|v| seen.push(v)), 2);
        assert_eq!(seen, [10, 20]);
        assert!(inbox.is_applied(a) && inbox.is_applied(b));
        assert_eq!(inbox.applied(), 2);
        assert!(!inbox.has_pending());
        assert_eq!(inbox.drain(|_| panic!("applied twice")), 0);
    }

    #[test]
    fn senders_on_many_threads_lose_nothing() {
        let inbox = std::sync::Arc::new(Inbox::new());
        let senders: Vec<_> = (0..4u64)
            .map(|t| {
                let inbox = std::sync::Arc::clone(&inbox);
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        inbox.send((t, i));
                    }
                })
            })
            .collect();
        let mut last = [None::<u64>; 4];
        let mut got = 0;
        while got < 4000 {
            inbox.drain(|(t, i)| {
                // Each sender's values arrive in its own order.
                assert!(last[t as usize].map_or(i == 0, |l| i == l + 1));
                last[t as usize] = Some(i);
                got += 1;
            });
            std::thread::yield_now();
        }
        for s in senders {
            s.join().unwrap();
        }
        assert_eq!(inbox.drain(|_| panic!("nothing left")), 0);
        assert_eq!(inbox.applied(), 4000);
    }
}
