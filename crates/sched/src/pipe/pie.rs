//! PIE, the Proportional Integral controller Enhanced AQM, on a pipe's
//! queue (dummynet's `pie` on a flowset and the AQM of its `fq_pie`
//! scheduler, FreeBSD 11.0 and later: `sys/netpfil/ipfw/dn_aqm_pie.c`,
//! `dn_aqm_pie.h`, `dn_sched_fq_pie.c`; RFC 8033, Pan, Natarajan, Baker
//! and White, 2017).
//!
//! PIE keeps one drop probability per queue. Every `tupdate` it moves the
//! probability by how far the queueing delay is from `target` (weight
//! `alpha`) and by how much the delay changed since the last update
//! (weight `beta`); an arriving packet is dropped (or, with `ecn`, marked)
//! with that probability. Unlike CoDel, which decides as packets leave,
//! PIE decides on arrival.
//!
//! # The update (RFC 8033 §4.2 and §5.1; [`PieState`])
//! With `d` the current queueing delay and `d_old` the delay at the last
//! update (both in seconds), each update computes
//! `p = alpha·(d − target) + beta·(d − d_old)` and scales it by the
//! *auto-tuning* table of RFC 8033 §5.1 as dummynet does: divided by 2048
//! while the probability is below 10⁻⁶, by 512 below 10⁻⁵, by 128 below
//! 10⁻⁴, by 32 below 10⁻³, by 8 below 10⁻², by 2 below 10⁻¹, and not at
//! all from 10⁻¹ on. With `capdrop`, a rise is capped at 0.02 once the
//! probability is at or above 0.1 (RFC 8033 §5.1's guard against a sudden
//! jump). The probability then moves by `p` within `[0, 1]`; when both
//! `d` and `d_old` are 0 it also decays by 1/64 of itself (dummynet's
//! `prob − prob/64`; RFC 8033 §4.2 writes ×0.98), and a probability below
//! 2⁻³¹ (dummynet's resolution) becomes 0. The burst allowance falls by
//! `tupdate` (down to 0), and `d_old ← d`.
//!
//! # The delay (`dre` or `ts`)
//! * `ts`: the sojourn of the last packet that left the queue (from its
//!   enqueue to its start on the link, the time CoDel uses too), reset to
//!   0 by an update that finds the queue empty.
//! * `dre` (RFC 8033 §4.3 and Appendix A, dummynet's default for `pie`):
//!   once the queue holds at least 16 KiB, a measurement cycle times how
//!   long the next 16 KiB take to leave; the average departure time of
//!   16 KiB is kept with weight 1/4 for each new cycle (dummynet's; the
//!   first cycle sets it), and each update estimates
//!   `d = backlog · avg / 16 KiB` (0 before the first cycle ends).
//!
//! # The decision on arrival (RFC 8033 §4.1, §5.2–§5.4)
//! A packet the queue's limit admitted is decided as follows (the queue's
//! length and bytes before it):
//! * nothing while PIE is inactive (`onoff`, below) or the burst
//!   allowance (`max_burst`, granted anew while the probability is 0 and
//!   both delays are below `target/2`) is not used up;
//! * never dropped while `d_old < target/2` and the probability is below
//!   0.2, nor while the queue holds at most two mean packets (1 600 B);
//! * with `derand` (RFC 8033 §5.4), the probabilities of the packets since
//!   the last drop add up: below 0.85 the packet passes, from 8.5 on it is
//!   dropped, in between a uniform draw decides; without it, the draw
//!   alone (one draw from the pipe's PIE stream,
//!   [`super::random::Streams::pie`]);
//! * a packet to drop is marked Congestion Experienced instead when `ecn`
//!   is on, it is ECN-capable ([`crate::Packet::ECT_BIT`]) and the
//!   probability is below `max_ecnth` (RFC 8033 §5.1).
//!
//! With `onoff` (dummynet's), PIE starts inactive, turns on when the queue
//! reaches a third of its limit (in the limit's unit, slots or bytes;
//! state reset, updates from then on) and turns off when an arrival finds
//! the queue empty, the probability 0 and both delays below `target/2`.
//! Without it PIE is active from the queue's first event.
//!
//! # The lazy update (sans-IO)
//! No timer runs. A queue's updates fall on the grid `t₀ + k·tupdate`,
//! `t₀` the queue's first event (an arrival or a departure; with `onoff`,
//! the instant it turned on). Before an event of the queue at `now` is
//! applied, every update due at or before `now` is applied in order. A
//! queue's length, bytes and last sojourn change only at its own events,
//! so each update sees exactly what a timer firing at its instant would
//! have seen: the result is the periodic update, not an approximation.
//! Idle periods cost one step each until the state stops changing (the
//! probability at 0 and the delays equal), then the remaining periods
//! take the burst allowance down at once. At most
//! [`Pie::MAX_CATCH_UP`] periods are stepped per event: a queue whose
//! state still changes after 65 536 periods without an arrival or a
//! departure (65 536 × `tupdate`: 16 minutes at the default, 65 ms at the
//! shortest `tupdate` of 1 µs; a stalled link) has its grid moved on to
//! the event without the rest of the updates, their burst allowance
//! spent.
//!
//! # Deviations
//! * Probabilities in `f64` (dummynet: 31-bit fixed point); times in ns.
//! * The departure-rate estimator's first cycle waits for 16 KiB in the
//!   queue as RFC 8033's Appendix A does (dummynet starts it when PIE
//!   turns on, idle time included), and every cycle ends once its
//!   16 KiB have left (dummynet's first one runs on).
//! * The accumulated probability restarts after each drop or mark PIE
//!   makes; a packet the queue's limit drops does not touch PIE's state
//!   (the limit is checked before PIE), nor does a head drop under an
//!   FQ-PIE instance's `limit` (dummynet's `pie_drop_head` restarts it).
//! * Under FQ-PIE a flow's queue keeps its PIE state for the life of its
//!   dynamic queue; dummynet restarts it (probability 0, a new burst
//!   allowance) each time the flow becomes active again after FQ found
//!   it empty. A flow that comes back within its queue's idle expiry
//!   here starts from its decayed probability instead.
//!
//! PIE's drops are counted with their own reason,
//! [`crate::DropReason::Pie`]; its marks as RED's and CoDel's are.
//!
//! # Cost and memory
//! O(1) per packet besides the catch-up of elapsed periods. A queue's
//! state is 72 bytes ([`PieState`]), kept for every queue of a pipe once
//! one of them configures PIE; PIE queues also keep the pipe's enqueue
//! times and CoDel's per-queue record of them (see [`super::codel`]).

use super::codel::Verdict;
use super::filter::QueueLimit;
use crate::{ConfigError, Instant};

/// How PIE estimates a queue's delay (`dre` or `ts`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DelayEstimator {
    /// From the departure rate (`dre`; dummynet's default for `pie`).
    #[default]
    DepartureRate,
    /// From the packets' enqueue times (`ts`; dummynet's default for
    /// `fq_pie`).
    Timestamp,
}

/// PIE's parameters (`pie [target T] [tupdate T] [alpha A] [beta B]
/// [max_burst T] [max_ecnth P] [ecn|noecn] [capdrop|nocapdrop]
/// [derand|noderand] [onoff] [dre|ts]`).
///
/// # Examples
/// ```
/// use pspat_sched::pipe::Pie;
/// let p = Pie::default();
/// assert_eq!((p.target_ns, p.tupdate_ns, p.max_burst_ns), (15_000_000, 15_000_000, 150_000_000));
/// assert_eq!((p.alpha, p.beta, p.max_ecnth), (0.125, 1.25, 0.1));
/// assert!(p.validate().is_ok());
/// assert!(Pie { alpha: 8.0, ..p }.validate().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pie {
    /// The queueing delay PIE steers to, ns (15 ms by default).
    pub target_ns: u64,
    /// The period of the probability's update, ns (15 ms by default).
    pub tupdate_ns: u64,
    /// Weight of the delay's distance from target, per second (0.125).
    pub alpha: f64,
    /// Weight of the delay's change since the last update, per second
    /// (1.25).
    pub beta: f64,
    /// The burst PIE lets through before it drops, ns (150 ms by default).
    pub max_burst_ns: u64,
    /// With `ecn`, the probability below which packets are marked rather
    /// than dropped (0.1).
    pub max_ecnth: f64,
    /// Mark ECN-capable packets instead of dropping them while the
    /// probability is below `max_ecnth` (off for `pie`, on for `fq_pie`).
    pub ecn: bool,
    /// Cap a rise of the probability at 0.02 once it is at or above 0.1
    /// (on by default).
    pub capdrop: bool,
    /// Derandomise the drops (RFC 8033 §5.4; on by default).
    pub derand: bool,
    /// Turn PIE off while the queue is short and on when it reaches a
    /// third of its limit (off by default).
    pub onoff: bool,
    /// How the delay is estimated.
    pub estimator: DelayEstimator,
}

impl Default for Pie {
    /// dummynet's `pie` defaults: 15 ms, 15 ms, 0.125, 1.25, 150 ms, 0.1,
    /// `noecn capdrop derand dre`.
    fn default() -> Self {
        Pie {
            target_ns: 15_000_000,
            tupdate_ns: 15_000_000,
            alpha: 0.125,
            beta: 1.25,
            max_burst_ns: 150_000_000,
            max_ecnth: 0.1,
            ecn: false,
            capdrop: true,
            derand: true,
            onoff: false,
            estimator: DelayEstimator::DepartureRate,
        }
    }
}

impl Pie {
    /// The longest target, tupdate or max_burst dummynet accepts: 10 s.
    pub const MAX_NS: u64 = 10_000_000_000;
    /// The shortest target or tupdate dummynet accepts: 1 µs.
    pub const MIN_NS: u64 = 1_000;
    /// The largest alpha or beta dummynet accepts.
    pub const MAX_GAIN: f64 = 7.0;
    /// Update periods stepped at most per event (module docs).
    pub const MAX_CATCH_UP: u32 = 1 << 16;
    /// The bytes a departure-rate measurement cycle times (16 KiB).
    pub const DQ_THRESHOLD: u64 = 1 << 14;
    /// RFC 8033's mean packet size: a queue of at most two of them is
    /// never dropped from.
    pub const MEAN_PKTSIZE: u64 = 800;

    /// dummynet's `fq_pie` defaults: as [`Pie::default`] but `ecn` and
    /// `ts`.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::{pie::DelayEstimator, Pie};
    /// let p = Pie::fq_default();
    /// assert!(p.ecn && p.estimator == DelayEstimator::Timestamp);
    /// ```
    pub fn fq_default() -> Self {
        Pie {
            ecn: true,
            estimator: DelayEstimator::Timestamp,
            ..Pie::default()
        }
    }

    /// Checks dummynet's ranges: `target` and `tupdate` from 1 µs to 10 s,
    /// `max_burst` up to 10 s, `alpha` and `beta` 0..=7, `max_ecnth` 0..=1
    /// (dummynet clamps; these are refused).
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] naming the parameter.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_range(
            "PIE target (ns)",
            self.target_ns,
            Self::MIN_NS..=Self::MAX_NS,
        )?;
        ConfigError::check_range(
            "PIE tupdate (ns)",
            self.tupdate_ns,
            Self::MIN_NS..=Self::MAX_NS,
        )?;
        ConfigError::check_range("PIE max_burst (ns)", self.max_burst_ns, 0..=Self::MAX_NS)?;
        for (what, v) in [("PIE alpha", self.alpha), ("PIE beta", self.beta)] {
            if !(0.0..=Self::MAX_GAIN).contains(&v) {
                return Err(ConfigError::out_of_range(what, v, "0..=7"));
            }
        }
        if !(0.0..=1.0).contains(&self.max_ecnth) {
            return Err(ConfigError::out_of_range(
                "PIE max_ecnth",
                self.max_ecnth,
                "0..=1",
            ));
        }
        Ok(())
    }

    /// The auto-tuning divisor of RFC 8033 §5.1 for probability `prob`.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::Pie;
    /// assert_eq!(Pie::auto_tune(0.0), 2048.0);
    /// assert_eq!(Pie::auto_tune(0.005), 8.0);
    /// assert_eq!(Pie::auto_tune(0.5), 1.0);
    /// ```
    pub fn auto_tune(prob: f64) -> f64 {
        match prob {
            p if p < 1e-6 => 2048.0,
            p if p < 1e-5 => 512.0,
            p if p < 1e-4 => 128.0,
            p if p < 1e-3 => 32.0,
            p if p < 1e-2 => 8.0,
            p if p < 1e-1 => 2.0,
            _ => 1.0,
        }
    }
}

/// The smallest non-zero probability the decay keeps (dummynet's 31-bit
/// resolution).
const MIN_PROB: f64 = 1.0 / (1u64 << 31) as f64;

/// A queue's PIE state (72 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PieState {
    /// The drop probability.
    prob: f64,
    /// The probabilities added up since the last drop (`derand`).
    accu_prob: f64,
    /// What is left of the burst allowance, ns.
    burst_allowance_ns: u64,
    /// The current delay estimate, ns.
    current_qdelay_ns: u64,
    /// The estimate at the last update, ns.
    qdelay_old_ns: u64,
    /// The next update on the queue's grid.
    next_update: Instant,
    /// When the departure-rate cycle began.
    measurement_start: Instant,
    /// The average time 16 KiB take to leave, ns (0: none measured yet).
    avg_dq_time_ns: u64,
    /// Bytes that left in the current cycle.
    dq_count: u32,
    /// Updating and deciding (always, without `onoff`).
    active: bool,
    /// A departure-rate cycle is running.
    in_measurement: bool,
    /// The queue has had its first event (the grid is set).
    started: bool,
}

const _: () = assert!(std::mem::size_of::<PieState>() == 72);

impl PieState {
    /// The drop probability.
    pub fn probability(&self) -> f64 {
        self.prob
    }

    /// The delay estimate at the last update or departure, ns.
    pub fn current_qdelay_ns(&self) -> u64 {
        self.current_qdelay_ns
    }

    /// The burst allowance left, ns.
    pub fn burst_allowance_ns(&self) -> u64 {
        self.burst_allowance_ns
    }

    /// Whether PIE is on for the queue (always, without `onoff`, once it
    /// has seen a packet).
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Turns PIE on at `now`: a fresh state, the grid from `now`.
    fn activate(&mut self, pie: &Pie, now: Instant) {
        *self = PieState {
            burst_allowance_ns: pie.max_burst_ns,
            next_update: now.saturating_add_nanos(pie.tupdate_ns),
            active: true,
            started: true,
            ..PieState::default()
        };
    }

    /// Applies every update due at or before `now`, the queue holding
    /// `backlog` bytes all along (module docs, "The lazy update").
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::{pie::{DelayEstimator, PieState}, Pie};
    /// use pspat_sched::Instant;
    /// let pie = Pie { estimator: DelayEstimator::Timestamp, ..Pie::default() };
    /// let mut s = PieState::default();
    /// s.catch_up(&pie, Instant::ZERO, 0); // the first event sets the grid
    /// assert_eq!(s.burst_allowance_ns(), 150_000_000);
    /// s.catch_up(&pie, Instant::from_nanos(45_000_000), 0); // three updates
    /// assert_eq!(s.burst_allowance_ns(), 105_000_000);
    /// ```
    pub fn catch_up(&mut self, pie: &Pie, now: Instant, backlog: u64) {
        if !self.started {
            if pie.onoff {
                self.started = true;
            } else {
                self.activate(pie, now);
            }
            return;
        }
        if !self.active {
            return;
        }
        // A period of 0 (refused by validation) would never move the grid.
        let tupdate = pie.tupdate_ns.max(1);
        let mut stepped = 0u32;
        while self.next_update <= now {
            if stepped == Pie::MAX_CATCH_UP {
                // Move the grid on past `now` without the rest of the
                // updates; their burst allowance is used up all the same.
                let behind = now.saturating_nanos_since(self.next_update) / tupdate + 1;
                let skipped = behind.saturating_mul(tupdate);
                self.burst_allowance_ns = self.burst_allowance_ns.saturating_sub(skipped);
                self.next_update = self.next_update.saturating_add_nanos(skipped);
                break;
            }
            let before = (self.prob, self.qdelay_old_ns, self.current_qdelay_ns);
            self.update(pie, backlog);
            stepped += 1;
            self.next_update = self.next_update.saturating_add_nanos(tupdate);
            let after = (self.prob, self.qdelay_old_ns, self.current_qdelay_ns);
            if before == after && self.next_update <= now {
                // A fixed point: every further update only takes the
                // burst allowance down.
                let left = now.saturating_nanos_since(self.next_update) / tupdate + 1;
                self.burst_allowance_ns = self
                    .burst_allowance_ns
                    .saturating_sub(left.saturating_mul(tupdate));
                self.next_update = self
                    .next_update
                    .saturating_add_nanos(left.saturating_mul(tupdate));
            }
        }
    }

    /// One periodic update (module docs, "The update").
    fn update(&mut self, pie: &Pie, backlog: u64) {
        match pie.estimator {
            DelayEstimator::DepartureRate => {
                let d = u128::from(backlog) * u128::from(self.avg_dq_time_ns)
                    / u128::from(Pie::DQ_THRESHOLD);
                self.current_qdelay_ns = u64::try_from(d).unwrap_or(u64::MAX);
            }
            DelayEstimator::Timestamp => {
                if backlog == 0 {
                    self.current_qdelay_ns = 0;
                }
            }
        }
        let secs = |ns: u64| ns as f64 / 1e9;
        let (d, old, target) = (
            secs(self.current_qdelay_ns),
            secs(self.qdelay_old_ns),
            secs(pie.target_ns),
        );
        let mut p = (pie.alpha * (d - target) + pie.beta * (d - old)) / Pie::auto_tune(self.prob);
        if p >= 0.0 && pie.capdrop && self.prob >= 0.1 && p > 0.02 {
            p = 0.02;
        }
        let mut prob = (self.prob + p).max(0.0);
        if self.current_qdelay_ns == 0 && self.qdelay_old_ns == 0 {
            prob -= prob / 64.0;
            if prob < MIN_PROB {
                prob = 0.0;
            }
        }
        self.prob = prob.min(1.0);
        self.qdelay_old_ns = self.current_qdelay_ns;
        self.burst_allowance_ns = self.burst_allowance_ns.saturating_sub(pie.tupdate_ns);
    }

    /// Decides a packet arriving at `now` that the queue's limit admitted:
    /// the queue holds `packets` and `bytes` before it (its limit is
    /// `limit`), `ect` says it is ECN-capable, `draw` gives a uniform draw
    /// in `[0, 1)` when one is needed (module docs, "The decision on
    /// arrival").
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::{codel::Verdict, pie::PieState, Pie, QueueLimit};
    /// use pspat_sched::Instant;
    /// let (pie, mut s) = (Pie::default(), PieState::default());
    /// // The burst allowance lets the first packets through.
    /// let v = s.arrive(&pie, Instant::ZERO, 10, 15_000, QueueLimit::Slots(50), false, || 0.0);
    /// assert_eq!(v, Verdict::Send);
    /// ```
    #[allow(clippy::too_many_arguments)] // the queue's figures, as CoDel's decide takes them
    pub fn arrive(
        &mut self,
        pie: &Pie,
        now: Instant,
        packets: u32,
        bytes: u64,
        limit: QueueLimit,
        ect: bool,
        draw: impl FnOnce() -> f64,
    ) -> Verdict {
        self.catch_up(pie, now, bytes);
        let mut verdict = Verdict::Send;
        if self.active && self.burst_allowance_ns == 0 && self.drop_early(pie, bytes, draw) {
            verdict = if pie.ecn && ect && self.prob < pie.max_ecnth {
                Verdict::Mark
            } else {
                Verdict::Drop
            };
            self.accu_prob = 0.0;
        }
        let (len, size) = match limit {
            QueueLimit::Slots(n) => (u64::from(packets), u64::from(n)),
            QueueLimit::Bytes(n) => (bytes, n),
        };
        if !self.active && len >= size / 3 {
            self.activate(pie, now);
        }
        let half = pie.target_ns / 2;
        if self.active
            && self.prob == 0.0
            && self.current_qdelay_ns < half
            && self.qdelay_old_ns < half
        {
            self.burst_allowance_ns = pie.max_burst_ns;
            if pie.onoff && len == 0 {
                self.active = false;
                self.in_measurement = false;
            }
        }
        verdict
    }

    /// RFC 8033's `drop_early` with dummynet's derandomisation.
    fn drop_early(&mut self, pie: &Pie, bytes: u64, draw: impl FnOnce() -> f64) -> bool {
        let calm = self.qdelay_old_ns < pie.target_ns / 2 && self.prob < 0.2;
        if calm || bytes <= 2 * Pie::MEAN_PKTSIZE {
            return false;
        }
        if self.prob == 0.0 {
            self.accu_prob = 0.0;
        }
        if pie.derand {
            self.accu_prob += self.prob;
            if self.accu_prob < 0.85 {
                return false;
            }
            if self.accu_prob >= 8.5 {
                return true;
            }
        }
        draw() < self.prob
    }

    /// A packet of `len` bytes starts on the link at `now` from the queue,
    /// which held `before` bytes with it and `after` without it; `sojourn`
    /// is its time in the queue, ns, when known (module docs, "The
    /// delay").
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::{pie::{DelayEstimator, PieState}, Pie};
    /// use pspat_sched::Instant;
    /// let pie = Pie { estimator: DelayEstimator::Timestamp, ..Pie::default() };
    /// let mut s = PieState::default();
    /// s.depart(&pie, Instant::ZERO, Some(20_000_000), 1500, 3000, 1500);
    /// assert_eq!(s.current_qdelay_ns(), 20_000_000);
    /// ```
    pub fn depart(
        &mut self,
        pie: &Pie,
        now: Instant,
        sojourn: Option<u64>,
        len: u32,
        before: u64,
        after: u64,
    ) {
        self.catch_up(pie, now, before);
        if !self.active {
            return;
        }
        match pie.estimator {
            DelayEstimator::Timestamp => {
                if let Some(s) = sojourn {
                    self.current_qdelay_ns = s;
                }
            }
            DelayEstimator::DepartureRate => {
                if self.in_measurement {
                    self.dq_count = self.dq_count.saturating_add(len);
                    if u64::from(self.dq_count) >= Pie::DQ_THRESHOLD {
                        let dq_time = now.saturating_nanos_since(self.measurement_start);
                        self.avg_dq_time_ns = if self.avg_dq_time_ns == 0 {
                            dq_time
                        } else {
                            (dq_time / 4)
                                .saturating_add(self.avg_dq_time_ns - self.avg_dq_time_ns / 4)
                        };
                        self.in_measurement = false;
                    }
                }
                if !self.in_measurement && after >= Pie::DQ_THRESHOLD {
                    self.in_measurement = true;
                    self.measurement_start = now;
                    self.dq_count = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * MS)
    }

    fn ts() -> Pie {
        Pie {
            estimator: DelayEstimator::Timestamp,
            ..Pie::default()
        }
    }

    /// A state after its first event at 0 with a given probability and
    /// delays.
    fn state(pie: &Pie, prob: f64, cur_ms: u64, old_ms: u64) -> PieState {
        let mut s = PieState::default();
        s.catch_up(pie, at(0), 0);
        s.prob = prob;
        s.current_qdelay_ns = cur_ms * MS;
        s.qdelay_old_ns = old_ms * MS;
        s
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1e-12)
    }

    #[test]
    fn the_update_follows_rfc_8033_with_its_auto_tuning() {
        let pie = ts();
        // 30 ms of delay, 15 ms at the last update, probability 0:
        // p = 0.125·0.015 + 1.25·0.015 = 0.020625, divided by 2048.
        let mut s = state(&pie, 0.0, 30, 15);
        s.update(&pie, 10_000);
        assert!(close(s.prob, 0.020_625 / 2048.0), "{}", s.prob);
        assert_eq!(s.qdelay_old_ns, 30 * MS);
        // Each band of the table: the same step, scaled by its divisor.
        for (prob, div) in [
            (5e-6, 512.0),
            (5e-5, 128.0),
            (5e-4, 32.0),
            (5e-3, 8.0),
            (5e-2, 2.0),
            (0.5, 1.0),
        ] {
            let mut s = state(&pie, prob, 30, 30);
            s.update(&pie, 10_000);
            // Only the alpha term: 0.125 · 0.015 = 0.001875.
            assert!(close(s.prob, prob + 0.001_875 / div), "{prob}: {}", s.prob);
        }
        // Below target the probability falls by the same law.
        let mut s = state(&pie, 0.5, 5, 5);
        s.update(&pie, 10_000);
        assert!(close(s.prob, 0.5 - 0.125 * 0.010), "{}", s.prob);
    }

    #[test]
    fn capdrop_caps_a_rise_above_a_tenth() {
        // 200 ms of delay, 100 ms before: p = 0.125·0.185 + 1.25·0.1 = 0.148125.
        let pie = ts();
        let mut s = state(&pie, 0.2, 200, 100);
        s.update(&pie, 10_000);
        assert!(close(s.prob, 0.22), "{}", s.prob);
        let no_cap = Pie {
            capdrop: false,
            ..pie
        };
        let mut s = state(&no_cap, 0.2, 200, 100);
        s.update(&no_cap, 10_000);
        assert!(close(s.prob, 0.2 + 0.148_125), "{}", s.prob);
        // Below 0.1 the cap does not apply (the step is halved instead).
        let mut s = state(&pie, 0.09, 200, 100);
        s.update(&pie, 10_000);
        assert!(close(s.prob, 0.09 + 0.148_125 / 2.0), "{}", s.prob);
    }

    #[test]
    fn an_idle_queue_decays_its_probability_to_zero() {
        let pie = ts();
        let mut s = state(&pie, 0.5, 0, 0);
        // d = d_old = 0: p = −0.125·0.015 = −0.001875, then ×(1 − 1/64).
        s.update(&pie, 0);
        assert!(close(s.prob, (0.5 - 0.001_875) * 63.0 / 64.0), "{}", s.prob);
        // An empty queue resets the ts delay at the update.
        let mut s = state(&pie, 0.5, 40, 0);
        s.update(&pie, 0);
        assert_eq!(s.current_qdelay_ns, 0);
        // Lazily: an hour idle, caught up on the next event, ends at 0
        // with the burst allowance used up.
        let mut s = state(&pie, 0.5, 0, 0);
        s.catch_up(&pie, at(3_600_000), 0);
        assert_eq!(s.prob, 0.0);
        assert_eq!(s.burst_allowance_ns, 0);
        assert_eq!(s.next_update, at(3_600_000 + 15));
    }

    #[test]
    fn lazy_updates_equal_updates_one_period_at_a_time() {
        let pie = ts();
        let mut lazy = state(&pie, 0.01, 40, 20);
        let mut eager = lazy;
        lazy.catch_up(&pie, at(15 * 37 + 3), 30_000);
        for k in 1..=37 {
            eager.catch_up(&pie, at(15 * k), 30_000);
        }
        assert_eq!(lazy, eager);
        // An event between two grid points changes nothing.
        let before = lazy;
        lazy.catch_up(&pie, at(15 * 37 + 14), 30_000);
        assert_eq!(lazy, before);
    }

    #[test]
    fn the_burst_allowance_passes_a_burst_then_runs_out() {
        // Without derandomisation, so that the draw alone decides once the
        // allowance is spent.
        let pie = Pie {
            derand: false,
            ..ts()
        };
        let mut s = PieState::default();
        let limit = QueueLimit::Slots(1000);
        // A standing 100 ms delay; the probability climbs, but nothing is
        // dropped for max_burst (150 ms: ten updates).
        s.depart(&pie, at(0), Some(100 * MS), 1500, 150_000, 148_500);
        let mut first_drop = None;
        for t in 1..400 {
            s.depart(&pie, at(t), Some(100 * MS), 1500, 150_000, 148_500);
            let v = s.arrive(&pie, at(t), 100, 150_000, limit, false, || 0.0);
            if v == Verdict::Drop && first_drop.is_none() {
                first_drop = Some(t);
            }
        }
        let first = first_drop.expect("drops once the allowance is used up");
        // Ten updates of 15 ms use up the 150 ms; the draw of 0 drops the
        // first arrival after.
        assert!(
            (150..=151).contains(&first),
            "first drop at {first} ms, max_burst 150 ms"
        );
        assert!(s.prob > 0.0);
    }

    #[test]
    fn no_drop_when_calm_or_the_queue_is_two_packets() {
        let pie = Pie {
            derand: false,
            ..ts()
        };
        let limit = QueueLimit::Slots(1000);
        // Old delay below target/2 and probability below 0.2: no drop,
        // even with a draw of 0.
        let mut s = state(&pie, 0.19, 5, 5);
        s.burst_allowance_ns = 0;
        assert_eq!(
            s.arrive(&pie, at(1), 50, 75_000, limit, false, || 0.0),
            Verdict::Send
        );
        // The same probability with a delay above target/2: a draw below
        // it drops.
        let mut s = state(&pie, 0.19, 20, 20);
        s.burst_allowance_ns = 0;
        assert_eq!(
            s.arrive(&pie, at(1), 50, 75_000, limit, false, || 0.1),
            Verdict::Drop
        );
        assert_eq!(
            s.arrive(&pie, at(1), 50, 75_000, limit, false, || 0.5),
            Verdict::Send
        );
        // At most two mean packets queued (1 600 B): never; one byte more
        // and the draw decides.
        assert_eq!(
            s.arrive(&pie, at(1), 1, 1_600, limit, false, || 0.0),
            Verdict::Send
        );
        assert_eq!(
            s.arrive(&pie, at(1), 2, 1_601, limit, false, || 0.0),
            Verdict::Drop
        );
    }

    #[test]
    fn ecn_marks_below_max_ecnth_and_drops_above() {
        let pie = Pie {
            ecn: true,
            derand: false,
            ..ts()
        };
        let limit = QueueLimit::Slots(1000);
        let mut s = state(&pie, 0.05, 20, 20);
        s.burst_allowance_ns = 0;
        assert_eq!(
            s.arrive(&pie, at(1), 50, 75_000, limit, true, || 0.0),
            Verdict::Mark
        );
        // Not ECN-capable: dropped.
        assert_eq!(
            s.arrive(&pie, at(1), 50, 75_000, limit, false, || 0.0),
            Verdict::Drop
        );
        // At or above max_ecnth (0.1): dropped even when ECN-capable.
        let mut s = state(&pie, 0.3, 20, 20);
        s.burst_allowance_ns = 0;
        assert_eq!(
            s.arrive(&pie, at(1), 50, 75_000, limit, true, || 0.0),
            Verdict::Drop
        );
    }

    #[test]
    fn derandomisation_spaces_the_drops() {
        let pie = ts();
        let limit = QueueLimit::Slots(1000);
        // Probability 0.25: with draws that always say drop, the
        // accumulated probability still keeps the first three (0.25,
        // 0.5, 0.75 < 0.85), then the draw drops the fourth.
        let mut s = state(&pie, 0.25, 20, 20);
        s.burst_allowance_ns = 0;
        let verdicts: Vec<_> = (0..8)
            .map(|_| s.arrive(&pie, at(1), 50, 75_000, limit, false, || 0.0))
            .collect();
        use Verdict::{Drop as D, Send as S};
        assert_eq!(verdicts, [S, S, S, D, S, S, S, D]);
        // With draws that never drop, the sum reaches 8.5 (the 34th
        // packet) and drops.
        let mut s = state(&pie, 0.25, 20, 20);
        s.burst_allowance_ns = 0;
        let first = (1..=40)
            .find(|_| s.arrive(&pie, at(1), 50, 75_000, limit, false, || 0.99) == D)
            .unwrap();
        assert_eq!(first, 34);
    }

    #[test]
    fn onoff_turns_on_at_a_third_of_the_limit_and_off_when_empty() {
        let pie = Pie {
            onoff: true,
            ..ts()
        };
        let limit = QueueLimit::Slots(30);
        let mut s = PieState::default();
        s.arrive(&pie, at(0), 0, 0, limit, false, || 0.0);
        assert!(!s.is_active());
        s.arrive(&pie, at(1), 9, 13_500, limit, false, || 0.0);
        assert!(!s.is_active());
        s.arrive(&pie, at(2), 10, 15_000, limit, false, || 0.0);
        assert!(s.is_active());
        assert_eq!(s.next_update, at(17));
        // Empty, probability 0, delays low: off again.
        s.arrive(&pie, at(3), 0, 0, limit, false, || 0.0);
        assert!(!s.is_active());
    }

    #[test]
    fn the_departure_rate_estimates_the_delay() {
        let pie = Pie::default();
        let mut s = PieState::default();
        // 1500-byte packets leave every 1.2 ms (10 Mbit/s) from a queue of
        // 60 000 bytes: 16 KiB take 11 packets (13.2 ms).
        let mut t = 0;
        let backlog = 60_000;
        for _ in 0..30 {
            s.depart(
                &pie,
                Instant::from_nanos(t),
                None,
                1500,
                backlog + 1500,
                backlog,
            );
            t += 1_200_000;
        }
        assert_eq!(s.avg_dq_time_ns, 13_200_000);
        // The next update estimates 60 000 · 13.2 ms / 16 384 B.
        let mut u = s;
        u.update(&pie, backlog);
        assert_eq!(u.current_qdelay_ns, 60_000 * 13_200_000 / 16_384);
        // A cycle of another length moves the average by a quarter of the
        // difference: 26.4 ms after 13.2 ms gives 13.2 + (26.4 − 13.2)/4.
        let mut v = s;
        v.next_update = Instant::from_nanos(u64::MAX);
        v.in_measurement = true;
        v.measurement_start = Instant::from_nanos(t);
        v.dq_count = 0;
        v.depart(
            &pie,
            Instant::from_nanos(t + 26_400_000),
            None,
            16_384,
            backlog + 16_384,
            backlog,
        );
        assert_eq!(v.avg_dq_time_ns, 16_500_000);
    }

    #[test]
    fn dummynet_ranges_are_refused_not_clamped() {
        let p = Pie::default();
        assert!(Pie {
            target_ns: 999,
            ..p
        }
        .validate()
        .is_err());
        assert!(Pie {
            tupdate_ns: Pie::MAX_NS + 1,
            ..p
        }
        .validate()
        .is_err());
        assert!(Pie {
            max_burst_ns: 0,
            ..p
        }
        .validate()
        .is_ok());
        assert!(Pie { beta: -0.1, ..p }.validate().is_err());
        assert!(Pie {
            max_ecnth: 1.5,
            ..p
        }
        .validate()
        .is_err());
        assert!(Pie {
            alpha: f64::NAN,
            ..p
        }
        .validate()
        .is_err());
    }
}
