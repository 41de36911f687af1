//! A [`Pipe`] seen as a [`Scheduler`], so a runtime that drives schedulers
//! (pspat's arbiter) can host a whole dummynet pipe: enqueue filters,
//! scheduler, link and delay line.
//!
//! # Mapping
//! * `enqueue` is [`Pipe::enqueue`] (filters and scheduler; a refusal
//!   hands the packet back with its reason).
//! * `dequeue(now)` hands out, one at a time, the packets whose exit time
//!   is at or before `now` ([`Pipe::release`]), in exit order.
//! * `next_eligible` is [`Pipe::poll_at`]: the caller's clock sleeps until
//!   the next exit or the next link transition, exactly as for a shaper.
//! * A packet dropped after the scheduler (a profile loss) is handed to
//!   [`Scheduler::take_late_drops`] with its reason, and counts as queued
//!   until taken.
//! * A duplicate ([`crate::pipe::Fate::Duplicate`]) is not a packet of
//!   its own: the pipe puts it right behind its original (same exit time),
//!   so the adapter marks the original, already waiting to be handed out,
//!   with [`Packet::COPY_BIT`] in its token ([`Packet::copies`] is then 2),
//!   and the caller sends that buffer twice, the copy right after the
//!   original. The caller clears the marks ([`Packet::without_marks`])
//!   before it reads its token, so the tokens it enqueues must leave that
//!   bit, [`Packet::CORRUPT_BIT`] and [`Packet::CE_BIT`] clear (a token
//!   with them set would come out as a copy, corrupted or marked). A
//!   corrupted packet comes out with [`Packet::CORRUPT_BIT`] set by the
//!   pipe itself, a packet RED marked with [`Packet::CE_BIT`]. Marked packets
//!   are counted in [`PipeScheduler::copies_marked`] and in the pipe's own
//!   `duplicates`; the two agree (a copy whose original is not the last
//!   packet waiting cannot happen, and would be counted in
//!   [`PipeScheduler::duplicates_not_sent`]).
//!
//! # Conservation
//! `queued() = pipe.held() + packets released but not yet dequeued + late
//! drops not yet taken`, so accepted = dequeued + dropped late + queued at
//! every step (a marked packet is one packet dequeued; its copy is counted
//! apart, in the pipe's `duplicates`).
//!
//! # Cost
//! O(1) per packet on top of the pipe. A `dequeue` that finds nothing
//! released yet asks [`Pipe::release_sole`] first: when the release would
//! hand out exactly one packet to transmit (a caller that dequeues as fast
//! as packets come due), that packet comes back without the release loop.
//! Otherwise it runs [`Pipe::release`] and hands out the first packet it
//! releases directly; only the packets behind it in the same release go
//! through the `ready` queue. The two small
//! queues grow to the largest batch one `release` hands out (bounded by
//! the delay line's capacity) and then never allocate again.

use std::collections::VecDeque;

use super::{Fate, Moved, Pipe};
use crate::{FlowError, FlowId, FlowParams, Instant, Packet, Rejected, Scheduler};

/// A [`Pipe`] behind the [`Scheduler`] trait (module docs).
#[derive(Debug)]
pub struct PipeScheduler<S> {
    pipe: Pipe<S>,
    ready: VecDeque<Packet>,
    late: VecDeque<Rejected>,
    copies_marked: u64,
    duplicates_not_sent: u64,
}

impl<S: Scheduler> PipeScheduler<S> {
    /// Wraps `pipe`.
    pub fn new(pipe: Pipe<S>) -> Self {
        PipeScheduler {
            pipe,
            ready: VecDeque::with_capacity(256),
            late: VecDeque::with_capacity(64),
            copies_marked: 0,
            duplicates_not_sent: 0,
        }
    }

    /// The pipe (its counters, queue lengths, configuration).
    pub fn pipe(&self) -> &Pipe<S> {
        &self.pipe
    }

    /// The pipe, to change its queues.
    pub fn pipe_mut(&mut self) -> &mut Pipe<S> {
        &mut self.pipe
    }

    /// Packets handed out marked to be sent twice ([`Packet::copies`]).
    pub fn copies_marked(&self) -> u64 {
        self.copies_marked
    }

    /// Duplicates the pipe decided on that this adapter could not mark (their
    /// original was not the last packet waiting; never expected, as the pipe
    /// puts a copy right behind its original).
    pub fn duplicates_not_sent(&self) -> u64 {
        self.duplicates_not_sent
    }

    /// Takes the pipe out of service (a pipe deleted while it runs): the
    /// packets already released (due, not yet dequeued) go to `ready`, to
    /// be sent; the late drops not yet taken and everything the pipe holds
    /// ([`Pipe::purge`]) go to `dropped`. Returns what the pipe could not
    /// give up (0 for every scheduler of this crate); `queued()` is that
    /// afterwards. Control path.
    pub fn retire(
        &mut self,
        now: Instant,
        ready: &mut dyn FnMut(Packet),
        dropped: &mut dyn FnMut(Rejected),
    ) -> u64 {
        while let Some(p) = self.ready.pop_front() {
            ready(p);
        }
        while let Some(r) = self.late.pop_front() {
            dropped(r);
        }
        self.pipe.purge(now, dropped)
    }

    /// As [`PipeScheduler::retire`], but the packets the pipe holds go to
    /// `moved` for the pipe that replaces it ([`Pipe::hand_over`]); returns
    /// when the link is free and what the pipe could not give up.
    pub fn hand_over(
        &mut self,
        now: Instant,
        remap: &dyn Fn(FlowId) -> Option<FlowId>,
        ready: &mut dyn FnMut(Packet),
        moved: &mut dyn FnMut(Moved),
        dropped: &mut dyn FnMut(Rejected),
    ) -> (Instant, u64) {
        self.hand_over_each(now, &mut |p: &Packet| remap(p.flow), ready, moved, dropped)
    }

    /// [`PipeScheduler::hand_over`] with the new flow chosen per packet
    /// ([`Pipe::hand_over_each`]).
    pub fn hand_over_each(
        &mut self,
        now: Instant,
        remap: &mut dyn FnMut(&Packet) -> Option<FlowId>,
        ready: &mut dyn FnMut(Packet),
        moved: &mut dyn FnMut(Moved),
        dropped: &mut dyn FnMut(Rejected),
    ) -> (Instant, u64) {
        while let Some(p) = self.ready.pop_front() {
            ready(p);
        }
        while let Some(r) = self.late.pop_front() {
            dropped(r);
        }
        self.pipe.hand_over_each(now, remap, moved, dropped)
    }

    /// Releases what is due at `now` while `ready` is empty: the first
    /// packet to hand out comes back directly (the common case, one
    /// packet per release, never touches `ready`), the rest go to `ready`
    /// behind it, in exit order.
    #[inline]
    fn pull(&mut self, now: Instant) -> Option<Packet> {
        debug_assert!(self.ready.is_empty());
        let mut first: Option<Packet> = None;
        let (ready, late, marked, lost) = (
            &mut self.ready,
            &mut self.late,
            &mut self.copies_marked,
            &mut self.duplicates_not_sent,
        );
        self.pipe.release(now, &mut |e| match e.fate {
            Fate::Transmit => {
                if first.is_none() {
                    first = Some(e.packet);
                } else {
                    ready.push_back(e.packet);
                }
            }
            Fate::Duplicate => {
                // The copy follows its original at once (same exit time,
                // next in the line), so the original is the last one
                // waiting: the back of `ready`, or `first` while `ready`
                // is empty.
                let last = if ready.is_empty() {
                    first.as_mut()
                } else {
                    ready.back_mut()
                };
                match last {
                    Some(p) if p.token == e.packet.token && p.copies() == 1 => {
                        *p = p.with_copy();
                        *marked += 1;
                    }
                    _ => *lost += 1,
                }
            }
            Fate::Dropped(reason) => late.push_back(Rejected {
                packet: e.packet,
                reason,
            }),
        });
        first
    }
}

impl<S: Scheduler> Scheduler for PipeScheduler<S> {
    fn enqueue(&mut self, now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.pipe.enqueue(now, pkt)
    }

    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        if let Some(p) = self.ready.pop_front() {
            return Some(p);
        }
        // The common case, one packet due at a time, without the release
        // loop; anything more goes through it.
        match self.pipe.release_sole(now) {
            Some(sole) => sole,
            None => self.pull(now),
        }
    }

    fn queued(&self) -> usize {
        self.pipe.held() as usize + self.ready.len() + self.late.len()
    }

    fn next_eligible(&self, now: Instant) -> Option<Instant> {
        if !self.ready.is_empty() || !self.late.is_empty() {
            return Some(now);
        }
        self.pipe.poll_at()
    }

    fn name(&self) -> &'static str {
        "pipe"
    }

    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.pipe.add_flow(flow, params)
    }

    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.pipe.change_flow(flow, params)
    }

    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        self.pipe.remove_flow(flow, purge)
    }

    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        self.pipe
            .queue_len(flow)
            .map(|(packets, _)| packets as usize)
    }

    fn take_late_drops(&mut self, out: &mut dyn FnMut(Rejected)) {
        while let Some(r) = self.late.pop_front() {
            out(r);
        }
    }

    /// True: the delay line counts from the enqueue time.
    fn counts_from_arrival(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::pipe::{
        DelayProfile, Jitter, JitterDistribution, PipeConfig, QueueConfig, QueueLimit,
    };
    use crate::rate::Rate;
    use crate::{Fifo, FlowTable};

    /// How a test pipe draws its delays.
    #[derive(Clone, Copy, Debug)]
    enum Draws {
        /// A fixed delay.
        Fixed,
        /// Jitter of up to 300 ns around the delay, order kept.
        Jitter,
        /// The same jitter, free to reorder (the line is a heap).
        Reorder,
    }

    /// A pipe at one byte per ns, delay 1 µs, a short line (so the link
    /// stalls), duplicating with probability `dup`, losing half the
    /// packets after the link when `loss`, with delays drawn as `draws`.
    fn pipe(dup: f64, loss: bool, draws: Draws, seed: u64) -> Pipe<Fifo> {
        let jitter = Jitter {
            ns: 300,
            distribution: JitterDistribution::Uniform,
        };
        let cfg = PipeConfig {
            bw: Some(Rate::checked("bw", 8_000_000_000u64).unwrap()),
            delay_ns: 1_000,
            profile: loss.then(|| DelayProfile::new(vec![0, 7], 0.5).unwrap()),
            jitter: (!matches!(draws, Draws::Fixed)).then_some(jitter),
            reorder: matches!(draws, Draws::Reorder),
            delay_line_capacity: 8,
            queue: QueueConfig {
                limit: QueueLimit::Slots(10_000),
                duplicate: dup,
                ..QueueConfig::default()
            },
            seed,
            ..PipeConfig::default()
        };
        let fifo = Fifo::new(FlowTable::uniform(2).unwrap(), 10_000).unwrap();
        Pipe::new(cfg, fifo, 2).unwrap()
    }

    proptest::proptest! {
        /// The adapter against the way it worked before it handed the
        /// first packet of a release out directly and before a lone due
        /// packet left without the release loop (`Pipe::release_sole`):
        /// every released packet queued, then taken from the front. Same
        /// packets, same order, same copy marks, same late drops, same
        /// pipe counters, and `queued` agrees, after every call.
        #[test]
        fn hands_out_what_a_queue_of_every_release_hands_out(
            ops in proptest::collection::vec((0u8..3, 0u64..400, 1u32..300), 1..300),
            dup in proptest::sample::select(vec![0.0, 0.5, 1.0]),
            loss in proptest::prelude::any::<bool>(),
            draws in proptest::sample::select(vec![Draws::Fixed, Draws::Jitter, Draws::Reorder]),
            seed in 0u64..50,
        ) {
            let mut fast = PipeScheduler::new(pipe(dup, loss, draws, seed));
            let mut reference = pipe(dup, loss, draws, seed);
            let mut ready: VecDeque<Packet> = VecDeque::new();
            let mut late: Vec<Rejected> = Vec::new();
            let mut lost = 0u64;
            let (mut late_fast, mut late_ref) = (Vec::new(), Vec::new());
            let mut now = 0u64;
            for (k, (op, dt, len)) in ops.into_iter().enumerate() {
                now += dt;
                let t = Instant::from_nanos(now);
                if op == 0 {
                    let pkt = Packet::new(FlowId(k as u32 % 2), len, k as u64);
                    let a = fast.enqueue(t, pkt).map_err(|r| r.reason);
                    let b = reference.enqueue(t, pkt).map_err(|r| r.reason);
                    proptest::prop_assert_eq!(a, b);
                } else {
                    // One or two dequeues: the second often finds `ready`
                    // holding what the first release left behind.
                    for _ in 0..op {
                        if ready.is_empty() {
                            reference.release(t, &mut |e| match e.fate {
                                Fate::Transmit => ready.push_back(e.packet),
                                Fate::Duplicate => match ready.back_mut() {
                                    Some(p) if p.token == e.packet.token && p.copies() == 1 => {
                                        *p = p.with_copy();
                                    }
                                    _ => lost += 1,
                                },
                                Fate::Dropped(reason) => late.push(Rejected { packet: e.packet, reason }),
                            });
                        }
                        proptest::prop_assert_eq!(fast.dequeue(t), ready.pop_front());
                    }
                }
                fast.take_late_drops(&mut |r| late_fast.push((r.packet, r.reason)));
                late_ref.extend(late.drain(..).map(|r| (r.packet, r.reason)));
                proptest::prop_assert_eq!(&late_fast, &late_ref);
                proptest::prop_assert_eq!(fast.pipe().counters(), reference.counters());
                proptest::prop_assert_eq!(fast.queued() as u64, reference.held() + ready.len() as u64);
                proptest::prop_assert_eq!(fast.duplicates_not_sent(), lost);
            }
        }
    }
}
