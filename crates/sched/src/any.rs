//! Choosing an algorithm at run time without a per-packet virtual call.
//!
//! [`SchedulerConfig`] is plain data (the CLI and config files fill it);
//! [`SchedulerConfig::build`] validates it into an [`AnyScheduler`], an enum
//! over the built-in algorithms whose [`Scheduler`] impl is one `match` per
//! method: a predictable branch instead of a vtable call. The arbiter is
//! generic over `S: Scheduler`, so a user with one fixed algorithm can skip
//! the enum altogether.

use serde::{Deserialize, Serialize};

use crate::eiffel::{Edf, EiffelConfig, Lstf, Ranked, Shaped, Srpt, Stfq, StrictPriority};
use crate::{
    ConfigError, Drr, Fifo, FlowError, FlowId, FlowParams, FlowTable, Fq, Hierarchy,
    HierarchyConfig, Instant, Packet, Prio, Qfq, QfqPlus, Rejected, Scheduler, Wf2qPlus,
};

/// The built-in algorithms, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum AlgKind {
    /// [`Fifo`]
    Fifo,
    /// [`Prio`]
    Prio,
    /// [`Drr`]
    Drr,
    /// [`Fq`]: RFC 8290's flow queueing (the scheduler of FQ-CoDel)
    Fq,
    /// [`Wf2qPlus`]
    #[serde(rename = "wf2q+")]
    Wf2qPlus,
    /// [`Qfq`]
    Qfq,
    /// [`QfqPlus`]
    #[serde(rename = "qfq+")]
    QfqPlus,
    /// [`Hierarchy`] (HTB-like; also `hier`, `hclock`)
    #[serde(rename = "htb", alias = "hier", alias = "hclock")]
    Hierarchy,
    /// Eiffel pFabric / shortest remaining processing time ([`crate::eiffel::Srpt`]); alias `pfabric`.
    Srpt,
    /// Eiffel earliest deadline first ([`crate::eiffel::Edf`]).
    Edf,
    /// Eiffel least slack time first ([`crate::eiffel::Lstf`]).
    Lstf,
    /// Start-time fair queueing as an Eiffel rank ([`crate::eiffel::Stfq`]).
    Stfq,
    /// Strict priority as an Eiffel rank ([`crate::eiffel::StrictPriority`]).
    EiffelPrio,
    /// Per-flow EDT rate limits ([`crate::eiffel::Shaped`]) in front of DRR; alias `edt`.
    ShapedDrr,
}

impl AlgKind {
    /// Every algorithm, in the order reports list them.
    pub const ALL: &'static [AlgKind] = &[
        AlgKind::Fifo,
        AlgKind::Prio,
        AlgKind::Drr,
        AlgKind::Fq,
        AlgKind::Wf2qPlus,
        AlgKind::Qfq,
        AlgKind::QfqPlus,
        AlgKind::Hierarchy,
        AlgKind::Srpt,
        AlgKind::Edf,
        AlgKind::Lstf,
        AlgKind::Stfq,
        AlgKind::EiffelPrio,
        AlgKind::ShapedDrr,
    ];

    /// The name accepted by [`AlgKind::parse`] and printed in reports.
    pub const fn name(self) -> &'static str {
        match self {
            AlgKind::Fifo => "fifo",
            AlgKind::Prio => "prio",
            AlgKind::Drr => "drr",
            AlgKind::Fq => "fq",
            AlgKind::Wf2qPlus => "wf2q+",
            AlgKind::Qfq => "qfq",
            AlgKind::QfqPlus => "qfq+",
            AlgKind::Hierarchy => "htb",
            AlgKind::Srpt => "srpt",
            AlgKind::Edf => "edf",
            AlgKind::Lstf => "lstf",
            AlgKind::Stfq => "stfq",
            AlgKind::EiffelPrio => "eiffel-prio",
            AlgKind::ShapedDrr => "shaped-drr",
        }
    }

    /// Comma-separated list of every name, for error messages and `--help`.
    pub fn known_names() -> String {
        Self::ALL
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Looks an algorithm up by name (case-insensitive; `rr` means DRR,
    /// `wf2qp`/`wf2q` mean WF²Q+, `qfqp` means QFQ+).
    ///
    /// # Errors
    /// [`ConfigError::UnknownAlgorithm`] listing the known names.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::AlgKind;
    /// assert_eq!(AlgKind::parse("DRR").unwrap(), AlgKind::Drr);
    /// assert!(AlgKind::parse("nope").is_err());
    /// ```
    pub fn parse(name: &str) -> Result<Self, ConfigError> {
        let lower = name.trim().to_ascii_lowercase();
        let alias = match lower.as_str() {
            "rr" => "drr",
            "wf2qp" | "wf2q" => "wf2q+",
            "qfqp" => "qfq+",
            "hier" | "hclock" => "htb",
            "pfabric" => "srpt",
            "edt" => "shaped-drr",
            other => other,
        };
        Self::ALL
            .iter()
            .copied()
            .find(|a| a.name() == alias)
            .ok_or_else(|| ConfigError::UnknownAlgorithm {
                name: name.to_string(),
                known: Self::known_names(),
            })
    }
}

impl std::fmt::Display for AlgKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything needed to build a scheduler; plain serialisable data.
///
/// Defaults: DRR, 65 536 packets of arena (enough for 128 clients with full
/// 512-slot mailboxes), no per-flow limit, a hierarchy quantum of one MTU
/// per unit of weight, no link-rate hint. In a config file every field may be left
/// out (it takes its default) and an unknown field is refused by name.
///
/// # Examples
/// ```
/// use pspat_sched::{AlgKind, SchedulerConfig};
/// let cfg: SchedulerConfig =
///     serde_json::from_str(r#"{"alg": "shaped-drr", "eiffel": {"rate_bps": 1000000}}"#).unwrap();
/// assert_eq!(cfg.alg, AlgKind::ShapedDrr);
/// assert_eq!(cfg.capacity, SchedulerConfig::DEFAULT_CAPACITY);
/// assert!(serde_json::from_str::<SchedulerConfig>(r#"{"algo": "drr"}"#).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Which algorithm.
    pub alg: AlgKind,
    /// Packets the scheduler can hold in all.
    pub capacity: usize,
    /// Hierarchy: bytes of DRR quantum per unit of weight among siblings
    /// (inner quanta are `quantum_unit × weight / smallest sibling
    /// weight`). Deprecated for DRR: still range-checked (1..=65535) but
    /// otherwise ignored there, as DRR's
    /// quanta now follow the flows (the smallest is the largest lmax, the
    /// others in proportion to the weights; see [`crate::drr`]), which keeps
    /// DRR within its T-WFI bound for any weights.
    pub quantum_unit: u32,
    /// Hierarchy: the tree; `None` builds [`HierarchyConfig::for_flows`]
    /// (unshaped, work-conserving), whose node weights then follow the
    /// flows ([`Hierarchy::with_weights_following_flows`]).
    pub hierarchy: Option<HierarchyConfig>,
    /// Eiffel policies and shaping (flow sizes, deadlines, rates); see
    /// [`EiffelConfig`] for the defaults.
    pub eiffel: EiffelConfig,
    /// WF2Q+: the rate in bit/s of the link the scheduler feeds, so that its
    /// virtual time follows the link ([`Wf2qPlus::with_link_rate`]) and the
    /// exact one-packet bound holds; it must be a [`Rate`](crate::Rate)
    /// (1000..=10¹² bit/s). Other algorithms ignore it. `pspat bench`
    /// and `pspat demo` fill it in from their emulated link rate when left
    /// `None`, and `pspat_eval::wfi::run` from the scenario's.
    pub link_rate_bps: Option<u64>,
    /// FQ: the quantum in bytes of a flow of the smallest weight
    /// (1..=[`crate::fq::MAX_QUANTUM`], default
    /// [`crate::fq::DEFAULT_QUANTUM`]); other algorithms ignore it.
    pub fq_quantum: u32,
}

impl Default for SchedulerConfig {
    /// [`SchedulerConfig::new`] for DRR.
    fn default() -> Self {
        SchedulerConfig::new(AlgKind::Drr)
    }
}

impl SchedulerConfig {
    /// Default arena size in packets.
    pub const DEFAULT_CAPACITY: usize = 65_536;

    /// The defaults for `alg`.
    pub fn new(alg: AlgKind) -> Self {
        SchedulerConfig {
            alg,
            capacity: Self::DEFAULT_CAPACITY,
            quantum_unit: crate::drr::DEFAULT_QUANTUM_UNIT,
            hierarchy: None,
            eiffel: EiffelConfig::default(),
            link_rate_bps: None,
            fq_quantum: crate::fq::DEFAULT_QUANTUM,
        }
    }

    /// Builds the configured algorithm over `flows`.
    ///
    /// # Errors
    /// Any parameter out of its range, named in the [`ConfigError`].
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::{AlgKind, FlowTable, Scheduler, SchedulerConfig};
    /// let s = SchedulerConfig::new(AlgKind::Drr).build(FlowTable::uniform(4).unwrap()).unwrap();
    /// assert_eq!(s.name(), "drr");
    /// ```
    pub fn build(&self, flows: FlowTable) -> Result<AnyScheduler, ConfigError> {
        if matches!(self.alg, AlgKind::Drr | AlgKind::ShapedDrr) {
            // Deprecated for DRR but still checked, as it always was.
            ConfigError::check_range(
                "DRR quantum unit (bytes)",
                self.quantum_unit,
                1..=crate::drr::MAX_QUANTUM_UNIT,
            )?;
        }
        Ok(match self.alg {
            AlgKind::Fifo => AnyScheduler::Fifo(Fifo::new(flows, self.capacity)?),
            AlgKind::Prio => AnyScheduler::Prio(Prio::new(flows, self.capacity)?),
            AlgKind::Drr => AnyScheduler::Drr(Drr::new(flows, self.capacity)?),
            AlgKind::Fq => AnyScheduler::Fq(Fq::new(flows, self.capacity, self.fq_quantum)?),
            AlgKind::Wf2qPlus => {
                let s = Wf2qPlus::new(flows, self.capacity)?;
                AnyScheduler::Wf2qPlus(match self.link_rate_bps {
                    Some(rate) => s.with_link_rate(rate)?,
                    None => s,
                })
            }
            AlgKind::Qfq => AnyScheduler::Qfq(Qfq::new(flows, self.capacity)?),
            AlgKind::QfqPlus => AnyScheduler::QfqPlus(QfqPlus::new(flows, self.capacity)?),
            AlgKind::Hierarchy => {
                let default;
                let tree = match &self.hierarchy {
                    Some(t) => t,
                    None => {
                        default = HierarchyConfig::for_flows(&flows);
                        &default
                    }
                };
                let h = Hierarchy::new(tree, flows, self.capacity, self.quantum_unit)?;
                // The default tree's weights are sums of flow weights: keep
                // them so as flows come, change and go.
                let h = if self.hierarchy.is_none() {
                    h.with_weights_following_flows()
                } else {
                    h
                };
                AnyScheduler::Hierarchy(Box::new(h))
            }
            AlgKind::Srpt => AnyScheduler::Srpt(self.eiffel.srpt(flows, self.capacity)?),
            AlgKind::Edf => AnyScheduler::Edf(self.eiffel.edf(flows, self.capacity)?),
            AlgKind::Lstf => AnyScheduler::Lstf(self.eiffel.lstf(flows, self.capacity)?),
            AlgKind::Stfq => AnyScheduler::Stfq(self.eiffel.stfq(flows, self.capacity)?),
            AlgKind::EiffelPrio => {
                AnyScheduler::EiffelPrio(self.eiffel.strict_priority(flows, self.capacity)?)
            }
            AlgKind::ShapedDrr => {
                AnyScheduler::ShapedDrr(self.eiffel.shaped_drr(flows, self.capacity)?)
            }
        })
    }
}

/// Generic code to run on the concrete algorithm inside an [`AnyScheduler`];
/// see [`AnyScheduler::visit`].
///
/// ```
/// use pspat_sched::{AlgKind, FlowParams, FlowTable, Scheduler, SchedulerConfig, VisitScheduler};
/// struct Name;
/// impl VisitScheduler for Name {
///     type Output = &'static str;
///     fn visit<S: Scheduler + Send + 'static>(self, sched: S) -> &'static str {
///         sched.name()
///     }
/// }
/// let flows = FlowTable::new(vec![FlowParams::default(); 4]).unwrap();
/// let sched = SchedulerConfig::new(AlgKind::Qfq).build(flows).unwrap();
/// assert_eq!(sched.visit(Name), "qfq");
/// ```
pub trait VisitScheduler {
    /// What the visit returns.
    type Output;
    /// Runs on the algorithm, moved out of its `AnyScheduler` (every
    /// built-in algorithm is `Send` and owns its state, so it can move to
    /// another thread).
    fn visit<S: Scheduler + Send + 'static>(self, sched: S) -> Self::Output;
}

macro_rules! any_scheduler {
    ($($variant:ident($ty:ty)),+ $(,)?) => {
        /// One of the built-in algorithms, chosen at run time.
        // An explicit tag byte: the per-call `match` loads it and jumps; the
        // niche-encoded default spent about seven more instructions per call
        // decoding the variant (measured with callgrind on the harness).
        // Variants are held inline although their sizes differ (DRR's
        // read-ahead cursors make it the largest): an `AnyScheduler` is
        // built and moved once per run, and a box would add a pointer load
        // to every call.
        #[allow(clippy::large_enum_variant)]
        #[non_exhaustive]
        #[repr(u8)]
        pub enum AnyScheduler {
            $(
                #[doc = concat!("[`", stringify!($ty), "`]")]
                $variant($ty),
            )+
        }

        impl AnyScheduler {
            /// Hands the algorithm inside to `visitor` as its concrete type.
            ///
            /// Code that makes many calls (a measuring loop, an arbiter) runs
            /// faster on the concrete type: each call through `AnyScheduler`
            /// first loads the tag and jumps, and a loop that calls through it
            /// cannot be specialised for one algorithm. The visitor's code is
            /// compiled once per algorithm.
            pub fn visit<V: VisitScheduler>(self, visitor: V) -> V::Output {
                match self { $(AnyScheduler::$variant(s) => visitor.visit(s),)+ }
            }
        }

        impl Scheduler for AnyScheduler {
            #[inline(always)]
            fn enqueue(&mut self, now: Instant, pkt: Packet) -> Result<(), Rejected> {
                match self { $(AnyScheduler::$variant(s) => s.enqueue(now, pkt),)+ }
            }
            #[inline(always)]
            fn dequeue(&mut self, now: Instant) -> Option<Packet> {
                match self { $(AnyScheduler::$variant(s) => s.dequeue(now),)+ }
            }
            #[inline]
            fn queued(&self) -> usize {
                match self { $(AnyScheduler::$variant(s) => s.queued(),)+ }
            }
            #[inline]
            fn next_eligible(&self, now: Instant) -> Option<Instant> {
                match self { $(AnyScheduler::$variant(s) => s.next_eligible(now),)+ }
            }
            fn name(&self) -> &'static str {
                match self { $(AnyScheduler::$variant(s) => s.name(),)+ }
            }
            fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
                match self { $(AnyScheduler::$variant(s) => s.add_flow(flow, params),)+ }
            }
            fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
                match self { $(AnyScheduler::$variant(s) => s.change_flow(flow, params),)+ }
            }
            fn remove_flow(
                &mut self,
                flow: FlowId,
                purge: &mut dyn FnMut(Rejected),
            ) -> Result<(), FlowError> {
                match self { $(AnyScheduler::$variant(s) => s.remove_flow(flow, purge),)+ }
            }
            fn flow_queued(&self, flow: FlowId) -> Option<usize> {
                match self { $(AnyScheduler::$variant(s) => s.flow_queued(flow),)+ }
            }
            fn uncharge(&mut self, flow: FlowId, len: u32) {
                match self { $(AnyScheduler::$variant(s) => s.uncharge(flow, len),)+ }
            }
            fn drop_head(&mut self, flow: FlowId) -> Option<Packet> {
                match self { $(AnyScheduler::$variant(s) => s.drop_head(flow),)+ }
            }
            fn set_quantum(&mut self, bytes: u32) -> Result<(), ConfigError> {
                match self { $(AnyScheduler::$variant(s) => s.set_quantum(bytes),)+ }
            }
        }
    };
}

any_scheduler! {
    Fifo(Fifo),
    Prio(Prio),
    Drr(Drr),
    Fq(Fq),
    Wf2qPlus(Wf2qPlus),
    Qfq(Qfq),
    QfqPlus(QfqPlus),
    Hierarchy(Box<Hierarchy>),
    Srpt(Ranked<Srpt>),
    Edf(Ranked<Edf>),
    Lstf(Ranked<Lstf>),
    Stfq(Ranked<Stfq>),
    EiffelPrio(Ranked<StrictPriority>),
    ShapedDrr(Shaped<Drr>),
}
