//! CoDel, the controlled-delay AQM, on a pipe's queue (dummynet's `codel`
//! on a flowset, FreeBSD 10.3 and later; RFC 8289).
//!
//! CoDel watches how long each packet waited in its queue (its *sojourn
//! time*: from its enqueue to the moment it starts on the link) and drops
//! packets as they leave the queue once that time has stayed above
//! `target` for at least `interval`. While it keeps dropping, the gap
//! between drops shrinks as `interval / √count`, so that a TCP sender's
//! rate, which falls as `1/√p`, is pushed down steadily until the queue
//! delay falls back under `target`; then it stops.
//!
//! # The state machine (RFC 8289, section 5; evaluated per packet)
//! For each packet the scheduler hands out of the queue, at its start on
//! the link `now`, with sojourn `s` and `backlog` bytes left in the queue:
//! * **Above target?** `s < target`, or `backlog` at most the largest
//!   packet seen (less than a packet left: the queue cannot shrink more),
//!   resets `first_above`; otherwise the first such packet sets
//!   `first_above = now + interval`, and the packet is *droppable* once
//!   `now ≥ first_above`.
//! * **Dropping.** A packet that is not droppable ends the dropping state.
//!   One that is, at or after `drop_next`, is dropped (or marked: below),
//!   `count` grows by one and `drop_next ← drop_next + interval/√count`.
//! * **Not dropping.** A droppable packet is dropped (or marked), and the
//!   dropping state begins: `count` restarts at 1, or, when the last
//!   dropping state ended less than 16 intervals ago and had dropped more
//!   than one packet since the one before, at what that state added
//!   (`count − lastcount`), so a queue that falls back into a standing
//!   delay is controlled at about the rate that controlled it before;
//!   `drop_next ← now + interval/√count`.
//!
//! With `ecn` a packet that would be dropped and is ECN-capable
//! ([`crate::Packet::ECT_BIT`]) is sent marked Congestion Experienced
//! instead ([`crate::Packet::CE_BIT`]), counting as a drop for the state
//! machine, as Linux's `codel_dequeue` and FreeBSD's `codel_dequeue` do.
//!
//! # Deviations
//! * RFC 8289's dequeue drops within one call until the queue's head is
//!   no longer due, taking the next packet *of the same queue*. A pipe asks
//!   its scheduler for the next packet, which may belong to another queue:
//!   so one packet of a queue is decided at a time, and the queue's next
//!   packet is decided when the scheduler next serves the queue, with the
//!   same state. A dropped packet has used its turn in the scheduler (its
//!   flow's share is charged for it, as for a packet sent).
//! * Times are in ns, the control law in `f64` (`interval / √count`,
//!   correctly rounded, so the same on every machine), not Linux's Q0.32
//!   Newton step.
//! * A dropped packet does not occupy the link: the link starts the next
//!   packet at the same instant.
//!
//! # Cost and memory
//! O(1) per packet. A queue's state is 32 bytes, and each packet waiting
//! in a queue of the pipe needs its enqueue time: both are kept in side
//! tables a pipe allocates only once one of its queues configures CoDel
//! (then for every queue: 32 B of state and 12 B of the time store's
//! record a queue; and the store's arena, laid out as a scheduler's packet
//! store, [`crate::PacketQueues`]: about 18 B a packet of the scheduler's capacity
//! plus up to 108 B for each queue that may hold packets, at most as many
//! queues as that capacity).

use crate::queue::PacketQueues;
use crate::{ConfigError, FlowId, Instant, Packet};

/// CoDel's parameters (`codel [target T] [interval T] [ecn | noecn]`).
///
/// # Examples
/// ```
/// use pspat_sched::pipe::Codel;
/// let c = Codel::default();
/// assert_eq!((c.target_ns, c.interval_ns, c.ecn), (5_000_000, 100_000_000, false));
/// assert!(c.validate().is_ok());
/// assert!(Codel { target_ns: 0, ..c }.validate().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Codel {
    /// The sojourn time CoDel tolerates as a standing queue, ns (5 ms by
    /// default).
    pub target_ns: u64,
    /// How long the sojourn must stay above `target` before the first
    /// drop, and the base of the gap between drops, ns (100 ms by
    /// default: of the order of the round-trip times through the link).
    pub interval_ns: u64,
    /// Mark ECN-capable packets instead of dropping them (off by default,
    /// as dummynet's `codel`).
    pub ecn: bool,
}

impl Default for Codel {
    fn default() -> Self {
        Codel {
            target_ns: Self::DEFAULT_TARGET_NS,
            interval_ns: Self::DEFAULT_INTERVAL_NS,
            ecn: false,
        }
    }
}

impl Codel {
    /// dummynet's and RFC 8289's default target, 5 ms.
    pub const DEFAULT_TARGET_NS: u64 = 5_000_000;
    /// dummynet's and RFC 8289's default interval, 100 ms.
    pub const DEFAULT_INTERVAL_NS: u64 = 100_000_000;
    /// The longest target or interval accepted: one hour.
    pub const MAX_NS: u64 = 3_600_000_000_000;

    /// Checks the ranges: `target` and `interval` from 1 ns to an hour.
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] naming the parameter.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_range("CoDel target (ns)", self.target_ns, 1..=Self::MAX_NS)?;
        ConfigError::check_range("CoDel interval (ns)", self.interval_ns, 1..=Self::MAX_NS)
    }

    /// The control law: the next drop `interval / √count` after `t`.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::{pipe::Codel, Instant};
    /// let c = Codel::default();
    /// let t = Instant::from_nanos(1_000);
    /// assert_eq!(c.next_drop(t, 1), Instant::from_nanos(100_001_000));
    /// assert_eq!(c.next_drop(t, 4), Instant::from_nanos(50_001_000));
    /// ```
    pub fn next_drop(&self, t: Instant, count: u32) -> Instant {
        let gap = self.interval_ns as f64 / f64::from(count.max(1)).sqrt();
        // A gap of at most an hour: the conversion cannot overflow.
        t.saturating_add_nanos(gap as u64)
    }
}

/// What CoDel decides for a packet leaving its queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It goes on to the link.
    Send,
    /// It goes on to the link marked Congestion Experienced.
    Mark,
    /// It is dropped.
    Drop,
}

/// A queue's CoDel state (32 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodelState {
    /// When the sojourn time, above target since, may first lead to a
    /// drop (while `above`).
    first_above: Instant,
    /// When the next drop is due in the dropping state.
    drop_next: Instant,
    /// Drops (and marks) since the dropping state began.
    count: u32,
    /// `count` when the last dropping state began.
    lastcount: u32,
    /// Packets at the queue's head that were queued before the pipe kept
    /// enqueue times (CoDel turned on while they waited), or handed over
    /// from a pipe that kept none: they pass undecided, as their sojourn
    /// is not known.
    untimed: u32,
    /// The largest packet the queue has seen, bytes.
    max_packet: u16,
    /// In the dropping state.
    dropping: bool,
    /// The sojourn time is above target (`first_above` holds).
    above: bool,
}

const _: () = assert!(std::mem::size_of::<CodelState>() == 32);

impl CodelState {
    /// Decides the packet of `len` bytes, ECN-capable if `ect`, leaving the
    /// queue at `now` after a sojourn of `sojourn_ns`, with `backlog` bytes
    /// still queued behind it (see the module docs).
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::codel::{CodelState, Verdict};
    /// use pspat_sched::{pipe::Codel, Instant};
    /// let (c, mut s) = (Codel::default(), CodelState::default());
    /// let at = |ms: u64| Instant::from_nanos(ms * 1_000_000);
    /// // 10 ms of sojourn, 10 packets of 1500 bytes behind: above target.
    /// assert_eq!(s.decide(&c, at(0), 10_000_000, 1500, false, 15_000), Verdict::Send);
    /// // Still above one interval later: the first drop.
    /// assert_eq!(s.decide(&c, at(100), 10_000_000, 1500, false, 15_000), Verdict::Drop);
    /// assert_eq!(s.count(), 1);
    /// // Below target: the dropping state ends.
    /// assert_eq!(s.decide(&c, at(101), 1_000_000, 1500, false, 15_000), Verdict::Send);
    /// assert!(!s.is_dropping());
    /// ```
    pub fn decide(
        &mut self,
        codel: &Codel,
        now: Instant,
        sojourn_ns: u64,
        len: u32,
        ect: bool,
        backlog: u64,
    ) -> Verdict {
        let len16 = u16::try_from(len).unwrap_or(u16::MAX);
        self.max_packet = self.max_packet.max(len16);
        let droppable = self.droppable(codel, now, sojourn_ns, backlog);
        let act = if codel.ecn && ect {
            Verdict::Mark
        } else {
            Verdict::Drop
        };
        if self.dropping {
            if !droppable {
                self.dropping = false;
                return Verdict::Send;
            }
            if now >= self.drop_next {
                self.count = self.count.saturating_add(1);
                self.drop_next = codel.next_drop(self.drop_next, self.count);
                return act;
            }
            return Verdict::Send;
        }
        if !droppable {
            return Verdict::Send;
        }
        self.dropping = true;
        // A recent dropping state: start near the rate that controlled it.
        let delta = self.count.wrapping_sub(self.lastcount);
        let recent =
            now.saturating_nanos_since(self.drop_next) < codel.interval_ns.saturating_mul(16);
        self.count = if self.count > self.lastcount && delta > 1 && recent {
            delta
        } else {
            1
        };
        self.lastcount = self.count;
        self.drop_next = codel.next_drop(now, self.count);
        act
    }

    fn droppable(&mut self, codel: &Codel, now: Instant, sojourn_ns: u64, backlog: u64) -> bool {
        if sojourn_ns < codel.target_ns || backlog <= u64::from(self.max_packet) {
            self.above = false;
            return false;
        }
        if !self.above {
            self.above = true;
            self.first_above = now.saturating_add_nanos(codel.interval_ns);
            return false;
        }
        now >= self.first_above
    }

    /// Drops and marks since the current (or last) dropping state began.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Whether the queue is in the dropping state.
    pub fn is_dropping(&self) -> bool {
        self.dropping
    }

    /// Takes one packet queued before enqueue times were kept; false when
    /// there is none (the packet at the head has its time).
    pub(crate) fn take_untimed(&mut self) -> bool {
        if self.untimed == 0 {
            return false;
        }
        self.untimed -= 1;
        true
    }

    /// Packets at the queue's head queued before times were kept (or
    /// handed over from a pipe that kept none).
    pub(crate) fn untimed(&self) -> u32 {
        self.untimed
    }

    /// One more packet at the queue's head without an enqueue time (handed
    /// over from a pipe that kept none, its queue holding no timed packet).
    pub(crate) fn add_untimed(&mut self) {
        self.untimed = self.untimed.saturating_add(1);
    }

    /// This queue's state going on from `from`, the state of the queue it
    /// continues in a rebuilt link (dropping state, count, due times,
    /// largest packet), but for its untimed packets, which are this
    /// queue's own.
    pub(crate) fn continuing(&self, from: &CodelState) -> CodelState {
        CodelState {
            untimed: self.untimed,
            ..*from
        }
    }

    pub(crate) fn set_untimed(&mut self, n: u32) {
        self.untimed = n;
    }
}

/// The enqueue times of the packets each queue of a pipe holds, oldest
/// first (a queue's packets leave its scheduler in order): one FIFO of
/// times per queue over one preallocated arena
/// ([`crate::queue::PacketQueues`], whose packets carry a time in their
/// token here). O(1) per push and pop; nothing allocates after
/// [`EnqueueTimes::new`].
pub(crate) struct EnqueueTimes {
    fifos: PacketQueues,
}

impl std::fmt::Debug for EnqueueTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnqueueTimes")
            .field("held", &self.fifos.total())
            .field("capacity", &self.fifos.capacity())
            .finish()
    }
}

impl EnqueueTimes {
    /// Room for `capacity` times over `queues` queues.
    pub(crate) fn new(queues: usize, capacity: usize) -> Result<Self, ConfigError> {
        Ok(EnqueueTimes {
            fifos: PacketQueues::new(queues, capacity, None)?,
        })
    }

    /// Records that queue `q` took a packet at `at`; false when the store
    /// is full.
    #[inline]
    pub(crate) fn push(&mut self, q: usize, at: Instant) -> bool {
        let q32 = u32::try_from(q).unwrap_or(u32::MAX);
        self.fifos
            .push(q, Packet::new(FlowId(q32), 1, at.as_nanos()))
            .is_ok()
    }

    /// The enqueue time of queue `q`'s oldest packet, taken.
    #[inline]
    pub(crate) fn pop(&mut self, q: usize) -> Option<Instant> {
        self.fifos.pop(q).map(|p| Instant::from_nanos(p.token))
    }

    /// Forgets queue `q`'s times (its packets left without the link).
    pub(crate) fn clear(&mut self, q: usize) {
        while self.fifos.pop(q).is_some() {}
    }

    /// Times held for queue `q`.
    pub(crate) fn len(&self, q: usize) -> usize {
        self.fifos.len(q)
    }

    /// Whether another time fits.
    pub(crate) fn is_full(&self) -> bool {
        self.fifos.is_full()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Instant {
        Instant::from_nanos(v * 1_000_000)
    }

    #[test]
    fn a_short_queue_is_never_dropped_from() {
        let (c, mut s) = (Codel::default(), CodelState::default());
        // A long sojourn but at most one packet behind: never droppable.
        for t in 0..1_000 {
            assert_eq!(
                s.decide(&c, ms(t), 50_000_000, 1500, false, 1500),
                Verdict::Send
            );
        }
        assert!(!s.is_dropping());
    }

    #[test]
    fn drops_come_closer_as_the_square_root_of_their_count() {
        let (c, mut s) = (Codel::default(), CodelState::default());
        let mut drops = Vec::new();
        // One packet a millisecond, always 20 ms of sojourn, a long queue.
        for t in 0..2_000 {
            if s.decide(&c, ms(t), 20_000_000, 1500, false, 60_000) == Verdict::Drop {
                drops.push(t);
            }
        }
        // The first drop one interval after the first packet above target.
        assert_eq!(drops[0], 100);
        // Then the n-th gap is interval/√n, give or take the millisecond
        // between packets (the due times add up exactly; the drops fall on
        // the first packet at or after each).
        for (n, w) in drops.windows(2).enumerate().take(20) {
            let want = 100.0 / ((n + 1) as f64).sqrt();
            let gap = (w[1] - w[0]) as f64;
            assert!(
                (gap - want).abs() < 1.0,
                "gap {n}: {gap} ms, want {want:.2}"
            );
        }
        assert!(s.count() as usize == drops.len());
    }

    #[test]
    fn marks_ect_packets_and_drops_the_rest() {
        let c = Codel {
            ecn: true,
            ..Codel::default()
        };
        let mut s = CodelState::default();
        let mut seen = (0, 0);
        for t in 0..1_000 {
            match s.decide(&c, ms(t), 20_000_000, 1500, t % 2 == 0, 60_000) {
                Verdict::Mark => {
                    assert_eq!(t % 2, 0, "only ECT packets are marked");
                    seen.0 += 1;
                }
                Verdict::Drop => {
                    assert_eq!(t % 2, 1, "ECT packets are never dropped");
                    seen.1 += 1;
                }
                Verdict::Send => {}
            }
        }
        assert!(seen.0 > 0 && seen.1 > 0, "{seen:?}");
        assert_eq!(s.count(), seen.0 + seen.1);
    }

    #[test]
    fn a_return_soon_after_restarts_near_the_last_rate() {
        let (c, mut s) = (Codel::default(), CodelState::default());
        for t in 0..1_000 {
            s.decide(&c, ms(t), 20_000_000, 1500, false, 60_000);
        }
        let before = s.count();
        assert!(before > 2);
        // Below target for a moment, then above again.
        s.decide(&c, ms(1_000), 1_000_000, 1500, false, 60_000);
        assert!(!s.is_dropping());
        let mut t = 1_001;
        while !s.is_dropping() {
            s.decide(&c, ms(t), 20_000_000, 1500, false, 60_000);
            t += 1;
        }
        // Restarted at what the last state added (all of it: it began at 1).
        assert_eq!(s.count(), before - 1);
        // Long after, it restarts from 1.
        let mut s2 = s;
        s2.decide(&c, ms(t), 1_000_000, 1500, false, 60_000);
        let mut t2 = t + 10_000;
        while !s2.is_dropping() {
            s2.decide(&c, ms(t2), 20_000_000, 1500, false, 60_000);
            t2 += 1;
        }
        assert_eq!(s2.count(), 1);
    }

    #[test]
    fn the_time_store_keeps_each_queue_in_order() {
        let mut times = EnqueueTimes::new(3, 8).unwrap();
        for (q, t) in [(0, 1), (1, 2), (0, 3), (2, 4), (0, 5)] {
            assert!(times.push(q, Instant::from_nanos(t)));
        }
        assert_eq!(times.pop(0), Some(Instant::from_nanos(1)));
        assert_eq!(times.pop(0), Some(Instant::from_nanos(3)));
        times.clear(0);
        assert_eq!(times.pop(0), None);
        assert_eq!(times.pop(1), Some(Instant::from_nanos(2)));
        assert_eq!(times.pop(2), Some(Instant::from_nanos(4)));
        for t in 0..8 {
            assert!(times.push(1, Instant::from_nanos(t)));
        }
        assert!(times.is_full() && !times.push(2, Instant::from_nanos(9)));
    }
}
