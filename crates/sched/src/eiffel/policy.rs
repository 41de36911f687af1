//! Programmable policies: the [`RankPolicy`] trait and the built-in ranks
//! (`docs/REFERENCE.md` §5.5–5.6).
//!
//! Eiffel extends PIFO in two ways used here: a policy ranks **flows** (each a
//! FIFO of packets), and it ranks them **on enqueue and on dequeue**. A policy
//! sees four events:
//!
//! 1. [`RankPolicy::on_arrival`] for every accepted packet: returns the
//!    packet's *stamp* (a deadline, a start tag, ...), kept with the packet;
//! 2. [`RankPolicy::rank`] whenever a packet becomes its flow's head (the
//!    flow just became backlogged, or its previous head left): returns the
//!    flow's rank, lower first;
//! 3. [`RankPolicy::rerank_on_arrival`] when a packet joins a flow that is
//!    already queued: may move the flow (default: leave it);
//! 4. [`RankPolicy::on_departure`] after a packet leaves.
//!
//! Flows of equal rank (more precisely, of equal `rank / granularity`) are
//! served round-robin, one packet each, since a flow is re-queued at the tail
//! of its bucket after each departure.
//!
//! | Policy | Rank | Queue |
//! |---|---|---|
//! | [`Srpt`] (pFabric) | remaining bytes of the flow | fixed window from 0, 2 levels |
//! | [`Edf`] | absolute deadline of the head: arrival + relative deadline | sliding (ns) |
//! | [`Lstf`] | slack: deadline − transmission time of the head | sliding (ns) |
//! | [`Stfq`] | start tag `S = max(V, F_prev)`, `F = S + len/w`, `V = S` in service | sliding (virtual), 2 levels |
//! | [`StrictPriority`] | the flow's priority | fixed, 64 buckets |

use serde::{Deserialize, Serialize};

use crate::rate::Rate;
use crate::{ConfigError, FlowId, FlowParams, FlowTable, Instant, Packet};

use super::QueueConfig;

/// Which integer queue orders the flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RankQueue {
    /// An [`Hffs`](super::Hffs) over `[0, 64^L × g)`: for ranks from a known
    /// range that can go down as well as up (sizes, priorities).
    Fixed(QueueConfig),
    /// A [`Cffs`](super::Cffs) that slides with the smallest rank: for ranks
    /// that grow with (virtual) time (deadlines, start tags).
    Sliding(QueueConfig),
}

impl RankQueue {
    /// The queue shape.
    pub fn config(&self) -> QueueConfig {
        match *self {
            RankQueue::Fixed(c) | RankQueue::Sliding(c) => c,
        }
    }

    /// The same kind of queue with another shape.
    #[must_use]
    pub fn with_config(self, c: QueueConfig) -> Self {
        match self {
            RankQueue::Fixed(_) => RankQueue::Fixed(c),
            RankQueue::Sliding(_) => RankQueue::Sliding(c),
        }
    }
}

/// A scheduling policy expressed as flow ranks (lower leaves first).
///
/// Implement [`RankPolicy::rank`] and [`RankPolicy::name`]; the other hooks
/// have defaults. Per-flow state is the policy's own, indexed by
/// `pkt.flow.index()` and sized by the table's capacity (flow slots); the
/// hooks must not panic for any flow slot of the table the policy was built
/// for and should not allocate. The lifecycle hooks
/// ([`RankPolicy::on_flow_added`], [`RankPolicy::on_flow_changed`],
/// [`RankPolicy::on_flow_removed`]) let it follow flows added, changed and
/// removed at run time.
///
/// # Examples
/// A complete policy: serve the flow whose head packet is the shortest
/// (a per-packet rank rather than a per-flow one).
/// ```
/// use pspat_sched::eiffel::{QueueConfig, RankPolicy, RankQueue, Ranked};
/// use pspat_sched::{FlowId, FlowTable, Instant, Packet, Scheduler};
///
/// struct ShortestHead;
///
/// impl RankPolicy for ShortestHead {
///     fn rank(&mut self, _now: Instant, head: &Packet, _stamp: u64) -> u64 {
///         u64::from(head.len)
///     }
///     fn queue(&self) -> RankQueue {
///         // Ranks are 1..=65535 bytes: 4096 buckets of 16 bytes cover them.
///         RankQueue::Fixed(QueueConfig { levels: 2, granularity: 16, ..QueueConfig::default() })
///     }
///     fn name(&self) -> &'static str {
///         "shortest-head"
///     }
/// }
///
/// let mut s = Ranked::new(FlowTable::uniform(2).unwrap(), 64, ShortestHead).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(0), 1500, 1)).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(1), 64, 2)).unwrap();
/// assert_eq!(s.dequeue(Instant::ZERO).unwrap().token, 2);
/// assert_eq!(s.name(), "shortest-head");
/// ```
pub trait RankPolicy {
    /// Whether [`RankPolicy::on_arrival`] returns stamps worth keeping. A
    /// policy that ranks from flow state alone sets it to `false` and the
    /// scheduler skips the per-packet stamp queue (stamps are then 0).
    const STAMPS: bool = true;

    /// A packet was accepted; returns its stamp, handed back to
    /// [`RankPolicy::rank`] and [`RankPolicy::on_departure`]. Default 0.
    fn on_arrival(&mut self, now: Instant, pkt: &Packet) -> u64 {
        let _ = (now, pkt);
        0
    }

    /// The rank of `head.flow`, whose head packet is now `head` (stamped
    /// `stamp`).
    fn rank(&mut self, now: Instant, head: &Packet, stamp: u64) -> u64;

    /// `pkt` joined its flow, which is queued with rank `current`: `Some(r)`
    /// moves the flow to rank `r`. Default: `None`.
    fn rerank_on_arrival(&mut self, now: Instant, pkt: &Packet, current: u64) -> Option<u64> {
        let _ = (now, pkt, current);
        None
    }

    /// `pkt` (stamped `stamp`) left the scheduler.
    fn on_departure(&mut self, now: Instant, pkt: &Packet, stamp: u64) {
        let _ = (now, pkt, stamp);
    }

    /// A lower bound on every rank this policy will produce from `now` on,
    /// for a sliding queue (see [`Cffs::set_floor`](super::Cffs::set_floor)).
    /// Default `None`: ranks never go below the last one served.
    fn rank_floor(&self, now: Instant) -> Option<u64> {
        let _ = now;
        None
    }

    /// The integer queue that orders flows by this policy's ranks.
    /// Default: a sliding 3-level queue of granularity 1.
    fn queue(&self) -> RankQueue {
        RankQueue::Sliding(QueueConfig::default())
    }

    /// A short name for reports.
    fn name(&self) -> &'static str;

    /// Flow slot `flow` became present with `params`. Default: nothing.
    fn on_flow_added(&mut self, flow: FlowId, params: &FlowParams) {
        let _ = (flow, params);
    }

    /// The present flow `flow` now has `params`; the scheduler re-ranks it
    /// right after (if it is queued). Default: nothing.
    fn on_flow_changed(&mut self, flow: FlowId, params: &FlowParams) {
        let _ = (flow, params);
    }

    /// Flow `flow` was removed; its packets were purged without
    /// [`RankPolicy::on_departure`]. Default: nothing.
    fn on_flow_removed(&mut self, flow: FlowId) {
        let _ = flow;
    }
}

fn per_flow(
    what: &str,
    list: &[u64],
    default: impl Fn(usize) -> u64,
    flows: &FlowTable,
) -> Result<Box<[u64]>, ConfigError> {
    if !list.is_empty() && list.len() != flows.len() && list.len() != flows.capacity() {
        return Err(ConfigError::invalid(
            what,
            format!(
                "{} entries for {} flows ({} slots): give one per flow, one per slot, or none",
                list.len(),
                flows.len(),
                flows.capacity()
            ),
        ));
    }
    Ok((0..flows.capacity())
        .map(|i| list.get(i).copied().unwrap_or_else(|| default(i)))
        .collect())
}

/// pFabric / shortest remaining processing time: rank = bytes the flow still
/// has to send, counted down as its packets leave.
///
/// `Packet` carries no remaining-size tag, so each flow has a configured size;
/// remaining = size − bytes sent since the flow (re)started. A flow that has
/// sent its size restarts as a new flow of the same size. The head packet of
/// the top flow leaves first, so a flow's packets never reorder. A flow
/// added at run time starts a new run (sizes are per slot, from the
/// configuration); weight changes do not matter.
///
/// # Examples
/// ```
/// use pspat_sched::eiffel::{Ranked, Srpt};
/// use pspat_sched::{FlowId, FlowTable, Instant, Packet, Scheduler};
/// let flows = FlowTable::uniform(2).unwrap();
/// let policy = Srpt::new(&flows, 3_000, &[9_000, 3_000]).unwrap();
/// let mut s = Ranked::new(flows, 16, policy).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(0), 1500, 0)).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(1), 1500, 1)).unwrap();
/// assert_eq!(s.dequeue(Instant::ZERO).unwrap().flow, FlowId(1)); // 3000 left < 9000 left
/// ```
pub struct Srpt {
    size: Box<[u64]>,
    sent: Box<[u64]>,
    max: u64,
}

impl Srpt {
    /// Sizes from `sizes` (one per flow), or `default` bytes for every flow
    /// when `sizes` is empty.
    ///
    /// # Errors
    /// A zero size, or a list whose length is not the number of flows.
    pub fn new(flows: &FlowTable, default: u64, sizes: &[u64]) -> Result<Self, ConfigError> {
        let size = per_flow("eiffel.flow_sizes_bytes", sizes, |_| default, flows)?;
        if let Some(i) = size.iter().position(|&s| s == 0) {
            let what = if sizes.is_empty() {
                "eiffel.flow_size_bytes".to_string()
            } else {
                format!("eiffel.flow_sizes_bytes[{i}]")
            };
            return Err(ConfigError::out_of_range(what, 0, "1.. bytes"));
        }
        let max = size.iter().copied().max().unwrap_or(1);
        Ok(Srpt {
            sent: vec![0; size.len()].into_boxed_slice(),
            size,
            max,
        })
    }

    /// Bytes `flow` still has to send in its current run.
    pub fn remaining(&self, flow: crate::FlowId) -> Option<u64> {
        let i = flow.index();
        Some(self.size.get(i)?.saturating_sub(*self.sent.get(i)?))
    }
}

impl RankPolicy for Srpt {
    const STAMPS: bool = false;

    fn on_flow_added(&mut self, flow: FlowId, _params: &FlowParams) {
        if let Some(sent) = self.sent.get_mut(flow.index()) {
            *sent = 0;
        }
    }

    fn on_flow_removed(&mut self, flow: FlowId) {
        if let Some(sent) = self.sent.get_mut(flow.index()) {
            *sent = 0;
        }
    }

    #[inline]
    fn rank(&mut self, _now: Instant, head: &Packet, _stamp: u64) -> u64 {
        self.remaining(head.flow).unwrap_or(u64::MAX)
    }

    #[inline]
    fn on_departure(&mut self, _now: Instant, pkt: &Packet, _stamp: u64) {
        let i = pkt.flow.index();
        if let (Some(sent), Some(&size)) = (self.sent.get_mut(i), self.size.get(i)) {
            *sent += u64::from(pkt.len);
            if *sent >= size {
                *sent = 0; // finished: the next packet starts a new flow
            }
        }
    }

    /// Two levels (4096 buckets, 32 KiB, cache resident) over the largest
    /// flow size: 256-byte buckets for 1 MB flows.
    fn queue(&self) -> RankQueue {
        let g = QueueConfig::granularity_for(2, self.max + 1).next_power_of_two();
        RankQueue::Fixed(QueueConfig {
            levels: 2,
            granularity: g,
            ..QueueConfig::default()
        })
    }

    fn name(&self) -> &'static str {
        "srpt"
    }
}

/// Relative deadlines per flow slot: explicit, or `deadline_ns / weight`.
fn deadlines(flows: &FlowTable, deadline_ns: u64, list: &[u64]) -> Result<Box<[u64]>, ConfigError> {
    per_flow(
        "eiffel.deadlines_ns",
        list,
        |i| deadline_ns / u64::from(flows.slot(FlowId(i as u32)).weight),
        flows,
    )
}

/// How the relative deadline of a slot follows its flow's weight: slots
/// below `explicit` keep the configured deadline, the others take
/// `deadline_ns / weight` whenever the flow is added or changed.
#[derive(Clone, Copy, Debug)]
struct DeadlineRule {
    deadline_ns: u64,
    explicit: usize,
}

impl DeadlineRule {
    /// The new relative deadline of `flow`, or `None` if it is explicit.
    fn derive(&self, flow: FlowId, params: &FlowParams) -> Option<u64> {
        (flow.index() >= self.explicit).then(|| self.deadline_ns / u64::from(params.weight.max(1)))
    }
}

/// Default granularity of the time-ranked queues, in ns (H ≈ 268 ms at 3 levels).
pub const TIME_GRANULARITY_NS: u64 = 1_024;

fn time_queue() -> RankQueue {
    RankQueue::Sliding(QueueConfig {
        levels: 3,
        granularity: TIME_GRANULARITY_NS,
        ..QueueConfig::default()
    })
}

/// Earliest deadline first: a packet's deadline is its arrival time plus its
/// flow's relative deadline; a flow ranks by its head's deadline.
///
/// # Examples
/// ```
/// use pspat_sched::eiffel::{Edf, Ranked};
/// use pspat_sched::{FlowId, FlowTable, Instant, Packet, Scheduler};
/// let flows = FlowTable::uniform(2).unwrap();
/// let policy = Edf::new(&flows, 0, &[50_000, 10_000]).unwrap();
/// let mut s = Ranked::new(flows, 16, policy).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(0), 100, 0)).unwrap(); // due at 50 µs
/// s.enqueue(Instant::from_nanos(20_000), Packet::new(FlowId(1), 100, 1)).unwrap(); // due at 30 µs
/// assert_eq!(s.dequeue(Instant::from_nanos(20_000)).unwrap().token, 1);
/// ```
pub struct Edf {
    deadline: Box<[u64]>,
    min_deadline: u64,
    rule: DeadlineRule,
}

impl Edf {
    /// Relative deadlines from `list` (ns, one per flow), or
    /// `deadline_ns / weight` for every flow when `list` is empty.
    ///
    /// # Errors
    /// A list whose length is not the number of flows.
    pub fn new(flows: &FlowTable, deadline_ns: u64, list: &[u64]) -> Result<Self, ConfigError> {
        let deadline = deadlines(flows, deadline_ns, list)?;
        Ok(Edf {
            min_deadline: deadline.iter().copied().min().unwrap_or(0),
            deadline,
            rule: DeadlineRule {
                deadline_ns,
                explicit: list.len(),
            },
        })
    }
}

impl RankPolicy for Edf {
    #[inline]
    fn on_arrival(&mut self, now: Instant, pkt: &Packet) -> u64 {
        let d = self.deadline.get(pkt.flow.index()).copied().unwrap_or(0);
        now.as_nanos().saturating_add(d)
    }
    #[inline]
    fn rank(&mut self, _now: Instant, _head: &Packet, stamp: u64) -> u64 {
        stamp
    }
    fn rank_floor(&self, now: Instant) -> Option<u64> {
        Some(now.as_nanos().saturating_add(self.min_deadline))
    }
    fn queue(&self) -> RankQueue {
        time_queue()
    }
    fn name(&self) -> &'static str {
        "edf"
    }
    /// A derived deadline follows the new weight (queued packets keep
    /// theirs); the floor only ever goes down, so it stays a lower bound.
    fn on_flow_added(&mut self, flow: FlowId, params: &FlowParams) {
        self.on_flow_changed(flow, params);
    }
    fn on_flow_changed(&mut self, flow: FlowId, params: &FlowParams) {
        if let (Some(d), Some(slot)) = (
            self.rule.derive(flow, params),
            self.deadline.get_mut(flow.index()),
        ) {
            *slot = d;
            self.min_deadline = self.min_deadline.min(d);
        }
    }
}

/// Least slack time first: slack = deadline − now − transmission time of the
/// head packet. On a single host every flow sees the same `now`, so the rank
/// is `deadline − len × 8 / link rate`.
///
/// # Examples
/// ```
/// use pspat_sched::eiffel::{Lstf, Ranked};
/// use pspat_sched::{FlowId, FlowTable, Instant, Packet, Scheduler};
/// let flows = FlowTable::uniform(2).unwrap();
/// // 1 Gbit/s: 8 ns per byte. Same deadline; the longer packet has less slack.
/// let policy = Lstf::new(&flows, 100_000, &[], 1_000_000_000).unwrap();
/// let mut s = Ranked::new(flows, 16, policy).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(0), 64, 0)).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(1), 9000, 1)).unwrap();
/// assert_eq!(s.dequeue(Instant::ZERO).unwrap().token, 1);
/// ```
pub struct Lstf {
    deadline: Box<[u64]>,
    link: Rate,
    /// Smallest deadline minus the transmission time of the largest packet.
    min_slack: i128,
    /// Transmission time of the largest packet, ns.
    max_tx: i128,
    rule: DeadlineRule,
}

impl Lstf {
    /// As [`Edf::new`], with the link rate that turns lengths into time.
    ///
    /// # Errors
    /// As [`Edf::new`], or a link rate outside the range of a [`Rate`].
    pub fn new(
        flows: &FlowTable,
        deadline_ns: u64,
        list: &[u64],
        link_bps: u64,
    ) -> Result<Self, ConfigError> {
        let link = Rate::checked("eiffel.lstf_link_bps", link_bps)?;
        let deadline = deadlines(flows, deadline_ns, list)?;
        let max_tx = link.tx_ns(crate::MAX_PACKET_LEN);
        let min_d = deadline.iter().copied().min().unwrap_or(0);
        Ok(Lstf {
            deadline,
            link,
            min_slack: i128::from(min_d) - i128::from(max_tx),
            max_tx: i128::from(max_tx),
            rule: DeadlineRule {
                deadline_ns,
                explicit: list.len(),
            },
        })
    }
}

impl RankPolicy for Lstf {
    #[inline]
    fn on_arrival(&mut self, now: Instant, pkt: &Packet) -> u64 {
        let d = self.deadline.get(pkt.flow.index()).copied().unwrap_or(0);
        now.as_nanos().saturating_add(d)
    }
    #[inline]
    fn rank(&mut self, _now: Instant, head: &Packet, stamp: u64) -> u64 {
        stamp.saturating_sub(self.link.tx_ns(head.len))
    }
    fn rank_floor(&self, now: Instant) -> Option<u64> {
        let f = i128::from(now.as_nanos()) + self.min_slack;
        Some(f.clamp(0, i128::from(u64::MAX)) as u64)
    }
    fn queue(&self) -> RankQueue {
        time_queue()
    }
    fn name(&self) -> &'static str {
        "lstf"
    }
    /// As [`Edf`]: a derived deadline follows the new weight.
    fn on_flow_added(&mut self, flow: FlowId, params: &FlowParams) {
        self.on_flow_changed(flow, params);
    }
    fn on_flow_changed(&mut self, flow: FlowId, params: &FlowParams) {
        if let (Some(d), Some(slot)) = (
            self.rule.derive(flow, params),
            self.deadline.get_mut(flow.index()),
        ) {
            *slot = d;
            self.min_slack = self.min_slack.min(i128::from(d) - self.max_tx);
        }
    }
}

/// Virtual-time units per byte at weight 1 (weights go up to 65 536).
const STFQ_SCALE: u64 = crate::MAX_WEIGHT as u64;

/// Start-time fair queueing (Goyal, Vin, Cheng, SIGCOMM 1996) as a rank:
/// `S = max(V, F_prev)`, `F = S + len × 65536 / w`, rank = `S` of the head,
/// and `V` = the start tag of the packet last sent.
///
/// # Guarantees
/// STFQ's fairness bound (within one maximum packet per flow of the weighted
/// share), loosened by the bucket granularity: tags within one bucket are
/// served in FIFO order.
///
/// # Examples
/// ```
/// use pspat_sched::eiffel::{Ranked, Stfq};
/// use pspat_sched::{FlowId, FlowParams, FlowTable, Instant, Packet, Scheduler};
/// let flows = FlowTable::new(vec![FlowParams::weighted(1), FlowParams::weighted(3)]).unwrap();
/// let mut s = Ranked::new(flows.clone(), 64, Stfq::new(&flows)).unwrap();
/// for i in 0..16 {
///     s.enqueue(Instant::ZERO, Packet::new(FlowId(i % 2), 1000, i as u64)).unwrap();
/// }
/// let heavy = (0..8).filter(|_| s.dequeue(Instant::ZERO).unwrap().flow == FlowId(1)).count();
/// assert!(heavy >= 5); // about 3 of every 4
/// ```
pub struct Stfq {
    cost: Box<[u64]>,
    finish: Box<[u64]>,
    vtime: u64,
    span: u64,
}

impl Stfq {
    /// STFQ over the weights of `flows`.
    pub fn new(flows: &FlowTable) -> Self {
        let cost: Box<[u64]> = flows
            .slots()
            .map(|f| STFQ_SCALE / u64::from(f.weight.max(1)))
            .collect();
        let span = flows
            .slots()
            .zip(cost.iter())
            .map(|(f, c)| u64::from(f.lmax) * c)
            .max()
            .unwrap_or(1);
        Stfq {
            finish: vec![0; cost.len()].into_boxed_slice(),
            cost,
            vtime: 0,
            span,
        }
    }

    /// The system virtual time `V`.
    pub fn vtime(&self) -> u64 {
        self.vtime
    }
}

impl RankPolicy for Stfq {
    #[inline]
    fn on_arrival(&mut self, _now: Instant, pkt: &Packet) -> u64 {
        let i = pkt.flow.index();
        let (Some(f), Some(&c)) = (self.finish.get_mut(i), self.cost.get(i)) else {
            return self.vtime;
        };
        let start = self.vtime.max(*f);
        *f = start + u64::from(pkt.len) * c;
        start
    }
    #[inline]
    fn rank(&mut self, _now: Instant, _head: &Packet, stamp: u64) -> u64 {
        stamp
    }
    #[inline]
    fn on_departure(&mut self, _now: Instant, _pkt: &Packet, stamp: u64) {
        self.vtime = self.vtime.max(stamp);
    }
    fn rank_floor(&self, _now: Instant) -> Option<u64> {
        Some(self.vtime)
    }
    /// Head start tags lie within one maximum packet (in virtual units) of
    /// `V`: two levels (4096 buckets, cache resident) whose window covers
    /// that spread. A bucket is then under one byte of weight-1 service for
    /// 1500-byte packets.
    fn queue(&self) -> RankQueue {
        let g = QueueConfig::granularity_for(2, self.span).next_power_of_two();
        RankQueue::Sliding(QueueConfig {
            levels: 2,
            granularity: g,
            ..QueueConfig::default()
        })
    }
    fn name(&self) -> &'static str {
        "stfq"
    }
    /// A new flow starts at V (no finish tag remembered).
    fn on_flow_added(&mut self, flow: FlowId, params: &FlowParams) {
        self.on_flow_removed(flow);
        self.on_flow_changed(flow, params);
    }
    /// Later arrivals are tagged with the new weight; queued packets keep
    /// their start tags.
    fn on_flow_changed(&mut self, flow: FlowId, params: &FlowParams) {
        if let Some(c) = self.cost.get_mut(flow.index()) {
            *c = STFQ_SCALE / u64::from(params.weight.max(1));
        }
    }
    fn on_flow_removed(&mut self, flow: FlowId) {
        if let Some(f) = self.finish.get_mut(flow.index()) {
            *f = 0;
        }
    }
}

/// Strict priority as a rank: rank = the flow's priority (0 first). Flows of
/// equal priority take turns packet by packet (unlike [`Prio`](crate::Prio),
/// which serves them in arrival order).
///
/// # Examples
/// ```
/// use pspat_sched::eiffel::{Ranked, StrictPriority};
/// use pspat_sched::{FlowId, FlowParams, FlowTable, Instant, Packet, Scheduler};
/// let flows = FlowTable::new(vec![
///     FlowParams { priority: 3, ..FlowParams::default() },
///     FlowParams { priority: 1, ..FlowParams::default() },
/// ]).unwrap();
/// let mut s = Ranked::new(flows.clone(), 16, StrictPriority::new(&flows)).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(0), 60, 0)).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(1), 60, 1)).unwrap();
/// assert_eq!(s.dequeue(Instant::ZERO).unwrap().token, 1);
/// ```
pub struct StrictPriority {
    prio: Box<[u8]>,
}

impl StrictPriority {
    /// Priorities from `flows`.
    pub fn new(flows: &FlowTable) -> Self {
        StrictPriority {
            prio: flows.slots().map(|f| f.priority).collect(),
        }
    }
}

impl RankPolicy for StrictPriority {
    const STAMPS: bool = false;

    #[inline]
    fn rank(&mut self, _now: Instant, head: &Packet, _stamp: u64) -> u64 {
        u64::from(self.prio.get(head.flow.index()).copied().unwrap_or(u8::MAX))
    }
    fn queue(&self) -> RankQueue {
        RankQueue::Fixed(QueueConfig {
            levels: 1,
            granularity: 1,
            ..QueueConfig::default()
        })
    }
    fn name(&self) -> &'static str {
        "eiffel-prio"
    }
    fn on_flow_added(&mut self, flow: FlowId, params: &FlowParams) {
        self.on_flow_changed(flow, params);
    }
    fn on_flow_changed(&mut self, flow: FlowId, params: &FlowParams) {
        if let Some(p) = self.prio.get_mut(flow.index()) {
            *p = params.priority;
        }
    }
}
