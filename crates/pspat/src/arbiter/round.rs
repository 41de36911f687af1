//! One arbiter round, the paper's `do_scan` (\[J\] §3.2, Fig. 5):
//! collect, link, hand-off, recycle. `round(now)` is a function of the
//! time it is given: it reads no clock and never sleeps, so the thread loop
//! ([`super::Arbiter::run`]) and the deterministic driver
//! ([`crate::ManualRuntime`]) step the same code.

use pspat_sched::{DropReason, Instant, Scheduler};

use super::sink::unreachable_client;
use super::Arbiter;
use crate::stats::NREASONS;
use crate::token::DescRef;
use crate::{ShutdownPolicy, TxBackend};

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

/// Consecutive empty dequeues after which [`Arbiter::discard_all`] gives up
/// on a scheduler that names no eligible packet (a buggy shaper); its
/// packets then stay in flight (or, after a fault, are settled by
/// shutdown).
const DISCARD_MAX_MISSES: u32 = 1 << 20;

/// When a drain that began at `since` ends.
fn drain_deadline(since: Instant, deadline: std::time::Duration) -> Instant {
    since.saturating_add_nanos(u64::try_from(deadline.as_nanos()).unwrap_or(u64::MAX))
}

impl<S: Scheduler, B: TxBackend> Arbiter<S, B> {
    /// Runs one round at time `now`, releasing what the link and the
    /// scheduler hold that is due by `release_by` (`now`, or later by the
    /// thread loop's coalescing slack: a release may come that much early).
    pub(crate) fn round(&mut self, now: Instant, release_by: Instant) -> Outcome {
        debug_assert!(release_by >= now);
        self.stamp = now;
        self.restamp = self.on_own_thread && self.sched.counts_from_arrival();
        self.take_registrations();
        if let Some(reason) = self.discard_reason(now) {
            // Failed, or shutdown past its drain deadline: take whatever the
            // mailboxes hold and drop everything, bypassing the link.
            let mut work = self.collect_all();
            work += self.discard_all(now, reason);
            self.sink.flush(now, &self.rt, &self.clients);
            self.stats.rounds += 1;
            if work > 0 {
                self.stats.busy_rounds += 1;
                return Outcome::Worked;
            }
            self.sink.return_all(&self.clients);
            return self.why_nothing_left(now, now);
        }
        if self.sched.is_empty() {
            // The link was idle since the last round (possibly a long
            // sleep): restart it at `now` so no credit accumulates. With an
            // empty scheduler this only sets `link_idle = now`.
            self.link.release(now, &mut self.sched, |_| {});
        }
        // 1. collect (and release consumed mailbox lines)
        let mut work = self.collect_due(now);
        // Packets collected after a later clock read were enqueued at it:
        // the rest of the round runs from there.
        let now = self.stamp;
        let release_by = release_by.max(now);
        // 2. link, 3. hand-off, 4. recycle
        work += self.release(now, release_by);
        self.stats.rounds += 1;
        if work > 0 {
            self.stats.busy_rounds += 1;
            return Outcome::Worked;
        }
        // 4'. nothing more to do: return what recycling kept back for a
        // batch, so no descriptor waits while the arbiter does.
        self.sink.return_all(&self.clients);
        self.why_nothing_left(now, release_by)
    }

    /// Link emulation (of what is due by `release_by`) and hand-off;
    /// returns decisions made.
    fn release(&mut self, now: Instant, release_by: Instant) -> usize {
        if !self.sink.make_room() {
            self.sink.flush(now, &self.rt, &self.clients);
            return 0;
        }
        let released = &mut self.released;
        let n = self
            .link
            .release_by(now, release_by, &mut self.sched, |p| released.push(p))
            as usize;
        self.stats.decisions += n as u64;
        self.sink
            .hand_off(&self.released, &mut self.clients, self.rt.write_descs);
        self.released.clear();
        let late = self.take_late_drops();
        self.sink.flush(now, &self.rt, &self.clients);
        n + late
    }

    /// Counts and recycles the packets the scheduler dropped after it had
    /// accepted them (a pipe's profile loss: [`Scheduler::take_late_drops`]),
    /// each with its own reason, and raises the owner's backpressure flag as
    /// an enqueue drop does; returns how many.
    fn take_late_drops(&mut self) -> usize {
        let (rt, sink, clients) = (&self.rt, &mut self.sink, &mut self.clients);
        let mut n = 0;
        self.sched.take_late_drops(&mut |rej| {
            let r = DescRef::from_token(rej.packet.token);
            rt.drops[r.client as usize * NREASONS + rej.reason.index()].add(1);
            match clients[r.client as usize].as_mut() {
                Some(c) => {
                    c.consumer.set_backpressure();
                    sink.dropped(r, c);
                }
                None => unreachable_client(),
            }
            n += 1;
        });
        n
    }

    /// Whether this round drops instead of releasing, and with which
    /// reason: [`DropReason::Fault`] once the runtime failed,
    /// [`DropReason::Shutdown`] once shutdown began under
    /// [`ShutdownPolicy::Discard`] or its drain deadline passed. Notes when
    /// the arbiter first saw shutdown.
    fn discard_reason(&mut self, now: Instant) -> Option<DropReason> {
        if self.rt.is_failed() {
            return Some(DropReason::Fault);
        }
        if !self.rt.is_closing() {
            return None;
        }
        let since = *self.closed_at.get_or_insert(now);
        match self.rt.cfg.shutdown {
            ShutdownPolicy::Discard => Some(DropReason::Shutdown),
            ShutdownPolicy::Drain { deadline } => {
                (now >= drain_deadline(since, deadline)).then_some(DropReason::Shutdown)
            }
        }
    }

    /// Drops every packet the scheduler holds and the sink's backlog,
    /// counting each against its client with `reason` and recycling its
    /// descriptor; returns how many. A shaper that holds packets not yet
    /// eligible is asked at its next eligibility times (its state is of no
    /// further use), at most a bounded number of times.
    fn discard_all(&mut self, now: Instant, reason: DropReason) -> usize {
        let mut n = self
            .sink
            .discard_backlog(reason, &self.rt, &mut self.clients);
        let mut t = now;
        let mut misses = 0u32;
        while !self.sched.is_empty() && misses < DISCARD_MAX_MISSES {
            let Some(p) = self.sched.dequeue(t) else {
                misses += 1;
                t = self
                    .sched
                    .next_eligible(t)
                    .filter(|&e| e > t)
                    .unwrap_or(t.saturating_add_nanos(UNKNOWN_ELIGIBILITY_NS));
                continue;
            };
            let r = DescRef::from_token(p.token);
            self.rt.drops[r.client as usize * NREASONS + reason.index()].add(1);
            match self.clients[r.client as usize].as_mut() {
                Some(c) => self.sink.dropped(r, c),
                None => unreachable_client(),
            }
            n += 1;
            n += self.take_late_drops();
        }
        n + self.take_late_drops()
    }

    /// A round that did nothing: idle, or busy until when? (Nothing held
    /// was due by `release_by`.)
    fn why_nothing_left(&self, now: Instant, release_by: Instant) -> Outcome {
        if self.sink.has_backlog() {
            return Outcome::Busy {
                until: now,
                waiting_for: WaitingFor::Transmitter,
            };
        }
        if self.sched.is_empty() {
            return Outcome::Idle;
        }
        // During a drain, wake at the deadline at the latest.
        let cap = match (self.closed_at, self.rt.cfg.shutdown) {
            (Some(since), ShutdownPolicy::Drain { deadline }) => drain_deadline(since, deadline),
            _ => Instant::MAX,
        };
        let link_idle = self.link.link_idle();
        if link_idle > release_by {
            return Outcome::Busy {
                until: link_idle.min(cap),
                waiting_for: WaitingFor::Link,
            };
        }
        let until = self
            .sched
            .next_eligible(release_by)
            .filter(|&t| t > release_by)
            .unwrap_or(release_by.saturating_add_nanos(UNKNOWN_ELIGIBILITY_NS))
            .min(cap);
        Outcome::Busy {
            until,
            waiting_for: WaitingFor::Shaper,
        }
    }
}
