//! Bounded tables of dynamic entries (dynamic queues of a flowset, instances
//! of a sched): masked key → dense slot, with idle expiry driven by `now`.
//!
//! # Structure
//! * `slots`: `capacity` fixed records (key, hash, last use, LRU links),
//!   allocated once; a slot number is the dense id handed out.
//! * `index`: open addressing with linear probing, `2·capacity` rounded up to
//!   a power of two entries of 8 bytes (slot number and the hash's low 32
//!   bits, compared before the key); the load factor stays at most 1/2.
//!   Removal shifts later entries back (no tombstones), so probe lengths do
//!   not degrade under churn.
//! * a free list of slots threaded through the LRU links, and a doubly linked
//!   list of live slots ordered by *period* of last use (a period is the
//!   largest power of two nanoseconds not above `idle / 8`): a hit moves its slot to the tail only when the period
//!   changed since the slot's previous use, so a busy queue costs no list
//!   work on most packets (the list touches two neighbouring slots, i.e. two
//!   cache misses, when it moves one).
//!
//! # Guarantees
//! * Nothing is allocated after construction, and the table never grows:
//!   when every slot is live and the oldest was used less than the idle time
//!   ago, [`Lookup::Full`] is returned and the caller applies its overflow
//!   policy.
//! * Exact at lookup: an entry unused for at least the idle time is never
//!   returned for its old key (a lookup that finds it stale counts an expiry
//!   and a creation, and hands the same slot out again); while live it keeps
//!   its slot.
//! * Reclamation for other keys within one period: an entry unused for
//!   `idle + idle/8` or more is always reclaimable ([`Lookup::Full`] is never
//!   returned while one exists), and [`DynTable::expire`] reclaims every
//!   entry in a period older than the idle time (so an entry is reclaimed
//!   after between `idle` and `idle + idle/8` without use).
//! * Time never runs backwards inside the table: a `now` earlier than the
//!   latest seen is taken as the latest.
//!
//! # Complexity
//! A lookup is O(1) expected (probe length bounded by the load factor), plus
//! at most [`EXPIRE_PER_LOOKUP`] expiries; each entry is expired once per
//! creation, so the expiry work is amortised O(1) per lookup.
//! [`DynTable::expire`] is O(expired).

use std::mem::size_of;

use pspat_sched::Instant;

use crate::key::MaskedKey;

/// Stale entries reclaimed at most per lookup (at least one creation per
/// lookup can happen, so two keep the table ahead of the churn).
pub(crate) const EXPIRE_PER_LOOKUP: usize = 2;

const NIL: u32 = u32::MAX;
const EMPTY: u64 = u64::MAX;

/// Periods per idle time: the LRU list is ordered by period of last use, so
/// reclamation may come up to `idle / PERIODS_PER_IDLE` late.
pub(crate) const PERIODS_PER_IDLE: u64 = 8;

/// One dynamic entry: 64 bytes, one cache line.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
pub(crate) struct Slot {
    key: MaskedKey,
    /// Low 32 bits of the key's hash (its home in the index).
    hash: u32,
    prev: u32,
    next: u32,
    /// Last use, nanoseconds.
    last_seen: u64,
}

/// What a lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// A live entry for this key.
    Hit(u32),
    /// A new entry (its slot may have served an expired key before).
    Created(u32),
    /// Every slot is live: nothing created.
    Full,
}

/// Counters of one table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DynamicStats {
    /// Slots: the most entries live at once.
    pub capacity: u32,
    /// Entries live now (stale entries count until reclaimed).
    pub live: u32,
    /// Entries created.
    pub created: u64,
    /// Entries reclaimed after the idle time.
    pub expired: u64,
    /// Lookups that found every slot live (the overflow policy applied).
    pub overflowed: u64,
}

/// A bounded table of dynamic entries (module docs).
#[derive(Clone, Debug)]
pub(crate) struct DynTable {
    slots: Vec<Slot>,
    index: Vec<u64>,
    index_mask: usize,
    free: u32,
    head: u32,
    tail: u32,
    seed: u64,
    idle_ns: u64,
    /// The LRU list's granularity as a shift: a period is the largest power
    /// of two nanoseconds not above `idle_ns / 8` (at least 1 ns).
    period_shift: u32,
    latest: u64,
    stats: DynamicStats,
}

impl DynTable {
    /// A table of `capacity` slots (1..=2^28, checked by the caller) whose
    /// entries expire after `idle_ns` (≥ 1) without use.
    pub(crate) fn new(capacity: u32, idle_ns: u64, seed: u64) -> Self {
        let cap = capacity.max(1) as usize;
        let index_len = (2 * cap).next_power_of_two();
        let mut slots = vec![Slot::default(); cap];
        for (i, s) in slots.iter_mut().enumerate() {
            s.next = if i + 1 < cap { (i + 1) as u32 } else { NIL };
            s.prev = NIL;
        }
        DynTable {
            slots,
            index: vec![EMPTY; index_len],
            index_mask: index_len - 1,
            free: 0,
            head: NIL,
            tail: NIL,
            seed,
            idle_ns: idle_ns.max(1),
            period_shift: (idle_ns / PERIODS_PER_IDLE).max(1).ilog2(),
            latest: 0,
            stats: DynamicStats {
                capacity: cap as u32,
                ..DynamicStats::default()
            },
        }
    }

    /// Bytes this table holds: slots plus index.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.slots.capacity() * size_of::<Slot>() + self.index.capacity() * size_of::<u64>()
    }

    pub(crate) fn stats(&self) -> DynamicStats {
        self.stats
    }

    fn clock(&mut self, now: Instant) -> u64 {
        self.latest = self.latest.max(now.as_nanos());
        self.latest
    }

    fn stale(&self, slot: u32, now: u64) -> bool {
        now - self.slots[slot as usize].last_seen >= self.idle_ns
    }

    fn unlink(&mut self, s: u32) {
        let Slot { prev, next, .. } = self.slots[s as usize];
        if prev == NIL {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
    }

    fn push_tail(&mut self, s: u32) {
        let slot = &mut self.slots[s as usize];
        slot.prev = self.tail;
        slot.next = NIL;
        if self.tail == NIL {
            self.head = s;
        } else {
            self.slots[self.tail as usize].next = s;
        }
        self.tail = s;
    }

    /// Takes slot `s` out of the index (backward-shift deletion) and the LRU
    /// list; it is not put on the free list.
    fn evict(&mut self, s: u32) {
        let mask = self.index_mask;
        let mut i = self.slots[s as usize].hash as usize & mask;
        while self.index[i] as u32 != s {
            i = (i + 1) & mask;
        }
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let e = self.index[j];
            if e == EMPTY {
                break;
            }
            let home = (e >> 32) as usize & mask;
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                self.index[i] = e;
                i = j;
            }
        }
        self.index[i] = EMPTY;
        self.unlink(s);
        self.stats.live -= 1;
        self.stats.expired += 1;
    }

    /// Reclaims stale entries, oldest first, at most `budget` of them.
    fn reclaim(&mut self, now: u64, budget: usize) -> usize {
        let mut n = 0;
        while n < budget && self.head != NIL && self.stale(self.head, now) {
            let s = self.head;
            self.evict(s);
            self.slots[s as usize].next = self.free;
            self.free = s;
            n += 1;
        }
        n
    }

    /// Reclaims every entry unused for the idle time; returns how many.
    pub(crate) fn expire(&mut self, now: Instant) -> usize {
        let now = self.clock(now);
        self.reclaim(now, usize::MAX)
    }

    /// The hash [`DynTable::lookup_hashed`] expects for `key`.
    #[inline]
    pub(crate) fn hash(&self, key: &MaskedKey) -> u64 {
        key.hash(self.seed)
    }

    /// Reads the index entry at `hash`'s home so that a later lookup finds
    /// it in cache; the caller passes the result to `std::hint::black_box`
    /// (so the load happens).
    #[inline]
    pub(crate) fn touch_index(&self, hash: u64) -> u64 {
        self.index[(hash as u32) as usize & self.index_mask]
    }

    /// Reads the slot the index entry at `hash`'s home names, if any (after
    /// [`DynTable::touch_index`], so that both loads overlap across packets).
    #[inline]
    pub(crate) fn touch_slot(&self, hash: u64) -> u64 {
        let e = self.index[(hash as u32) as usize & self.index_mask];
        self.slots.get(e as u32 as usize).map_or(e, |s| s.last_seen)
    }

    /// The slot of `key`, created if absent and a slot is free or stale.
    #[inline]
    pub(crate) fn lookup(&mut self, key: &MaskedKey, now: Instant) -> Lookup {
        let h = self.hash(key);
        self.lookup_hashed(key, h, now)
    }

    /// [`DynTable::lookup`] with the key's hash already computed.
    #[inline]
    pub(crate) fn lookup_hashed(&mut self, key: &MaskedKey, h: u64, now: Instant) -> Lookup {
        let now = self.clock(now);
        self.reclaim(now, EXPIRE_PER_LOOKUP);
        let tag = (h as u32) as u64;
        let mask = self.index_mask;
        let mut i = tag as usize & mask;
        loop {
            let e = self.index[i];
            if e == EMPTY {
                break;
            }
            if e >> 32 == tag {
                let s = e as u32;
                if self.slots[s as usize].key == *key {
                    // Stale but not reclaimed yet (more than the per-lookup
                    // budget went stale at once): the old entry expires and
                    // the key starts afresh in the same slot.
                    let fresh = !self.stale(s, now);
                    if !fresh {
                        self.stats.expired += 1;
                        self.stats.created += 1;
                    }
                    let before = self.slots[s as usize].last_seen;
                    self.slots[s as usize].last_seen = now;
                    // The list is ordered by period of last use: an entry
                    // moves only when its period changes.
                    if before >> self.period_shift != now >> self.period_shift && self.tail != s {
                        self.unlink(s);
                        self.push_tail(s);
                    }
                    return if fresh {
                        Lookup::Hit(s)
                    } else {
                        Lookup::Created(s)
                    };
                }
            }
            i = (i + 1) & mask;
        }
        // Absent: a free slot, else the oldest entry if it is stale.
        let s = if self.free != NIL {
            let s = self.free;
            self.free = self.slots[s as usize].next;
            s
        } else if self.head != NIL && self.stale(self.head, now) {
            let s = self.head;
            self.evict(s);
            s
        } else {
            self.stats.overflowed += 1;
            return Lookup::Full;
        };
        // Insert at the first empty position from home (evict() may have
        // shifted entries, so the probe is redone).
        let mut i = tag as usize & mask;
        while self.index[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.index[i] = (tag << 32) | u64::from(s);
        let slot = &mut self.slots[s as usize];
        slot.key = *key;
        slot.hash = tag as u32;
        slot.last_seen = now;
        self.push_tail(s);
        self.stats.live += 1;
        self.stats.created += 1;
        Lookup::Created(s)
    }

    /// The latest time the table has seen, nanoseconds.
    pub(crate) fn latest(&self) -> u64 {
        self.latest
    }

    /// Takes in an entry of another table: `key`, last used at `last_seen`
    /// ns. Entries come in the other table's [`DynTable::entries`] order
    /// (oldest period first), so the LRU list stays ordered. A key already
    /// live keeps its slot and the later use; a new key takes a free slot.
    /// Nothing expires here. Returns the slot, `None` when no slot is free.
    pub(crate) fn carry(&mut self, key: &MaskedKey, last_seen: u64) -> Option<u32> {
        self.latest = self.latest.max(last_seen);
        let h = self.hash(key);
        let tag = (h as u32) as u64;
        let mask = self.index_mask;
        let mut i = tag as usize & mask;
        loop {
            let e = self.index[i];
            if e == EMPTY {
                break;
            }
            let s = e as u32;
            if e >> 32 == tag && self.slots[s as usize].key == *key {
                let slot = &mut self.slots[s as usize];
                if last_seen > slot.last_seen {
                    slot.last_seen = last_seen;
                    if self.tail != s {
                        self.unlink(s);
                        self.push_tail(s);
                    }
                }
                return Some(s);
            }
            i = (i + 1) & mask;
        }
        if self.free == NIL {
            return None;
        }
        let s = self.free;
        self.free = self.slots[s as usize].next;
        self.index[i] = (tag << 32) | u64::from(s);
        let slot = &mut self.slots[s as usize];
        slot.key = *key;
        slot.hash = tag as u32;
        slot.last_seen = last_seen;
        self.push_tail(s);
        self.stats.live += 1;
        self.stats.created += 1;
        Some(s)
    }

    /// Every live entry (stale ones included until reclaimed), oldest use
    /// first: its slot, its key and its last use in nanoseconds. O(live).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u32, &MaskedKey, u64)> + '_ {
        let mut s = self.head;
        std::iter::from_fn(move || {
            if s == NIL {
                return None;
            }
            let slot = &self.slots[s as usize];
            let item = (s, &slot.key, slot.last_seen);
            s = slot.next;
            Some(item)
        })
    }

    /// Every live slot (stale ones included until reclaimed), oldest first.
    #[cfg(test)]
    pub(crate) fn live_slots(&self) -> Vec<u32> {
        self.entries().map(|(slot, _, _)| slot).collect()
    }
}

/// Bytes of one slot record.
pub(crate) const SLOT_BYTES: usize = size_of::<Slot>();

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> MaskedKey {
        let mut k = MaskedKey::default();
        k.0[0] = n;
        k
    }

    fn t(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    #[test]
    fn hit_create_full_and_expiry() {
        let mut d = DynTable::new(3, 100, 7);
        assert_eq!(d.lookup(&key(1), t(0)), Lookup::Created(0));
        assert_eq!(d.lookup(&key(2), t(10)), Lookup::Created(1));
        assert_eq!(d.lookup(&key(1), t(20)), Lookup::Hit(0));
        assert_eq!(d.lookup(&key(3), t(30)), Lookup::Created(2));
        assert_eq!(d.lookup(&key(4), t(40)), Lookup::Full);
        assert_eq!(d.live_slots(), vec![1, 0, 2]);
        let last: Vec<(MaskedKey, u64)> = d.entries().map(|(_, k, at)| (*k, at)).collect();
        assert_eq!(last, vec![(key(2), 10), (key(1), 20), (key(3), 30)]);
        // key 2 last used at 10: stale at 110; the lookup reclaims it first.
        assert_eq!(d.lookup(&key(4), t(110)), Lookup::Created(1));
        let s = d.stats();
        assert_eq!((s.created, s.expired, s.overflowed, s.live), (4, 1, 1, 3));
        assert_eq!(d.expire(t(1_000)), 3);
        assert_eq!(d.stats().live, 0);
        // Time going backwards is the latest time seen: nothing is young again.
        assert!(matches!(d.lookup(&key(1), t(5)), Lookup::Created(_)));
    }

    proptest::proptest! {
        /// Against a model of last uses: a hit is never stale, a creation
        /// reuses only a free or stale slot, `Full` never leaves an entry
        /// idle for a period past the idle time, and live slots are unique.
        #[test]
        fn matches_a_model_of_last_uses(
            steps in proptest::collection::vec((0u32..24, 0u64..40), 1..400),
            cap in 1u32..12,
        ) {
            use std::collections::HashMap;
            let idle = 80;
            let period = idle / PERIODS_PER_IDLE;
            let mut d = DynTable::new(cap, idle, 5);
            let mut last: HashMap<u32, (u64, u32)> = HashMap::new(); // key -> (last use, slot)
            let mut now = 0u64;
            for (k, dt) in steps {
                now += dt;
                match d.lookup(&key(k), t(now)) {
                    Lookup::Hit(s) => {
                        let (seen, slot) = last[&k];
                        proptest::prop_assert!(now - seen < idle);
                        proptest::prop_assert_eq!(slot, s);
                        last.insert(k, (now, s));
                    }
                    Lookup::Created(s) => {
                        if let Some((seen, _)) = last.get(&k) {
                            proptest::prop_assert!(now - seen >= idle, "a live key was recreated");
                        }
                        // Whoever held the slot before was stale.
                        let old: Vec<u32> = last.iter().filter(|(_, v)| v.1 == s).map(|(k2, _)| *k2).collect();
                        for k2 in old {
                            proptest::prop_assert!(now - last[&k2].0 >= idle);
                            last.remove(&k2);
                        }
                        last.insert(k, (now, s));
                    }
                    Lookup::Full => {
                        proptest::prop_assert_eq!(d.stats().live, cap);
                        for (seen, _) in last.values() {
                            proptest::prop_assert!(now - seen < idle + period, "a long-idle entry blocked a creation");
                        }
                    }
                }
                let live = d.live_slots();
                let mut sorted = live.clone();
                sorted.sort_unstable();
                sorted.dedup();
                proptest::prop_assert_eq!(sorted.len(), live.len());
                proptest::prop_assert!(live.len() <= cap as usize);
            }
        }
    }

    #[test]
    fn churn_keeps_every_key_findable() {
        // Many keys through a small table with backward-shift deletions.
        let mut d = DynTable::new(64, 10, 1);
        let mut now = 0;
        for round in 0..200u32 {
            for k in 0..64u32 {
                let r = d.lookup(&key(round * 64 + k), t(now));
                assert!(matches!(r, Lookup::Created(_)), "{round} {k} {r:?}");
            }
            for k in 0..64u32 {
                assert!(matches!(
                    d.lookup(&key(round * 64 + k), t(now)),
                    Lookup::Hit(_)
                ));
            }
            now += 10;
        }
        assert_eq!(d.stats().created, 200 * 64);
        assert_eq!(d.stats().expired, 199 * 64);
    }
}
