//! The arbiter: one thread per link that decides (\[J\] §3.2).
//!
//! [`Arbiter::round`] (in `round`) is the paper's `do_scan` as a function of
//! `now`: collect (`collect`), link emulation, hand-off and recycling
//! (`sink`). [`Arbiter::run`] is the thread around it: it owns the clock
//! (one read per round, and for a scheduler that counts from arrival one per
//! chunk of packets collected, which the chunk is enqueued at and the round
//! continues from) and the spin/park/sleep policy:
//!
//! * [`Outcome::Worked`]: the next round at once.
//! * [`Outcome::Busy`] waiting for the link: sleep until `link_idle` (spin
//!   when that is under 50 µs), in naps of at most 50 ms so a shutdown or a
//!   fault is seen soon behind a slow link. New input cannot leave earlier,
//!   so no kick is needed and clients do not pay for one.
//! * [`Outcome::Busy`] waiting for a shaper: sleep until the scheduler's
//!   `next_eligible` **or a client's kick**, whichever comes first (new input
//!   may be eligible sooner), through the parker's flag-fence-rescan
//!   protocol (`pspat_mailbox::parker`). Spin only when that is under 2 µs:
//!   a shaper keeps its own schedule, so a late wake-up never lowers its rate.
//! * [`Outcome::Idle`]: spin for T_w ([`crate::RuntimeConfig::spin_ns`];
//!   yielding the core instead with [`crate::RuntimeConfig::spin_yields`]),
//!   then park until a kick (\[E\] §3.1, \[J\] §3.5), with a safety
//!   timeout ([`crate::RuntimeConfig::idle_safety_wake_ns`], 100 ms by
//!   default) whose use with work found is counted in
//!   [`crate::ArbiterStats::unrequested_wakeups_with_work`].
//!
//! Both sleeps are stretched by wake-up coalescing
//! ([`crate::RuntimeConfig::wake_batch`], default 4, within at most 1 ms):
//! the arbiter keeps the mean gap between released packets (an EWMA), lets
//! each round release what falls due within a slack of `(wake_batch − 1)/2`
//! such gaps after its clock read, and sleeps the slack past the first due
//! time, so about `wake_batch` packets leave per wake-up, each within the
//! slack of its due time, before or after. Release times are computed (the
//! link's `link_idle`, the shaper's departure times), so releasing a few
//! together neither raises nor lowers the rate. So a shaped link costs a
//! wake-up per few release times, not a spinning core.
//!
//! # Complexity
//! O(1) per packet plus the scheduler's cost; O(lists + in-service
//! mailboxes + bitmap words) per round. No allocation after start-up, no
//! `dyn` call per packet.

mod collect;
pub(crate) mod placement;
mod round;
pub(crate) mod sink;

use std::sync::Arc;
use std::time::Duration;

use pspat_mailbox::Wake;
use pspat_sched::{Instant, LinkEmulator, Packet, Scheduler};

pub(crate) use collect::{ArbClient, ListState};
pub use round::{Outcome, WaitingFor};
pub(crate) use sink::Sink;

use crate::shared::Shared;
use crate::sync::Ordering;
use crate::{ArbiterStats, TxBackend};

/// Link waits shorter than this are spun, longer ones slept: the emulated
/// link releases each packet at its time to within the wake-up latency.
const SPIN_BELOW_NS: u64 = 50_000;
/// Shaper waits shorter than this are spun. A shaper's eligibility times
/// come from its own schedule (earliest departure times), not from when it
/// was asked, so a late wake-up delays a packet but never lowers the rate:
/// sleeping through most of the wait costs no accuracy over a run.
const SHAPER_SPIN_BELOW_NS: u64 = 2_000;
/// Longest single sleep waiting for the link.
const LINK_SLEEP_MAX: Duration = Duration::from_millis(50);

/// Wake-up coalescing's slack for a mean gap of `gap_ns` between released
/// packets: half of `wake_batch − 1` gaps, at most `max_delay_ns`. A round
/// releases what is due up to this long after its clock read, and a sleep
/// lasts this long past the next due time, so a wake-up comes about every
/// `wake_batch` gaps (every `2 × max_delay_ns` plus a gap at the bound) and
/// each packet leaves within the slack of its due time, before or after.
pub(crate) fn coalescing_slack(gap_ns: u64, wake_batch: u32, max_delay_ns: u64) -> u64 {
    (gap_ns.saturating_mul(u64::from(wake_batch.saturating_sub(1))) / 2).min(max_delay_ns)
}

pub(crate) struct Arbiter<S, B> {
    pub(crate) rt: Arc<Shared>,
    pub(crate) sched: S,
    pub(crate) link: LinkEmulator,
    pub(crate) clients: Vec<Option<ArbClient>>,
    pub(crate) lists: Vec<ListState>,
    pub(crate) sink: Sink<B>,
    released: Vec<Packet>,
    /// Ids announced before their registration was taken (one round's worth).
    late: Vec<u32>,
    pub(crate) retired: usize,
    pub(crate) registered: usize,
    pub(crate) stats: ArbiterStats,
    /// When a round first saw shutdown begin (start of the drain deadline).
    pub(crate) closed_at: Option<Instant>,
    /// Mean gap between released packets, ns (0 until measured): the
    /// release rate that wake-up coalescing scales with.
    release_gap_ns: u64,
    /// The time collected packets are enqueued at: the round's `now`, and
    /// with `restamp` the clock read after each chunk a mailbox drain took,
    /// so that no packet's arrival is stamped before its submission (a
    /// client may submit after the round's clock read, and a pipe's delay
    /// counts from the stamp). Never decreases in a round; the round then
    /// releases at it.
    stamp: Instant,
    /// Set by the arbiter's own thread ([`Arbiter::run`]); a manual runtime
    /// stamps with the time its caller passes.
    on_own_thread: bool,
    /// This round stamps chunks from the clock: on its own thread, with a
    /// scheduler that [counts from arrival](Scheduler::counts_from_arrival)
    /// (the others pay no clock read a chunk).
    restamp: bool,
}

impl<S: Scheduler, B: TxBackend> Arbiter<S, B> {
    pub(crate) fn new(rt: Arc<Shared>, sched: S, link: LinkEmulator, sink: Sink<B>) -> Self {
        let cfg = &rt.cfg;
        let lists = (0..rt.lists.len())
            .map(|_| ListState::new(cfg.max_clients))
            .collect();
        let mut clients = Vec::with_capacity(cfg.max_clients);
        clients.resize_with(cfg.max_clients, || None);
        Arbiter {
            sched,
            link,
            clients,
            lists,
            sink,
            released: Vec::with_capacity(cfg.arb_batch as usize),
            late: Vec::with_capacity(cfg.max_clients),
            retired: 0,
            registered: 0,
            stats: ArbiterStats::default(),
            closed_at: None,
            release_gap_ns: 0,
            stamp: Instant::ZERO,
            on_own_thread: false,
            restamp: false,
            rt,
        }
    }

    /// The arbiter thread: rounds until shutdown, then hands back its
    /// backend (T = 0) and counters.
    pub(crate) fn run(mut self) -> (Option<B>, ArbiterStats) {
        self.rt.arbiter.bind_current_thread();
        self.on_own_thread = true;
        let spin_ns = self.rt.cfg.spin_ns;
        let mut idle_since: Option<Instant> = None;
        let mut unkicked = false;
        // Start of the previous round if it did work: its duration ends at
        // this round's clock read (one clock read per round, not two).
        let mut busy_since: Option<Instant> = None;
        // The latest horizon a round released up to: the next is never
        // earlier, so the scheduler is asked at non-decreasing times even
        // when the slack shrinks.
        let mut horizon = Instant::ZERO;
        // Time and decision count of the last round that released packets.
        let mut last_release: Option<(Instant, u64)> = None;
        loop {
            let now = self.rt.clock.now();
            if let Some(start) = busy_since.take() {
                self.stats.busy_round_ns += now.saturating_nanos_since(start);
            }
            let slack = self.coalescing_slack();
            horizon = horizon.max(now.saturating_add_nanos(slack));
            let outcome = self.round(now, horizon);
            if outcome != Outcome::Idle {
                idle_since = None;
                self.observe_releases(now, &mut last_release);
            } else {
                last_release = None;
            }
            match outcome {
                Outcome::Worked => {
                    busy_since = Some(now);
                    if std::mem::take(&mut unkicked) {
                        self.stats.unrequested_wakeups_with_work += 1;
                    }
                    if self.stats.busy_rounds.is_multiple_of(64) {
                        self.publish_stats();
                    }
                }
                Outcome::Busy { until, waiting_for } => {
                    unkicked = false;
                    let wait = until.saturating_nanos_since(now);
                    let spin_below = match waiting_for {
                        WaitingFor::Shaper => SHAPER_SPIN_BELOW_NS,
                        _ => SPIN_BELOW_NS,
                    };
                    if wait < spin_below || waiting_for == WaitingFor::Transmitter {
                        std::hint::spin_loop();
                    } else if waiting_for == WaitingFor::Link {
                        // Capped so that a shutdown or a fault is noticed
                        // soon even behind a very slow link.
                        let nap = wait.saturating_add(slack).saturating_sub(SPIN_BELOW_NS / 2);
                        std::thread::sleep(Duration::from_nanos(nap).min(LINK_SLEEP_MAX));
                    } else {
                        self.sleep(Duration::from_nanos(wait.saturating_add(slack)), false);
                    }
                }
                Outcome::Idle => {
                    unkicked = false;
                    if self.can_exit(now) {
                        break;
                    }
                    let since = *idle_since.get_or_insert(now);
                    if now.saturating_nanos_since(since) < spin_ns {
                        if self.rt.cfg.spin_yields {
                            std::thread::yield_now();
                        } else {
                            std::hint::spin_loop();
                        }
                        continue;
                    }
                    let parked = std::time::Instant::now();
                    let safety = Duration::from_nanos(self.rt.cfg.idle_safety_wake_ns);
                    if let Some(wake) = self.sleep(safety, true) {
                        // Nobody kicked for the whole safety period (an early
                        // return is a stale unpark token or a spurious
                        // wake-up, not a lost wake-up).
                        unkicked = wake == Wake::TimedOut && parked.elapsed() >= safety;
                    }
                    idle_since = None;
                }
            }
        }
        self.sink
            .flush(self.rt.clock.now(), &self.rt, &self.clients);
        self.sink.return_all(&self.clients);
        // Release: pairs with the dispatchers' Acquire load; every TX push
        // happens before it.
        self.rt.arbiter_done.store(true, Ordering::Release);
        for d in self.rt.dispatchers.iter() {
            d.kick_force();
        }
        self.publish_stats();
        (self.sink.into_backend(), self.stats)
    }

    /// Sleeps until kicked or `timeout`, unless the pre-sleep rescan finds
    /// input, or `closing` matters (`exit_on_close`: the arbiter is idle and
    /// could exit) and shutdown began; then returns `None` at once.
    fn sleep(&mut self, timeout: Duration, exit_on_close: bool) -> Option<Wake> {
        let parker = &self.rt.arbiter;
        parker.prepare_sleep();
        // SeqCst load after the fence: a `close` before our fence is seen.
        let closing = exit_on_close && self.rt.closing.load(Ordering::SeqCst);
        if closing || self.has_pending_input() {
            parker.cancel_sleep();
            return None;
        }
        self.publish_stats();
        self.stats.sleeps += 1;
        Some(self.rt.arbiter.sleep(timeout))
    }

    /// The coalescing slack, ns: how far a release may move from its due
    /// time, either way ([`coalescing_slack`] of the mean release gap).
    fn coalescing_slack(&self) -> u64 {
        let cfg = &self.rt.cfg;
        coalescing_slack(self.release_gap_ns, cfg.wake_batch, cfg.max_wake_delay_ns)
    }

    /// Updates the mean gap between released packets (an EWMA with weight
    /// 1/8 over rounds that released something; idle periods restart it).
    fn observe_releases(&mut self, now: Instant, last: &mut Option<(Instant, u64)>) {
        let decisions = self.stats.decisions;
        if let Some((t, d)) = *last {
            if decisions > d {
                let sample = now.saturating_nanos_since(t) / (decisions - d);
                self.release_gap_ns = if self.release_gap_ns == 0 {
                    sample
                } else {
                    (7 * self.release_gap_ns + sample) / 8
                };
                *last = Some((now, decisions));
            }
        } else {
            *last = Some((now, decisions));
        }
    }

    pub(crate) fn publish_stats(&self) {
        self.rt.arb_stats.publish(&self.stats);
    }

    /// Shutdown began, every client is gone and everything was sent.
    pub(crate) fn can_exit(&mut self, now: Instant) -> bool {
        if !self.rt.is_closing() {
            return false;
        }
        // SeqCst: pairs with the clients' SeqCst decrement, made after their
        // final announcement, so every mailbox is visible once this is 0.
        if self.rt.live_clients.load(Ordering::SeqCst) != 0 {
            return false;
        }
        self.take_registrations();
        if self.retired == self.registered && self.sched.is_empty() && !self.sink.has_backlog() {
            return true;
        }
        // Every client is gone: read every list now, gate or not, so the
        // remaining (abandoned) mailboxes are drained and retired.
        self.stamp = self.stamp.max(now);
        self.collect_all();
        false
    }
}

#[cfg(test)]
mod tests {
    use super::coalescing_slack;

    #[test]
    fn the_slack_is_half_the_batch_s_gaps_up_to_the_bound() {
        // 480 us gaps (60 bytes at 1 Mbit/s), batch 4: 720 us, under 1 ms.
        assert_eq!(coalescing_slack(480_000, 4, 1_000_000), 720_000);
        // 5 us gaps: 7.5 us.
        assert_eq!(coalescing_slack(5_000, 4, 1_000_000), 7_500);
        // 1 ms gaps: 1.5 ms, held to the 1 ms bound.
        assert_eq!(coalescing_slack(1_000_000, 4, 1_000_000), 1_000_000);
        // A batch of 1, an unmeasured gap or a bound of 0: no slack.
        assert_eq!(coalescing_slack(480_000, 1, 1_000_000), 0);
        assert_eq!(coalescing_slack(0, 4, 1_000_000), 0);
        assert_eq!(coalescing_slack(480_000, 4, 0), 0);
        assert_eq!(coalescing_slack(u64::MAX, 64, 100_000_000), 100_000_000);
    }
}
