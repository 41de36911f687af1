//! Dynamic queues and instances carried from a running classifier to the
//! one that replaces it (a rule, table, flowset or mask changed while
//! packets flow), and where each old flow id's packets go.
//!
//! What is carried, and how, is told on [`Classifier::carry_dynamic_from`].

use std::collections::HashMap;

use pspat_sched::FlowId;

use crate::key::{MaskedKey, PacketKey};
use crate::layout::FlowOwner;
use crate::Classifier;

/// Where the packets of one link's old flow ids go ([`Classifier::carry_dynamic_from`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkMoves {
    /// The pipe or sched number.
    pub link: u32,
    /// A mask of the link or of one of its flowsets changed, or its
    /// instances moved: ids do not keep their places.
    pub remasked: bool,
    /// Old instance → new instance.
    instances: Vec<Option<u32>>,
    /// Old flow id → new flow id, the same in every instance (a pipe's
    /// queue, an unmasked flowset, a copied table's ids, overflow queues).
    fixed: Vec<Option<u32>>,
    /// `(old instance, old flow id)` → `(new instance, new flow id)`:
    /// dynamic queues whose key was masked again; before `fixed`.
    keyed: HashMap<(u32, u32), (u32, u32)>,
    /// Old flow id → the pipe or flowset that owned it, when the owner is
    /// on this link in both classifiers ([`Classifier::place_carried`]).
    owners: Vec<Option<FlowOwner>>,
    /// The latest use in the old tables: the last use a key placed by
    /// [`Classifier::place_carried`] gets.
    latest: u64,
}

impl LinkMoves {
    /// Where a packet of `flow` on old instance `instance` goes: its new
    /// instance and flow id, `None` when it has no place.
    pub fn get(&self, instance: u32, flow: FlowId) -> Option<(u32, FlowId)> {
        if let Some(&(i, f)) = self.keyed.get(&(instance, flow.0)) {
            return Some((i, FlowId(f)));
        }
        let i = (*self.instances.get(instance as usize)?)?;
        let f = (*self.fixed.get(flow.index())?)?;
        Some((i, FlowId(f)))
    }

    /// Dynamic queues whose key was masked again (and placed).
    pub fn keyed(&self) -> usize {
        self.keyed.len()
    }

    /// The pipe or flowset old flow id `flow` belonged to, when it is on
    /// this link in the new classifier too.
    pub fn owner(&self, flow: FlowId) -> Option<FlowOwner> {
        self.owners.get(flow.index()).copied().flatten()
    }
}

/// What [`Classifier::carry_dynamic_from`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CarryOver {
    /// One per link in both classifiers, by link number.
    pub links: Vec<LinkMoves>,
    /// Entries copied or masked again into the new tables.
    pub carried: u64,
    /// Entries the new tables had no slot for (sent to an overflow queue
    /// or instance when there is one).
    pub full: u64,
}

impl CarryOver {
    /// The moves of link `number`.
    pub fn link(&self, number: u32) -> Option<&LinkMoves> {
        self.links.iter().find(|l| l.link == number)
    }
}

impl Classifier {
    /// Takes the dynamic queues and instances of `old`, the classifier
    /// this one replaces (below); returns where each of the
    /// old flow ids goes. Call it on a classifier that has classified
    /// nothing yet, with `old` no longer classifying (under the lock both
    /// share), so that no entry is created between the two.
    ///
    /// # What is carried
    /// It walks every table of the old
    /// classifier whose owner (the link for instances, the flowset for dynamic
    /// queues) is in the new one, on the same link:
    /// * **Same mask, same instances:** the table is copied whole, so every
    ///   key keeps its slot, its last use, its hold in the overflow queue
    ///   and the table's counters: a rule or table change (or a flowset
    ///   added to the link) moves no flow.
    /// * **Another mask** (or instances that moved): every live entry's key
    ///   is masked again by the new mask and taken
    ///   into the new table with its last use, oldest first. A coarser mask
    ///   merges entries (several old keys, one new key); a finer one cannot
    ///   split an entry (the bits it adds were not kept), so each old entry
    ///   gets the one key those bits at zero give, and the next packets of its
    ///   flows find their own, finer keys. An unmasked flowset or link is one
    ///   entry whose key is all zeros.
    ///
    /// # Where packets go
    /// The result ([`CarryOver`]) has one [`LinkMoves`] per link in both
    /// classifiers: `(old instance, old flow id)` → `(new instance, new flow
    /// id)`. A flow's packets are all in one old queue, and that queue goes
    /// whole to one new queue, so a flow keeps its order when the packets are
    /// handed over in order. Under a coarser mask the new queue is exactly the
    /// one the flow's next packets get; under a finer one it may not be (the
    /// flow's next packets go to their own queue, which a fair scheduler may
    /// serve before the carried ones: the flow may be reordered across the
    /// two queues until the carried packets have left).
    ///
    /// Where the caller still has each held packet's key (its frame's
    /// headers), [`Classifier::place_carried`] places the packet by that key
    /// instead: the instance and queue its flow's next packets get, under a
    /// finer mask too (a key new to the table takes its entry then). The
    /// per-queue moves then only name each old queue's heir (its history,
    /// and the frames routed to its old id before the change).
    ///
    /// What has no place: an entry the new table has no free slot for goes to
    /// the overflow queue (or instance) under
    /// [`crate::OverflowPolicy::SharedQueue`], its key held there as after a
    /// lookup that found no slot, else nowhere; a slot of the old
    /// table with no live entry (its packets outlived the idle expiry) goes to
    /// the new overflow queue, else nowhere; a flowset deleted or moved to
    /// another link, nowhere. The caller drops what goes nowhere with a
    /// counted reason.
    ///
    /// # Complexity
    /// O(live entries + ids of the links) time and memory; it allocates (a
    /// control path, not the packet path).
    pub fn carry_dynamic_from(&mut self, old: &Classifier) -> CarryOver {
        let now = old
            .links
            .iter()
            .filter_map(|l| l.instances.as_ref())
            .chain(old.queues.iter().filter_map(|q| q.dynamic.as_ref()))
            .map(|m| m.table.latest())
            .max()
            .unwrap_or(0);
        let mut out = CarryOver::default();
        let zero = MaskedKey::default();
        for li in 0..self.links.len() {
            let number = self.links[li].number;
            let Some(oi) = old.links.iter().position(|l| l.number == number) else {
                continue;
            };
            let (Some(nlay), Some(olay)) = (self.layout.link(number), old.layout.link(number))
            else {
                continue;
            };
            let (old_instances, old_flows) = (olay.instances, olay.flow_count());
            let ol = &old.links[oi];
            let new_overflow = self.links[li].overflow_instance;
            let mut moves = LinkMoves {
                link: number,
                fixed: vec![None; old_flows as usize],
                owners: vec![None; old_flows as usize],
                latest: now,
                ..LinkMoves::default()
            };
            for r in &olay.ranges {
                if nlay.ranges.iter().any(|n| n.owner == r.owner) {
                    for k in 0..r.len() {
                        if let Some(o) = moves.owners.get_mut((r.first.0 + k) as usize) {
                            *o = Some(r.owner);
                        }
                    }
                }
            }
            // Old instance → new instance.
            let nl = &mut self.links[li];
            moves.instances = match (&ol.instances, &mut nl.instances) {
                (None, None) => vec![Some(0)],
                (Some(om), Some(nm))
                    if om.mask == nm.mask
                        && om.table.layout() == nm.table.layout()
                        && om.table.stats().capacity == nm.table.stats().capacity =>
                {
                    nm.table = om.table.clone();
                    out.carried += u64::from(nm.table.stats().live);
                    (0..old_instances).map(Some).collect()
                }
                (Some(om), Some(nm)) => {
                    moves.remasked = true;
                    let mut map = vec![new_overflow; old_instances as usize];
                    for (slot, key, last) in om.table.entries() {
                        let placed = nm.table.carry(&nm.mask.remask(&key, 0), last);
                        out.carried += u64::from(placed.is_some());
                        out.full += u64::from(placed.is_none());
                        if let Some(m) = map.get_mut(slot as usize) {
                            *m = placed.or(new_overflow);
                        }
                    }
                    map
                }
                (None, Some(nm)) => {
                    moves.remasked = true;
                    let placed = nm.table.carry(&nm.mask.remask(&zero, 0), now);
                    out.carried += u64::from(placed.is_some());
                    out.full += u64::from(placed.is_none());
                    vec![placed.or(new_overflow)]
                }
                (Some(_), None) => {
                    moves.remasked = true;
                    vec![Some(0); old_instances as usize]
                }
            };
            let same_instances = !moves.remasked;
            // A pipe's own queue.
            if let (Some((_, o)), Some((_, n))) = (
                old.layout.range_of(FlowOwner::Pipe(number)),
                self.layout.range_of(FlowOwner::Pipe(number)),
            ) {
                moves.fixed[o.first.index()] = Some(n.first.0);
            }
            // The flowsets on this link in both.
            for qi in 0..self.queues.len() {
                if self.queues[qi].link != li {
                    continue;
                }
                let qn = self.queues[qi].number;
                let Some(oq) = old
                    .queues
                    .iter()
                    .find(|q| q.number == qn && old.links[q.link].number == number)
                else {
                    continue;
                };
                let find = |l: &crate::LinkLayout| {
                    l.ranges
                        .iter()
                        .find(|r| r.owner == FlowOwner::Queue(qn))
                        .copied()
                };
                let (Some(orange), Some(nrange)) = (find(olay), find(nlay)) else {
                    continue;
                };
                let (of, nf) = (orange.first.0, nrange.first.0);
                let nq = &mut self.queues[qi];
                let new_flow_overflow = nrange.overflow.map(|f| f.0);
                match (&oq.dynamic, &mut nq.dynamic) {
                    (None, None) => moves.fixed[of as usize] = Some(nf),
                    (Some(om), Some(nm))
                        if same_instances
                            && om.mask == nm.mask
                            && om.table.layout() == nm.table.layout()
                            && om.table.stats().capacity == nm.table.stats().capacity
                            && orange.len() == nrange.len() =>
                    {
                        nm.table = om.table.clone();
                        out.carried += u64::from(nm.table.stats().live);
                        for k in 0..orange.len() {
                            moves.fixed[(of + k) as usize] = Some(nf + k);
                        }
                    }
                    (Some(om), Some(nm)) => {
                        moves.remasked = true;
                        // Slots with no live entry, and the overflow queue.
                        for k in 0..orange.len() {
                            moves.fixed[(of + k) as usize] = new_flow_overflow;
                        }
                        for (slot, key, last) in om.table.entries() {
                            let at = key.0[10];
                            let Some(Some(to)) = moves.instances.get(at as usize).copied() else {
                                continue;
                            };
                            let placed = nm.table.carry(&nm.mask.remask(&key, to), last);
                            out.carried += u64::from(placed.is_some());
                            out.full += u64::from(placed.is_none());
                            if let Some(f) = placed.map(|s| nf + s).or(new_flow_overflow) {
                                moves.keyed.insert((at, of + slot), (to, f));
                            }
                        }
                    }
                    (None, Some(nm)) => {
                        moves.remasked = true;
                        for at in 0..old_instances {
                            let Some(Some(to)) = moves.instances.get(at as usize).copied() else {
                                continue;
                            };
                            let placed = nm.table.carry(&nm.mask.remask(&zero, to), now);
                            out.carried += u64::from(placed.is_some());
                            out.full += u64::from(placed.is_none());
                            if let Some(f) = placed.map(|s| nf + s).or(new_flow_overflow) {
                                moves.keyed.insert((at, of), (to, f));
                            }
                        }
                    }
                    (Some(_), None) => {
                        moves.remasked = true;
                        for k in 0..orange.len() {
                            moves.fixed[(of + k) as usize] = Some(nf);
                        }
                    }
                }
            }
            out.links.push(moves);
        }
        out
    }
}

impl Classifier {
    /// Where one packet carried over from the classifier this one replaced
    /// goes, by its own key (`key`, as the packet was classified): the
    /// instance and dynamic queue that key has under this classifier's
    /// masks on link `moves.link`, within the pipe or flowset its old flow
    /// id `flow` belonged to ([`LinkMoves::owner`]). So under a finer mask
    /// the packets of one old queue go, each, where the next packets of
    /// their own flows will go ([`Classifier::carry_dynamic_from`]). A key with no entry
    /// yet takes one, last used at the latest use of the old tables (it
    /// then expires like an entry carried with its queue); the table has
    /// no slot, or the key is held in the overflow queue (the crate docs):
    /// the overflow instance or queue
    /// ([`crate::OverflowPolicy::SharedQueue`]), else `None`, as for a
    /// flowset deleted or moved to another link. Call it after
    /// [`Classifier::carry_dynamic_from`] gave `moves`, before this
    /// classifier classifies. Control path: O(1) per packet, no
    /// allocation.
    pub fn place_carried(
        &mut self,
        moves: &LinkMoves,
        flow: FlowId,
        key: &PacketKey,
    ) -> Option<(u32, FlowId)> {
        let owner = moves.owner(flow)?;
        let li = self.links.iter().position(|l| l.number == moves.link)?;
        let range = self
            .layout
            .link(moves.link)?
            .ranges
            .iter()
            .find(|r| r.owner == owner)
            .copied()?;
        let link = &mut self.links[li];
        let to = match &mut link.instances {
            None => 0,
            Some(m) => m
                .table
                .carry(&m.mask.masked(key, 0), moves.latest)
                .or(link.overflow_instance)?,
        };
        let dynamic = match owner {
            FlowOwner::Pipe(_) => None,
            FlowOwner::Queue(qn) => self
                .queues
                .iter_mut()
                .find(|q| q.number == qn && q.link == li)?
                .dynamic
                .as_mut(),
        };
        let f = match dynamic {
            None => range.first,
            Some(m) => m
                .table
                .carry(&m.mask.masked(key, to), moves.latest)
                .map(|s| FlowId(range.first.0 + s))
                .or(range.overflow)?,
        };
        Some((to, f))
    }
}
