//! dummynet's user model as plain data: scheds, pipes, queues (flowsets),
//! lookup tables and rules, plus pspat's netem-like extensions (jitter with a
//! distribution, reordering, Gilbert-Elliott and 4-state loss, duplication,
//! one seed).
//!
//! A [`Config`] holds what a file says, as written: unset parameters are
//! `None` and take dummynet's defaults only when [`Config::validate`] resolves
//! them into a [`crate::Plan`]. Objects keep the order of the file. A
//! [`SourceMap`] remembers where each value was written so that validation
//! errors can name the line, column and token; it takes no part in equality.
//!
//! Semantics follow `ipfw(8)` (FreeBSD, and the Linux/Windows port of
//! dummynet): a pipe is a link (`bw`, `delay`) with a FIFO scheduler and one
//! queue; a queue is a flowset whose `mask` splits traffic into dynamic
//! queues sharing its parameters; a sched is a scheduler `type` on a link
//! whose `mask` creates independent instances.

use std::collections::HashMap;

use pspat_sched::AlgKind;
use serde::{Deserialize, Serialize};

use crate::error::Pos;
use crate::header::TcpFlags;
use crate::mask::FlowMask;
use crate::net::{AddrMatch, PortRange, Prefix};
use crate::units::QueueLimit;

/// The distribution of the delay jitter (`distribution uniform|normal|pareto`,
/// as tc-netem(8)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Distribution {
    /// Uniform in `[-jitter, +jitter]`.
    #[default]
    Uniform,
    /// Normal with standard deviation `jitter`.
    Normal,
    /// Pareto with scale `jitter` (a heavy tail).
    Pareto,
    /// tc-netem's `paretonormal`: a quarter normal, three quarters Pareto.
    #[serde(rename = "paretonormal")]
    ParetoNormal,
}

impl Distribution {
    /// Every distribution, in the order messages list them.
    pub const ALL: [Distribution; 4] = [
        Distribution::Uniform,
        Distribution::Normal,
        Distribution::Pareto,
        Distribution::ParetoNormal,
    ];

    /// The keyword.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::Normal => "normal",
            Distribution::Pareto => "pareto",
            Distribution::ParetoNormal => "paretonormal",
        }
    }

    /// Every keyword, as messages list them (`uniform, normal, ...`).
    pub fn names() -> String {
        Self::ALL.map(Distribution::name).join(", ")
    }

    /// Looks a distribution up by its keyword.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// The time between two transmission slots (`slot MIN [MAX]` or `slot
/// distribution D DELAY JITTER`, as tc-netem(8)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotInterval {
    /// Uniform between `min_us` and `max_us`.
    Uniform {
        /// Shortest interval, microseconds.
        min_us: u64,
        /// Longest interval, microseconds.
        max_us: u64,
    },
    /// `delay_us` plus a sample of `distribution` scaled by `jitter_us`.
    Distribution {
        /// The distribution.
        distribution: Distribution,
        /// Mean interval, microseconds.
        delay_us: u64,
        /// Variation, microseconds.
        jitter_us: u64,
    },
}

/// tc-netem's transmission slots (`slot ... [packets N] [bytes N]`): packets
/// leave the link's delay only when a slot opens, at most `packets` packets
/// and `bytes` bytes a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlotParams {
    /// Time between slots.
    pub interval: SlotInterval,
    /// Packets a slot carries at most (`None`: any number).
    pub packets: Option<u32>,
    /// Bytes a slot carries at most (`None`: any number).
    pub bytes: Option<u64>,
}

impl SlotParams {
    /// Whether the slots change nothing: an interval that is always 0
    /// (`slot 0`, which is how a running pipe's slots are turned off).
    pub fn is_off(&self) -> bool {
        matches!(
            self.interval,
            SlotInterval::Uniform { max_us: 0, .. }
                | SlotInterval::Distribution {
                    delay_us: 0,
                    jitter_us: 0,
                    ..
                }
        )
    }
}

/// The link half of a sched or pipe: rate, delay and their impairments.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkParams {
    /// `bw`: bit/s; 0 is unlimited.
    pub bw: Option<u64>,
    /// `delay`: propagation delay in microseconds.
    pub delay_us: Option<u64>,
    /// `burst`: bytes that may leave at full speed after an idle period.
    pub burst: Option<u64>,
    /// `profile`: the file of an empirical delay/loss profile.
    pub profile: Option<String>,
    /// `jitter`: delay variation in microseconds (pspat, after tc-netem).
    pub jitter_us: Option<u64>,
    /// `distribution` of the jitter (pspat; default uniform).
    pub distribution: Option<Distribution>,
    /// `correlation` of successive jitter samples, 0..=1 (pspat, as
    /// tc-netem's `delay D J C`; the distribution is kept).
    pub jitter_correlation: Option<f64>,
    /// `reorder`: let jitter reorder packets; without it a packet never leaves
    /// before the one in front of it (pspat). Set too by `reorder P`.
    pub reorder: bool,
    /// `reorder P` (tc-netem's): the probability that a candidate packet
    /// skips the delay and leaves ahead of those still delayed (pspat).
    pub reorder_probability: Option<f64>,
    /// `reorder P C`: the correlation of successive candidates' decisions,
    /// 0..1 (pspat; a two-state chain, `pspat_sched::pipe::NetemReorder`).
    pub reorder_correlation: Option<f64>,
    /// `gap N` after `reorder P`: every N-th packet is a candidate
    /// (default 1, every packet).
    pub reorder_gap: Option<u32>,
    /// `packetoverhead`: bytes added to each packet's length on the link
    /// (pspat, as tc-netem's `rate`; may be negative).
    pub packet_overhead: Option<i32>,
    /// `cellsize`: the link carries whole cells of this payload (pspat).
    pub cell_size: Option<u32>,
    /// `celloverhead`: bytes added to each cell (pspat; needs `cellsize`).
    pub cell_overhead: Option<u32>,
    /// `slot`: tc-netem's transmission slots (pspat).
    pub slot: Option<SlotParams>,
}

/// RED or gentle RED (`red | gred w_q/min_th/max_th/max_p`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Red {
    /// `gred`: gentle RED (drop probability rises to 1 between max_th and 2·max_th).
    pub gentle: bool,
    /// Weight of the average queue length, in (0, 1].
    pub w_q: f64,
    /// Minimum threshold, in the queue's unit (slots or bytes).
    pub min_th: u32,
    /// Maximum threshold, in the queue's unit.
    pub max_th: u32,
    /// Drop probability at max_th, in (0, 1].
    pub max_p: f64,
}

/// dummynet's CoDel AQM on a queue (`codel [target TIME] [interval TIME]
/// [ecn | noecn]`, RFC 8289): packets leaving the queue are dropped, or
/// with `ecn` marked, once their queueing delay has stayed above `target`
/// for an `interval`. The parsers fill in the defaults of the values not
/// given (5 ms, 100 ms, no ECN), so the model always holds all three and
/// prints both times.
///
/// # Examples
/// ```
/// use pspat_config::{parse_ipfw, Codel};
/// let cfg = parse_ipfw("pipe 1 config codel target 2ms ecn", "x").unwrap();
/// let c = cfg.pipes[0].queue.codel.unwrap();
/// assert_eq!(c, Codel { target_us: 2_000, ecn: true, ..Codel::default() });
/// assert_eq!(c.interval_us, Codel::DEFAULT_INTERVAL_US);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Codel {
    /// `target`: the queueing delay tolerated as a standing queue, µs.
    pub target_us: u64,
    /// `interval`: how long the delay must stay above `target` before the
    /// first drop, and the base of the gap between drops, µs.
    pub interval_us: u64,
    /// `ecn` (after `codel`): mark ECN-capable packets Congestion
    /// Experienced instead of dropping them; `noecn`, the default, drops.
    pub ecn: bool,
}

impl Codel {
    /// dummynet's and RFC 8289's default target, 5 ms.
    pub const DEFAULT_TARGET_US: u64 = 5_000;
    /// dummynet's and RFC 8289's default interval, 100 ms.
    pub const DEFAULT_INTERVAL_US: u64 = 100_000;
    /// The longest target or interval validation accepts: one hour, the
    /// core's [`pspat_sched::pipe::Codel::MAX_NS`].
    pub const MAX_US: u64 = pspat_sched::pipe::Codel::MAX_NS / 1_000;
}

impl Default for Codel {
    fn default() -> Self {
        Codel {
            target_us: Self::DEFAULT_TARGET_US,
            interval_us: Self::DEFAULT_INTERVAL_US,
            ecn: false,
        }
    }
}

/// FreeBSD dummynet's `fq_codel` scheduler type (`sched N config type
/// fq_codel [target TIME] [interval TIME] [ecn | noecn] [quantum BYTES]
/// [limit PACKETS] [flows N]`, the one pfSense's limiters offer): flow
/// queueing after RFC 8290 with CoDel on every flow. A sched with it has
/// the type [`AlgKind::Fq`]. The parsers fill in dummynet's defaults of the
/// values not given ([`FqCodel::default`]: 5 ms, 100 ms, ECN on, 1514
/// bytes, 10240 packets, 1024 flows), so the model always holds all six
/// and prints them all; validation refuses values outside dummynet's
/// ranges ([`FqCodel::QUANTUM`], [`FqCodel::LIMIT`], [`FqCodel::FLOWS`],
/// and the times of [`Codel`]) instead of clamping them.
///
/// pspat builds it from its own parts: each flowset of the sched gets
/// `mask all` unless it has a mask, at most `flows` dynamic queues,
/// `codel` with the sched's times and `ecn` unless it has an AQM, and
/// `limit` slots unless it has a `queue` size; the scheduler is
/// [`AlgKind::Fq`] with the sched's `quantum`, and `limit` bounds the
/// packets of all the flows of an instance together (docs/CONFIG.md).
///
/// # Examples
/// ```
/// use pspat_config::{parse_ipfw, Codel, FqCodel};
/// use pspat_sched::AlgKind;
/// let cfg = parse_ipfw(
///     "sched 1 config type fq_codel target 2ms flows 256 noecn bw 10Mbit/s",
///     "x",
/// )
/// .unwrap();
/// let s = &cfg.scheds[0];
/// assert_eq!(s.alg, Some(AlgKind::Fq));
/// assert_eq!(s.link.bw, Some(10_000_000));
/// let f = s.fq_codel.unwrap();
/// assert_eq!(f.codel, Codel { target_us: 2_000, interval_us: 100_000, ecn: false });
/// assert_eq!((f.quantum, f.limit, f.flows), (1514, 10_240, 256));
/// assert_eq!(FqCodel::default().codel.ecn, true, "ECN is on unless noecn");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FqCodel {
    /// `target`, `interval` and `ecn`/`noecn`: the CoDel of every flow.
    pub codel: Codel,
    /// `quantum`: bytes a flow may send per round (a flow of the smallest
    /// weight; the others in proportion to their weights).
    pub quantum: u32,
    /// `limit`: packets the flows of one sched instance hold in all.
    pub limit: u32,
    /// `flows`: dynamic queues (flows) a flowset of the sched holds at once.
    pub flows: u32,
}

impl FqCodel {
    /// dummynet's default quantum, 1514 bytes (the core's
    /// [`pspat_sched::fq::DEFAULT_QUANTUM`]).
    pub const DEFAULT_QUANTUM: u32 = pspat_sched::fq::DEFAULT_QUANTUM;
    /// dummynet's default limit, 10240 packets.
    pub const DEFAULT_LIMIT: u32 = 10_240;
    /// dummynet's default number of flows, 1024.
    pub const DEFAULT_FLOWS: u32 = 1_024;
    /// The quanta validation accepts (dummynet's kernel clamps to these).
    pub const QUANTUM: std::ops::RangeInclusive<u32> = 1..=9_000;
    /// The limits validation accepts (dummynet's kernel clamps to these).
    pub const LIMIT: std::ops::RangeInclusive<u32> = 1..=20_480;
    /// The numbers of flows validation accepts (dummynet's kernel clamps
    /// to these).
    pub const FLOWS: std::ops::RangeInclusive<u32> = 1..=65_536;
}

impl Default for FqCodel {
    /// dummynet's defaults: CoDel with a 5 ms target, a 100 ms interval and
    /// ECN on (unlike the `codel` word of a queue, whose default is
    /// `noecn`), a quantum of 1514 bytes, 10240 packets, 1024 flows.
    fn default() -> Self {
        FqCodel {
            codel: Codel {
                ecn: true,
                ..Codel::default()
            },
            quantum: Self::DEFAULT_QUANTUM,
            limit: Self::DEFAULT_LIMIT,
            flows: Self::DEFAULT_FLOWS,
        }
    }
}

/// dummynet's PIE AQM on a queue (`pie [target TIME] [tupdate TIME]
/// [alpha A] [beta B] [max_burst TIME] [max_ecnth P] [ecn | noecn]
/// [capdrop | nocapdrop] [derand | noderand] [onoff | noonoff] [dre |
/// ts]`, RFC 8033; FreeBSD's `sbin/ipfw/dummynet.c` and
/// `sys/netpfil/ipfw/dn_aqm_pie.c`): arriving packets are dropped, or with
/// `ecn` marked, with a probability updated every `tupdate` from the
/// queueing delay's distance to `target` and its trend. The parsers fill
/// in dummynet's defaults of the values not given ([`Pie::default`]), so
/// the model always holds every parameter and prints them all; validation
/// refuses values outside dummynet's ranges instead of clamping them.
/// `noonoff` is pspat's word for dummynet's default (no `onoff`).
///
/// # Examples
/// ```
/// use pspat_config::{parse_ipfw, Pie};
/// let cfg = parse_ipfw("pipe 1 config pie target 5ms alpha 0.25 ts", "x").unwrap();
/// let p = cfg.pipes[0].queue.pie.unwrap();
/// assert_eq!(p, Pie { target_us: 5_000, alpha: 0.25, dre: false, ..Pie::default() });
/// assert_eq!((p.tupdate_us, p.max_burst_us, p.max_ecnth), (15_000, 150_000, 0.1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pie {
    /// `target`: the queueing delay PIE steers to, µs (15 ms).
    pub target_us: u64,
    /// `tupdate`: the period of the probability's update, µs (15 ms).
    pub tupdate_us: u64,
    /// `alpha`: weight of the delay's distance from target (0.125).
    pub alpha: f64,
    /// `beta`: weight of the delay's change since the last update (1.25).
    pub beta: f64,
    /// `max_burst`: the burst let through before PIE drops, µs (150 ms).
    pub max_burst_us: u64,
    /// `max_ecnth`: with `ecn`, the probability below which packets are
    /// marked rather than dropped (0.1).
    pub max_ecnth: f64,
    /// `ecn` | `noecn` (the default for `pie`; `fq_pie`'s is `ecn`).
    pub ecn: bool,
    /// `capdrop` (the default) | `nocapdrop`: cap a rise of the
    /// probability at 0.02 once it is at or above 0.1.
    pub capdrop: bool,
    /// `derand` (the default) | `noderand`: derandomise the drops.
    pub derand: bool,
    /// `onoff` | `noonoff` (the default): PIE off while the queue is short.
    pub onoff: bool,
    /// `dre` (the default for `pie`) | `ts` (`fq_pie`'s default): the delay
    /// from the departure rate or from the packets' enqueue times.
    pub dre: bool,
}

impl Pie {
    /// The shortest `target` or `tupdate`, 1 µs (dummynet's).
    pub const MIN_US: u64 = pspat_sched::pipe::Pie::MIN_NS / 1_000;
    /// The longest `target`, `tupdate` or `max_burst`, 10 s (dummynet's).
    pub const MAX_US: u64 = pspat_sched::pipe::Pie::MAX_NS / 1_000;
    /// The longest `target`, `tupdate` or `max_burst` of an `fq_pie`
    /// sched, 5 s (dummynet's `fq_pie_config` bounds its times so).
    pub const FQ_MAX_US: u64 = 5_000_000;
    /// The largest `alpha` or `beta` (dummynet's).
    pub const MAX_GAIN: f64 = pspat_sched::pipe::Pie::MAX_GAIN;

    /// dummynet's `fq_pie` defaults: as [`Pie::default`] with `ecn` and
    /// `ts`.
    pub fn fq_default() -> Self {
        Pie {
            ecn: true,
            dre: false,
            ..Pie::default()
        }
    }
}

impl Default for Pie {
    /// dummynet's `pie` defaults: 15 ms, 15 ms, 0.125, 1.25, 150 ms, 0.1,
    /// `noecn capdrop derand noonoff dre`.
    fn default() -> Self {
        Pie {
            target_us: 15_000,
            tupdate_us: 15_000,
            alpha: 0.125,
            beta: 1.25,
            max_burst_us: 150_000,
            max_ecnth: 0.1,
            ecn: false,
            capdrop: true,
            derand: true,
            onoff: false,
            dre: true,
        }
    }
}

/// FreeBSD dummynet's `fq_pie` scheduler type (`sched N config type fq_pie
/// [PIE's parameters] [quantum BYTES] [limit PACKETS] [flows N]`;
/// `sys/netpfil/ipfw/dn_sched_fq_pie.c`): flow queueing with PIE on every
/// flow, built as [`FqCodel`] is, with PIE in CoDel's place. The parsers
/// fill in dummynet's defaults ([`FqPie::default`]: [`Pie::fq_default`],
/// 1514 bytes, 10240 packets, 1024 flows); the ranges are
/// [`FqCodel`]'s and [`Pie`]'s.
///
/// # Examples
/// ```
/// use pspat_config::{parse_ipfw, FqPie, Pie};
/// use pspat_sched::AlgKind;
/// let cfg = parse_ipfw("sched 1 config type fq_pie target 10ms flows 256 bw 10Mbit/s", "x").unwrap();
/// let s = &cfg.scheds[0];
/// assert_eq!(s.alg, Some(AlgKind::Fq));
/// let f = s.fq_pie.unwrap();
/// assert_eq!(f.pie, Pie { target_us: 10_000, ..Pie::fq_default() });
/// assert_eq!((f.quantum, f.limit, f.flows), (1514, 10_240, 256));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct FqPie {
    /// PIE's parameters: the PIE of every flow.
    pub pie: Pie,
    /// `quantum`: bytes a flow may send per round.
    pub quantum: u32,
    /// `limit`: packets the flows of one sched instance hold in all.
    pub limit: u32,
    /// `flows`: dynamic queues (flows) a flowset of the sched holds at once.
    pub flows: u32,
}

impl Default for FqPie {
    fn default() -> Self {
        FqPie {
            pie: Pie::fq_default(),
            quantum: FqCodel::DEFAULT_QUANTUM,
            limit: FqCodel::DEFAULT_LIMIT,
            flows: FqCodel::DEFAULT_FLOWS,
        }
    }
}

/// Gilbert-Elliott loss (`gemodel p r 1-h 1-k`, as tc-netem(8)).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GilbertElliott {
    /// Probability of moving from the good to the bad state.
    pub p: f64,
    /// Probability of moving from the bad to the good state.
    pub r: f64,
    /// Loss probability in the bad state (1-h).
    pub one_minus_h: f64,
    /// Loss probability in the good state (1-k).
    pub one_minus_k: f64,
}

impl GilbertElliott {
    /// The model of `gemodel p` with the values left out at tc-netem's
    /// defaults (iproute2's `loss gemodel`): `r = 1 − p`, `1-h = 1` (every
    /// packet in the bad state lost), `1-k = 0` (none in the good state).
    ///
    /// # Examples
    /// ```
    /// use pspat_config::GilbertElliott;
    /// let m = GilbertElliott::with_defaults(0.01);
    /// assert_eq!((m.r, m.one_minus_h, m.one_minus_k), (0.99, 1.0, 0.0));
    /// ```
    pub fn with_defaults(p: f64) -> Self {
        GilbertElliott {
            p,
            r: (1.0 - p).clamp(0.0, 1.0),
            one_minus_h: 1.0,
            one_minus_k: 0.0,
        }
    }
}

/// The 4-state loss model (`lossstate p13 [p31 [p32 [p23 [p14]]]]`, as
/// tc-netem(8)'s `loss state`): the parsers fill in the defaults of the
/// values not given (`p31 = 1 − p13`, `p32 = 0`, `p23 = 1`, `p14 = 0`),
/// so the model always holds all five and prints them all.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossState {
    /// Gap (1) → lost in a burst (3).
    pub p13: f64,
    /// Lost in a burst (3) → gap (1).
    pub p31: f64,
    /// Lost in a burst (3) → sent in a burst (2).
    pub p32: f64,
    /// Sent in a burst (2) → lost in a burst (3).
    pub p23: f64,
    /// Gap (1) → isolated loss (4).
    pub p14: f64,
}

impl LossState {
    /// The model with the defaults of tc-netem's `loss state P13`:
    /// `p31 = 1 − p13` (kept within 0..=1, so that an out-of-range `p13`
    /// is the one value reported), `p32 = 0`, `p23 = 1`, `p14 = 0`.
    ///
    /// # Examples
    /// ```
    /// use pspat_config::LossState;
    /// let m = LossState::with_defaults(0.01);
    /// assert_eq!((m.p31, m.p32, m.p23, m.p14), (0.99, 0.0, 1.0, 0.0));
    /// ```
    pub fn with_defaults(p13: f64) -> Self {
        LossState {
            p13,
            p31: (1.0 - p13).clamp(0.0, 1.0),
            p32: 0.0,
            p23: 1.0,
            p14: 0.0,
        }
    }
}

/// The queue half of a pipe or queue: limits, loss and drop policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueParams {
    /// `queue`: slots or bytes (default 50 slots).
    pub limit: Option<QueueLimit>,
    /// `plr`: random loss probability, 0..=1.
    pub plr: Option<f64>,
    /// `red`/`gred`; `None` is drop-tail (`droptail`), or CoDel.
    pub red: Option<Red>,
    /// `codel`: dummynet's CoDel AQM; never with `red`/`gred` (a queue has
    /// one AQM: the parsers refuse both on one line, validation both in a
    /// model built otherwise).
    #[serde(default)]
    pub codel: Option<Codel>,
    /// `pie`: dummynet's PIE AQM; never with `red`/`gred` or `codel`.
    #[serde(default)]
    pub pie: Option<Pie>,
    /// `buckets`: hash size for dynamic queues (default 64).
    pub buckets: Option<u32>,
    /// `noerror`: do not report drops to the sender.
    pub noerror: bool,
    /// `ecn` (dummynet's): with `red`/`gred`, an ECN-capable packet that
    /// RED would drop is queued marked Congestion Experienced instead;
    /// validation refuses it without `red`/`gred`.
    #[serde(default)]
    pub ecn: bool,
    /// `lossecn` (pspat, tc-netem's `ecn`): an ECN-capable packet that a
    /// random loss (`plr`, `gemodel`, `lossstate`) would drop is queued
    /// marked Congestion Experienced instead; validation refuses it
    /// without a random loss ([`QueueParams::random_loss`]).
    #[serde(default)]
    pub lossecn: bool,
    /// `gemodel`: Gilbert-Elliott loss (pspat).
    pub gemodel: Option<GilbertElliott>,
    /// `lossstate`: the 4-state loss model (pspat); not with `gemodel`.
    pub lossstate: Option<LossState>,
    /// `duplicate`: probability that a packet is sent twice (pspat).
    pub duplicate: Option<f64>,
    /// `duplicate P C`: the correlation of successive packets' duplication,
    /// 0..1 (pspat; a two-state chain per queue).
    pub duplicate_correlation: Option<f64>,
    /// `corrupt`: probability that a packet leaves with one bit flipped
    /// (pspat, as tc-netem).
    pub corrupt: Option<f64>,
    /// `corrupt P C`: the correlation of successive packets' corruption,
    /// 0..1 (pspat; a two-state chain per queue).
    pub corrupt_correlation: Option<f64>,
}

impl QueueParams {
    /// Whether the queue has a random loss for `lossecn` to mark instead:
    /// a `plr` above 0 (`plr 0` is none), a `gemodel` or a `lossstate`.
    ///
    /// # Examples
    /// ```
    /// use pspat_config::QueueParams;
    /// let mut q = QueueParams { plr: Some(0.0), ..QueueParams::default() };
    /// assert!(!q.random_loss());
    /// q.plr = Some(0.01);
    /// assert!(q.random_loss());
    /// ```
    pub fn random_loss(&self) -> bool {
        self.plr.is_some_and(|p| p > 0.0) || self.gemodel.is_some() || self.lossstate.is_some()
    }
}

/// `sched N config ...`: a scheduler on a link.
#[derive(Clone, Debug, PartialEq)]
pub struct Sched {
    /// The number, shared with pipes (a pipe N is sched N plus a FIFO).
    pub number: u32,
    /// `type` (default WF2Q+, as dummynet); [`AlgKind::Fq`] with
    /// `fq_codel`.
    pub alg: Option<AlgKind>,
    /// `type fq_codel` and its parameters; `None` for every other type
    /// (validation refuses it with a type other than [`AlgKind::Fq`]).
    pub fq_codel: Option<FqCodel>,
    /// `type fq_pie` and its parameters; `None` for every other type
    /// (validation refuses it with a type other than [`AlgKind::Fq`], or
    /// with `fq_codel`).
    pub fq_pie: Option<FqPie>,
    /// The link.
    pub link: LinkParams,
    /// `mask`: one scheduler instance per masked value.
    pub mask: FlowMask,
    /// `buckets`: hash size for instances (default 64).
    pub buckets: Option<u32>,
}

/// `pipe N config ...`: a link with a scheduler (FIFO unless `type` says
/// otherwise) over the pipe's own queue and the flowsets attached to it.
#[derive(Clone, Debug, PartialEq)]
pub struct Pipe {
    /// The number, shared with scheds.
    pub number: u32,
    /// `type`, as on a sched; `None` is the pipe's default, FIFO.
    /// [`AlgKind::Fq`] with `fq_codel` or `fq_pie`.
    pub alg: Option<AlgKind>,
    /// `type fq_codel` and its parameters, as [`Sched::fq_codel`]: lowered
    /// onto the flowsets attached to the pipe; the pipe's own queue is one
    /// flow of the FQ.
    pub fq_codel: Option<FqCodel>,
    /// `type fq_pie` and its parameters, as [`Sched::fq_pie`].
    pub fq_pie: Option<FqPie>,
    /// The link.
    pub link: LinkParams,
    /// The queue.
    pub queue: QueueParams,
    /// `mask`: one pipe instance (the whole bandwidth each) per masked value.
    pub mask: FlowMask,
}

/// What a queue feeds: `sched M` or, in dummynet's older syntax, `pipe M`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Parent {
    /// `sched M`: a sched, or the scheduler of pipe M.
    Sched(u32),
    /// `pipe M`: the scheduler of pipe M.
    Pipe(u32),
}

impl Parent {
    /// The number in the shared sched/pipe space.
    pub fn number(self) -> u32 {
        match self {
            Parent::Sched(n) | Parent::Pipe(n) => n,
        }
    }
}

/// `queue N config ...`: a flowset, a template for per-flow queues.
#[derive(Clone, Debug, PartialEq)]
pub struct Queue {
    /// The number.
    pub number: u32,
    /// `sched M` / `pipe M`.
    pub parent: Option<Parent>,
    /// `weight` (default 1).
    pub weight: Option<u32>,
    /// `lmax`: largest packet, bytes (default 1500).
    pub lmax: Option<u32>,
    /// `pri`: strict priority for PRIO, 0 (highest) ..= 63.
    pub pri: Option<u32>,
    /// The queue parameters.
    pub params: QueueParams,
    /// `mask`: one dynamic queue per masked value.
    pub mask: FlowMask,
}

/// Where a rule sends matching packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// A fixed number.
    Number(u32),
    /// The value of the table entry that matched (`tablearg`).
    Tablearg,
}

/// A rule's action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// `pipe N | tablearg`.
    Pipe(Target),
    /// `queue N | tablearg`.
    Queue(Target),
    /// `allow` (also `accept`, `pass`, `permit`): bypass shaping.
    Allow,
    /// `deny` (also `drop`): drop.
    Deny,
}

/// The protocol a rule matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Proto {
    /// `ip` (also `all`): IPv4 and IPv6, any protocol.
    #[default]
    Ip,
    /// `ip4` (also `ipv4`).
    Ip4,
    /// `ip6` (also `ipv6`).
    Ip6,
    /// `tcp`.
    Tcp,
    /// `udp`.
    Udp,
    /// `icmp`.
    Icmp,
}

impl Proto {
    /// The normal keyword.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Ip => "ip",
            Proto::Ip4 => "ip4",
            Proto::Ip6 => "ip6",
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Icmp => "icmp",
        }
    }

    /// Looks a protocol up by keyword or alias.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "ip" | "all" => Proto::Ip,
            "ip4" | "ipv4" => Proto::Ip4,
            "ip6" | "ipv6" => Proto::Ip6,
            "tcp" => Proto::Tcp,
            "udp" => Proto::Udp,
            "icmp" => Proto::Icmp,
            _ => return None,
        })
    }
}

/// The direction a rule matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Both.
    #[default]
    Any,
    /// `in`: packets received.
    In,
    /// `out`: packets sent.
    Out,
}

/// How a rule names an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterfaceRole {
    /// `via`: received or sent on it.
    Via,
    /// `recv`: received on it.
    Recv,
    /// `xmit`: sent on it.
    Xmit,
}

impl InterfaceRole {
    /// The keyword.
    pub fn name(self) -> &'static str {
        match self {
            InterfaceRole::Via => "via",
            InterfaceRole::Recv => "recv",
            InterfaceRole::Xmit => "xmit",
        }
    }
}

/// An interface match (`via eth0`, `not recv eth0`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InterfaceMatch {
    /// `via`, `recv` or `xmit`.
    pub role: InterfaceRole,
    /// The interface name (at most 15 bytes; `*` is a wildcard as in ipfw).
    pub name: String,
    /// `not via|recv|xmit IF`: every packet the positive test refuses, as
    /// ipfw (`not xmit eth0` matches every received packet and every packet
    /// sent on another interface).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub negated: bool,
}

/// `add [N] ACTION [[not] PROTO] from SRC to DST [options]`.
///
/// `not` before the protocol, a port option or an interface option sets the
/// matching `*_negated` flag (`not udp`, `not dst-port 80,443`, `not via
/// eth0`); before an address it is part of the [`AddrMatch`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Rule {
    /// The number; `None` takes the previous rule's number plus 100, as ipfw.
    pub number: Option<u32>,
    /// What to do with matching packets.
    pub action: Action,
    /// The protocol.
    pub proto: Proto,
    /// `not PROTO`: every packet the protocol refuses (`not udp`: TCP,
    /// ICMP, any other protocol). Never set with [`Proto::Ip`], whose
    /// negation would match nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub proto_negated: bool,
    /// Source addresses.
    pub src: AddrMatch,
    /// Destination addresses.
    pub dst: AddrMatch,
    /// `src-port`: empty matches any.
    pub src_ports: Vec<PortRange>,
    /// `not src-port LIST`: a TCP or UDP packet whose source port is in
    /// none of the ranges, and every packet of another protocol (as ipfw,
    /// where the port test fails on a packet without ports before `not`
    /// inverts it). Ignored while `src_ports` is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub src_ports_negated: bool,
    /// `dst-port`: empty matches any.
    pub dst_ports: Vec<PortRange>,
    /// `not dst-port LIST`: as [`Rule::src_ports_negated`], for the
    /// destination port.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dst_ports_negated: bool,
    /// `in`/`out` (`not in` is `out`, `not out` is `in`, as ipfw compiles them).
    pub direction: Direction,
    /// `via`/`recv`/`xmit`, negated or not.
    pub interface: Option<InterfaceMatch>,
    /// `dscp LIST`: the DiffServ code points (0..=63, ascending, no
    /// repeats) of which the packet's must be one; empty matches any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dscp: Vec<u8>,
    /// `not dscp LIST`: the packet's code point is none of the list's.
    /// Ignored while `dscp` is empty; a list of all 64 code points cannot be
    /// negated (it would match no packet).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dscp_negated: bool,
    /// `iplen LIST`: the packet's IP length must be in one of the ranges
    /// (module [`crate::header`]); empty matches any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_len: Vec<PortRange>,
    /// `not iplen LIST`: the length is in none of them. Ignored while
    /// `ip_len` is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ip_len_negated: bool,
    /// `tcpflags SPEC` (and `setup`, which is `syn,!ack`): a TCP packet
    /// whose flags meet it; `None` matches any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_flags: Option<TcpFlags>,
    /// `not tcpflags SPEC`: every packet the positive test refuses, those
    /// of other protocols included. Ignored without `tcp_flags`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tcp_flags_negated: bool,
    /// `established`: a TCP packet with `ack` or `rst` set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub established: bool,
    /// `not established`: every other packet, those of other protocols
    /// included. Ignored without `established`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub established_negated: bool,
    /// `prob P` before the action (ipfw's): a packet the rule's conditions
    /// admit matches with probability P, in (0, 1]; otherwise the next
    /// rules are tried. `None` matches every such packet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prob: Option<MatchProbability>,
    /// `// TEXT` at the end of the line (ipfw's rule comment): its words,
    /// one space apart, at most 80 bytes, no `#` or control character.
    /// Shown with the rule; it matches nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// A rule's `prob`: a probability in (0, 1] (checked where it is read).
/// Equal and hashed by its bits, so that a rule stays `Eq` and `Hash`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MatchProbability(pub f64);

impl PartialEq for MatchProbability {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for MatchProbability {}

impl std::hash::Hash for MatchProbability {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

/// One entry of a lookup table (`table N add PREFIX VALUE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TableEntry {
    /// The prefix.
    pub prefix: Prefix,
    /// The value (`tablearg`), default 0.
    pub value: u32,
}

/// A lookup table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// The table number.
    pub number: u32,
    /// Entries in the order written.
    pub entries: Vec<TableEntry>,
}

/// What happens to packets no rule matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DefaultAction {
    /// Pass unshaped (pspat's default: a bump in the wire).
    #[default]
    Allow,
    /// Drop.
    Deny,
}

/// A whole configuration, as written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    /// `sched N config`, in file order.
    pub scheds: Vec<Sched>,
    /// `pipe N config`, in file order.
    pub pipes: Vec<Pipe>,
    /// `queue N config`, in file order.
    pub queues: Vec<Queue>,
    /// Tables, in the order their first entry appears.
    pub tables: Vec<Table>,
    /// Rules, in file order.
    pub rules: Vec<Rule>,
    /// `default allow|deny` (pspat).
    pub default_action: DefaultAction,
    /// `seed N`: the seed of every random draw (loss, jitter, RED) (pspat).
    pub seed: Option<u64>,
    /// Where each value was written; not part of the model's value.
    pub sources: SourceMap,
}

/// The kinds of object a [`Site`] can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteKind {
    /// An entry of [`Config::scheds`].
    Sched,
    /// An entry of [`Config::pipes`].
    Pipe,
    /// An entry of [`Config::queues`].
    Queue,
    /// An entry of [`Config::rules`].
    Rule,
    /// An entry of [`Config::tables`] (`sub` is the entry index).
    Table,
    /// `default` and `seed`.
    Global,
}

/// A value's address in a [`Config`]: object kind, index, sub-index, field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Site {
    /// Which list.
    pub kind: SiteKind,
    /// Index in that list.
    pub index: usize,
    /// Index inside the object (table entries); 0 otherwise.
    pub sub: usize,
    /// The keyword (`"bw"`, `"number"`, `"gemodel.p"`...).
    pub field: &'static str,
}

/// Where the values of a [`Config`] were written. Always equal to any other
/// `SourceMap`: positions are not part of a model's value.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    /// The file the configuration came from.
    pub file: String,
    positions: HashMap<Site, Pos>,
}

impl PartialEq for SourceMap {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl SourceMap {
    /// An empty map for `file`.
    pub fn new(file: impl Into<String>) -> Self {
        SourceMap {
            file: file.into(),
            positions: HashMap::new(),
        }
    }

    /// Records where a value was written.
    pub fn insert(&mut self, site: Site, pos: Pos) {
        self.positions.insert(site, pos);
    }

    /// Where a value was written, or `None` for a model built in code.
    pub fn get(&self, site: &Site) -> Option<&Pos> {
        self.positions.get(site)
    }

    /// Every recorded position, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Site, &Pos)> + '_ {
        self.positions.iter()
    }
}
