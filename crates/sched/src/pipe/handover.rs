//! Handing a running pipe's packets over to the pipe that replaces it (a
//! link rebuilt while it runs, when a flowset is added to it or deleted
//! from it), between two calls of its owner.
//!
//! # Guarantees
//! * **Nothing lost without a counted reason.** [`Pipe::hand_over`] gives
//!   up every packet the old pipe holds: those on the link or in the delay
//!   line with their exit times, then those in the scheduler in its
//!   service order; a packet whose flow has no place in the new pipe (its
//!   flowset deleted) is dropped with [`DropReason::FlowRemoved`], and a
//!   packet already decided lost (a profile loss) keeps its reason. Moved
//!   packets leave the old pipe's counters (`in` less them, so its
//!   `in = out + dropped` holds) and enter the new one's with
//!   [`Pipe::adopt`]. A copy `duplicate` made that is still in the delay
//!   line right behind its original goes with it ([`Moved::Copy`], to the
//!   original's new queue, counted nowhere, as copies are not in `in`); a
//!   copy whose original is dropped, or that does not follow it (slots
//!   placed it apart), is not sent, as the pipe's owner would not have
//!   sent it either.
//! * **Times and order kept.** A moved packet in flight keeps its exit
//!   time (later only if the new delay line keeps order behind a later
//!   one, which cannot happen for packets handed over in exit order into
//!   an empty line); queued packets go to the new scheduler in the old
//!   one's service order, so each flow keeps its order, and the new link
//!   starts after the transmission in progress on the old one
//!   ([`Pipe::continue_link`]). A queued packet is not filtered again (it
//!   was admitted once), nor decided again by PIE on arrival, and keeps
//!   the time it entered its old queue ([`Moved::Queued`]) when both
//!   pipes keep enqueue times (some queue has CoDel or PIE): the sojourn
//!   CoDel and PIE's `ts` measure counts from its first enqueue. Without
//!   one (the old pipe kept none) it passes CoDel undecided, as a packet
//!   queued before CoDel was configured does, while its new queue holds
//!   no timed packet, and is timed from the hand-over behind timed ones
//!   ([`Pipe::adopt`]); into a pipe that keeps no times, its time is
//!   forgotten. [`Pipe::hand_over_each`] chooses the new flow
//!   per packet (an old queue split by a finer mask): each new queue gets
//!   its packets in the old order restricted to it.
//!
//! The burst credit left on the old link carries over to the new one of
//! the same instance ([`Pipe::continue_link`]), capped at the new burst,
//! so a change in the middle of a burst neither cuts it short nor lengthens
//! it (new instances split off start without credit, as after a busy
//! period; the bound of [`super::link`] holds per instance).
//!
//! The random streams go on as well: the new pipe of an instance continues
//! the old one's draws in its own seed ([`Pipe::continue_from`]), so a
//! rebuild does not replay the loss and jitter draws a run began with; so
//! do the link's other running states, as a live change of the same pipe
//! keeps them: the last correlated jitter sample, tc-netem's reordering
//! count and its chain's last answer, and the current slot.
//!
//! What does not carry over: the schedulers' fair-share state (virtual
//! times, deficits): queued packets enter the new scheduler in the old
//! one's service order, as if they had just arrived. RED averages,
//! Gilbert-Elliott and 4-state loss states and the correlated chains'
//! last answers are carried by [`crate::PipeSet::replace_link_moving`],
//! queue by queue, where one old queue continues in one new queue; so are
//! the queues' counters, summed where several old queues meet in one.
//!
//! Each queue's CoDel state (dropping or not, count, next drop, first
//! time above target) and PIE state (probability, burst allowance, delay
//! estimates, update grid, departure-rate cycle) are carried the same
//! way, read once the old link has run up to the change, and more
//! strictly: only where the old queue's queued packets all go to the one
//! queue that continues it and that queue takes in no other queue's
//! packets. Queues merged by a coarser mask, and a queue split by a finer
//! one (its heir and every queue it feeds), start afresh, as a queue
//! that has just been configured does: the states describe the delay of
//! the packets one queue holds, and neither part of them nor a mix of
//! several queues' packets is what the state was measuring. A state goes
//! on only under the same AQM (CoDel to CoDel, PIE to PIE); when the
//! change also gives the queue new CoDel or PIE parameters, the state
//! goes on under them from the next packet, as when a queue's parameters
//! change in place ([`Pipe::set_queue`]) and as a carried RED average
//! does under new RED parameters. PIE's draws go on with the random
//! streams ([`Pipe::continue_from`]), so a queue that continues another
//! one whole drops exactly the packets the old link would have.
//!
//! # Complexity
//! O(held packets + flows); control path only.

use super::{count_drop, Fate, Pipe, PipeCounters, Queue};
use crate::{DropReason, FlowId, Instant, Packet, Rejected, Scheduler};

/// The running state of a pipe's link that its replacement continues
/// ([`Pipe::continuation`], [`Pipe::continue_from`]); its packets and
/// burst credit are handed over apart ([`Pipe::hand_over`],
/// [`Pipe::continue_link`]).
#[derive(Clone, Debug)]
pub struct Continuation {
    streams: super::random::Streams,
    jitter_normal: Option<f64>,
    reorder_count: u32,
    reorder_last: bool,
    slot_gate: Option<super::slot::SlotGate>,
}

/// A packet a pipe gives up when it is replaced ([`Pipe::hand_over`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moved {
    /// It waited in the scheduler.
    Queued {
        /// The packet.
        packet: Packet,
        /// When it entered its queue, as the old pipe kept it (the
        /// sojourn CoDel and PIE's `ts` measure goes on from there in the
        /// new pipe); `None` when the old pipe kept no enqueue times, or
        /// none for this packet (queued before it did).
        enqueued: Option<Instant>,
    },
    /// It was on the link or in the delay line, leaving at `exit`.
    InFlight {
        /// Its exit time.
        exit: Instant,
        /// The packet.
        packet: Packet,
    },
    /// The copy a `duplicate` decision made of the [`Moved::InFlight`]
    /// packet given up just before it (same token, its new flow), leaving
    /// right behind it at `exit`. Not a packet of its own: counted in no
    /// `in`, and never dropped as one (its original's buffer is sent
    /// twice).
    Copy {
        /// Its exit time.
        exit: Instant,
        /// The original's packet.
        packet: Packet,
    },
}

impl<S: Scheduler> Pipe<S> {
    /// Gives up every packet at `now` (module docs): first runs the link
    /// up to `now`, then hands the delay line's packets to `moved` in exit
    /// order and the scheduler's in its service order, each with its flow
    /// as `remap` gives it in the new pipe; a packet whose flow `remap`
    /// refuses, and a packet already decided lost, goes to `dropped`
    /// (counted here). Returns when the link is free (the end of the
    /// transmission in progress) and the packets the scheduler did not
    /// give up (0 for every scheduler of this crate, see [`Pipe::purge`]).
    pub fn hand_over(
        &mut self,
        now: Instant,
        remap: &dyn Fn(FlowId) -> Option<FlowId>,
        moved: &mut dyn FnMut(Moved),
        dropped: &mut dyn FnMut(Rejected),
    ) -> (Instant, u64) {
        self.hand_over_each(now, &mut |p: &Packet| remap(p.flow), moved, dropped)
    }

    /// [`Pipe::hand_over`] where the new flow is chosen per packet:
    /// `remap` sees each packet (with its flow in this pipe) in the order
    /// the packets are given up, so packets of one queue may go to
    /// several (a finer mask splits the queue by each packet's own key).
    pub fn hand_over_each(
        &mut self,
        now: Instant,
        remap: &mut dyn FnMut(&Packet) -> Option<FlowId>,
        moved: &mut dyn FnMut(Moved),
        dropped: &mut dyn FnMut(Rejected),
    ) -> (Instant, u64) {
        self.advance_link(now);
        let link_free = self.link.busy_until.max(self.link.last_finish);
        // The last packet given up from the line, and its new flow if it
        // moved: a copy right behind it goes along.
        let mut last: Option<(u64, Option<FlowId>)> = None;
        while let Some(e) = self.line.pop_due(Instant::MAX) {
            match e.fate {
                Fate::Duplicate => {
                    if let Some((token, Some(flow))) = last.take() {
                        if token == e.packet.token {
                            moved(Moved::Copy {
                                exit: e.exit,
                                packet: Packet { flow, ..e.packet },
                            });
                        }
                    }
                }
                Fate::Transmit => {
                    let to = give(
                        &mut self.counters,
                        &mut self.queues,
                        remap,
                        moved,
                        dropped,
                        e.packet,
                        Held::InFlight { exit: e.exit },
                    );
                    last = Some((e.packet.token, to));
                }
                Fate::Dropped(reason) => {
                    last = None;
                    count_drop(&mut self.counters, &mut self.queues, &e.packet, reason);
                    dropped(Rejected {
                        packet: e.packet,
                        reason,
                    });
                }
            }
        }
        let mut t = now;
        let mut misses = 0u64;
        let budget = (self.sched.queued() as u64 + 1).saturating_mul(64);
        while !self.sched.is_empty() && misses < budget {
            match self.sched.dequeue(t) {
                Some(pkt) => {
                    // A queue's packets leave the scheduler in order: its
                    // oldest enqueue time is this packet's (taken even
                    // when the packet is dropped, for the next one's).
                    let enqueued = self.take_head_time(pkt.flow.index());
                    give(
                        &mut self.counters,
                        &mut self.queues,
                        remap,
                        moved,
                        dropped,
                        pkt,
                        Held::Queued { enqueued },
                    );
                }
                None => {
                    misses += 1;
                    t = match self.sched.next_eligible(t) {
                        Some(e) if e > t => e,
                        _ => t.saturating_add_nanos(super::MAX_PROBE_NS),
                    };
                }
            }
        }
        self.reset_queues();
        self.stalled = false;
        self.shaper_wait = false;
        (link_free, self.sched.queued() as u64)
    }

    /// Takes a packet another pipe gave up ([`Pipe::hand_over`]), at `now`:
    /// in flight, into the delay line at its exit time; queued, into the
    /// scheduler without the queue's filters (nor PIE's decision on
    /// arrival), with its enqueue time when this pipe keeps them: the one
    /// it brings, or, without one, none (counted as untimed, passing
    /// CoDel undecided) while its queue holds no timed packet, else `now`
    /// (so that the times stay in their packets' order). Counted in `in`. A
    /// [`Moved::Copy`] goes into the delay line behind its original when
    /// there is room and its flow is the pipe's, and is otherwise not sent;
    /// it is never refused.
    ///
    /// # Errors
    /// The packet back with [`DropReason::FlowRemoved`] (counted as dropped
    /// here): its flow is beyond the pipe's, the delay line is full, or the
    /// scheduler refuses it.
    pub fn adopt(&mut self, now: Instant, moved: Moved) -> Result<(), Rejected> {
        // In flight: its exit time; queued: none.
        let (pkt, at) = match moved {
            Moved::Queued { packet, enqueued } => (packet, Held::Queued { enqueued }),
            Moved::InFlight { exit, packet } => (packet, Held::InFlight { exit }),
            Moved::Copy { exit, packet } => {
                if packet.flow.index() < self.queues.len() && self.line.free() > 0 {
                    self.line.insert(exit, packet, Fate::Duplicate);
                }
                return Ok(());
            }
        };
        self.count_in(&pkt);
        let refuse = |pipe: &mut Self| {
            pipe.count_drop(&pkt, DropReason::FlowRemoved);
            Err(Rejected {
                packet: pkt,
                reason: DropReason::FlowRemoved,
            })
        };
        if pkt.flow.index() >= self.queues.len() {
            return refuse(self);
        }
        match at {
            Held::InFlight { exit } => {
                if self.line.free() == 0 {
                    return refuse(self);
                }
                self.line.insert(exit, pkt, Fate::Transmit);
                Ok(())
            }
            Held::Queued { enqueued } => {
                self.advance_link(now);
                match self.accept(now, pkt, enqueued) {
                    Ok(()) => Ok(()),
                    Err(_) => refuse(self),
                }
            }
        }
    }

    /// The link is busy until `until` (the transmission in progress on the
    /// pipe this one replaces): the next packet starts no earlier. It may
    /// still send `credit` bytes at line speed (the replaced link's
    /// [`Pipe::burst_credit`], capped at this pipe's burst) until the next
    /// wake-up after idle recomputes its credit.
    pub fn continue_link(&mut self, until: Instant, credit: u64) {
        self.link.busy_until = self.link.busy_until.max(until);
        self.link.last_finish = self.link.last_finish.max(until);
        self.link.carry_credit(credit);
    }

    /// What this pipe's link has reached, for the pipe that replaces it
    /// ([`Pipe::continue_from`]).
    pub fn continuation(&self) -> Continuation {
        Continuation {
            streams: self.rng.clone(),
            jitter_normal: self.jitter_normal,
            reorder_count: self.reorder_count,
            reorder_last: self.reorder_last,
            slot_gate: self.slot_gate.clone(),
        }
    }

    /// Continues `from` (the pipe this one replaces, same instance) as a
    /// live change of the same pipe would: the random streams go on from
    /// the draws they had reached, in this pipe's seed
    /// ([`super::random::Streams::continue_from`]), instead of replaying
    /// their first ones; correlated jitter goes on from the last sample;
    /// tc-netem's reordering keeps its count of packets since the last one
    /// sent ahead and its chain's last answer; and with slots on both, the
    /// current slot keeps its instant (and, when the slots are the same,
    /// what it has left), so a packet does not wait a whole interval for a
    /// new first slot.
    pub fn continue_from(&mut self, from: &Continuation) {
        self.rng.continue_from(&from.streams);
        self.jitter_normal = from.jitter_normal;
        self.reorder_count = from.reorder_count;
        self.reorder_last = from.reorder_last;
        if let (Some(new), Some(old)) = (&mut self.slot_gate, &from.slot_gate) {
            *new = new.continuing(old);
        }
    }

    /// Bytes the link may still send at line speed in its current busy
    /// period (dummynet's `burst` credit of the pipe's link).
    pub fn burst_credit(&self) -> u64 {
        self.link.credit
    }
}

/// Where a packet given up was: what [`Moved`] says of it besides the
/// packet.
#[derive(Clone, Copy)]
enum Held {
    /// On the link or in the delay line, leaving at `exit`.
    InFlight { exit: Instant },
    /// In the scheduler since `enqueued`, when known.
    Queued { enqueued: Option<Instant> },
}

/// One packet given up (`at`: where it was): to `moved` with its new
/// flow (out of the old pipe's `in`; its queue's counters keep it as
/// held, for [`crate::PipeSet::replace_link_moving`] to take out of what
/// the queue's heir inherits), or dropped as [`DropReason::FlowRemoved`] when `remap`
/// has no place for its flow. Returns the new flow, `None` when dropped.
fn give(
    counters: &mut PipeCounters,
    queues: &mut [Queue],
    remap: &mut dyn FnMut(&Packet) -> Option<FlowId>,
    moved: &mut dyn FnMut(Moved),
    dropped: &mut dyn FnMut(Rejected),
    pkt: Packet,
    at: Held,
) -> Option<FlowId> {
    match remap(&pkt) {
        Some(flow) => {
            counters.in_packets -= 1;
            counters.in_bytes -= u64::from(pkt.len);
            let packet = Packet { flow, ..pkt };
            moved(match at {
                Held::InFlight { exit } => Moved::InFlight { exit, packet },
                Held::Queued { enqueued } => Moved::Queued { packet, enqueued },
            });
            Some(flow)
        }
        None => {
            count_drop(counters, queues, &pkt, DropReason::FlowRemoved);
            dropped(Rejected {
                packet: pkt,
                reason: DropReason::FlowRemoved,
            });
            None
        }
    }
}
