//! Descriptor recycling: a transmitter hands each descriptor it is done
//! with back to the client that owns it, and the owner reuses it only after
//! that, with one atomic read-modify-write per 64 descriptors rather than
//! per packet.
//!
//! Source: \[J\] Rizzo, Valente, Lettieri, Maffione, "PSPAT: software
//! packet scheduling at hardware speed", §3.3 (transmitters release the
//! packets' resources after transmission, in batches); the bitmaps are this
//! crate's own.
//!
//! # Roles
//! * The **owner** (a client) holds [`FreeDescriptors`]: a private bitmap
//!   of free descriptors and a cursor. It allocates from it without any
//!   atomic operation; only when it is empty does it refill from its
//!   [`ReturnedSet`], swapping each non-zero word to zero (Acquire).
//! * A **transmitter** (the arbiter, a dispatcher) records each descriptor
//!   it is done with in its [`Recycler`] ([`Recycler::mark`], no atomics),
//!   and once per round or batch [`Recycler::flush`]es: one `fetch_or`
//!   (Release) per dirty 64-descriptor word into the owner's
//!   [`ReturnedSet`].
//!
//! # Guarantee: no reuse before return
//! Everything a transmitter did with a descriptor before the `flush` that
//! returned it (reading its contents, writing a completion) happens-before
//! everything the owner does with it after the [`FreeDescriptors::alloc`]
//! that hands it out again: the `fetch_or` is Release and the owner's swap
//! that picks the bit up is Acquire. So the owner's next write of the
//! descriptor cannot be seen by the transmitter's earlier read, and the
//! owner sees the transmitter's completion writes. The descriptor contents
//! themselves may then be plain Relaxed atomics: the owner writes them
//! before the mailbox push that publishes the descriptor (Release), and a
//! transmitter reads them after the pop that received it (Acquire).
//!
//! loom checks the second half: with the `fetch_or` or the swap weakened to
//! Relaxed (tried on a local copy, not kept), the owner of
//! `recycle_no_reuse_before_return` in `tests/loom_handshakes.rs` reuses
//! the descriptor without seeing the transmitter's record of what it read.
//! The first half (a read that must not see a later write) is load
//! buffering, which loom does not explore; it rests on the same
//! Release/Acquire edge.
//!
//! # Memory ordering
//! | Operation | Side | Ordering | Pairs with |
//! |---|---|---|---|
//! | `fetch_or` in `Recycler::flush` | transmitter | Release | the Acquire swap in `FreeDescriptors::alloc` |
//! | word peek in `alloc` | owner | Relaxed | none: a non-zero word is then swapped with Acquire; a zero one is retried at the next refill |
//! | word swap in `alloc` | owner | Acquire | the Release `fetch_or` in `flush` |
//!
//! # Complexity
//! `alloc`: O(1) amortised (a cursor over the local words; a refill reads
//! `descriptors / 64` words once per up to `descriptors` allocations);
//! `free`, `mark`: O(1), no atomics; `flush`: one `fetch_or` per dirty word.
//! Nothing allocates after construction.

use std::fmt;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

/// The most descriptors one owner may have: their indices are `u32`.
pub const MAX_DESCRIPTORS: usize = 1 << 32;

/// Bitmap words for `descriptors`, capped at [`MAX_DESCRIPTORS`].
fn words_for(descriptors: usize) -> usize {
    descriptors.min(MAX_DESCRIPTORS).div_ceil(64)
}

/// The descriptors transmitters have returned to one owner and the owner
/// has not taken back yet (its `done` bitmap). Shared by the owner and every
/// transmitter; `Send + Sync`. On its own 128-byte block.
///
/// # Examples
/// ```
/// use pspat_mailbox::{FreeDescriptors, Recycler, ReturnedSet};
/// let returned = ReturnedSet::new(64);
/// let mut free = FreeDescriptors::new(64);
/// let taken: Vec<u32> = (0..64).map(|_| free.alloc(&returned).unwrap()).collect();
/// assert_eq!(free.alloc(&returned), None, "all 64 in flight");
/// let mut recycler = Recycler::new(1, 64);
/// recycler.mark(0, taken[10]);
/// recycler.flush(|_owner| &returned);
/// assert_eq!(free.alloc(&returned), Some(taken[10]));
/// ```
pub struct ReturnedSet {
    words: CachePadded<Box<[AtomicU64]>>,
}

impl ReturnedSet {
    /// An empty set for descriptors `0..descriptors` (at most
    /// [`MAX_DESCRIPTORS`]).
    pub fn new(descriptors: usize) -> Self {
        ReturnedSet {
            words: CachePadded::new(
                (0..words_for(descriptors))
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            ),
        }
    }

    /// Its 64-bit words: `descriptors / 64`, rounded up.
    pub fn words(&self) -> usize {
        self.words.len()
    }

    /// True if nothing is waiting to be taken back. A snapshot (a
    /// transmitter may return one at any moment); for tests and
    /// diagnostics.
    pub fn is_empty(&self) -> bool {
        // Relaxed: a snapshot; nothing is read on the strength of it.
        self.words.iter().all(|w| w.load(Ordering::Relaxed) == 0)
    }

    /// True when every descriptor `0..descriptors` is in the set: nothing of
    /// the owner is in flight and the owner gave back its free ones
    /// ([`FreeDescriptors::give_back_all`]). A slot whose owner left is
    /// then quiescent: no transmitter holds one of its descriptors, and
    /// (Acquire loads, pairing with every Release `fetch_or` that set the
    /// bits) whatever each returner did before returning happens-before
    /// what the caller does next. O(words).
    pub fn holds_all(&self, descriptors: usize) -> bool {
        let descriptors = descriptors.min(MAX_DESCRIPTORS);
        self.words.iter().enumerate().all(|(i, w)| {
            let lo = i * 64;
            let want = match descriptors.saturating_sub(lo) {
                0 => 0,
                n if n >= 64 => u64::MAX,
                n => (1u64 << n) - 1,
            };
            // Acquire: pairs with the Release `fetch_or` of `give_back`.
            w.load(Ordering::Acquire) & want == want
        })
    }

    /// Empties the set (Acquire swaps) and returns how many descriptors it
    /// held: the hand-over of a quiescent slot ([`ReturnedSet::holds_all`])
    /// to a new owner that starts with every descriptor free.
    pub fn take_all(&self) -> usize {
        self.words
            .iter()
            // Acquire: pairs with the Release `fetch_or` of `give_back`.
            .map(|w| w.swap(0, Ordering::Acquire).count_ones() as usize)
            .sum()
    }

    /// Adds the bits `bits` to word `word` (a transmitter's flush). Words
    /// past the end are ignored (debug builds assert).
    #[inline]
    fn give_back(&self, word: usize, bits: u64) {
        let Some(w) = self.words.get(word) else {
            debug_assert!(false, "word {word} of {}", self.words.len());
            return;
        };
        // Release: pairs with the Acquire swap in `FreeDescriptors::alloc`;
        // everything we did with these descriptors happens-before the owner
        // reuses them.
        w.fetch_or(bits, Ordering::Release);
    }
}

impl fmt::Debug for ReturnedSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReturnedSet")
            .field("words", &self.words())
            .field("is_empty", &self.is_empty())
            .finish()
    }
}

/// The owner's private free list: a bitmap of free descriptors and a
/// cursor. `Send`, used by one thread (`&mut self`).
///
/// # Examples
/// ```
/// use pspat_mailbox::{FreeDescriptors, ReturnedSet};
/// let returned = ReturnedSet::new(128);
/// let mut free = FreeDescriptors::new(128);
/// let d = free.alloc(&returned).unwrap();
/// free.free(d); // e.g. the push of its packet failed
/// assert_eq!(free.available(), 128);
/// ```
#[derive(Clone)]
pub struct FreeDescriptors {
    /// Bit set: free.
    free: Box<[u64]>,
    /// The word `alloc` looks at first.
    cursor: usize,
    /// Descriptors `0..descriptors` exist.
    descriptors: usize,
}

impl FreeDescriptors {
    /// All of `0..descriptors` free (at most [`MAX_DESCRIPTORS`]). A
    /// multiple of 64 fills whole words; any other count works too (the
    /// last word is partly used).
    pub fn new(descriptors: usize) -> Self {
        let descriptors = descriptors.min(MAX_DESCRIPTORS);
        let mut free = vec![u64::MAX; words_for(descriptors)].into_boxed_slice();
        let tail = descriptors % 64;
        if tail != 0 {
            if let Some(last) = free.last_mut() {
                *last = (1 << tail) - 1;
            }
        }
        FreeDescriptors {
            free,
            cursor: 0,
            descriptors,
        }
    }

    /// Descriptors `0..descriptors()` exist.
    pub fn descriptors(&self) -> usize {
        self.descriptors
    }

    /// Free in the local bitmap now (not counting returned ones not yet
    /// taken back). O(words).
    pub fn available(&self) -> usize {
        self.free.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Takes a free descriptor: from the local bitmap if it has one, else
    /// after taking back everything in `returned` (each non-zero word
    /// swapped to zero, Acquire). `None` when all are in flight.
    ///
    /// A descriptor returned here happens-after everything its last
    /// transmitter did with it before returning it (module docs).
    #[inline]
    pub fn alloc(&mut self, returned: &ReturnedSet) -> Option<u32> {
        if let Some(d) = self.take_local() {
            return Some(d);
        }
        if !self.refill(returned) {
            return None;
        }
        self.take_local()
    }

    /// The descriptor the next [`FreeDescriptors::alloc`] will return,
    /// without taking it: from the local bitmap, or after taking back the
    /// returned ones when the local bitmap is empty. `None` when all are in
    /// flight. Until the owner's next `alloc` or `free`, the answer stays
    /// the same, so an owner can fill a buffer tied to the descriptor before
    /// it submits. Carries the same happens-after guarantee as `alloc`.
    #[inline]
    pub fn peek(&mut self, returned: &ReturnedSet) -> Option<u32> {
        if let Some(d) = self.peek_local() {
            return Some(d);
        }
        if !self.refill(returned) {
            return None;
        }
        self.peek_local()
    }

    /// The next free bit of the local bitmap, as `take_local` would take
    /// it (it may move the cursor past empty words, which `take_local`
    /// would skip too).
    #[inline]
    fn peek_local(&mut self) -> Option<u32> {
        let words = self.free.len();
        for _ in 0..words {
            let w = self.free[self.cursor];
            if w != 0 {
                return Some((self.cursor * 64) as u32 + w.trailing_zeros());
            }
            self.cursor += 1;
            if self.cursor == words {
                self.cursor = 0;
            }
        }
        None
    }

    /// Takes `desc` if it is free in the local bitmap (a descriptor named by
    /// [`FreeDescriptors::peek`] is, until the next `alloc`); false
    /// otherwise, and nothing changes.
    #[inline]
    pub fn take(&mut self, desc: u32) -> bool {
        let d = desc as usize;
        match self.free.get_mut(d / 64) {
            Some(w) if d < self.descriptors && *w & (1 << (d % 64)) != 0 => {
                *w &= !(1 << (d % 64));
                true
            }
            _ => false,
        }
    }

    /// Frees `desc` locally (the owner still holds it: a push that failed,
    /// a packet granted back in client-transmit mode). Freeing a free
    /// descriptor changes nothing; one out of range is ignored (debug builds
    /// assert).
    #[inline]
    pub fn free(&mut self, desc: u32) {
        let d = desc as usize;
        match self.free.get_mut(d / 64) {
            Some(w) if d < self.descriptors => *w |= 1 << (d % 64),
            _ => debug_assert!(false, "descriptor {desc} of {}", self.descriptors),
        }
    }

    /// The next free bit of the local bitmap, scanning from the cursor.
    #[inline]
    fn take_local(&mut self) -> Option<u32> {
        let words = self.free.len();
        for _ in 0..words {
            let w = self.free[self.cursor];
            if w != 0 {
                self.free[self.cursor] = w & (w - 1);
                return Some((self.cursor * 64) as u32 + w.trailing_zeros());
            }
            self.cursor += 1;
            if self.cursor == words {
                self.cursor = 0;
            }
        }
        None
    }

    /// Takes back every returned descriptor now (not only when the local
    /// bitmap is empty, as [`FreeDescriptors::alloc`] does) and returns how
    /// many are free locally afterwards: an owner waiting for a batch of
    /// descriptors counts them with this.
    pub fn take_back(&mut self, returned: &ReturnedSet) -> usize {
        self.refill(returned);
        self.available()
    }

    /// The owner leaves: every descriptor free in the local bitmap goes into
    /// `returned` (one Release `fetch_or` per non-zero word) and the local
    /// bitmap is emptied. Once every descriptor in flight has been returned
    /// too, [`ReturnedSet::holds_all`] is true, and a successor may take the
    /// slot over ([`ReturnedSet::take_all`]).
    pub fn give_back_all(&mut self, returned: &ReturnedSet) {
        for (i, f) in self.free.iter_mut().enumerate() {
            if *f != 0 {
                // Release inside: pairs with the Acquire loads of
                // `holds_all` and swaps of `take_all`.
                returned.give_back(i, *f);
                *f = 0;
            }
        }
    }

    /// Takes back every returned descriptor; true if there was any.
    #[cold]
    fn refill(&mut self, returned: &ReturnedSet) -> bool {
        let mut any = false;
        for (f, r) in self.free.iter_mut().zip(returned.words.iter()) {
            // Relaxed peek: a swap is a locked RMW; a zero word is simply
            // retried at the next refill.
            if r.load(Ordering::Relaxed) != 0 {
                // Acquire: pairs with the Release `fetch_or` in
                // `Recycler::flush` (through `ReturnedSet::give_back`).
                *f |= r.swap(0, Ordering::Acquire);
                any = true;
            }
        }
        any
    }
}

impl fmt::Debug for FreeDescriptors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FreeDescriptors")
            .field("descriptors", &self.descriptors)
            .field("available", &self.available())
            .field("cursor", &self.cursor)
            .finish()
    }
}

/// A transmitter's pending returns, aggregated per owner and 64-descriptor
/// word, published by [`Recycler::flush`]. One per transmitter thread.
///
/// # Examples
/// ```
/// use pspat_mailbox::{Recycler, ReturnedSet};
/// let sets = [ReturnedSet::new(128), ReturnedSet::new(128)];
/// let mut r = Recycler::new(2, 128);
/// for d in [0, 5, 63, 64] {
///     r.mark(1, d);
/// }
/// assert_eq!(r.dirty_words(), 2, "two fetch_or, not four");
/// r.flush(|owner| &sets[owner as usize]);
/// assert!(sets[0].is_empty() && !sets[1].is_empty());
/// assert_eq!(r.dirty_words(), 0);
/// ```
pub struct Recycler {
    /// Words per owner.
    words: usize,
    /// Descriptors per owner.
    descriptors: usize,
    /// `[owner * words + word]`: what is marked in each word.
    state: Vec<WordState>,
    /// Words marked since the last [`Recycler::flush`], each once (some
    /// may have been returned by `flush_batches` since).
    dirty: Vec<usize>,
    /// Words whose count reached `batch` since they were last returned.
    ready: Vec<usize>,
    /// Words with a non-zero `pending`.
    held: usize,
    /// The descriptors a word gathers before [`Recycler::flush_batches`]
    /// returns it ([`return_batch`]).
    batch: u32,
    /// When `flush_batches` first kept a word back since the last flush of
    /// everything, ns on the caller's clock.
    held_since: Option<u64>,
}

/// One 64-descriptor word of one owner, as the recycler sees it: 16 bytes,
/// so a mark touches one line.
#[derive(Clone, Copy, Debug, Default)]
struct WordState {
    /// Descriptors marked since the word was last returned.
    pending: u64,
    /// How many bits `pending` holds.
    count: u32,
    /// The word is on `dirty`.
    listed: bool,
}

/// How many descriptors an owner of `descriptors` waits for when it runs
/// out (a client asks for at least this many free before it goes on; after
/// a slow wait, a quarter of its pool: `pspat::Client::wait_for_room`), and
/// so how many a word gathers before [`Recycler::flush_batches`] returns
/// it: a sixteenth of the pool, 1 to 64.
pub fn return_batch(descriptors: usize) -> usize {
    (descriptors / 16).clamp(1, 64)
}

/// The longest [`Recycler::flush_batches`] keeps a descriptor back, ns.
pub const MAX_RETURN_HOLD_NS: u64 = 500_000;

impl Recycler {
    /// For owners `0..owners`, each with descriptors
    /// `0..descriptors_per_owner`. Allocates all it will ever need (unless
    /// [`Recycler::resize_owners`] grows it).
    pub fn new(owners: usize, descriptors_per_owner: usize) -> Self {
        let descriptors = descriptors_per_owner.min(MAX_DESCRIPTORS);
        let words = words_for(descriptors);
        let total = owners.saturating_mul(words);
        Recycler {
            words,
            descriptors,
            state: vec![WordState::default(); total],
            // At most one entry per word: never grows.
            dirty: Vec::with_capacity(total),
            ready: Vec::with_capacity(total),
            held: 0,
            batch: return_batch(descriptors) as u32,
            held_since: None,
        }
    }

    /// Records that descriptor `desc` of `owner` is done with. No atomics.
    /// An owner or descriptor out of range is ignored (debug builds assert).
    #[inline]
    pub fn mark(&mut self, owner: u32, desc: u32) {
        let idx = (owner as usize)
            .saturating_mul(self.words)
            .saturating_add(desc as usize / 64);
        let word = match self.state.get_mut(idx) {
            Some(w) if (desc as usize) < self.descriptors => w,
            _ => {
                debug_assert!(false, "owner {owner} descriptor {desc} out of range");
                return;
            }
        };
        let bit = 1 << (desc % 64);
        if word.pending & bit != 0 {
            // Marked already: a second mark changes nothing.
            return;
        }
        if word.pending == 0 {
            self.held += 1;
            // A word returned by `flush_batches` stays listed until the
            // next full flush.
            if !word.listed {
                word.listed = true;
                // Within the capacity reserved for every word: no allocation.
                self.dirty.push(idx);
            }
        }
        word.pending |= bit;
        word.count += 1;
        if word.count == self.batch {
            // Once per word between two returns of it: within capacity.
            self.ready.push(idx);
        }
    }

    /// Publishes every pending return: one `fetch_or` (Release) per dirty
    /// word into `returned_set_of(owner)`. After it, the owners may reuse
    /// the descriptors; everything this thread did with them before the
    /// call happens-before that reuse.
    pub fn flush<'a>(&mut self, returned_set_of: impl Fn(u32) -> &'a ReturnedSet) {
        for &idx in &self.dirty {
            let word = &mut self.state[idx];
            if word.pending != 0 {
                // Release inside `give_back`: pairs with the owner's Acquire
                // swap in `FreeDescriptors::alloc`.
                returned_set_of((idx / self.words) as u32)
                    .give_back(idx % self.words, word.pending);
            }
            *word = WordState::default();
        }
        self.dirty.clear();
        self.ready.clear();
        self.held = 0;
        self.held_since = None;
    }

    /// Returns only the words that gathered a batch ([`return_batch`] of
    /// the owner's pool) and keeps the others for a later call, unless some
    /// word has been kept since [`MAX_RETURN_HOLD_NS`] before `now_ns` (the
    /// caller's clock): then it returns everything, as [`Recycler::flush`].
    /// O(words returned).
    ///
    /// For a transmitter that is busy: with many owners each round marks
    /// about one descriptor per owner, and one `fetch_or` per descriptor
    /// into lines the owners also write costs more than the rest of the
    /// hand-off. An owner that ran out waits for a batch anyway before it
    /// goes on, so holding less than a batch delays no waiting owner (an
    /// owner whose descriptors are nearly all free waits for nothing), and
    /// the hold is bounded in time. A transmitter that runs out of work
    /// calls [`Recycler::flush`], so nothing is kept while it sleeps.
    pub fn flush_batches<'a>(
        &mut self,
        now_ns: u64,
        returned_set_of: impl Fn(u32) -> &'a ReturnedSet,
    ) {
        if let Some(t) = self.held_since {
            if now_ns.saturating_sub(t) >= MAX_RETURN_HOLD_NS {
                return self.flush(returned_set_of);
            }
        }
        for &idx in &self.ready {
            let word = &mut self.state[idx];
            // Release inside `give_back`, as in `flush`.
            returned_set_of((idx / self.words) as u32).give_back(idx % self.words, word.pending);
            word.pending = 0;
            word.count = 0;
        }
        self.held -= self.ready.len();
        self.ready.clear();
        if self.held == 0 {
            self.held_since = None;
        } else if self.held_since.is_none() {
            self.held_since = Some(now_ns);
        }
    }

    /// True while some marked descriptor has not been returned.
    pub fn holds_any(&self) -> bool {
        self.held > 0
    }

    /// 64-descriptor words marked and not yet returned: the `fetch_or`s the
    /// next [`Recycler::flush`] will issue.
    pub fn dirty_words(&self) -> usize {
        self.held
    }

    /// Owners this recycler accepts: `0..owners()`.
    pub fn owners(&self) -> usize {
        self.state.len().checked_div(self.words).unwrap_or(0)
    }

    /// Accepts owners `0..owners` from now on (the runtime grew its client
    /// table). Growing keeps every pending mark. Shrinking drops the pending
    /// marks of the owners removed (their descriptors would never come back
    /// to them): flush first, or shrink only past owners that are gone.
    pub fn resize_owners(&mut self, owners: usize) {
        let total = owners.saturating_mul(self.words);
        if total < self.state.len() {
            self.dirty.retain(|&i| i < total);
            self.ready.retain(|&i| i < total);
            self.held = self.state[..total]
                .iter()
                .filter(|w| w.pending != 0)
                .count();
        }
        self.state.resize(total, WordState::default());
        // Room for one entry per word, so `mark` never allocates.
        self.dirty.reserve(total.saturating_sub(self.dirty.len()));
        self.ready.reserve(total.saturating_sub(self.ready.len()));
    }
}

impl fmt::Debug for Recycler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recycler")
            .field("owners", &self.owners())
            .field("descriptors_per_owner", &self.descriptors)
            .field("dirty_words", &self.dirty.len())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_leaving_owner_and_its_transmitter_fill_the_set_for_a_successor() {
        let returned = ReturnedSet::new(70);
        let mut f = FreeDescriptors::new(70);
        let a = f.alloc(&returned).unwrap();
        let b = f.alloc(&returned).unwrap();
        f.give_back_all(&returned);
        assert_eq!(f.available(), 0);
        assert!(!returned.holds_all(70), "two still in flight");
        let mut r = Recycler::new(1, 70);
        r.mark(0, a);
        r.flush(|_| &returned);
        assert!(!returned.holds_all(70), "one still in flight");
        r.mark(0, b);
        r.flush(|_| &returned);
        assert!(returned.holds_all(70));
        assert_eq!(returned.take_all(), 70);
        assert!(returned.is_empty() && !returned.holds_all(70));
        assert!(ReturnedSet::new(0).holds_all(0));
    }

    #[test]
    fn alloc_hands_out_each_descriptor_once_then_none() {
        let returned = ReturnedSet::new(192);
        let mut f = FreeDescriptors::new(192);
        let got: HashSet<u32> = (0..192).map(|_| f.alloc(&returned).unwrap()).collect();
        assert_eq!(got.len(), 192);
        assert!(got.iter().all(|&d| d < 192));
        assert_eq!(f.alloc(&returned), None);
        assert_eq!(f.available(), 0);
    }

    #[test]
    fn odd_sizes_use_a_partial_last_word() {
        let returned = ReturnedSet::new(70);
        assert_eq!(returned.words(), 2);
        let mut f = FreeDescriptors::new(70);
        assert_eq!(f.available(), 70);
        let got: HashSet<u32> = (0..70).map(|_| f.alloc(&returned).unwrap()).collect();
        assert_eq!(got, (0..70).collect());
        assert_eq!(f.alloc(&returned), None);
        let mut none = FreeDescriptors::new(0);
        assert_eq!(none.alloc(&ReturnedSet::new(0)), None);
    }

    #[test]
    fn local_free_is_reused_before_returned_ones() {
        let returned = ReturnedSet::new(64);
        let mut f = FreeDescriptors::new(64);
        let all: Vec<u32> = (0..64).map(|_| f.alloc(&returned).unwrap()).collect();
        let mut r = Recycler::new(1, 64);
        r.mark(0, all[3]);
        r.flush(|_| &returned);
        f.free(all[9]);
        assert_eq!(f.alloc(&returned), Some(all[9]), "local first");
        assert!(!returned.is_empty(), "not refilled while local had one");
        assert_eq!(f.alloc(&returned), Some(all[3]), "then the returned one");
        assert!(returned.is_empty());
        assert_eq!(f.alloc(&returned), None);
    }

    #[test]
    fn peek_names_what_the_next_alloc_takes_also_across_a_refill() {
        let returned = ReturnedSet::new(130);
        let mut f = FreeDescriptors::new(130);
        for _ in 0..130 {
            let p = f.peek(&returned).unwrap();
            assert_eq!(f.peek(&returned), Some(p), "peek does not take");
            assert_eq!(f.alloc(&returned), Some(p));
        }
        assert_eq!(f.peek(&returned), None);
        let mut r = Recycler::new(1, 130);
        r.mark(0, 129);
        r.mark(0, 5);
        r.flush(|_| &returned);
        let p = f.peek(&returned).unwrap();
        assert!(p == 5 || p == 129);
        assert_eq!(f.alloc(&returned), Some(p));
        let q = f.peek(&returned).unwrap();
        assert_eq!(p + q, 134, "the other returned one");
        assert_eq!(f.alloc(&returned), Some(q));
        assert_eq!(f.peek(&returned), None);
        assert!(!f.take(q), "in flight");
        f.free(q);
        assert!(f.take(q) && !f.take(q) && !f.take(500));
    }

    #[test]
    fn free_is_idempotent() {
        let returned = ReturnedSet::new(64);
        let mut f = FreeDescriptors::new(64);
        let d = f.alloc(&returned).unwrap();
        f.free(d);
        f.free(d);
        assert_eq!(f.available(), 64);
    }

    /// Takes back every descriptor `set` holds for an owner of `n` whose
    /// descriptors were all in flight.
    fn returned_now(set: &ReturnedSet, n: usize) -> Vec<u32> {
        let mut f = FreeDescriptors::new(n);
        let empty = ReturnedSet::new(n);
        for _ in 0..n {
            f.alloc(&empty).unwrap();
        }
        let mut back = Vec::new();
        while let Some(d) = f.alloc(set) {
            back.push(d);
        }
        back.sort_unstable();
        back
    }

    #[test]
    fn flush_batches_returns_a_word_once_it_holds_a_batch() {
        // 128 descriptors per owner: a batch is 8.
        assert_eq!(return_batch(128), 8);
        let sets: Vec<ReturnedSet> = (0..2).map(|_| ReturnedSet::new(128)).collect();
        let mut r = Recycler::new(2, 128);
        for d in 0..7 {
            r.mark(0, d);
        }
        r.mark(1, 64);
        r.flush_batches(0, |o| &sets[o as usize]);
        assert!(
            sets[0].is_empty() && sets[1].is_empty(),
            "nothing makes a batch yet"
        );
        assert!(r.holds_any());
        assert_eq!(r.dirty_words(), 2);
        r.mark(0, 7);
        r.flush_batches(1_000, |o| &sets[o as usize]);
        assert_eq!(returned_now(&sets[0], 128), (0..8).collect::<Vec<_>>());
        assert!(
            sets[1].is_empty(),
            "owner 1's single descriptor is still kept"
        );
        assert_eq!(r.dirty_words(), 1);
        // The word returned is marked again from zero.
        r.mark(0, 3);
        r.flush(|o| &sets[o as usize]);
        assert!(!r.holds_any());
        assert_eq!(returned_now(&sets[0], 128), [3]);
        assert_eq!(returned_now(&sets[1], 128), [64]);
    }

    #[test]
    fn flush_batches_keeps_nothing_longer_than_the_hold_limit() {
        let set = ReturnedSet::new(1024);
        let mut r = Recycler::new(1, 1024);
        r.mark(0, 9);
        let t0 = 5_000;
        r.flush_batches(t0, |_| &set);
        r.mark(0, 700);
        r.flush_batches(t0 + MAX_RETURN_HOLD_NS - 1, |_| &set);
        assert!(set.is_empty() && r.holds_any());
        r.flush_batches(t0 + MAX_RETURN_HOLD_NS, |_| &set);
        assert!(!r.holds_any());
        assert_eq!(returned_now(&set, 1024), [9, 700]);
        // The limit counts from the first hold after the flush of everything.
        r.mark(0, 1);
        r.flush_batches(t0 + 2 * MAX_RETURN_HOLD_NS, |_| &set);
        assert!(set.is_empty());
        r.flush_batches(t0 + 3 * MAX_RETURN_HOLD_NS - 1, |_| &set);
        assert!(set.is_empty());
        r.flush_batches(t0 + 3 * MAX_RETURN_HOLD_NS, |_| &set);
        assert_eq!(returned_now(&set, 1024), [1]);
    }

    #[test]
    fn small_pools_return_every_descriptor_at_once() {
        // A pool of 16 or fewer descriptors has a batch of one.
        let set = ReturnedSet::new(16);
        let mut r = Recycler::new(1, 16);
        r.mark(0, 15);
        r.flush_batches(0, |_| &set);
        assert!(!r.holds_any());
        assert_eq!(returned_now(&set, 16), [15]);
    }

    #[test]
    fn recycler_aggregates_per_word_and_routes_per_owner() {
        let sets: Vec<ReturnedSet> = (0..3).map(|_| ReturnedSet::new(128)).collect();
        let mut r = Recycler::new(3, 128);
        for d in [0, 5, 63, 64, 127] {
            r.mark(2, d);
        }
        r.mark(0, 100);
        r.mark(2, 5); // again: same word, same bit
        assert_eq!(r.dirty_words(), 3);
        r.flush(|o| &sets[o as usize]);
        assert_eq!(r.dirty_words(), 0);
        assert!(sets[1].is_empty());
        let mut f0 = FreeDescriptors::new(128);
        let mut f2 = FreeDescriptors::new(128);
        for _ in 0..128 {
            f0.alloc(&ReturnedSet::new(128)).unwrap();
            f2.alloc(&ReturnedSet::new(128)).unwrap();
        }
        let mut back0 = Vec::new();
        while let Some(d) = f0.alloc(&sets[0]) {
            back0.push(d);
        }
        assert_eq!(back0, [100]);
        let mut back2 = Vec::new();
        while let Some(d) = f2.alloc(&sets[2]) {
            back2.push(d);
        }
        back2.sort_unstable();
        assert_eq!(back2, [0, 5, 63, 64, 127]);
    }

    #[test]
    fn resize_grows_keeping_marks_and_shrinks_dropping_gone_owners() {
        let sets: Vec<ReturnedSet> = (0..4).map(|_| ReturnedSet::new(64)).collect();
        let mut r = Recycler::new(1, 64);
        r.mark(0, 1);
        r.resize_owners(4);
        assert_eq!(r.owners(), 4);
        r.mark(3, 2);
        assert_eq!(r.dirty_words(), 2);
        r.resize_owners(2);
        assert_eq!(r.owners(), 2);
        assert_eq!(r.dirty_words(), 1, "owner 3's mark is dropped");
        r.flush(|o| &sets[o as usize]);
        assert!(!sets[0].is_empty());
        assert!(sets[3].is_empty());
    }

    #[test]
    fn types_are_send_and_the_set_is_sync() {
        fn send<T: Send>() {}
        fn both<T: Send + Sync>() {}
        both::<ReturnedSet>();
        send::<FreeDescriptors>();
        send::<Recycler>();
    }
}
