//! Several dummynet pipes behind one [`Scheduler`], so one arbiter hosts a
//! whole configuration: one [`PipeScheduler`] per link (dummynet's pipe or
//! sched number) and per scheduler instance, each with its own rate, delay
//! line and queues.
//!
//! # Flow ids
//! Member `m` owns the global flow ids `base(m) .. base(m) + flows(m)`:
//! global id = the member's base + the member's own (per-link) flow id.
//! [`PipeSet::push`] gives the ids in the order the members are added,
//! without gaps; [`PipeSet::reserve`] then adds free ids at the end, which
//! [`PipeSet::install`] gives to a member added while the set runs and
//! [`PipeSet::remove_link`] frees again (a freed range may be reused);
//! [`PipeSet::replace_link`] moves a link to other free ids, its packets
//! handed over to the new pipes ([`Pipe::hand_over`]), and
//! [`PipeSet::replace_link_moving`] also moves packets between instances
//! (a mask changed), queue by queue, and [`PipeSet::replace_link_splitting`]
//! packet by packet (a finer mask splits an old queue by each packet's
//! own key).
//! [`PipeSet::global`] and [`PipeRoutes::global`] make the global id from
//! `(link, instance, flow)`; the set translates back on every call and
//! hands every packet out (or back, refused) with its global id. A free id
//! is refused like an unknown one, but for the ids of a member replaced by
//! `replace_link`: until they are taken again, a packet sent there (it was
//! routed before the replacement) goes to the member that replaced it, its
//! flow translated, and comes out with that member's global id.
//!
//! # Members added and removed while packets flow
//! Both are control-path calls between two scheduler calls (they allocate).
//! An installed member starts empty. A removed member's packets are all
//! accounted for: those already due (released, not yet dequeued) are still
//! handed out by `dequeue`; everything else it held is handed to
//! `take_late_drops` with [`DropReason::FlowRemoved`] ([`Pipe::purge`]),
//! and `queued()` counts both until they are taken.
//!
//! # Guarantees
//! * **Each pipe keeps its own timing.** A member sees exactly the calls a
//!   lone [`PipeScheduler`] would see for its packets (its enqueues, and
//!   dequeues at the same `now`), so its exit times are those of the pipe
//!   alone: other members change nothing but the order in which packets
//!   due at the same `now` are handed out.
//! * **Due packets only.** `dequeue(now)` hands out a packet whose exit time
//!   is at or before `now`, visiting the members round-robin from the one
//!   after the last that gave a packet, so no member's due packets wait
//!   behind another's.
//! * `next_eligible` is the earliest over the members; `take_late_drops`
//!   collects from every member.
//! * **Conservation.** `queued()` is the sum over the members, each of
//!   which conserves (`accepted = dequeued + dropped late + queued`), so the
//!   set does too. A packet whose flow id belongs to no member is refused
//!   with [`DropReason::UnknownFlow`].
//!
//! # Complexity
//! `enqueue`, `flow_queued` and the flow lifecycle: O(log M) to find the
//! member (M members) plus the member's cost; `queued`: O(1) (a running
//! sum). `dequeue`, `next_eligible` and `take_late_drops`: O(M) plus the
//! member's cost; the set is meant for the
//! handful to a few hundred links and instances of a dummynet
//! configuration. `install`, `replace_link` and `remove_link`: O(M) plus
//! what the old members held (and one call of the split function per held
//! packet). No allocation on the packet path; those
//! three allocate.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::filter::FilterState;
use super::handover::Continuation;
use super::handover::Moved;
use super::{AqmState, FlowCounters, Pipe, PipeCounters, PipeScheduler};
use crate::{
    ConfigError, DropReason, FlowError, FlowId, FlowParams, FlowTable, Instant, Packet, Rejected,
    Scheduler,
};

/// Where one held packet goes in [`PipeSet::replace_link_splitting`]:
/// `(old instance, old flow, packet)` → `(new instance, new flow)`.
pub type PacketMoves<'a> = dyn FnMut(u32, FlowId, &Packet) -> Option<(u32, FlowId)> + 'a;

/// A packet handed over: its new instance, the packet, and the heir
/// `(instance, flow)` of the queue it left.
type Handed = (u32, Moved, Option<(u32, u32)>);

/// One pipe of a [`PipeSet`] and where its ids start.
#[derive(Debug)]
struct Member<S> {
    pipe: PipeScheduler<S>,
    link: u32,
    instance: u32,
    base: u32,
    flows: u32,
}

/// Where each `(link, instance)` of a [`PipeSet`] has its ids: a small
/// cloneable table for the threads that classify (they name a link,
/// instance and per-link flow; the arbiter wants a global id).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PipeRoutes {
    /// `(link, instance, base, flows)`, sorted by `(link, instance)`.
    entries: Vec<(u32, u32, u32, u32)>,
}

impl PipeRoutes {
    /// The global id of `flow` on `(link, instance)`, `None` when the set
    /// has no such member or the flow is beyond its flows. O(log M).
    pub fn global(&self, link: u32, instance: u32, flow: FlowId) -> Option<FlowId> {
        let i = self
            .entries
            .binary_search_by(|e| (e.0, e.1).cmp(&(link, instance)))
            .ok()?;
        let (_, _, base, flows) = self.entries[i];
        (flow.0 < flows).then(|| FlowId(base + flow.0))
    }

    /// `(link, instance, first global id, flows)` of every member, sorted by
    /// link and instance.
    pub fn entries(&self) -> &[(u32, u32, u32, u32)] {
        &self.entries
    }

    /// Adds (or replaces) the entry of `(link, instance)`, as
    /// [`PipeSet::install`] does to the set.
    pub fn insert(&mut self, link: u32, instance: u32, base: u32, flows: u32) {
        match self
            .entries
            .binary_search_by(|e| (e.0, e.1).cmp(&(link, instance)))
        {
            Ok(i) => self.entries[i] = (link, instance, base, flows),
            Err(i) => self.entries.insert(i, (link, instance, base, flows)),
        }
    }

    /// Removes every instance of `link`, as [`PipeSet::remove_link`] does.
    pub fn remove_link(&mut self, link: u32) {
        self.entries.retain(|e| e.0 != link);
    }

    /// The first base at which `flows` ids below `total` are used by no
    /// entry and by none of `taken` (`(base, flows)` ranges), first fit.
    pub fn free_base(&self, total: u32, flows: u32, taken: &[(u32, u32)]) -> Option<u32> {
        let mut used: Vec<(u32, u32)> = self
            .entries
            .iter()
            .map(|e| (e.2, e.3))
            .chain(taken.iter().copied())
            .collect();
        used.sort_unstable();
        let mut at = 0u32;
        for (base, len) in used {
            if base >= at && base - at >= flows {
                break;
            }
            at = at.max(base.saturating_add(len));
        }
        (u64::from(at) + u64::from(flows) <= u64::from(total)).then_some(at)
    }

    /// Ids used by the entries.
    pub fn used(&self) -> u64 {
        self.entries.iter().map(|e| u64::from(e.3)).sum()
    }
}

/// Several pipes, one arbiter (module docs).
#[derive(Debug)]
pub struct PipeSet<S> {
    members: Vec<Member<S>>,
    /// Base of each member, increasing (for the binary search).
    bases: Vec<u32>,
    total: u32,
    /// The member `dequeue` tries first.
    turn: usize,
    /// Σ members' `queued()` + `handover` + `purged`, kept by every call
    /// that changes one.
    queued: usize,
    /// Due packets of removed members, handed out first by `dequeue`.
    handover: VecDeque<Packet>,
    /// Packets of removed members, handed to `take_late_drops`.
    purged: VecDeque<Rejected>,
    /// The ids of replaced members, still accepted for their heirs.
    aliases: Vec<Alias>,
}

/// The ids `base..base + remap.len()` of a member replaced by
/// [`PipeSet::replace_link`]: a packet sent there (classified before the
/// replacement) goes to the heir instance of `link` and the flow `remap`
/// gives it (packed: instance in the high half, flow in the low one,
/// [`NO_HEIR`] for none).
#[derive(Debug)]
struct Alias {
    base: u32,
    link: u32,
    remap: Vec<u64>,
}

/// An alias entry with no heir.
const NO_HEIR: u64 = u64::MAX;

impl<S: Scheduler> Default for PipeSet<S> {
    fn default() -> Self {
        PipeSet::new()
    }
}

impl<S: Scheduler> PipeSet<S> {
    /// An empty set.
    pub fn new() -> Self {
        PipeSet {
            members: Vec::new(),
            bases: Vec::new(),
            total: 0,
            turn: 0,
            queued: 0,
            handover: VecDeque::new(),
            purged: VecDeque::new(),
            aliases: Vec::new(),
        }
    }

    /// Adds `spare` free ids at the end, for members installed later
    /// ([`PipeSet::install`]); [`PipeSet::flows`] counts them. Call it
    /// after the last [`PipeSet::push`] (a push takes the ids after the
    /// reserve).
    ///
    /// # Errors
    /// A total beyond [`FlowTable::MAX_FLOWS`]; nothing changes then.
    pub fn reserve(&mut self, spare: u32) -> Result<(), ConfigError> {
        let total = u64::from(self.total) + u64::from(spare);
        ConfigError::check_range("pipe set flows", total as usize, 1..=FlowTable::MAX_FLOWS)?;
        self.total = total as u32;
        Ok(())
    }

    /// Whether `pipe` could be installed as `(link, instance)` at `base`
    /// ([`PipeSet::install`]), ignoring the members of `replacing` (a link
    /// removed first) and the ranges `taken` (other installs of the same
    /// change).
    ///
    /// # Errors
    /// The key is in use, the range is used or beyond [`PipeSet::flows`].
    pub fn check_install(
        &self,
        link: u32,
        instance: u32,
        base: u32,
        flows: u32,
        replacing: Option<u32>,
        taken: &[(u32, u32)],
    ) -> Result<(), ConfigError> {
        let what = || format!("pipe set link {link} instance {instance}");
        let kept = |m: &&Member<S>| Some(m.link) != replacing;
        if self
            .members
            .iter()
            .filter(kept)
            .any(|m| m.link == link && m.instance == instance)
        {
            return Err(ConfigError::Invalid {
                what: what(),
                reason: "already present".into(),
            });
        }
        let end = u64::from(base) + u64::from(flows);
        let overlaps =
            |b: u32, f: u32| u64::from(b) < end && u64::from(base) < u64::from(b) + u64::from(f);
        if flows == 0
            || end > u64::from(self.total)
            || self.members.iter().any(|m| overlaps(m.base, m.flows))
            || taken.iter().any(|&(b, f)| overlaps(b, f))
        {
            return Err(ConfigError::Invalid {
                what: what(),
                reason: format!(
                    "ids {base}..{end} are not free among the set's {} ids",
                    self.total
                ),
            });
        }
        Ok(())
    }

    /// Installs `pipe` as `(link, instance)` with the global ids
    /// `base..base + flows`, taken from the free ids ([`PipeSet::reserve`],
    /// or those of a removed member); returns its member index. Control
    /// path (allocates).
    ///
    /// # Errors
    /// As [`PipeSet::check_install`] (nothing replaced), or `flows` not the
    /// pipe's count; nothing changes then.
    pub fn install(
        &mut self,
        link: u32,
        instance: u32,
        base: u32,
        pipe: Pipe<S>,
        flows: u32,
    ) -> Result<usize, ConfigError> {
        self.check_install(link, instance, base, flows, None, &[])?;
        if !Self::owns(&pipe, flows) {
            return Err(ConfigError::Invalid {
                what: format!("pipe set link {link} instance {instance}"),
                reason: format!("{flows} flows is not the pipe's flow count"),
            });
        }
        self.forget_aliases(base, flows);
        let i = self.bases.partition_point(|&b| b < base);
        self.members.insert(
            i,
            Member {
                pipe: PipeScheduler::new(pipe),
                link,
                instance,
                base,
                flows,
            },
        );
        self.bases.insert(i, base);
        if self.turn > i {
            self.turn += 1;
        }
        Ok(i)
    }

    /// Removes every instance of `link` at `now` (a pipe or sched deleted
    /// while it runs; module docs for its packets); returns each removed
    /// instance's final counters (`in = out + dropped`). Their ids become
    /// free. Control path.
    pub fn remove_link(&mut self, link: u32, now: Instant) -> Vec<(u32, PipeCounters)> {
        self.aliases.retain(|a| a.link != link);
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.members.len() {
            if self.members[i].link != link {
                i += 1;
                continue;
            }
            let mut m = self.members.remove(i);
            self.bases.remove(i);
            if self.turn > i {
                self.turn -= 1;
            }
            let base = m.base;
            let (handover, purged) = (&mut self.handover, &mut self.purged);
            let left = m.pipe.retire(
                now,
                &mut |mut p: Packet| {
                    p.flow = FlowId(p.flow.0 + base);
                    handover.push_back(p);
                },
                &mut |r: Rejected| purged.push_back(with_base(r, base)),
            );
            // What the member held moved to the two queues, but for what
            // it could not give up, which is gone with it.
            self.queued -= left as usize;
            out.push((m.instance, *m.pipe.pipe().counters()));
        }
        if self.turn >= self.members.len() {
            self.turn = 0;
        }
        out
    }

    /// Replaces every instance of `link` at `now` by the pipes of `new`
    /// (`(instance, base, pipe, flows)`, ids checked as by
    /// [`PipeSet::check_install`]), handing each old instance's packets to
    /// the new instance of the same number ([`Pipe::hand_over`]) with their
    /// flows as `remap` gives them: due packets are still handed out, the
    /// others go on in the new pipe; those with no place there (no such
    /// instance, `remap` refuses the flow, or the new pipe refuses them)
    /// are handed to `take_late_drops` with [`DropReason::FlowRemoved`].
    /// A queue's RED average, Gilbert-Elliott and 4-state loss state go on in the queue
    /// that continues it, when that queue continues only it and both
    /// pipes keep such state (queues merged by a coarser mask start
    /// afresh); so do its CoDel and PIE states, under the same AQM, where
    /// moreover its queued packets all go to that queue and no other
    /// queue's join them (a split queue starts afresh too), and its queued
    /// packets keep their enqueue times ([`Pipe::adopt`]). Returns each old instance's final counters (moved packets
    /// are out of its `in` and in the new pipe's). Control path.
    ///
    /// # Errors
    /// A new pipe's key or ids not free, or `flows` not its count; nothing
    /// changes then.
    pub fn replace_link(
        &mut self,
        link: u32,
        now: Instant,
        new: Vec<(u32, u32, Pipe<S>, u32)>,
        remap: &dyn Fn(FlowId) -> Option<FlowId>,
    ) -> Result<Vec<(u32, PipeCounters)>, ConfigError> {
        self.replace_link_moving(link, now, new, &|instance, f| {
            remap(f).map(|g| (instance, g))
        })
    }

    /// [`PipeSet::replace_link`] where a packet may also change instance
    /// (a mask of the link changed): `moves(old instance, old flow)` gives
    /// its new instance and flow. Each old queue's packets go, in the old
    /// scheduler's service order, to the queue `moves` gives; packets in
    /// flight from several old instances that meet in one new instance
    /// enter its delay line in exit order (each keeps its exit time), and
    /// a new instance's link starts when the last of the old instances
    /// that fed it is free. A flow whose packets are all in one old queue
    /// keeps its order. Old ids stay accepted for their heirs as in
    /// [`PipeSet::replace_link`]. Control path.
    ///
    /// # Errors
    /// As [`PipeSet::replace_link`]; nothing changes then.
    pub fn replace_link_moving(
        &mut self,
        link: u32,
        now: Instant,
        new: Vec<(u32, u32, Pipe<S>, u32)>,
        moves: &dyn Fn(u32, FlowId) -> Option<(u32, FlowId)>,
    ) -> Result<Vec<(u32, PipeCounters)>, ConfigError> {
        self.replace_link_splitting(link, now, new, moves, &mut |i, f, _| moves(i, f))
    }

    /// [`PipeSet::replace_link_moving`] where each held packet goes where
    /// `split(old instance, old flow, packet)` says (a finer mask: the
    /// packets of one old queue belong to several new keys, and each goes
    /// to the queue and instance of its own). `moves` still names each
    /// old queue's heir: the queue that inherits its history (counters
    /// less the packets it held, which move with their bytes to wherever
    /// `split` sends them and are counted in there), its RED and
    /// Gilbert-Elliott state (but not its CoDel and PIE states when
    /// `split` sends some of its queued packets elsewhere: then the heir
    /// and the other queues start afresh), and the frames routed to its old id before
    /// the change. `split` is called once per held packet, in the order
    /// the old pipes give them up (instance by instance: in flight in
    /// exit order, then queued in service order), so each new queue gets
    /// its packets in the old service order restricted to it, and a flow
    /// whose packets all go to its own new queue keeps its order there.
    /// A packet `split` gives no place (or a place with no heir) is
    /// dropped as [`DropReason::FlowRemoved`]. Control path.
    ///
    /// # Errors
    /// As [`PipeSet::replace_link`]; nothing changes then (`split` is not
    /// called).
    pub fn replace_link_splitting(
        &mut self,
        link: u32,
        now: Instant,
        new: Vec<(u32, u32, Pipe<S>, u32)>,
        moves: &dyn Fn(u32, FlowId) -> Option<(u32, FlowId)>,
        split: &mut PacketMoves<'_>,
    ) -> Result<Vec<(u32, PipeCounters)>, ConfigError> {
        let mut taken = Vec::with_capacity(new.len());
        for (instance, base, pipe, flows) in &new {
            self.check_install(link, *instance, *base, *flows, Some(link), &taken)?;
            if !Self::owns(pipe, *flows) {
                return Err(ConfigError::Invalid {
                    what: format!("pipe set link {link} instance {instance}"),
                    reason: format!("{flows} flows is not the pipe's flow count"),
                });
            }
            taken.push((*base, *flows));
        }
        let mut old = Vec::new();
        let mut i = 0;
        while i < self.members.len() {
            if self.members[i].link == link {
                old.push(self.members.remove(i));
                self.bases.remove(i);
            } else {
                i += 1;
            }
        }
        // Older aliases of the link name members that are gone now.
        self.aliases.retain(|a| a.link != link);
        let mut heirs: Vec<(u32, u32)> = new.iter().map(|n| (n.0, n.3)).collect();
        heirs.sort_unstable();
        for (instance, base, pipe, flows) in new {
            self.forget_aliases(base, flows);
            let at = self.bases.partition_point(|&b| b < base);
            self.members.insert(
                at,
                Member {
                    pipe: PipeScheduler::new(pipe),
                    link,
                    instance,
                    base,
                    flows,
                },
            );
            self.bases.insert(at, base);
        }
        self.turn = 0;
        // Where a packet of (old instance, flow) goes, if its heir exists.
        let has_heir = |(i, g): &(u32, FlowId)| {
            heirs
                .binary_search_by_key(i, |h| h.0)
                .is_ok_and(|k| g.0 < heirs[k].1)
        };
        let place = |instance: u32, f: FlowId| moves(instance, f).filter(has_heir);
        let mut out = Vec::with_capacity(old.len());
        // RED, Gilbert-Elliott and 4-state states by heir (new instance, flow): the
        // state of the one old queue that continues there, and how many
        // old queues meet there (several: merged, the heir starts afresh).
        let mut carried: BTreeMap<(u32, u32), (u32, FilterState)> = BTreeMap::new();
        // The correlated chains' last answers by heir, likewise; their
        // count (every old queue with a heir) also says whether a heir
        // continues one old queue only, for the AQM states.
        let mut chains: BTreeMap<(u32, u32), (u32, u8)> = BTreeMap::new();
        // CoDel and PIE states by heir: the state of an old queue whose
        // heir is there (carried when it is the heir's only old queue and
        // neither was split: below).
        let mut aqm: BTreeMap<(u32, u32), AqmState> = BTreeMap::new();
        // Counters by heir: the sum of the old queues that meet there, less
        // the packets moved into it (its `adopt` counts them in again).
        let mut inherited: BTreeMap<(u32, u32), FlowCounters> = BTreeMap::new();
        // (new instance, packet, heir of its old queue) in hand-over
        // order; (new instance, free).
        let mut moved: Vec<Handed> = Vec::new();
        let mut frees: Vec<(u32, Instant)> = Vec::new();
        // The burst credit and running states (random streams, jitter
        // correlation, reorder count, slot) of each old instance, for its
        // namesake heir.
        let mut credits: Vec<(u32, u64, Continuation)> = Vec::new();
        for mut m in old {
            let instance = m.instance;
            let target = Cell::new(0u32);
            let history = Cell::new(None);
            let mut remap = |p: &Packet| {
                let to = split(instance, p.flow, p).filter(has_heir);
                if let Some((i, _)) = to {
                    target.set(i);
                }
                history.set(place(instance, p.flow).map(|(i, g)| (i, g.0)));
                to.map(|t| t.1)
            };
            let base = m.base;
            let (handover, purged) = (&mut self.handover, &mut self.purged);
            // Read before the hand-over, which empties the old queues,
            // and after the link ran up to `now` (as the hand-over runs it
            // first), which decided the packets it took meanwhile.
            m.pipe.pipe_mut().run_link_to(now);
            for f in 0..m.flows {
                let st = m.pipe.pipe().aqm_state_of(FlowId(f));
                if st.is_none() {
                    continue;
                }
                if let Some((i, g)) = place(instance, FlowId(f)) {
                    aqm.insert((i, g.0), st);
                }
            }
            for f in 0..m.flows {
                let Some(fs) = m.pipe.pipe().filter_state_of(FlowId(f)) else {
                    break;
                };
                if let Some((i, g)) = place(instance, FlowId(f)) {
                    let e = carried.entry((i, g.0)).or_insert((0, fs));
                    e.0 += 1;
                }
            }
            let first = moved.len();
            let (free, _left) = m.pipe.hand_over_each(
                now,
                &mut remap,
                &mut |mut p: Packet| {
                    p.flow = FlowId(p.flow.0 + base);
                    handover.push_back(p);
                },
                &mut |mv| moved.push((target.get(), mv, history.get())),
                &mut |r: Rejected| purged.push_back(with_base(r, base)),
            );
            // After the hand-over, which counted its drops in the queues
            // and moved the chains for the packets its link took first.
            for (f, c) in m.pipe.pipe().all_flow_counters().enumerate() {
                if let Some((i, g)) = place(instance, FlowId(f as u32)) {
                    let e = chains.entry((i, g.0)).or_insert((0, 0));
                    e.0 += 1;
                    e.1 = m.pipe.pipe().chains_of(FlowId(f as u32));
                    let e = inherited.entry((i, g.0)).or_default();
                    e.in_packets += c.in_packets;
                    e.in_bytes += c.in_bytes;
                    e.out_packets += c.out_packets;
                    e.out_bytes += c.out_bytes;
                    e.dropped_packets += c.dropped_packets;
                }
            }
            // Every heir this instance fed, and its namesake, start after it;
            // the namesake keeps what is left of its burst credit.
            if heirs.binary_search_by_key(&instance, |h| h.0).is_ok() {
                frees.push((instance, free));
                let p = m.pipe.pipe();
                credits.push((instance, p.burst_credit(), p.continuation()));
            }
            for (t, _, _) in &moved[first..] {
                if frees.last() != Some(&(*t, free)) {
                    frees.push((*t, free));
                }
            }
            self.aliases.push(Alias {
                base,
                link,
                remap: (0..m.flows)
                    .map(|f| {
                        place(instance, FlowId(f))
                            .map_or(NO_HEIR, |(i, g)| (u64::from(i) << 32) | u64::from(g.0))
                    })
                    .collect(),
            });
            out.push((instance, *m.pipe.pipe().counters()));
        }
        // Heirs whose AQM state starts afresh although one old queue names
        // them: a queued packet moved elsewhere than its old queue's heir
        // (the old queue split) or into a queue that is not its old
        // queue's heir (it takes in another queue's packets).
        let mut mixed: BTreeSet<(u32, u32)> = BTreeSet::new();
        for (t, mv, heir) in &moved {
            if let Moved::Queued { packet, .. } = mv {
                let to = (*t, packet.flow.0);
                if *heir != Some(to) {
                    mixed.insert(to);
                    mixed.extend(*heir);
                }
            }
        }
        // A moved packet leaves its old queue's history (it is counted in
        // again where it lands).
        for (_, mv, heir) in &moved {
            // A copy was never counted in.
            let (Moved::Queued { packet: p, .. } | Moved::InFlight { packet: p, .. }) = mv else {
                continue;
            };
            if let Some(c) = heir.and_then(|h| inherited.get_mut(&h)) {
                c.in_packets = c.in_packets.saturating_sub(1);
                c.in_bytes = c.in_bytes.saturating_sub(u64::from(p.len));
            }
        }
        // Into each heir: its link continues, then the packets in flight in
        // exit order, then the queued ones in hand-over order.
        moved.sort_by_key(|(t, mv, _)| {
            (
                *t,
                // A copy sorts with the packets in flight, right behind its
                // original (the sort is stable).
                match mv {
                    Moved::InFlight { .. } | Moved::Copy { .. } => 0u8,
                    Moved::Queued { .. } => 1,
                },
                match mv {
                    Moved::InFlight { exit, .. } | Moved::Copy { exit, .. } => *exit,
                    Moved::Queued { .. } => Instant::ZERO,
                },
            )
        });
        for (instance, _) in &heirs {
            let Some(n) = self
                .members
                .iter_mut()
                .find(|n| n.link == link && n.instance == *instance)
            else {
                continue;
            };
            let nbase = n.base;
            let pipe = n.pipe.pipe_mut();
            let namesake = credits.iter().find(|c| c.0 == *instance);
            if let Some((_, _, running)) = namesake {
                pipe.continue_from(running);
            }
            let credit = namesake.map_or(0, |c| c.1);
            for (_, free) in frees.iter().filter(|f| f.0 == *instance) {
                pipe.continue_link(*free, credit);
            }
            for (&(_, g), &(_, fs)) in carried
                .range((*instance, 0)..=(*instance, u32::MAX))
                .filter(|(_, (count, _))| *count == 1)
            {
                pipe.carry_filter_state(FlowId(g), fs);
            }
            for (&(_, g), &(_, last)) in chains
                .range((*instance, 0)..=(*instance, u32::MAX))
                .filter(|(_, (count, _))| *count == 1)
            {
                pipe.keep_chains(FlowId(g), last);
            }
            for (&key, &st) in aqm.range((*instance, 0)..=(*instance, u32::MAX)) {
                let alone = chains.get(&key).is_some_and(|c| c.0 == 1);
                if alone && !mixed.contains(&key) {
                    pipe.carry_aqm_state(FlowId(key.1), st);
                }
            }
            for (&(_, g), c) in inherited.range((*instance, 0)..=(*instance, u32::MAX)) {
                pipe.carry_flow_counters(FlowId(g), c);
            }
            let from = moved.partition_point(|(t, _, _)| t < instance);
            let to = moved.partition_point(|(t, _, _)| t <= instance);
            for (_, mv, _) in &moved[from..to] {
                if let Err(r) = pipe.adopt(now, *mv) {
                    self.purged.push_back(with_base(r, nbase));
                }
            }
        }
        // What an old pipe could not give up is gone with it.
        self.queued = self.members.iter().map(|m| m.pipe.queued()).sum::<usize>()
            + self.handover.len()
            + self.purged.len();
        Ok(out)
    }

    /// Drops the aliases that overlap `base..base + flows` (taken again).
    fn forget_aliases(&mut self, base: u32, flows: u32) {
        let end = u64::from(base) + u64::from(flows);
        self.aliases.retain(|a| {
            u64::from(a.base) + a.remap.len() as u64 <= u64::from(base) || u64::from(a.base) >= end
        });
    }

    /// The member and flow an alias gives `flow`, if any. O(aliases + M).
    fn alias(&self, flow: FlowId) -> Option<(usize, FlowId)> {
        let a = self
            .aliases
            .iter()
            .find(|a| flow.0 >= a.base && u64::from(flow.0 - a.base) < a.remap.len() as u64)?;
        let packed = a.remap[(flow.0 - a.base) as usize];
        if packed == NO_HEIR {
            return None;
        }
        let (instance, local) = ((packed >> 32) as u32, packed as u32);
        let i = self
            .members
            .iter()
            .position(|m| m.link == a.link && m.instance == instance)?;
        (local < self.members[i].flows).then_some((i, FlowId(local)))
    }

    fn owns(pipe: &Pipe<S>, flows: u32) -> bool {
        flows > 0
            && pipe.queue_len(FlowId(flows - 1)).is_some()
            && pipe.queue_len(FlowId(flows)).is_none()
    }

    /// Adds `pipe` as `(link, instance)`, whose flow ids are `0..flows`
    /// (the `flows` it was built with); returns its member index. Its
    /// global ids start at the set's [`PipeSet::flows`] before the call.
    ///
    /// # Errors
    /// `(link, instance)` already present, `flows` not the pipe's own
    /// count, or a total beyond [`FlowTable::MAX_FLOWS`].
    pub fn push(
        &mut self,
        link: u32,
        instance: u32,
        pipe: Pipe<S>,
        flows: u32,
    ) -> Result<usize, ConfigError> {
        if self
            .members
            .iter()
            .any(|m| m.link == link && m.instance == instance)
        {
            return Err(ConfigError::Invalid {
                what: format!("pipe set link {link} instance {instance}"),
                reason: "already present".into(),
            });
        }
        // The pipe knows its flows only through its queue table.
        if !Self::owns(&pipe, flows) {
            return Err(ConfigError::Invalid {
                what: format!("pipe set link {link} instance {instance}"),
                reason: format!("{flows} flows is not the pipe's flow count"),
            });
        }
        let total = u64::from(self.total) + u64::from(flows);
        ConfigError::check_range("pipe set flows", total as usize, 1..=FlowTable::MAX_FLOWS)?;
        self.members.push(Member {
            pipe: PipeScheduler::new(pipe),
            link,
            instance,
            base: self.total,
            flows,
        });
        self.bases.push(self.total);
        self.total = total as u32;
        Ok(self.members.len() - 1)
    }

    /// Flow ids over all members.
    pub fn flows(&self) -> u32 {
        self.total
    }

    /// Members (pipes).
    pub fn pipe_count(&self) -> usize {
        self.members.len()
    }

    /// The global id of `flow` on `(link, instance)` (O(M); threads that
    /// classify use a [`PipeRoutes`]).
    pub fn global(&self, link: u32, instance: u32, flow: FlowId) -> Option<FlowId> {
        self.members
            .iter()
            .find(|m| m.link == link && m.instance == instance && flow.0 < m.flows)
            .map(|m| FlowId(m.base + flow.0))
    }

    /// The `(link, instance)` of the member holding global id `flow`, and
    /// the flow's id in it (a per-queue view or a per-pipe histogram keyed
    /// by the packets the set hands out). O(log M).
    pub fn member_of(&self, flow: FlowId) -> Option<(u32, u32, FlowId)> {
        let (i, local) = self.locate(flow)?;
        let m = &self.members[i];
        Some((m.link, m.instance, local))
    }

    /// The routing table of the members.
    pub fn routes(&self) -> PipeRoutes {
        let mut entries: Vec<_> = self
            .members
            .iter()
            .map(|m| (m.link, m.instance, m.base, m.flows))
            .collect();
        entries.sort_unstable();
        PipeRoutes { entries }
    }

    /// Every member: `(link, instance, first global id, pipe)`, in the
    /// order added.
    pub fn members(&self) -> impl Iterator<Item = (u32, u32, u32, &PipeScheduler<S>)> + '_ {
        self.members
            .iter()
            .map(|m| (m.link, m.instance, m.base, &m.pipe))
    }

    /// The pipe of `(link, instance)`, to change it while it runs
    /// ([`Pipe::reconfigure`], [`Pipe::set_queue`], [`Pipe::change_flow`]);
    /// `None` when the set has no such member. None of those changes what a
    /// pipe holds, so the set's running count stays exact. O(M).
    pub fn pipe_mut(&mut self, link: u32, instance: u32) -> Option<&mut Pipe<S>> {
        self.members
            .iter_mut()
            .find(|m| m.link == link && m.instance == instance)
            .map(|m| m.pipe.pipe_mut())
    }

    /// The member holding global id `flow`, and the flow's id in it.
    fn locate(&self, flow: FlowId) -> Option<(usize, FlowId)> {
        if flow.0 >= self.total {
            return None;
        }
        let i = self
            .bases
            .partition_point(|&b| b <= flow.0)
            .checked_sub(1)?;
        let local = flow.0 - self.members[i].base;
        (local < self.members[i].flows).then_some((i, FlowId(local)))
    }

    fn check(&self, flow: FlowId) -> Result<(usize, FlowId), FlowError> {
        self.locate(flow).ok_or(FlowError::OutOfCapacity {
            flow: flow.0,
            capacity: self.total as usize,
        })
    }
}

fn with_base(mut r: Rejected, base: u32) -> Rejected {
    r.packet.flow = FlowId(r.packet.flow.0 + base);
    r
}

impl<S: Scheduler> Scheduler for PipeSet<S> {
    fn enqueue(&mut self, now: Instant, pkt: Packet) -> Result<(), Rejected> {
        let Some((i, local)) = self.locate(pkt.flow).or_else(|| self.alias(pkt.flow)) else {
            return Err(Rejected {
                packet: pkt,
                reason: DropReason::UnknownFlow,
            });
        };
        let m = &mut self.members[i];
        m.pipe
            .enqueue(now, Packet { flow: local, ..pkt })
            .map_err(|r| with_base(r, m.base))?;
        self.queued += 1;
        Ok(())
    }

    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        if let Some(p) = self.handover.pop_front() {
            self.queued -= 1;
            return Some(p);
        }
        let n = self.members.len();
        for k in 0..n {
            let i = (self.turn + k) % n;
            let m = &mut self.members[i];
            // Only members with something due at `now` are asked.
            if m.pipe.next_eligible(now).is_none_or(|t| t > now) {
                continue;
            }
            if let Some(mut p) = m.pipe.dequeue(now) {
                p.flow = FlowId(p.flow.0 + m.base);
                self.turn = (i + 1) % n;
                self.queued -= 1;
                return Some(p);
            }
        }
        None
    }

    fn queued(&self) -> usize {
        debug_assert_eq!(
            self.queued,
            self.members.iter().map(|m| m.pipe.queued()).sum::<usize>()
                + self.handover.len()
                + self.purged.len()
        );
        self.queued
    }

    fn next_eligible(&self, now: Instant) -> Option<Instant> {
        if !self.handover.is_empty() || !self.purged.is_empty() {
            return Some(now);
        }
        self.members
            .iter()
            .filter_map(|m| m.pipe.next_eligible(now))
            .min()
    }

    fn name(&self) -> &'static str {
        "pipe-set"
    }

    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        let (i, local) = self.check(flow)?;
        self.members[i].pipe.add_flow(local, params)
    }

    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        let (i, local) = self.check(flow)?;
        self.members[i].pipe.change_flow(local, params)
    }

    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        let (i, local) = self.check(flow)?;
        let m = &mut self.members[i];
        let base = m.base;
        let mut purged = 0;
        let r = m.pipe.remove_flow(local, &mut |r: Rejected| {
            purged += 1;
            purge(with_base(r, base));
        });
        self.queued -= purged;
        r
    }

    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        let (i, local) = self.locate(flow)?;
        self.members[i].pipe.flow_queued(local)
    }

    fn take_late_drops(&mut self, out: &mut dyn FnMut(Rejected)) {
        let mut taken = 0;
        while let Some(r) = self.purged.pop_front() {
            taken += 1;
            out(r);
        }
        for m in &mut self.members {
            let base = m.base;
            m.pipe.take_late_drops(&mut |r: Rejected| {
                taken += 1;
                out(with_base(r, base));
            });
        }
        self.queued -= taken;
    }

    /// True: each pipe's delay line counts from the enqueue time.
    fn counts_from_arrival(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipe::{DelayProfile, PipeConfig, QueueConfig};
    use crate::rate::Rate;
    use crate::{AlgKind, AnyScheduler, SchedulerConfig};

    fn pipe(bw_bps: Option<u64>, delay_ns: u64, flows: usize) -> Pipe<AnyScheduler> {
        let cfg = PipeConfig {
            bw: bw_bps.map(|b| Rate::checked("bw", b).unwrap()),
            delay_ns,
            ..PipeConfig::default()
        };
        let sched = SchedulerConfig::new(AlgKind::Fifo)
            .build(FlowTable::uniform(flows).unwrap())
            .unwrap();
        Pipe::new(cfg, sched, flows).unwrap()
    }

    /// Drives the set as an arbiter would: dequeue everything due at `now`,
    /// take the late drops, then jump to `next_eligible`. Returns
    /// `(exit time, packet)` and the late drops.
    fn drain(
        set: &mut PipeSet<AnyScheduler>,
        mut now: Instant,
    ) -> (Vec<(u64, Packet)>, Vec<Rejected>) {
        let mut out = Vec::new();
        let mut late = Vec::new();
        for _ in 0..100_000 {
            while let Some(p) = set.dequeue(now) {
                out.push((now.as_nanos(), p));
            }
            set.take_late_drops(&mut |r| late.push(r));
            match set.next_eligible(now) {
                Some(t) if t > now => now = t,
                Some(_) => {}
                None => break,
            }
        }
        (out, late)
    }

    #[test]
    fn two_pipes_keep_their_own_timing() {
        let mut set = PipeSet::new();
        // Pipe 1: 8 Mbit/s (1 µs per byte), 20 ms. Pipe 2: 80 Mbit/s, 5 ms.
        set.push(1, 0, pipe(Some(8_000_000), 20_000_000, 1), 1)
            .unwrap();
        set.push(2, 0, pipe(Some(80_000_000), 5_000_000, 2), 2)
            .unwrap();
        assert_eq!(set.flows(), 3);
        let a = set.global(1, 0, FlowId(0)).unwrap();
        let b = set.global(2, 0, FlowId(1)).unwrap();
        assert_eq!((a, b), (FlowId(0), FlowId(2)));
        assert_eq!(set.routes().global(2, 0, FlowId(1)), Some(b));
        assert_eq!(set.routes().global(2, 0, FlowId(2)), None);
        for i in 0..3 {
            set.enqueue(Instant::ZERO, Packet::new(a, 1000, i)).unwrap();
            set.enqueue(Instant::ZERO, Packet::new(b, 1000, 10 + i))
                .unwrap();
        }
        assert_eq!(set.queued(), 6);
        let (out, late) = drain(&mut set, Instant::ZERO);
        assert!(late.is_empty());
        let times = |flow: FlowId| -> Vec<u64> {
            out.iter()
                .filter(|(_, p)| p.flow == flow)
                .map(|(t, _)| *t)
                .collect()
        };
        // 1000 B take 1 ms on pipe 1, 100 µs on pipe 2.
        assert_eq!(times(a), [21_000_000, 22_000_000, 23_000_000]);
        assert_eq!(times(b), [5_100_000, 5_200_000, 5_300_000]);
        assert_eq!(set.queued(), 0);
        assert_eq!(set.next_eligible(Instant::ZERO), None);
    }

    #[test]
    fn conservation_and_refusals_carry_global_ids() {
        let mut set = PipeSet::new();
        set.push(1, 0, pipe(Some(8_000_000), 0, 1), 1).unwrap();
        // A pipe that loses everything after its link (late drops).
        let lossy = Pipe::new(
            PipeConfig {
                profile: Some(DelayProfile::new(vec![1_000, 2_000], 0.0).unwrap()),
                ..PipeConfig::default()
            },
            SchedulerConfig::new(AlgKind::Fifo)
                .build(FlowTable::uniform(1).unwrap())
                .unwrap(),
            1,
        )
        .unwrap();
        set.push(7, 0, lossy, 1).unwrap();
        assert!(set.push(7, 0, pipe(None, 0, 1), 1).is_err(), "duplicate");
        assert!(set.push(8, 0, pipe(None, 0, 2), 1).is_err(), "wrong flows");
        let mut accepted = 0u64;
        let mut refused = 0u64;
        for i in 0..120u64 {
            let p = Packet::new(FlowId((i % 3) as u32), 500, i);
            match set.enqueue(Instant::ZERO, p) {
                Ok(()) => accepted += 1,
                Err(r) => {
                    // The default queue limit is 50 slots; id 2 is unknown.
                    assert_eq!(r.packet, p, "refused with its global id");
                    refused += 1;
                }
            }
        }
        assert_eq!(accepted + refused, 120);
        let (out, late) = drain(&mut set, Instant::ZERO);
        assert!(!late.is_empty() && !out.is_empty());
        assert!(late
            .iter()
            .all(|r| r.packet.flow == FlowId(1) && r.reason == DropReason::ProfileLoss));
        assert!(out.iter().all(|(_, p)| p.flow == FlowId(0)));
        assert_eq!(out.len() as u64 + late.len() as u64, accepted);
        assert_eq!(set.queued(), 0);
        assert_eq!(set.flow_queued(FlowId(2)), None);
    }

    #[test]
    fn due_packets_of_every_pipe_are_served_in_turn() {
        let mut set = PipeSet::new();
        set.push(1, 0, pipe(None, 1_000, 1), 1).unwrap();
        set.push(1, 1, pipe(None, 1_000, 1), 1).unwrap();
        for i in 0..4 {
            set.enqueue(Instant::ZERO, Packet::new(FlowId(0), 100, i))
                .unwrap();
            set.enqueue(Instant::ZERO, Packet::new(FlowId(1), 100, 10 + i))
                .unwrap();
        }
        let now = Instant::from_nanos(1_000);
        let flows: Vec<u32> = std::iter::from_fn(|| set.dequeue(now))
            .map(|p| p.flow.0)
            .collect();
        assert_eq!(flows, [0, 1, 0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn removing_a_flow_purges_it_with_its_global_id() {
        let mut set = PipeSet::new();
        set.push(1, 0, pipe(None, 0, 1), 1).unwrap();
        let drr = SchedulerConfig::new(AlgKind::Drr)
            .build(FlowTable::uniform(2).unwrap())
            .unwrap();
        let cfg = PipeConfig {
            bw: Some(Rate::checked("bw", 8_000_000).unwrap()),
            ..PipeConfig::default()
        };
        set.push(2, 0, Pipe::new(cfg, drr, 2).unwrap(), 2).unwrap();
        for i in 0..5 {
            set.enqueue(Instant::ZERO, Packet::new(FlowId(2), 1000, i))
                .unwrap();
        }
        set.enqueue(Instant::ZERO, Packet::new(FlowId(1), 1000, 9))
            .unwrap();
        assert_eq!(set.queued(), 6);
        let mut purged = Vec::new();
        set.remove_flow(FlowId(2), &mut |r| purged.push(r)).unwrap();
        // The first packet is already on the link; the other four are purged.
        assert_eq!(purged.len(), 4);
        assert!(purged
            .iter()
            .all(|r| r.packet.flow == FlowId(2) && r.reason == DropReason::FlowRemoved));
        assert_eq!(set.queued(), 2);
        assert!(set.remove_flow(FlowId(3), &mut |_| {}).is_err());
        let (out, _) = drain(&mut set, Instant::ZERO);
        assert_eq!(out.len(), 2);
        assert_eq!(set.queued(), 0);
    }

    #[test]
    fn a_member_installed_and_removed_while_packets_flow_keeps_every_packet() {
        let mut set = PipeSet::new();
        set.push(1, 0, pipe(Some(8_000_000), 0, 1), 1).unwrap();
        set.reserve(4).unwrap();
        assert_eq!(set.flows(), 5);
        let mut routes = set.routes();
        // Two ids for link 2: the first free ones after pipe 1's.
        let base = routes.free_base(set.flows(), 2, &[]).unwrap();
        assert_eq!(base, 1);
        assert!(
            set.check_install(1, 0, base, 2, None, &[]).is_err(),
            "link 1 instance 0 is taken"
        );
        assert!(
            set.check_install(2, 0, 4, 2, None, &[]).is_err(),
            "beyond the reserve"
        );
        // 8 Mbit/s: 1000 B take 1 ms; 10 ms of delay.
        set.install(2, 0, base, pipe(Some(8_000_000), 10_000_000, 2), 2)
            .unwrap();
        routes.insert(2, 0, base, 2);
        assert_eq!(routes, set.routes());
        let two = set.global(2, 0, FlowId(1)).unwrap();
        assert_eq!(two, FlowId(2));
        let mut accepted = 0;
        for i in 0..5 {
            set.enqueue(Instant::ZERO, Packet::new(FlowId(0), 1000, i))
                .unwrap();
            set.enqueue(Instant::ZERO, Packet::new(two, 1000, 10 + i))
                .unwrap();
            accepted += 2;
        }
        // At 11.5 ms: pipe 2's first packet is due, the second on its way
        // (in the delay line), three queued.
        let now = Instant::from_nanos(11_500_000);
        assert_eq!(
            set.next_eligible(Instant::ZERO),
            Some(Instant::from_nanos(1_000_000))
        );
        let mut sent = Vec::new();
        // Pipe 1's five packets leave at 1..5 ms; pipe 2's first at 11 ms.
        let mut t = Instant::ZERO;
        while let Some(e) = set.next_eligible(t) {
            if e > now {
                break;
            }
            t = e;
            if let Some(p) = set.dequeue(t) {
                sent.push(p);
            }
        }
        assert_eq!(sent.len(), 6, "{sent:?}");
        let gone = set.remove_link(2, now);
        assert_eq!(gone.len(), 1);
        let c = gone[0].1;
        assert_eq!(c.in_packets, 5);
        assert_eq!(c.out_packets, 1);
        assert_eq!(c.dropped(DropReason::FlowRemoved), 4);
        assert_eq!(c.in_packets, c.out_packets + c.dropped_total());
        assert_eq!(set.queued(), 4, "the purged packets until taken");
        assert_eq!(set.next_eligible(now), Some(now));
        let mut late = Vec::new();
        set.take_late_drops(&mut |r| late.push(r));
        assert_eq!(late.len(), 4);
        assert!(late
            .iter()
            .all(|r| r.packet.flow == two && r.reason == DropReason::FlowRemoved));
        assert_eq!(set.queued(), 0);
        assert_eq!(sent.len() + late.len(), accepted);
        // The freed ids are refused, then reused.
        let r = set.enqueue(now, Packet::new(two, 1000, 99)).unwrap_err();
        assert_eq!(r.reason, DropReason::UnknownFlow);
        routes.remove_link(2);
        assert_eq!(routes, set.routes());
        assert_eq!(routes.free_base(set.flows(), 4, &[]), Some(1));
        assert_eq!(routes.free_base(set.flows(), 5, &[]), None);
        set.install(3, 0, 1, pipe(None, 0, 4), 4).unwrap();
        set.enqueue(now, Packet::new(FlowId(4), 100, 7)).unwrap();
        assert_eq!(
            set.dequeue(now).map(|p| (p.flow, p.token)),
            Some((FlowId(4), 7))
        );
    }

    #[test]
    fn a_removed_member_s_due_packets_are_still_handed_out() {
        let mut set = PipeSet::new();
        set.push(1, 0, pipe(None, 1_000, 1), 1).unwrap();
        set.reserve(1).unwrap();
        for i in 0..3 {
            set.enqueue(Instant::ZERO, Packet::new(FlowId(0), 100, i))
                .unwrap();
        }
        let now = Instant::from_nanos(1_000);
        // The first dequeue releases all three; one is handed out.
        assert_eq!(set.dequeue(now).map(|p| p.token), Some(0));
        let gone = set.remove_link(1, now);
        assert_eq!(gone[0].1.out_packets, 3, "released before the removal");
        assert_eq!(set.queued(), 2);
        let rest: Vec<u64> = std::iter::from_fn(|| set.dequeue(now))
            .map(|p| p.token)
            .collect();
        assert_eq!(rest, [1, 2]);
        assert_eq!(set.queued(), 0);
        assert_eq!(set.pipe_count(), 0);
        assert_eq!(set.next_eligible(now), None);
    }

    #[test]
    fn a_replaced_link_hands_its_packets_to_the_new_pipe_in_order_and_on_time() {
        let drr = |flows: usize| {
            let sched = SchedulerConfig::new(AlgKind::Drr)
                .build(FlowTable::uniform(flows).unwrap())
                .unwrap();
            let cfg = PipeConfig {
                bw: Some(Rate::checked("bw", 8_000_000).unwrap()),
                delay_ns: 10_000_000,
                ..PipeConfig::default()
            };
            Pipe::new(cfg, sched, flows).unwrap()
        };
        let mut set = PipeSet::new();
        set.push(2, 0, drr(2), 2).unwrap();
        set.reserve(3).unwrap();
        // Flows 0 and 1: 4 packets each; 1000 B take 1 ms.
        for i in 0..4 {
            set.enqueue(Instant::ZERO, Packet::new(FlowId(0), 1000, i))
                .unwrap();
            set.enqueue(Instant::ZERO, Packet::new(FlowId(1), 1000, 10 + i))
                .unwrap();
        }
        // At 2.5 ms: two packets in the delay line (exits 11 and 12 ms), one
        // on the link (ends at 3 ms, exit 13 ms), five queued.
        let now = Instant::from_nanos(2_500_000);
        assert_eq!(set.dequeue(now), None);
        // The new pipe has a flowset in the middle: old 1 is new 2.
        let remap = |f: FlowId| Some(FlowId(if f.0 == 1 { 2 } else { f.0 }));
        let gone = set
            .replace_link(2, now, vec![(0, 2, drr(3), 3)], &remap)
            .unwrap();
        assert_eq!(gone.len(), 1);
        let c = gone[0].1;
        assert_eq!((c.in_packets, c.out_packets, c.dropped_total()), (0, 0, 0));
        assert_eq!(set.queued(), 8);
        assert!(
            set.check_install(9, 0, 0, 2, None, &[]).is_ok(),
            "the old ids are free"
        );
        let (out, late) = drain(&mut set, now);
        assert!(late.is_empty());
        assert_eq!(out.len(), 8);
        let times: Vec<u64> = out.iter().map(|(t, _)| *t / 1_000_000).collect();
        // In flight: 11, 12, 13 ms; then one packet a ms from 3 ms on.
        assert_eq!(times, [11, 12, 13, 14, 15, 16, 17, 18]);
        for flow in [FlowId(2), FlowId(4)] {
            let tokens: Vec<u64> = out
                .iter()
                .filter(|(_, p)| p.flow == flow)
                .map(|(_, p)| p.token)
                .collect();
            assert_eq!(tokens.len(), 4, "{flow:?}: {out:?}");
            assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
        }
        // A packet routed before the replacement, to old flow 1 (global 1):
        // it goes to new flow 2 (global 4).
        set.enqueue(now, Packet::new(FlowId(1), 1000, 50)).unwrap();
        let (out, _) = drain(&mut set, now);
        let got: Vec<_> = out.iter().map(|(_, p)| (p.flow, p.token)).collect();
        assert_eq!(got, [(FlowId(4), 50)]);
        // A flow with no place in the new pipe: dropped as flow_removed.
        for i in 0..3 {
            set.enqueue(now, Packet::new(FlowId(4), 1000, 20 + i))
                .unwrap();
        }
        let gone = set
            .replace_link(2, now, vec![(0, 0, drr(2), 2)], &|f| {
                (f.0 == 0).then_some(f)
            })
            .unwrap();
        let c = gone[0].1;
        assert_eq!(c.dropped(DropReason::FlowRemoved), 3);
        assert_eq!(
            c.in_packets,
            8 + 1 + 3,
            "nine handed out earlier, three dropped now"
        );
        let mut late = Vec::new();
        set.take_late_drops(&mut |r| late.push(r));
        assert_eq!(late.len(), 3);
        assert!(late.iter().all(|r| r.packet.flow == FlowId(4)));
        assert_eq!(set.queued(), 0);
        // The first replacement's aliases went with the second; the ids
        // 2..5 are free and refused.
        let r = set
            .enqueue(now, Packet::new(FlowId(3), 1000, 60))
            .unwrap_err();
        assert_eq!(r.reason, DropReason::UnknownFlow);
    }

    /// A DRR pipe of `flows` queues configured as `queue` at 8 Mbit/s.
    fn drr_at_8m(flows: usize, queue: QueueConfig) -> Pipe<AnyScheduler> {
        let sched = SchedulerConfig::new(AlgKind::Drr)
            .build(FlowTable::uniform(flows).unwrap())
            .unwrap();
        let cfg = PipeConfig {
            bw: Some(Rate::checked("bw", 8_000_000).unwrap()),
            queue,
            ..PipeConfig::default()
        };
        Pipe::new(cfg, sched, flows).unwrap()
    }

    #[test]
    fn a_rebuilt_link_carries_red_averages_to_the_queues_that_continue_them() {
        let red_drr = |flows: usize| {
            let red = crate::pipe::Red {
                gentle: false,
                w_q: 0.5,
                min_th: 50,
                max_th: 100,
                max_p: 0.1,
            };
            drr_at_8m(
                flows,
                QueueConfig {
                    red: Some(red),
                    ..QueueConfig::default()
                },
            )
        };
        let mut set = PipeSet::new();
        set.push(2, 0, red_drr(3), 3).unwrap();
        set.reserve(9).unwrap();
        // Queues 0 and 1 of the old link build RED averages (well below
        // min_th: nothing dropped); queue 2 stays empty.
        for i in 0..6 {
            set.enqueue(Instant::ZERO, Packet::new(FlowId(0), 1000, i))
                .unwrap();
        }
        for i in 0..3 {
            set.enqueue(Instant::ZERO, Packet::new(FlowId(1), 1000, 10 + i))
                .unwrap();
        }
        let avg = |set: &PipeSet<AnyScheduler>, f: u32| {
            let m = set.members.iter().find(|m| m.link == 2).unwrap();
            m.pipe.pipe().red_average(FlowId(f)).unwrap()
        };
        let (a0, a1) = (avg(&set, 0), avg(&set, 1));
        assert!(a0 > a1 && a1 > 0.0, "{a0} {a1}");
        // Rebuilt with a flowset in front: old 0 is new 1, old 1 is new 2,
        // old 2 is new 3; new 0 is new.
        let now = Instant::from_nanos(100);
        set.replace_link(2, now, vec![(0, 3, red_drr(4), 4)], &|f| {
            Some(FlowId(f.0 + 1))
        })
        .unwrap();
        assert_eq!(avg(&set, 1), a0, "old queue 0 continues as 1");
        assert_eq!(avg(&set, 2), a1, "old queue 1 continues as 2");
        assert_eq!(avg(&set, 0), 0.0, "a new queue starts afresh");
        // Rebuilt again, old 1, 2 and 3 merged into one queue (a coarser
        // mask): that queue starts afresh; new 0 continues old 0 alone.
        set.replace_link(2, now, vec![(0, 7, red_drr(2), 2)], &|f| {
            Some(FlowId(u32::from(f.0 >= 1)))
        })
        .unwrap();
        assert_eq!(avg(&set, 1), 0.0, "merged queues start afresh");
        let (out, late) = drain(&mut set, now);
        assert!(late.is_empty());
        assert_eq!(out.len(), 9, "every packet goes on");
    }

    #[test]
    fn a_rebuilt_link_carries_each_queues_counters_to_its_heir() {
        let drr = |flows: usize, limit: u32| {
            let queue = QueueConfig {
                limit: crate::pipe::QueueLimit::Slots(limit),
                ..QueueConfig::default()
            };
            drr_at_8m(flows, queue)
        };
        let counters = |set: &PipeSet<AnyScheduler>, f: u32| {
            let m = set.members.iter().find(|m| m.link == 2).unwrap();
            *m.pipe.pipe().flow_counters(FlowId(f)).unwrap()
        };
        let mut set = PipeSet::new();
        set.push(2, 0, drr(3, 4), 3).unwrap();
        set.reserve(9).unwrap();
        // Queue 0: 6 offered, one on the link and 4 queued, 1 over its
        // limit; queue 1: 3 held.
        for i in 0..6 {
            let _ = set.enqueue(Instant::ZERO, Packet::new(FlowId(0), 1000, i));
        }
        for i in 0..3 {
            set.enqueue(Instant::ZERO, Packet::new(FlowId(1), 500, 10 + i))
                .unwrap();
        }
        let before = counters(&set, 0);
        assert_eq!((before.in_packets, before.dropped_packets), (6, 1));
        // Old 0 continues as new 1, old 1 as new 2, new 0 is new.
        let now = Instant::from_nanos(100);
        set.replace_link(2, now, vec![(0, 3, drr(4, 64), 4)], &|f| {
            Some(FlowId(f.0 + 1))
        })
        .unwrap();
        let c1 = counters(&set, 1);
        assert_eq!((c1.in_packets, c1.in_bytes), (6, 6000), "{c1:?}");
        assert_eq!((c1.dropped_packets, c1.held()), (1, 5), "{c1:?}");
        let c2 = counters(&set, 2);
        assert_eq!((c2.in_packets, c2.held(), c2.dropped_packets), (3, 3, 0));
        assert_eq!(counters(&set, 0), FlowCounters::default());
        // Merged by a coarser mask: new 1 sums old 1, 2 and 3.
        set.replace_link(2, now, vec![(0, 7, drr(2, 64), 2)], &|f| {
            Some(FlowId(u32::from(f.0 >= 1)))
        })
        .unwrap();
        let (out, late) = drain(&mut set, now);
        assert!(late.is_empty());
        assert_eq!(out.len(), 8, "every held packet goes on");
        let merged = counters(&set, 1);
        assert_eq!(
            (
                merged.in_packets,
                merged.out_packets,
                merged.dropped_packets
            ),
            (9, 8, 1),
            "{merged:?}"
        );
        assert_eq!((merged.in_bytes, merged.out_bytes), (7500, 6500));
        assert_eq!(merged.held(), 0);
    }
}
