//! The [`Scheduler`] trait every algorithm implements, and what it answers
//! when it refuses a packet.
//!
//! # Contract
//! * `enqueue` either keeps the packet or hands it back in [`Rejected`] with a
//!   [`DropReason`]; nothing is lost silently.
//! * `dequeue` returns packets of one flow in the order they were enqueued.
//! * A work-conserving scheduler returns `Some` from `dequeue` whenever
//!   [`Scheduler::queued`] is non-zero. A shaping scheduler may return `None`
//!   while holding packets; it then reports when the next one becomes
//!   eligible through [`Scheduler::next_eligible`].
//! * No method reads a clock, spawns a thread or allocates after construction.
//!
//! # Flow lifecycle
//! A scheduler is built over a [`FlowTable`] of `capacity` flow slots, each
//! present or absent; packets of absent flows are refused with
//! [`DropReason::UnknownFlow`]. At run time (dummynet's masks create a queue
//! on a key's first packet and free it on expiry; Linux adds, changes and
//! deletes classes):
//! * [`Scheduler::add_flow`] makes an absent slot present;
//! * [`Scheduler::change_flow`] gives a present flow new parameters; its
//!   queued packets stay queued, in order;
//! * [`Scheduler::remove_flow`] hands every packet still queued in the flow
//!   to `purge` with [`DropReason::FlowRemoved`] (like Linux's class delete)
//!   and frees the slot, which may be added again at once;
//! * [`Scheduler::flow_queued`] says how many packets a flow holds, so a
//!   caller may drain it first.
//!
//! Every built-in algorithm implements all four without allocating (its
//! per-flow state is sized by the capacity when it is built); each module
//! says what a change or a removal does to queued packets and timestamps.
//! On an error nothing changes. The default bodies answer
//! [`FlowError::Unsupported`] (and `flow_queued` answers `None`), for
//! schedulers written without a lifecycle.
//!
//! # Example: a toy scheduler
//! ```
//! use pspat_sched::{Instant, Packet, Rejected, DropReason, Scheduler};
//! use std::collections::VecDeque;
//!
//! /// Serves everything in arrival order (allocates: fine for a toy).
//! struct Toy(VecDeque<Packet>);
//!
//! impl Scheduler for Toy {
//!     fn enqueue(&mut self, _now: Instant, pkt: Packet) -> Result<(), Rejected> {
//!         if self.0.len() >= 4 {
//!             return Err(Rejected { packet: pkt, reason: DropReason::QueueFull });
//!         }
//!         self.0.push_back(pkt);
//!         Ok(())
//!     }
//!     fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
//!         self.0.pop_front()
//!     }
//!     fn queued(&self) -> usize {
//!         self.0.len()
//!     }
//!     fn name(&self) -> &'static str {
//!         "toy"
//!     }
//! }
//!
//! let mut s = Toy(VecDeque::new());
//! s.enqueue(Instant::ZERO, Packet::default()).unwrap();
//! assert_eq!(s.queued(), 1);
//! assert!(s.dequeue(Instant::ZERO).is_some());
//! ```

#[cfg(doc)]
use crate::FlowTable;
use crate::{ConfigError, FlowError, FlowId, FlowParams, Instant, Packet};

/// Why a scheduler refused a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DropReason {
    /// The scheduler's packet arena is full.
    QueueFull,
    /// The flow's own queue limit is reached.
    FlowLimit,
    /// The packet names a flow the scheduler was not configured with.
    UnknownFlow,
    /// The length is 0 or above the flow's or the algorithm's maximum.
    BadLength,
    /// A rank fell outside the priority queue's window and the policy rejects.
    OutOfWindow,
    /// A policy (AQM, rate limit, admission) dropped it.
    Policy,
    /// Its flow was removed while it was queued
    /// ([`Scheduler::remove_flow`]).
    FlowRemoved,
    /// A runtime thread or its transmit backend failed (panicked) while the
    /// packet was held; it was discarded so the runtime could stop.
    Fault,
    /// The runtime shut down before the packet could leave (its drain
    /// deadline passed, or the shutdown discards).
    Shutdown,
    /// A pipe's random loss (`plr`) took it.
    RandomLoss,
    /// A pipe's correlated loss model took it: Gilbert-Elliott
    /// (`gemodel`) or the 4-state model (`lossstate`).
    BurstLoss,
    /// A pipe queue's RED or gentle RED dropped it early.
    Red,
    /// A pipe's delay profile lost it (its sample fell above the profile's
    /// `loss-level`) after it occupied the link.
    ProfileLoss,
    /// A pipe queue's CoDel dropped it as it left the queue.
    Codel,
    /// A pipe queue's PIE dropped it on arrival.
    Pie,
}

impl DropReason {
    /// Every reason, for counters indexed by reason.
    pub const ALL: [DropReason; 15] = [
        DropReason::QueueFull,
        DropReason::FlowLimit,
        DropReason::UnknownFlow,
        DropReason::BadLength,
        DropReason::OutOfWindow,
        DropReason::Policy,
        DropReason::FlowRemoved,
        DropReason::Fault,
        DropReason::Shutdown,
        DropReason::RandomLoss,
        DropReason::BurstLoss,
        DropReason::Red,
        DropReason::ProfileLoss,
        DropReason::Codel,
        DropReason::Pie,
    ];

    /// Position in [`DropReason::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// A short stable name for reports and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::FlowLimit => "flow_limit",
            DropReason::UnknownFlow => "unknown_flow",
            DropReason::BadLength => "bad_length",
            DropReason::OutOfWindow => "out_of_window",
            DropReason::Policy => "policy",
            DropReason::FlowRemoved => "flow_removed",
            DropReason::Fault => "fault",
            DropReason::Shutdown => "shutdown",
            DropReason::RandomLoss => "random_loss",
            DropReason::BurstLoss => "burst_loss",
            DropReason::Red => "red",
            DropReason::ProfileLoss => "profile_loss",
            DropReason::Codel => "codel",
            DropReason::Pie => "pie",
        }
    }
}

/// A packet the scheduler did not keep, handed back with the reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The packet, unchanged.
    pub packet: Packet,
    /// Why it was refused.
    pub reason: DropReason,
}

/// A scheduling algorithm: decides which queued packet leaves next.
///
/// See the [module documentation](crate::scheduler) for the contract and an example.
pub trait Scheduler {
    /// Offers `pkt` at time `now`.
    ///
    /// # Errors
    /// [`Rejected`] hands the packet back when it cannot be kept.
    fn enqueue(&mut self, now: Instant, pkt: Packet) -> Result<(), Rejected>;

    /// Chooses the next packet to transmit at time `now`, if any is eligible.
    fn dequeue(&mut self, now: Instant) -> Option<Packet>;

    /// Packets currently held.
    fn queued(&self) -> usize;

    /// True when no packet is held.
    fn is_empty(&self) -> bool {
        self.queued() == 0
    }

    /// For shaping schedulers: the earliest time a held packet becomes
    /// eligible, when `dequeue(now)` returned `None` while packets are held.
    /// A soft deadline: calling `dequeue` earlier wastes a call, later costs
    /// accuracy. Work-conserving schedulers return `None`.
    fn next_eligible(&self, _now: Instant) -> Option<Instant> {
        None
    }

    /// A short name for reports (`"drr"`, `"qfq"`, ...).
    fn name(&self) -> &'static str;

    /// Makes the absent flow slot `flow` present with `params`; its packets
    /// are accepted from now on.
    ///
    /// # Errors
    /// [`FlowError::OutOfCapacity`], [`FlowError::Present`],
    /// [`FlowError::InvalidParams`], or [`FlowError::Unsupported`]; nothing
    /// changes then.
    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        let _ = (flow, params);
        Err(FlowError::unsupported(
            self.name(),
            "this scheduler has no flow lifecycle",
        ))
    }

    /// Gives the present flow `flow` new parameters. Its queued packets stay
    /// queued in order; a new weight shows in the shares within the next
    /// rounds (each algorithm's module docs say exactly when).
    ///
    /// # Errors
    /// [`FlowError::OutOfCapacity`], [`FlowError::Absent`],
    /// [`FlowError::InvalidParams`], or [`FlowError::Unsupported`]; nothing
    /// changes then.
    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        let _ = (flow, params);
        Err(FlowError::unsupported(
            self.name(),
            "this scheduler has no flow lifecycle",
        ))
    }

    /// Removes the present flow `flow`: every packet it still holds goes to
    /// `purge` with [`DropReason::FlowRemoved`], in its queue order, and
    /// the slot is absent (free for [`Scheduler::add_flow`]) on return.
    ///
    /// # Errors
    /// [`FlowError::OutOfCapacity`], [`FlowError::Absent`], or
    /// [`FlowError::Unsupported`]; nothing changes then.
    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        let _ = (flow, purge);
        Err(FlowError::unsupported(
            self.name(),
            "this scheduler has no flow lifecycle",
        ))
    }

    /// Packets held for `flow`, `None` when the flow is absent (or the
    /// scheduler has no lifecycle).
    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        let _ = flow;
        None
    }

    /// A packet this scheduler handed out was dropped before it used the
    /// link (an AQM deciding at the head of its queue, as a pipe's CoDel):
    /// a scheduler that charged `flow` for its `len` bytes may give the
    /// service back, so that dropped packets do not count against the
    /// flow's share (RFC 8290 §4.2: FQ-CoDel charges a flow's deficit only
    /// for the packets it sends). The default keeps the charge.
    fn uncharge(&mut self, flow: FlowId, len: u32) {
        let _ = (flow, len);
    }

    /// Takes the oldest packet of `flow` out, for its owner to drop (a
    /// pipe over its held limit dropping from the longest queue, as
    /// FQ-CoDel does); the flow keeps its place in the schedule. `None`
    /// when the flow holds nothing, or when the scheduler does not drop
    /// from a queue's head (the default: only [`crate::Fq`] does).
    fn drop_head(&mut self, flow: FlowId) -> Option<Packet> {
        let _ = flow;
        None
    }

    /// Sets the scheduler-wide quantum to `bytes`: that of the flows of the
    /// smallest weight, the others' in proportion, as at construction
    /// ([`crate::Fq`]'s, FQ-CoDel's `quantum`). Every flow keeps its
    /// deficit and its place; its new quantum counts from the next one it
    /// earns. O(flow slots).
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] for a quantum the scheduler does not
    /// accept, or [`ConfigError::Invalid`] (the default) for a scheduler
    /// without a scheduler-wide quantum; nothing changes then.
    fn set_quantum(&mut self, bytes: u32) -> Result<(), ConfigError> {
        Err(ConfigError::invalid(
            "quantum",
            format!(
                "{} has no scheduler-wide quantum (asked for {bytes} bytes)",
                self.name()
            ),
        ))
    }

    /// Hands every packet dropped after it was accepted, other than by
    /// [`Scheduler::remove_flow`] (a pipe's profile loss, say), to `out`
    /// with its reason. Such packets count in [`Scheduler::queued`] until
    /// taken. A caller that dequeues calls this after each batch of
    /// dequeues. Most schedulers never drop late: the default hands out
    /// nothing.
    fn take_late_drops(&mut self, out: &mut dyn FnMut(Rejected)) {
        let _ = out;
    }

    /// Whether a packet's departure is counted from the `now` of its
    /// `enqueue` (a pipe's delay line and its CoDel sojourn times do), so
    /// that `now` must be no earlier than the packet's real arrival. A
    /// runtime that collects packets from other threads then stamps each
    /// batch with a clock read taken after the batch was collected, rather
    /// than with its round's time, read before: a clock read a batch. The
    /// default, false, suits schedulers that decide by arrival order and
    /// rates only.
    fn counts_from_arrival(&self) -> bool {
        false
    }
}

/// A [`Rejected`] for a packet purged by [`Scheduler::remove_flow`].
#[inline]
pub(crate) fn purged(packet: Packet) -> Rejected {
    Rejected {
        packet,
        reason: DropReason::FlowRemoved,
    }
}

impl<S: Scheduler + ?Sized> Scheduler for Box<S> {
    fn enqueue(&mut self, now: Instant, pkt: Packet) -> Result<(), Rejected> {
        (**self).enqueue(now, pkt)
    }
    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        (**self).dequeue(now)
    }
    fn queued(&self) -> usize {
        (**self).queued()
    }
    fn next_eligible(&self, now: Instant) -> Option<Instant> {
        (**self).next_eligible(now)
    }
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn counts_from_arrival(&self) -> bool {
        (**self).counts_from_arrival()
    }
    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        (**self).add_flow(flow, params)
    }
    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        (**self).change_flow(flow, params)
    }
    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        (**self).remove_flow(flow, purge)
    }
    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        (**self).flow_queued(flow)
    }
    fn take_late_drops(&mut self, out: &mut dyn FnMut(Rejected)) {
        (**self).take_late_drops(out)
    }
    fn uncharge(&mut self, flow: FlowId, len: u32) {
        (**self).uncharge(flow, len)
    }
    fn drop_head(&mut self, flow: FlowId) -> Option<Packet> {
        (**self).drop_head(flow)
    }
    fn set_quantum(&mut self, bytes: u32) -> Result<(), ConfigError> {
        (**self).set_quantum(bytes)
    }
}
