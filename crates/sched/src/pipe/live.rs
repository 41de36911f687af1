//! Changing a running pipe's link and delay (a live `pipe N config` on a
//! daemon), between two calls of its owner.
//!
//! # Guarantees
//! * **From the next packet on.** [`Pipe::reconfigure`] first runs the link
//!   up to `now` at the old rate (every packet that started before `now`
//!   keeps its time), then the next packet to start on the link is timed at
//!   the new rate. The transmission in progress keeps its end.
//! * **Nothing moves that already left the link.** Packets in the delay
//!   line keep their exit times; a shorter delay cannot make a later packet
//!   overtake them (the line keeps order unless `reorder` is set), so no
//!   flow is reordered by a change.
//! * **Slots go on.** A change of the slots keeps the current slot's
//!   instant and gives it the new budgets; the next interval is drawn from
//!   the new ones. Packets already in the line keep their slots.
//! * **Nothing is dropped by a change.** Queued packets stay; a smaller
//!   queue limit only refuses later arrivals ([`Pipe::set_queue`]).
//!
//! * **A new seed continues the streams.** [`Pipe::reseed`] gives each
//!   random stream (loss, Gilbert-Elliott, 4-state loss, RED, duplication,
//!   jitter, profile, ...) the position it had, in the new seed's sequence: from the
//!   change on, the pipe draws what a pipe started with the new seed would
//!   draw after as many draws. Replay after a change therefore means: the
//!   same arrivals, the same seed, and the same change made after the same
//!   draws give the same run; the draws before the change are the old
//!   seed's.
//!
//! What cannot change on a running pipe: `reorder` (the delay line's kind).
//! The delay line only grows.
//!
//! # Complexity
//! O(packets the link moves up to `now`) plus, when the delay line grows,
//! one allocation: it is for a control path, not the packet path.

use super::filter::RED_AVG_PKT_SIZE;
use super::slot::SlotGate;
use super::{Pipe, PipeConfig};
use crate::{ConfigError, Instant, Scheduler};

impl<S: Scheduler> Pipe<S> {
    /// Gives the running pipe `config`'s link (`bw`, `burst`, framing), delay,
    /// jitter, profile and a delay line at least `config`'s capacity, at
    /// `now` (module docs). `config.queue` and `config.seed` are not used:
    /// queues change with [`Pipe::set_queue`], the seed with
    /// [`Pipe::reseed`].
    ///
    /// # Errors
    /// A bad configuration, or a change of `reorder`; nothing changes then.
    pub fn reconfigure(&mut self, now: Instant, config: &PipeConfig) -> Result<(), ConfigError> {
        config.validate()?;
        if config.reorder != self.line.reorders() {
            return Err(ConfigError::Invalid {
                what: "pipe reorder".into(),
                reason: "cannot change on a running pipe (the delay line's kind)".into(),
            });
        }
        self.advance_link(now);
        self.link
            .set_rate(config.bw, config.burst_bytes, config.framing);
        self.red_unit_ns = config.bw.map(|r| r.tx_ns(RED_AVG_PKT_SIZE));
        self.delay_ns = config.delay_ns;
        self.jitter = config.jitter;
        // The AR(1) state carries on: a new correlation applies from the
        // next sample.
        self.jitter_correlation = config.jitter_correlation;
        self.netem_reorder = config.netem_reorder;
        self.slot_gate = match (&self.slot_gate, config.slots) {
            (Some(g), Some(s)) => Some(g.changed(s)),
            (None, Some(s)) => Some(SlotGate::new(s)),
            (_, None) => None,
        };
        self.profile = config.profile.clone();
        self.held_limit = config.held_limit;
        self.refresh_paths();
        let need = self.entries_per_packet();
        self.line.grow(config.delay_line_capacity);
        if self.stalled && self.line.free() >= need {
            // Room appeared: the link restarts now.
            self.stalled = false;
            self.link.busy_until = self.link.busy_until.max(now);
        }
        Ok(())
    }
}

impl<S: Scheduler> Pipe<S> {
    /// Continues every random stream from its position in `seed`'s
    /// sequence (module docs; [`super::random::Streams::reseed`]).
    pub fn reseed(&mut self, seed: u64) {
        self.rng.reseed(seed);
    }

    /// The seed the pipe's random streams follow now.
    pub fn seed(&self) -> u64 {
        self.rng.seed()
    }
}

#[cfg(test)]
mod tests {
    use crate::pipe::{Fate, Pipe, PipeConfig, QueueConfig, QueueLimit};
    use crate::rate::Rate;
    use crate::{DropReason, Fifo, FlowId, FlowTable, Instant, Packet};

    fn pipe(bps: u64, delay_ns: u64) -> Pipe<Fifo> {
        let cfg = PipeConfig {
            bw: Some(Rate::checked("bw", bps).unwrap()),
            delay_ns,
            ..PipeConfig::default()
        };
        Pipe::new(
            cfg,
            Fifo::new(FlowTable::uniform(1).unwrap(), 64).unwrap(),
            1,
        )
        .unwrap()
    }

    /// Runs the pipe to empty; returns `(token, exit ns)` in exit order.
    fn drain(p: &mut Pipe<Fifo>) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        while let Some(t) = p.poll_at() {
            p.release(t, &mut |e| {
                assert_eq!(e.fate, Fate::Transmit);
                out.push((e.packet.token, e.at.as_nanos()));
            });
        }
        out
    }

    /// Offers a packet of 1000 bytes with `token` at `at_ns`; it must be taken.
    fn send(p: &mut Pipe<Fifo>, at_ns: u64, token: u64) {
        p.enqueue(
            Instant::from_nanos(at_ns),
            Packet::new(FlowId(0), 1000, token),
        )
        .unwrap();
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn a_new_rate_times_the_next_packet_and_keeps_the_delay_line() {
        // 8 Mbit/s: 1000 B take 1 ms; delay 10 ms.
        let mut p = pipe(8_000_000, 10 * MS);
        for t in 0..4 {
            send(&mut p, 0, t);
        }
        // At 1.5 ms packet 0 left the link (exit 11 ms) and packet 1 is on
        // it (started at 1 ms, ends at 2 ms at the old rate).
        let mut cfg = PipeConfig {
            bw: Some(Rate::checked("bw", 16_000_000u64).unwrap()),
            delay_ns: 10 * MS,
            ..PipeConfig::default()
        };
        p.reconfigure(Instant::from_nanos(1_500_000), &cfg).unwrap();
        assert_eq!(p.rate().unwrap().bps(), 16_000_000);
        // Packets 2 and 3 take 0.5 ms each from 2 ms on.
        assert_eq!(
            drain(&mut p),
            [
                (0, 11 * MS),
                (1, 12 * MS),
                (2, 12 * MS + MS / 2),
                (3, 13 * MS)
            ]
        );
        assert_eq!(p.counters().out_packets, 4);
        assert_eq!(p.held(), 0);
        // Unlimited from now on: a packet takes no time on the link.
        cfg.bw = None;
        p.reconfigure(Instant::from_nanos(20 * MS), &cfg).unwrap();
        send(&mut p, 20 * MS, 9);
        assert_eq!(drain(&mut p), [(9, 30 * MS)]);
    }

    #[test]
    fn a_shorter_delay_never_lets_a_packet_overtake_the_line() {
        let mut p = pipe(8_000_000, 10 * MS);
        for t in 0..3 {
            send(&mut p, 0, t);
        }
        let cfg = PipeConfig {
            bw: Some(Rate::checked("bw", 8_000_000u64).unwrap()),
            delay_ns: 2 * MS,
            ..PipeConfig::default()
        };
        // At 1.5 ms: packets 0 (exit 11 ms) and 1 (exit 12 ms) are in the
        // line; packet 2 ends at 3 ms and would exit at 5 ms, but waits
        // for packet 1: order is kept.
        p.reconfigure(Instant::from_nanos(1_500_000), &cfg).unwrap();
        assert_eq!(drain(&mut p), [(0, 11 * MS), (1, 12 * MS), (2, 12 * MS)]);
        // Later packets see the short delay.
        send(&mut p, 20 * MS, 3);
        assert_eq!(drain(&mut p), [(3, 23 * MS)]);
    }

    #[test]
    fn a_profile_added_or_removed_by_reconfigure_times_the_next_packet() {
        // The pipe decides once per change whether a packet's exit is the
        // link's finish plus the delay: a change must redo the decision.
        let mut p = pipe(8_000_000, 10 * MS);
        send(&mut p, 0, 1);
        assert_eq!(drain(&mut p), [(1, 11 * MS)]);
        // One sample of 5 ms, never lost: the packet holds the link 5 ms
        // longer (1 ms to send, 5 ms of airtime, then 10 ms of delay).
        let mut cfg = PipeConfig {
            bw: Some(Rate::checked("bw", 8_000_000u64).unwrap()),
            delay_ns: 10 * MS,
            profile: Some(crate::pipe::DelayProfile::new(vec![5 * MS], 1.0).unwrap()),
            ..PipeConfig::default()
        };
        p.reconfigure(Instant::from_nanos(20 * MS), &cfg).unwrap();
        send(&mut p, 20 * MS, 2);
        assert_eq!(drain(&mut p), [(2, 36 * MS)]);
        cfg.profile = None;
        p.reconfigure(Instant::from_nanos(40 * MS), &cfg).unwrap();
        send(&mut p, 40 * MS, 3);
        assert_eq!(drain(&mut p), [(3, 51 * MS)]);
    }

    #[test]
    fn a_queue_limit_set_live_is_the_one_the_next_arrival_meets() {
        // With one configuration for every queue, a slot limit and no
        // filter, the pipe checks the limit without looking the
        // configuration up: each change of the queues must redo that.
        let limited = |slots| QueueConfig {
            limit: QueueLimit::Slots(slots),
            ..QueueConfig::default()
        };
        let pipe_of = |flows, slots| {
            let cfg = PipeConfig {
                bw: Some(Rate::checked("bw", 8_000_000u64).unwrap()),
                queue: limited(slots),
                ..PipeConfig::default()
            };
            let fifo = Fifo::new(FlowTable::uniform(flows).unwrap(), 64).unwrap();
            Pipe::new(cfg, fifo, flows).unwrap()
        };
        let mut token = 0;
        let mut offer = |p: &mut Pipe<Fifo>, flow: u32| {
            token += 1;
            p.enqueue(Instant::ZERO, Packet::new(FlowId(flow), 1000, token))
                .map_err(|r| r.reason)
        };
        // The first packet goes onto the link at the second's arrival;
        // two then wait, and a third finds the queue full.
        let mut p = pipe_of(1, 2);
        for _ in 0..3 {
            assert_eq!(offer(&mut p, 0), Ok(()));
        }
        assert_eq!(offer(&mut p, 0), Err(DropReason::FlowLimit));
        // The only queue to three slots: its configuration, the only one,
        // replaced in place.
        p.set_queue(FlowId(0), limited(3)).unwrap();
        assert_eq!(offer(&mut p, 0), Ok(()));
        assert_eq!(offer(&mut p, 0), Err(DropReason::FlowLimit));
        // Then to one slot: met at once (three are waiting).
        p.set_queue(FlowId(0), limited(1)).unwrap();
        assert_eq!(offer(&mut p, 0), Err(DropReason::FlowLimit));
        // Of two queues, queue 1 alone to one slot: two configurations,
        // each met.
        let mut p = pipe_of(2, 2);
        p.set_queue(FlowId(1), limited(1)).unwrap();
        assert_eq!(offer(&mut p, 1), Ok(()));
        assert_eq!(offer(&mut p, 1), Ok(()));
        assert_eq!(offer(&mut p, 1), Err(DropReason::FlowLimit));
        assert_eq!(offer(&mut p, 0), Ok(()));
        assert_eq!(offer(&mut p, 0), Ok(()));
        assert_eq!(offer(&mut p, 0), Err(DropReason::FlowLimit));
    }

    #[test]
    fn reorder_cannot_change_and_nothing_changes_then() {
        let mut p = pipe(8_000_000, MS);
        let cfg = PipeConfig {
            reorder: true,
            delay_ns: 5 * MS,
            ..PipeConfig::default()
        };
        assert!(p.reconfigure(Instant::ZERO, &cfg).is_err());
        assert_eq!(p.rate().unwrap().bps(), 8_000_000);
        send(&mut p, 0, 1);
        assert_eq!(drain(&mut p), [(1, 2 * MS)]);
    }

    #[test]
    fn a_grown_delay_line_restarts_a_stalled_link() {
        // A line of 2 entries, 10 ms delay: the third packet stalls.
        let cfg = PipeConfig {
            bw: Some(Rate::checked("bw", 8_000_000u64).unwrap()),
            delay_ns: 10 * MS,
            delay_line_capacity: 2,
            ..PipeConfig::default()
        };
        let mut p = Pipe::new(
            cfg.clone(),
            Fifo::new(FlowTable::uniform(1).unwrap(), 64).unwrap(),
            1,
        )
        .unwrap();
        for t in 0..3 {
            send(&mut p, 0, t);
        }
        p.release(Instant::from_nanos(5 * MS), &mut |_| {});
        assert_eq!(p.counters().link_stalls, 1);
        let grown = PipeConfig {
            delay_line_capacity: 64,
            ..cfg
        };
        p.reconfigure(Instant::from_nanos(5 * MS), &grown).unwrap();
        // Packet 2 starts at 5 ms instead of waiting for packet 0's exit.
        assert_eq!(drain(&mut p), [(0, 11 * MS), (1, 12 * MS), (2, 16 * MS)]);
    }
}
