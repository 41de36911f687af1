//! dummynet's classification for pspat: ordered rules, lookup tables and
//! masks turn a packet's key into a dense flow id on a link, with bounded
//! dynamic queues that expire when idle.
//!
//! A [`Classifier`] is built once from a validated [`pspat_config::Plan`] and
//! [`ClassifierLimits`]; [`Classifier::classify`] then maps each packet's
//! [`PacketKey`] to a [`Verdict`]: enqueue on `(link, instance, flow)`, pass
//! unshaped, or drop with a counted [`DropReason`]. [`Classifier::layout`]
//! lists every flow id each link uses ([`FlowLayout`]), so the caller builds
//! each link's [`pspat_sched::FlowTable`] once.
//!
//! # Model (`ipfw(8)`, dummynet's `ip_dn_io.c` and `dn_sched` as summarised
//! in the project's reference notes §6)
//! * **Rules** are tried in rule-number order, first match wins (see
//!   *Rules* below); `pipe N`, `queue N` and `tablearg` pick the
//!   target; `allow` passes unshaped, `deny` drops; the plan's default
//!   action applies when nothing matches. Each rule counts packets and bytes.
//! * **Sched masks** (and pipe masks) create one scheduler *instance* per
//!   distinct masked key, on the first packet, as dummynet's `sched_mask`.
//! * **Flow masks** create one *dynamic queue* per distinct masked key within
//!   an instance, on the first packet, as dummynet's flowset `mask`; the
//!   queue's flow id is the flowset's first id plus its slot.
//! * **Expiry**: an instance or dynamic queue unused for
//!   [`ClassifierLimits::idle_expiry_ns`] is never found again for its key
//!   (its next packet starts a new queue), and its slot is reclaimed for
//!   other keys after between 1 and 9/8 of the idle time without use
//!   (dummynet's `expire` sysctl reclaims idle queues by its own sweep).
//! * **Caps**: at most [`ClassifierLimits::queues_per_flowset`] dynamic
//!   queues per flowset and [`ClassifierLimits::instances_per_sched`]
//!   instances per masked link are live at once. Beyond the cap,
//!   [`OverflowPolicy`] sends the packet to one documented overflow queue
//!   (or instance), or drops it with [`DropReason::QueueOverflow`] /
//!   [`DropReason::InstanceOverflow`]. Either way the overflow is counted
//!   ([`DynamicStats::overflowed`]), so a flood of random source addresses
//!   costs bounded memory and is visible. dummynet itself has no cap (its
//!   `buckets` only sizes the hash); the cap is pspat's.
//! * **A key in the overflow queue stays there** while it keeps coming: a
//!   key sent to the overflow queue (or instance) gets no queue of its own
//!   until it has been away from the overflow queue for the idle time (to
//!   1¼ of it), even when a slot frees earlier, so that its next packets
//!   do not overtake those still waiting in the shared queue (the private
//!   `dynamic` module, *Keys held in the overflow queue*). Its order is
//!   kept whenever a packet waits in the overflow queue less than the
//!   idle time, the condition of *Slot reuse* below.
//!
//! # Rules
//! Protocols, prefixes, `me`, tables, ports, directions and interfaces match
//! as documented in the private `rules` module: `ip` any; `ip4`/`ip6` by the
//! source family; `tcp` 6, `udp` 17, `icmp` 1 (IPv4) or 58 (IPv6); a prefix
//! matches its own family only; `me` matches [`Classifier::set_local_addrs`];
//! `table(N)` matches by longest prefix and yields the `tablearg` (the
//! destination table's value when both sides are tables); empty port lists
//! match any port; `via` any direction, `recv` received packets, `xmit` sent
//! ones, on interface indexes bound by [`Classifier::bind_interface`] (a name
//! or a pattern ending in `*`; unbound names match nothing). `not` before
//! the protocol, a port option or an interface option matches what the
//! positive test refuses, as ipfw: `not dst-port 80` matches every packet
//! without ports (neither TCP nor UDP), `not xmit eth0` every received
//! packet.
//!
//! # Slot reuse and queued packets
//! A slot freed by expiry may still have packets queued in the scheduler from
//! its previous key (a flow that went idle *at the classifier* only stopped
//! arriving; its last packets can still wait in the arbiter). When the slot
//! is handed to a new key, the new key's packets join the same queue behind
//! them: every packet keeps its order, and nothing is lost or reordered, but
//! the new key shares the old key's tail (and its weight accounting) until
//! those packets leave. Isolation between the two keys therefore needs
//! `idle_expiry_ns` larger than the worst queueing delay of the link (queue
//! limit ÷ rate, plus the delay line if the caller counts it). The default
//! (10 s) exceeds the worst delay of a 1 MB queue (dummynet's
//! `pipe_byte_limit`) at 1 Mbit/s (8 s); larger queues or slower links need
//! a longer expiry.
//!
//! # Threads
//! A classifier is plain data used through `&mut self`: one thread owns it.
//! Dynamic flow ids are handed out by its tables, so receive threads that
//! classify in parallel must either share one classifier or each see every
//! packet of a masked key (steering by the same fields) *and* use disjoint
//! flowsets; splitting one flowset's range between threads is not provided.
//!
//! # Guarantees
//! * Sans-IO: no clock reads (time is a parameter), no threads, no system
//!   calls. No allocation per packet: every table is sized at construction
//!   and never grows.
//! * Bounded state: dynamic memory is fixed by the limits
//!   ([`Classifier::memory_estimate`]): a slot record is 16 B (LRU links,
//!   last use) plus 4 B per word of the masked key the mask can leave
//!   non-zero (2 words for `mask src-ip`: source and the flow label,
//!   protocol and family word; the instance word only on a link with
//!   instances; 11 words at most), and the index holds 4 B entries for
//!   `2·cap` rounded up to a power of two (load factor ≤ 1/2), i.e. 8 to
//!   16 B per slot: 32 B per dynamic queue for `mask src-ip` at a
//!   power-of-two cap (4096, 65 536), 68 B at most for `mask all` on a link
//!   with instances; under [`OverflowPolicy::SharedQueue`] 1 to 2 B more
//!   per slot of overflow marks (1 B at a power-of-two cap);
//!   `a_table_stores_only_the_words_its_mask_keeps` and
//!   `memory_per_dynamic_queue_is_at_most_128_bytes` compute it.
//! * Batches: [`Classifier::classify_batch`] gives the verdicts of
//!   one-by-one calls while overlapping the cache misses of [`BATCH`]
//!   packets.
//! * Every packet is accounted for: each call counts one packet in
//!   [`ClassifierStats`] as enqueued, passed or dropped by reason; rule
//!   counters add up to the packets classified.
//! * Any key never panics, whatever its families, ports or interface.
//!
//! # Complexity and cost per packet
//! * Rules: the packet's class (protocol group TCP, UDP, ICMP, ICMPv6 or
//!   other × source family × direction: one table read) selects the rules
//!   whose protocol, direction and interface-role conditions it meets, in
//!   rule order; only those are tried. A rule with no other condition
//!   (`ip from any to any`, `udp from any to any out`) matches without a
//!   test; one with ports, addresses or an interface tests just those (a
//!   port list is scanned; a prefix is one mask and compare, an address
//!   list one per entry of the packet's family (scanned); a table is
//!   O(L log n) for L distinct prefix lengths; `me` and interfaces scan
//!   their short lists). Matching is linear in the rules of the packet's
//!   class, at most all of them. A negated protocol is decided by the
//!   class too; a rule with a negated port list or interface takes a path
//!   of its own, so that the others pay one flag test for it. A class
//!   whose first rule has no other
//!   condition and sends to a flowset on a link without a sched mask is
//!   placed directly, decided at construction: the rule's counters, then
//!   the dynamic queue, with no dispatch on the action and no instance.
//! * Each masked lookup: the masked key, packed to its kept words, hashed
//!   with one multiplication per pair of words, then O(1) expected probes
//!   (open addressing, load ≤ 1/2, a tag compared before the key) plus at
//!   most two expiries, amortised O(1) (the `dynamic` module's docs). A
//!   key of two words (`mask src-ip`, `mask dst-ip`, a port mask alone, or
//!   a protocol or flow-label mask on a link with instances) is built as
//!   one 64-bit word straight from the packet, hashed with one
//!   multiplication and compared whole. Whether anything is due to expire
//!   is one comparison of `now` with an instant the table keeps: the
//!   oldest record is read only once it may have gone stale.
//! * A packet whose target is a flowset (`queue N`) reads the flowset's
//!   state once for its instance and its dynamic queue.
//! * In instructions: the rule scan, the masked lookup and the counters
//!   come to about 131 per packet, inlined into the caller (162 as a
//!   call, 185 before the direct placement above, 270 before two-word
//!   keys and the rule shortcut) for a UDP packet under two rules of
//!   which its class lists one, first, `mask src-ip`, a hit (callgrind,
//!   as `pspat sched-bench --dummynet` counts them, at 1024 and at 65 536
//!   sources: the rule and its counters, the key, its hash, the probe and
//!   the record's update).
//! * [`Classifier::expire`] is linear in what it reclaims.
//!
//! # Example
//! ```
//! use pspat_classify::{Classifier, ClassifierLimits, PacketKey, Verdict};
//! use pspat_sched::Instant;
//! let text = "sched 4 config type qfq bw 4Mbit/s\n\
//!             queue 1 config weight 10 sched 4 mask src-ip 0xffffffff\n\
//!             add 100 queue 1 ip from 10.199.0.0/16 to any\n\
//!             default deny\n";
//! let plan = pspat_config::parse_ipfw(text, "x").unwrap().validate(&pspat_config::NoProfiles).unwrap();
//! let mut c = Classifier::from_plan(&plan, &ClassifierLimits::default()).unwrap();
//! let key = PacketKey::new("10.199.0.7".parse().unwrap(), "10.199.1.1".parse().unwrap(), 17, 1, 2);
//! let Verdict::Enqueue(p) = c.classify(Instant::ZERO, &key, 100) else { panic!() };
//! assert_eq!(p.link, 4);
//! // The link's flow table is built once from the layout.
//! let table = c.layout().link(4).unwrap().flow_table().unwrap();
//! assert!(table.contains(p.flow));
//! ```
#![forbid(unsafe_code)]

mod carry;
mod dynamic;
mod key;
mod layout;
mod rules;
mod view;

use std::collections::BTreeMap;
use std::net::IpAddr;

use pspat_config::{Action, DefaultAction, Plan, Target};
use pspat_sched::{FlowId, FlowTable, Instant};

pub use carry::{CarryOver, LinkMoves};
pub use dynamic::DynamicStats;
pub use key::{PacketDirection, PacketKey};
pub use layout::{FlowLayout, FlowOwner, FlowRange, LinkKind, LinkLayout};
pub use rules::RuleCounters;
pub use view::DynamicKey;

use dynamic::{DynTable, Hashed, Lookup};
use key::{CompiledMask, KeyLayout, Narrow};
use rules::{AddrCond, CompiledRule, IfaceCond, LpmTable, Negated, RuleAction, RuleSet, CLASSES};

/// What happens to a packet whose dynamic queue (or instance) would exceed
/// the cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum OverflowPolicy {
    /// One extra queue per masked flowset (and one extra instance per masked
    /// link) takes every packet beyond the cap: the flood shares one queue
    /// with the flowset's weight and cannot crowd out established queues.
    #[default]
    SharedQueue,
    /// Drop with [`DropReason::QueueOverflow`] or
    /// [`DropReason::InstanceOverflow`].
    Drop,
}

/// Sizes and times the classifier is built with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassifierLimits {
    /// Dynamic queues live at once per masked flowset (1..=[`MAX_SLOTS`]).
    pub queues_per_flowset: u32,
    /// Per-flowset overrides of `queues_per_flowset`, by queue number.
    pub flowset_queues: BTreeMap<u32, u32>,
    /// Instances live at once per masked sched or pipe (1..=[`MAX_SLOTS`]).
    pub instances_per_sched: u32,
    /// Idle time after which a dynamic queue or instance expires, ns (≥ 1).
    pub idle_expiry_ns: u64,
    /// Beyond the caps.
    pub overflow: OverflowPolicy,
    /// Seed of the masked-key hash; a daemon should pass a random value.
    pub hash_seed: u64,
}

/// Packets whose dynamic-queue lookups [`Classifier::classify_batch`]
/// overlaps.
pub const BATCH: usize = 16;

/// Largest cap of one table (dynamic queues of a flowset, instances of a link).
pub const MAX_SLOTS: u32 = 1 << 24;

impl Default for ClassifierLimits {
    /// 4096 queues per flowset, 256 instances per sched, 10 s idle expiry,
    /// a shared overflow queue.
    fn default() -> Self {
        ClassifierLimits {
            queues_per_flowset: 4096,
            flowset_queues: BTreeMap::new(),
            instances_per_sched: 256,
            idle_expiry_ns: 10_000_000_000,
            overflow: OverflowPolicy::SharedQueue,
            hash_seed: 0x9e37_79b9_7f4a_7c15,
        }
    }
}

impl ClassifierLimits {
    fn queue_slots(&self, queue: u32) -> u32 {
        self.flowset_queues
            .get(&queue)
            .copied()
            .unwrap_or(self.queues_per_flowset)
    }
}

/// Why a classifier cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassifyError {
    /// A limit out of its range.
    #[error("classifier limit {field} = {value} is out of range (allowed: {allowed})")]
    InvalidLimit {
        /// The field of [`ClassifierLimits`].
        field: String,
        /// Its value.
        value: u64,
        /// The range.
        allowed: String,
    },
    /// A link would have more flow ids than a flow table holds.
    #[error("link {link} would have {flows} flow ids, more than {max}; lower queues_per_flowset")]
    TooManyFlows {
        /// The pipe or sched number.
        link: u32,
        /// Ids it would need.
        flows: u64,
        /// [`FlowTable::MAX_FLOWS`].
        max: u64,
    },
    /// The plan references something it does not define (a plan from
    /// [`pspat_config::Config::validate`] never does).
    #[error("plan is inconsistent: {0}")]
    Dangling(String),
}

/// Why a packet was dropped. Each has a counter in [`ClassifierStats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// No rule matched and the default action is `deny`.
    DefaultDeny,
    /// A `deny` rule matched.
    RuleDeny,
    /// The flowset's dynamic queues are at the cap ([`OverflowPolicy::Drop`]).
    QueueOverflow,
    /// The link's instances are at the cap ([`OverflowPolicy::Drop`]).
    InstanceOverflow,
    /// A `tablearg` value names no pipe or queue of the plan.
    UnknownTarget,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 5] = [
        DropReason::DefaultDeny,
        DropReason::RuleDeny,
        DropReason::QueueOverflow,
        DropReason::InstanceOverflow,
        DropReason::UnknownTarget,
    ];

    /// The stable counter name.
    pub const fn counter_name(self) -> &'static str {
        match self {
            DropReason::DefaultDeny => "default_deny",
            DropReason::RuleDeny => "rule_deny",
            DropReason::QueueOverflow => "queue_overflow",
            DropReason::InstanceOverflow => "instance_overflow",
            DropReason::UnknownTarget => "unknown_target",
        }
    }

    /// Position in [`DropReason::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// Where an enqueued packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Placement {
    /// The pipe or sched number (a [`LinkLayout::number`]).
    pub link: u32,
    /// The scheduler instance on that link, `0..LinkLayout::instances`.
    pub instance: u32,
    /// The flow id in that link's flow table.
    pub flow: FlowId,
    /// True when this packet created the dynamic queue (or reused an expired
    /// slot for a new key); the caller may reset per-queue state it keeps.
    pub new_queue: bool,
}

/// The outcome of [`Classifier::classify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Enqueue on this link, instance and flow.
    Enqueue(Placement),
    /// `allow` (a rule, or the default): forward unshaped.
    Pass,
    /// Drop, counted under this reason.
    Drop(DropReason),
}

/// Packet counters of a classifier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassifierStats {
    /// Calls to [`Classifier::classify`].
    pub packets: u64,
    /// [`Verdict::Enqueue`].
    pub enqueued: u64,
    /// [`Verdict::Pass`].
    pub passed: u64,
    /// [`Verdict::Drop`], by [`DropReason::index`].
    pub dropped: [u64; DropReason::ALL.len()],
}

/// The memory the dynamic tables hold.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemoryEstimate {
    /// Bytes of every dynamic table (slot records and indexes).
    pub dynamic_bytes: usize,
    /// Dynamic queues and instances they can hold.
    pub dynamic_slots: usize,
    /// Bytes of one slot record.
    pub slot_bytes: usize,
}

impl MemoryEstimate {
    /// Bytes per dynamic queue or instance, index included.
    pub fn bytes_per_slot(&self) -> f64 {
        if self.dynamic_slots == 0 {
            0.0
        } else {
            self.dynamic_bytes as f64 / self.dynamic_slots as f64
        }
    }
}

#[derive(Clone, Debug)]
struct Masked {
    mask: CompiledMask,
    table: DynTable,
    /// The table's keys are two words ([`KeyLayout::narrow`]): packed as
    /// one 64-bit word.
    narrow: Option<Narrow>,
}

impl Masked {
    fn new(mask: CompiledMask, table: DynTable) -> Self {
        let narrow = table.layout().narrow();
        Masked {
            mask,
            table,
            narrow,
        }
    }

    /// The packed key of `key` in `instance` and its hash.
    #[inline(always)] // on the per-packet path
    fn key(&self, key: &PacketKey, instance: u32) -> Hashed {
        match self.narrow {
            Some(which) => {
                let k = self.mask.pack_narrow(which, key, instance);
                Hashed::Narrow(k, self.table.hash_narrow(k))
            }
            None => {
                let p = self.mask.pack(self.table.layout(), key, instance);
                let h = self.table.hash(&p);
                Hashed::Wide(p, h)
            }
        }
    }

    /// The slot of `key` in `instance`, created if absent. A two-word
    /// key is packed, hashed and found inline; a wider one out of line, so
    /// that its packing buffer does not widen the caller's frame.
    #[inline(always)] // on the per-packet path
    fn lookup(&mut self, key: &PacketKey, instance: u32, now: Instant) -> Lookup {
        match self.narrow {
            Some(which) => {
                let k = self.mask.pack_narrow(which, key, instance);
                let h = self.table.hash_narrow(k);
                self.table.lookup_narrow(k, h, now)
            }
            None => self.lookup_wide(key, instance, now),
        }
    }

    /// [`Masked::lookup`] for a table whose keys are wider than two words.
    #[inline(never)]
    fn lookup_wide(&mut self, key: &PacketKey, instance: u32, now: Instant) -> Lookup {
        let k = self.key(key, instance);
        self.table.lookup_key(&k, now)
    }
}

#[derive(Clone, Debug)]
struct LinkState {
    number: u32,
    instances: Option<Masked>,
    /// The overflow instance under [`OverflowPolicy::SharedQueue`].
    overflow_instance: Option<u32>,
}

#[derive(Clone, Debug)]
struct PipeState {
    number: u32,
    link: usize,
    /// The link's number (`links[link].number`), for the placement.
    link_number: u32,
    flow: FlowId,
}

#[derive(Clone, Debug)]
struct QueueState {
    number: u32,
    link: usize,
    /// The link's number (`links[link].number`), for the placement.
    link_number: u32,
    first: FlowId,
    dynamic: Option<Masked>,
    overflow_flow: Option<FlowId>,
}

/// A packet class whose first rule sends every packet of the class to a
/// flowset on a link without a sched mask: the rule and the flowset, by
/// position, so that [`Classifier::classify`] places such a packet without
/// the rule walk, the action's dispatch or an instance lookup.
#[derive(Clone, Copy, Debug)]
struct Direct {
    rule: u32,
    queue: u32,
}

impl Direct {
    /// No direct target (the general path decides).
    const NONE: Direct = Direct {
        rule: u32::MAX,
        queue: u32::MAX,
    };
}

/// Rules, tables and masks compiled from a plan (crate docs).
#[derive(Clone, Debug)]
pub struct Classifier {
    rules: RuleSet,
    /// Per packet class, its direct target, or [`Direct::NONE`]. Computed
    /// once: the rules, flowsets and links do not change after
    /// construction (only the dynamic tables do).
    direct: [Direct; CLASSES],
    tables: Vec<LpmTable>,
    local: Vec<IpAddr>,
    default_action: DefaultAction,
    default_counters: RuleCounters,
    links: Vec<LinkState>,
    pipes: Vec<PipeState>,
    queues: Vec<QueueState>,
    overflow: OverflowPolicy,
    layout: FlowLayout,
    stats: ClassifierStats,
    /// Whether a rule tests TCP flags ([`Classifier::reads_tcp_flags`]).
    reads_tcp_flags: bool,
}

fn check_limit(
    field: &str,
    value: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<(), ClassifyError> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(ClassifyError::InvalidLimit {
            field: field.to_string(),
            value,
            allowed: format!("{}..={}", range.start(), range.end()),
        })
    }
}

/// A packet between rule matching and its dynamic-queue lookup: target,
/// instance, masked key and hash.
type Staged = (Chosen, u32, Option<Hashed>);

/// The packet's queue in flowset `q` on `instance` (dynamic queues looked
/// up or created under the flowset's mask), counted in `stats`: the end of
/// every placement into a flowset.
#[inline(always)] // on the per-packet path of classify
fn place_in(
    q: &mut QueueState,
    stats: &mut ClassifierStats,
    now: Instant,
    key: &PacketKey,
    instance: u32,
) -> Verdict {
    let (flow, new_queue) = match &mut q.dynamic {
        None => (q.first, false),
        Some(m) => match m.lookup(key, instance, now) {
            Lookup::Hit(s) => (FlowId(q.first.0 + s), false),
            Lookup::Created(s) => (FlowId(q.first.0 + s), true),
            Lookup::Full => match q.overflow_flow {
                Some(f) => (f, false),
                None => return dropped(stats, DropReason::QueueOverflow),
            },
        },
    };
    stats.enqueued += 1;
    Verdict::Enqueue(Placement {
        link: q.link_number,
        instance,
        flow,
        new_queue,
    })
}

/// Counts a drop for `reason` in `stats`; the verdict.
fn dropped(stats: &mut ClassifierStats, reason: DropReason) -> Verdict {
    stats.dropped[reason.index()] += 1;
    Verdict::Drop(reason)
}

#[derive(Clone, Copy, Debug)]
enum Chosen {
    Pipe(usize),
    Queue(usize),
}

impl Classifier {
    /// Compiles `plan` under `limits`.
    ///
    /// # Errors
    /// [`ClassifyError::InvalidLimit`] for a cap outside 1..=[`MAX_SLOTS`] or
    /// a zero idle time; [`ClassifyError::TooManyFlows`] when a link would
    /// need more ids than [`FlowTable::MAX_FLOWS`];
    /// [`ClassifyError::Dangling`] for a plan that references missing objects.
    pub fn from_plan(plan: &Plan, limits: &ClassifierLimits) -> Result<Classifier, ClassifyError> {
        let slots = 1..=u64::from(MAX_SLOTS);
        check_limit(
            "queues_per_flowset",
            limits.queues_per_flowset.into(),
            slots.clone(),
        )?;
        for (q, n) in &limits.flowset_queues {
            check_limit(&format!("flowset_queues[{q}]"), (*n).into(), slots.clone())?;
        }
        check_limit(
            "instances_per_sched",
            limits.instances_per_sched.into(),
            slots,
        )?;
        check_limit("idle_expiry_ns", limits.idle_expiry_ns, 1..=u64::MAX)?;
        if let Some(d) = plan.dangling_references().into_iter().next() {
            return Err(ClassifyError::Dangling(d));
        }
        let shared = limits.overflow == OverflowPolicy::SharedQueue;
        // Ids per link, counted wide before the layout is built in u32.
        for number in plan.scheds.keys().chain(plan.pipes.keys()) {
            let mut flows = u64::from(plan.pipes.contains_key(number));
            for q in plan
                .queues
                .values()
                .filter(|q| q.parent.number() == *number)
            {
                flows += if q.mask.is_empty() {
                    1
                } else {
                    u64::from(limits.queue_slots(q.number)) + u64::from(shared)
                };
            }
            if flows > FlowTable::MAX_FLOWS as u64 {
                return Err(ClassifyError::TooManyFlows {
                    link: *number,
                    flows,
                    max: FlowTable::MAX_FLOWS as u64,
                });
            }
        }
        let layout = FlowLayout::new(
            plan,
            |q| limits.queue_slots(q),
            limits.instances_per_sched,
            limits.overflow,
        );
        let mut seed = limits.hash_seed;
        let mut next_seed = || {
            seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            seed
        };
        let idle = limits.idle_expiry_ns;
        let mut links = Vec::new();
        for l in &layout.links {
            let mask = match plan.pipes.get(&l.number) {
                Some(p) => p.mask,
                None => plan.scheds[&l.number].mask,
            };
            let instances = CompiledMask::new(&mask).map(|mask| {
                let table = DynTable::new(
                    limits.instances_per_sched,
                    idle,
                    next_seed(),
                    KeyLayout::new(&mask, false),
                );
                Masked::new(mask, table.hold_overflow(shared))
            });
            let overflow_instance =
                (instances.is_some() && shared).then_some(limits.instances_per_sched);
            links.push(LinkState {
                number: l.number,
                instances,
                overflow_instance,
            });
        }
        let link_index = |n: u32| links.iter().position(|l| l.number == n);
        let mut pipes = Vec::new();
        for number in plan.pipes.keys() {
            let link = link_index(*number)
                .ok_or_else(|| ClassifyError::Dangling(format!("pipe {number}")))?;
            pipes.push(PipeState {
                number: *number,
                link,
                link_number: links[link].number,
                flow: FlowId(0),
            });
        }
        let mut queues = Vec::new();
        for q in plan.queues.values() {
            let link = link_index(q.parent.number())
                .ok_or_else(|| ClassifyError::Dangling(format!("queue {}", q.number)))?;
            let (_, range) = layout
                .range_of(FlowOwner::Queue(q.number))
                .ok_or_else(|| ClassifyError::Dangling(format!("queue {}", q.number)))?;
            let instances = links[link].instances.is_some();
            let dynamic = CompiledMask::new(&q.mask).map(|mask| {
                let table = DynTable::new(
                    limits.queue_slots(q.number),
                    idle,
                    next_seed(),
                    KeyLayout::new(&mask, instances),
                );
                Masked::new(mask, table.hold_overflow(shared))
            });
            queues.push(QueueState {
                number: q.number,
                link,
                link_number: links[link].number,
                first: range.first,
                dynamic,
                overflow_flow: range.overflow,
            });
        }
        let table_numbers: Vec<u32> = plan.tables.keys().copied().collect();
        let tables = plan.tables.values().map(LpmTable::new).collect();
        let table_index = |n: u32| table_numbers.iter().position(|t| *t == n);
        let mut rules = Vec::new();
        for r in plan.rules.values() {
            let action = match r.action {
                Action::Allow => RuleAction::Allow,
                Action::Deny => RuleAction::Deny,
                Action::Pipe(Target::Tablearg) => RuleAction::PipeTablearg,
                Action::Queue(Target::Tablearg) => RuleAction::QueueTablearg,
                Action::Pipe(Target::Number(n)) => {
                    RuleAction::Pipe(pipes.iter().position(|p| p.number == n).ok_or_else(|| {
                        ClassifyError::Dangling(format!("rule {} pipe {n}", r.number))
                    })?)
                }
                Action::Queue(Target::Number(n)) => {
                    RuleAction::Queue(queues.iter().position(|q| q.number == n).ok_or_else(
                        || ClassifyError::Dangling(format!("rule {} queue {n}", r.number)),
                    )?)
                }
            };
            let addr = |a| {
                AddrCond::new(a, table_index)
                    .ok_or_else(|| ClassifyError::Dangling(format!("rule {} table", r.number)))
            };
            let iface = r.interface.as_ref().map(|i| IfaceCond {
                role: i.role,
                pattern: i.name.clone(),
                bound: Vec::new(),
                negated: i.negated,
            });
            let header = rules::HeaderCond::of(r);
            rules.push(CompiledRule {
                number: r.number,
                action,
                proto: r.proto,
                proto_negated: r.proto_negated,
                src: addr(&r.src)?,
                dst: addr(&r.dst)?,
                src_ports: r.src_ports.clone(),
                dst_ports: r.dst_ports.clone(),
                negated: Negated::new(
                    r.src_ports_negated && !r.src_ports.is_empty(),
                    r.dst_ports_negated && !r.dst_ports.is_empty(),
                    iface.as_ref(),
                    header.as_deref(),
                ),
                direction: r.direction,
                iface,
                dscp: rules::dscp_mask(&r.dscp, r.dscp_negated),
                header,
                draw_below: rules::draw_below(r.prob.map(|p| p.0)),
                packets: 0,
                bytes: 0,
            });
        }
        let reads_tcp_flags = rules
            .iter()
            .any(|r| r.header.as_ref().is_some_and(|h| h.reads_tcp_flags()));
        let rules = RuleSet::new(rules, plan.seed);
        let direct = std::array::from_fn(|class| match rules.plain_rule(class) {
            Some((at, RuleAction::Queue(i)))
                if queues
                    .get(i)
                    .and_then(|q| links.get(q.link))
                    .is_some_and(|l| l.instances.is_none()) =>
            {
                Direct {
                    rule: at as u32,
                    queue: i as u32,
                }
            }
            _ => Direct::NONE,
        });
        Ok(Classifier {
            rules,
            direct,
            tables,
            local: Vec::new(),
            default_action: plan.default_action,
            default_counters: RuleCounters::default(),
            links,
            pipes,
            queues,
            overflow: limits.overflow,
            layout,
            stats: ClassifierStats::default(),
            reads_tcp_flags,
        })
    }

    /// Whether a rule tests the TCP flags (`tcpflags`, `setup`,
    /// `established`). A caller that finds them dearer to read than the
    /// rest of [`PacketKey`] fills [`PacketKey::tcp_flags`] only when this
    /// is true; otherwise no rule reads them.
    pub fn reads_tcp_flags(&self) -> bool {
        self.reads_tcp_flags
    }

    /// The flow ids of every link ([`FlowLayout`]).
    pub fn layout(&self) -> &FlowLayout {
        &self.layout
    }

    /// Binds interface index `ifindex`, called `name` on this host, to every
    /// rule whose interface name (or `*` pattern) fits; returns how many
    /// rules it now serves. Rebinding is harmless.
    pub fn bind_interface(&mut self, name: &str, ifindex: u32) -> usize {
        let mut n = 0;
        for r in &mut self.rules.rules {
            if let Some(i) = &mut r.iface {
                if i.names(name) {
                    if !i.bound.contains(&ifindex) {
                        i.bound.push(ifindex);
                    }
                    n += 1;
                }
            }
        }
        n
    }

    /// The addresses `me` matches (replacing the previous set).
    pub fn set_local_addrs(&mut self, addrs: &[IpAddr]) {
        self.local = addrs.to_vec();
    }

    /// Classifies one packet of `len` bytes at `now` (module docs).
    ///
    /// Inlined into the caller (an RX loop, the benchmark's front): its
    /// direct path is a few dozen instructions, and a call would add a
    /// frame of saved registers and a 16-byte verdict through memory
    /// (about 17 instructions a packet under `sched-bench --dummynet`).
    /// The general path stays out of line.
    #[inline(always)]
    pub fn classify(&mut self, now: Instant, key: &PacketKey, len: u32) -> Verdict {
        // A class whose first rule sends all its packets to one flowset
        // without instances: the same counters and outcome as the general
        // path, with less to decide (and a smaller frame to keep).
        let d = self.direct[RuleSet::class(key)];
        let Classifier {
            queues,
            stats,
            rules,
            ..
        } = self;
        if let Some(q) = queues.get_mut(d.queue as usize) {
            rules.count(d.rule as usize, len);
            return place_in(q, stats, now, key, 0);
        }
        self.classify_general(now, key, len)
    }

    /// [`Classifier::classify`] through the rules, the target's instance
    /// and its queue.
    #[inline(never)]
    fn classify_general(&mut self, now: Instant, key: &PacketKey, len: u32) -> Verdict {
        match self.decide(key, len) {
            Err(v) => v,
            Ok(Chosen::Queue(i)) => self.classify_queue(now, key, i),
            Ok(chosen) => self.place(now, key, chosen),
        }
    }

    /// The placement of a packet whose target is `chosen`: its instance,
    /// then its flow.
    fn place(&mut self, now: Instant, key: &PacketKey, chosen: Chosen) -> Verdict {
        let instance = match self.instance(now, key, chosen) {
            Ok(i) => i,
            Err(v) => return v,
        };
        let hashed = self.queue_key(key, chosen, instance);
        self.finish(now, chosen, instance, hashed)
    }

    /// [`Classifier::place`] for flowset `i`, the common target, with the
    /// flowset's state read once: the same steps (the instance on its
    /// link, then its dynamic queue) and outcome.
    #[inline(always)] // on the per-packet path of classify
    fn classify_queue(&mut self, now: Instant, key: &PacketKey, i: usize) -> Verdict {
        if i >= self.queues.len() {
            // Not reached (rules name flowsets by position).
            return self.place(now, key, Chosen::Queue(i));
        }
        let Classifier {
            queues,
            links,
            stats,
            ..
        } = self;
        let instance = match links.get_mut(queues[i].link) {
            Some(LinkState {
                instances: Some(m),
                overflow_instance,
                ..
            }) => match m.lookup(key, 0, now) {
                Lookup::Hit(s) | Lookup::Created(s) => s,
                Lookup::Full => match overflow_instance {
                    Some(s) => *s,
                    None => return dropped(stats, DropReason::InstanceOverflow),
                },
            },
            _ => 0,
        };
        self.in_queue(now, key, i, instance)
    }

    /// The end of [`Classifier::classify_queue`]: the packet's queue in
    /// flowset `i` (a position below `queues.len()`) on `instance`.
    #[inline(always)] // on the per-packet path of classify
    fn in_queue(&mut self, now: Instant, key: &PacketKey, i: usize, instance: u32) -> Verdict {
        let Classifier { queues, stats, .. } = self;
        let Some(q) = queues.get_mut(i) else {
            // Not reached (callers pass a flowset's position).
            return dropped(stats, DropReason::UnknownTarget);
        };
        place_in(q, stats, now, key, instance)
    }

    /// Classifies `keys[i]` of `lens[i]` bytes into `out[i]`, for as many
    /// packets as the shortest of the three slices holds; returns that
    /// number. The verdicts, counters and dynamic state are exactly those of
    /// calling [`Classifier::classify`] on each packet in order; the batch
    /// only overlaps the memory accesses of up to [`BATCH`] packets' dynamic
    /// queue lookups (the index entry and the slot of each are read for all
    /// packets first, so their cache misses are served in parallel).
    pub fn classify_batch(
        &mut self,
        now: Instant,
        keys: &[PacketKey],
        lens: &[u32],
        out: &mut [Verdict],
    ) -> usize {
        let n = keys.len().min(lens.len()).min(out.len());
        let mut start = 0;
        while start < n {
            let end = n.min(start + BATCH);
            let mut staged: [Option<Staged>; BATCH] = [None; BATCH];
            for i in start..end {
                let key = &keys[i];
                match self
                    .decide(key, lens[i])
                    .and_then(|c| self.instance(now, key, c).map(|inst| (c, inst)))
                {
                    Ok((c, inst)) => {
                        staged[i - start] = Some((c, inst, self.queue_key(key, c, inst)))
                    }
                    Err(v) => out[i] = v,
                }
            }
            let mut sink = 0u64;
            for (c, _, h) in staged.iter().flatten() {
                if let (Chosen::Queue(q), Some(h)) = (c, h) {
                    if let Some(m) = &self.queues[*q].dynamic {
                        sink ^= m.table.touch_index(h.hash());
                    }
                }
            }
            for (c, _, h) in staged.iter().flatten() {
                if let (Chosen::Queue(q), Some(h)) = (c, h) {
                    if let Some(m) = &self.queues[*q].dynamic {
                        sink ^= m.table.touch_slot(h.hash());
                    }
                }
            }
            std::hint::black_box(sink);
            for i in start..end {
                if let Some((c, inst, hashed)) = staged[i - start] {
                    out[i] = self.finish(now, c, inst, hashed);
                }
            }
            start = end;
        }
        n
    }

    /// Classifies one bridged packet of `len` bytes crossing from interface
    /// index `ingress` to `egress`, as ipfw sees it on a bridge: two passes
    /// through the rules, first `in` on `ingress` (`recv`, `via`), then
    /// `out` on `egress` (`xmit`, `via`). The first pass whose outcome is a
    /// pipe, a queue or a drop (a `deny` rule, `default deny`) decides; a
    /// pass that ends in `allow` (a rule or `default allow`) hands the
    /// packet to the next, and the last pass's outcome stands. Each pass
    /// counts the rule it matched (or the default) once; the packet counts
    /// once in [`ClassifierStats`]. `key.direction` and `key.ifindex` are
    /// ignored (each pass sets its own).
    ///
    /// # Examples
    /// ```
    /// use pspat_classify::{Classifier, ClassifierLimits, PacketKey, Verdict};
    /// use pspat_sched::Instant;
    /// let text = "pipe 1 config delay 20ms\n\
    ///             add 100 pipe 1 ip from any to any out xmit eth1\n\
    ///             default allow\n";
    /// let plan = pspat_config::parse_ipfw(text, "x").unwrap().validate(&pspat_config::NoProfiles).unwrap();
    /// let mut c = Classifier::from_plan(&plan, &ClassifierLimits::default()).unwrap();
    /// c.bind_interface("eth0", 1);
    /// c.bind_interface("eth1", 2);
    /// let key = PacketKey::new("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 1, 0, 0);
    /// // eth0 -> eth1: seen `out xmit eth1` on the second pass.
    /// assert!(matches!(c.classify_bridged(Instant::ZERO, &key, 1, 2, 84), Verdict::Enqueue(p) if p.link == 1));
    /// // eth1 -> eth0: no rule in either pass.
    /// assert_eq!(c.classify_bridged(Instant::ZERO, &key, 2, 1, 84), Verdict::Pass);
    /// ```
    pub fn classify_bridged(
        &mut self,
        now: Instant,
        key: &PacketKey,
        ingress: u32,
        egress: u32,
        len: u32,
    ) -> Verdict {
        let mut k = *key;
        k.direction = PacketDirection::In;
        k.ifindex = ingress;
        let mut matched = self.first_match(&k, len);
        let allowed = match matched {
            Some((RuleAction::Allow, _)) => true,
            None => self.default_action == DefaultAction::Allow,
            Some(_) => false,
        };
        if allowed {
            k.direction = PacketDirection::Out;
            k.ifindex = egress;
            matched = self.first_match(&k, len);
        }
        let (chosen, instance) = match self
            .resolve(matched)
            .and_then(|c| self.instance(now, &k, c).map(|i| (c, i)))
        {
            Ok(x) => x,
            Err(v) => return v,
        };
        let hashed = self.queue_key(&k, chosen, instance);
        self.finish(now, chosen, instance, hashed)
    }

    /// The first rule `key` matches, with its tablearg, counted in that
    /// rule's counters; `None` (counted in the default's) when none does.
    #[inline(always)] // on the per-packet path of classify and classify_bridged
    fn first_match(&mut self, key: &PacketKey, len: u32) -> Option<(RuleAction, Option<u32>)> {
        let matched = self.rules.first_match(key, len, &self.local, &self.tables);
        if matched.is_some() {
            return matched;
        }
        self.default_counters.packets += 1;
        self.default_counters.bytes += u64::from(len);
        None
    }

    /// Rule matching: the target, or the verdict when there is none.
    #[inline]
    fn decide(&mut self, key: &PacketKey, len: u32) -> Result<Chosen, Verdict> {
        let matched = self.first_match(key, len);
        self.resolve(matched)
    }

    /// The target of a match (or of the default action), or the verdict
    /// when there is none.
    #[inline(always)] // on the per-packet path of classify and classify_bridged
    fn resolve(&mut self, matched: Option<(RuleAction, Option<u32>)>) -> Result<Chosen, Verdict> {
        match matched {
            None => Err(match self.default_action {
                DefaultAction::Allow => self.pass(),
                DefaultAction::Deny => self.drop(DropReason::DefaultDeny),
            }),
            Some((RuleAction::Allow, _)) => Err(self.pass()),
            Some((RuleAction::Deny, _)) => Err(self.drop(DropReason::RuleDeny)),
            Some((RuleAction::Pipe(i), _)) => Ok(Chosen::Pipe(i)),
            Some((RuleAction::Queue(i), _)) => Ok(Chosen::Queue(i)),
            Some((RuleAction::PipeTablearg, arg)) => {
                match arg.and_then(|v| self.pipes.binary_search_by_key(&v, |p| p.number).ok()) {
                    Some(i) => Ok(Chosen::Pipe(i)),
                    None => Err(self.drop(DropReason::UnknownTarget)),
                }
            }
            Some((RuleAction::QueueTablearg, arg)) => {
                match arg.and_then(|v| self.queues.binary_search_by_key(&v, |q| q.number).ok()) {
                    Some(i) => Ok(Chosen::Queue(i)),
                    None => Err(self.drop(DropReason::UnknownTarget)),
                }
            }
        }
    }

    fn link_of(&self, chosen: Chosen) -> usize {
        match chosen {
            Chosen::Pipe(i) => self.pipes[i].link,
            Chosen::Queue(i) => self.queues[i].link,
        }
    }

    /// The scheduler instance on the chosen target's link.
    #[inline(always)] // on the per-packet path of classify and classify_bridged
    fn instance(&mut self, now: Instant, key: &PacketKey, chosen: Chosen) -> Result<u32, Verdict> {
        let link = self.link_of(chosen);
        let link = &mut self.links[link];
        match &mut link.instances {
            None => Ok(0),
            Some(m) => match m.lookup(key, 0, now) {
                Lookup::Hit(s) | Lookup::Created(s) => Ok(s),
                Lookup::Full => match link.overflow_instance {
                    Some(s) => Ok(s),
                    None => Err(self.drop(DropReason::InstanceOverflow)),
                },
            },
        }
    }

    /// The masked key and its hash, for a masked flowset. A `match`, not
    /// `Option::map`: the closure was compiled out of line, one more call
    /// per packet (callgrind).
    #[allow(clippy::manual_map)]
    #[inline(always)] // on the per-packet path of classify and classify_bridged
    fn queue_key(&self, key: &PacketKey, chosen: Chosen, instance: u32) -> Option<Hashed> {
        match chosen {
            Chosen::Pipe(_) => None,
            Chosen::Queue(i) => match &self.queues[i].dynamic {
                Some(m) => Some(m.key(key, instance)),
                None => None,
            },
        }
    }

    /// The flow id, from the masked key when the flowset has a mask.
    #[inline(always)] // on the per-packet path of classify and classify_bridged
    fn finish(
        &mut self,
        now: Instant,
        chosen: Chosen,
        instance: u32,
        hashed: Option<Hashed>,
    ) -> Verdict {
        let (link, flow, new_queue) = match chosen {
            Chosen::Pipe(i) => (self.pipes[i].link_number, self.pipes[i].flow, false),
            Chosen::Queue(i) => {
                let q = &mut self.queues[i];
                let link = q.link_number;
                match (&mut q.dynamic, hashed) {
                    (Some(m), Some(k)) => match m.table.lookup_key(&k, now) {
                        Lookup::Hit(s) => (link, FlowId(q.first.0 + s), false),
                        Lookup::Created(s) => (link, FlowId(q.first.0 + s), true),
                        Lookup::Full => match q.overflow_flow {
                            Some(f) => (link, f, false),
                            None => return self.drop(DropReason::QueueOverflow),
                        },
                    },
                    _ => (link, q.first, false),
                }
            }
        };
        self.stats.enqueued += 1;
        Verdict::Enqueue(Placement {
            link,
            instance,
            flow,
            new_queue,
        })
    }

    fn pass(&mut self) -> Verdict {
        self.stats.passed += 1;
        Verdict::Pass
    }

    fn drop(&mut self, reason: DropReason) -> Verdict {
        dropped(&mut self.stats, reason)
    }

    /// Reclaims every dynamic queue and instance idle for the expiry time;
    /// returns how many. Optional: [`Classifier::classify`] reclaims as it goes.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut n = 0;
        for l in &mut self.links {
            if let Some(m) = &mut l.instances {
                n += m.table.expire(now);
            }
        }
        for q in &mut self.queues {
            if let Some(m) = &mut q.dynamic {
                n += m.table.expire(now);
            }
        }
        n
    }

    /// Packet counters. `packets` is the sum of the outcomes: every call
    /// ends in exactly one (an enqueue, a pass or a drop), so it is not
    /// counted apart on the packet path.
    pub fn stats(&self) -> ClassifierStats {
        let s = self.stats;
        ClassifierStats {
            packets: s.enqueued + s.passed + s.dropped.iter().sum::<u64>(),
            ..s
        }
    }

    /// Starts the draws of `prob` rules again from `seed` (a configuration's
    /// new `seed`; the classifier is built with the plan's).
    pub fn reseed_rules(&mut self, seed: u64) {
        self.rules.reseed(seed);
    }

    /// Counters of each rule, in rule order, as `(rule number, counters)`.
    pub fn rule_counters(&self) -> impl Iterator<Item = (u32, RuleCounters)> + '_ {
        self.rules.rules.iter().map(|r| (r.number, r.counters()))
    }

    /// Sets the counters of rule `number` back to 0 (ipfw's `zero N`), or
    /// of every rule and the default action with `None` (`zero`); returns
    /// whether a rule of that number exists (`None`: always).
    pub fn zero_rule_counters(&mut self, number: Option<u32>) -> bool {
        let mut found = number.is_none();
        for r in &mut self.rules.rules {
            if number.is_none_or(|n| n == r.number) {
                r.zero();
                found = true;
            }
        }
        if number.is_none() {
            self.default_counters = RuleCounters::default();
        }
        found
    }

    /// Packets no rule matched (the default action's counter).
    pub fn default_counters(&self) -> RuleCounters {
        self.default_counters
    }

    /// Dynamic-queue counters of flowset `queue` (`None` for an unknown or
    /// unmasked flowset).
    pub fn flowset_stats(&self, queue: u32) -> Option<DynamicStats> {
        self.queues
            .iter()
            .find(|q| q.number == queue)
            .and_then(|q| q.dynamic.as_ref())
            .map(|m| m.table.stats())
    }

    /// Instance counters of link `number` (`None` for an unknown or
    /// unmasked link).
    pub fn instance_stats(&self, number: u32) -> Option<DynamicStats> {
        self.links
            .iter()
            .find(|l| l.number == number)
            .and_then(|l| l.instances.as_ref())
            .map(|m| m.table.stats())
    }

    /// The overflow policy in force.
    pub fn overflow_policy(&self) -> OverflowPolicy {
        self.overflow
    }

    /// Bytes held by the dynamic tables, computed from their sizes.
    pub fn memory_estimate(&self) -> MemoryEstimate {
        let tables = self
            .links
            .iter()
            .filter_map(|l| l.instances.as_ref())
            .chain(self.queues.iter().filter_map(|q| q.dynamic.as_ref()));
        let mut e = MemoryEstimate::default();
        for m in tables {
            e.slot_bytes = e.slot_bytes.max(m.table.slot_bytes());
            e.dynamic_bytes += m.table.memory_bytes();
            e.dynamic_slots += m.table.stats().capacity as usize;
        }
        e
    }
}
