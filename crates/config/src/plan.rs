//! Validation: a [`Config`] as written becomes a [`Plan`], with every default
//! resolved, every number unique, every range and every reference checked,
//! and every profile file loaded and parsed.
//!
//! Validation is all or nothing: [`Config::validate`] either returns a whole
//! plan or the error that comes first in the file (by line and column). It
//! never half applies anything, so a daemon that fails to validate a new file
//! keeps running the old plan.
//!
//! Defaults are dummynet's (`ipfw(8)`): sched type WF2Q+, 50-slot queues, 64
//! buckets, weight 1, lmax 1500, no loss; ranges are pspat-sched's
//! ([`pspat_sched::MIN_WEIGHT`]..=[`pspat_sched::MAX_WEIGHT`], priorities below
//! [`pspat_sched::PRIORITIES`], lmax up to [`pspat_sched::MAX_PACKET_LEN`],
//! a link's `bw` 0 for unlimited or in [`MIN_RATE_BPS`]..=[`MAX_RATE_BPS`]).
//! A flowset of an `fq_codel` or `fq_pie` sched takes the sched's mask
//! (`all`), CoDel or PIE, and limit where it sets none of its own (see
//! [`QueuePlan`]).
//! Rules without a number take the largest number so far plus 100, as ipfw's
//! auto-increment step; duplicate rule numbers are refused (ipfw allows them,
//! but a plan keys rules by number so that a diff can name them).

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::PathBuf;

use pspat_sched::rate::{Rate, MAX_RATE_BPS, MIN_RATE_BPS};
use pspat_sched::{AlgKind, DEFAULT_LMAX, MAX_PACKET_LEN, MAX_WEIGHT, MIN_WEIGHT, PRIORITIES};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Pos};
use crate::mask::FlowMask;
use crate::model::{
    Action, Codel, Config, DefaultAction, Direction, Distribution, FqCodel, FqPie, GilbertElliott,
    InterfaceMatch, LinkParams, LossState, Parent, Pie, Proto, Queue, QueueParams, Red, Rule, Site,
    SiteKind, SlotInterval, SlotParams, Target,
};
use crate::net::{AddrMatch, PortRange, Prefix};
use crate::profile::{parse_profile, Profile};
use crate::units::{format_time_us, QueueLimit};

/// The `schema_version` of a [`Plan`] serialised as JSON.
pub const SCHEMA_VERSION: u32 = 1;
/// The seed when the configuration sets none.
pub const DEFAULT_SEED: u64 = 1;
/// Largest delay or jitter: 60 s.
pub const MAX_DELAY_US: u64 = 60_000_000;
/// Largest queue in slots.
pub const MAX_SLOTS: u32 = 1_000_000;
/// Largest queue in bytes: 1 GiB.
pub const MAX_QUEUE_BYTES: u64 = 1 << 30;
/// Hash sizes (`buckets`), as dummynet.
pub const BUCKETS_RANGE: std::ops::RangeInclusive<u32> = 16..=65_536;
/// Numbers of pipes, queues and scheds.
pub const OBJECT_NUMBERS: std::ops::RangeInclusive<u32> = 1..=65_535;
/// Rule numbers (65535 is ipfw's default rule, see [`Config::default_action`]).
pub const RULE_NUMBERS: std::ops::RangeInclusive<u32> = 1..=65_534;
/// ipfw's rule-number auto-increment step.
pub const RULE_STEP: u32 = 100;

/// Reads profile files for [`Config::validate`]; injectable so tests need no files.
pub trait ProfileLoader {
    /// The text of the profile file `name` (as written after `profile`).
    ///
    /// # Errors
    /// The I/O error, reported at the `profile` token.
    fn load(&self, name: &str) -> io::Result<String>;
}

impl<F: Fn(&str) -> io::Result<String>> ProfileLoader for F {
    fn load(&self, name: &str) -> io::Result<String> {
        self(name)
    }
}

/// A loader for configurations without profiles: every load fails.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProfiles;

impl ProfileLoader for NoProfiles {
    fn load(&self, _name: &str) -> io::Result<String> {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no profile files are available here",
        ))
    }
}

/// Reads profile files from disk; relative names are relative to `base`
/// (normally the configuration file's directory).
#[derive(Clone, Debug, Default)]
pub struct FsProfiles {
    /// The directory relative names start from.
    pub base: PathBuf,
}

impl ProfileLoader for FsProfiles {
    fn load(&self, name: &str) -> io::Result<String> {
        // A profile may be named by a change to a running daemon: never a
        // FIFO that would wait for a writer.
        crate::read_regular_text_file(&self.base.join(name))
    }
}

/// A profile as loaded for a link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadedProfile {
    /// The file name as written.
    pub file: String,
    /// Its content.
    pub profile: Profile,
    /// [`Profile::delay_table_us`], precomputed.
    pub delay_table_us: Vec<u64>,
}

/// Serde's default for [`LinkPlan::reorder_gap`]: every packet a candidate.
fn gap_of_one() -> u32 {
    1
}

/// A resolved link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkPlan {
    /// bit/s; 0 is unlimited.
    pub bw_bps: u64,
    /// Propagation delay.
    pub delay_us: u64,
    /// Bytes that may leave at full speed after idle.
    pub burst_bytes: u64,
    /// The empirical delay profile.
    pub profile: Option<LoadedProfile>,
    /// Delay variation (0: none).
    pub jitter_us: u64,
    /// Distribution of the jitter.
    pub distribution: Distribution,
    /// Correlation of successive jitter samples (0: independent).
    #[serde(default)]
    pub jitter_correlation: f64,
    /// Whether jitter may reorder packets (true with `reorder P` too).
    pub reorder: bool,
    /// tc-netem's `reorder P`: the probability a candidate skips the delay.
    #[serde(default)]
    pub reorder_probability: Option<f64>,
    /// `reorder P C`: the correlation of successive candidates' decisions
    /// (0: independent).
    #[serde(default)]
    pub reorder_correlation: f64,
    /// Every `reorder_gap`-th packet is a candidate (1: every packet).
    #[serde(default = "gap_of_one")]
    pub reorder_gap: u32,
    /// Bytes added to each packet on the link (0: none).
    #[serde(default)]
    pub packet_overhead: i32,
    /// tc-netem's transmission slots; `None` when there are none (or
    /// `slot 0`, which turns them off).
    #[serde(default)]
    pub slot: Option<SlotParams>,
    /// Cell payload in bytes (0: no cells).
    #[serde(default)]
    pub cell_size: u32,
    /// Bytes added to each cell.
    #[serde(default)]
    pub cell_overhead: u32,
}

/// A resolved queue (the queue half of a pipe or flowset).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueSetPlan {
    /// Capacity of each (dynamic) queue.
    pub limit: QueueLimit,
    /// Random loss probability.
    pub plr: f64,
    /// RED/GRED; `None` is drop-tail, or CoDel.
    pub red: Option<Red>,
    /// dummynet's CoDel AQM (never with `red`), times within
    /// 1 µs..=[`Codel::MAX_US`].
    #[serde(default)]
    pub codel: Option<Codel>,
    /// dummynet's PIE AQM (never with `red` or `codel`), within
    /// dummynet's ranges ([`Pie`]).
    #[serde(default)]
    pub pie: Option<Pie>,
    /// Hash size for dynamic queues.
    pub buckets: u32,
    /// Do not report drops to the sender.
    pub noerror: bool,
    /// With `red`: mark ECN-capable packets Congestion Experienced instead
    /// of dropping them early (dummynet's `ecn`); only ever set with `red`.
    #[serde(default)]
    pub ecn: bool,
    /// With a random loss (`plr`, `gemodel`, `lossstate`): mark
    /// ECN-capable packets Congestion Experienced instead of dropping them
    /// (`lossecn`, tc-netem's `ecn`); only ever set with a random loss.
    #[serde(default)]
    pub lossecn: bool,
    /// Gilbert-Elliott loss.
    pub gemodel: Option<GilbertElliott>,
    /// The 4-state loss model (never with `gemodel`).
    #[serde(default)]
    pub lossstate: Option<LossState>,
    /// Duplication probability.
    pub duplicate: f64,
    /// Correlation of successive packets' duplication (0: independent).
    #[serde(default)]
    pub duplicate_correlation: f64,
    /// Corruption probability (one bit flipped).
    #[serde(default)]
    pub corrupt: f64,
    /// Correlation of successive packets' corruption (0: independent).
    #[serde(default)]
    pub corrupt_correlation: f64,
}

/// A resolved sched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchedPlan {
    /// The number.
    pub number: u32,
    /// The algorithm ([`AlgKind::Fq`] with `fq_codel`).
    pub alg: AlgKind,
    /// `type fq_codel`'s parameters, within their ranges; already lowered
    /// onto the sched's flowsets ([`QueuePlan`]), and read by the daemon
    /// for the scheduler's quantum, the limit of each instance and the
    /// flowsets' caps ([`Plan::flowset_queue_caps`]).
    #[serde(default)]
    pub fq_codel: Option<FqCodel>,
    /// `type fq_pie`'s parameters, as `fq_codel`'s are used.
    #[serde(default)]
    pub fq_pie: Option<FqPie>,
    /// The link.
    pub link: LinkPlan,
    /// Instance mask (all zero: one instance).
    pub mask: FlowMask,
    /// Hash size for instances.
    pub buckets: u32,
}

/// A resolved pipe: a scheduler (FIFO unless its `type` says otherwise)
/// over its own queue and the flowsets attached to it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipePlan {
    /// The number (in the shared sched/pipe space).
    pub number: u32,
    /// The algorithm: FIFO by default, [`AlgKind::Fq`] with `fq_codel` or
    /// `fq_pie` (a plan written before pipes took a type has none: FIFO).
    #[serde(default = "fifo")]
    pub alg: AlgKind,
    /// `type fq_codel`'s parameters, as [`SchedPlan::fq_codel`]: lowered
    /// onto the flowsets attached to the pipe; the pipe's own queue is one
    /// flow.
    #[serde(default)]
    pub fq_codel: Option<FqCodel>,
    /// `type fq_pie`'s parameters, as [`SchedPlan::fq_pie`].
    #[serde(default)]
    pub fq_pie: Option<FqPie>,
    /// The link.
    pub link: LinkPlan,
    /// The queue.
    pub queue: QueueSetPlan,
    /// Instance mask (all zero: one pipe).
    pub mask: FlowMask,
}

/// A pipe's algorithm when its plan says none.
fn fifo() -> AlgKind {
    AlgKind::Fifo
}

/// A resolved queue (flowset).
///
/// A flowset of an `fq_codel` or `fq_pie` sched holds what it runs with:
/// its own mask, AQM and `queue` size where it sets them, else the sched's
/// (validation lowers them: `mask all`, `codel` with the sched's times
/// and `ecn` or `pie` with the sched's PIE parameters, `limit` slots;
/// docs/CONFIG.md, *FQ-CoDel* and *FQ-PIE*).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueuePlan {
    /// The number.
    pub number: u32,
    /// The sched or pipe it feeds, as written; it exists in the plan.
    pub parent: Parent,
    /// Weight.
    pub weight: u32,
    /// Largest packet, bytes.
    pub lmax: u32,
    /// Strict priority (0 highest).
    pub pri: u8,
    /// The queue parameters of each dynamic queue.
    pub queue: QueueSetPlan,
    /// Flow mask (all zero: one queue).
    pub mask: FlowMask,
}

/// A resolved rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RulePlan {
    /// The number (explicit or auto-incremented).
    pub number: u32,
    /// What to do; a numeric target exists in the plan.
    pub action: Action,
    /// Protocol.
    pub proto: Proto,
    /// `not PROTO` ([`crate::Rule::proto_negated`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub proto_negated: bool,
    /// Source.
    pub src: AddrMatch,
    /// Destination.
    pub dst: AddrMatch,
    /// Source ports (empty: any).
    pub src_ports: Vec<PortRange>,
    /// `not src-port` ([`crate::Rule::src_ports_negated`]); only set with
    /// a port list.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub src_ports_negated: bool,
    /// Destination ports (empty: any).
    pub dst_ports: Vec<PortRange>,
    /// `not dst-port` ([`crate::Rule::dst_ports_negated`]); only set with
    /// a port list.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dst_ports_negated: bool,
    /// Direction.
    pub direction: Direction,
    /// Interface, negated or not.
    pub interface: Option<InterfaceMatch>,
    /// DiffServ code points ([`crate::Rule::dscp`]; empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dscp: Vec<u8>,
    /// `not dscp` ([`crate::Rule::dscp_negated`]); only set with a list.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dscp_negated: bool,
    /// IP lengths ([`crate::Rule::ip_len`]; empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_len: Vec<PortRange>,
    /// `not iplen` ([`crate::Rule::ip_len_negated`]); only set with a list.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ip_len_negated: bool,
    /// TCP flags ([`crate::Rule::tcp_flags`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_flags: Option<crate::header::TcpFlags>,
    /// `not tcpflags` ([`crate::Rule::tcp_flags_negated`]); only set with
    /// flags.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tcp_flags_negated: bool,
    /// `established` ([`crate::Rule::established`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub established: bool,
    /// `not established` ([`crate::Rule::established_negated`]); only set
    /// with `established`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub established_negated: bool,
    /// `prob` ([`crate::Rule::prob`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prob: Option<crate::model::MatchProbability>,
    /// The rule's comment ([`crate::Rule::comment`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// A validated configuration: what a daemon runs.
///
/// Pipes and scheds share one number space (a pipe N is dummynet's sched N
/// with a FIFO); queues, tables and rules have their own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Scheds by number.
    pub scheds: BTreeMap<u32, SchedPlan>,
    /// Pipes by number.
    pub pipes: BTreeMap<u32, PipePlan>,
    /// Queues by number.
    pub queues: BTreeMap<u32, QueuePlan>,
    /// Tables by number: prefix → value; a table created and left empty is
    /// here with no entries.
    pub tables: BTreeMap<u32, BTreeMap<Prefix, u32>>,
    /// Rules by number (the order they are tried in).
    pub rules: BTreeMap<u32, RulePlan>,
    /// What happens when no rule matches.
    pub default_action: DefaultAction,
    /// Seed of every random draw.
    pub seed: u64,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            schema_version: SCHEMA_VERSION,
            scheds: BTreeMap::new(),
            pipes: BTreeMap::new(),
            queues: BTreeMap::new(),
            tables: BTreeMap::new(),
            rules: BTreeMap::new(),
            default_action: DefaultAction::Allow,
            seed: DEFAULT_SEED,
        }
    }
}

impl Plan {
    /// The cap on the dynamic queues of each flowset whose sched or pipe is
    /// `fq_codel` or `fq_pie`, by queue number: its `flows` (a daemon's cap
    /// for the other flowsets is its own, `--max-queues` for `pspat run`).
    ///
    /// # Examples
    /// ```
    /// use pspat_config::{parse_ipfw, NoProfiles};
    /// let plan = parse_ipfw(
    ///     "sched 1 config type fq_codel flows 256\nqueue 2 config sched 1\n\
    ///      sched 3 config type drr\nqueue 4 config sched 3 mask all\n",
    ///     "x",
    /// )
    /// .unwrap()
    /// .validate(&NoProfiles)
    /// .unwrap();
    /// assert_eq!(plan.flowset_queue_caps(), [(2, 256)].into());
    /// ```
    pub fn flowset_queue_caps(&self) -> BTreeMap<u32, u32> {
        self.queues
            .values()
            .filter_map(|q| {
                let (fq_codel, fq_pie) = self.link_fq(q.parent)?;
                let flows = fq_codel.map(|f| f.flows).or(fq_pie.map(|f| f.flows))?;
                Some((q.number, flows))
            })
            .collect()
    }

    /// The `fq_codel` and `fq_pie` parameters of the sched or pipe a
    /// flowset feeds (`queue M config sched N` may name a pipe N); `None`
    /// when it does not exist.
    ///
    /// # Examples
    /// ```
    /// use pspat_config::{parse_ipfw, NoProfiles, Parent};
    /// let plan = parse_ipfw("pipe 1 config type fq_codel flows 64\nqueue 2 config pipe 1\n", "x")
    ///     .unwrap()
    ///     .validate(&NoProfiles)
    ///     .unwrap();
    /// let (fq_codel, fq_pie) = plan.link_fq(Parent::Pipe(1)).unwrap();
    /// assert_eq!((fq_codel.unwrap().flows, fq_pie), (64, None));
    /// ```
    pub fn link_fq(&self, parent: Parent) -> Option<(Option<FqCodel>, Option<FqPie>)> {
        let n = parent.number();
        match (parent, self.scheds.get(&n)) {
            (Parent::Sched(_), Some(s)) => Some((s.fq_codel, s.fq_pie)),
            _ => self.pipes.get(&n).map(|p| (p.fq_codel, p.fq_pie)),
        }
    }

    /// References that do not resolve: queues whose sched or pipe is missing,
    /// rules whose pipe, queue or table is missing. Empty for every plan
    /// [`Config::validate`] returns, and after each step of a [`crate::diff()`].
    pub fn dangling_references(&self) -> Vec<String> {
        let mut out = Vec::new();
        for q in self.queues.values() {
            let ok = match q.parent {
                Parent::Sched(n) => self.scheds.contains_key(&n) || self.pipes.contains_key(&n),
                Parent::Pipe(n) => self.pipes.contains_key(&n),
            };
            if !ok {
                out.push(format!("queue {} feeds missing {:?}", q.number, q.parent));
            }
        }
        for r in self.rules.values() {
            match r.action {
                Action::Pipe(Target::Number(n)) if !self.pipes.contains_key(&n) => {
                    out.push(format!("rule {} sends to missing pipe {n}", r.number))
                }
                Action::Queue(Target::Number(n)) if !self.queues.contains_key(&n) => {
                    out.push(format!("rule {} sends to missing queue {n}", r.number))
                }
                _ => {}
            }
            for a in [&r.src, &r.dst] {
                if let Some(t) = a.table() {
                    if !self.tables.contains_key(&t) {
                        out.push(format!("rule {} reads missing table {t}", r.number));
                    }
                }
            }
        }
        out
    }
}

/// Collects errors with the position they sort by.
struct Checker<'c> {
    config: &'c Config,
    file: String,
    errors: Vec<((u32, u32), Error)>,
}

impl Checker<'_> {
    fn pos(
        &self,
        kind: SiteKind,
        index: usize,
        sub: usize,
        field: &'static str,
        fallback: impl FnOnce() -> String,
    ) -> Pos {
        self.config
            .sources
            .get(&Site {
                kind,
                index,
                sub,
                field,
            })
            .cloned()
            .unwrap_or_else(|| Pos::new(0, 0, fallback()))
    }

    fn push(&mut self, pos: Pos, kind: ErrorKind, message: impl std::fmt::Display) {
        let key = (pos.line, pos.column);
        let e = pos.error(&self.file, kind, message);
        self.errors.push((key, e));
    }

    /// An error of `kind` at the token of `at` (its object's kind, index
    /// and field), `shown` standing for it where the source has no
    /// position.
    fn fail(
        &mut self,
        at: (SiteKind, usize, &'static str),
        kind: ErrorKind,
        shown: impl FnOnce() -> String,
        message: String,
    ) {
        let pos = self.pos(at.0, at.1, 0, at.2, shown);
        self.push(pos, kind, message);
    }

    fn range<T: PartialOrd + std::fmt::Display>(
        &mut self,
        at: (SiteKind, usize, &'static str),
        what: &str,
        value: T,
        range: std::ops::RangeInclusive<T>,
    ) {
        self.range_shown(at, what, value, range, |v| v.to_string());
    }

    /// [`Checker::range`] of a time in microseconds, told in the units the
    /// file writes times in (`pipe 1 delay 100s is out of range (allowed:
    /// 0ms..=60s)`).
    fn time_range(
        &mut self,
        at: (SiteKind, usize, &'static str),
        what: &str,
        us: u64,
        range: std::ops::RangeInclusive<u64>,
    ) {
        self.range_shown(at, what, us, range, |v| format_time_us(*v));
    }

    /// [`Checker::range`] with the value and the bounds written by `show`.
    fn range_shown<T: PartialOrd>(
        &mut self,
        at: (SiteKind, usize, &'static str),
        what: &str,
        value: T,
        range: std::ops::RangeInclusive<T>,
        show: impl Fn(&T) -> String,
    ) {
        if !range.contains(&value) {
            self.fail(
                at,
                ErrorKind::OutOfRange,
                || show(&value),
                format!(
                    "{what} {} is out of range (allowed: {}..={})",
                    show(&value),
                    show(range.start()),
                    show(range.end())
                ),
            );
        }
    }

    fn probability(&mut self, at: (SiteKind, usize, &'static str), what: &str, value: f64) {
        self.range(at, what, value, 0.0..=1.0);
    }

    /// The correlation of successive decisions of a two-state chain
    /// (`duplicate P C`): 0 up to, not including, 1.
    fn correlation(&mut self, at: (SiteKind, usize, &'static str), what: &str, value: f64) {
        if (0.0..1.0).contains(&value) {
            return;
        }
        self.fail(
            at,
            ErrorKind::OutOfRange,
            || value.to_string(),
            format!(
                "{what} {value} is out of range (allowed: 0 up to 1, 1 excluded: at 1 the first packet's answer would be every packet's)"
            ),
        );
    }

    /// A link's `bw`: 0 (unlimited) or a rate the core can pace. The range
    /// is pspat-sched's own ([`Rate`]), so a file that validates here is
    /// never refused later when its pipes are built (`pipe_config`); checking
    /// it only there let `config check` accept what `run` refused.
    fn rate(&mut self, kind: SiteKind, index: usize, owner: &str, bps: u64) {
        if bps == 0 || (MIN_RATE_BPS..=MAX_RATE_BPS).contains(&bps) {
            return;
        }
        self.fail(
            (kind, index, "bw"),
            ErrorKind::OutOfRange,
            || bps.to_string(),
            format!(
                "{owner} bw (bit/s) {bps} is out of range (allowed: {}, or 0 for unlimited)",
                Rate::range_text()
            ),
        );
    }

    fn link(
        &mut self,
        kind: SiteKind,
        index: usize,
        owner: &str,
        link: &LinkParams,
        loader: &dyn ProfileLoader,
    ) -> LinkPlan {
        let bw_bps = link.bw.unwrap_or(0);
        self.rate(kind, index, owner, bw_bps);
        let delay_us = link.delay_us.unwrap_or(0);
        self.time_range(
            (kind, index, "delay"),
            &format!("{owner} delay"),
            delay_us,
            0..=MAX_DELAY_US,
        );
        let jitter_us = link.jitter_us.unwrap_or(0);
        self.time_range(
            (kind, index, "jitter"),
            &format!("{owner} jitter"),
            jitter_us,
            0..=MAX_DELAY_US,
        );
        if jitter_us > delay_us {
            self.fail(
                (kind, index, "jitter"),
                ErrorKind::OutOfRange,
                || format_time_us(jitter_us),
                format!(
                    "{owner} jitter {} exceeds its delay {}: a packet would need a negative delay",
                    format_time_us(jitter_us),
                    format_time_us(delay_us)
                ),
            );
        }
        if link.distribution.is_some() && link.jitter_us.is_none() {
            self.fail(
                (kind, index, "distribution"),
                ErrorKind::MissingReference,
                || "distribution".into(),
                format!("{owner} has a jitter distribution but no jitter; add 'jitter TIME'"),
            );
        }
        if let Some(c) = link.jitter_correlation {
            self.probability(
                (kind, index, "correlation"),
                &format!("{owner} correlation"),
                c,
            );
            if link.jitter_us.is_none() {
                self.fail(
                    (kind, index, "correlation"),
                    ErrorKind::MissingReference,
                    || c.to_string(),
                    format!("{owner} has a jitter correlation but no jitter; add 'jitter TIME'"),
                );
            }
        }
        let max = pspat_sched::pipe::MAX_OVERHEAD;
        let packet_overhead = link.packet_overhead.unwrap_or(0);
        self.range(
            (kind, index, "packetoverhead"),
            &format!("{owner} packetoverhead (bytes)"),
            packet_overhead,
            -(max as i32)..=max as i32,
        );
        // 0 is no cells (so that `pspat ctl` can take cells away).
        let cell_size = link.cell_size.unwrap_or(0);
        self.range(
            (kind, index, "cellsize"),
            &format!("{owner} cellsize (bytes)"),
            cell_size,
            0..=65_535,
        );
        let cell_overhead = link.cell_overhead.unwrap_or(0);
        self.range(
            (kind, index, "celloverhead"),
            &format!("{owner} celloverhead (bytes)"),
            cell_overhead,
            0..=max,
        );
        if cell_overhead > 0 && cell_size == 0 {
            self.fail(
                (kind, index, "celloverhead"),
                ErrorKind::MissingReference,
                || cell_overhead.to_string(),
                format!("{owner} has a celloverhead but no cells; add 'cellsize BYTES'"),
            );
        }
        if let Some(c) = link.reorder_correlation {
            self.correlation(
                (kind, index, "reorder.correlation"),
                &format!("{owner} reorder correlation"),
                c,
            );
        }
        if let Some(p) = link.reorder_probability {
            self.probability((kind, index, "reorder"), &format!("{owner} reorder"), p);
            if delay_us == 0 {
                self.fail(
                    (kind, index, "reorder"),
                    ErrorKind::MissingReference,
                    || p.to_string(),
                    format!(
                        "{owner} sends packets ahead of a delay it does not have; add 'delay TIME'"
                    ),
                );
            }
        }
        let reorder_gap = link.reorder_gap.unwrap_or(1);
        if let Some(g) = link.reorder_gap {
            self.range(
                (kind, index, "gap"),
                &format!("{owner} gap"),
                g,
                1..=u32::MAX,
            );
            if link.reorder_probability.is_none() {
                self.fail(
                    (kind, index, "gap"),
                    ErrorKind::MissingReference,
                    || g.to_string(),
                    format!("{owner} has a reorder gap but no reorder probability; write 'reorder P gap N'"),
                );
            }
        }
        if link.reorder && link.jitter_us.is_none() && link.reorder_probability.is_none() {
            self.fail(
                (kind, index, "reorder"),
                ErrorKind::MissingReference,
                || "reorder".into(),
                format!(
                    "{owner} allows reordering but has no jitter to reorder; add 'jitter TIME'"
                ),
            );
        }
        if let Some(s) = &link.slot {
            self.slot(kind, index, owner, s);
        }
        let profile = link.profile.as_ref().and_then(|name| {
            let pos = self.pos(kind, index, 0, "profile", || name.clone());
            match loader.load(name) {
                Err(e) => {
                    self.push(
                        pos,
                        ErrorKind::ProfileUnreadable,
                        format!("cannot read profile '{name}': {e}"),
                    );
                    None
                }
                Ok(text) => match parse_profile(&text, name) {
                    Err(e) => {
                        self.errors.push(((pos.line, pos.column), e));
                        None
                    }
                    Ok(profile) => Some(LoadedProfile {
                        file: name.clone(),
                        delay_table_us: profile.delay_table_us(),
                        profile,
                    }),
                },
            }
        });
        LinkPlan {
            bw_bps,
            delay_us,
            burst_bytes: link.burst.unwrap_or(0),
            profile,
            jitter_us,
            distribution: link.distribution.unwrap_or_default(),
            jitter_correlation: link.jitter_correlation.unwrap_or(0.0),
            reorder: link.reorder,
            reorder_probability: link.reorder_probability,
            reorder_correlation: link.reorder_correlation.unwrap_or(0.0),
            reorder_gap,
            slot: link.slot.filter(|s| !s.is_off()),
            packet_overhead,
            cell_size,
            cell_overhead,
        }
    }

    /// Checks a link's slots: intervals up to [`MAX_DELAY_US`], the
    /// shortest no longer than the longest, budgets of at least 1.
    fn slot(&mut self, kind: SiteKind, index: usize, owner: &str, s: &SlotParams) {
        match s.interval {
            SlotInterval::Uniform { min_us, max_us } => {
                self.time_range(
                    (kind, index, "slot"),
                    &format!("{owner} slot"),
                    min_us,
                    0..=MAX_DELAY_US,
                );
                if max_us < min_us {
                    self.fail(
                        (kind, index, "slot.max"),
                        ErrorKind::OutOfRange,
                        || format_time_us(max_us),
                        format!(
                            "{owner} slot's longest interval {} is shorter than its shortest {}",
                            format_time_us(max_us),
                            format_time_us(min_us)
                        ),
                    );
                } else if max_us != min_us {
                    // (Equal, or not given: the shortest's check covers it.)
                    self.time_range(
                        (kind, index, "slot.max"),
                        &format!("{owner} slot's longest interval"),
                        max_us,
                        0..=MAX_DELAY_US,
                    );
                }
            }
            SlotInterval::Distribution {
                delay_us,
                jitter_us,
                ..
            } => {
                self.time_range(
                    (kind, index, "slot"),
                    &format!("{owner} slot interval"),
                    delay_us,
                    0..=MAX_DELAY_US,
                );
                self.time_range(
                    (kind, index, "slot.jitter"),
                    &format!("{owner} slot jitter"),
                    jitter_us,
                    0..=MAX_DELAY_US,
                );
            }
        }
        if let Some(p) = s.packets {
            self.range(
                (kind, index, "slot.packets"),
                &format!("{owner} slot packets"),
                p,
                1..=u32::MAX,
            );
        }
        if let Some(b) = s.bytes {
            self.range(
                (kind, index, "slot.bytes"),
                &format!("{owner} slot bytes"),
                b,
                1..=u64::MAX,
            );
        }
    }

    fn queue_set(
        &mut self,
        kind: SiteKind,
        index: usize,
        owner: &str,
        q: &QueueParams,
    ) -> QueueSetPlan {
        let limit = q.limit.unwrap_or(QueueLimit::DEFAULT);
        match limit {
            QueueLimit::Slots(n) => self.range(
                (kind, index, "queue"),
                &format!("{owner} queue (slots)"),
                n,
                1..=MAX_SLOTS,
            ),
            QueueLimit::Bytes(b) => self.range(
                (kind, index, "queue"),
                &format!("{owner} queue (bytes)"),
                b,
                1..=MAX_QUEUE_BYTES,
            ),
        }
        if let Some(p) = q.plr {
            self.probability((kind, index, "plr"), &format!("{owner} plr"), p);
        }
        if let Some(p) = q.duplicate {
            self.probability((kind, index, "duplicate"), &format!("{owner} duplicate"), p);
        }
        if let Some(c) = q.duplicate_correlation {
            self.correlation(
                (kind, index, "duplicate.correlation"),
                &format!("{owner} duplicate correlation"),
                c,
            );
        }
        if let Some(p) = q.corrupt {
            self.probability((kind, index, "corrupt"), &format!("{owner} corrupt"), p);
        }
        if let Some(c) = q.corrupt_correlation {
            self.correlation(
                (kind, index, "corrupt.correlation"),
                &format!("{owner} corrupt correlation"),
                c,
            );
        }
        if let Some(g) = q.gemodel {
            self.probability(
                (kind, index, "gemodel.p"),
                &format!("{owner} gemodel p"),
                g.p,
            );
            self.probability(
                (kind, index, "gemodel.r"),
                &format!("{owner} gemodel r"),
                g.r,
            );
            self.probability(
                (kind, index, "gemodel.1-h"),
                &format!("{owner} gemodel 1-h"),
                g.one_minus_h,
            );
            self.probability(
                (kind, index, "gemodel.1-k"),
                &format!("{owner} gemodel 1-k"),
                g.one_minus_k,
            );
        }
        if let Some(m) = q.lossstate {
            self.loss_state(kind, index, owner, &m, q.gemodel.is_some());
        }
        if let Some(r) = q.red {
            let bad = if !(r.w_q > 0.0 && r.w_q <= 1.0) {
                Some(format!("w_q {} must be in (0, 1]", r.w_q))
            } else if !(r.max_p > 0.0 && r.max_p <= 1.0) {
                Some(format!("max_p {} must be in (0, 1]", r.max_p))
            } else if r.min_th >= r.max_th {
                Some(format!(
                    "min_th {} must be below max_th {}",
                    r.min_th, r.max_th
                ))
            } else {
                None
            };
            if let Some(msg) = bad {
                self.fail(
                    (kind, index, "red"),
                    ErrorKind::OutOfRange,
                    || "red".into(),
                    format!("{owner} RED parameters: {msg}"),
                );
            }
        }
        if let Some(c) = q.codel {
            self.codel(kind, index, owner, &c, q.red.is_some());
        }
        if let Some(p) = q.pie {
            self.pie(kind, index, owner, &p, q);
        }
        if q.ecn && q.red.is_none() {
            // tc-netem's `ecn` marks instead of the random losses; CoDel's
            // is its own word, read only among its parameters.
            let hint = if q.codel.is_some() {
                "; for CoDel to mark, write 'ecn' among its parameters, right after 'codel' or its times (codel target 5ms ecn)"
            } else if q.pie.is_some() {
                "; for PIE to mark, write 'ecn' among its parameters, right after 'pie' or its values (pie target 15ms ecn)"
            } else if q.random_loss() {
                "; to mark instead of the random loss, as tc-netem's 'ecn' does, write 'lossecn'"
            } else {
                ""
            };
            self.fail(
                (kind, index, "ecn"),
                ErrorKind::MissingReference,
                || "ecn".into(),
                format!(
                    "{owner} has 'ecn' but no RED: 'ecn' needs 'red' or 'gred' on the same queue{hint}"
                ),
            );
        }
        if q.lossecn && !q.random_loss() {
            self.fail(
                (kind, index, "lossecn"),
                ErrorKind::MissingReference,
                || "lossecn".into(),
                format!(
                    "{owner} has 'lossecn' but no random loss: 'lossecn' needs 'plr', 'gemodel' or 'lossstate' on the same queue"
                ),
            );
        }
        let buckets = q.buckets.unwrap_or(64);
        self.range(
            (kind, index, "buckets"),
            &format!("{owner} buckets"),
            buckets,
            BUCKETS_RANGE,
        );
        QueueSetPlan {
            limit,
            plr: q.plr.unwrap_or(0.0),
            red: q.red,
            codel: q.codel,
            pie: q.pie,
            buckets,
            noerror: q.noerror,
            ecn: q.ecn,
            lossecn: q.lossecn,
            gemodel: q.gemodel,
            lossstate: q.lossstate,
            duplicate: q.duplicate.unwrap_or(0.0),
            duplicate_correlation: q.duplicate_correlation.unwrap_or(0.0),
            corrupt: q.corrupt.unwrap_or(0.0),
            corrupt_correlation: q.corrupt_correlation.unwrap_or(0.0),
        }
    }

    /// A queue's `codel`: target and interval from 1 µs to an hour (the
    /// core's range), and no RED beside it (told at whichever of `codel`
    /// and `red`/`gred` comes second; the parsers refuse both in one
    /// statement, so only a model built otherwise has them).
    fn codel(&mut self, kind: SiteKind, index: usize, owner: &str, c: &Codel, with_red: bool) {
        self.codel_times(
            kind,
            index,
            &format!("{owner} codel"),
            ["codel.target", "codel.interval"],
            c,
        );
        if with_red {
            let second = self.written_second(kind, index, "codel", "red");
            self.fail(
                (kind, index, second),
                ErrorKind::Duplicate,
                || second.into(),
                format!(
                    "{owner} has both RED and CoDel: a queue has one AQM (red, gred, codel, pie, or droptail for none)"
                ),
            );
        }
    }

    /// A queue's `pie`: its parameters in dummynet's ranges, and no RED or
    /// CoDel beside it (told at whichever comes second; the parsers refuse
    /// both in one statement, so only a model built otherwise has them).
    fn pie(&mut self, kind: SiteKind, index: usize, owner: &str, p: &Pie, q: &QueueParams) {
        self.pie_parameters(
            kind,
            index,
            &format!("{owner} pie"),
            crate::ipfw::PieOf::Queue.valued_fields(),
            p,
            Pie::MAX_US,
        );
        let other = if q.red.is_some() {
            Some(("red", "RED"))
        } else if q.codel.is_some() {
            Some(("codel", "CoDel"))
        } else {
            None
        };
        if let Some((field, name)) = other {
            let second = self.written_second(kind, index, "pie", field);
            self.fail(
                (kind, index, second),
                ErrorKind::Duplicate,
                || second.into(),
                format!(
                    "{owner} has both {name} and PIE: a queue has one AQM (red, gred, codel, pie, or droptail for none)"
                ),
            );
        }
    }

    /// PIE's parameters (of `what`, recorded as `fields`: target, tupdate,
    /// max_burst, alpha, beta, max_ecnth): dummynet's ranges, refused
    /// where dummynet clamps.
    fn pie_parameters(
        &mut self,
        kind: SiteKind,
        index: usize,
        what: &str,
        fields: [&'static str; 6],
        p: &Pie,
        max_us: u64,
    ) {
        let times = [
            (fields[0], "target", p.target_us, Pie::MIN_US),
            (fields[1], "tupdate", p.tupdate_us, Pie::MIN_US),
            (fields[2], "max_burst", p.max_burst_us, 0),
        ];
        for (field, name, us, min) in times {
            self.time_range(
                (kind, index, field),
                &format!("{what} {name}"),
                us,
                min..=max_us,
            );
        }
        let reals = [
            (fields[3], "alpha", p.alpha, Pie::MAX_GAIN),
            (fields[4], "beta", p.beta, Pie::MAX_GAIN),
            (fields[5], "max_ecnth", p.max_ecnth, 1.0),
        ];
        for (field, name, value, max) in reals {
            self.range(
                (kind, index, field),
                &format!("{what} {name}"),
                value,
                0.0..=max,
            );
        }
    }

    /// A sched's `type fq_pie`: PIE's parameters as a queue's `pie` takes
    /// them, `quantum`, `limit` and `flows` as `fq_codel`'s, the type
    /// [`AlgKind::Fq`], and not with `fq_codel` too (a model built in code
    /// may say otherwise).
    fn fq_pie(
        &mut self,
        (kind, index): (SiteKind, usize),
        owner: &str,
        (alg, fq_codel): (Option<AlgKind>, bool),
        f: &FqPie,
    ) {
        self.pie_parameters(
            kind,
            index,
            &format!("{owner} fq_pie"),
            crate::ipfw::PieOf::FqPie.valued_fields(),
            &f.pie,
            Pie::FQ_MAX_US,
        );
        for (field, name, value, range) in [
            (
                "fq_pie.quantum",
                "quantum (bytes)",
                f.quantum,
                FqCodel::QUANTUM,
            ),
            ("fq_pie.limit", "limit (packets)", f.limit, FqCodel::LIMIT),
            ("fq_pie.flows", "flows", f.flows, FqCodel::FLOWS),
        ] {
            self.range(
                (kind, index, field),
                &format!("{owner} fq_pie {name}"),
                value,
                range,
            );
        }
        if alg != Some(AlgKind::Fq) || fq_codel {
            let shown = if fq_codel {
                "fq_codel".to_string()
            } else {
                alg.map_or("none".to_string(), |a| a.to_string())
            };
            self.fail(
                (kind, index, "type"),
                ErrorKind::Syntax,
                || shown.clone(),
                format!(
                    "{owner} has fq_pie's parameters but the type {shown}: an fq_pie {}'s type is fq, without fq_codel's",
                    if kind == SiteKind::Pipe { "pipe" } else { "sched" }
                ),
            );
        }
    }

    /// CoDel's `target` and `interval` (of `what`, recorded as `fields`):
    /// from 1 µs to an hour, the core's range.
    fn codel_times(
        &mut self,
        kind: SiteKind,
        index: usize,
        what: &str,
        fields: [&'static str; 2],
        c: &Codel,
    ) {
        self.time_range(
            (kind, index, fields[0]),
            &format!("{what} target"),
            c.target_us,
            1..=Codel::MAX_US,
        );
        self.time_range(
            (kind, index, fields[1]),
            &format!("{what} interval"),
            c.interval_us,
            1..=Codel::MAX_US,
        );
    }

    /// A sched's `type fq_codel`: CoDel's times as a queue's `codel`
    /// takes them, `quantum`, `limit` and `flows` within dummynet's ranges
    /// (refused, where dummynet clamps), and the type [`AlgKind::Fq`] (a
    /// model built in code may say otherwise).
    fn fq_codel(
        &mut self,
        (kind, index): (SiteKind, usize),
        owner: &str,
        f: &FqCodel,
        alg: Option<AlgKind>,
    ) {
        self.codel_times(
            kind,
            index,
            &format!("{owner} fq_codel"),
            ["fq_codel.target", "fq_codel.interval"],
            &f.codel,
        );
        for (field, name, value, range) in [
            (
                "fq_codel.quantum",
                "quantum (bytes)",
                f.quantum,
                FqCodel::QUANTUM,
            ),
            ("fq_codel.limit", "limit (packets)", f.limit, FqCodel::LIMIT),
            ("fq_codel.flows", "flows", f.flows, FqCodel::FLOWS),
        ] {
            self.range(
                (kind, index, field),
                &format!("{owner} fq_codel {name}"),
                value,
                range,
            );
        }
        if alg != Some(AlgKind::Fq) {
            let shown = alg.map_or("none".to_string(), |a| a.to_string());
            self.fail(
                (kind, index, "type"),
                ErrorKind::Syntax,
                || shown.clone(),
                format!(
                    "{owner} has fq_codel's parameters but the type {shown}: an fq_codel {}'s type is fq",
                    if kind == SiteKind::Pipe { "pipe" } else { "sched" }
                ),
            );
        }
    }

    /// Of two keywords of one queue that exclude each other, the one written
    /// later, where the error about giving both is told (`a` when the
    /// sources do not say: a plan built in code).
    fn written_second(
        &self,
        kind: SiteKind,
        index: usize,
        a: &'static str,
        b: &'static str,
    ) -> &'static str {
        let at = |field| {
            self.config.sources.get(&Site {
                kind,
                index,
                sub: 0,
                field,
            })
        };
        match (at(a), at(b)) {
            (Some(x), Some(y)) if (y.line, y.column) > (x.line, x.column) => b,
            _ => a,
        }
    }

    /// A queue's `lossstate`: each value a probability, the ways out of
    /// states 1 and 3 summing to at most 1, and no `gemodel` beside it
    /// (told at whichever of the two keywords comes second).
    fn loss_state(
        &mut self,
        kind: SiteKind,
        index: usize,
        owner: &str,
        m: &LossState,
        with_gemodel: bool,
    ) {
        let values = [
            ("lossstate.p13", "p13", m.p13),
            ("lossstate.p31", "p31", m.p31),
            ("lossstate.p32", "p32", m.p32),
            ("lossstate.p23", "p23", m.p23),
            ("lossstate.p14", "p14", m.p14),
        ];
        for (field, name, p) in values {
            self.probability(
                (kind, index, field),
                &format!("{owner} lossstate {name}"),
                p,
            );
        }
        let valid = values.iter().all(|v| (0.0..=1.0).contains(&v.2));
        // Told at the value that tips the sum over (p14, p32: each
        // defaults to 0, so a sum above 1 has it written).
        for (a, b, field, state) in [
            (("p13", m.p13), ("p14", m.p14), "lossstate.p14", 1),
            (("p31", m.p31), ("p32", m.p32), "lossstate.p32", 3),
        ] {
            if valid && a.1 + b.1 > 1.0 {
                self.fail(
                    (kind, index, field),
                    ErrorKind::OutOfRange,
                    || b.1.to_string(),
                    format!(
                        "{owner} lossstate {} + {} is {}, above 1 (both are chances of \
                         leaving state {state}: their sum is at most 1)",
                        a.0,
                        b.0,
                        a.1 + b.1
                    ),
                );
            }
        }
        if with_gemodel {
            let second = self.written_second(kind, index, "lossstate", "gemodel");
            self.fail(
                (kind, index, second),
                // A loss model given twice (tc-netem's `loss` takes one).
                ErrorKind::Duplicate,
                || second.into(),
                format!(
                    "{owner} has both gemodel and lossstate: a queue takes one loss model, \
                     Gilbert-Elliott or the 4-state one"
                ),
            );
        }
    }

    fn duplicate(
        &mut self,
        seen: &mut BTreeMap<u32, String>,
        number: u32,
        what: String,
        kind: SiteKind,
        index: usize,
    ) {
        if let Some(first) = seen.get(&number) {
            let pos = self.pos(kind, index, 0, "number", || number.to_string());
            let note = if first.starts_with("pipe") != what.starts_with("pipe") {
                " (pipes and scheds share numbers: pipe N is sched N with a FIFO)"
            } else {
                ""
            };
            let message = if *first == what {
                format!("{what} is defined twice; give each number one config line")
            } else {
                format!("{what} is already defined as {first}{note}")
            };
            self.push(pos, ErrorKind::Duplicate, message);
        } else {
            seen.insert(number, what);
        }
    }
}

/// Each rule's number, in file order: its own, or for a rule written
/// without one the highest number before it plus [`RULE_STEP`], as ipfw
/// numbers a rule added without a number.
fn rule_numbers(rules: &[Rule]) -> impl Iterator<Item = u32> + '_ {
    rules.iter().scan(0u32, |last, r| {
        let number = r.number.unwrap_or(last.saturating_add(RULE_STEP));
        *last = (*last).max(number);
        Some(number)
    })
}

impl Config {
    /// The same configuration with every rule numbered ([`Rule::number`]
    /// filled in as validation numbers it) and the rules in number order,
    /// the order a packet tries them in: how `pspat config check` prints a
    /// configuration whose file lists its rules in another order. Rules
    /// sharing a number (refused by validation) keep their file order.
    ///
    /// # Examples
    /// ```
    /// use pspat_config::parse_ipfw;
    ///
    /// let c = parse_ipfw(
    ///     "pipe 1 config bw 1Mbit/s\nadd 200 pipe 1 ip from any to any\nadd pipe 1 udp from any to any\nadd 50 deny tcp from any to any\n",
    ///     "example",
    /// )
    /// .unwrap();
    /// let numbers: Vec<_> = c.in_rule_order().rules.iter().map(|r| r.number).collect();
    /// assert_eq!(numbers, [Some(50), Some(200), Some(300)]);
    /// ```
    pub fn in_rule_order(&self) -> Config {
        let mut rules: Vec<Rule> = self
            .rules
            .iter()
            .zip(rule_numbers(&self.rules))
            .map(|(r, n)| Rule {
                number: Some(n),
                ..r.clone()
            })
            .collect();
        rules.sort_by_key(|r| r.number);
        Config {
            rules,
            ..self.clone()
        }
    }

    /// Validates the configuration into a [`Plan`], reading profile files through `loader`.
    ///
    /// # Examples
    /// ```
    /// use pspat_config::{parse_ipfw, ErrorKind, NoProfiles};
    /// let bad = parse_ipfw("sched 1 config type drr\nqueue 1 config sched 2", "cfg.ipfw").unwrap();
    /// let err = bad.validate(&NoProfiles).unwrap_err();
    /// assert_eq!((err.line, err.column, err.kind), (2, 22, ErrorKind::MissingReference));
    /// ```
    ///
    /// # Errors
    /// The [`Error`] that comes first in the file: a duplicate number, a value
    /// out of range, a missing sched, pipe, queue or table, a profile that
    /// cannot be read or is malformed.
    pub fn validate(&self, loader: &dyn ProfileLoader) -> Result<Plan, Error> {
        self.validate_all(loader).map_err(|errors| {
            errors.into_iter().next().unwrap_or_else(|| {
                // validate_all returns Err only with at least one error.
                Pos::default().error(
                    &self.sources.file,
                    ErrorKind::Syntax,
                    "invalid configuration",
                )
            })
        })
    }

    fn validate_all(&self, loader: &dyn ProfileLoader) -> Result<Plan, Vec<Error>> {
        let mut c = Checker {
            config: self,
            file: self.sources.file.clone(),
            errors: Vec::new(),
        };
        let mut plan = Plan {
            seed: self.seed.unwrap_or(DEFAULT_SEED),
            default_action: self.default_action,
            ..Plan::default()
        };
        let mut link_numbers: BTreeMap<u32, String> = BTreeMap::new();
        for (i, s) in self.scheds.iter().enumerate() {
            c.range(
                (SiteKind::Sched, i, "number"),
                "sched number",
                s.number,
                OBJECT_NUMBERS,
            );
            c.duplicate(
                &mut link_numbers,
                s.number,
                format!("sched {}", s.number),
                SiteKind::Sched,
                i,
            );
            let owner = format!("sched {}", s.number);
            let link = c.link(SiteKind::Sched, i, &owner, &s.link, loader);
            let buckets = s.buckets.unwrap_or(64);
            c.range(
                (SiteKind::Sched, i, "buckets"),
                &format!("{owner} buckets"),
                buckets,
                BUCKETS_RANGE,
            );
            if let Some(f) = &s.fq_codel {
                c.fq_codel((SiteKind::Sched, i), &owner, f, s.alg);
            }
            if let Some(f) = &s.fq_pie {
                c.fq_pie(
                    (SiteKind::Sched, i),
                    &owner,
                    (s.alg, s.fq_codel.is_some()),
                    f,
                );
            }
            plan.scheds.entry(s.number).or_insert(SchedPlan {
                number: s.number,
                alg: s.alg.unwrap_or(AlgKind::Wf2qPlus),
                fq_codel: s.fq_codel,
                fq_pie: s.fq_pie,
                link,
                mask: s.mask,
                buckets,
            });
        }
        for (i, p) in self.pipes.iter().enumerate() {
            c.range(
                (SiteKind::Pipe, i, "number"),
                "pipe number",
                p.number,
                OBJECT_NUMBERS,
            );
            c.duplicate(
                &mut link_numbers,
                p.number,
                format!("pipe {}", p.number),
                SiteKind::Pipe,
                i,
            );
            let owner = format!("pipe {}", p.number);
            let link = c.link(SiteKind::Pipe, i, &owner, &p.link, loader);
            let queue = c.queue_set(SiteKind::Pipe, i, &owner, &p.queue);
            if let Some(f) = &p.fq_codel {
                c.fq_codel((SiteKind::Pipe, i), &owner, f, p.alg);
            }
            if let Some(f) = &p.fq_pie {
                c.fq_pie(
                    (SiteKind::Pipe, i),
                    &owner,
                    (p.alg, p.fq_codel.is_some()),
                    f,
                );
            }
            plan.pipes.entry(p.number).or_insert(PipePlan {
                number: p.number,
                alg: p.alg.unwrap_or(AlgKind::Fifo),
                fq_codel: p.fq_codel,
                fq_pie: p.fq_pie,
                link,
                queue,
                mask: p.mask,
            });
        }
        let mut queue_numbers: BTreeMap<u32, String> = BTreeMap::new();
        for (i, q) in self.queues.iter().enumerate() {
            let owner = format!("queue {}", q.number);
            c.range(
                (SiteKind::Queue, i, "number"),
                "queue number",
                q.number,
                OBJECT_NUMBERS,
            );
            c.duplicate(
                &mut queue_numbers,
                q.number,
                owner.clone(),
                SiteKind::Queue,
                i,
            );
            let weight = q.weight.unwrap_or(1);
            c.range(
                (SiteKind::Queue, i, "weight"),
                &format!("{owner} weight"),
                weight,
                MIN_WEIGHT..=MAX_WEIGHT,
            );
            let lmax = q.lmax.unwrap_or(DEFAULT_LMAX);
            c.range(
                (SiteKind::Queue, i, "lmax"),
                &format!("{owner} lmax"),
                lmax,
                1..=MAX_PACKET_LEN,
            );
            let pri = q.pri.unwrap_or(0);
            c.range(
                (SiteKind::Queue, i, "pri"),
                &format!("{owner} pri"),
                pri,
                0..=u32::from(PRIORITIES) - 1,
            );
            let queue = c.queue_set(SiteKind::Queue, i, &owner, &q.params);
            let parent = match q.parent {
                None => {
                    let pos = c.pos(SiteKind::Queue, i, 0, "number", || q.number.to_string());
                    c.push(
                        pos,
                        ErrorKind::MissingReference,
                        format!("{owner} feeds no scheduler; add 'sched M' (or 'pipe M')"),
                    );
                    Parent::Sched(0)
                }
                Some(parent) => {
                    let exists = match parent {
                        Parent::Sched(n) => {
                            plan.scheds.contains_key(&n) || plan.pipes.contains_key(&n)
                        }
                        Parent::Pipe(n) => plan.pipes.contains_key(&n),
                    };
                    if !exists {
                        let pos = c.pos(SiteKind::Queue, i, 0, "parent", || {
                            parent.number().to_string()
                        });
                        let (word, list) = match parent {
                            Parent::Sched(_) => (
                                "sched",
                                numbers(plan.scheds.keys().chain(plan.pipes.keys())),
                            ),
                            Parent::Pipe(_) => ("pipe", numbers(plan.pipes.keys())),
                        };
                        c.push(
                            pos,
                            ErrorKind::MissingReference,
                            format!(
                                "{owner} feeds {word} {}, which is not defined (defined: {list})",
                                parent.number()
                            ),
                        );
                    }
                    parent
                }
            };
            let mut resolved = QueuePlan {
                number: q.number,
                parent,
                weight,
                lmax,
                pri: u8::try_from(pri).unwrap_or(u8::MAX),
                queue,
                mask: q.mask,
            };
            // `queue M config sched N` may name a pipe N too.
            let (fq_codel, fq_pie) = plan.link_fq(parent).unwrap_or((None, None));
            if let Some(f) = fq_codel {
                lower_fq_codel(&f, q, &mut resolved);
            }
            if let Some(f) = fq_pie {
                lower_fq_pie(&f, q, &mut resolved);
            }
            plan.queues.entry(q.number).or_insert(resolved);
        }
        let mut table_numbers = HashSet::new();
        for (i, t) in self.tables.iter().enumerate() {
            if !table_numbers.insert(t.number) {
                let pos = c.pos(SiteKind::Table, i, 0, "number", || t.number.to_string());
                c.push(
                    pos,
                    ErrorKind::Duplicate,
                    format!("table {} is listed twice", t.number),
                );
            }
            let entries = plan.tables.entry(t.number).or_default();
            for (j, e) in t.entries.iter().enumerate() {
                if entries.insert(e.prefix, e.value).is_some() {
                    let pos = c.pos(SiteKind::Table, i, j, "prefix", || e.prefix.to_string());
                    c.push(
                        pos,
                        ErrorKind::Duplicate,
                        format!("table {} already has an entry for {}", t.number, e.prefix),
                    );
                }
            }
        }
        for (i, (r, number)) in self.rules.iter().zip(rule_numbers(&self.rules)).enumerate() {
            c.range(
                (SiteKind::Rule, i, "number"),
                "rule number",
                number,
                RULE_NUMBERS,
            );
            if plan.rules.contains_key(&number) {
                let pos = c.pos(SiteKind::Rule, i, 0, "number", || number.to_string());
                c.push(
                    pos,
                    ErrorKind::Duplicate,
                    format!("rule {number} is already defined (pspat keeps one rule per number)"),
                );
            }
            match r.action {
                Action::Pipe(Target::Number(n)) if !plan.pipes.contains_key(&n) => {
                    let pos = c.pos(SiteKind::Rule, i, 0, "action", || n.to_string());
                    c.push(
                        pos,
                        ErrorKind::MissingReference,
                        format!(
                            "rule {number} sends to pipe {n}, which is not defined (defined: {})",
                            numbers(plan.pipes.keys())
                        ),
                    );
                }
                Action::Queue(Target::Number(n)) if !plan.queues.contains_key(&n) => {
                    let pos = c.pos(SiteKind::Rule, i, 0, "action", || n.to_string());
                    c.push(
                        pos,
                        ErrorKind::MissingReference,
                        format!(
                            "rule {number} sends to queue {n}, which is not defined (defined: {})",
                            numbers(plan.queues.keys())
                        ),
                    );
                }
                _ => {}
            }
            if r.proto_negated && r.proto == Proto::Ip {
                let pos = c.pos(SiteKind::Rule, i, 0, "proto", || "ip".into());
                c.push(
                    pos,
                    ErrorKind::Syntax,
                    format!("rule {number}: 'not ip' matches nothing (not may precede ip4, ip6, tcp, udp or icmp)"),
                );
            }
            // The one address family the protocol leaves (`not ip6` is
            // IPv4 only), if any.
            let family = match (r.proto, r.proto_negated) {
                (Proto::Ip4, false) | (Proto::Ip6, true) => Some(true),
                (Proto::Ip6, false) | (Proto::Ip4, true) => Some(false),
                _ => None,
            };
            let proto_text = if r.proto_negated {
                format!("not {}", r.proto.name())
            } else {
                r.proto.name().to_string()
            };
            for (field, addr) in [("src", &r.src), ("dst", &r.dst)] {
                if let Some(t) = addr.table().filter(|t| !plan.tables.contains_key(t)) {
                    let pos = c.pos(SiteKind::Rule, i, 0, field, || addr.to_string());
                    c.push(pos, ErrorKind::MissingReference, format!("rule {number} reads table {t}, which has no entries (add 'table {t} add PREFIX VALUE')"));
                }
                // A prefix, or a list entry, that no packet of the rule's
                // family can fall in.
                let other_family = addr
                    .prefixes()
                    .iter()
                    .find(|p| family.is_some_and(|v4| p.addr.is_ipv4() != v4));
                if let Some(p) = other_family {
                    let pos = c.pos(SiteKind::Rule, i, 0, field, || p.to_string());
                    c.push(
                        pos,
                        ErrorKind::OutOfRange,
                        format!(
                            "rule {number} matches {proto_text} but {p} is of the other address family"
                        ),
                    );
                }
            }
            let tablearg = matches!(
                r.action,
                Action::Pipe(Target::Tablearg) | Action::Queue(Target::Tablearg)
            );
            if tablearg {
                // Only a positive table gives a value: not a prefix, a
                // list, or a negated table.
                let tables: Vec<u32> = [&r.src, &r.dst]
                    .into_iter()
                    .filter_map(|a| match a {
                        AddrMatch::Table(t) => Some(*t),
                        _ => None,
                    })
                    .collect();
                if tables.is_empty() {
                    let pos = c.pos(SiteKind::Rule, i, 0, "action", || "tablearg".into());
                    c.push(pos, ErrorKind::MissingReference, format!("rule {number} uses tablearg but matches no table; use 'from table(N)' or 'to table(N)' (a prefix, an address list or a 'not table(N)' gives no value)"));
                }
                for t in tables {
                    let Some(ti) = self.tables.iter().position(|x| x.number == t) else {
                        continue;
                    };
                    for (j, e) in self.tables[ti].entries.iter().enumerate() {
                        let (exists, word) = match r.action {
                            Action::Pipe(_) => (plan.pipes.contains_key(&e.value), "pipe"),
                            _ => (plan.queues.contains_key(&e.value), "queue"),
                        };
                        if !exists {
                            let pos =
                                c.pos(SiteKind::Table, ti, j, "value", || e.value.to_string());
                            c.push(pos, ErrorKind::MissingReference, format!("table {t} maps {} to {word} {}, which is not defined (rule {number} uses it as tablearg)", e.prefix, e.value));
                        }
                    }
                }
            }
            if let Some(iface) = &r.interface {
                if iface.name.is_empty() || iface.name.len() > 15 {
                    let pos = c.pos(SiteKind::Rule, i, 0, "interface", || iface.name.clone());
                    c.push(
                        pos,
                        ErrorKind::OutOfRange,
                        format!("interface name '{}' must be 1..=15 bytes", iface.name),
                    );
                }
            }
            // Read text is checked where it is read; a model built in code
            // is checked here.
            if let Some(p) = r.prob.filter(|p| !(p.0 > 0.0 && p.0 <= 1.0)) {
                let pos = c.pos(SiteKind::Rule, i, 0, "prob", || p.0.to_string());
                c.push(
                    pos,
                    ErrorKind::OutOfRange,
                    format!("prob {} is out of range: a rule matches with a probability above 0, at most 1", p.0),
                );
            }
            if r.dscp.iter().any(|&c| c > 63) || r.dscp.windows(2).any(|w| w[0] >= w[1]) {
                let pos = c.pos(SiteKind::Rule, i, 0, "dscp", || format!("{:?}", r.dscp));
                c.push(
                    pos,
                    ErrorKind::OutOfRange,
                    "a rule's dscp is a set of code points 0..=63, ascending, each once",
                );
            }
            if r.dscp_negated && r.dscp.len() >= crate::dscp::CODE_POINTS {
                let pos = c.pos(SiteKind::Rule, i, 0, "dscp", || format!("{:?}", r.dscp));
                c.push(
                    pos,
                    ErrorKind::OutOfRange,
                    "'not dscp' of every code point matches no packet",
                );
            }
            if r.ip_len.iter().any(|l| l.lo > l.hi) {
                let pos = c.pos(SiteKind::Rule, i, 0, "iplen", || format!("{:?}", r.ip_len));
                c.push(
                    pos,
                    ErrorKind::OutOfRange,
                    "a rule's iplen ranges each run from a length to one at least as long",
                );
            }
            if r.ip_len_negated && crate::header::covers_every_length(&r.ip_len) {
                let pos = c.pos(SiteKind::Rule, i, 0, "iplen", || format!("{:?}", r.ip_len));
                c.push(
                    pos,
                    ErrorKind::OutOfRange,
                    "'not iplen' of every length matches no packet",
                );
            }
            if let Some(Err(e)) = r.tcp_flags.map(crate::header::TcpFlags::check) {
                let pos = c.pos(SiteKind::Rule, i, 0, "tcpflags", || {
                    format!("{:?}", r.tcp_flags)
                });
                c.push(pos, e.kind, e.message);
            }
            if let Some(text) = &r.comment {
                let normal = crate::ipfw::rule_comment(text);
                if normal
                    .as_ref()
                    .map_or(true, |n| n.as_deref() != Some(text.as_str()))
                {
                    let pos = c.pos(SiteKind::Rule, i, 0, "comment", || text.clone());
                    let (kind, why) = match normal {
                        Err(e) => (e.kind, e.message),
                        Ok(_) => (
                            ErrorKind::Syntax,
                            "a rule comment is its words, one space apart, not empty".into(),
                        ),
                    };
                    c.push(pos, kind, why);
                }
            }
            plan.rules.entry(number).or_insert(RulePlan {
                number,
                action: r.action,
                proto: r.proto,
                proto_negated: r.proto_negated,
                src: r.src.clone(),
                dst: r.dst.clone(),
                src_ports: r.src_ports.clone(),
                // A negation without a list tests nothing: dropped.
                src_ports_negated: r.src_ports_negated && !r.src_ports.is_empty(),
                dst_ports: r.dst_ports.clone(),
                dst_ports_negated: r.dst_ports_negated && !r.dst_ports.is_empty(),
                direction: r.direction,
                interface: r.interface.clone(),
                dscp: r.dscp.clone(),
                dscp_negated: r.dscp_negated && !r.dscp.is_empty(),
                ip_len: r.ip_len.clone(),
                ip_len_negated: r.ip_len_negated && !r.ip_len.is_empty(),
                tcp_flags: r.tcp_flags,
                tcp_flags_negated: r.tcp_flags_negated && r.tcp_flags.is_some(),
                established: r.established,
                established_negated: r.established_negated && r.established,
                prob: r.prob,
                comment: r.comment.clone(),
            });
        }
        if c.errors.is_empty() {
            Ok(plan)
        } else {
            c.errors.sort_by_key(|(key, _)| *key);
            Err(c.errors.into_iter().map(|(_, e)| e).collect())
        }
    }

    /// Every error validation finds, in file order (for tools that list them all).
    ///
    /// # Errors
    /// The errors, when there is at least one.
    pub fn validate_every(&self, loader: &dyn ProfileLoader) -> Result<Plan, Vec<Error>> {
        self.validate_all(loader)
    }
}

/// A flowset `q` of an `fq_codel` sched with parameters `f`, as resolved
/// in `plan`: what the flowset sets itself stays, what it leaves at its
/// default comes from the sched. A flowset without a mask gets `mask all`
/// (a queue per 5-tuple, IPv6's included); one without an AQM of its own
/// (`red`, `gred`, `codel`) gets `codel` with the sched's target, interval
/// and ECN; one without a `queue` size gets `limit` slots, so that no flow
/// is held below the sched's limit on all of them. (Its cap of dynamic
/// queues is the daemon's: [`Plan::flowset_queue_caps`].)
fn lower_fq_codel(f: &FqCodel, q: &Queue, plan: &mut QueuePlan) {
    if q.mask.is_empty() {
        plan.mask = FlowMask::all();
    }
    if q.params.red.is_none() && q.params.codel.is_none() && q.params.pie.is_none() {
        plan.queue.codel = Some(f.codel);
    }
    if q.params.limit.is_none() {
        plan.queue.limit = QueueLimit::Slots(f.limit);
    }
}

/// A flowset `q` of an `fq_pie` sched, as [`lower_fq_codel`] lowers one of
/// an `fq_codel` sched, with `pie` (the sched's PIE parameters) in CoDel's
/// place.
fn lower_fq_pie(f: &FqPie, q: &Queue, plan: &mut QueuePlan) {
    if q.mask.is_empty() {
        plan.mask = FlowMask::all();
    }
    if q.params.red.is_none() && q.params.codel.is_none() && q.params.pie.is_none() {
        plan.queue.pie = Some(f.pie);
    }
    if q.params.limit.is_none() {
        plan.queue.limit = QueueLimit::Slots(f.limit);
    }
}

fn numbers<'a>(keys: impl Iterator<Item = &'a u32>) -> String {
    let list: Vec<String> = keys.map(|k| k.to_string()).collect();
    if list.is_empty() {
        "none".into()
    } else {
        list.join(", ")
    }
}
