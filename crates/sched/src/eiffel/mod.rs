//! Eiffel: integer priority queues, programmable rank policies and decoupled
//! shaping. Saeed, Zhao, Dukkipati, Ammar, Zegura, Harras, Vahdat, "Eiffel:
//! Efficient and Flexible Software Packet Scheduling", NSDI 2019; Saeed et
//! al., "Carousel", SIGCOMM 2017; `docs/REFERENCE.md` §5.
//!
//! Packet ranks are small integers from known ranges (priorities, times,
//! sizes), so a *bucketed* queue whose occupancy is a tree of 64-bit words
//! replaces a comparison-based heap: insert O(1), extract-min one
//! `trailing_zeros` per level, no comparisons.
//!
//! | Piece | What |
//! |---|---|
//! | [`Hffs`] | hierarchical FFS over a fixed window `[0, 64^L × g)` |
//! | [`Cffs`] | circular FFS: main + buffer windows that rotate as rank or time advances |
//! | [`RankPolicy`] | a policy as flow ranks computed on enqueue and dequeue |
//! | [`Ranked`] | the scheduler: per-flow FIFOs ordered by flow rank in an hFFS/cFFS |
//! | [`Srpt`], [`Edf`], [`Lstf`], [`Stfq`], [`StrictPriority`] | built-in policies |
//! | [`Shaped`] | per-flow EDT rate limits in a time cFFS, in front of any scheduler |
//! | [`GradientQueue`] | experiment: the approximate queue, descending by `⌊Σk·w/Σw⌋` |
//!
//! By name (`AlgKind::parse`): `srpt` (alias `pfabric`), `edf`, `lstf`,
//! `stfq`, `eiffel-prio`, `shaped-drr` (alias `edt`). Their parameters are in
//! [`EiffelConfig`], the `eiffel` field of
//! [`SchedulerConfig`](crate::SchedulerConfig).
//!
//! # Ranks outside the window
//! [`OutOfWindow::Clamp`] (default) puts a rank below the window in the first
//! bucket and a rank beyond it in the last one (cFFS re-sorts that bucket when
//! it rotates); [`OutOfWindow::Reject`] refuses the push and counts it (the
//! scheduler answers [`DropReason::OutOfWindow`](crate::DropReason)).
//!
//! # Memory
//! 8 bytes per bucket, 16 bytes per id, `(64^L − 1)/63` bitmap words: an hFFS
//! of 3 levels is 262 144 buckets (2 MiB + 33 KiB), a cFFS twice that. Ids
//! are flows for [`Ranked`] and [`Shaped`], so memory does not grow with the
//! backlog.
//!
//! # Example: adding a policy
//! A policy is one small trait: here, least attained service (the flow that
//! has sent the fewest bytes goes first), re-ranked as packets leave.
//! ```
//! use pspat_sched::eiffel::{QueueConfig, RankPolicy, RankQueue, Ranked};
//! use pspat_sched::{FlowId, FlowTable, Instant, Packet, Scheduler};
//!
//! struct LeastAttained {
//!     sent: Vec<u64>, // allocated once, at construction
//! }
//!
//! impl RankPolicy for LeastAttained {
//!     fn rank(&mut self, _now: Instant, head: &Packet, _stamp: u64) -> u64 {
//!         self.sent[head.flow.index()]
//!     }
//!     fn on_departure(&mut self, _now: Instant, pkt: &Packet, _stamp: u64) {
//!         self.sent[pkt.flow.index()] += u64::from(pkt.len);
//!     }
//!     fn queue(&self) -> RankQueue {
//!         // Attained service only grows: a sliding window, 64-byte buckets.
//!         RankQueue::Sliding(QueueConfig { granularity: 64, ..QueueConfig::default() })
//!     }
//!     fn name(&self) -> &'static str {
//!         "las"
//!     }
//! }
//!
//! let flows = FlowTable::uniform(2).unwrap();
//! let mut s = Ranked::new(flows, 64, LeastAttained { sent: vec![0; 2] }).unwrap();
//! for i in 0..4 {
//!     s.enqueue(Instant::ZERO, Packet::new(FlowId(0), 1500, i)).unwrap();
//! }
//! s.enqueue(Instant::ZERO, Packet::new(FlowId(1), 1500, 9)).unwrap();
//! let order: Vec<u64> = (0..5).map(|_| s.dequeue(Instant::ZERO).unwrap().token).collect();
//! assert_eq!(order, [0, 9, 1, 2, 3]); // flow 1 overtakes once flow 0 has sent more
//! ```

use serde::{Deserialize, Serialize};

use crate::rate::Rate;
use crate::{ConfigError, Drr, FlowTable};

mod cffs;
mod gradient;
mod hffs;
mod policy;
mod ranked;
mod shaper;

pub use cffs::Cffs;
pub use gradient::GradientQueue;
pub use hffs::{Hffs, OutOfWindow, PushError, QueueConfig};
pub use policy::{
    Edf, Lstf, RankPolicy, RankQueue, Srpt, Stfq, StrictPriority, TIME_GRANULARITY_NS,
};
pub use ranked::Ranked;
pub use shaper::{Shaped, DEFAULT_SHAPER_GRANULARITY_NS, MIN_SHAPING_RATE_BPS};

/// Parameters of the Eiffel algorithms that [`FlowParams`](crate::FlowParams)
/// lacks; plain data, every field optional in a config file.
///
/// | Field | Default | Used by |
/// |---|---|---|
/// | `flow_size_bytes` | 1 000 000 | `srpt`: size of every flow |
/// | `flow_sizes_bytes` | `[]` | `srpt`: one size per flow, overrides the above |
/// | `deadline_ns` | 10 000 000 | `edf`, `lstf`: relative deadline of flow `i` is `deadline_ns / weight_i` |
/// | `deadlines_ns` | `[]` | `edf`, `lstf`: one relative deadline per flow, overrides the above |
/// | `lstf_link_bps` | 10 000 000 000 | `lstf`: link rate turning lengths into transmission time |
/// | `rate_bps` | 100 000 000 | `shaped-drr`: rate of flow `i` is `rate_bps × weight_i` (also for flows added or changed at run time) |
/// | `rates_bps` | `[]` | `shaped-drr`: one rate per flow (or per flow slot), overrides the above for those slots |
/// | `shaper_granularity_ns` | 1024 | `shaped-drr`: time-queue bucket width |
/// | `queue` | `None` | every ranked policy: override the rank queue's levels, granularity and out-of-window policy |
///
/// # Examples
/// ```
/// use pspat_sched::{AlgKind, FlowTable, Scheduler, SchedulerConfig};
/// let mut cfg = SchedulerConfig::new(AlgKind::ShapedDrr);
/// cfg.eiffel.rates_bps = vec![1_000_000, 2_000_000];
/// assert!(cfg.build(FlowTable::uniform(2).unwrap()).is_ok());
/// cfg.eiffel.rates_bps = vec![0, 2_000_000];
/// let err = cfg.build(FlowTable::uniform(2).unwrap()).err().unwrap();
/// assert!(err.to_string().contains("flow 0 shaping rate"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EiffelConfig {
    /// SRPT: bytes of every flow (a flow that has sent them restarts).
    pub flow_size_bytes: u64,
    /// SRPT: bytes per flow; empty = `flow_size_bytes` for all.
    pub flow_sizes_bytes: Vec<u64>,
    /// EDF/LSTF: relative deadline in ns of a weight-1 flow; flow `i` gets
    /// `deadline_ns / weight_i`.
    pub deadline_ns: u64,
    /// EDF/LSTF: relative deadline per flow in ns; empty = derived as above.
    pub deadlines_ns: Vec<u64>,
    /// LSTF: link rate in bit/s, in the range of a [`Rate`].
    pub lstf_link_bps: u64,
    /// Shaping: rate per unit of weight in bit/s, in the range of a
    /// [`Rate`]. Signed, like the hierarchy's rates, so that a
    /// negative value in a config file reaches validation and is refused by
    /// name rather than by the deserialiser.
    pub rate_bps: i64,
    /// Shaping: rate per flow in bit/s, each in the range of a
    /// [`Rate`]; empty = `rate_bps × weight` (capped at
    /// the top of that range).
    pub rates_bps: Vec<i64>,
    /// Shaping: width of a time-queue bucket in ns.
    pub shaper_granularity_ns: u64,
    /// Ranked policies: the rank queue's shape instead of the policy's own.
    pub queue: Option<QueueConfig>,
}

impl Default for EiffelConfig {
    fn default() -> Self {
        EiffelConfig {
            flow_size_bytes: 1_000_000,
            flow_sizes_bytes: Vec::new(),
            deadline_ns: 10_000_000,
            deadlines_ns: Vec::new(),
            lstf_link_bps: 10_000_000_000,
            rate_bps: 100_000_000,
            rates_bps: Vec::new(),
            shaper_granularity_ns: DEFAULT_SHAPER_GRANULARITY_NS,
            queue: None,
        }
    }
}

impl EiffelConfig {
    fn ranked<P: RankPolicy>(
        &self,
        flows: FlowTable,
        capacity: usize,
        policy: P,
    ) -> Result<Ranked<P>, ConfigError> {
        let mut shape = policy.queue();
        if let Some(q) = self.queue {
            shape = shape.with_config(q);
        }
        Ranked::with_queue(flows, capacity, policy, shape)
    }

    /// `srpt`: [`Srpt`] over `flows`.
    ///
    /// # Errors
    /// A zero flow size, a size list of the wrong length, a bad queue.
    pub fn srpt(&self, flows: FlowTable, capacity: usize) -> Result<Ranked<Srpt>, ConfigError> {
        let p = Srpt::new(&flows, self.flow_size_bytes, &self.flow_sizes_bytes)?;
        self.ranked(flows, capacity, p)
    }

    /// `edf`: [`Edf`] over `flows`.
    ///
    /// # Errors
    /// A deadline list of the wrong length, a bad queue.
    pub fn edf(&self, flows: FlowTable, capacity: usize) -> Result<Ranked<Edf>, ConfigError> {
        let p = Edf::new(&flows, self.deadline_ns, &self.deadlines_ns)?;
        self.ranked(flows, capacity, p)
    }

    /// `lstf`: [`Lstf`] over `flows`.
    ///
    /// # Errors
    /// As [`EiffelConfig::edf`], or a link rate outside 1000..=10¹² bit/s.
    pub fn lstf(&self, flows: FlowTable, capacity: usize) -> Result<Ranked<Lstf>, ConfigError> {
        let p = Lstf::new(
            &flows,
            self.deadline_ns,
            &self.deadlines_ns,
            self.lstf_link_bps,
        )?;
        self.ranked(flows, capacity, p)
    }

    /// `stfq`: [`Stfq`] over `flows`.
    ///
    /// # Errors
    /// A bad queue or capacity.
    pub fn stfq(&self, flows: FlowTable, capacity: usize) -> Result<Ranked<Stfq>, ConfigError> {
        let p = Stfq::new(&flows);
        self.ranked(flows, capacity, p)
    }

    /// `eiffel-prio`: [`StrictPriority`] over `flows`.
    ///
    /// # Errors
    /// A bad queue or capacity.
    pub fn strict_priority(
        &self,
        flows: FlowTable,
        capacity: usize,
    ) -> Result<Ranked<StrictPriority>, ConfigError> {
        let p = StrictPriority::new(&flows);
        self.ranked(flows, capacity, p)
    }

    /// The shaping rate of every flow in bit/s: `rates_bps`, or
    /// `rate_bps × weight` capped at [`MAX_RATE_BPS`](crate::rate::MAX_RATE_BPS)
    /// (a flow that may go faster than the fastest rate is shaped to it).
    ///
    /// # Errors
    /// A `rate_bps` or a per-flow rate outside the range of a
    /// [`Rate`] (negative included, named by field or
    /// flow), or a rate list of the wrong length.
    pub fn rates(&self, flows: &FlowTable) -> Result<Vec<u64>, ConfigError> {
        let checked = |what: String, r: i64| Rate::checked(what, r).map(Rate::bps);
        let unit = || Rate::checked("eiffel.rate_bps", self.rate_bps);
        // Capped at the largest rate rather than refused (documented).
        let derived =
            |unit: Rate, f: &crate::FlowParams| unit.saturating_mul(u64::from(f.weight)).bps();
        if self.rates_bps.is_empty() {
            let unit = unit()?;
            return Ok(flows.slots().map(|f| derived(unit, &f)).collect());
        }
        if self.rates_bps.len() != flows.len() && self.rates_bps.len() != flows.capacity() {
            return Err(ConfigError::invalid(
                "eiffel.rates_bps",
                format!(
                    "{} rates for {} flows: give one per flow or none",
                    self.rates_bps.len(),
                    flows.len()
                ),
            ));
        }
        // One rate per slot: the list's, then (slots beyond it, added at
        // run time) `rate_bps × weight`.
        let mut rates = Vec::with_capacity(flows.capacity());
        for (i, f) in flows.slots().enumerate() {
            rates.push(match self.rates_bps.get(i) {
                Some(&r) => checked(
                    format!("eiffel.rates_bps: flow {i} shaping rate (bit/s)"),
                    r,
                )?,
                // Validated only when some slot needs it.
                None => derived(unit()?, &f),
            });
        }
        Ok(rates)
    }

    /// `shaped-drr`: [`Shaped`] per-flow rate limits in front of [`Drr`].
    ///
    /// # Errors
    /// A rate outside 1000..=10¹² bit/s (named), a zero granularity, a bad
    /// capacity.
    pub fn shaped_drr(
        &self,
        flows: FlowTable,
        capacity: usize,
    ) -> Result<Shaped<Drr>, ConfigError> {
        let rates = self.rates(&flows)?;
        let inner = Drr::new(flows.clone(), capacity)?;
        let unit = u64::try_from(self.rate_bps)
            .unwrap_or(0)
            .max(MIN_SHAPING_RATE_BPS);
        Shaped::new(
            inner,
            flows,
            capacity,
            &rates,
            self.shaper_granularity_ns,
            "shaped-drr",
        )?
        .with_rate_per_weight(unit, self.rates_bps.len())
    }
}
