//! Bounded tables of dynamic entries (dynamic queues of a flowset, instances
//! of a sched): masked key → dense slot, with idle expiry driven by `now`.
//!
//! # Structure
//! * `rec`: `capacity` fixed slot records, allocated once, one after the
//!   other in one array of 32-bit words: LRU links (2 words), last use
//!   (2 words), then the masked key *packed* to the words its mask can leave
//!   non-zero ([`KeyLayout`]: 2 words for `src-ip`, at most 11 for `all` on
//!   a link with instances). A record is 16 B plus 4 B per kept word: 24 B
//!   for `mask src-ip`, 60 B at most. A slot number is the dense id handed
//!   out.
//! * `index`: open addressing with linear probing, `2·capacity` rounded up to
//!   a power of two entries of 4 bytes (the slot number in 24 bits and a
//!   7-bit tag from the hash's top bits, compared before the key); the load
//!   factor stays at most 1/2. The home position comes from the hash's low
//!   bits. Removal shifts later entries back (no tombstones), so probe
//!   lengths do not degrade under churn; the homes it needs are computed
//!   again from the stored keys (the index keeps no hash).
//! * a free list of slots threaded through the LRU links, and a doubly linked
//!   list of live slots ordered by *period* of last use (a period is the
//!   largest power of two nanoseconds not above `idle / 8`): a hit moves its
//!   slot to the tail only when the period changed since the slot's previous
//!   use, so a busy queue costs no list work on most packets (the list
//!   touches two neighbouring slots, i.e. two cache misses, when it moves
//!   one).
//!
//! # Cost of a lookup
//! The caller builds the packed key straight from the packet, only the
//! kept words (`CompiledMask::pack`), and hashes it ([`DynTable::hash`]:
//! one folded 64×64→128-bit multiplication per pair of kept words, one for
//! `src-ip`; the number of pairs is fixed with the layout). A hit, inlined
//! into the caller, then compares `now` with the instant the oldest entry
//! goes stale, which the table keeps (set whenever the LRU list's head
//! changes; no record is read, and the reclaim check, out of line, runs
//! only once that instant has passed), reads the home entry and, when the
//! tag agrees, the slot record (one cache line, or two when a record
//! straddles a line: records are packed, not line-aligned), compares the
//! kept words with an early exit and writes the last use; it touches the
//! LRU list only when the period of last use changed. A probe past an
//! entry whose tag differs costs one index read. Creating an entry is out
//! of line.
//! A table of two-word keys (`mask src-ip`) is looked up with the key as
//! one 64-bit word ([`Hashed::Narrow`]): its stored words are compared as
//! one, with the same outcome and state as the general lookup.
//! Memory per slot: the record plus 8 to 16 B of index (8 B at a
//! power-of-two capacity): 32 B for `src-ip`, 68 B at most.
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
//! # Keys held in the overflow queue
//! A table whose owner has an overflow queue (or instance) can *hold* the
//! keys it sends there ([`DynTable::hold_overflow`]): a key the table had
//! no slot for is marked, and a marked key gets no slot of its own until
//! it has been absent from the overflow queue for the idle time, even when
//! a slot frees earlier (it goes on to the overflow queue, counted as
//! overflowed). Without the hold, a key whose packets wait in a long shared
//! overflow queue could take a freed slot, and its next packets, in a short
//! queue of their own, would leave before the earlier ones: a flow
//! reordered. With it, a flow's packets leave in order whenever the
//! overflow queue holds a packet less than the idle time (the condition
//! under which slot reuse keeps keys apart, crate docs). The marks are
//! per bucket of the key's hash (half of `capacity` rounded up to a power
//! of two buckets of 2 B, a period number modulo 2^16, 0 for none: 1 to
//! 2 B per slot): two keys in one bucket hold each other a little longer,
//! never shorter, and a mark 2^16 periods old reads as recent again (a
//! longer hold, never a shorter one). The period is the LRU list's; a mark
//! is kept `ceil(idle / period) + 1` whole periods, so a key is released
//! between the idle time and 1¼ of it after its last overflow.
//!
//! # Complexity
//! A lookup is O(1) expected (probe length bounded by the load factor; a
//! probe compares a 7-bit tag and reads a record only on a tag match), plus
//! at most [`EXPIRE_PER_LOOKUP`] expiries; each entry is expired once per
//! creation, so the expiry work is amortised O(1) per lookup (an eviction
//! rehashes the stored keys of the entries it shifts back, O(probe length)).
//! [`DynTable::expire`] is O(expired).

use std::mem::size_of;

use pspat_sched::Instant;

use crate::key::{hash_narrow, KeyLayout, MaskedKey, PackedKey};

/// Stale entries reclaimed at most per lookup (at least one creation per
/// lookup can happen, so two keep the table ahead of the churn).
pub(crate) const EXPIRE_PER_LOOKUP: usize = 2;

const NIL: u32 = u32::MAX;

/// Bits of an index entry that hold the slot number (slots are fewer than
/// `2^24`, [`crate::MAX_SLOTS`]); the 7 bits above hold the tag, the top bit
/// is clear in every entry, so [`EMPTY`] is no entry.
const SLOT_BITS: u32 = 24;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;
const EMPTY: u32 = u32::MAX;

/// Words of a slot record before its key: LRU links, then the last use in
/// nanoseconds as two words (low first).
const PREV: usize = 0;
const NEXT: usize = 1;
const SEEN: usize = 2;
const KEY: usize = 4;

/// Periods per idle time: the LRU list is ordered by period of last use, so
/// reclamation may come up to `idle / PERIODS_PER_IDLE` late.
pub(crate) const PERIODS_PER_IDLE: u64 = 8;

/// The index entry of slot `s` for a key of hash `h`: the hash's top 7 bits
/// as a tag, compared before the key (so a probe past another key reads
/// its slot only once in 128), and the slot.
#[inline]
fn entry(h: u64, s: u32) -> u32 {
    (((h >> 57) as u32) << SLOT_BITS) | s
}

/// A key ready for [`DynTable::lookup_key`], with its hash
/// ([`DynTable::hash`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hashed {
    /// The packed key of any layout.
    Wide(PackedKey, u64),
    /// The key of a two-word layout ([`KeyLayout::narrow`]) as one 64-bit
    /// word, first word low ([`crate::key::CompiledMask::pack_narrow`]):
    /// compared whole.
    Narrow(u64, u64),
}

impl Hashed {
    /// The hash.
    #[inline]
    pub(crate) fn hash(&self) -> u64 {
        match *self {
            Hashed::Wide(_, h) | Hashed::Narrow(_, h) => h,
        }
    }
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
    /// Slot records, `stride` words each: `PREV`, `NEXT`, `SEEN` (two
    /// words), then the packed key.
    rec: Vec<u32>,
    stride: usize,
    layout: KeyLayout,
    index: Vec<u32>,
    index_mask: usize,
    free: u32,
    head: u32,
    /// A lower bound of the instant the head of the LRU list goes stale
    /// (its last use plus the idle time; `u64::MAX` with no head): a
    /// lookup before it skips the reclaim check without reading the
    /// head's record. Exact when the head is set; a hit on the head that
    /// keeps it in place leaves it lower, which costs one reclaim call
    /// (that finds nothing and sets it again).
    head_stale_at: u64,
    tail: u32,
    seed: u64,
    idle_ns: u64,
    /// The LRU list's granularity as a shift: a period is the largest power
    /// of two nanoseconds not above `idle_ns / 8` (at least 1 ns).
    period_shift: u32,
    latest: u64,
    stats: DynamicStats,
    /// Overflow marks by hash bucket ([`DynTable::hold_overflow`]): the
    /// period of the key's latest overflow (never 0: 0 is no mark); empty
    /// when the table holds nothing.
    held: Vec<u16>,
    /// Periods a mark is kept: `ceil(idle / period) + 1`.
    hold_periods: u16,
}

impl DynTable {
    /// A table of `capacity` slots (1..=2^24, checked by the caller) whose
    /// entries expire after `idle_ns` (≥ 1) without use, for keys of
    /// `layout`.
    pub(crate) fn new(capacity: u32, idle_ns: u64, seed: u64, layout: KeyLayout) -> Self {
        let cap = capacity.clamp(1, 1 << SLOT_BITS) as usize;
        let index_len = (2 * cap).next_power_of_two();
        let stride = KEY + layout.width();
        let mut rec = vec![0u32; cap * stride];
        for (i, r) in rec.chunks_exact_mut(stride).enumerate() {
            r[NEXT] = if i + 1 < cap { (i + 1) as u32 } else { NIL };
            r[PREV] = NIL;
        }
        DynTable {
            rec,
            stride,
            layout,
            index: vec![EMPTY; index_len],
            index_mask: index_len - 1,
            free: 0,
            head: NIL,
            head_stale_at: u64::MAX,
            tail: NIL,
            seed,
            idle_ns: idle_ns.max(1),
            period_shift: (idle_ns / PERIODS_PER_IDLE).max(1).ilog2(),
            latest: 0,
            stats: DynamicStats {
                capacity: cap as u32,
                ..DynamicStats::default()
            },
            held: Vec::new(),
            hold_periods: 0,
        }
    }

    /// With `hold`, the table holds the keys it finds no slot for (module
    /// docs, *Keys held in the overflow queue*): for an owner with an
    /// overflow queue or instance. Allocates the marks once.
    pub(crate) fn hold_overflow(mut self, hold: bool) -> Self {
        if !hold {
            return self;
        }
        let buckets = (self.stats.capacity as usize)
            .next_power_of_two()
            .div_ceil(2);
        self.held = vec![0; buckets];
        let period = 1u64 << self.period_shift;
        let periods = self.idle_ns.div_ceil(period).saturating_add(1);
        // At most 17: a period is at least a sixteenth of the idle time.
        self.hold_periods = u16::try_from(periods).unwrap_or(u16::MAX);
        self
    }

    /// The mark bucket of hash `h` (bits the index home and the tag do not
    /// use first).
    #[inline]
    fn hold_bucket(&self, h: u64) -> usize {
        ((h >> 32) as usize) & (self.held.len() - 1)
    }

    /// The period number of `now` (ns) as a mark, never 0.
    #[inline]
    fn hold_stamp(&self, now: u64) -> u16 {
        ((now >> self.period_shift) as u16).max(1)
    }

    /// Whether the key of hash `h` went to the overflow queue within the
    /// hold at `now`; a stamp that wrapped around reads as recent (a longer
    /// hold, never a shorter one).
    #[inline]
    fn held_at(&self, h: u64, now: u64) -> bool {
        if self.held.is_empty() {
            return false;
        }
        let mark = self.held[self.hold_bucket(h)];
        mark != 0 && self.hold_stamp(now).wrapping_sub(mark) <= self.hold_periods
    }

    /// Marks the key of hash `h` as sent to the overflow queue at `now`.
    #[inline]
    fn mark_held(&mut self, h: u64, now: u64) {
        if !self.held.is_empty() {
            let b = self.hold_bucket(h);
            self.held[b] = self.hold_stamp(now);
        }
    }

    /// Bytes this table holds: slot records, index and overflow marks.
    pub(crate) fn memory_bytes(&self) -> usize {
        (self.rec.capacity() + self.index.capacity()) * size_of::<u32>()
            + self.held.capacity() * size_of::<u16>()
    }

    /// Bytes of one slot record.
    pub(crate) fn slot_bytes(&self) -> usize {
        self.stride * size_of::<u32>()
    }

    /// The layout of the table's keys.
    pub(crate) fn layout(&self) -> KeyLayout {
        self.layout
    }

    pub(crate) fn stats(&self) -> DynamicStats {
        self.stats
    }

    fn clock(&mut self, now: Instant) -> u64 {
        self.latest = self.latest.max(now.as_nanos());
        self.latest
    }

    #[inline]
    fn word(&self, s: u32, field: usize) -> u32 {
        self.rec
            .get(s as usize * self.stride + field)
            .copied()
            .unwrap_or(NIL)
    }

    #[inline]
    fn set_word(&mut self, s: u32, field: usize, v: u32) {
        if let Some(w) = self.rec.get_mut(s as usize * self.stride + field) {
            *w = v;
        }
    }

    #[inline]
    fn seen(&self, s: u32) -> u64 {
        let at = s as usize * self.stride + SEEN;
        match self.rec.get(at..at + 2) {
            Some(w) => u64::from(w[0]) | (u64::from(w[1]) << 32),
            None => 0,
        }
    }

    #[inline]
    fn set_seen(&mut self, s: u32, ns: u64) {
        let at = s as usize * self.stride + SEEN;
        if let Some(w) = self.rec.get_mut(at..at + 2) {
            w[0] = ns as u32;
            w[1] = (ns >> 32) as u32;
        }
    }

    /// The packed key slot `s` holds.
    fn stored(&self, s: u32) -> PackedKey {
        let at = s as usize * self.stride;
        let mut p = PackedKey::default();
        if let Some(r) = self.rec.get(at + KEY..at + self.stride) {
            for (o, w) in p.0.iter_mut().zip(r) {
                *o = *w;
            }
        }
        p
    }

    fn set_stored(&mut self, s: u32, key: &PackedKey) {
        let at = s as usize * self.stride;
        if let Some(r) = self.rec.get_mut(at + KEY..at + self.stride) {
            for (o, w) in r.iter_mut().zip(&key.0) {
                *o = *w;
            }
        }
    }

    /// The home position in the index of the key slot `s` holds (the hash
    /// is computed again: the index keeps only a tag of it).
    fn home(&self, s: u32) -> usize {
        (self.layout.hash(&self.stored(s), self.seed) as u32) as usize & self.index_mask
    }

    fn stale(&self, slot: u32, now: u64) -> bool {
        now - self.seen(slot) >= self.idle_ns
    }

    fn unlink(&mut self, s: u32) {
        let (prev, next) = (self.word(s, PREV), self.word(s, NEXT));
        if prev == NIL {
            self.set_head(next);
        } else {
            self.set_word(prev, NEXT, next);
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.set_word(next, PREV, prev);
        }
    }

    /// Makes `s` (or [`NIL`]) the head of the LRU list, with the instant
    /// it goes stale.
    #[inline]
    fn set_head(&mut self, s: u32) {
        self.head = s;
        self.head_stale_at = if s == NIL {
            u64::MAX
        } else {
            self.seen(s).saturating_add(self.idle_ns)
        };
    }

    /// Whether `head_stale_at` is a lower bound of the head's staleness
    /// instant (`u64::MAX` with no head): the lookup's skipped check is
    /// then never one that would have reclaimed.
    #[cfg(test)]
    pub(crate) fn head_deadline_holds(&self) -> bool {
        if self.head == NIL {
            self.head_stale_at == u64::MAX
        } else {
            self.head_stale_at <= self.seen(self.head).saturating_add(self.idle_ns)
        }
    }

    /// Moves live slot `s` to the tail of the LRU list.
    #[inline(never)]
    fn move_to_tail(&mut self, s: u32) {
        self.unlink(s);
        self.push_tail(s);
    }

    fn push_tail(&mut self, s: u32) {
        self.set_word(s, PREV, self.tail);
        self.set_word(s, NEXT, NIL);
        if self.tail == NIL {
            self.set_head(s);
        } else {
            self.set_word(self.tail, NEXT, s);
        }
        self.tail = s;
    }

    /// Takes slot `s` out of the index (backward-shift deletion) and the LRU
    /// list; it is not put on the free list.
    fn evict(&mut self, s: u32) {
        let mask = self.index_mask;
        let mut i = self.home(s);
        // The entry is there: every live slot has one.
        let mut probes = 0;
        while self.index[i] & SLOT_MASK != s && probes <= mask {
            i = (i + 1) & mask;
            probes += 1;
        }
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let e = self.index[j];
            if e == EMPTY {
                break;
            }
            let home = self.home(e & SLOT_MASK);
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
    #[inline(never)]
    fn reclaim(&mut self, now: u64, budget: usize) -> usize {
        let mut n = 0;
        while n < budget && self.head != NIL && self.stale(self.head, now) {
            let s = self.head;
            self.evict(s);
            self.set_word(s, NEXT, self.free);
            self.free = s;
            n += 1;
        }
        // The head may have been used since it became the head.
        let head = self.head;
        self.set_head(head);
        n
    }

    /// Reclaims every entry unused for the idle time; returns how many.
    pub(crate) fn expire(&mut self, now: Instant) -> usize {
        let now = self.clock(now);
        self.reclaim(now, usize::MAX)
    }

    /// The packed form of `key` and the hash [`DynTable::lookup_hashed`]
    /// expects.
    #[inline]
    pub(crate) fn prepare(&self, key: &MaskedKey) -> (PackedKey, u64) {
        let p = self.layout.pack(key);
        let h = self.layout.hash(&p, self.seed);
        (p, h)
    }

    /// The hash [`DynTable::lookup_hashed`] expects for a packed key.
    #[inline(always)] // on the per-packet path
    pub(crate) fn hash(&self, key: &PackedKey) -> u64 {
        self.layout.hash(key, self.seed)
    }

    /// [`DynTable::hash`] of a two-word key given as one 64-bit word (the
    /// same value).
    #[inline(always)] // on the per-packet path
    pub(crate) fn hash_narrow(&self, key: u64) -> u64 {
        hash_narrow(key, self.seed)
    }

    /// [`DynTable::lookup_hashed`] of either form of a key; a
    /// [`Hashed::Narrow`] key only for a table of a two-word layout.
    #[inline(always)] // the per-packet hit path
    pub(crate) fn lookup_key(&mut self, key: &Hashed, now: Instant) -> Lookup {
        match key {
            Hashed::Wide(p, h) => self.lookup_hashed(p, *h, now),
            Hashed::Narrow(k, h) => self.lookup_narrow(*k, *h, now),
        }
    }

    /// Reads the index entry at `hash`'s home so that a later lookup finds
    /// it in cache; the caller passes the result to `std::hint::black_box`
    /// (so the load happens).
    #[inline]
    pub(crate) fn touch_index(&self, hash: u64) -> u64 {
        u64::from(self.index[(hash as u32) as usize & self.index_mask])
    }

    /// Reads the slot the index entry at `hash`'s home names, if any (after
    /// [`DynTable::touch_index`], so that both loads overlap across packets).
    #[inline]
    pub(crate) fn touch_slot(&self, hash: u64) -> u64 {
        let e = self.index[(hash as u32) as usize & self.index_mask];
        if e == EMPTY {
            u64::from(e)
        } else {
            self.seen(e & SLOT_MASK)
        }
    }

    /// The slot of `key`, created if absent and a slot is free or stale.
    #[cfg(test)]
    pub(crate) fn lookup(&mut self, key: &MaskedKey, now: Instant) -> Lookup {
        let (p, h) = self.prepare(key);
        self.lookup_hashed(&p, h, now)
    }

    /// Where `key` (hash `h`) is: `Ok(slot)`, or `Err(position)` of the
    /// first empty index entry from its home.
    #[inline(always)]
    fn find(&self, key: &PackedKey, h: u64) -> Result<u32, usize> {
        let tag = entry(h, 0);
        let width = self.stride - KEY;
        let mask = self.index_mask;
        let mut i = (h as u32) as usize & mask;
        loop {
            let e = self.index[i];
            if e == EMPTY {
                return Err(i);
            }
            if e & !SLOT_MASK == tag {
                let s = e & SLOT_MASK;
                let at = s as usize * self.stride + KEY;
                if let Some(r) = self.rec.get(at..at + width) {
                    // Word by word with an early exit: a key is a few words,
                    // and a loop the compiler does not vectorise costs least.
                    if r.iter().zip(&key.0).all(|(a, b)| a == b) {
                        return Ok(s);
                    }
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// [`DynTable::find`] for a table of a two-word layout, the key as one
    /// 64-bit word: the stored words are compared as one. `None` when
    /// absent.
    #[inline(always)]
    fn find_narrow(&self, key: u64, h: u64) -> Option<u32> {
        debug_assert_eq!(self.stride, KEY + 2);
        let tag = entry(h, 0);
        let mask = self.index_mask;
        let mut i = (h as u32) as usize & mask;
        loop {
            let e = self.index[i];
            if e == EMPTY {
                return None;
            }
            if e & !SLOT_MASK == tag {
                let s = e & SLOT_MASK;
                let at = s as usize * self.stride + KEY;
                if let Some(&[lo, hi]) = self.rec.get(at..at + 2) {
                    if (u64::from(lo) | (u64::from(hi) << 32)) == key {
                        return Some(s);
                    }
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// [`DynTable::lookup_hashed`] for a table of a two-word layout
    /// ([`Hashed::Narrow`]): the same outcome and state.
    #[inline(always)] // the per-packet hit path
    pub(crate) fn lookup_narrow(&mut self, key: u64, h: u64, now: Instant) -> Lookup {
        let now = self.clock(now);
        if now >= self.head_stale_at {
            self.reclaim(now, EXPIRE_PER_LOOKUP);
        }
        match self.find_narrow(key, h) {
            Some(s) => self.hit(s, now),
            None => self.create(&PackedKey::from_narrow(key), h, now),
        }
    }

    /// The lookup of a key (the slot of the key, created if absent and a
    /// slot is free or stale) with the key packed and hashed
    /// ([`DynTable::prepare`]). The hit path is inlined into the caller;
    /// reclaiming and creating are not.
    #[inline(always)] // the per-packet hit path
    pub(crate) fn lookup_hashed(&mut self, key: &PackedKey, h: u64, now: Instant) -> Lookup {
        let now = self.clock(now);
        if now >= self.head_stale_at {
            // Out of line: reclaims what is stale, oldest first, and
            // refreshes `head_stale_at`.
            self.reclaim(now, EXPIRE_PER_LOOKUP);
        }
        match self.find(key, h) {
            Ok(s) => self.hit(s, now),
            Err(_) => self.create(key, h, now),
        }
    }

    /// A lookup that found `s` at `now` (ns): its last use, its place in
    /// the LRU list, and whether it had gone stale.
    #[inline(always)] // the per-packet hit path
    fn hit(&mut self, s: u32, now: u64) -> Lookup {
        // Stale but not reclaimed yet (more than the per-lookup budget
        // went stale at once): the old entry expires and the key starts
        // afresh in the same slot.
        let at = s as usize * self.stride + SEEN;
        let Some(seen) = self
            .rec
            .get_mut(at..at + 2)
            .and_then(|w| <&mut [u32; 2]>::try_from(w).ok())
        else {
            // Not reached: a slot in the index is below the capacity.
            self.stats.overflowed += 1;
            return Lookup::Full;
        };
        let before = u64::from(seen[0]) | (u64::from(seen[1]) << 32);
        *seen = [now as u32, (now >> 32) as u32];
        let fresh = now - before < self.idle_ns;
        if !fresh {
            self.stats.expired += 1;
            self.stats.created += 1;
        }
        // The list is ordered by period of last use: an entry moves
        // only when its period changes.
        if (before ^ now) >> self.period_shift != 0 && self.tail != s {
            self.move_to_tail(s);
        }
        if fresh {
            Lookup::Hit(s)
        } else {
            Lookup::Created(s)
        }
    }

    /// A new entry for `key` (hash `h`), absent from the table, at `now`
    /// (ns): a free slot, else the oldest entry if it is stale, else
    /// [`Lookup::Full`]; [`Lookup::Full`] too for a key held in the
    /// overflow queue (module docs), which is marked again.
    #[inline(never)]
    fn create(&mut self, key: &PackedKey, h: u64, now: u64) -> Lookup {
        if self.held_at(h, now) {
            self.mark_held(h, now);
            self.stats.overflowed += 1;
            return Lookup::Full;
        }
        let s = if self.free != NIL {
            let s = self.free;
            self.free = self.word(s, NEXT);
            s
        } else if self.head != NIL && self.stale(self.head, now) {
            let s = self.head;
            self.evict(s);
            s
        } else {
            self.mark_held(h, now);
            self.stats.overflowed += 1;
            return Lookup::Full;
        };
        // Insert at the first empty position from home (evict() may have
        // shifted entries, so the probe is redone).
        let mask = self.index_mask;
        let mut i = (h as u32) as usize & mask;
        while self.index[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.index[i] = entry(h, s);
        self.set_stored(s, key);
        self.set_seen(s, now);
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
    /// Nothing expires here. Returns the slot, `None` when no slot is free
    /// or the key is held in the overflow queue (marked then at the latest
    /// time the table has seen, as a lookup would).
    pub(crate) fn carry(&mut self, key: &MaskedKey, last_seen: u64) -> Option<u32> {
        self.latest = self.latest.max(last_seen);
        let (p, h) = self.prepare(key);
        match self.find(&p, h) {
            Ok(s) => {
                if last_seen > self.seen(s) {
                    self.set_seen(s, last_seen);
                    if self.tail != s {
                        self.unlink(s);
                        self.push_tail(s);
                    }
                }
                Some(s)
            }
            Err(_) if self.free == NIL || self.held_at(h, self.latest) => {
                self.mark_held(h, self.latest);
                None
            }
            Err(i) => {
                let s = self.free;
                self.free = self.word(s, NEXT);
                self.index[i] = entry(h, s);
                self.set_stored(s, &p);
                self.set_seen(s, last_seen);
                self.push_tail(s);
                self.stats.live += 1;
                self.stats.created += 1;
                Some(s)
            }
        }
    }

    /// Every live entry (stale ones included until reclaimed), oldest use
    /// first: its slot, its key and its last use in nanoseconds. O(live).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u32, MaskedKey, u64)> + '_ {
        let mut s = self.head;
        std::iter::from_fn(move || {
            if s == NIL {
                return None;
            }
            let p = self.stored(s);
            let item = (
                s,
                self.layout.unpack(&p.0[..self.layout.width()]),
                self.seen(s),
            );
            s = self.word(s, NEXT);
            Some(item)
        })
    }

    /// Every live slot (stale ones included until reclaimed), oldest first.
    #[cfg(test)]
    pub(crate) fn live_slots(&self) -> Vec<u32> {
        self.entries().map(|(slot, _, _)| slot).collect()
    }
}

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
    fn a_key_sent_to_the_overflow_queue_gets_no_slot_until_idle_there() {
        // Idle 100 ns: periods of 8 ns, a mark kept 14 periods (112 ns).
        let mut held = DynTable::new(1, 100, 7, KeyLayout::full()).hold_overflow(true);
        let mut plain = DynTable::new(1, 100, 7, KeyLayout::full());
        for d in [&mut held, &mut plain] {
            assert_eq!(d.lookup(&key(1), t(0)), Lookup::Created(0));
            assert_eq!(d.lookup(&key(2), t(10)), Lookup::Full);
            assert_eq!(d.lookup(&key(2), t(60)), Lookup::Full);
        }
        // Key 1 is stale from 100 on: without the hold, key 2 takes its
        // slot while its packets of 10 and 60 may still wait in the
        // overflow queue.
        assert_eq!(plain.lookup(&key(2), t(110)), Lookup::Created(0));
        // With it, key 2 goes on to the overflow queue while it keeps
        // coming, and until it has been away from it for the idle time.
        assert_eq!(held.lookup(&key(2), t(110)), Lookup::Full);
        assert_eq!(held.lookup(&key(2), t(160)), Lookup::Full);
        assert_eq!(held.lookup(&key(2), t(259)), Lookup::Full, "99 ns away");
        assert_eq!(held.lookup(&key(2), t(340)), Lookup::Full, "81 ns away");
        assert_eq!(
            held.lookup(&key(2), t(460)),
            Lookup::Created(0),
            "120 ns away"
        );
        // A key that never overflowed takes a free slot at once, unless it
        // shares a mark's bucket with a held key (held a little longer).
        let mut d = DynTable::new(8, 100, 7, KeyLayout::full()).hold_overflow(true);
        let bucket = |d: &DynTable, k: u32| d.hold_bucket(d.prepare(&key(k)).1);
        for k in 1..=8 {
            assert_eq!(d.lookup(&key(k), t(0)), Lookup::Created(k - 1));
        }
        assert_eq!(d.lookup(&key(9), t(2)), Lookup::Full);
        assert_eq!(d.lookup(&key(9), t(60)), Lookup::Full);
        let other = (10..)
            .find(|&k| bucket(&d, k) != bucket(&d, 9))
            .expect("another bucket");
        let same = (10..)
            .find(|&k| bucket(&d, k) == bucket(&d, 9))
            .expect("the same bucket");
        assert_eq!(
            d.lookup(&key(same), t(110)),
            Lookup::Full,
            "shares the mark"
        );
        assert!(matches!(d.lookup(&key(other), t(110)), Lookup::Created(_)));
        assert_eq!(d.lookup(&key(9), t(111)), Lookup::Full, "held");
        assert_eq!(d.stats().overflowed, 4);
    }

    #[test]
    fn carrying_a_held_key_finds_no_slot_and_marks_it() {
        let mut d = DynTable::new(2, 100, 7, KeyLayout::full()).hold_overflow(true);
        assert_eq!(d.carry(&key(1), 0), Some(0));
        assert_eq!(d.carry(&key(2), 5), Some(1));
        // No slot: key 3's packets go to the overflow queue, and it is
        // held there.
        assert_eq!(d.carry(&key(3), 10), None);
        // At 110 keys 1 and 2 are stale and their slots free, but key 3
        // is held (100 ns away at most); held, it is not taken in either.
        assert_eq!(d.lookup(&key(3), t(110)), Lookup::Full);
        assert_eq!(d.carry(&key(3), 111), None);
        assert_eq!(d.stats().live, 0);
        assert!(matches!(d.lookup(&key(3), t(240)), Lookup::Created(_)));
        let mut fresh = DynTable::new(2, 100, 7, KeyLayout::full()).hold_overflow(true);
        assert_eq!(fresh.carry(&key(3), 10), Some(0));
    }

    #[test]
    fn hit_create_full_and_expiry() {
        let mut d = DynTable::new(3, 100, 7, KeyLayout::full());
        assert_eq!(d.lookup(&key(1), t(0)), Lookup::Created(0));
        assert_eq!(d.lookup(&key(2), t(10)), Lookup::Created(1));
        assert_eq!(d.lookup(&key(1), t(20)), Lookup::Hit(0));
        assert_eq!(d.lookup(&key(3), t(30)), Lookup::Created(2));
        assert_eq!(d.lookup(&key(4), t(40)), Lookup::Full);
        assert_eq!(d.live_slots(), vec![1, 0, 2]);
        let last: Vec<(MaskedKey, u64)> = d.entries().map(|(_, k, at)| (k, at)).collect();
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

    #[test]
    fn a_head_used_again_in_its_period_expires_from_its_last_use() {
        // idle 800 ns: periods of 64 ns. Key 1 is the head; its second use
        // (at 20, same period) leaves it at the head with the deadline
        // cached from its first use (800).
        let mut d = DynTable::new(4, 800, 3, KeyLayout::full());
        assert_eq!(d.lookup(&key(1), t(0)), Lookup::Created(0));
        assert_eq!(d.lookup(&key(2), t(10)), Lookup::Created(1));
        assert_eq!(d.lookup(&key(1), t(20)), Lookup::Hit(0));
        assert!(d.head_deadline_holds());
        // Past the cached deadline, before the real one (820): the check
        // runs, reclaims nothing, and moves the deadline.
        assert_eq!(d.lookup(&key(2), t(805)), Lookup::Hit(1));
        assert_eq!(d.stats().expired, 0);
        assert!(d.head_deadline_holds());
        // At the real deadline key 1 is reclaimed, and its key starts afresh.
        assert_eq!(d.lookup(&key(3), t(820)), Lookup::Created(0));
        assert_eq!((d.stats().expired, d.stats().live), (1, 2));
        assert!(matches!(d.lookup(&key(1), t(821)), Lookup::Created(_)));
        assert!(d.head_deadline_holds());
        assert_eq!(d.expire(t(u64::MAX)), 3);
        assert!(d.head_deadline_holds());
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
            let mut d = DynTable::new(cap, idle, 5, KeyLayout::full());
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
                // The cached deadline never lets a stale head go unchecked.
                proptest::prop_assert!(d.head_deadline_holds());
                let live = d.live_slots();
                let mut sorted = live.clone();
                sorted.sort_unstable();
                sorted.dedup();
                proptest::prop_assert_eq!(sorted.len(), live.len());
                proptest::prop_assert!(live.len() <= cap as usize);
            }
        }
    }

    /// A two-word layout (`mask src-ip`: the source word and word 9).
    fn narrow_layout() -> KeyLayout {
        let mut m = pspat_config::FlowMask::default();
        m.set(pspat_config::MaskField::SrcIp, "0xffffffff").unwrap();
        let layout = KeyLayout::new(&crate::key::CompiledMask::new(&m).unwrap(), false);
        assert!(layout.narrow().is_some());
        layout
    }

    proptest::proptest! {
        /// Lookups of one-word keys ([`DynTable::lookup_narrow`]) give
        /// the outcomes, slots and counters of the general lookup of the
        /// same keys, through creation, hits, expiry and a full table.
        #[test]
        fn narrow_lookups_match_the_general_lookup(
            steps in proptest::collection::vec((0u32..24, 0u32..3, 0u64..40), 1..400),
            cap in 1u32..12,
            seed in proptest::prelude::any::<u64>(),
        ) {
            let layout = narrow_layout();
            let mut general = DynTable::new(cap, 80, seed, layout);
            let mut narrow = DynTable::new(cap, 80, seed, layout);
            let mut now = 0u64;
            for (src, meta, dt) in steps {
                now += dt;
                let mut mk = MaskedKey::default();
                mk.0[0] = src.wrapping_mul(0x9e37_79b9);
                mk.0[9] = meta << 20;
                let (p, h) = general.prepare(&mk);
                let k = u64::from(p.0[0]) | (u64::from(p.0[1]) << 32);
                proptest::prop_assert_eq!(narrow.hash_narrow(k), h);
                let want = general.lookup_hashed(&p, h, t(now));
                let got = narrow.lookup_key(&Hashed::Narrow(k, h), t(now));
                proptest::prop_assert_eq!(got, want);
                proptest::prop_assert_eq!(narrow.stats(), general.stats());
                proptest::prop_assert_eq!(narrow.live_slots(), general.live_slots());
            }
            let e: Vec<_> = narrow.entries().collect();
            proptest::prop_assert_eq!(e, general.entries().collect::<Vec<_>>());
        }
    }

    #[test]
    fn keys_of_one_home_stay_findable_through_expiry() {
        // 48 keys whose hashes share one home position (and often a tag):
        // one probe chain of 48 entries, shortened by backward shifts.
        let idle = 100;
        let mut d = DynTable::new(4096, idle, 11, KeyLayout::full());
        let home = |d: &DynTable, k: u32| (d.prepare(&key(k)).1 as u32) as usize & d.index_mask;
        let target = home(&d, 0);
        let keys: Vec<u32> = (0..).filter(|&k| home(&d, k) == target).take(48).collect();
        let tags: std::collections::HashSet<u32> = keys
            .iter()
            .map(|&k| entry(d.prepare(&key(k)).1, 0))
            .collect();
        assert!(tags.len() < keys.len(), "some keys share the tag too");
        let slots: Vec<u32> = keys
            .iter()
            .map(|&k| match d.lookup(&key(k), t(0)) {
                Lookup::Created(s) => s,
                other => panic!("{k}: {other:?}"),
            })
            .collect();
        // Odd keys are used again at 60; even ones go stale at 100.
        for (i, &k) in keys.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
            assert_eq!(d.lookup(&key(k), t(60)), Lookup::Hit(slots[i]));
        }
        assert_eq!(d.expire(t(120)), 24);
        for (i, &k) in keys.iter().enumerate() {
            let r = d.lookup(&key(k), t(130));
            if i % 2 == 1 {
                assert_eq!(r, Lookup::Hit(slots[i]), "key {k} kept its slot");
            } else {
                assert!(matches!(r, Lookup::Created(_)), "key {k}: {r:?}");
            }
        }
        let live = d.index.iter().filter(|&&e| e != EMPTY).count();
        assert_eq!((d.stats().live as usize, live), (48, 48));
        let mut again: Vec<u32> = keys
            .iter()
            .map(|&k| match d.lookup(&key(k), t(140)) {
                Lookup::Hit(s) => s,
                other => panic!("{k}: {other:?}"),
            })
            .collect();
        again.sort_unstable();
        again.dedup();
        assert_eq!(again.len(), 48, "distinct slots");
    }

    #[test]
    fn churn_keeps_every_key_findable() {
        // Many keys through a small table with backward-shift deletions.
        let mut d = DynTable::new(64, 10, 1, KeyLayout::full());
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
