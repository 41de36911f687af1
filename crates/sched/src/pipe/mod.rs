//! dummynet's pipe as a sans-IO composition: enqueue filters → scheduler →
//! link → delay line, with exit times to the nanosecond.
//!
//! ```text
//! enqueue(now, pkt) ─▶ filters per queue ─▶ Scheduler ─▶ CoDel ─▶ link (bw, burst, ─▶ delay line (delay, ─▶ release(now) ─▶ Exit
//!                      plr, Gilbert-Elliott,  (any)               profile airtime)    jitter, duplicate,
//!                      4-state loss,                                                  corrupt, slots)
//!                      RED/GRED, limit
//! ```
//!
//! A [`Pipe`] owns a [`Scheduler`] (FIFO for dummynet's `pipe`, any
//! algorithm for a `sched` with queues), one queue configuration and state
//! per flow slot (a flow is dummynet's queue), the link and the delay line.
//! [`Pipe::enqueue`] runs the queue's filters and hands the packet to the
//! scheduler; [`Pipe::release`] moves packets through the link into the
//! delay line and hands out those whose exit time has come;
//! [`Pipe::poll_at`] says when the next thing can happen, so a caller sleeps
//! exactly until then (smoltcp's `poll_at`).
//!
//! # Guarantees
//! * **Exact times.** The link runs in virtual time: a packet starts when
//!   the link is free (never before it arrived), ends `len·8/bw` later (`len`
//!   under the link's [`Framing`]; less what burst credit covers, plus
//!   profile airtime), and its exit time is
//!   that end plus `delay` plus the jitter sample, in ns. A caller that
//!   calls `release` late gets the packet late, with the exit time it
//!   should have had in [`Exit::at`]; it never gets one early
//!   (`now ≥ Exit::at` for every exit).
//! * **Times depend on the arrivals only.** `enqueue` first runs the link
//!   up to its `now`, and the scheduler is asked at each packet's virtual
//!   start time, so exit times, order and fates are a function of the
//!   arrivals (times and order) and the seed, not of when or how often
//!   `release` is called, as long as the delay line does not fill (a full
//!   line restarts the link when a release frees room).
//! * **Order.** Packets leave in the order they left the link unless
//!   `reorder` is set (jitter is then free to reorder, and
//!   [`NetemReorder`] sends some packets ahead of the delay); a flow's order
//!   through the scheduler is the scheduler's contract.
//! * **Conservation.** `in = out + dropped + held` at every instant
//!   ([`PipeCounters`], [`Pipe::held`]), and per queue ([`FlowCounters`]); every dropped packet is handed back
//!   to the caller with its [`DropReason`] (by [`Pipe::enqueue`] or as an
//!   [`Exit`] with [`Fate::Dropped`]); duplicates are counted apart. A
//!   corrupted packet is an ordinary packet with a mark
//!   ([`Packet::CORRUPT_BIT`]); the bytes are the caller's to flip. So is
//!   a packet RED or a random loss marked Congestion Experienced instead of
//!   dropping it (a queue with `ecn` or `lossecn`, only for a packet
//!   enqueued with [`Packet::ECT_BIT`]:
//!   [`Packet::CE_BIT`], counted in [`PipeCounters::marked`]); the ECN
//!   field is the caller's to write.
//! * **Determinism.** No clock, no thread, no allocation after
//!   construction; one seed drives every random choice
//!   ([`random::Streams`]), so the same seed and calls give the same exits.
//! * **Nothing lost for lack of room.** A full delay line stops the link
//!   (packets wait in the scheduler; [`PipeCounters::link_stalls`] counts
//!   it): size it for `bw × (delay + jitter + airtime)` / smallest packet.
//!
//! # Complexity and cost model
//! `enqueue`: O(1) plus the scheduler's enqueue plus the link moves it
//! triggers. `release`: O(1) per packet moved (O(log n) with `reorder`) plus
//! the scheduler's dequeue. `poll_at`: O(1).
//!
//! What a packet costs besides its scheduler, for a queue with only a limit
//! (no `plr`, RED or Gilbert-Elliott: decided when the configuration is
//! installed, [`Pipe::new`] or [`Pipe::set_queue`], not per packet):
//! * in: the pipe's and its queue's counters, one comparison with the
//!   limit, the queue's length; the link is run only when it is free at or
//!   before `now` (otherwise one comparison);
//! * through the link: one 64×64-bit multiply ([`crate::rate::Pacer`]) and
//!   the burst credit, then one append to the delay line, which, keeping
//!   order, is a ring whose exit times never decrease;
//! * out: one comparison with the ring's front, the counters. `release`
//!   runs the link a second time only when an exit restarted a link stopped
//!   on a full line.
//!
//! Calls: `release` runs the link's first step in line (a caller that
//! releases once per packet finds the link free nearly every time, and a
//! call with its register saves cost about as much as the packet's
//! bookkeeping), and so is the move of that packet through the link into
//! the line; further steps, for a link more than one packet behind, and
//! the wait for a shaper are calls. `enqueue`,
//! which mostly finds the link busy, pays one comparison and calls the
//! link loop out of line only when it is free. The loop reads the link's
//! time before it asks the scheduler whether it is empty: after moving a
//! packet the link is mostly busy past `now`, and the loop ends on that
//! one comparison. With no profile, jitter, duplication or corruption (decided when the
//! configuration changes, one flag a packet) a packet's exit is its finish
//! on the link plus the fixed delay, appended to the ring; the path that
//! draws is a call, as is the general filter path, so neither weighs on
//! the caller's loop.
//! `enqueue` looks up the queue's state once and holds it across the
//! scheduler's enqueue; when every queue has the one configuration, a
//! limit in slots and no filter (decided when the configuration changes),
//! it checks that limit without looking the configuration up. A caller that takes one packet at a time
//! ([`PipeScheduler`]) asks [`Pipe::release_sole`] first: when exactly one
//! packet to transmit is due, it leaves without the release loop, its fate
//! match and the caller's closure. Together, in and out, about 165
//! instructions a packet besides the scheduler's, the bounds checks and
//! saturating arithmetic inlined from the standard library included
//! (callgrind, a limit-only queue, with or without a fixed delay, at one
//! packet per release, as `pspat sched-bench --dummynet` drives it through
//! [`PipeScheduler`]; more through the release loop): a third in the
//! delay line's append and exit, the rest in the counters, the limit, the
//! link's pacer and the loop's checks. The packet stays in registers from
//! the scheduler's dequeue to the line's append, and from the caller to
//! the scheduler's enqueue: nothing on those paths takes it by reference
//! or passes it whole to a call (the calls off them take its fields).
//!
//! The general filter path (plr, then Gilbert-Elliott, then the 4-state
//! loss model, then RED, then the limit) is taken only by queues that configure one of them; profile,
//! jitter, duplication and corruption cost one flag test when none is
//! configured (decided when the configuration changes). CoDel ([`codel`])
//! costs a pipe without it one flag test a packet, on enqueue: a pipe that
//! configures it on some queue records each packet's enqueue time out of
//! line and takes the general path into the line, where CoDel decides.
//! PIE ([`pie`]) decides on arrival, in that same out-of-line tail of
//! `enqueue`, and learns each queue's delay on that general path out; a
//! pipe keeps enqueue times once some queue configures either.
//!
//! Memory per queue (flow slot): one 56-byte record, 16 B of state
//! (length in packets and bytes, configuration index) beside 40 B of
//! counters, [`Pipe::PER_FLOW_BYTES`];
//! plus 40 B of RED, Gilbert-Elliott and 4-state loss state,
//! [`Pipe::PER_FLOW_FILTER_BYTES`], for every queue once some queue of the
//! pipe configures RED, Gilbert-Elliott or the 4-state model (a side table,
//! allocated then), and 44 B of CoDel's state and enqueue-time record,
//! [`Pipe::PER_FLOW_CODEL_BYTES`], once some queue configures CoDel (with
//! the times themselves in an arena sized by
//! [`PipeConfig::held_capacity`]), and 72 B of PIE's state,
//! [`Pipe::PER_FLOW_PIE_BYTES`], once some queue configures PIE (which
//! keeps CoDel's time store too). A configuration is
//! stored once and shared by index. The delay line takes 32 B an entry
//! (48 B with `reorder`), its capacity rounded up to a power of two.
//!
//! # Sources and deviations
//! dummynet (Rizzo; `ip_dn_io.c`: `dn_enqueue`, `red_drops`, `serve_sched`,
//! `extra_bits`) for filters, burst and profiles; Floyd and Jacobson 1993
//! for RED; RFC 8289 (Nichols, Jacobson, McGregor and Iyengar, 2018) for
//! CoDel, with its deviations in [`codel`]; RFC 8033 and FreeBSD's
//! `dn_aqm_pie.c` for PIE, with its deviations in [`pie`]; tc-netem(8) for jitter distributions, Gilbert-Elliott loss, the
//! 4-state loss model (Salsano, Ludovici and Ordine 2009; see [`filter`]),
//! duplication, corruption and slots ([`Slots`]). Deviations: ns instead of ticks; `f64`
//! probabilities; a hard byte limit (see [`filter`]); profile airtime even
//! on an unlimited link (see [`delay`]); a duplicate leaves together with
//! its original instead of being re-enqueued (tc-netem re-enqueues the
//! copy at the root); corruption is decided as a packet leaves the link,
//! not on arrival, so a corrupted packet is never one the queue then
//! drops, and a duplicate carries its original's corruption (tc-netem
//! decides each copy apart); a correlation of duplication, corruption or
//! reordering is a two-state chain of the decisions with the configured
//! long-run share and lag-1 correlation
//! ([`random::correlated_bernoulli`]), one per queue for duplication and
//! corruption ([`QueueConfig::duplicate_correlation`]) and one per pipe for
//! reordering, where tc-netem's correlated draws hold neither.
//!
//! # Example
//! ```
//! use pspat_sched::pipe::{Fate, Pipe, PipeConfig};
//! use pspat_sched::rate::Rate;
//! use pspat_sched::{Fifo, FlowId, FlowTable, Instant, Packet};
//!
//! let cfg = PipeConfig {
//!     bw: Some(Rate::checked("bw", 8_000_000_000u64).unwrap()), // 1 byte per ns
//!     delay_ns: 1_000,
//!     ..PipeConfig::default()
//! };
//! let fifo = Fifo::new(FlowTable::uniform(1).unwrap(), 64).unwrap();
//! let mut pipe = Pipe::new(cfg, fifo, 1).unwrap();
//! pipe.enqueue(Instant::ZERO, Packet::new(FlowId(0), 100, 7)).unwrap();
//! let mut out = Vec::new();
//! while let Some(t) = pipe.poll_at() {
//!     pipe.release(t, &mut |e| out.push(e));
//! }
//! assert_eq!(out.len(), 1);
//! assert_eq!(out[0].at, Instant::from_nanos(1_100)); // 100 ns on the link + 1 µs delay
//! assert_eq!(out[0].fate, Fate::Transmit);
//! ```

pub mod codel;
pub mod delay;
pub mod filter;
mod framing;
mod handover;
mod link;
mod live;
pub mod pie;
pub mod random;
mod scheduler;
mod set;
pub mod slot;

pub use codel::Codel;
pub use delay::{DelayProfile, Jitter, JitterDistribution};
pub use filter::{GilbertElliott, LossPhase, LossState, QueueConfig, QueueLimit, Red, RedState};
pub use framing::{Framing, MAX_OVERHEAD};
pub use handover::{Continuation, Moved};
pub use pie::Pie;
pub use scheduler::PipeScheduler;
pub use set::{PacketMoves, PipeRoutes, PipeSet};
pub use slot::{SlotInterval, Slots};

use crate::rate::Rate;
use crate::{
    ConfigError, DropReason, FlowError, FlowId, FlowParams, FlowTable, Instant, Packet, Rejected,
    Scheduler, MAX_PACKET_LEN,
};
use codel::{CodelState, EnqueueTimes};
use delay::{DelayLine, SoleDue};
use filter::{FilterRngs, FilterState, QueueState, RED_AVG_PKT_SIZE};
use link::BurstLink;
use pie::PieState;
use random::{correlated_bernoulli, standard_normal, Streams};
use slot::SlotGate;

/// Default delay-line capacity, in packets.
pub const DEFAULT_DELAY_LINE: usize = 1024;
/// Largest delay-line capacity, in packets.
pub const MAX_DELAY_LINE: usize = 1 << 24;
/// Longest retry step when a shaping scheduler holds packets but names no
/// later eligibility time (1 ms).
pub const MAX_PROBE_NS: u64 = 1_000_000;

/// Everything a [`Pipe`] needs besides its scheduler.
///
/// # Examples
/// ```
/// use pspat_sched::pipe::{PipeConfig, QueueLimit};
/// let c = PipeConfig::default();
/// assert_eq!((c.bw, c.delay_ns, c.queue.limit), (None, 0, QueueLimit::Slots(50)));
/// assert!(c.validate().is_ok());
/// assert!(PipeConfig { delay_line_capacity: 1, ..c }.validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct PipeConfig {
    /// Link rate; `None` is unlimited.
    pub bw: Option<Rate>,
    /// Bytes that may leave at line speed after idle (dummynet's `burst`).
    pub burst_bytes: u64,
    /// What a packet weighs on the link (tc-netem's `rate` overheads and
    /// cells): [`Framing::NONE`] by default.
    pub framing: Framing,
    /// Fixed delay after the link, ns.
    pub delay_ns: u64,
    /// dummynet's empirical profile (extra airtime on the link, and loss).
    pub profile: Option<DelayProfile>,
    /// Delay variation.
    pub jitter: Option<Jitter>,
    /// Correlation of successive jitter samples, 0..=1 (tc-netem's
    /// `delay D J C`): the samples are those of an AR(1) standard normal
    /// sequence with this lag-1 correlation, each mapped through the
    /// jitter's quantile function at its normal quantile (a Gaussian
    /// copula), so every sample keeps the jitter's distribution. 0 draws
    /// them independently, as without it.
    pub jitter_correlation: f64,
    /// Let jitter reorder packets (the delay line is then a heap).
    pub reorder: bool,
    /// tc-netem's `reorder P gap N`: some packets skip the delay and
    /// jitter and leave as they leave the link, ahead of the packets still
    /// delayed; needs `reorder` (a line that can reorder).
    pub netem_reorder: Option<NetemReorder>,
    /// tc-netem's `slot`: packets leave the delay line only when a slot
    /// opens, in bursts ([`Slots`]).
    pub slots: Option<Slots>,
    /// The configuration of every queue (flow slot) unless
    /// [`Pipe::set_queue`] changes one.
    pub queue: QueueConfig,
    /// Packets the delay line holds (at least 2: a packet and its duplicate).
    pub delay_line_capacity: usize,
    /// Packets the pipe's scheduler can hold (its capacity): the room of
    /// the enqueue-time store CoDel queues need ([`codel`]), allocated only
    /// once some queue of the pipe configures CoDel. A packet for which it
    /// has no room is refused as [`DropReason::QueueFull`], as the
    /// scheduler itself would refuse it once full.
    pub held_capacity: usize,
    /// Packets the pipe's queues may hold in all (FQ-CoDel's `limit`):
    /// an arrival that finds them full drops the head packet of the
    /// longest queue (the arriving packet's included) and is queued, as
    /// dummynet's and Linux's `fq_codel` do; the dropped packet leaves
    /// through the delay line as [`DropReason::QueueFull`]. When the
    /// scheduler cannot drop from a queue's head
    /// ([`Scheduler::drop_head`]: only [`crate::Fq`] does), the longest
    /// queue holds nothing but the arriving packet, or the line has no
    /// room to report the drop, the arriving packet is refused instead,
    /// with the same reason. `None` (the default): each queue's own limit only.
    /// Costs one test a packet in pipes that set it (their arrivals take
    /// the same out-of-line path as CoDel's), and a scan of the queues
    /// per drop.
    pub held_limit: Option<u32>,
    /// The seed of every random draw.
    pub seed: u64,
}

impl Default for PipeConfig {
    fn default() -> Self {
        PipeConfig {
            bw: None,
            burst_bytes: 0,
            framing: Framing::NONE,
            delay_ns: 0,
            profile: None,
            jitter: None,
            jitter_correlation: 0.0,
            reorder: false,
            netem_reorder: None,
            slots: None,
            queue: QueueConfig::default(),
            delay_line_capacity: DEFAULT_DELAY_LINE,
            held_capacity: crate::SchedulerConfig::DEFAULT_CAPACITY,
            held_limit: None,
            seed: 1,
        }
    }
}

impl PipeConfig {
    /// Checks every range.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first bad parameter.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_range(
            "delay line capacity (packets)",
            self.delay_line_capacity,
            2..=MAX_DELAY_LINE,
        )?;
        self.framing.validate()?;
        ConfigError::check_range(
            "pipe held capacity (packets)",
            self.held_capacity,
            1..=crate::queue::PacketQueues::MAX_CAPACITY,
        )?;
        if let Some(limit) = self.held_limit {
            ConfigError::check_range("pipe held limit (packets)", limit, 1..=u32::MAX)?;
        }
        if !(0.0..=1.0).contains(&self.jitter_correlation) {
            return Err(ConfigError::out_of_range(
                "jitter correlation",
                self.jitter_correlation,
                "0..=1",
            ));
        }
        if let Some(s) = &self.slots {
            s.validate()?;
        }
        if let Some(r) = &self.netem_reorder {
            r.validate()?;
            if !self.reorder {
                return Err(ConfigError::invalid(
                    "pipe reorder probability",
                    "needs a delay line that reorders (reorder)",
                ));
            }
        }
        self.queue.validate()
    }
}

/// tc-netem's reordering (`reorder P gap N`): of the packets that leave the
/// link, every `gap`-th one since the last reordered packet is a candidate,
/// and a candidate skips the delay and the jitter with probability
/// `probability`, leaving as it leaves the link, ahead of the packets still
/// in the delay line; the others are delayed as usual. `gap` 1 makes every
/// packet a candidate (tc-netem's default once `reorder` is given).
///
/// # Examples
/// ```
/// use pspat_sched::pipe::NetemReorder;
/// let r = NetemReorder { probability: 0.25, gap: 1, correlation: 0.0 };
/// assert!(r.validate().is_ok());
/// assert!(NetemReorder { gap: 0, ..r }.validate().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NetemReorder {
    /// Probability that a candidate skips the delay, 0..=1.
    pub probability: f64,
    /// Every `gap`-th packet is a candidate, 1..=2³²−1.
    pub gap: u32,
    /// Correlation of successive candidates' decisions, 0..1 (0:
    /// independent): a two-state chain with long-run share `probability`
    /// ([`random::correlated_bernoulli`]).
    pub correlation: f64,
}

impl NetemReorder {
    /// Checks both ranges.
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] naming the bad parameter.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.probability) {
            return Err(ConfigError::out_of_range(
                "reorder probability",
                self.probability,
                "0..=1",
            ));
        }
        filter::check_correlation("reorder correlation", self.correlation)?;
        ConfigError::check_range("reorder gap", self.gap, 1..=u32::MAX)
    }
}

/// What happens to a packet handed out by [`Pipe::release`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fate {
    /// Transmit it.
    Transmit,
    /// Transmit it again: a copy of the packet just handed out with
    /// [`Fate::Transmit`] (same token; the caller sends the buffer twice).
    Duplicate,
    /// It was dropped after the scheduler (a profile loss); free it. Its
    /// [`Exit::at`] is the end of its time on the link, or, when order is
    /// kept, the exit of the packet ahead of it if that is later.
    Dropped(DropReason),
}

/// A packet leaving the pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    /// The packet, unchanged.
    pub packet: Packet,
    /// Its exit time (at or before the `now` of the release that hands it out).
    pub at: Instant,
    /// Send, send again, or free.
    pub fate: Fate,
}

/// Exact counters of a pipe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PipeCounters {
    // Packets and bytes of one direction are not neighbours: the compiler
    // adds two neighbouring counts as one vector, about five instructions
    // where two plain additions do (ten a packet in and out of a pipe).
    /// Packets offered to [`Pipe::enqueue`].
    pub in_packets: u64,
    /// Packets handed out with [`Fate::Transmit`].
    pub out_packets: u64,
    /// Bytes offered.
    pub in_bytes: u64,
    /// Bytes handed out with [`Fate::Transmit`].
    pub out_bytes: u64,
    /// Copies handed out with [`Fate::Duplicate`] (not in `out_*`).
    pub duplicates: u64,
    /// Packets marked corrupt ([`Packet::CORRUPT_BIT`]) as they left the
    /// link, once per packet whatever its copies; they are handed out with
    /// [`Fate::Transmit`] and counted in `out_*` too.
    pub corrupted: u64,
    /// Packets tc-netem's reordering sent ahead of the delay
    /// ([`NetemReorder`]); in `out_*` too.
    pub reordered: u64,
    /// Packets marked Congestion Experienced instead of dropped, by RED (a
    /// queue with `ecn`, [`QueueConfig::ecn`]) or by a random loss (a
    /// queue with `lossecn`, [`QueueConfig::loss_ecn`]; [`Packet::CE_BIT`]),
    /// counted as they were admitted; they go on as any packet.
    pub marked: u64,
    /// Packets dropped, indexed by [`DropReason::index`].
    pub dropped_packets: [u64; DropReason::ALL.len()],
    /// Bytes dropped, indexed by [`DropReason::index`].
    pub dropped_bytes: [u64; DropReason::ALL.len()],
    /// Times the link stopped because the delay line was full.
    pub link_stalls: u64,
}

impl PipeCounters {
    /// Packets dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped_packets[reason.index()]
    }

    /// Packets dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped_packets.iter().sum()
    }

    fn drop(&mut self, len: u32, reason: DropReason) {
        self.dropped_packets[reason.index()] += 1;
        self.dropped_bytes[reason.index()] += u64::from(len);
    }
}

/// Counters of one queue (flow slot) of a pipe: dummynet's per-queue
/// `Tot_pkt/bytes` and `Drp`, plus what left. 40 bytes.
///
/// `in = out + dropped + held` per queue, where held is what the queue has
/// in the scheduler ([`Pipe::queue_len`]) plus its packets on the link and
/// in the delay line; the sums over the queues are the pipe's
/// [`PipeCounters`] (but for packets refused with
/// [`DropReason::UnknownFlow`], which belong to no queue).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowCounters {
    // In the order of `PipeCounters`, for the same reason.
    /// Packets offered to the queue.
    pub in_packets: u64,
    /// Packets handed out with [`Fate::Transmit`].
    pub out_packets: u64,
    /// Bytes offered.
    pub in_bytes: u64,
    /// Bytes handed out with [`Fate::Transmit`].
    pub out_bytes: u64,
    /// Packets dropped, any reason (the pipe's counters keep the reasons).
    pub dropped_packets: u64,
}

impl FlowCounters {
    /// Packets offered and not yet out or dropped: queued, on the link or
    /// in the delay line.
    pub fn held(&self) -> u64 {
        self.in_packets
            .saturating_sub(self.out_packets + self.dropped_packets)
    }
}

/// Counts a drop of `pkt` in the pipe's counters and in its queue's.
fn count_drop(counters: &mut PipeCounters, queues: &mut [Queue], pkt: &Packet, reason: DropReason) {
    count_drop_of(counters, queues, pkt.flow, pkt.len, reason);
}

/// [`count_drop`] for a packet of `flow` and `len` bytes.
fn count_drop_of(
    counters: &mut PipeCounters,
    queues: &mut [Queue],
    flow: FlowId,
    len: u32,
    reason: DropReason,
) {
    counters.drop(len, reason);
    if let Some(q) = queues.get_mut(flow.index()) {
        q.counters.dropped_packets += 1;
    }
}

/// A queue configuration as the pipe holds it, with what the packet path
/// needs to know about it decided once, at installation.
#[derive(Clone, Copy, Debug)]
struct Installed {
    config: QueueConfig,
    /// `plr`, RED, Gilbert-Elliott or 4-state loss configured: the packet takes the
    /// general filter path (otherwise only the limit is checked).
    filters: bool,
}

impl Installed {
    fn new(config: QueueConfig) -> Self {
        Installed {
            config,
            filters: config.filters(),
        }
    }
}

/// A queue's CoDel and PIE states, each when its configuration has that
/// AQM: what a rebuilt link's queue hands to the queue that continues it
/// ([`crate::PipeSet::replace_link_moving`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AqmState {
    codel: Option<CodelState>,
    pie: Option<PieState>,
}

impl AqmState {
    /// Neither AQM.
    pub(crate) fn is_none(&self) -> bool {
        self.codel.is_none() && self.pie.is_none()
    }
}

/// What a pipe keeps per queue: its length and configuration index, and
/// its counters, side by side (56 bytes), so that a packet's enqueue reads
/// the one and counts in the other through one lookup, and with 64k
/// queues mostly touches one cache line rather than two.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
struct Queue {
    state: QueueState,
    counters: FlowCounters,
}

const _: () = assert!(std::mem::size_of::<Queue>() == 56);

/// A dummynet pipe around a scheduler (see the [module docs](self)).
#[derive(Debug)]
pub struct Pipe<S> {
    sched: S,
    link: BurstLink,
    line: DelayLine,
    delay_ns: u64,
    profile: Option<DelayProfile>,
    jitter: Option<Jitter>,
    /// [`PipeConfig::jitter_correlation`], and the AR(1) normal behind the
    /// last correlated sample (`None` before the first).
    jitter_correlation: f64,
    jitter_normal: Option<f64>,
    netem_reorder: Option<NetemReorder>,
    /// Packets delayed since the last one tc-netem's reordering sent ahead.
    reorder_count: u32,
    /// Whether the last candidate of tc-netem's reordering was sent ahead
    /// (its correlated chain).
    reorder_last: bool,
    /// tc-netem's slots: where the current one is and what it has left.
    slot_gate: Option<SlotGate>,
    /// The distinct queue configurations (few: one per flowset).
    configs: Vec<Installed>,
    /// Per flow: its length, its configuration's index in `configs` and
    /// its counters.
    queues: Vec<Queue>,
    /// Per flow: RED, Gilbert-Elliott and 4-state loss state; empty until
    /// some configuration has one of them, then one entry per flow.
    filter_state: Vec<FilterState>,
    /// Per flow: CoDel's state; empty until some configuration has CoDel,
    /// then one entry per flow.
    codel: Vec<CodelState>,
    /// Per flow: PIE's state; empty until some configuration has PIE,
    /// then one entry per flow.
    pie: Vec<PieState>,
    /// The enqueue time of every packet the scheduler holds, kept once
    /// some configuration has CoDel (for every queue from then on).
    times: Option<EnqueueTimes>,
    /// [`PipeConfig::held_capacity`]: the room of `times`.
    held_capacity: usize,
    /// [`PipeConfig::held_limit`].
    held_limit: Option<u32>,
    /// Arrivals take the out-of-line tail of [`Pipe::enqueue`]: the pipe
    /// keeps enqueue times or has a held limit ([`Pipe::refresh_paths`]).
    extra_tail: bool,
    rng: Streams,
    /// RED's idle unit: the send time of an average packet.
    red_unit_ns: Option<u64>,
    /// Some queue duplicates: moving a packet needs two free entries.
    any_duplicate: bool,
    /// Some queue corrupts.
    any_corrupt: bool,
    /// No profile, no jitter, no reordering, no slots, no duplication and
    /// no corruption: a packet's exit is the link's finish plus the delay
    /// ([`Pipe::refresh_paths`]).
    fixed_delay: bool,
    /// Every queue has the one configuration, a limit in slots and no
    /// filter: that limit, checked on arrival without looking the
    /// configuration up ([`Pipe::refresh_paths`]).
    sole_slot_limit: Option<u32>,
    /// The scheduler held packets but none was eligible; `busy_until` is
    /// its next eligibility time.
    shaper_wait: bool,
    /// The link stopped on a full delay line.
    stalled: bool,
    /// Next retry step when a shaper gives no usable eligibility time.
    probe_ns: u64,
    counters: PipeCounters,
}

impl<S: Scheduler> Pipe<S> {
    /// A pipe over `sched`, whose flow ids are below `flows` (the capacity
    /// of its [`FlowTable`]); every queue starts with `config.queue`.
    ///
    /// # Errors
    /// A bad configuration (named), or `flows` outside
    /// 1..=[`FlowTable::MAX_FLOWS`].
    pub fn new(config: PipeConfig, sched: S, flows: usize) -> Result<Self, ConfigError> {
        config.validate()?;
        ConfigError::check_range("pipe flows", flows, 1..=FlowTable::MAX_FLOWS)?;
        let mut pipe = Pipe {
            sched,
            link: BurstLink::new(config.bw, config.burst_bytes, config.framing),
            line: DelayLine::new(config.delay_line_capacity, config.reorder),
            delay_ns: config.delay_ns,
            profile: config.profile,
            jitter: config.jitter,
            jitter_correlation: config.jitter_correlation,
            jitter_normal: None,
            netem_reorder: config.netem_reorder,
            reorder_count: 0,
            reorder_last: false,
            slot_gate: config.slots.map(SlotGate::new),
            configs: vec![Installed::new(config.queue)],
            queues: vec![Queue::default(); flows],
            filter_state: if config.queue.keeps_state() {
                vec![FilterState::default(); flows]
            } else {
                Vec::new()
            },
            codel: Vec::new(),
            pie: Vec::new(),
            times: None,
            held_capacity: config.held_capacity,
            held_limit: config.held_limit,
            extra_tail: false,
            rng: Streams::new(config.seed),
            red_unit_ns: config.bw.map(|r| r.tx_ns(RED_AVG_PKT_SIZE)),
            any_duplicate: config.queue.duplicate > 0.0,
            any_corrupt: config.queue.corrupt > 0.0,
            fixed_delay: false,
            sole_slot_limit: None,
            shaper_wait: false,
            stalled: false,
            probe_ns: 1,
            counters: PipeCounters::default(),
        };
        if config.queue.codel.is_some() || config.queue.pie.is_some() {
            pipe.keep_times()?;
        }
        if config.queue.pie.is_some() {
            pipe.pie = vec![PieState::default(); flows];
        }
        pipe.refresh_paths();
        Ok(pipe)
    }

    /// Starts keeping CoDel's state and the enqueue times of every queue
    /// (the first configuration with CoDel; control path). The packets
    /// queued before have no time: each queue's are counted as untimed and
    /// pass CoDel undecided.
    ///
    /// # Errors
    /// The time store cannot be built for the pipe's flows and
    /// [`PipeConfig::held_capacity`].
    fn keep_times(&mut self) -> Result<(), ConfigError> {
        if self.times.is_some() {
            return Ok(());
        }
        self.times = Some(EnqueueTimes::new(self.queues.len(), self.held_capacity)?);
        self.codel = self
            .queues
            .iter()
            .map(|q| {
                let mut st = CodelState::default();
                st.set_untimed(q.state.slots);
                st
            })
            .collect();
        Ok(())
    }

    /// [`Pipe::set_queue`] at `now` while the pipe runs: the link first
    /// runs up to `now` (the departures before the change are the old
    /// configuration's), then PIE's updates due by `now` are applied with
    /// the queue's old parameters, as a periodic timer would have applied
    /// them, so the new parameters count from the change.
    ///
    /// # Errors
    /// As [`Pipe::set_queue`]; nothing changes then.
    pub fn set_queue_at(
        &mut self,
        now: Instant,
        flow: FlowId,
        config: QueueConfig,
    ) -> Result<(), ConfigError> {
        config.validate()?;
        if flow.index() < self.queues.len() {
            self.advance_link(now);
            self.pie_catch_up(flow.index(), now);
        }
        self.set_queue(flow, config)
    }

    /// Gives queue `flow` its own configuration (dummynet's `queue N
    /// config` for the flowset the flow belongs to). Its state (RED
    /// average, Gilbert-Elliott state, PIE's, what it holds) is kept; PIE's
    /// starts afresh when the queue gains PIE or its `onoff` changes. A
    /// running pipe's owner calls [`Pipe::set_queue_at`].
    ///
    /// # Errors
    /// A flow beyond the pipe's flows, or a bad configuration.
    pub fn set_queue(&mut self, flow: FlowId, config: QueueConfig) -> Result<(), ConfigError> {
        config.validate()?;
        let slots = self.queues.len();
        if flow.index() >= slots {
            return Err(ConfigError::out_of_range(
                "pipe queue",
                flow.0,
                format!("0..{slots}"),
            ));
        }
        let old_pie = self.configs[usize::from(self.queues[flow.index()].state.config)]
            .config
            .pie;
        let at = match self.configs.iter().position(|c| c.config == config) {
            Some(at) => at,
            None => {
                // A configuration no flow uses any more makes room first.
                let mut used = vec![false; self.configs.len()];
                for (i, q) in self.queues.iter().enumerate() {
                    if i != flow.index() {
                        used[usize::from(q.state.config)] = true;
                    }
                }
                match used.iter().position(|u| !u) {
                    Some(free) => {
                        self.configs[free] = Installed::new(config);
                        free
                    }
                    None if self.configs.len() <= usize::from(u16::MAX) => {
                        self.configs.push(Installed::new(config));
                        self.configs.len() - 1
                    }
                    None => {
                        return Err(ConfigError::out_of_range(
                            "distinct queue configurations of a pipe",
                            self.configs.len() + 1,
                            "1..=65536",
                        ))
                    }
                }
            }
        };
        if config.codel.is_some() || config.pie.is_some() {
            self.keep_times()?;
        }
        if config.pie.is_some() && self.pie.is_empty() {
            // The first PIE queue: the side table (control path; every
            // queue starts from the state of a queue that saw no packet).
            self.pie = vec![PieState::default(); slots];
        }
        let restart = match (old_pie, config.pie) {
            (None, Some(_)) => true,
            (Some(old), Some(new)) => old.onoff != new.onoff,
            _ => false,
        };
        if restart {
            // A state left from an earlier PIE, or kept under the other
            // `onoff`, would replay stale periods: start as a queue that
            // saw no packet.
            if let Some(st) = self.pie.get_mut(flow.index()) {
                *st = PieState::default();
            }
        }
        if config.keeps_state() && self.filter_state.is_empty() {
            // The first RED, Gilbert-Elliott or 4-state queue: the side table
            // (control path; every queue starts from the default state,
            // as it would have had the table existed from the start).
            self.filter_state = vec![FilterState::default(); slots];
        }
        // `at` fits: `configs` never exceeds 65 536 entries.
        self.queues[flow.index()].state.config = at as u16;
        self.any_duplicate = self.configs.iter().any(|q| q.config.duplicate > 0.0);
        self.any_corrupt = self.configs.iter().any(|q| q.config.corrupt > 0.0);
        self.refresh_paths();
        Ok(())
    }

    /// Decides once, after a change of the profile, the jitter or a
    /// queue's duplication or corruption, which way a packet takes into the
    /// delay line.
    fn refresh_paths(&mut self) {
        self.fixed_delay = self.profile.is_none()
            && self.jitter.is_none()
            && self.netem_reorder.is_none()
            && self.slot_gate.is_none()
            && !self.any_duplicate
            && !self.any_corrupt
            // CoDel decides on the general path ([`Pipe::move_random`]).
            && self.times.is_none();
        self.extra_tail = self.times.is_some() || self.held_limit.is_some();
        // A queue's configuration is an index below `configs.len()`: with
        // one entry, every queue has it.
        self.sole_slot_limit = match self.configs.as_slice() {
            [only] if !only.filters => match only.config.limit {
                QueueLimit::Slots(n) => Some(n),
                QueueLimit::Bytes(_) => None,
            },
            _ => None,
        };
    }

    /// Delay-line entries a packet may need (two when it may be duplicated).
    #[inline(always)]
    fn entries_per_packet(&self) -> usize {
        1 + usize::from(self.any_duplicate)
    }

    /// The configuration of queue `flow`.
    pub fn queue_config(&self, flow: FlowId) -> Option<&QueueConfig> {
        self.queues
            .get(flow.index())
            .map(|q| &self.configs[usize::from(q.state.config)].config)
    }

    /// Offers `pkt` at `now` (first moving the link up to `now`, so the
    /// order of `enqueue` and `release` calls at one instant does not
    /// change any time).
    ///
    /// # Errors
    /// The packet back with the reason: [`DropReason::UnknownFlow`],
    /// [`DropReason::BadLength`], [`DropReason::RandomLoss`],
    /// [`DropReason::BurstLoss`] (Gilbert-Elliott or the 4-state model),
    /// [`DropReason::Red`] or [`DropReason::Pie`] (unless the queue has
    /// `ecn` and the packet is ECN-capable: then it goes on marked,
    /// [`Packet::CE_BIT`]), [`DropReason::FlowLimit`], or the scheduler's
    /// own.
    pub fn enqueue(&mut self, now: Instant, mut pkt: Packet) -> Result<(), Rejected> {
        self.counters.in_packets += 1;
        self.counters.in_bytes += u64::from(pkt.len);
        self.advance_link(now);
        let i = pkt.flow.index();
        // The queue is looked up once, and its state is held across the
        // scheduler's enqueue (disjoint fields).
        let Some(Queue { state: q, counters }) = self.queues.get_mut(i) else {
            return Err(self.refuse(pkt.flow, pkt.len, pkt.token, DropReason::UnknownFlow));
        };
        counters.in_packets += 1;
        counters.in_bytes += u64::from(pkt.len);
        if pkt.len == 0 || pkt.len > MAX_PACKET_LEN {
            return Err(self.refuse(pkt.flow, pkt.len, pkt.token, DropReason::BadLength));
        }
        let admitted = if let Some(limit) = self.sole_slot_limit {
            // The common case decided at configuration: the limit only.
            if q.slots >= limit {
                Err(DropReason::FlowLimit)
            } else {
                Ok(false)
            }
        } else {
            let inst = &self.configs[usize::from(q.config)];
            if inst.filters {
                let rngs = FilterRngs {
                    loss: &mut self.rng.loss,
                    gilbert_elliott: &mut self.rng.gilbert_elliott,
                    loss_state: &mut self.rng.loss_state,
                    red: &mut self.rng.red,
                };
                let fs = self.filter_state.get_mut(i);
                let ect = pkt.is_ect();
                filter::admit(
                    &inst.config,
                    q,
                    fs,
                    pkt.len,
                    ect,
                    now,
                    self.red_unit_ns,
                    rngs,
                )
            } else if inst.config.full(q, pkt.len) {
                // No filter but the limit.
                Err(DropReason::FlowLimit)
            } else {
                Ok(false)
            }
        };
        match admitted {
            Ok(false) => {}
            Ok(true) => {
                pkt = pkt.with_ce();
                self.counters.marked += 1;
            }
            Err(DropReason::FlowLimit) if self.held_limit.is_some() => {
                return self.enqueue_at_own_limit(now, pkt.flow, pkt.len, pkt.token);
            }
            Err(reason) => return Err(self.refuse(pkt.flow, pkt.len, pkt.token, reason)),
        }
        if self.extra_tail {
            return self.enqueue_extra(now, pkt.flow, pkt.len, pkt.token);
        }
        // Admitted: to the scheduler, and the link woken as the arrival
        // requires (it already ran up to `now`).
        let was_empty = self.sched.is_empty();
        if let Err(r) = self.sched.enqueue(now, pkt) {
            return Err(self.refuse(pkt.flow, pkt.len, pkt.token, r.reason));
        }
        q.slots += 1;
        q.bytes += u64::from(pkt.len);
        self.woken(now, was_empty);
        Ok(())
    }

    /// The tail of [`Pipe::enqueue`] in a pipe that keeps enqueue times
    /// (CoDel) or has a held limit: the admitted packet of `flow`, `len`
    /// bytes and `token` makes room under the held limit, needs room for
    /// its time, goes to the scheduler, and its time is recorded. Out of
    /// line, so that other pipes pay one test a packet.
    #[inline(never)]
    fn enqueue_extra(
        &mut self,
        now: Instant,
        flow: FlowId,
        len: u32,
        token: u64,
    ) -> Result<(), Rejected> {
        let mut pkt = Packet::new(flow, len, token);
        // Counted once the packet is queued: a later refusal counts it as
        // dropped only.
        let mut marked = false;
        if !self.pie.is_empty() {
            match self.pie_arrival(now, pkt) {
                codel::Verdict::Send => {}
                codel::Verdict::Mark => {
                    marked = !pkt.is_ce();
                    pkt = pkt.with_ce();
                }
                codel::Verdict::Drop => return Err(self.refuse(flow, len, token, DropReason::Pie)),
            }
        }
        if let Some(limit) = self.held_limit {
            if self.sched.queued() >= limit as usize && !self.drop_from_longest(now, flow) {
                return Err(self.refuse(flow, len, token, DropReason::QueueFull));
            }
        }
        if self.times_full() {
            return Err(self.refuse(flow, len, pkt.token, DropReason::QueueFull));
        }
        let was_empty = self.sched.is_empty();
        if let Err(r) = self.sched.enqueue(now, pkt) {
            return Err(self.refuse(flow, len, pkt.token, r.reason));
        }
        self.counters.marked += u64::from(marked);
        let i = flow.index();
        if let Some(q) = self.queues.get_mut(i) {
            q.state.slots += 1;
            q.state.bytes += u64::from(len);
        }
        self.record_time(i, now);
        self.debug_check_times(i);
        self.woken(now, was_empty);
        Ok(())
    }

    /// PIE's decision on `pkt`, arriving at `now` and admitted by its
    /// queue's limit, when its queue has PIE ([`pie`]): one uniform draw
    /// from the PIE stream when the decision needs one. Out of the line of
    /// pipes without PIE (called from [`Pipe::enqueue_extra`] only when
    /// some queue has PIE).
    fn pie_arrival(&mut self, now: Instant, pkt: Packet) -> codel::Verdict {
        let i = pkt.flow.index();
        let (Some(q), Some(st)) = (self.queues.get(i), self.pie.get_mut(i)) else {
            return codel::Verdict::Send;
        };
        let config = &self.configs[usize::from(q.state.config)].config;
        let Some(pie) = config.pie else {
            return codel::Verdict::Send;
        };
        let rng = &mut self.rng.pie;
        st.arrive(
            &pie,
            now,
            q.state.slots,
            q.state.bytes,
            config.limit,
            pkt.is_ect(),
            || rng.f64(),
        )
    }

    /// Applies the PIE updates of queue `i` due by `now`, before its length
    /// changes other than by an arrival or a departure PIE sees (a drop
    /// from its head under the held limit).
    fn pie_catch_up(&mut self, i: usize, now: Instant) {
        let (Some(q), Some(st)) = (self.queues.get(i), self.pie.get_mut(i)) else {
            return;
        };
        if let Some(pie) = self.configs[usize::from(q.state.config)].config.pie {
            st.catch_up(&pie, now, q.state.bytes);
        }
    }

    /// Makes room for an arrival of queue `arriving` under the held limit:
    /// drops the head packet of the longest queue, counting the arrival in
    /// its own queue (ties go to the lowest flow id), and reports it
    /// through the line as [`DropReason::QueueFull`]. `false` when it could
    /// not (the longest queue holds nothing but the arrival, the scheduler
    /// does not drop from a head, or the line has no room): the caller
    /// refuses the arrival. O(queues).
    #[cold]
    #[inline(never)]
    fn drop_from_longest(&mut self, now: Instant, arriving: FlowId) -> bool {
        let mut longest = (0u32, usize::MAX);
        for (i, q) in self.queues.iter().enumerate() {
            let n = q.state.slots + u32::from(i == arriving.index());
            if n > longest.0 {
                longest = (n, i);
            }
        }
        let (n, i) = longest;
        let only_the_arrival = i == arriving.index() && n <= 1;
        if only_the_arrival || i == usize::MAX {
            return false;
        }
        self.drop_head_of(now, i)
    }

    /// Drops the head packet of queue `i` at `now` to make room (the held
    /// limit, or the queue's own slot limit in a pipe that has one),
    /// reporting it through the line as [`DropReason::QueueFull`]. `false`
    /// when the line has no room or the scheduler does not drop from a
    /// head.
    fn drop_head_of(&mut self, now: Instant, i: usize) -> bool {
        if self.line.free() == 0 {
            return false;
        }
        self.pie_catch_up(i, now);
        let Some(pkt) = self.sched.drop_head(FlowId(i as u32)) else {
            return false;
        };
        self.left_queue(i, pkt.len, now);
        // Its enqueue time, when the pipe keeps them, leaves with it.
        self.take_head_time(i);
        self.debug_check_times(i);
        let at = self.line.after_all(now);
        self.line
            .insert(at, pkt, Fate::Dropped(DropReason::QueueFull));
        true
    }

    /// An arrival of `flow` (`len` bytes, `token`) that its queue's own
    /// slot limit refused, in a pipe with a held limit (FQ-CoDel's and
    /// FQ-PIE's `limit`, whose flows have no limit of their own in dummynet
    /// or Linux): the queue's oldest packet is dropped in its place
    /// ([`DropReason::QueueFull`], as the held limit drops) and the arrival
    /// goes on as any other ([`Pipe::enqueue_extra`]). A limit in bytes, a
    /// scheduler that does not drop from a head or a full line refuse the
    /// arrival as before ([`DropReason::FlowLimit`]).
    #[cold]
    #[inline(never)]
    fn enqueue_at_own_limit(
        &mut self,
        now: Instant,
        flow: FlowId,
        len: u32,
        token: u64,
    ) -> Result<(), Rejected> {
        let i = flow.index();
        let in_slots = self
            .queues
            .get(i)
            .map(|q| &self.configs[usize::from(q.state.config)].config)
            .is_some_and(|c| matches!(c.limit, QueueLimit::Slots(_)));
        if !in_slots || !self.drop_head_of(now, i) {
            return Err(self.refuse(flow, len, token, DropReason::FlowLimit));
        }
        self.enqueue_extra(now, flow, len, token)
    }

    /// A packet of `len` bytes left queue `i` at `at` (to the link, or
    /// dropped from its head): its length counts down, and a queue left
    /// empty starts its idle time (RED's) then.
    #[inline(always)] // on the per-packet path of move_to_line
    fn left_queue(&mut self, i: usize, len: u32, at: Instant) {
        if let Some(Queue { state: st, .. }) = self.queues.get_mut(i) {
            st.slots = st.slots.saturating_sub(1);
            st.bytes = st.bytes.saturating_sub(len.into());
            if st.slots == 0 {
                if let Some(fs) = self.filter_state.get_mut(i) {
                    fs.empty_since = at;
                }
            }
        }
    }

    /// In debug builds, asserts that queue `i` has one enqueue time per
    /// packet it holds that was queued while the pipe kept times.
    fn debug_check_times(&self, i: usize) {
        if let (Some(times), Some(st), Some(q)) =
            (&self.times, self.codel.get(i), self.queues.get(i))
        {
            debug_assert_eq!(
                times.len(i) as u64 + u64::from(st.untimed()),
                u64::from(q.state.slots),
                "queue {i}: enqueue times against packets held"
            );
        }
    }

    /// Takes the enqueue time of queue `i`'s head packet, when the pipe
    /// keeps times: `None` for a packet queued before it did (counted as
    /// untimed) or when it keeps none.
    fn take_head_time(&mut self, i: usize) -> Option<Instant> {
        let (Some(st), Some(times)) = (self.codel.get_mut(i), self.times.as_mut()) else {
            return None;
        };
        if st.take_untimed() {
            None
        } else {
            times.pop(i)
        }
    }

    /// Whether the enqueue-time store, when the pipe keeps one, is full.
    fn times_full(&self) -> bool {
        self.times.as_ref().is_some_and(EnqueueTimes::is_full)
    }

    /// Records that queue `i` took a packet at `now`, when the pipe keeps
    /// enqueue times ([`Pipe::times_full`] said there is room).
    fn record_time(&mut self, i: usize, now: Instant) {
        if let Some(times) = &mut self.times {
            times.push(i, now);
        }
    }

    /// Counts the refusal, for `reason`, of the packet of `flow`, `len`
    /// bytes and `token`; the packet back with it. It takes the packet's
    /// fields, not the packet: a 16-byte argument is passed through
    /// memory, and `enqueue`, which may refuse at four points, would write
    /// every packet to its stack for them.
    #[cold]
    #[inline(never)]
    fn refuse(&mut self, flow: FlowId, len: u32, token: u64, reason: DropReason) -> Rejected {
        count_drop_of(&mut self.counters, &mut self.queues, flow, len, reason);
        Rejected {
            packet: Packet::new(flow, len, token),
            reason,
        }
    }

    /// Counts `pkt` in, in the pipe's counters and its queue's.
    #[inline]
    fn count_in(&mut self, pkt: &Packet) {
        self.counters.in_packets += 1;
        self.counters.in_bytes += u64::from(pkt.len);
        if let Some(q) = self.queues.get_mut(pkt.flow.index()) {
            q.counters.in_packets += 1;
            q.counters.in_bytes += u64::from(pkt.len);
        }
    }

    /// Counts `pkt` out (handed out to transmit), in the pipe's counters
    /// and its queue's.
    #[inline(always)] // once per packet, in both release paths
    fn count_out(&mut self, pkt: &Packet) {
        self.counters.out_packets += 1;
        self.counters.out_bytes += u64::from(pkt.len);
        if let Some(q) = self.queues.get_mut(pkt.flow.index()) {
            q.counters.out_packets += 1;
            q.counters.out_bytes += u64::from(pkt.len);
        }
    }

    /// Hands an admitted packet to the scheduler and wakes the link as its
    /// arrival requires (the link already ran up to `now`): the tail of
    /// [`Pipe::enqueue`], for a packet handed over from another pipe, that
    /// entered its queue there at `enqueued` (when known; see
    /// [`Pipe::adopt`] for one without).
    fn accept(
        &mut self,
        now: Instant,
        pkt: Packet,
        enqueued: Option<Instant>,
    ) -> Result<(), DropReason> {
        let i = pkt.flow.index();
        if self.times_full() {
            return Err(DropReason::QueueFull);
        }
        let was_empty = self.sched.is_empty();
        if let Err(r) = self.sched.enqueue(now, pkt) {
            return Err(r.reason);
        }
        if let Some(q) = self.queues.get_mut(i) {
            q.state.slots += 1;
            q.state.bytes += u64::from(pkt.len);
        }
        self.record_handed_time(i, now, enqueued);
        self.debug_check_times(i);
        self.woken(now, was_empty);
        Ok(())
    }

    /// Records the enqueue time of a packet handed over into queue `i` at
    /// `now`, when the pipe keeps times: `enqueued`, the time it entered
    /// its old queue (its sojourn goes on from there); without one, it
    /// counts as untimed (CoDel lets it pass undecided) while the queue
    /// holds no timed packet, as untimed packets must stay at the queue's
    /// head ([`CodelState::take_untimed`]); behind timed ones it gets
    /// `now` instead, so each packet keeps its own time.
    fn record_handed_time(&mut self, i: usize, now: Instant, enqueued: Option<Instant>) {
        let (Some(times), Some(st)) = (self.times.as_mut(), self.codel.get_mut(i)) else {
            return;
        };
        match enqueued {
            Some(at) => {
                times.push(i, at);
            }
            None if times.len(i) == 0 => st.add_untimed(),
            None => {
                times.push(i, now);
            }
        }
    }

    /// The link after an arrival at `now` the scheduler took, `was_empty`
    /// before it.
    #[inline(always)]
    fn woken(&mut self, now: Instant, was_empty: bool) {
        if was_empty {
            if self.shaper_wait {
                // The scheduler was emptied (a flow removed) while waiting.
                self.link.busy_until = self.link.last_finish;
                self.shaper_wait = false;
            }
            self.link.wake(now);
        } else if self.shaper_wait {
            // A new packet may be eligible before the one the scheduler waits for.
            self.link.busy_until = self.link.last_finish.max(now);
            self.shaper_wait = false;
        } else if self.link.busy_until < now {
            // The link is stopped on a full delay line: it restarts no
            // earlier than this arrival.
            self.link.busy_until = now;
        }
    }

    /// Counts a drop of `pkt`, in the pipe's counters and its queue's.
    fn count_drop(&mut self, pkt: &Packet, reason: DropReason) {
        count_drop(&mut self.counters, &mut self.queues, pkt, reason);
    }

    /// Moves packets through the link into the delay line up to `now`, and
    /// hands every packet whose exit time is at or before `now` to `out`,
    /// in exit order (in link order among equal times).
    pub fn release(&mut self, now: Instant, out: &mut impl FnMut(Exit)) {
        loop {
            // Inlined here (not through `advance_link`): a release finds
            // the link free on most calls, and the call would cost more
            // than the packet's own bookkeeping.
            if self.link.busy_until <= now {
                self.run_link_inline(now);
            }
            // The link stopped only on a full line: once an exit makes
            // room it runs again (otherwise it stopped on an empty
            // scheduler or at a start after `now`, which no exit changes,
            // and nothing new can be due).
            let mut restarted = false;
            while let Some(e) = self.line.pop_due(now) {
                if self.stalled {
                    // Room appeared at this exit: the link restarts then.
                    self.link.busy_until = self.link.busy_until.max(e.exit);
                    self.stalled = false;
                    restarted = true;
                }
                match e.fate {
                    Fate::Transmit => self.count_out(&e.packet),
                    Fate::Duplicate => self.counters.duplicates += 1,
                    Fate::Dropped(reason) => self.count_drop(&e.packet, reason),
                }
                out(Exit {
                    packet: e.packet,
                    at: e.exit,
                    fate: e.fate,
                });
            }
            if !restarted {
                break;
            }
        }
    }

    /// [`Pipe::release`] for a caller that takes packets one at a time:
    /// `Some(Some(packet))` when the release at `now` would hand out exactly
    /// that one packet, to transmit (it is handed out and counted);
    /// `Some(None)` when it would hand out nothing; `None` when it would do
    /// more (several packets due, a duplicate or a late drop at the front,
    /// a link stalled on a full line, a reordering line), and then
    /// [`Pipe::release`] does it. The link is run up to `now` first, as
    /// [`Pipe::release`] runs it, so the two leave the pipe in the same
    /// state. O(1): the link's loop, then at most two reads of the line.
    #[inline(always)]
    pub fn release_sole(&mut self, now: Instant) -> Option<Option<Packet>> {
        if self.link.busy_until <= now {
            self.run_link_inline(now);
        }
        if self.stalled {
            return None;
        }
        match self.line.pop_sole_due(now) {
            SoleDue::Nothing => Some(None),
            SoleDue::Packet(p) => {
                self.count_out(&p);
                Some(Some(p))
            }
            SoleDue::Several => None,
        }
    }

    /// The earliest instant at which [`Pipe::release`] has something to
    /// do: an exit, or the link free while packets wait. `None` when the
    /// pipe holds nothing.
    pub fn poll_at(&self) -> Option<Instant> {
        let exit = self.line.next_exit();
        if self.sched.is_empty() || self.stalled {
            return exit;
        }
        let link = self.link.busy_until;
        Some(exit.map_or(link, |e| e.min(link)))
    }

    /// Runs the link from where it is up to `now`. The common case, a
    /// link busy past `now`, is one comparison at the caller.
    #[inline(always)]
    fn advance_link(&mut self, now: Instant) {
        if self.link.busy_until <= now {
            self.run_link(now);
        }
    }

    /// [`Pipe::advance_link`] once the link is free at or before `now`,
    /// out of line (the enqueue path, where the link is mostly busy; and
    /// the steps after the first in [`Pipe::run_link_inline`]).
    #[inline(never)]
    fn run_link(&mut self, now: Instant) {
        let need = self.entries_per_packet();
        while self.link_step(now, need) {}
    }

    /// [`Pipe::run_link`] inlined into [`Pipe::release`] and
    /// [`Pipe::release_sole`]: the first step in the caller, the others
    /// (a link more than one packet's time behind `now`) out of line, so
    /// that the caller holds no loop around the scheduler's dequeue.
    #[inline(always)]
    fn run_link_inline(&mut self, now: Instant) {
        if self.link_step(now, self.entries_per_packet()) && self.link.busy_until <= now {
            self.run_link(now);
        }
    }

    /// One step of the link up to `now`, with `need` free entries of the
    /// line asked for a packet: the next packet through the link into the
    /// line, or the wait for a shaper noted. False when the link stops
    /// (busy past `now`, nothing queued, or the line full).
    #[inline(always)]
    fn link_step(&mut self, now: Instant, need: usize) -> bool {
        // The link's time first: after a packet it is mostly busy past
        // `now`, and the scheduler need not be asked.
        let start = self.link.busy_until;
        if start > now || self.sched.is_empty() {
            return false;
        }
        if self.line.free() < need {
            if !self.stalled {
                self.stalled = true;
                self.counters.link_stalls += 1;
            }
            return false;
        }
        let Some(pkt) = self.sched.dequeue(start) else {
            self.wait_for_shaper(start);
            return true;
        };
        self.shaper_wait = false;
        self.probe_ns = 1;
        self.move_to_line(start, pkt);
        true
    }

    /// The packet of `flow`, `len` bytes and `token` has left its queue (its
    /// length already counted down) to start on the link at `start`, in a
    /// pipe that keeps enqueue times: its time is taken, and when its queue
    /// has CoDel, CoDel decides it: [`codel::Verdict::Drop`] when it
    /// dropped the packet (it went into the line as a drop, the link not
    /// used), [`codel::Verdict::Mark`] when the caller is to mark it
    /// Congestion Experienced (counted here). Called from the general path
    /// into the line ([`Pipe::move_random`]), which a pipe keeping times
    /// always takes, so that pipes without CoDel pay nothing on the way
    /// out.
    #[inline(never)]
    fn codel_exit(&mut self, start: Instant, flow: FlowId, len: u32, token: u64) -> codel::Verdict {
        let pkt = Packet::new(flow, len, token);
        let i = flow.index();
        if self.times.is_none() {
            return codel::Verdict::Send;
        }
        let enqueued = self.take_head_time(i);
        if let (Some(q), Some(ps)) = (self.queues.get(i), self.pie.get_mut(i)) {
            if let Some(pie) = self.configs[usize::from(q.state.config)].config.pie {
                // PIE decided on arrival; it learns the delay here.
                let after = q.state.bytes;
                let sojourn = enqueued.map(|e| start.saturating_nanos_since(e));
                ps.depart(&pie, start, sojourn, len, after + u64::from(len), after);
                return codel::Verdict::Send;
            }
        }
        let (Some(q), Some(st)) = (self.queues.get_mut(i), self.codel.get_mut(i)) else {
            return codel::Verdict::Send;
        };
        let (Some(codel), Some(enqueued)) = (
            self.configs[usize::from(q.state.config)].config.codel,
            enqueued,
        ) else {
            return codel::Verdict::Send;
        };
        let backlog = q.state.bytes;
        let sojourn = start.saturating_nanos_since(enqueued);
        let verdict = st.decide(&codel, start, sojourn, len, pkt.is_ect(), backlog);
        match verdict {
            codel::Verdict::Send => {}
            codel::Verdict::Mark => {
                if !pkt.is_ce() {
                    self.counters.marked += 1;
                }
            }
            codel::Verdict::Drop => {
                // The packet did not use the link: a scheduler that
                // charges per flow (FQ) takes the charge back.
                self.sched.uncharge(flow, len);
                // Reported behind every entry already in the line, with
                // or without reordering.
                let at = self.line.after_all(start);
                self.line.insert(at, pkt, Fate::Dropped(DropReason::Codel));
            }
        }
        verdict
    }

    /// The scheduler holds packets none of which is eligible at `start`
    /// (a shaper). Its eligibility time is a soft deadline: when it names
    /// no later instant, the link probes 1, 2, 4 ... ns later (at most
    /// MAX_PROBE_NS), so that its loop always moves on.
    #[cold]
    #[inline(never)]
    fn wait_for_shaper(&mut self, start: Instant) {
        self.shaper_wait = true;
        self.link.busy_until = match self.sched.next_eligible(start) {
            Some(t) if t > start => t,
            _ => {
                let t = start.saturating_add_nanos(self.probe_ns);
                self.probe_ns = (self.probe_ns * 2).min(MAX_PROBE_NS);
                t
            }
        };
    }

    /// `pkt` leaves the scheduler at `start`: through the link into the line.
    #[inline(always)] // once per packet, inside the link loop
    fn move_to_line(&mut self, start: Instant, pkt: Packet) {
        self.left_queue(pkt.flow.index(), pkt.len, start);
        if self.fixed_delay {
            // A fixed delay: the exit is the link's finish plus the delay,
            // appended to the ring (the general path below, for no draw).
            let finish = self.link.transmit(pkt.len, 0);
            self.line.insert(
                finish.saturating_add_nanos(self.delay_ns),
                pkt,
                Fate::Transmit,
            );
            return;
        }
        self.move_random(pkt.flow, pkt.len, pkt.token);
    }

    /// [`Pipe::move_to_line`] with a profile, jitter, reordering, slots,
    /// duplication or corruption configured: out of line, so that the fixed-delay path stays short
    /// in the caller's loop. It takes the packet's fields, not the
    /// packet: a 16-byte argument is passed through memory, and the
    /// caller would keep the packet on its stack for every packet.
    #[inline(never)]
    fn move_random(&mut self, flow: FlowId, len: u32, token: u64) {
        let mut pkt = Packet::new(flow, len, token);
        if self.times.is_some() {
            // It starts on the link now, unless CoDel drops it.
            match self.codel_exit(self.link.busy_until, flow, len, token) {
                codel::Verdict::Send => {}
                codel::Verdict::Mark => pkt = pkt.with_ce(),
                // The link is still free.
                codel::Verdict::Drop => return,
            }
        }
        let config = self
            .queues
            .get(flow.index())
            .map(|q| usize::from(q.state.config));
        let mut chains = self.queues.get(flow.index()).map_or(0, |q| q.state.chains);
        let (airtime, lost) = match &self.profile {
            Some(p) => p.sample(&mut self.rng.profile),
            None => (0, false),
        };
        let finish = self.link.transmit(pkt.len, airtime);
        if lost {
            self.line
                .insert(finish, pkt, Fate::Dropped(DropReason::ProfileLoss));
            return;
        }
        if self.any_corrupt {
            let (p, c) = self.chance(config, |q| (q.corrupt, q.corrupt_correlation));
            if p > 0.0
                && chain_step(
                    &mut self.rng.corrupt,
                    &mut chains,
                    QueueState::CORRUPTED,
                    p,
                    c,
                )
            {
                // Marked before the line takes it, so that a duplicate
                // carries the mark too.
                pkt = pkt.with_corrupt();
                self.counters.corrupted += 1;
            }
        }
        if let Some(r) = &self.netem_reorder {
            // tc-netem: a candidate (every `gap`-th packet since the last
            // one sent ahead) skips the delay with the probability, and the
            // slots too (netem's dequeue serves the packets it sent ahead
            // before its slotted queue, out of the slots' budgets).
            if self.reorder_count.saturating_add(1) >= r.gap
                && correlated_bernoulli(
                    &mut self.rng.reorder,
                    &mut self.reorder_last,
                    r.probability,
                    r.correlation,
                )
            {
                self.reorder_count = 0;
                self.counters.reordered += 1;
                let exit = self.line.insert(finish, pkt, Fate::Transmit);
                self.duplicate_maybe(config, &mut chains, exit, pkt);
                self.keep_chains(flow, chains);
                return;
            }
            self.reorder_count = self.reorder_count.saturating_add(1);
        }
        let mut wish = finish.saturating_add_nanos(self.delay_ns);
        if let Some(j) = self.jitter {
            let s = if self.jitter_correlation > 0.0 {
                self.correlated_jitter(&j)
            } else {
                j.sample(&mut self.rng.jitter)
            };
            wish = if s >= 0 {
                wish.saturating_add_nanos(s.unsigned_abs())
            } else {
                let w = Instant::from_nanos(wish.as_nanos().saturating_sub(s.unsigned_abs()));
                w.max(finish)
            };
        }
        let exit = self.put_in_line(wish, pkt, Fate::Transmit);
        self.duplicate_maybe(config, &mut chains, exit, pkt);
        self.keep_chains(flow, chains);
    }

    /// The probability and correlation `pick` reads from the queue
    /// configuration `config` (`None`: never).
    #[inline]
    fn chance(
        &self,
        config: Option<usize>,
        pick: impl Fn(&QueueConfig) -> (f64, f64),
    ) -> (f64, f64) {
        config.map_or((0.0, 0.0), |i| pick(&self.configs[i].config))
    }

    /// Stores the last answers of `flow`'s correlated chains (after its
    /// packet's decisions, or a rebuilt link's for the queue that continues
    /// it); no effect beyond the pipe's flows.
    #[inline]
    pub(crate) fn keep_chains(&mut self, flow: FlowId, chains: u8) {
        if let Some(q) = self.queues.get_mut(flow.index()) {
            q.state.chains = chains;
        }
    }

    /// A jitter sample correlated with the last one
    /// ([`PipeConfig::jitter_correlation`]): the next step of the AR(1)
    /// normal, `ρ·z + √(1−ρ²)·ε` (a stationary start: the first is `ε`),
    /// through the jitter's quantile function ([`Jitter::at_normal`]).
    fn correlated_jitter(&mut self, j: &Jitter) -> i64 {
        let rho = self.jitter_correlation;
        let e = standard_normal(&mut self.rng.jitter);
        let z = match self.jitter_normal {
            Some(prev) => rho * prev + (1.0 - rho * rho).sqrt() * e,
            None => e,
        };
        self.jitter_normal = Some(z);
        j.at_normal(z)
    }

    /// Puts an entry that would leave at `wish` into the line, through the
    /// slots when there are some (a slot instant is never earlier than the
    /// exit the line would give); returns its exit.
    #[inline]
    fn put_in_line(&mut self, wish: Instant, pkt: Packet, fate: Fate) -> Instant {
        let wish = match &mut self.slot_gate {
            Some(g) => g.place(self.line.floor(wish), pkt.len, &mut self.rng.slot),
            None => wish,
        };
        self.line.insert(wish, pkt, fate)
    }

    /// Draws whether `pkt`, of the queue configuration `config`, just put
    /// in the line to leave at `exit`, leaves twice.
    #[inline]
    fn duplicate_maybe(
        &mut self,
        config: Option<usize>,
        chains: &mut u8,
        exit: Instant,
        pkt: Packet,
    ) {
        if self.any_duplicate {
            let (p, c) = self.chance(config, |q| (q.duplicate, q.duplicate_correlation));
            if p > 0.0
                && chain_step(
                    &mut self.rng.duplicate,
                    chains,
                    QueueState::DUPLICATED,
                    p,
                    c,
                )
            {
                self.put_in_line(exit, pkt, Fate::Duplicate);
            }
        }
    }

    /// The counters.
    pub fn counters(&self) -> &PipeCounters {
        &self.counters
    }

    /// Packets held: in the scheduler, on the link or in the delay line
    /// (duplicates not counted). `in = out + dropped + held` always.
    pub fn held(&self) -> u64 {
        (self.sched.queued() + self.line.originals()) as u64
    }

    /// Packets waiting in the scheduler.
    pub fn queued(&self) -> usize {
        self.sched.queued()
    }

    /// Packets queued for `flow` and their bytes (what its limit and RED
    /// see), `None` beyond the pipe's flows.
    pub fn queue_len(&self, flow: FlowId) -> Option<(u64, u64)> {
        self.queues
            .get(flow.index())
            .map(|q| (u64::from(q.state.slots), q.state.bytes))
    }

    /// The counters of queue `flow`, `None` beyond the pipe's flows.
    pub fn flow_counters(&self, flow: FlowId) -> Option<&FlowCounters> {
        self.queues.get(flow.index()).map(|q| &q.counters)
    }

    /// Every queue's counters, in the order of the flow ids (one per flow
    /// of the pipe).
    pub fn all_flow_counters(&self) -> impl ExactSizeIterator<Item = &FlowCounters> + '_ {
        self.queues.iter().map(|q| &q.counters)
    }

    /// Bytes of per-flow state the pipe keeps for each of its flows (queue
    /// length and configuration index, 16 B; counters, 40 B),
    /// not counting the scheduler's, nor [`Pipe::PER_FLOW_FILTER_BYTES`].
    pub const PER_FLOW_BYTES: usize = std::mem::size_of::<Queue>();

    /// Bytes more per flow once some queue of the pipe configures RED,
    /// Gilbert-Elliott or the 4-state loss model (their state, in a side
    /// table).
    pub const PER_FLOW_FILTER_BYTES: usize = std::mem::size_of::<FilterState>();

    /// Bytes more per flow once some queue of the pipe configures CoDel:
    /// its state (32 B) and the record of the queue's enqueue times (12 B)
    /// in side tables, besides the times themselves (about 18 B a packet
    /// of [`PipeConfig::held_capacity`], plus up to 108 B for each queue
    /// that may hold packets: [`codel`]'s module docs).
    pub const PER_FLOW_CODEL_BYTES: usize = std::mem::size_of::<CodelState>() + 12;

    /// Bytes more per flow once some queue of the pipe configures PIE: its
    /// state ([`pie::PieState`], 72 B), besides CoDel's record of the
    /// enqueue times PIE queues keep too ([`Pipe::PER_FLOW_CODEL_BYTES`]).
    pub const PER_FLOW_PIE_BYTES: usize = std::mem::size_of::<PieState>();

    /// Bytes of per-flow state this pipe keeps for each of its flows:
    /// [`Pipe::PER_FLOW_BYTES`], plus [`Pipe::PER_FLOW_FILTER_BYTES`] when
    /// some queue has RED, Gilbert-Elliott or the 4-state loss model, plus
    /// [`Pipe::PER_FLOW_CODEL_BYTES`] when some queue has CoDel or PIE, plus
    /// [`Pipe::PER_FLOW_PIE_BYTES`] when some queue has PIE.
    pub fn per_flow_bytes(&self) -> usize {
        let mut bytes = Self::PER_FLOW_BYTES;
        if !self.filter_state.is_empty() {
            bytes += Self::PER_FLOW_FILTER_BYTES;
        }
        if self.times.is_some() {
            bytes += Self::PER_FLOW_CODEL_BYTES;
        }
        if !self.pie.is_empty() {
            bytes += Self::PER_FLOW_PIE_BYTES;
        }
        bytes
    }

    /// Queue `flow`'s CoDel state, while the pipe keeps one (some queue
    /// has configured CoDel).
    pub fn codel_state(&self, flow: FlowId) -> Option<&CodelState> {
        self.codel.get(flow.index())
    }

    /// Queue `flow`'s PIE state, while the pipe keeps one (some queue has
    /// configured PIE).
    pub fn pie_state(&self, flow: FlowId) -> Option<&PieState> {
        self.pie.get(flow.index())
    }

    /// The RED average of queue `flow` (0 while no queue of the pipe has
    /// RED, Gilbert-Elliott or the 4-state loss model).
    pub fn red_average(&self, flow: FlowId) -> Option<f64> {
        self.queues.get(flow.index()).map(|_| {
            self.filter_state
                .get(flow.index())
                .map_or(0.0, |s| s.red.avg)
        })
    }

    /// Queue `flow`'s RED, Gilbert-Elliott and 4-state state, when the pipe keeps
    /// any (a rebuilt link carries it to the queue's heir).
    pub(crate) fn filter_state_of(&self, flow: FlowId) -> Option<FilterState> {
        self.filter_state.get(flow.index()).copied()
    }

    /// Gives queue `flow` the filter state `fs` (a rebuilt link's, for the
    /// queue that continues it); no effect in a pipe that keeps none.
    pub(crate) fn carry_filter_state(&mut self, flow: FlowId, fs: FilterState) {
        if let Some(s) = self.filter_state.get_mut(flow.index()) {
            *s = fs;
        }
    }

    /// Queue `flow`'s CoDel and PIE states, each while the queue's
    /// configuration has that AQM (a rebuilt link carries them to the
    /// queue's heir, [`Pipe::carry_aqm_state`]).
    pub(crate) fn aqm_state_of(&self, flow: FlowId) -> AqmState {
        let i = flow.index();
        let Some(q) = self.queues.get(i) else {
            return AqmState::default();
        };
        let config = &self.configs[usize::from(q.state.config)].config;
        AqmState {
            codel: config.codel.and(self.codel.get(i).copied()),
            pie: config.pie.and(self.pie.get(i).copied()),
        }
    }

    /// Queue `flow` goes on with `aqm`, the CoDel and PIE states of the
    /// queue it continues in a rebuilt link, each where its own
    /// configuration has that AQM too (its untimed packets stay its own,
    /// [`CodelState::continuing`]); the others stay as they are.
    pub(crate) fn carry_aqm_state(&mut self, flow: FlowId, aqm: AqmState) {
        let i = flow.index();
        let Some(q) = self.queues.get(i) else {
            return;
        };
        let config = &self.configs[usize::from(q.state.config)].config;
        if let (Some(from), Some(_), Some(st)) = (aqm.codel, config.codel, self.codel.get_mut(i)) {
            *st = st.continuing(&from);
        }
        if let (Some(from), Some(_), Some(st)) = (aqm.pie, config.pie, self.pie.get_mut(i)) {
            *st = from;
        }
    }

    /// Runs the link up to `now` (control path: a rebuilt link reads its
    /// queues' states where the link has brought them before handing its
    /// packets over, which does the same first).
    pub(crate) fn run_link_to(&mut self, now: Instant) {
        self.advance_link(now);
    }

    /// The last answers of queue `flow`'s correlated duplication and
    /// corruption chains (0 beyond the pipe's flows; a rebuilt link carries
    /// them to the queue's heir).
    pub(crate) fn chains_of(&self, flow: FlowId) -> u8 {
        self.queues.get(flow.index()).map_or(0, |q| q.state.chains)
    }

    /// Adds `c` to queue `flow`'s counters (what the old queues a rebuilt
    /// link's queue continues had counted); no effect beyond the pipe's
    /// flows.
    pub(crate) fn carry_flow_counters(&mut self, flow: FlowId, c: &FlowCounters) {
        if let Some(Queue { counters: f, .. }) = self.queues.get_mut(flow.index()) {
            f.in_packets += c.in_packets;
            f.in_bytes += c.in_bytes;
            f.out_packets += c.out_packets;
            f.out_bytes += c.out_bytes;
            f.dropped_packets += c.dropped_packets;
        }
    }

    /// Empties queue `flow`'s length, filter state and correlated chains
    /// (its configuration stays).
    fn reset_queue(&mut self, i: usize) {
        if let Some(q) = self.queues.get_mut(i) {
            q.state.slots = 0;
            q.state.bytes = 0;
            q.state.chains = 0;
        }
        if let Some(fs) = self.filter_state.get_mut(i) {
            *fs = FilterState::default();
        }
        if let Some(st) = self.codel.get_mut(i) {
            *st = CodelState::default();
        }
        if let Some(st) = self.pie.get_mut(i) {
            *st = PieState::default();
        }
        if let Some(times) = &mut self.times {
            times.clear(i);
        }
    }

    /// Empties every queue's length and filter state. The correlated
    /// chains' last answers stay, for a rebuilt link's heirs to take
    /// ([`Pipe::chains_of`]).
    fn reset_queues(&mut self) {
        for q in &mut self.queues {
            q.state.slots = 0;
            q.state.bytes = 0;
        }
        for fs in &mut self.filter_state {
            *fs = FilterState::default();
        }
        for st in &mut self.codel {
            *st = CodelState::default();
        }
        for st in &mut self.pie {
            *st = PieState::default();
        }
        if let Some(times) = &mut self.times {
            for i in 0..self.queues.len() {
                times.clear(i);
            }
        }
    }

    /// Entries in the delay line (duplicates included).
    pub fn in_delay_line(&self) -> usize {
        self.line.len()
    }

    /// The link rate, `None` when unlimited.
    pub fn rate(&self) -> Option<Rate> {
        self.link.rate()
    }

    /// The scheduler.
    pub fn scheduler(&self) -> &S {
        &self.sched
    }

    /// Adds a flow to the scheduler ([`Scheduler::add_flow`]); its queue
    /// keeps the configuration it has in the pipe.
    ///
    /// # Errors
    /// As [`Scheduler::add_flow`]; a flow beyond the pipe's flows is
    /// [`FlowError::OutOfCapacity`].
    pub fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.check_flow(flow)?;
        self.sched.add_flow(flow, params)?;
        self.reset_queue(flow.index());
        Ok(())
    }

    /// Sets the scheduler's quantum ([`Scheduler::set_quantum`]: FQ's, an
    /// fq_codel sched's `quantum`); queued packets stay where they are.
    ///
    /// # Errors
    /// As [`Scheduler::set_quantum`]; nothing changes then.
    pub fn set_quantum(&mut self, bytes: u32) -> Result<(), ConfigError> {
        self.sched.set_quantum(bytes)
    }

    /// Changes a flow's scheduling parameters ([`Scheduler::change_flow`]).
    ///
    /// # Errors
    /// As [`Scheduler::change_flow`].
    pub fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.sched.change_flow(flow, params)
    }

    /// Removes a flow ([`Scheduler::remove_flow`]): its queued packets go
    /// to `purge` with [`DropReason::FlowRemoved`] and are counted as
    /// dropped; packets already on the link or in the delay line still leave.
    ///
    /// # Errors
    /// As [`Scheduler::remove_flow`].
    pub fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        self.check_flow(flow)?;
        let (counters, flows) = (&mut self.counters, &mut self.queues);
        self.sched.remove_flow(flow, &mut |r: Rejected| {
            count_drop(counters, flows, &r.packet, r.reason);
            purge(r);
        })?;
        self.reset_queue(flow.index());
        Ok(())
    }

    /// Empties the pipe when it is taken out of service (a pipe or sched
    /// deleted while it runs): every packet it holds, in the scheduler or
    /// in the delay line, goes to `out` and is counted as dropped, with
    /// [`DropReason::FlowRemoved`] (a packet already decided lost after the
    /// link, a profile loss, keeps its own reason); duplicates not yet
    /// released are forgotten (they were never counted as held). Afterwards
    /// [`Pipe::held`] is 0, so `in = out + dropped`. The scheduler is asked
    /// at `now` and later (a shaper's packets become eligible), at most
    /// `held` × 64 times; returns the packets it still holds after that (0
    /// for every scheduler of this crate). Control path: O(held + flows).
    pub fn purge(&mut self, now: Instant, out: &mut dyn FnMut(Rejected)) -> u64 {
        let (counters, flows) = (&mut self.counters, &mut self.queues);
        let mut t = now;
        let mut misses = 0u64;
        let budget = (self.sched.queued() as u64 + 1).saturating_mul(64);
        while !self.sched.is_empty() && misses < budget {
            match self.sched.dequeue(t) {
                Some(pkt) => {
                    count_drop(counters, flows, &pkt, DropReason::FlowRemoved);
                    out(Rejected {
                        packet: pkt,
                        reason: DropReason::FlowRemoved,
                    });
                }
                None => {
                    misses += 1;
                    t = match self.sched.next_eligible(t) {
                        Some(e) if e > t => e,
                        _ => t.saturating_add_nanos(MAX_PROBE_NS),
                    };
                }
            }
        }
        self.reset_queues();
        let (counters, flows) = (&mut self.counters, &mut self.queues);
        while let Some(e) = self.line.pop_due(Instant::MAX) {
            let reason = match e.fate {
                Fate::Duplicate => continue,
                Fate::Transmit => DropReason::FlowRemoved,
                Fate::Dropped(reason) => reason,
            };
            count_drop(counters, flows, &e.packet, reason);
            out(Rejected {
                packet: e.packet,
                reason,
            });
        }
        self.stalled = false;
        self.shaper_wait = false;
        self.sched.queued() as u64
    }

    fn check_flow(&self, flow: FlowId) -> Result<(), FlowError> {
        if flow.index() < self.queues.len() {
            Ok(())
        } else {
            Err(FlowError::OutOfCapacity {
                flow: flow.0,
                capacity: self.queues.len(),
            })
        }
    }
}

/// One step of the correlated chain whose last answer is bit `bit` of a
/// queue's `chains` ([`random::correlated_bernoulli`]).
#[inline]
fn chain_step(rng: &mut fastrand::Rng, chains: &mut u8, bit: u8, p: f64, c: f64) -> bool {
    let mut last = *chains & bit != 0;
    let yes = correlated_bernoulli(rng, &mut last, p, c);
    if yes {
        *chains |= bit;
    } else {
        *chains &= !bit;
    }
    yes
}
