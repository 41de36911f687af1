//! Changes to a running scheduler, applied by the arbiter between scheduler
//! calls: the control inbox of the runtime's design.
//!
//! Wrap the scheduler in [`Reconfigurable`] before [`crate::Runtime::start`]
//! and keep its [`Control`] handle. [`Control::send`] queues a change (a
//! closure over the scheduler) from any thread; the arbiter applies queued
//! changes at the start of its next `enqueue` or `dequeue`, so a change
//! never runs in the middle of a packet's decision and the scheduler is
//! never touched by two threads. [`Control::wait_applied`] waits until a
//! change took effect.
//!
//! # Guarantees
//! * Changes are applied once each, in the order they were sent
//!   ([`pspat_mailbox::Inbox`], model-checked with loom).
//! * Nothing is lost without a count: packets a change removes (through
//!   [`Scheduler::remove_flow`]'s purge callback, the only way a change
//!   can drop packets) are handed to the arbiter as late drops
//!   ([`Scheduler::take_late_drops`]) with their reason, usually
//!   [`pspat_sched::DropReason::FlowRemoved`]; the arbiter counts them per
//!   client and recycles their descriptors. Until then they count as
//!   queued, so the runtime never sees an empty scheduler with packets
//!   still owed a count.
//! * Order: a change cannot reorder a flow's packets unless the closure
//!   itself dequeues and re-enqueues them.
//!
//! When traffic stops, the arbiter sleeps: a change sent then is applied at
//! its next round, at the latest its safety wake-up (100 ms by default,
//! [`crate::RuntimeConfig::idle_safety_wake_ns`]) or the next
//! packet (before that packet is decided). To have it applied at once,
//! wake the arbiter after sending ([`crate::Runtime::arbiter_waker`]).
//!
//! Cost: one Relaxed load per scheduler call when nothing is queued.

use std::sync::Arc;
use std::time::{Duration, Instant as WallInstant};

use pspat_mailbox::Inbox;
pub use pspat_mailbox::Ticket;
use pspat_sched::{FlowError, FlowId, FlowParams, Instant, Packet, Rejected, Scheduler};

/// A change: runs on the arbiter's thread with the scheduler and a sink for
/// the packets it purges.
pub type Change<S> = Box<dyn FnOnce(&mut S, &mut dyn FnMut(Rejected)) + Send>;

/// A scheduler that applies [`Change`]s sent through its [`Control`]
/// handles (module docs).
pub struct Reconfigurable<S> {
    sched: S,
    inbox: Arc<Inbox<Change<S>>>,
    /// Packets purged by changes, owed to the arbiter as late drops.
    purged: Vec<Rejected>,
}

/// Sends changes to a [`Reconfigurable`] scheduler from any thread.
pub struct Control<S> {
    inbox: Arc<Inbox<Change<S>>>,
}

impl<S> Clone for Control<S> {
    fn clone(&self) -> Self {
        Control {
            inbox: Arc::clone(&self.inbox),
        }
    }
}

impl<S> std::fmt::Debug for Control<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("applied", &self.inbox.applied())
            .finish()
    }
}

impl<S: Scheduler> Reconfigurable<S> {
    /// Wraps `sched`; returns the wrapper and its first control handle.
    pub fn new(sched: S) -> (Self, Control<S>) {
        let inbox = Arc::new(Inbox::new());
        let control = Control {
            inbox: Arc::clone(&inbox),
        };
        (
            Reconfigurable {
                sched,
                inbox,
                purged: Vec::new(),
            },
            control,
        )
    }

    /// The wrapped scheduler.
    pub fn get(&self) -> &S {
        &self.sched
    }

    /// Unwraps the scheduler (changes still queued are not applied).
    pub fn into_inner(self) -> S {
        self.sched
    }

    #[inline]
    fn apply_changes(&mut self) {
        if self.inbox.has_pending() {
            let (sched, purged) = (&mut self.sched, &mut self.purged);
            self.inbox
                .drain(|change| change(sched, &mut |r| purged.push(r)));
        }
    }
}

impl<S: 'static> Control<S> {
    /// Queues `change`; it runs on the arbiter's thread before the
    /// scheduler's next `enqueue` or `dequeue` (module docs: waking an idle
    /// arbiter).
    pub fn send(
        &self,
        change: impl FnOnce(&mut S, &mut dyn FnMut(Rejected)) + Send + 'static,
    ) -> Ticket {
        self.inbox.send(Box::new(change))
    }

    /// True once the change of `ticket` was applied.
    pub fn is_applied(&self, ticket: Ticket) -> bool {
        self.inbox.is_applied(ticket)
    }

    /// Waits until the change of `ticket` was applied or `timeout` passed;
    /// true if it was applied. Sleeps in steps of 100 µs.
    pub fn wait_applied(&self, ticket: Ticket, timeout: Duration) -> bool {
        let start = WallInstant::now();
        loop {
            if self.inbox.is_applied(ticket) {
                return true;
            }
            if start.elapsed() >= timeout {
                return false;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

impl<S: Scheduler> Scheduler for Reconfigurable<S> {
    #[inline]
    fn enqueue(&mut self, now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.apply_changes();
        self.sched.enqueue(now, pkt)
    }

    #[inline]
    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        self.apply_changes();
        self.sched.dequeue(now)
    }

    fn queued(&self) -> usize {
        self.sched.queued() + self.purged.len()
    }

    fn next_eligible(&self, now: Instant) -> Option<Instant> {
        if self.purged.is_empty() {
            self.sched.next_eligible(now)
        } else {
            Some(now)
        }
    }

    fn name(&self) -> &'static str {
        self.sched.name()
    }

    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.sched.add_flow(flow, params)
    }

    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.sched.change_flow(flow, params)
    }

    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        self.sched.remove_flow(flow, purge)
    }

    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        self.sched.flow_queued(flow)
    }

    fn take_late_drops(&mut self, out: &mut dyn FnMut(Rejected)) {
        for r in self.purged.drain(..) {
            out(r);
        }
        self.sched.take_late_drops(out);
    }

    fn counts_from_arrival(&self) -> bool {
        self.sched.counts_from_arrival()
    }
}
