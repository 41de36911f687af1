//! The QFQ group machinery shared by [`super::Qfq`] (one entity per flow)
//! and [`crate::QfqPlus`] (one entity per aggregate of flows).
//!
//! An *entity* has an exact start tag S (u64 fixed point, [`FRAC_BITS`])
//! and a group chosen from its largest span `lmax · inv_w`. Its finish tag
//! is never stored: the groups order entities by S alone (F_g below is a
//! group bound), so a backlogged entity needs F only at the end of a turn,
//! where F = S + used · inv_w becomes the next S; an idle entity keeps that
//! F in `s` for the stale test of [`Engine::activate`]. Group i has slot size
//! σ_i = 2^(MIN_SLOT_SHIFT + i), rounded start S_g (a multiple of σ_i),
//! F_g = S_g + 2σ_i, and [`MAX_SLOTS`] buckets of entities by rounded S,
//! tracked by `front` and the `full_slots` bitmap. The groups sit in four
//! bitmaps, ER/IR/EB/IB (eligible or ineligible, ready or blocked); the
//! lowest set bit of ER is the group with the smallest F_g among eligible
//! ones, so choosing is two find-first-set operations.
//!
//! The service unit is a *turn*: [`Engine::pick`] detaches the entity at the
//! front of the winning group; after its turn the owner calls
//! [`Engine::reinsert`] (still backlogged) or [`Engine::finish`] (empty) with
//! the bytes actually served, [`Engine::charge`] once per packet and
//! [`Engine::settle`] at the start of every dequeue.
//!
//! For the flow lifecycle, [`Engine::deactivate`] takes a backlogged entity
//! (not in its turn) out of its bucket and repairs the group's start and
//! the four bitmaps as a turn that empties the group does; [`Engine::set_entity`]
//! and [`Engine::set_weight_sum`] change an idle entity's weight and group
//! and V's rate.
//!
//! Entities keep their inverse weight as a slot of [`InvWeights`], one per
//! distinct weight, taken and freed only by [`Engine::new`] and
//! [`Engine::set_entity`] (see `weights.rs`).

use super::weights::InvWeights;
use crate::vclock::{vt_gt, VirtualClock};

/// Fraction bits of the fixed-point virtual times (tags are bytes × 2⁴⁰ /
/// weight), shared with WF²Q+ ([`crate::wf2q_plus::FRAC_BITS`]).
pub const FRAC_BITS: u32 = crate::vclock::FRAC_BITS;
/// log₂ of the smallest slot, σ_0 = 2²⁴: the span of a 1-byte packet at weight 65536.
pub const MIN_SLOT_SHIFT: u32 = 24;
/// Largest group index: spans up to 65535 · 2⁴⁰ < 2⁵⁶ = σ_32.
pub const MAX_INDEX: u32 = 32;
/// Buckets per group.
pub const MAX_SLOTS: u32 = 32;

const NIL: u32 = u32::MAX;
const NGROUPS: usize = MAX_INDEX as usize + 1;
const ER: usize = 0;
const IR: usize = 1;
const EB: usize = 2;
const IB: usize = 3;

/// Bits `0..n` set (all bits for `n >= 64`), without an overflowing shift.
#[inline]
fn low_mask(n: u32) -> u64 {
    1u64.checked_shl(n).map_or(u64::MAX, |b| b - 1)
}

#[inline]
fn round_down(t: u64, shift: u32) -> u64 {
    t & !low_mask(shift)
}

/// The group of an entity whose largest span is `span` (lmax · inv_w):
/// the smallest i with σ_i ≥ span.
pub(crate) fn group_index(span: u64) -> u32 {
    if span <= 1u64 << MIN_SLOT_SHIFT {
        return 0;
    }
    let ceil_log2 = 64 - (span - 1).leading_zeros();
    ceil_log2 - MIN_SLOT_SHIFT
}

/// One entity: 16 bytes, so a dynamic queue costs QFQ 16 bytes here. Its
/// inverse weight lives in the shared [`InvWeights`] table (one slot per
/// distinct weight), named by a slot number next to the group index.
#[derive(Clone, Copy)]
struct Ent {
    /// Start tag while backlogged; finish tag of the last turn while idle.
    s: u64,
    next: u32,
    /// The slot of the inverse weight in [`InvWeights`] in the low
    /// [`SLOT_BITS`] bits, the group index above them.
    slot_group: u32,
}

/// Bits of [`Ent::slot_group`] holding the weight slot: there are at most
/// as many slots as entities, at most [`crate::FlowTable::MAX_FLOWS`] + 1
/// (QFQ+ keeps one aggregate more than flow slots).
const SLOT_BITS: u32 = 26;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;

const _: () = assert!(std::mem::size_of::<Ent>() == 16);
const _: () = assert!(crate::FlowTable::MAX_FLOWS < SLOT_MASK as usize);
const _: () = assert!(MAX_INDEX < 1 << (32 - SLOT_BITS));

impl Ent {
    #[inline(always)]
    fn slot(&self) -> u32 {
        self.slot_group & SLOT_MASK
    }

    #[inline(always)]
    fn group(&self) -> usize {
        (self.slot_group >> SLOT_BITS) as usize
    }
}

/// `slot` and `group` in one word (see [`Ent::slot_group`]).
fn pack_slot_group(slot: u32, group: u32) -> u32 {
    debug_assert!(slot <= SLOT_MASK && group <= MAX_INDEX);
    (slot & SLOT_MASK) | (group << SLOT_BITS)
}

#[derive(Clone, Copy)]
struct Group {
    s: u64,
    f: u64,
    shift: u32,
    front: u32,
    full_slots: u32,
    slots: [u32; MAX_SLOTS as usize],
}

pub(crate) struct Engine {
    ents: Box<[Ent]>,
    /// The entities' distinct inverse weights.
    weights: InvWeights,
    /// Inline rather than boxed: the compiler then addresses a group from
    /// `self` without reloading a slice pointer after every store.
    groups: [Group; NGROUPS],
    bitmaps: [u64; 4],
    /// V, and the bytes charged to it but not yet applied (see
    /// [`Engine::charge`]).
    clock: VirtualClock,
    /// An entity is detached for its turn (between `pick` and
    /// `reinsert`/`finish`). It is backlogged with S ≤ V, so V must not
    /// jump to the start of another group meanwhile (V = max(V + W, min S)
    /// over *all* backlogged entities).
    in_turn: bool,
}

impl Engine {
    /// Entities given as (inv_w, span); `wsum` is the sum of all weights.
    pub(crate) fn new(ents: impl ExactSizeIterator<Item = (u64, u64)>, wsum: u64) -> Self {
        let mut weights = InvWeights::new(ents.len());
        let ents: Box<[Ent]> = ents
            .map(|(inv_w, span)| Ent {
                s: 0,
                next: NIL,
                slot_group: pack_slot_group(
                    weights.acquire(inv_w),
                    group_index(span).min(MAX_INDEX),
                ),
            })
            .collect();
        let groups = std::array::from_fn(|i| Group {
            s: 0,
            f: 0,
            shift: MIN_SLOT_SHIFT + i as u32,
            front: 0,
            full_slots: 0,
            slots: [NIL; MAX_SLOTS as usize],
        });
        Engine {
            ents,
            weights,
            groups,
            bitmaps: [0; 4],
            clock: VirtualClock::new(wsum),
            in_turn: false,
        }
    }

    #[inline]
    pub(crate) fn v(&self) -> u64 {
        self.clock.now()
    }

    #[inline]
    fn set_v(&mut self, v: u64) {
        self.clock.set(v);
    }

    /// Starts V at `v` and marks every entity's tags stale.
    pub(crate) fn set_initial_v(&mut self, v: u64) {
        self.set_v(v);
        for e in self.ents.iter_mut() {
            e.s = v;
        }
    }

    /// The sum of weights changed: V advances by `len / wsum` from now on.
    pub(crate) fn set_weight_sum(&mut self, wsum: u64) {
        self.clock.set_weight_sum(wsum);
    }

    /// Gives entity `e` a new inverse weight and a group for its largest
    /// span `span`. The group may change only while `e` is in no bucket and
    /// not in its turn; a backlogged entity keeps its group (`keep_group`).
    pub(crate) fn set_entity(&mut self, e: u32, inv_w: u64, span: u64, keep_group: bool) {
        let ent = &mut self.ents[e as usize];
        let group = if keep_group {
            ent.group() as u32
        } else {
            group_index(span).min(MAX_INDEX)
        };
        let mut slot = ent.slot();
        if self.weights.get(slot) != inv_w {
            // Released first: the table then always has a slot free.
            self.weights.release(slot);
            slot = self.weights.acquire(inv_w);
        }
        ent.slot_group = pack_slot_group(slot, group);
    }

    /// The number of distinct inverse weights the entities hold.
    #[cfg(test)]
    pub(crate) fn distinct_weights(&self) -> usize {
        self.weights.live()
    }

    /// Forgets entity `e`'s tags (it must be in no bucket): its next
    /// activation starts from V.
    pub(crate) fn forget(&mut self, e: u32) {
        self.ents[e as usize].s = self.v();
    }

    /// Takes the backlogged entity `e`, which is in a bucket (not in its
    /// turn), out of its group, keeping its start tag. O(entities in its
    /// bucket). The group start, F_g and the bitmaps are repaired as in
    /// [`Engine::pick`]: an emptied group leaves every bitmap and may
    /// unblock the groups below it; a group whose first bucket emptied
    /// moves its start on.
    pub(crate) fn deactivate(&mut self, e: u32) {
        let gi = self.ents[e as usize].group();
        let shift = self.groups[gi].shift;
        let grp = &self.groups[gi];
        let slot = (round_down(self.ents[e as usize].s, shift).wrapping_sub(grp.s) >> shift)
            .min(u64::from(MAX_SLOTS - 1)) as u32;
        let mut found = None;
        // The bucket `slot_insert` chose; every other one as a fallback
        // should the tag arithmetic ever disagree.
        for k in std::iter::once(slot).chain((0..MAX_SLOTS).filter(|&k| k != slot)) {
            if grp.full_slots & (1u32 << k) == 0 {
                continue;
            }
            let b = ((grp.front + k) % MAX_SLOTS) as usize;
            let mut prev = NIL;
            let mut cur = grp.slots[b];
            while cur != NIL && cur != e {
                prev = cur;
                cur = self.ents[cur as usize].next;
            }
            if cur == e {
                found = Some((k, b, prev));
                break;
            }
        }
        let Some((k, b, prev)) = found else {
            debug_assert!(false, "entity {e} is in no bucket of group {gi}");
            return;
        };
        let next = self.ents[e as usize].next;
        self.ents[e as usize].next = NIL;
        let grp = &mut self.groups[gi];
        if prev == NIL {
            grp.slots[b] = next;
        } else {
            self.ents[prev as usize].next = next;
        }
        if grp.slots[b] != NIL {
            return;
        }
        grp.full_slots &= !(1u32 << k);
        let bit = 1u64 << gi;
        let was_er = self.bitmaps[ER] & bit != 0;
        let old_f = grp.f;
        if grp.full_slots == 0 {
            for m in &mut self.bitmaps {
                *m &= !bit;
            }
        } else if k == 0 {
            if let Some(skipped) = self.slot_scan(gi) {
                let grp = &mut self.groups[gi];
                let rs = grp.s.wrapping_add(u64::from(skipped) << grp.shift);
                grp.s = rs;
                grp.f = rs.wrapping_add(2u64 << grp.shift);
                for m in &mut self.bitmaps {
                    *m &= !bit;
                }
                let st = self.calc_state(gi);
                self.bitmaps[st] |= bit;
            }
        } else {
            return;
        }
        if was_er {
            self.unblock_groups(gi, old_f);
        }
    }

    /// Puts back an entity taken out by [`Engine::deactivate`] with its
    /// start tag unchanged (possibly into a new group).
    pub(crate) fn restore(&mut self, e: u32) {
        self.insert(e);
    }

    /// Group index of entity `e` (for tests and docs).
    pub(crate) fn group_of(&self, e: u32) -> u32 {
        self.ents[e as usize].group() as u32
    }

    /// Charges `len` bytes to V, applied by the next [`Engine::settle`]
    /// (see [`VirtualClock`]).
    #[inline]
    pub(crate) fn charge(&mut self, len: u32) {
        self.clock.charge(u64::from(len));
    }

    /// Applies the pending charge to V and updates the eligible groups.
    #[inline]
    pub(crate) fn settle(&mut self) {
        let old = self.v();
        self.clock.settle();
        self.update_eligible(old);
    }

    /// An idle entity becomes backlogged.
    #[inline]
    pub(crate) fn activate(&mut self, e: u32) {
        let v = self.v();
        let ent = &mut self.ents[e as usize];
        let shift = self.groups[ent.group()].shift;
        // A finish tag behind V, or more than a slot ahead of V's slot, is
        // stale: restart from V. Otherwise restart from F (the entity was
        // served ahead of its fluid schedule and pays it back).
        let limit = round_down(v, shift).wrapping_add(1u64 << shift);
        let f = ent.s;
        if !vt_gt(f, v) || vt_gt(round_down(f, shift), limit) {
            ent.s = v;
        }
        self.insert(e);
    }

    /// Puts back the entity of the turn just ended, which was charged `used`
    /// bytes: its next turn starts at this turn's finish.
    #[inline(always)]
    pub(crate) fn reinsert(&mut self, e: u32, used: u32) {
        let ent = &mut self.ents[e as usize];
        ent.s = ent
            .s
            .wrapping_add(u64::from(used) * self.weights.get(ent.slot()));
        self.in_turn = false;
        self.insert(e);
    }

    /// The entity of the turn just ended has nothing left; it was charged
    /// `used` bytes. Its F is kept (in `s`) for the stale test of
    /// [`Engine::activate`].
    #[inline]
    pub(crate) fn finish(&mut self, e: u32, used: u32) {
        let ent = &mut self.ents[e as usize];
        ent.s = ent
            .s
            .wrapping_add(u64::from(used) * self.weights.get(ent.slot()));
        self.in_turn = false;
    }

    /// Detaches and returns the entity to serve next, if any is backlogged.
    #[inline(always)]
    pub(crate) fn pick(&mut self) -> Option<u32> {
        if self.bitmaps[ER] == 0 {
            if self.bitmaps[EB] != 0 {
                // Cannot happen while the invariants hold (a blocked group
                // needs a ready one); recover rather than stall.
                self.move_groups(u64::MAX, EB, ER);
                self.move_groups(u64::MAX, IB, IR);
            }
            let v = self.v();
            self.update_eligible(v);
            if self.bitmaps[ER] == 0 {
                return None;
            }
        }
        let gi = self.bitmaps[ER].trailing_zeros() as usize;
        let grp = &mut self.groups[gi];
        let old_f = grp.f;
        let slot = grp.front as usize;
        let e = grp.slots[slot];
        if e == NIL {
            return None;
        }
        self.in_turn = true;
        let next = self.ents[e as usize].next;
        grp.slots[slot] = next;
        if next != NIL {
            // The same bucket still holds entities: the group start stays.
            // Decided without reading `full_slots`, which the previous
            // turn's re-insertion may still be computing.
            return Some(e);
        }
        grp.full_slots &= !1;
        match self.slot_scan(gi) {
            None => self.bitmaps[ER] &= !(1u64 << gi),
            Some(skipped) => {
                // An entity in bucket k starts (rounded down) at the group
                // start plus k slots (`slot_insert` keeps this exact), so
                // the new start needs no look at the new head entity.
                let grp = &mut self.groups[gi];
                let rs = grp.s.wrapping_add(u64::from(skipped) << grp.shift);
                debug_assert_eq!(
                    rs,
                    round_down(
                        self.ents[grp.slots[grp.front as usize] as usize].s,
                        grp.shift
                    )
                );
                grp.s = rs;
                grp.f = rs.wrapping_add(2u64 << grp.shift);
                self.bitmaps[ER] &= !(1u64 << gi);
                let st = self.calc_state(gi);
                self.bitmaps[st] |= 1u64 << gi;
            }
        }
        self.unblock_groups(gi, old_f);
        Some(e)
    }

    /// After V moved from `old_v`: if nothing is eligible, jump V to the
    /// start of the lowest ineligible group; then make eligible every group
    /// whose slot boundary V crossed.
    #[inline]
    pub(crate) fn update_eligible(&mut self, old_v: u64) {
        let ineligible = self.bitmaps[IR] | self.bitmaps[IB];
        if ineligible == 0 {
            return;
        }
        if self.bitmaps[ER] == 0 && !self.in_turn {
            debug_assert!(self.bitmaps[EB] == 0, "EB without ER: {:?}", self.bitmaps);
            let gi = ineligible.trailing_zeros() as usize;
            let s = self.groups[gi].s;
            if vt_gt(s, self.v()) {
                self.set_v(s);
            }
        }
        let vslot = self.v() >> MIN_SLOT_SHIFT;
        let old_slot = old_v >> MIN_SLOT_SHIFT;
        if vslot != old_slot {
            let top = 63 - (vslot ^ old_slot).leading_zeros();
            let mask = low_mask(top + 1);
            self.move_groups(mask, IR, ER);
            self.move_groups(mask, IB, EB);
        }
    }

    #[inline]
    fn move_groups(&mut self, mask: u64, src: usize, dst: usize) {
        let m = self.bitmaps[src] & mask;
        self.bitmaps[dst] |= m;
        self.bitmaps[src] &= !m;
    }

    /// Unless an ER group above `gi` still finishes no later than `old_f`,
    /// the groups below `gi` are no longer blocked.
    #[inline]
    fn unblock_groups(&mut self, gi: usize, old_f: u64) {
        let above = self.bitmaps[ER] & !low_mask(gi as u32 + 1);
        if above != 0 {
            let next = above.trailing_zeros() as usize;
            if !vt_gt(self.groups[next].f, old_f) {
                return;
            }
        }
        let below = low_mask(gi as u32);
        self.move_groups(below, EB, ER);
        self.move_groups(below, IB, IR);
    }

    /// ER/IR/EB/IB for group `gi`, which must be in no bitmap.
    #[inline]
    fn calc_state(&self, gi: usize) -> usize {
        let grp = &self.groups[gi];
        let mut state = if vt_gt(grp.s, self.v()) { IR } else { ER };
        let mask = self.bitmaps[ER] & !low_mask(gi as u32);
        if mask != 0 {
            let next = mask.trailing_zeros() as usize;
            if vt_gt(grp.f, self.groups[next].f) {
                state |= EB;
            }
        }
        state
    }

    /// Advances `front` to the first non-empty bucket; how many buckets it
    /// moved (`None` when the group is empty).
    #[inline]
    fn slot_scan(&mut self, gi: usize) -> Option<u32> {
        let grp = &mut self.groups[gi];
        if grp.full_slots == 0 {
            return None;
        }
        let i = grp.full_slots.trailing_zeros();
        if i > 0 {
            grp.front = (grp.front + i) % MAX_SLOTS;
            grp.full_slots >>= i;
        }
        Some(i)
    }

    /// Inserts entity `e` (tags set) into its group.
    #[inline(always)]
    fn insert(&mut self, e: u32) {
        let gi = self.ents[e as usize].group();
        let shift = self.groups[gi].shift;
        let mut rs = round_down(self.ents[e as usize].s, shift);
        let bit = 1u64 << gi;
        if self.groups[gi].full_slots != 0 {
            if !vt_gt(self.groups[gi].s, rs) {
                self.slot_insert(gi, e, rs);
                return;
            }
            // The group start moves back: rotate the buckets to make room.
            let grp = &mut self.groups[gi];
            let mut i = (grp.s.wrapping_sub(rs) >> shift).min(u64::from(MAX_SLOTS)) as u32;
            let room = grp.full_slots.leading_zeros();
            if i > room {
                // Not enough buckets: start the entity later instead of
                // losing one (never seen under the QFQ invariants).
                i = room;
                rs = grp.s.wrapping_sub(u64::from(i) << shift);
                let ent = &mut self.ents[e as usize];
                let delta = rs.wrapping_sub(round_down(ent.s, shift));
                ent.s = ent.s.wrapping_add(delta);
            }
            if i > 0 {
                grp.full_slots <<= i;
                grp.front = (grp.front + MAX_SLOTS - i) % MAX_SLOTS;
            }
        } else if !self.in_turn && self.bitmaps.iter().all(|&b| b == 0) && vt_gt(rs, self.v()) {
            // Nothing else is backlogged: V = max(V, min S) (Bennett–Zhang).
            // With other groups merely ineligible (possible between `pick`
            // and `reinsert`), `update_eligible` moves V instead.
            self.set_v(rs);
        }
        for b in &mut self.bitmaps {
            *b &= !bit;
        }
        let grp = &mut self.groups[gi];
        grp.s = rs;
        grp.f = rs.wrapping_add(2u64 << shift);
        let st = self.calc_state(gi);
        self.bitmaps[st] |= bit;
        self.slot_insert(gi, e, rs);
    }

    #[inline]
    fn slot_insert(&mut self, gi: usize, e: u32, rs: u64) {
        let grp = &mut self.groups[gi];
        let shift = grp.shift;
        let mut slot = rs.wrapping_sub(grp.s) >> shift;
        if slot > u64::from(MAX_SLOTS - 2) {
            // Out-of-order service pushed the start beyond the bucket
            // window: move the entity back to the last safe bucket (margin
            // two, as the group start may later move back one slot).
            let excess = (slot - u64::from(MAX_SLOTS - 2)) << shift;
            let ent = &mut self.ents[e as usize];
            ent.s = ent.s.wrapping_sub(excess);
            slot = u64::from(MAX_SLOTS - 2);
        }
        let slot = slot as u32;
        let i = ((grp.front + slot) % MAX_SLOTS) as usize;
        self.ents[e as usize].next = grp.slots[i];
        grp.slots[i] = e;
        grp.full_slots |= 1u32 << slot;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_index_covers_the_full_range() {
        // 1 byte at weight 65536: span 2^24, group 0.
        assert_eq!(group_index(1 << (FRAC_BITS - 16)), 0);
        // 65535 bytes at weight 1: the largest span, group 32.
        assert_eq!(group_index(65_535u64 << FRAC_BITS), MAX_INDEX);
        // Exact powers of two stay in the smaller group.
        assert_eq!(group_index(1 << 30), 6);
        assert_eq!(group_index((1 << 30) + 1), 7);
        assert_eq!(low_mask(64), u64::MAX);
        assert_eq!(low_mask(0), 0);
    }
}
