//! The enqueue filters of a pipe's queue: random loss (`plr`),
//! Gilbert-Elliott loss, the 4-state loss model, RED / gentle RED, and the
//! queue limit in slots or bytes, applied in that order (dummynet's
//! `dn_enqueue`: plr, then RED, then the limit; Gilbert-Elliott and the
//! 4-state model, pspat extensions, sit with plr).
//!
//! # RED (Floyd and Jacobson, "Random Early Detection Gateways for
//! Congestion Avoidance", IEEE/ACM ToN 1(4), 1993; dummynet's `red_drops`)
//! * On each arrival the average is updated from the queue length *before*
//!   the packet: `avg ← avg + w_q·(q − avg)` when `q > 0`; when the queue is
//!   empty, `avg ← avg·(1 − w_q)^(t+1)` with `t = ⌊idle / s⌋`, `s` the time
//!   to send [`RED_AVG_PKT_SIZE`] bytes at the link rate, and `avg ← 0` once
//!   `t` reaches [`RED_LOOKUP_DEPTH`] (dummynet's lookup table, computed here
//!   by exact repeated multiplication instead of a table).
//! * Drop probability `p_b`: 0 below `min_th`; `max_p·(avg − min_th)/(max_th
//!   − min_th)` up to `max_th`; above it 1 for RED, and for gentle RED
//!   `(1 − max_p)·avg/max_th − (1 − 2·max_p)`, which rises from `max_p` at
//!   `max_th` to 1 at `2·max_th`. In a byte-counted queue `p_b` is scaled by
//!   `len/`[`RED_MAX_PKT_SIZE`].
//! * Uniform spacing: a uniform `R` in `[0, 1)` is drawn after each drop
//!   (and on entering the region above `min_th`); the `count`-th packet since
//!   is dropped as soon as `count·p_b > R`. At a constant `p_b` the gap
//!   between drops is then `n = ⌊R/p_b⌋ + 1` packets and the long-run drop
//!   fraction is `1/E[n]`, `E[n] = 1 + Σ_{k≥1, k·p_b<1} (1 − k·p_b)`
//!   (`2·p_b/(1 + p_b)` when `1/p_b` is an integer): the tests check this.
//!
//! # Gilbert-Elliott (tc-netem(8) `gemodel p r 1-h 1-k`)
//! A two-state chain per queue; each arrival is lost with the current
//! state's loss probability (`1-k` good, `1-h` bad), then the state moves
//! (good → bad with `p`, bad → good with `r`). Long-run loss:
//! `(r·(1−k) + p·(1−h)) / (p + r)`.
//!
//! # The 4-state loss model (tc-netem(8) `loss state p13 p31 p32 p23 p14`)
//! The general and intuitive (GI) model of Salsano, Ludovici and Ordine,
//! "Definition of a general and intuitive loss model for packet networks
//! and its implementation in the Netem module in the Linux kernel" (2009),
//! as Linux's netem runs it with contiguous ranges of the draw. A Markov
//! chain per queue whose state says what happened to the last packet:
//! 1, sent within a gap (good period; the start); 2, sent within a burst;
//! 3, lost within a burst; 4, an isolated loss within a gap. Each arrival
//! makes one uniform draw `u` in `[0, 1)` and moves the chain; the packet
//! is lost when the chain lands in 3 or 4:
//! * from 1: to 4 when `u < p14`, else to 3 when `u < p14 + p13`, else it
//!   stays in 1;
//! * from 2: to 3 when `u < p23`, else it stays in 2;
//! * from 3: to 2 when `u < p32`, else to 1 when `u < p32 + p31`, else it
//!   stays in 3;
//! * from 4: back to 1 (the draw is made all the same, so the stream moves
//!   by one draw a packet).
//!
//! Long-run loss: `π3 + π4` of the chain's stationary distribution
//! (`π4 = p14·π1`, `π3 = p13·π1/p31`, `π2 = p32·π3/p23` when `p31` and
//! `p23` are positive). A loss counts as [`DropReason::BurstLoss`], the
//! reason Gilbert-Elliott's losses count as (both are correlated loss
//! models; a queue configures one of them).
//!
//! # Deviations from dummynet
//! * Probabilities and the RED average are `f64`, not 31-bit / 16-bit fixed
//!   point: a user-space emulator has no reason to round `plr 0.01`.
//! * A byte limit is a hard bound: a packet is refused when it would take
//!   the queue *above* the limit (dummynet admits while the queue is at or
//!   below the limit, so it can overshoot by one packet).
//! * Idle decay uses the elapsed time exactly (ns), not ticks; on an
//!   unlimited link (`s = 0`) any idle time empties the average.
//!
//! # Complexity
//! O(1) per packet (the idle decay takes O(log t) multiplications, t < 256;
//! the 4-state model one draw and at most two comparisons). A queue whose
//! configuration has no `plr`, RED, Gilbert-Elliott or 4-state model (known
//! when the configuration is installed) only compares its length with its
//! limit. RED, Gilbert-Elliott and 4-state state lives in a side table of
//! 40 bytes a queue (the 4-state model's one byte fits in what was padding),
//! allocated only once some queue of the pipe configures one of them.

use fastrand::Rng;

use super::random::{bernoulli, pow_u32};
use crate::{ConfigError, DropReason, Instant};

/// dummynet's `red_lookup_depth`: idle decay beyond this many packet times empties the average.
pub const RED_LOOKUP_DEPTH: u64 = 256;
/// dummynet's `red_avg_pkt_size`: the packet whose send time is RED's idle unit, bytes.
pub const RED_AVG_PKT_SIZE: u32 = 512;
/// dummynet's `red_max_pkt_size`: the packet size that scales `p_b` in byte-counted queues.
pub const RED_MAX_PKT_SIZE: u32 = 1500;

/// A queue's capacity (dummynet's `queue N` or `queue NKbytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueLimit {
    /// At most this many packets.
    Slots(u32),
    /// At most this many bytes.
    Bytes(u64),
}

impl Default for QueueLimit {
    /// dummynet's default, 50 slots.
    fn default() -> Self {
        QueueLimit::Slots(50)
    }
}

/// RED or gentle RED parameters (`red | gred w_q/min_th/max_th/max_p`);
/// thresholds in the queue's unit (packets or bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Red {
    /// Gentle RED: `p_b` rises from `max_p` to 1 between `max_th` and `2·max_th`.
    pub gentle: bool,
    /// Weight of the moving average, in (0, 1].
    pub w_q: f64,
    /// Below this average nothing is dropped early.
    pub min_th: u64,
    /// At this average `p_b` reaches `max_p`; `min_th < max_th`.
    pub max_th: u64,
    /// Drop probability at `max_th`, in (0, 1].
    pub max_p: f64,
}

impl Red {
    /// Checks the ranges.
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] naming the first bad parameter.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.w_q > 0.0 && self.w_q <= 1.0) {
            return Err(ConfigError::out_of_range("RED w_q", self.w_q, "(0, 1]"));
        }
        if !(self.max_p > 0.0 && self.max_p <= 1.0) {
            return Err(ConfigError::out_of_range("RED max_p", self.max_p, "(0, 1]"));
        }
        if self.min_th >= self.max_th {
            return Err(ConfigError::out_of_range(
                "RED min_th",
                self.min_th,
                format!("0..{} (below max_th)", self.max_th),
            ));
        }
        Ok(())
    }

    /// The drop probability `p_b` at average `avg` for a packet of `len`
    /// bytes, before uniform spacing (see the module docs); may exceed 1.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::filter::Red;
    /// let red = Red { gentle: true, w_q: 0.002, min_th: 30, max_th: 80, max_p: 0.1 };
    /// assert_eq!(red.p_b(20.0, 1500, false), 0.0);
    /// assert!((red.p_b(55.0, 1500, false) - 0.05).abs() < 1e-12);
    /// assert!((red.p_b(80.0, 1500, false) - 0.1).abs() < 1e-12);
    /// assert!((red.p_b(160.0, 1500, false) - 1.0).abs() < 1e-12);
    /// ```
    pub fn p_b(&self, avg: f64, len: u32, bytes: bool) -> f64 {
        let (min_th, max_th) = (self.min_th as f64, self.max_th as f64);
        let p = if avg < min_th {
            0.0
        } else if avg >= max_th {
            if self.gentle {
                (1.0 - self.max_p) * avg / max_th - (1.0 - 2.0 * self.max_p)
            } else {
                f64::INFINITY
            }
        } else {
            self.max_p * (avg - min_th) / (max_th - min_th)
        };
        if bytes && p.is_finite() {
            p * f64::from(len) / f64::from(RED_MAX_PKT_SIZE)
        } else {
            p
        }
    }
}

/// The state RED keeps per queue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RedState {
    /// The moving average of the queue length.
    pub avg: f64,
    /// Packets since the last drop; −1 below `min_th`.
    count: i64,
    /// The uniform draw the spacing compares with.
    random: f64,
}

impl Default for RedState {
    fn default() -> Self {
        RedState {
            avg: 0.0,
            count: -1,
            random: 0.0,
        }
    }
}

impl RedState {
    /// Updates the average for an arrival that finds `q` (packets or bytes)
    /// queued, and says whether RED drops it.
    ///
    /// `idle_ns` is how long the queue has been empty (used when `q == 0`);
    /// `unit_ns` the send time of [`RED_AVG_PKT_SIZE`] bytes, `None` on an
    /// unlimited link.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::filter::{Red, RedState};
    /// let red = Red { gentle: false, w_q: 1.0, min_th: 5, max_th: 10, max_p: 0.5 };
    /// let mut s = RedState::default();
    /// let mut rng = fastrand::Rng::with_seed(1);
    /// assert!(!s.drops(&red, 3, 1500, false, 0, None, &mut rng)); // below min_th
    /// assert!(s.drops(&red, 10, 1500, false, 0, None, &mut rng)); // at max_th: RED drops
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn drops(
        &mut self,
        red: &Red,
        q: u64,
        len: u32,
        bytes: bool,
        idle_ns: u64,
        unit_ns: Option<u64>,
        rng: &mut Rng,
    ) -> bool {
        if q > 0 {
            self.avg += (q as f64 - self.avg) * red.w_q;
        } else if self.avg > 0.0 {
            let t = match unit_ns {
                Some(unit) => idle_ns / unit.max(1),
                None if idle_ns == 0 => 0,
                None => RED_LOOKUP_DEPTH,
            };
            self.avg = if t < RED_LOOKUP_DEPTH {
                self.avg * pow_u32(1.0 - red.w_q, t as u32 + 1)
            } else {
                0.0
            };
        }
        if self.avg < red.min_th as f64 {
            self.count = -1;
            return false;
        }
        if self.avg >= red.max_th as f64 && !red.gentle {
            self.count = -1;
            return true;
        }
        let p_b = red.p_b(self.avg, len, bytes);
        self.count += 1;
        if self.count == 0 {
            self.random = rng.f64();
            return false;
        }
        if p_b * self.count as f64 > self.random {
            self.count = 0;
            self.random = rng.f64();
            return true;
        }
        false
    }
}

/// Gilbert-Elliott loss parameters (tc-netem(8) `gemodel p r 1-h 1-k`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GilbertElliott {
    /// Good → bad transition probability.
    pub p: f64,
    /// Bad → good transition probability.
    pub r: f64,
    /// Loss probability in the bad state (`1-h`).
    pub loss_bad: f64,
    /// Loss probability in the good state (`1-k`).
    pub loss_good: f64,
}

impl GilbertElliott {
    /// The long-run loss fraction, `(r·(1−k) + p·(1−h)) / (p + r)`; the
    /// good state's loss when the chain never moves (`p = r = 0`).
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::filter::GilbertElliott;
    /// let ge = GilbertElliott { p: 0.01, r: 0.3, loss_bad: 0.5, loss_good: 0.0 };
    /// assert!((ge.stationary_loss() - 0.005 / 0.31).abs() < 1e-12);
    /// ```
    pub fn stationary_loss(&self) -> f64 {
        if self.p + self.r == 0.0 {
            self.loss_good
        } else {
            (self.r * self.loss_good + self.p * self.loss_bad) / (self.p + self.r)
        }
    }

    /// One arrival: lost with the current state's probability, then the
    /// state moves. `bad` is the queue's state.
    pub fn step(&self, bad: &mut bool, rng: &mut Rng) -> bool {
        let lost = bernoulli(rng, if *bad { self.loss_bad } else { self.loss_good });
        let moves = bernoulli(rng, if *bad { self.r } else { self.p });
        if moves {
            *bad = !*bad;
        }
        lost
    }

    fn validate(&self) -> Result<(), ConfigError> {
        check_probability("Gilbert-Elliott p", self.p)?;
        check_probability("Gilbert-Elliott r", self.r)?;
        check_probability("Gilbert-Elliott 1-h", self.loss_bad)?;
        check_probability("Gilbert-Elliott 1-k", self.loss_good)
    }
}

/// The 4-state loss model's parameters (tc-netem(8) `loss state p13 p31
/// p32 p23 p14`; see the module docs). Probabilities, with `p13 + p14 ≤ 1`
/// and `p31 + p32 ≤ 1`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossState {
    /// Gap, sent (1) → burst, lost (3).
    pub p13: f64,
    /// Burst, lost (3) → gap, sent (1).
    pub p31: f64,
    /// Burst, lost (3) → burst, sent (2).
    pub p32: f64,
    /// Burst, sent (2) → burst, lost (3).
    pub p23: f64,
    /// Gap, sent (1) → isolated loss (4).
    pub p14: f64,
}

/// Where a queue's 4-state loss chain is: what happened to the queue's
/// last packet. One byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum LossPhase {
    /// State 1: sent within a gap (the start).
    #[default]
    GapSent = 1,
    /// State 2: sent within a burst.
    BurstSent = 2,
    /// State 3: lost within a burst.
    BurstLost = 3,
    /// State 4: an isolated loss within a gap.
    GapLost = 4,
}

impl LossPhase {
    /// Whether the packet that brought the chain here was lost (3 or 4).
    pub fn lost(self) -> bool {
        matches!(self, LossPhase::BurstLost | LossPhase::GapLost)
    }
}

impl LossState {
    /// One arrival: one uniform draw moves the chain from `phase`; true
    /// when the packet is lost (the chain lands in state 3 or 4).
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::filter::{LossPhase, LossState};
    /// // Every packet of a gap is lost alone: 1 → 4 → 1 → 4 ...
    /// let m = LossState { p13: 0.0, p31: 1.0, p32: 0.0, p23: 1.0, p14: 1.0 };
    /// let (mut phase, mut rng) = (LossPhase::default(), fastrand::Rng::with_seed(1));
    /// assert!(m.step(&mut phase, &mut rng) && phase == LossPhase::GapLost);
    /// assert!(!m.step(&mut phase, &mut rng) && phase == LossPhase::GapSent);
    /// ```
    #[inline]
    pub fn step(&self, phase: &mut LossPhase, rng: &mut Rng) -> bool {
        let u = rng.f64();
        *phase = match *phase {
            LossPhase::GapSent if u < self.p14 => LossPhase::GapLost,
            LossPhase::GapSent if u < self.p14 + self.p13 => LossPhase::BurstLost,
            LossPhase::GapSent => LossPhase::GapSent,
            LossPhase::BurstSent if u < self.p23 => LossPhase::BurstLost,
            LossPhase::BurstSent => LossPhase::BurstSent,
            LossPhase::BurstLost if u < self.p32 => LossPhase::BurstSent,
            LossPhase::BurstLost if u < self.p32 + self.p31 => LossPhase::GapSent,
            LossPhase::BurstLost => LossPhase::BurstLost,
            LossPhase::GapLost => LossPhase::GapSent,
        };
        phase.lost()
    }

    /// Checks the ranges and that the probabilities out of states 1 and 3
    /// sum to at most 1.
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] naming the first bad parameter.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::filter::LossState;
    /// let m = LossState { p13: 0.01, p31: 0.3, p32: 0.0, p23: 1.0, p14: 0.0 };
    /// assert!(m.validate().is_ok());
    /// assert!(LossState { p14: 0.995, ..m }.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_probability("4-state loss p13", self.p13)?;
        check_probability("4-state loss p31", self.p31)?;
        check_probability("4-state loss p32", self.p32)?;
        check_probability("4-state loss p23", self.p23)?;
        check_probability("4-state loss p14", self.p14)?;
        if self.p13 + self.p14 > 1.0 {
            return Err(ConfigError::out_of_range(
                "4-state loss p14",
                self.p14,
                format!("0..={} (p13 + p14 at most 1)", 1.0 - self.p13),
            ));
        }
        if self.p31 + self.p32 > 1.0 {
            return Err(ConfigError::out_of_range(
                "4-state loss p32",
                self.p32,
                format!("0..={} (p31 + p32 at most 1)", 1.0 - self.p31),
            ));
        }
        Ok(())
    }
}

/// Checks that `p` is a probability (NaN refused).
pub(crate) fn check_probability(what: &str, p: f64) -> Result<(), ConfigError> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(ConfigError::out_of_range(what, p, "0..=1"))
    }
}

/// Checks a correlation of successive decisions: 0 up to, not including, 1
/// (a chain whose correlation is 1 never leaves its first state).
pub(crate) fn check_correlation(what: &str, c: f64) -> Result<(), ConfigError> {
    if (0.0..1.0).contains(&c) {
        Ok(())
    } else {
        Err(ConfigError::out_of_range(what, c, "0..1 (1 excluded)"))
    }
}

/// The configuration of one queue of a pipe (dummynet's flowset
/// parameters plus pspat's Gilbert-Elliott and 4-state loss, duplication
/// and corruption).
///
/// # Examples
/// ```
/// use pspat_sched::pipe::{QueueConfig, QueueLimit};
/// let q = QueueConfig { plr: 0.01, ..QueueConfig::default() };
/// assert_eq!(q.limit, QueueLimit::Slots(50));
/// assert!(q.validate().is_ok());
/// assert!(QueueConfig { plr: 1.5, ..q }.validate().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QueueConfig {
    /// Capacity.
    pub limit: QueueLimit,
    /// Random loss probability (`plr`).
    pub plr: f64,
    /// RED / gentle RED; `None` is drop-tail.
    pub red: Option<Red>,
    /// Gilbert-Elliott loss.
    pub gilbert_elliott: Option<GilbertElliott>,
    /// The 4-state loss model (after Gilbert-Elliott when both are given).
    pub loss_state: Option<LossState>,
    /// Probability that a packet leaves twice.
    pub duplicate: f64,
    /// Correlation of successive duplication decisions of the queue, 0..1
    /// (0: independent): a two-state chain with long-run share `duplicate`
    /// ([`super::random::correlated_bernoulli`]).
    pub duplicate_correlation: f64,
    /// Probability that a packet leaves with one bit of it flipped
    /// (`corrupt`, as tc-netem): the pipe marks the packet
    /// ([`crate::Packet::CORRUPT_BIT`]) and whoever holds its bytes flips
    /// the bit.
    pub corrupt: f64,
    /// Correlation of successive corruption decisions of the queue, 0..1,
    /// as [`QueueConfig::duplicate_correlation`].
    pub corrupt_correlation: f64,
    /// Explicit congestion notification with [`QueueConfig::red`]
    /// (dummynet's `ecn`): a packet RED would drop is, when ECN-capable
    /// ([`crate::Packet::ECT_BIT`]), queued with Congestion Experienced
    /// marked instead ([`crate::Packet::CE_BIT`]; whoever holds its bytes
    /// writes the mark), and an average at or above `max_th` marks or drops
    /// every packet, gentle or not, as in dummynet. Random losses (`plr`,
    /// Gilbert-Elliott, 4-state) and the limit still drop. Without RED it
    /// changes nothing (the configuration layers refuse it there).
    pub ecn: bool,
    /// Explicit congestion notification for the random losses (`plr`,
    /// Gilbert-Elliott, 4-state; tc-netem's `ecn`, pspat's `lossecn`): a
    /// packet one of them would drop is, when ECN-capable
    /// ([`crate::Packet::ECT_BIT`]), queued marked Congestion Experienced
    /// instead ([`crate::Packet::CE_BIT`]); a packet that is not is dropped
    /// as before. The loss processes move exactly as without it. The limit
    /// and RED still drop (RED marks only with [`QueueConfig::ecn`]).
    pub loss_ecn: bool,
    /// CoDel, the controlled-delay AQM (dummynet's `codel`, [`super::Codel`]):
    /// packets are dropped (or, with its `ecn`, marked) as they leave the
    /// queue once their sojourn stays above its target. Excludes RED.
    pub codel: Option<super::Codel>,
    /// PIE, the proportional integral controller AQM (dummynet's `pie`,
    /// [`super::Pie`]): arriving packets are dropped (or, with its `ecn`,
    /// marked) with a probability steered by the queueing delay. Excludes
    /// RED and CoDel.
    pub pie: Option<super::Pie>,
}

impl QueueConfig {
    /// Checks every range.
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] naming the first bad parameter.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.limit {
            QueueLimit::Slots(0) => {
                return Err(ConfigError::out_of_range(
                    "queue limit (slots)",
                    0,
                    "1..=4294967295",
                ))
            }
            QueueLimit::Bytes(0) => {
                return Err(ConfigError::out_of_range(
                    "queue limit (bytes)",
                    0,
                    "1..=18446744073709551615",
                ))
            }
            _ => {}
        }
        check_probability("plr", self.plr)?;
        check_probability("duplicate", self.duplicate)?;
        check_probability("corrupt", self.corrupt)?;
        check_correlation("duplicate correlation", self.duplicate_correlation)?;
        check_correlation("corrupt correlation", self.corrupt_correlation)?;
        if let Some(red) = &self.red {
            red.validate()?;
        }
        if let Some(ge) = &self.gilbert_elliott {
            ge.validate()?;
        }
        if let Some(ls) = &self.loss_state {
            ls.validate()?;
        }
        if let Some(codel) = &self.codel {
            codel.validate()?;
            if self.red.is_some() {
                return Err(ConfigError::invalid(
                    "queue codel",
                    "a queue has one AQM: RED or CoDel, not both",
                ));
            }
        }
        if let Some(pie) = &self.pie {
            pie.validate()?;
            if self.red.is_some() || self.codel.is_some() {
                return Err(ConfigError::invalid(
                    "queue pie",
                    "a queue has one AQM: RED, CoDel or PIE, not two",
                ));
            }
        }
        Ok(())
    }
}

impl QueueConfig {
    /// Whether the queue runs a filter besides its limit (`plr`, RED,
    /// Gilbert-Elliott, 4-state loss): decided once, when the configuration
    /// is installed.
    pub(crate) fn filters(&self) -> bool {
        self.plr > 0.0 || self.keeps_state()
    }

    /// Whether the queue's filters keep state between packets (RED,
    /// Gilbert-Elliott, 4-state loss), kept in the pipe's side table.
    pub(crate) fn keeps_state(&self) -> bool {
        self.red.is_some() || self.gilbert_elliott.is_some() || self.loss_state.is_some()
    }

    /// Whether a packet of `len` bytes finds the queue full.
    #[inline]
    pub(crate) fn full(&self, q: &QueueState, len: u32) -> bool {
        match self.limit {
            QueueLimit::Slots(n) => q.slots >= n,
            QueueLimit::Bytes(b) => q.bytes + u64::from(len) > b,
        }
    }
}

/// What every queue holds: its length in the scheduler and its
/// configuration. 16 bytes, the first half of the pipe's 56-byte record of
/// a queue (its counters follow in the same record).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QueueState {
    /// Bytes held in the scheduler for this queue.
    pub bytes: u64,
    /// Packets held in the scheduler for this queue (a scheduler holds at
    /// most [`crate::FlowTable::MAX_FLOWS`]-sized capacities, far below 2^32).
    pub slots: u32,
    /// Index of the queue's configuration in the pipe's table.
    pub config: u16,
    /// The last answers of the queue's correlated duplication and
    /// corruption chains ([`QueueState::DUPLICATED`],
    /// [`QueueState::CORRUPTED`]), in bytes the record's alignment leaves
    /// free.
    pub chains: u8,
}

impl QueueState {
    /// In [`QueueState::chains`]: the queue's last packet was duplicated.
    pub const DUPLICATED: u8 = 1;
    /// In [`QueueState::chains`]: the queue's last packet was corrupted.
    pub const CORRUPTED: u8 = 2;
}

const _: () = assert!(std::mem::size_of::<QueueState>() == 16);

/// What a queue's RED, Gilbert-Elliott and 4-state filters remember
/// between packets: a side table the pipe allocates only once some queue
/// configures one of them. 40 bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FilterState {
    /// RED's state.
    pub red: RedState,
    /// When the queue last became empty (RED's idle time).
    pub empty_since: Instant,
    /// Gilbert-Elliott state: true in the bad state.
    pub ge_bad: bool,
    /// The 4-state loss chain's state.
    pub loss_phase: LossPhase,
}

const _: () = assert!(std::mem::size_of::<FilterState>() == 40);

/// The random streams the filters draw from.
pub(crate) struct FilterRngs<'a> {
    pub loss: &'a mut Rng,
    pub gilbert_elliott: &'a mut Rng,
    pub loss_state: &'a mut Rng,
    pub red: &'a mut Rng,
}

/// Runs the filters of `cfg` (plr, Gilbert-Elliott, 4-state loss, RED,
/// then the limit) for a packet of `len` bytes arriving at `now` in queue
/// `q`, ECN-capable if `ect`; `Ok(true)` when it is admitted marked
/// Congestion Experienced (RED would have dropped it, and the queue has
/// [`QueueConfig::ecn`], or a random loss would have, and the queue has
/// [`QueueConfig::loss_ecn`]), `Err` names why it is dropped. `fs` is the queue's entry in the side
/// table, present whenever `cfg` keeps state. Does not count the packet in.
/// Out of line: only queues with `plr`, RED, Gilbert-Elliott or 4-state
/// loss call it, so the limit-only path stays short in the pipe's enqueue.
/// A filter that drops a packet ends it: the filters after it do not see
/// it (a packet `plr` took does not move the loss chains).
#[inline(never)]
#[allow(clippy::too_many_arguments)] // the packet's fields apart: see `Pipe::refuse`
pub(crate) fn admit(
    cfg: &QueueConfig,
    q: &QueueState,
    fs: Option<&mut FilterState>,
    len: u32,
    ect: bool,
    now: Instant,
    red_unit_ns: Option<u64>,
    rngs: FilterRngs<'_>,
) -> Result<bool, DropReason> {
    let mut marked = false;
    // A loss that marks (`loss_ecn`, an ECN-capable packet) lets the packet
    // on to the next filters, as tc-netem's `ecn` does.
    let loss_marks = cfg.loss_ecn && ect;
    if cfg.plr > 0.0 && bernoulli(rngs.loss, cfg.plr) {
        if !loss_marks {
            return Err(DropReason::RandomLoss);
        }
        marked = true;
    }
    if let Some(fs) = fs {
        if let Some(ge) = &cfg.gilbert_elliott {
            if ge.step(&mut fs.ge_bad, rngs.gilbert_elliott) {
                if !loss_marks {
                    return Err(DropReason::BurstLoss);
                }
                marked = true;
            }
        }
        if let Some(ls) = &cfg.loss_state {
            if ls.step(&mut fs.loss_phase, rngs.loss_state) {
                if !loss_marks {
                    return Err(DropReason::BurstLoss);
                }
                marked = true;
            }
        }
        if let Some(red) = &cfg.red {
            // With ECN an average at or above max_th marks or drops every
            // packet, gentle or not (dummynet's `red_drops`): RED as if
            // not gentle, which it is below max_th anyway.
            let red = &Red {
                gentle: red.gentle && !cfg.ecn,
                ..*red
            };
            let bytes_unit = matches!(cfg.limit, QueueLimit::Bytes(_));
            let length = if bytes_unit {
                q.bytes
            } else {
                u64::from(q.slots)
            };
            let idle = now.saturating_nanos_since(fs.empty_since);
            if fs
                .red
                .drops(red, length, len, bytes_unit, idle, red_unit_ns, rngs.red)
            {
                if !(cfg.ecn && ect) {
                    return Err(DropReason::Red);
                }
                marked = true;
            }
        }
    }
    if cfg.full(q, len) {
        return Err(DropReason::FlowLimit);
    }
    Ok(marked)
}
