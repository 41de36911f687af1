//! The enqueue filters of a pipe's queue: random loss (`plr`),
//! Gilbert-Elliott loss, RED / gentle RED, and the queue limit in slots or
//! bytes, applied in that order (dummynet's `dn_enqueue`: plr, then RED,
//! then the limit; Gilbert-Elliott, a pspat extension, sits with plr).
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
//! O(1) per packet (the idle decay takes O(log t) multiplications, t < 256).
//! A queue whose configuration has no `plr`, RED or Gilbert-Elliott (known
//! when the configuration is installed) only compares its length with its
//! limit. RED and Gilbert-Elliott state lives in a side table of 40 bytes a
//! queue, allocated only once some queue of the pipe configures one of them.

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

/// Checks that `p` is a probability (NaN refused).
pub(crate) fn check_probability(what: &str, p: f64) -> Result<(), ConfigError> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(ConfigError::out_of_range(what, p, "0..=1"))
    }
}

/// The configuration of one queue of a pipe (dummynet's flowset
/// parameters plus pspat's Gilbert-Elliott loss and duplication).
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
    /// Probability that a packet leaves twice.
    pub duplicate: f64,
    /// Probability that a packet leaves with one bit of it flipped
    /// (`corrupt`, as tc-netem): the pipe marks the packet
    /// ([`crate::Packet::CORRUPT_BIT`]) and whoever holds its bytes flips
    /// the bit.
    pub corrupt: f64,
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
        if let Some(red) = &self.red {
            red.validate()?;
        }
        if let Some(ge) = &self.gilbert_elliott {
            ge.validate()?;
        }
        Ok(())
    }
}

impl QueueConfig {
    /// Whether the queue runs a filter besides its limit (`plr`, RED,
    /// Gilbert-Elliott): decided once, when the configuration is installed.
    pub(crate) fn filters(&self) -> bool {
        self.plr > 0.0 || self.keeps_state()
    }

    /// Whether the queue's filters keep state between packets (RED,
    /// Gilbert-Elliott), kept in the pipe's side table.
    pub(crate) fn keeps_state(&self) -> bool {
        self.red.is_some() || self.gilbert_elliott.is_some()
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
}

const _: () = assert!(std::mem::size_of::<QueueState>() == 16);

/// What a queue's RED and Gilbert-Elliott filters remember between
/// packets: a side table the pipe allocates only once some queue configures
/// one of them. 40 bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FilterState {
    /// RED's state.
    pub red: RedState,
    /// When the queue last became empty (RED's idle time).
    pub empty_since: Instant,
    /// Gilbert-Elliott state: true in the bad state.
    pub ge_bad: bool,
}

/// The random streams the filters draw from.
pub(crate) struct FilterRngs<'a> {
    pub loss: &'a mut Rng,
    pub gilbert_elliott: &'a mut Rng,
    pub red: &'a mut Rng,
}

/// Runs the filters of `cfg` (plr, Gilbert-Elliott, RED, then the limit)
/// for a packet of `len` bytes arriving at `now` in queue `q`; `Err` names
/// why it is dropped. `fs` is the queue's entry in the side table, present
/// whenever `cfg` keeps state. Does not count the packet in. Out of line:
/// only queues with `plr`, RED or Gilbert-Elliott call it, so the
/// limit-only path stays short in the pipe's enqueue.
#[inline(never)]
pub(crate) fn admit(
    cfg: &QueueConfig,
    q: &QueueState,
    fs: Option<&mut FilterState>,
    len: u32,
    now: Instant,
    red_unit_ns: Option<u64>,
    rngs: FilterRngs<'_>,
) -> Result<(), DropReason> {
    if cfg.plr > 0.0 && bernoulli(rngs.loss, cfg.plr) {
        return Err(DropReason::RandomLoss);
    }
    if let Some(fs) = fs {
        if let Some(ge) = &cfg.gilbert_elliott {
            if ge.step(&mut fs.ge_bad, rngs.gilbert_elliott) {
                return Err(DropReason::BurstLoss);
            }
        }
        if let Some(red) = &cfg.red {
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
                return Err(DropReason::Red);
            }
        }
    }
    if cfg.full(q, len) {
        return Err(DropReason::FlowLimit);
    }
    Ok(())
}
