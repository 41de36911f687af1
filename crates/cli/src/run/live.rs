//! Live changes of a running `pspat run`: what a new plan changes, whether
//! that can change while packets flow, and the arbiter's side of applying
//! it between two scheduler calls.
//!
//! # What can change live
//! * a pipe's or sched's link: `bw` (not on a `wf2q+` sched, whose virtual
//!   clock was built for one rate), `burst`, `delay`, jitter and its
//!   distribution, `profile` ([`Pipe::reconfigure`]: from the next packet
//!   to start on the link; packets in the delay line keep their exit times);
//! * a queue's parameters (a pipe's own queue, or a flowset's on every one
//!   of its dynamic queues): limit, `plr`, RED/GRED, Gilbert-Elliott loss,
//!   the 4-state loss model (`lossstate`)
//!   ([`Pipe::set_queue`]: packets already queued stay);
//! * a flowset's `weight`, `lmax` and `pri` ([`pspat_sched::Scheduler::change_flow`]:
//!   queued packets stay in order);
//! * rules, table entries and the default action (a new classifier);
//! * a pipe, or a sched with its flowsets, added ([`LiveOp::Install`]):
//!   its pipes are built on the control side, each instance given a run of
//!   free global ids ([`PipeRoutes::free_base`]) out of the reserve the
//!   set was started with (`--spare-flows`); none free: refused, naming
//!   the flag;
//! * a pipe, sched or flowset deleted ([`LiveOp::Remove`]): validation
//!   already refuses a rule that still sends to it or a flowset that still
//!   feeds it, unless the same change removes those too;
//! * a flowset added to or deleted from a running link, a flowset moved to
//!   another parent, a new scheduler type, `reorder`, or `bw` of a `wf2q+`
//!   sched (whose virtual clock follows the rate it was built with): the
//!   link is rebuilt (an install with `replace`), in other free ids, and its
//!   packets go on in the new pipes ([`PipeSet::replace_link`]; those of
//!   a deleted flowset are dropped as `flow_removed`); frames routed to
//!   its old ids before the classifier changed follow them there. Queued
//!   packets keep their enqueue times, and a queue that continues one old
//!   queue whole keeps its RED, loss, CoDel and PIE states (docs/RUN.md
//!   lists what carries over).
//!
//! * an `fq_codel` sched's `target`, `interval` and `ecn` (its flowsets'
//!   CoDel, set on their queues as a queue's parameters), its `limit`
//!   (each pipe's held limit, [`Pipe::reconfigure`]) and its `quantum`
//!   (each pipe's FQ, [`LiveOp::Quantum`]: every flow keeps its queued
//!   packets, place and deficit, and earns the new quantum from its next
//!   turn); its `flows`, or a type changed to or from `fq_codel`, rebuild
//!   the link as a new scheduler type does (the flowsets' masks, CoDel and
//!   limits follow the sched's in the new plan); an `fq_pie` sched's PIE
//!   parameters, `limit` and `quantum` likewise in place, its `flows` or
//!   type by a rebuild; a queue's `pie` parameters in place, as CoDel's
//!   (each queue keeps its PIE state: probability, burst allowance, delay
//!   estimate);
//! * a pipe's `type` as a sched's: a new type, or new `flows` of an
//!   `fq_codel` or `fq_pie` pipe, rebuild its link; its other fq_codel and
//!   fq_pie parameters change in place;
//! * a new mask of a running pipe, sched or flowset: the link is rebuilt,
//!   and each packet it holds goes to the instance and dynamic queue its
//!   own key (its frame's headers read again) has under the new masks, so
//!   a finer mask splits an old queue packet by packet ([`LiveOp::Install`]
//!   with `remask` and `by_key`; the moves come from
//!   [`pspat_classify::Classifier::carry_dynamic_from`], the new
//!   classifier is lent to the arbiter, and both are read, applied and the
//!   classifier replaced under one hold of the classifier's lock); a
//!   packet whose frame cannot be read goes, with its old queue, to the
//!   queue its old key has now;
//! * the seed ([`LiveOp::Seed`]): every running pipe's random streams
//!   continue from their positions in the new seed's sequence
//!   ([`Pipe::reseed`]); links built by the same change start with it.
//!
//! A rule or table change keeps dynamic queues and instances: the new
//! classifier takes the running one's entries (same masks: the same
//! slots), so flow ids and queued packets stay put.
//!
//! # Applying
//! The control side plans a change ([`plan_change`]) and hands the
//! arbiter's part to the [`Inbox`], which wakes the arbiter (an idle one
//! would otherwise wait for its 100 ms safety wake-up); the arbiter takes
//! it at the start of its next `enqueue` or `dequeue` (so between two
//! packets, never inside one), applies it to every instance of the links
//! it names ([`apply_keyed`]), and answers. Installs are checked first (their keys and ids free), flow
//! parameters go next and are rolled back if one is refused, so a batch
//! applies whole or not at all. A change that adds or deletes links runs
//! in three steps: the first batch (parameters, installs and rebuilds),
//! then the routes and the classifier replaced together under the
//! classifier's lock (so a verdict is always mapped by its own
//! classifier's routes and no frame reaches a link before it is
//! installed), then a second batch with the deletions (so no new frame
//! reaches a deleted link). A deleted link's due packets still leave; the
//! rest of what it held is dropped as `flow_removed` and handed to the
//! runtime, which counts it ([`PipeSet::remove_link`]); its final counters
//! go to the reports ([`Gone`]).
//!
//! # Cost
//! Nothing on the packet path but one Acquire load of the inbox's flag per
//! scheduler call (and, on the RX threads, one Acquire load of the routes'
//! generation per frame). Applying: O(ids changed × instances) plus what
//! [`Pipe::reconfigure`] moves, O(members) per install or removal plus the
//! packets a removed link held; it allocates (control path only).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pspat_classify::{
    CarryOver, Classifier, FlowLayout, FlowOwner, LinkLayout, LinkMoves, PacketKey,
};
use pspat_config::{pipe_config, queue_config, sched_config, Change, Plan};
use pspat_sched::pipe::{PipeConfig, PipeCounters, QueueConfig};
use pspat_sched::{AlgKind, AnyScheduler, FlowId, FlowParams, Pipe, PipeRoutes, PipeSet};

use super::LinkInfo;

/// One instance of a link to install, built by the control side.
pub struct NewMember {
    pub instance: u32,
    /// Its first global id (free in the set when planned).
    pub base: u32,
    pub flows: u32,
    pub pipe: Box<Pipe<AnyScheduler>>,
}

impl std::fmt::Debug for NewMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NewMember {{ instance: {}, base: {}, flows: {} }}",
            self.instance, self.base, self.flows
        )
    }
}

/// Two members are the same install when they take the same ids (the
/// pipes themselves are not compared).
impl PartialEq for NewMember {
    fn eq(&self, other: &Self) -> bool {
        (self.instance, self.base, self.flows) == (other.instance, other.base, other.flows)
    }
}

/// One member's final counters, when the arbiter took it out of the set.
#[derive(Clone, Copy, Debug)]
pub struct Gone {
    pub link: u32,
    pub counters: PipeCounters,
    /// The link was deleted (not only rebuilt).
    pub removed: bool,
}

/// One change for the arbiter, on every instance of `link`.
#[derive(Debug, PartialEq)]
pub enum LiveOp {
    /// A link added (`replace` false) or rebuilt (`replace`: its
    /// instances hand their packets over to the new ones, each old
    /// per-link flow id `i` becoming `remap[i]`, none when its flowset is
    /// gone; [`PipeSet::replace_link`]).
    ///
    /// With `remask` (a mask of the link or of a flowset on it changed),
    /// packets may change instance: `moves`, filled in by the control side
    /// from the two classifiers under the classifier's lock
    /// ([`pspat_classify::Classifier::carry_dynamic_from`]), says where
    /// each `(instance, flow)` goes ([`PipeSet::replace_link_moving`]).
    /// With `by_key` too (the new classifier, lent), each held packet
    /// goes where its own key goes under the new masks
    /// ([`pspat_classify::Classifier::place_carried`],
    /// [`PipeSet::replace_link_splitting`]): a finer mask splits an old
    /// queue packet by packet; `moves` then names each old queue's heir.
    Install {
        link: u32,
        members: Vec<NewMember>,
        replace: bool,
        remap: Vec<Option<u32>>,
        remask: bool,
        moves: Option<LinkMoves>,
        by_key: Option<Lent>,
    },
    /// Every instance's random streams continue in the sequence of
    /// `seed` (the link's seed, before the instance is mixed in;
    /// [`Pipe::reseed`]).
    Seed { link: u32, seed: u64 },
    /// A link deleted: every instance out of the set ([`PipeSet::remove_link`]).
    Remove { link: u32 },
    /// The link and delay ([`Pipe::reconfigure`]).
    Link { link: u32, config: Box<PipeConfig> },
    /// The queue configuration of ids `first..first + len`.
    Queue {
        link: u32,
        first: u32,
        len: u32,
        config: QueueConfig,
    },
    /// The scheduler's quantum of every instance of `link` (an fq_codel
    /// sched's `quantum`; the old one, to roll back; [`Pipe::set_quantum`]).
    Quantum { link: u32, bytes: u32, old: u32 },
    /// The scheduling parameters of ids `first..first + len` (and the old
    /// ones, to roll back).
    Flow {
        link: u32,
        first: u32,
        len: u32,
        params: FlowParams,
        old: FlowParams,
    },
}

/// What a new plan changes: the arbiter's part, whether the classifier is
/// rebuilt, and one log line per change.
#[derive(Debug, Default)]
pub struct Planned {
    /// Applied before the classifier changes: parameters, links added or
    /// rebuilt.
    pub ops: Vec<LiveOp>,
    /// Applied after the classifier changed (no new packet goes there):
    /// links deleted.
    pub removals: Vec<LiveOp>,
    pub classifier: bool,
    /// The routes once the change is applied, when links are added,
    /// rebuilt or deleted.
    pub routes: Option<PipeRoutes>,
    /// The reports' view of the links added or rebuilt.
    pub added: Vec<LinkInfo>,
    /// Links deleted.
    pub removed: Vec<u32>,
    pub log: Vec<String>,
}

/// What planning needs besides the two plans: the flow layouts of the
/// running classifier and of the new plan's, where the running links' ids
/// are, the set's size (reserve included) and the descriptors a new
/// pipe's scheduler holds.
pub struct Room<'a> {
    pub layout: &'a FlowLayout,
    pub new_layout: &'a FlowLayout,
    pub routes: &'a PipeRoutes,
    pub total: u32,
    pub capacity: usize,
}

/// Whether the change from `old` to `new` needs a new classifier: rules,
/// tables, the default action, links and flowsets added or deleted, or a
/// link rebuilt (parameters of running links do not).
pub fn changes_classifier(old: &Plan, new: &Plan) -> bool {
    pspat_config::diff(old, new).iter().any(|c| match c {
        Change::ChangeSched(_) | Change::ChangePipe(_) | Change::ChangeQueue(_) => {
            rebuilds(old, c).is_some()
        }
        Change::SetSeed(_) => false,
        _ => true,
    })
}

/// The links a change of a running sched, pipe or flowset rebuilds (a new
/// scheduler, delay line, parent or mask), and whether a mask changed.
fn rebuilds(old: &Plan, change: &Change) -> Option<(Vec<u32>, bool)> {
    match change {
        Change::ChangeSched(s) => match old.scheds.get(&s.number) {
            Some(o) if s.mask != o.mask => Some((vec![s.number], true)),
            Some(o)
                if s.alg != o.alg
                    || s.link.reorder != o.link.reorder
                    || (s.alg == AlgKind::Wf2qPlus && s.link.bw_bps != o.link.bw_bps)
                    || fq_built(s) != fq_built(o) =>
            {
                Some((vec![s.number], false))
            }
            Some(o) if fq_pie_built(s) != fq_pie_built(o) => Some((vec![s.number], false)),
            _ => None,
        },
        Change::ChangePipe(p) => match old.pipes.get(&p.number) {
            Some(o) if p.mask != o.mask => Some((vec![p.number], true)),
            // A pipe's type as a sched's: a new scheduler, or new flows of
            // an fq_codel or fq_pie pipe, rebuild its link.
            Some(o)
                if p.link.reorder != o.link.reorder
                    || p.alg != o.alg
                    || (p.alg == AlgKind::Wf2qPlus && p.link.bw_bps != o.link.bw_bps)
                    || p.fq_codel.map(|f| f.flows) != o.fq_codel.map(|f| f.flows)
                    || p.fq_pie.map(|f| f.flows) != o.fq_pie.map(|f| f.flows) =>
            {
                Some((vec![p.number], false))
            }
            _ => None,
        },
        Change::ChangeQueue(q) => match old.queues.get(&q.number) {
            Some(o) if o.parent != q.parent => {
                Some((vec![o.parent.number(), q.parent.number()], q.mask != o.mask))
            }
            Some(o) if o.mask != q.mask => Some((vec![q.parent.number()], true)),
            _ => None,
        },
        _ => None,
    }
}

/// What an fq_codel sched's pipes are built with and cannot change while
/// they run: the flowsets' cap of dynamic queues (their flow ids). `None`
/// for other scheds. Its `limit` (each pipe's held limit) changes with
/// [`Pipe::reconfigure`], its CoDel with its flowsets' queues
/// ([`Pipe::set_queue`]), its quantum with [`LiveOp::Quantum`].
fn fq_built(s: &pspat_config::SchedPlan) -> Option<u32> {
    s.fq_codel.map(|f| f.flows)
}

/// What an fq_pie sched's pipes are built with, as [`fq_built`] says of
/// an fq_codel sched's: its flows rebuild the link; its `limit`, its PIE
/// and its quantum change in place.
fn fq_pie_built(s: &pspat_config::SchedPlan) -> Option<u32> {
    s.fq_pie.map(|f| f.flows)
}

/// The `type` words of a sched for a log line: `type fq_codel ...` or
/// `type fq_pie ...` with its parameters, or `type NAME`.
fn type_text(s: &pspat_config::SchedPlan) -> String {
    type_words(s.alg, s.fq_codel.as_ref(), s.fq_pie.as_ref())
}

/// The `type` words of a sched or pipe (see [`type_text`]).
fn type_words(
    alg: AlgKind,
    fq_codel: Option<&pspat_config::FqCodel>,
    fq_pie: Option<&pspat_config::FqPie>,
) -> String {
    match (fq_codel, fq_pie) {
        (Some(f), _) => format!("type {}", pspat_config::fq_codel_words(f)),
        (None, Some(f)) => format!("type {}", pspat_config::fq_pie_words(f)),
        (None, None) => format!("type {alg}"),
    }
}

/// The refusal of a link that does not fit in the reserve of flow ids.
pub fn reserve_exhausted(what: &str, need: u64, free: u64) -> String {
    format!(
        "{what} needs {need} flow ids and {free} of the spare ones are free (in one piece); restart pspat run with a larger --spare-flows"
    )
}

/// Whether a link's ids are the same in two layouts (its flows' parameters
/// may differ: a weight changed live).
pub fn same_link_ids(x: &LinkLayout, y: &LinkLayout) -> bool {
    (x.number, x.kind, x.alg, x.instances) == (y.number, y.kind, y.alg, y.instances)
        && x.ranges.len() == y.ranges.len()
        && x.ranges.iter().zip(&y.ranges).all(|(r, t)| {
            (r.owner, r.first, r.dynamic, r.overflow) == (t.owner, t.first, t.dynamic, t.overflow)
        })
}

/// The refusal of a change that needs a restart.
pub fn needs_restart(what: &str) -> String {
    format!("{what} cannot change while pspat run is running (docs/RUN.md, What can change live); change the file and restart it")
}

fn bw_text(bps: u64) -> String {
    if bps == 0 {
        "unlimited".into()
    } else {
        crate::units::human_rate(bps as f64)
    }
}

/// Describes a link's parameters for a log line.
fn link_text(l: &pspat_config::LinkPlan) -> String {
    let mut s = format!(
        "bw {} delay {}",
        bw_text(l.bw_bps),
        pspat_config::units::format_time_us(l.delay_us)
    );
    s.push_str(&link_extras(l));
    s
}

/// A link's parameters beyond its rate and delay, each after a space, as
/// ipfw words (`burst`, the framing, jitter, reordering, slots, a profile); empty
/// when it has none.
pub fn link_extras(l: &pspat_config::LinkPlan) -> String {
    let mut s = String::new();
    if l.burst_bytes > 0 {
        s.push_str(&format!(" burst {} B", l.burst_bytes));
    }
    if l.packet_overhead != 0 {
        s.push_str(&format!(" packetoverhead {}", l.packet_overhead));
    }
    if l.cell_size > 0 {
        s.push_str(&format!(
            " cellsize {} celloverhead {}",
            l.cell_size, l.cell_overhead
        ));
    }
    if l.jitter_us > 0 {
        s.push_str(&format!(
            " jitter {}",
            pspat_config::units::format_time_us(l.jitter_us)
        ));
        if l.distribution != pspat_config::Distribution::Uniform {
            s.push_str(&format!(" distribution {}", l.distribution.name()));
        }
        if l.jitter_correlation > 0.0 {
            s.push_str(&format!(" correlation {}", l.jitter_correlation));
        }
    }
    if let Some(p) = l.reorder_probability {
        s.push_str(&format!(" reorder {p}"));
        if l.reorder_correlation > 0.0 {
            s.push_str(&format!(" {}", l.reorder_correlation));
        }
        if l.reorder_gap > 1 {
            s.push_str(&format!(" gap {}", l.reorder_gap));
        }
    } else if l.reorder {
        s.push_str(" reorder");
    }
    if let Some(slot) = &l.slot {
        s.push(' ');
        s.push_str(&pspat_config::slot_words(slot));
    }
    if l.profile.is_some() {
        s.push_str(" profile");
    }
    s
}

fn queue_text(q: &pspat_config::QueueSetPlan) -> String {
    let limit = match q.limit {
        pspat_config::QueueLimit::Slots(n) => format!("{n} slots"),
        pspat_config::QueueLimit::Bytes(b) => format!("{b} B"),
    };
    format!("queue {limit} plr {}{}", q.plr, queue_extras(q))
}

/// A queue's filters and impairments beyond its limit and `plr`, each
/// after a space, as ipfw words; empty when it has none.
pub fn queue_extras(q: &pspat_config::QueueSetPlan) -> String {
    let mut s = String::new();
    if let Some(r) = &q.red {
        s.push_str(&format!(
            " {} {}/{}/{}/{}",
            if r.gentle { "gred" } else { "red" },
            r.w_q,
            r.min_th,
            r.max_th,
            r.max_p
        ));
        if q.ecn {
            s.push_str(" ecn");
        }
    }
    if let Some(c) = q.codel {
        s.push(' ');
        s.push_str(&pspat_config::codel_words(c));
    }
    if let Some(p) = &q.pie {
        s.push(' ');
        s.push_str(&pspat_config::pie_words(p));
    }
    if let Some(g) = &q.gemodel {
        s.push_str(&format!(
            " gemodel {} {} {} {}",
            g.p, g.r, g.one_minus_h, g.one_minus_k
        ));
    }
    if let Some(l) = &q.lossstate {
        s.push_str(&format!(
            " lossstate {} {} {} {} {}",
            l.p13, l.p31, l.p32, l.p23, l.p14
        ));
    }
    if q.lossecn {
        s.push_str(" lossecn");
    }
    for (word, p, c) in [
        ("duplicate", q.duplicate, q.duplicate_correlation),
        ("corrupt", q.corrupt, q.corrupt_correlation),
    ] {
        if p > 0.0 {
            s.push_str(&format!(" {word} {p}"));
            if c > 0.0 {
                s.push_str(&format!(" {c}"));
            }
        }
    }
    s
}

/// The ids `owner` holds on its link.
fn range(layout: &FlowLayout, owner: FlowOwner) -> Result<(u32, u32, u32), String> {
    layout
        .range_of(owner)
        .map(|(link, r)| (link, r.first.0, r.len()))
        .ok_or_else(|| format!("run: no flow ids for {owner:?} (internal)"))
}

/// Plans the change from `old` to `new` (module docs for what is
/// refused and how links are added, rebuilt and deleted).
///
/// # Errors
/// The first change that cannot be made live, one line naming it.
pub fn plan_change(old: &Plan, new: &Plan, room: &Room<'_>) -> Result<Planned, String> {
    let layout = room.layout;
    let mut out = Planned::default();
    let changes = pspat_config::diff(old, new);
    // Links before and after; a link whose flowsets change is rebuilt.
    let had = |n: u32| layout.link(n).is_some();
    let has = |n: u32| room.new_layout.link(n).is_some();
    let mut touched = BTreeSet::new();
    // Links whose instances or dynamic queues change with a mask.
    let mut remasked = BTreeSet::new();
    for change in &changes {
        if let Some((links, mask)) = rebuilds(old, change) {
            for n in links {
                touched.insert(n);
                if mask {
                    remasked.insert(n);
                }
            }
            continue;
        }
        match change {
            Change::AddSched(s) => touched.insert(s.number),
            Change::AddPipe(p) => touched.insert(p.number),
            Change::RemoveSched(n) | Change::RemovePipe(n) => touched.insert(*n),
            Change::AddQueue(q) => touched.insert(q.parent.number()),
            Change::RemoveQueue(n) => match old.queues.get(n) {
                Some(q) => touched.insert(q.parent.number()),
                None => false,
            },
            _ => false,
        };
    }
    let added: Vec<u32> = touched
        .iter()
        .copied()
        .filter(|&n| !had(n) && has(n))
        .collect();
    let rebuilt: Vec<u32> = touched
        .iter()
        .copied()
        .filter(|&n| had(n) && has(n))
        .collect();
    let removed: Vec<u32> = touched
        .iter()
        .copied()
        .filter(|&n| had(n) && !has(n))
        .collect();
    let fresh = |n: u32| added.contains(&n) || rebuilt.contains(&n);
    for change in changes {
        match change {
            Change::AddSched(s) => {
                out.log
                    .push(format!("sched {} added: {}", s.number, link_text(&s.link)));
            }
            Change::AddPipe(p) => {
                out.log
                    .push(format!("pipe {} added: {}", p.number, link_text(&p.link)));
            }
            Change::AddQueue(q) => out.log.push(format!(
                "queue {} added to {}",
                q.number,
                parent_text(q.parent)
            )),
            Change::RemoveSched(n) => out.log.push(format!("sched {n} deleted")),
            Change::RemovePipe(n) => out.log.push(format!("pipe {n} deleted")),
            Change::RemoveQueue(n) => out.log.push(format!("queue {n} deleted")),
            Change::ChangeSched(s) if s.mask != old.scheds[&s.number].mask => {
                out.log.push(format!(
                    "sched {}: new mask, {} {} (its instances and dynamic queues are carried over)",
                    s.number,
                    type_text(&s),
                    link_text(&s.link)
                ));
            }
            Change::ChangePipe(p) if p.mask != old.pipes[&p.number].mask => {
                out.log.push(format!(
                    "pipe {}: new mask, {} (its instances are carried over)",
                    p.number,
                    link_text(&p.link)
                ));
            }
            Change::ChangeQueue(q)
                if q.mask != old.queues[&q.number].mask
                    && q.parent == old.queues[&q.number].parent =>
            {
                out.log.push(format!(
                    "queue {}: new mask, weight {} lmax {} pri {} {} (its dynamic queues are carried over)",
                    q.number,
                    q.weight,
                    q.lmax,
                    q.pri,
                    queue_text(&q.queue)
                ));
            }
            Change::ChangeSched(s) if fresh(s.number) => {
                out.log.push(format!(
                    "sched {}: {} {}",
                    s.number,
                    type_text(&s),
                    link_text(&s.link)
                ));
            }
            Change::ChangePipe(p) if fresh(p.number) => {
                let words = match (p.alg, &p.fq_codel, &p.fq_pie) {
                    (AlgKind::Fifo, None, None) => String::new(),
                    _ => type_words(p.alg, p.fq_codel.as_ref(), p.fq_pie.as_ref()) + " ",
                };
                out.log
                    .push(format!("pipe {}: {words}{}", p.number, link_text(&p.link)));
            }
            Change::ChangeQueue(q) if q.parent != old.queues[&q.number].parent => {
                out.log.push(format!(
                    "queue {} moved from {} to {} (its packets in {} are dropped as flow_removed)",
                    q.number,
                    parent_text(old.queues[&q.number].parent),
                    parent_text(q.parent),
                    parent_text(old.queues[&q.number].parent),
                ));
            }
            Change::ChangeQueue(q) if fresh(q.parent.number()) => {
                out.log.push(format!(
                    "queue {}: weight {} lmax {} pri {} {}",
                    q.number,
                    q.weight,
                    q.lmax,
                    q.pri,
                    queue_text(&q.queue)
                ));
            }
            Change::ChangeSched(s) => {
                let o = &old.scheds[&s.number];
                let what = format!("sched {}", s.number);
                // An fq_codel or fq_pie sched's limit is its pipes' held
                // limit: set as the link is (its CoDel or PIE goes with
                // the flowsets' queues, its quantum with the pipes' FQ,
                // its flows rebuild the link).
                let limit = |p: &pspat_config::SchedPlan| {
                    p.fq_codel.map(|f| f.limit).or(p.fq_pie.map(|f| f.limit))
                };
                if s.link != o.link || limit(&s) != limit(o) {
                    let config = sched_config(&s, new.seed).map_err(|e| format!("{what}: {e}"))?;
                    config.validate().map_err(|e| format!("{what}: {e}"))?;
                    out.ops.push(LiveOp::Link {
                        link: s.number,
                        config: Box::new(config),
                    });
                    out.log.push(format!("{what}: {}", link_text(&s.link)));
                }
                let quantum = |p: &pspat_config::SchedPlan| {
                    p.fq_codel
                        .map(|f| f.quantum)
                        .or(p.fq_pie.map(|f| f.quantum))
                };
                if let (Some(bytes), Some(old)) = (quantum(&s), quantum(o)) {
                    if bytes != old {
                        out.ops.push(LiveOp::Quantum {
                            link: s.number,
                            bytes,
                            old,
                        });
                    }
                }
                if s.fq_codel != o.fq_codel || s.fq_pie != o.fq_pie {
                    out.log.push(format!("{what}: {}", type_text(&s)));
                }
            }
            Change::ChangePipe(p) => {
                let o = &old.pipes[&p.number];
                let what = format!("pipe {}", p.number);
                let config = pipe_config(&p, new.seed).map_err(|e| format!("{what}: {e}"))?;
                config.validate().map_err(|e| format!("{what}: {e}"))?;
                // An fq_codel or fq_pie pipe's limit, quantum and AQM as a
                // sched's (the `ChangeSched` arm above).
                let limit = |p: &pspat_config::PipePlan| {
                    p.fq_codel.map(|f| f.limit).or(p.fq_pie.map(|f| f.limit))
                };
                if p.link != o.link || limit(&p) != limit(o) {
                    out.ops.push(LiveOp::Link {
                        link: p.number,
                        config: Box::new(config.clone()),
                    });
                    out.log.push(format!("{what}: {}", link_text(&p.link)));
                }
                let quantum = |p: &pspat_config::PipePlan| {
                    p.fq_codel
                        .map(|f| f.quantum)
                        .or(p.fq_pie.map(|f| f.quantum))
                };
                if let (Some(bytes), Some(old)) = (quantum(&p), quantum(o)) {
                    if bytes != old {
                        out.ops.push(LiveOp::Quantum {
                            link: p.number,
                            bytes,
                            old,
                        });
                    }
                }
                if p.fq_codel != o.fq_codel || p.fq_pie != o.fq_pie {
                    let words = type_words(p.alg, p.fq_codel.as_ref(), p.fq_pie.as_ref());
                    out.log.push(format!("{what}: {words}"));
                }
                if p.queue != o.queue {
                    let (link, first, len) = range(layout, FlowOwner::Pipe(p.number))?;
                    out.ops.push(LiveOp::Queue {
                        link,
                        first,
                        len,
                        config: config.queue,
                    });
                    out.log.push(format!("{what}: {}", queue_text(&p.queue)));
                }
            }
            Change::ChangeQueue(q) => {
                let o = &old.queues[&q.number];
                let what = format!("queue {}", q.number);
                let (link, first, len) = range(layout, FlowOwner::Queue(q.number))?;
                let params = FlowParams {
                    weight: q.weight,
                    lmax: q.lmax,
                    priority: q.pri,
                };
                let was = FlowParams {
                    weight: o.weight,
                    lmax: o.lmax,
                    priority: o.pri,
                };
                if params != was {
                    out.ops.push(LiveOp::Flow {
                        link,
                        first,
                        len,
                        params,
                        old: was,
                    });
                    out.log.push(format!(
                        "{what}: weight {} lmax {} pri {}",
                        q.weight, q.lmax, q.pri
                    ));
                }
                if q.queue != o.queue {
                    let config = queue_config(&q.queue);
                    config.validate().map_err(|e| format!("{what}: {e}"))?;
                    out.ops.push(LiveOp::Queue {
                        link,
                        first,
                        len,
                        config,
                    });
                    out.log.push(format!("{what}: {}", queue_text(&q.queue)));
                }
            }
            Change::SetTableEntry {
                table,
                prefix,
                value,
            } => {
                out.classifier = true;
                out.log.push(format!("table {table}: {prefix} = {value}"));
            }
            Change::RemoveTableEntry { table, prefix } => {
                out.classifier = true;
                out.log.push(format!("table {table}: {prefix} removed"));
            }
            Change::AddRule(r) => {
                out.classifier = true;
                out.log.push(format!("rule {} added", r.number));
            }
            Change::ChangeRule(r) => {
                out.classifier = true;
                out.log.push(format!("rule {} changed", r.number));
            }
            Change::RemoveRule(n) => {
                out.classifier = true;
                out.log.push(format!("rule {n} removed"));
            }
            Change::SetDefaultAction(a) => {
                out.classifier = true;
                out.log
                    .push(format!("default {}", format!("{a:?}").to_lowercase()));
            }
            Change::SetSeed(seed) => {
                // Links built by this change take the new seed already.
                for l in &layout.links {
                    if fresh(l.number) || !has(l.number) {
                        continue;
                    }
                    out.ops.push(LiveOp::Seed {
                        link: l.number,
                        seed: pspat_config::pipe_seed(seed, l.number),
                    });
                }
                out.log.push(format!(
                    "seed {seed}: every pipe's random streams continue from their positions in the new seed's sequence"
                ));
            }
            other => return Err(format!("{other:?}: not supported by pspat run")),
        }
    }
    // Every other link keeps its ids (the classifier's verdicts name them).
    for l in &room.new_layout.links {
        if fresh(l.number) {
            continue;
        }
        match layout.link(l.number) {
            Some(o) if same_link_ids(o, l) => {}
            _ => {
                return Err(needs_restart(&format!(
                    "the flow ids of link {} (its flowsets or masks)",
                    l.number
                )))
            }
        }
    }
    if touched.is_empty() {
        return Ok(out);
    }
    out.classifier = true;
    let mut routes = room.routes.clone();
    let mut taken: Vec<(u32, u32)> = Vec::new();
    for l in room.new_layout.links.iter().filter(|l| fresh(l.number)) {
        let kind = if new.pipes.contains_key(&l.number) {
            "pipe"
        } else {
            "sched"
        };
        let what = format!("{kind} {}", l.number);
        let lb = super::build_link(new, l, room.capacity)
            .map_err(|e| {
                let e = format!("{e:#}");
                // Some of build_link's messages name the link already.
                if e.starts_with(&what) {
                    e
                } else {
                    format!("{what}: {e}")
                }
            })?
            .ok_or_else(|| format!("{what}: not in the plan (internal)"))?;
        let mut members = Vec::with_capacity(lb.pipes.len());
        for (instance, pipe) in lb.pipes {
            let Some(base) = room.routes.free_base(room.total, lb.flows, &taken) else {
                let used = room.routes.used() + taken.iter().map(|t| u64::from(t.1)).sum::<u64>();
                return Err(reserve_exhausted(
                    &what,
                    u64::from(lb.flows) * u64::from(l.instances),
                    u64::from(room.total).saturating_sub(used),
                ));
            };
            taken.push((base, lb.flows));
            members.push(NewMember {
                instance,
                base,
                flows: lb.flows,
                pipe: Box::new(pipe),
            });
        }
        let replace = rebuilt.contains(&l.number);
        let mut remap = Vec::new();
        if replace {
            routes.remove_link(l.number);
            if let Some(o) = layout.link(l.number) {
                remap = id_remap(o, l);
            }
            out.log.push(format!(
                "{what} rebuilt (the packets it holds go on in the new one)"
            ));
        }
        for m in &members {
            routes.insert(l.number, m.instance, m.base, m.flows);
        }
        out.ops.push(LiveOp::Install {
            link: l.number,
            members,
            replace,
            remap,
            remask: replace && remasked.contains(&l.number),
            moves: None,
            by_key: None,
        });
        out.added.push(lb.info);
    }
    for &n in &removed {
        routes.remove_link(n);
        out.removals.push(LiveOp::Remove { link: n });
        out.removed.push(n);
    }
    out.routes = Some(routes);
    Ok(out)
}

/// Where each id of a link's old layout is in its new one: the same
/// owner's id at the same offset, none when the owner is gone or its
/// range changed size.
fn id_remap(old: &LinkLayout, new: &LinkLayout) -> Vec<Option<u32>> {
    let mut out = vec![None; old.flow_count() as usize];
    for r in &old.ranges {
        let Some(n) = new.ranges.iter().find(|n| n.owner == r.owner) else {
            continue;
        };
        if n.len() != r.len() {
            continue;
        }
        for i in 0..r.len() {
            if let Some(slot) = out.get_mut((r.first.0 + i) as usize) {
                *slot = Some(n.first.0 + i);
            }
        }
    }
    out
}

fn parent_text(p: pspat_config::Parent) -> String {
    match p {
        pspat_config::Parent::Pipe(n) => format!("pipe {n}"),
        pspat_config::Parent::Sched(n) => format!("sched {n}"),
    }
}

/// Gives each install of a link whose masks changed the moves `carry`
/// found for it; true when some install needs them.
pub fn fill_moves(ops: &mut [LiveOp], carry: &CarryOver) -> bool {
    let mut any = false;
    for op in ops {
        if let LiveOp::Install {
            link,
            remask: true,
            moves,
            ..
        } = op
        {
            *moves = carry.link(*link).cloned();
            any = true;
        }
    }
    any
}

/// Lends `lent` to each install of a link whose masks changed, so that the
/// arbiter places each held packet by its own key.
pub fn lend(ops: &mut [LiveOp], lent: &Lent) {
    for op in ops {
        if let LiveOp::Install {
            remask: true,
            by_key,
            ..
        } = op
        {
            *by_key = Some(lent.clone());
        }
    }
}

/// The new classifier, lent by the control side to the arbiter while the
/// control side holds the running classifier's lock (the RX threads wait):
/// the arbiter places each packet a rebuilt link holds by its own key
/// ([`pspat_classify::Classifier::place_carried`], which takes the new
/// keys' entries in it), and the control side takes it back
/// ([`Lent::take_back`]) before it replaces the running one.
#[derive(Clone, Debug)]
pub struct Lent(Arc<Mutex<Classifier>>);

/// The same loan.
impl PartialEq for Lent {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Lent {
    /// Lends `classifier`.
    pub fn new(classifier: Classifier) -> Self {
        Lent(Arc::new(Mutex::new(classifier)))
    }

    /// The classifier back, with the entries the arbiter added (a copy
    /// should a batch still hold the loan, which an answered batch does
    /// not).
    pub fn take_back(self) -> Classifier {
        match Arc::try_unwrap(self.0) {
            Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()),
            Err(a) => match a.lock() {
                Ok(c) => c.clone(),
                Err(p) => p.into_inner().clone(),
            },
        }
    }
}

/// Whether some install of `ops` moves packets between instances or
/// dynamic queues (a mask changed): its moves come from the classifiers.
pub fn remasks(ops: &[LiveOp]) -> bool {
    ops.iter()
        .any(|op| matches!(op, LiveOp::Install { remask: true, .. }))
}

/// The arbiter's inbox of planned changes (module docs).
#[derive(Debug, Default)]
pub struct Inbox {
    /// Some batch waits. Stored with Release after the batch is pushed
    /// (pairs with the arbiter's Acquire load in [`Inbox::take`]); the
    /// mutex orders the batch itself, the flag only spares the arbiter a
    /// lock per call.
    pending: AtomicBool,
    batches: Mutex<Vec<(u64, Vec<LiveOp>)>>,
    answers: Mutex<Vec<(u64, Result<(), String>)>>,
    answered: Condvar,
    next_id: AtomicU64,
    /// The arbiters to wake after a batch is pushed.
    arbiters: Arbiters,
}

/// The arbiters a request wakes, set once the bridge runs (none before:
/// tests step the arbiter's side themselves).
#[derive(Debug, Default)]
pub struct Arbiters(OnceLock<Vec<pspat::ArbiterWaker>>);

impl Arbiters {
    /// Sets them; the first call counts, later ones are ignored.
    pub fn set(&self, wakers: Vec<pspat::ArbiterWaker>) {
        let _ = self.0.set(wakers);
    }

    /// Wakes every arbiter. Call it after publishing the request: the
    /// wake-up's unpark pairs with the arbiter's park, so the round it
    /// wakes for sees what was written before.
    pub fn wake(&self) {
        for w in self.0.get().into_iter().flatten() {
            w.wake();
        }
    }
}

impl Inbox {
    /// Hands `ops` to the arbiter and waits up to `timeout` for its answer.
    /// A batch the arbiter did not take in time is withdrawn (never
    /// applied later).
    ///
    /// # Errors
    /// The arbiter refused the batch (nothing applied), or it did not take
    /// it in time.
    pub fn submit(&self, ops: Vec<LiveOp>, timeout: Duration) -> Result<(), String> {
        // Relaxed: only uniqueness matters.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.batches
            .lock()
            .map_err(|_| "run: the inbox is poisoned")?
            .push((id, ops));
        // Release: pairs with the Acquire load in `take`.
        self.pending.store(true, Ordering::Release);
        // After the store, so the round it wakes for sees the flag.
        self.arbiters.wake();
        let deadline = Instant::now() + timeout;
        let mut answers = self.answers.lock().map_err(|_| "run: poisoned")?;
        loop {
            if let Some(i) = answers.iter().position(|a| a.0 == id) {
                return answers.swap_remove(i).1;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(answers);
                let mut batches = self.batches.lock().map_err(|_| "run: poisoned")?;
                if let Some(i) = batches.iter().position(|b| b.0 == id) {
                    batches.remove(i);
                    return Err(format!(
                        "run: the arbiter did not take the change within {} ms; nothing changed",
                        timeout.as_millis()
                    ));
                }
                // Taken: the answer comes right after.
                drop(batches);
                answers = self.answers.lock().map_err(|_| "run: poisoned")?;
                let (a, _) = self
                    .answered
                    .wait_timeout(answers, Duration::from_secs(5))
                    .map_err(|_| "run: poisoned")?;
                answers = a;
                if let Some(i) = answers.iter().position(|a| a.0 == id) {
                    return answers.swap_remove(i).1;
                }
                return Err("run: the arbiter took the change and did not answer".into());
            }
            let (a, _) = self
                .answered
                .wait_timeout(answers, left)
                .map_err(|_| "run: poisoned")?;
            answers = a;
        }
    }

    /// The arbiters [`Inbox::submit`] wakes from now on; the first call
    /// sets them, later ones are ignored.
    pub fn wake_on_submit(&self, wakers: Vec<pspat::ArbiterWaker>) {
        self.arbiters.set(wakers);
    }

    /// Whether a batch waits (tests).
    #[cfg(test)]
    pub fn is_pending(&self) -> bool {
        // Acquire: pairs with the Release store in `submit`.
        self.pending.load(Ordering::Acquire)
    }

    /// The arbiter: the waiting batches, if any. One Acquire load when
    /// there are none.
    pub fn take(&self) -> Vec<(u64, Vec<LiveOp>)> {
        // Acquire: pairs with the Release store in `submit`.
        if !self.pending.load(Ordering::Acquire) {
            return Vec::new();
        }
        // Cleared before the batches are taken: a batch pushed after this
        // sets the flag again and is taken on a later call.
        self.pending.store(false, Ordering::Relaxed);
        match self.batches.lock() {
            Ok(mut b) => std::mem::take(&mut *b),
            Err(_) => Vec::new(),
        }
    }

    /// The arbiter: the outcome of batch `id`.
    pub fn answer(&self, id: u64, result: Result<(), String>) {
        if let Ok(mut a) = self.answers.lock() {
            a.push((id, result));
        }
        self.answered.notify_all();
    }
}

/// [`apply_keyed`] with no key for any packet (tests).
#[cfg(test)]
pub fn apply(
    set: &mut PipeSet<AnyScheduler>,
    now: pspat_sched::Instant,
    ops: Vec<LiveOp>,
    gone: &mut Vec<Gone>,
) -> Result<(), String> {
    apply_keyed(set, now, ops, gone, &mut |_| None)
}

/// Applies `ops` at `now` to every instance of the links they name: the
/// links to install are checked first (their keys and ids free), then
/// flow parameters (rolled back if one is refused), then queues and links
/// (checked by [`plan_change`], they cannot fail but for a bug, reported),
/// then links removed and installed; the final counters of every member
/// taken out go to `gone`.
///
/// `key_of(token)` gives the key of a held packet (its frame's headers
/// parsed again) for the installs that place packets by key (`by_key`).
/// A packet whose key cannot be had (it should not happen) goes with its
/// old queue, as without `by_key`: counted and reported in one warning per
/// link.
///
/// # Errors
/// The first refusal; with an install or flow parameters refused nothing
/// stays changed.
pub fn apply_keyed(
    set: &mut PipeSet<AnyScheduler>,
    now: pspat_sched::Instant,
    ops: Vec<LiveOp>,
    gone: &mut Vec<Gone>,
    key_of: &mut dyn FnMut(u64) -> Option<PacketKey>,
) -> Result<(), String> {
    let instances = |set: &PipeSet<AnyScheduler>, link: u32| -> Vec<u32> {
        set.members()
            .filter(|m| m.0 == link)
            .map(|m| m.1)
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .collect()
    };
    let mut taken: Vec<(u32, u32)> = Vec::new();
    for op in &ops {
        if let LiveOp::Install {
            link,
            members,
            replace,
            ..
        } = op
        {
            for m in members {
                set.check_install(
                    *link,
                    m.instance,
                    m.base,
                    m.flows,
                    replace.then_some(*link),
                    &taken,
                )
                .map_err(|e| format!("link {link}: {e}"))?;
                taken.push((m.base, m.flows));
            }
        }
    }
    // The fallible scheduler changes first, undone in reverse if one
    // fails: a flow's parameters, or a quantum (by instance).
    enum Done {
        Flow(u32, u32, u32, FlowParams),
        Quantum(u32, u32, u32),
    }
    let mut done: Vec<Done> = Vec::new();
    let mut failure = None;
    'flows: for op in &ops {
        match op {
            LiveOp::Flow {
                link,
                first,
                len,
                params,
                old,
            } => {
                for inst in instances(set, *link) {
                    let Some(pipe) = set.pipe_mut(*link, inst) else {
                        continue;
                    };
                    for id in *first..first + len {
                        if let Err(e) = pipe.change_flow(FlowId(id), *params) {
                            failure = Some(format!("link {link}: flow {id}: {e}"));
                            break 'flows;
                        }
                        done.push(Done::Flow(*link, inst, id, *old));
                    }
                }
            }
            LiveOp::Quantum { link, bytes, old } => {
                for inst in instances(set, *link) {
                    let Some(pipe) = set.pipe_mut(*link, inst) else {
                        continue;
                    };
                    if let Err(e) = pipe.set_quantum(*bytes) {
                        failure = Some(format!("link {link}: {e}"));
                        break 'flows;
                    }
                    done.push(Done::Quantum(*link, inst, *old));
                }
            }
            _ => {}
        }
    }
    if let Some(f) = failure {
        for d in done.into_iter().rev() {
            match d {
                Done::Flow(link, inst, id, old) => {
                    if let Some(pipe) = set.pipe_mut(link, inst) {
                        let _ = pipe.change_flow(FlowId(id), old);
                    }
                }
                Done::Quantum(link, inst, old) => {
                    if let Some(pipe) = set.pipe_mut(link, inst) {
                        let _ = pipe.set_quantum(old);
                    }
                }
            }
        }
        return Err(f);
    }
    for op in ops {
        match op {
            LiveOp::Flow { .. } | LiveOp::Quantum { .. } => {}
            LiveOp::Queue {
                link,
                first,
                len,
                config,
            } => {
                for inst in instances(set, link) {
                    if let Some(pipe) = set.pipe_mut(link, inst) {
                        for id in first..first + len {
                            pipe.set_queue_at(now, FlowId(id), config)
                                .map_err(|e| format!("link {link}: queue {id}: {e}"))?;
                        }
                    }
                }
            }
            LiveOp::Link { link, config } => {
                for inst in instances(set, link) {
                    if let Some(pipe) = set.pipe_mut(link, inst) {
                        pipe.reconfigure(now, &config)
                            .map_err(|e| format!("link {link}: {e}"))?;
                    }
                }
            }
            LiveOp::Install {
                link,
                members,
                replace: false,
                ..
            } => {
                for m in members {
                    set.install(link, m.instance, m.base, *m.pipe, m.flows)
                        .map_err(|e| format!("link {link}: {e}"))?;
                }
            }
            LiveOp::Install {
                link,
                members,
                replace: true,
                remap,
                moves,
                by_key,
                ..
            } => {
                let new = members
                    .into_iter()
                    .map(|m| (m.instance, m.base, *m.pipe, m.flows))
                    .collect();
                let to = |f: FlowId| remap.get(f.index()).copied().flatten().map(FlowId);
                let lent = by_key.as_ref().map(|l| l.0.lock());
                let replaced = match (&moves, lent) {
                    (Some(m), Some(Ok(mut c))) => {
                        let (mut keyed, mut unkeyed) = (0u64, 0u64);
                        let r = set.replace_link_splitting(
                            link,
                            now,
                            new,
                            &|i, f| m.get(i, f),
                            &mut |i, f, p| match key_of(p.token) {
                                Some(k) => {
                                    keyed += 1;
                                    c.place_carried(m, f, &k)
                                }
                                None => {
                                    unkeyed += 1;
                                    m.get(i, f)
                                }
                            },
                        );
                        if unkeyed > 0 {
                            tracing::warn!(
                                target: "pspat::run",
                                "link {link}: {unkeyed} held packet(s) whose frame could not be read again went with their old queue ({keyed} placed by their own key)"
                            );
                        }
                        r
                    }
                    (Some(m), lent) => {
                        if matches!(lent, Some(Err(_))) {
                            tracing::warn!(
                                target: "pspat::run",
                                "link {link}: the new classifier is poisoned; held packets go with their old queues"
                            );
                        }
                        set.replace_link_moving(link, now, new, &|i, f| m.get(i, f))
                    }
                    (None, _) => set.replace_link(link, now, new, &to),
                };
                for (_, counters) in replaced.map_err(|e| format!("link {link}: {e}"))? {
                    gone.push(Gone {
                        link,
                        counters,
                        removed: false,
                    });
                }
            }
            LiveOp::Seed { link, seed } => {
                for inst in instances(set, link) {
                    if let Some(pipe) = set.pipe_mut(link, inst) {
                        pipe.reseed(super::instance_seed(seed, inst));
                    }
                }
            }
            LiveOp::Remove { link } => {
                for (_, counters) in set.remove_link(link, now) {
                    gone.push(Gone {
                        link,
                        counters,
                        removed: true,
                    });
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod words_tests {
    use super::{link_extras, queue_extras};
    use crate::run::test_plan as plan;

    #[test]
    fn the_settings_words_give_slots_and_both_loss_models_with_their_values() {
        let p = plan(
            "pipe 1 config delay 5ms slot 2ms 4ms packets 16 gemodel 0.01 0.3 1 0\n\
             pipe 2 config slot distribution normal 3ms 500us lossstate 0.02\n\
             pipe 4 config delay 10ms jitter 2ms distribution pareto correlation 25%\n",
        );
        let (one, two) = (&p.pipes[&1], &p.pipes[&2]);
        assert_eq!(link_extras(&one.link), " slot 2ms 4ms packets 16");
        assert_eq!(queue_extras(&one.queue), " gemodel 0.01 0.3 1 0");
        assert_eq!(
            link_extras(&two.link),
            " slot distribution normal 3ms 500us"
        );
        assert_eq!(queue_extras(&two.queue), " lossstate 0.02 0.98 0 1 0");
        assert_eq!(
            link_extras(&p.pipes[&4].link),
            " jitter 2ms distribution pareto correlation 0.25"
        );
        // `slot 0` leaves no slots to show.
        assert_eq!(
            link_extras(&plan("pipe 3 config slot 0").pipes[&3].link),
            ""
        );
        // `ecn` right after the RED it changes.
        assert_eq!(
            queue_extras(&plan("pipe 5 config queue 100 gred 0.002/30/80/0.1 ecn").pipes[&5].queue),
            " gred 0.002/30/80/0.1 ecn"
        );
        // `lossecn` after the loss models it changes.
        assert_eq!(
            queue_extras(&plan("pipe 6 config plr 0.1 gemodel 0.01 lossecn").pipes[&6].queue),
            " gemodel 0.01 0.99 1 0 lossecn"
        );
        // CoDel with both its times, the defaults filled in.
        assert_eq!(
            queue_extras(&plan("pipe 7 config codel interval 50ms ecn").pipes[&7].queue),
            " codel target 5ms interval 50ms ecn"
        );
    }
}
