//! One arbiter round, the paper's `do_scan` (\[J\] §3.2, Fig. 5):
//! collect, link, hand-off, recycle. `round(now)` is a function of the
//! time it is given: it reads no clock and never sleeps, so the thread loop
//! ([`super::Arbiter::run`]) and the deterministic driver
//! ([`crate::ManualRuntime`]) step the same code.

use pspat_sched::{Instant, Scheduler};

use super::Arbiter;
use crate::TxBackend;

/// What a round found, and so what its caller should do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Packets were collected or released: run the next round at once.
    Worked,
    /// Packets are held but none can leave before `until`.
    Busy {
        /// The earliest time the next round can release something (without
        /// new input).
        until: Instant,
        /// What holds the packets back.
        waiting_for: WaitingFor,
    },
    /// Nothing is held anywhere: wait for a client.
    Idle,
}

/// Why a [`Outcome::Busy`] round released nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitingFor {
    /// The emulated link is still sending the previous packets
    /// (`until` = the link's `link_idle`). New input cannot leave earlier.
    Link,
    /// A shaping scheduler holds packets that are not yet eligible (`until`
    /// = [`Scheduler::next_eligible`]). New input may be eligible sooner, so
    /// the wait must end on a client's kick.
    Shaper,
    /// A dispatcher's TX mailbox is full (`until` = now).
    Transmitter,
}

/// When a shaper holds packets but names no eligibility time (a
/// work-conserving scheduler never does this), look again after this long.
const UNKNOWN_ELIGIBILITY_NS: u64 = 100_000;

impl<S: Scheduler, B: TxBackend> Arbiter<S, B> {
    /// Runs one round at time `now`.
    pub(crate) fn round(&mut self, now: Instant) -> Outcome {
        self.take_registrations();
        if self.sched.is_empty() {
            // The link was idle since the last round (possibly a long
            // sleep): restart it at `now` so no credit accumulates. With an
            // empty scheduler this only sets `link_idle = now`.
            self.link.release(now, &mut self.sched, |_| {});
        }
        // 1. collect (and release consumed mailbox lines)
        let mut work = self.collect_due(now);
        // 2. link, 3. hand-off, 4. recycle
        work += self.release(now);
        self.stats.rounds += 1;
        if work > 0 {
            self.stats.busy_rounds += 1;
            return Outcome::Worked;
        }
        self.why_nothing_left(now)
    }

    /// Link emulation and hand-off; returns decisions made.
    fn release(&mut self, now: Instant) -> usize {
        if !self.sink.make_room() {
            self.sink.flush(now, &self.rt, &self.clients);
            return 0;
        }
        let released = &mut self.released;
        let n = self
            .link
            .release(now, &mut self.sched, |p| released.push(p)) as usize;
        self.stats.decisions += n as u64;
        self.sink
            .hand_off(&self.released, &mut self.clients, self.rt.write_descs);
        self.released.clear();
        self.sink.flush(now, &self.rt, &self.clients);
        n
    }

    /// A round that did nothing: idle, or busy until when?
    fn why_nothing_left(&self, now: Instant) -> Outcome {
        if self.sink.has_backlog() {
            return Outcome::Busy {
                until: now,
                waiting_for: WaitingFor::Transmitter,
            };
        }
        if self.sched.is_empty() {
            return Outcome::Idle;
        }
        let link_idle = self.link.link_idle();
        if link_idle > now {
            return Outcome::Busy {
                until: link_idle,
                waiting_for: WaitingFor::Link,
            };
        }
        let until = self
            .sched
            .next_eligible(now)
            .filter(|&t| t > now)
            .unwrap_or(now.saturating_add_nanos(UNKNOWN_ELIGIBILITY_NS));
        Outcome::Busy {
            until,
            waiting_for: WaitingFor::Shaper,
        }
    }
}
