//! Circular hierarchical FFS queue (cFFS). Saeed et al., "Eiffel", NSDI 2019;
//! `docs/REFERENCE.md` §5.3.
//!
//! Two hFFS windows of `H = 64^L × g` rank units each, **main** covering
//! `[base, base + H)` and **buffer** covering `[base + H, base + 2H)`. The
//! minimum comes from main; when main runs empty the two swap and `base`
//! advances by `H` (a *rotation*). So the window slides along with time or
//! virtual time while each structure stays small.
//!
//! # Ranks outside the window
//! Under [`OutOfWindow::Clamp`] (the default) a rank below `base` goes to the
//! first bucket of main and a rank at or beyond `base + 2H` to the last bucket
//! of buffer (both counted in [`Cffs::clamped`]). That last bucket is
//! re-sorted at each rotation (its elements are pushed again against the new
//! base), so a far-future element is never served before its window comes
//! up. Under [`OutOfWindow::Reject`] such pushes fail and are
//! counted in [`Cffs::rejected`].
//!
//! # The floor
//! Ranks that are not monotone (EDF deadlines with unequal relative
//! deadlines) would be clamped below `base` if the window slid up to the
//! smallest queued rank. [`Cffs::set_floor`] lets the owner promise a lower
//! bound on future ranks (`now + smallest deadline`, STFQ's `V`, `now` for a
//! time queue); `base` never passes it: an empty queue re-bases at
//! `min(rank, floor)`, a rotation happens only when `base + H <= floor`, and
//! otherwise the minimum is taken straight from buffer. When buffer holds only
//! its last bucket, the window jumps to `min(floor, smallest rank there)`
//! instead of stepping window by window. Without a promise the floor is
//! `u64::MAX`: ranks are assumed never to go below the last popped one.
//!
//! # Two ways to extract
//! * **Rank mode** ([`Cffs::pop`]): the minimum, rotating as needed. A
//!   scheduler ranking flows by deadline, virtual time or size uses this.
//! * **Time mode** ([`Cffs::push_timed`], [`Cffs::pop_due`]): ranks are
//!   nanoseconds and the floor is `now`; an element leaves only once `now` has
//!   reached the start of its bucket, so up to `g − 1` ns early;
//!   [`Cffs::next_due`] says when to come back.
//!
//! # Complexity
//! Push O(1); pop `L` `trailing_zeros`, plus, at a rotation, one re-push per
//! element of the re-sorted bucket.
//! # Memory
//! Twice an hFFS window plus 16 bytes per id: L = 3 → 4 MiB of buckets.
//! # Guarantees
//! With every pushed rank at or above the floor (without a floor: at or
//! above the last popped rank, or anything once the queue is empty), pops
//! leave in exact `(⌊rank / g⌋, push order)` order; the
//! `eiffel` tests check this against a binary heap, across rotations and
//! clamped ranks.

use crate::ConfigError;

use super::hffs::{check_free, new_nodes, queued_rank, Gran, Node, Tree, NIL};
use super::{OutOfWindow, PushError, QueueConfig};

const SIDE: u32 = 1 << 31;

/// A circular FFS queue of ids ranked by `u64`.
///
/// # Examples
/// ```
/// use pspat_sched::eiffel::{Cffs, QueueConfig};
/// let cfg = QueueConfig { levels: 1, granularity: 1, ..QueueConfig::default() }; // H = 64
/// let mut q = Cffs::new(cfg, 8).unwrap();
/// q.push(0, 1_000).unwrap(); // empty: re-bases at 1000
/// q.push(1, 1_100).unwrap(); // in buffer
/// q.push(2, 5_000).unwrap(); // beyond: clamped, re-sorted later
/// assert_eq!(q.pop(), Some((0, 1_000)));
/// assert_eq!(q.pop(), Some((1, 1_100))); // one rotation
/// assert_eq!(q.pop(), Some((2, 5_000)));
/// ```
pub struct Cffs {
    trees: [Tree; 2],
    /// Which of `trees` is main.
    main: usize,
    lens: [usize; 2],
    nodes: Box<[Node]>,
    gran: Gran,
    horizon: u64,
    base: u64,
    floor: u64,
    out_of_window: OutOfWindow,
    clamped: u64,
    rejected: u64,
}

enum Loc {
    Empty,
    Bucket(usize, u32),
    Overflow,
}

impl Cffs {
    /// An empty queue of shape `cfg` (one window) for ids `0..capacity`.
    ///
    /// # Errors
    /// Levels outside 1..=4, a zero granularity, a capacity of 0 or ≥ 2^32−1.
    pub fn new(cfg: QueueConfig, capacity: usize) -> Result<Self, ConfigError> {
        let horizon = cfg.horizon()?;
        Ok(Cffs {
            trees: [Tree::new(cfg.levels), Tree::new(cfg.levels)],
            main: 0,
            lens: [0, 0],
            nodes: new_nodes(capacity)?,
            gran: Gran::new(cfg.granularity),
            horizon,
            base: 0,
            floor: u64::MAX,
            out_of_window: cfg.out_of_window,
            clamped: 0,
            rejected: 0,
        })
    }

    /// Promises that no later push will rank below `floor` (monotone: a
    /// deadline queue passes `now + smallest relative deadline`, STFQ its
    /// virtual time). The window then never slides past `floor`, so later
    /// small ranks are not clamped. Without a promise (the default,
    /// `u64::MAX`) the queue assumes ranks never go below the last popped one.
    #[inline]
    pub fn set_floor(&mut self, floor: u64) {
        self.floor = floor;
    }

    /// Queues `id` with `rank` (an empty queue re-bases at `min(rank, floor)`).
    ///
    /// # Errors
    /// A bad or already queued id, or a rank outside the window under
    /// [`OutOfWindow::Reject`].
    #[inline]
    pub fn push(&mut self, id: u32, rank: u64) -> Result<(), PushError> {
        self.push_with(id, rank, self.out_of_window)
    }

    /// Queues `id` due at time `t` (time mode: sets the floor to `now`).
    ///
    /// # Errors
    /// As [`Cffs::push`].
    #[inline]
    pub fn push_timed(&mut self, id: u32, t: u64, now: u64) -> Result<(), PushError> {
        self.floor = now;
        self.push_with(id, t, self.out_of_window)
    }

    /// Like [`Cffs::push`] but always clamps, whatever the configured policy
    /// (for re-ranking an element that must not be lost).
    ///
    /// # Errors
    /// A bad or already queued id.
    #[inline]
    pub fn push_clamped(&mut self, id: u32, rank: u64) -> Result<(), PushError> {
        self.push_with(id, rank, OutOfWindow::Clamp)
    }

    #[inline]
    fn push_with(&mut self, id: u32, rank: u64, oow: OutOfWindow) -> Result<(), PushError> {
        check_free(&self.nodes, id)?;
        if self.is_empty() {
            self.base = self.align(rank.min(self.floor));
        }
        self.place(id, rank, oow)
    }

    #[inline]
    fn align(&self, x: u64) -> u64 {
        x - x % self.gran.get()
    }

    #[inline]
    fn place(&mut self, id: u32, rank: u64, oow: OutOfWindow) -> Result<(), PushError> {
        let (tree, b) = if rank < self.base {
            if oow == OutOfWindow::Reject {
                self.rejected += 1;
                return Err(PushError::OutOfWindow(rank));
            }
            self.clamped += 1;
            (self.main, 0)
        } else {
            let off = rank - self.base;
            if off < self.horizon {
                (self.main, self.gran.div(off) as u32)
            } else if off < 2 * self.horizon {
                (self.main ^ 1, self.gran.div(off - self.horizon) as u32)
            } else {
                if oow == OutOfWindow::Reject {
                    self.rejected += 1;
                    return Err(PushError::OutOfWindow(rank));
                }
                self.clamped += 1;
                (self.main ^ 1, self.last())
            }
        };
        self.nodes[id as usize].rank = rank;
        let loc = b | ((tree as u32) * SIDE);
        self.trees[tree].push_back(&mut self.nodes, id, b, loc);
        self.lens[tree] += 1;
        Ok(())
    }

    #[inline]
    fn last(&self) -> u32 {
        self.trees[0].nbuckets() - 1
    }

    /// Re-pushes the list starting at `id` against the current base
    /// (clamping, in list order so FIFO order is kept).
    fn replace_list(&mut self, mut id: u32) {
        while id != NIL {
            let next = self.nodes[id as usize].next;
            self.nodes[id as usize].loc = NIL;
            let rank = self.nodes[id as usize].rank;
            // Cannot fail: the node was just detached and clamping never refuses.
            let _ = self.place(id, rank, OutOfWindow::Clamp);
            id = next;
        }
    }

    /// Detaches bucket `b` of `tree`, fixing the count; returns the list head.
    fn take(&mut self, tree: usize, b: u32) -> u32 {
        let head = self.trees[tree].take(b);
        let mut id = head;
        while id != NIL {
            self.lens[tree] -= 1;
            id = self.nodes[id as usize].next;
        }
        head
    }

    /// Finds the bucket holding the minimum, rotating or jumping the window
    /// when main is empty (never past the floor).
    fn locate_min(&mut self) -> Loc {
        let m = self.main;
        if let Some(b) = self.trees[m].first() {
            return Loc::Bucket(m, b);
        }
        let Some(bf) = self.trees[m ^ 1].first() else {
            return Loc::Empty;
        };
        let last = self.last();
        if bf != last {
            if self.floor >= self.base.saturating_add(self.horizon) {
                // Rotate: buffer becomes main. Its last bucket may hold
                // clamped far-future ranks: sort them against the new base
                // (they all land in the new buffer).
                self.main ^= 1;
                self.base += self.horizon;
                let head = self.take(self.main, last);
                self.replace_list(head);
                return Loc::Bucket(self.main, bf);
            }
            return Loc::Bucket(m ^ 1, bf);
        }
        // Only the overflow bucket: jump the window to its minimum (or the floor).
        let head = self.take(m ^ 1, last);
        let mut min = u64::MAX;
        let mut id = head;
        while id != NIL {
            min = min.min(self.nodes[id as usize].rank);
            id = self.nodes[id as usize].next;
        }
        self.base = self.align(min.min(self.floor));
        self.replace_list(head);
        if let Some(b) = self.trees[m].first() {
            return Loc::Bucket(m, b);
        }
        match self.trees[m ^ 1].first() {
            Some(b) if b != last => Loc::Bucket(m ^ 1, b),
            _ => Loc::Overflow,
        }
    }

    #[inline]
    fn take_head(&mut self, tree: usize, b: u32) -> (u32, u64) {
        let id = self.trees[tree].pop_front(&mut self.nodes, b);
        self.lens[tree] -= 1;
        (id, self.nodes[id as usize].rank)
    }

    /// Removes and returns the id of lowest rank with its rank (rank mode).
    #[inline]
    pub fn pop(&mut self) -> Option<(u32, u64)> {
        let m = self.main;
        if let Some(b) = self.trees[m].first() {
            return Some(self.take_head(m, b));
        }
        match self.locate_min() {
            Loc::Empty => None,
            Loc::Bucket(t, b) => Some(self.take_head(t, b)),
            Loc::Overflow => {
                // Everything lies beyond two windows above the floor: unsorted
                // overflow, so take the first of its smallest bucket.
                let t = self.main ^ 1;
                let mut best = self.trees[t].head(self.last());
                let mut best_key = self.gran.div(self.nodes[best as usize].rank);
                let mut id = best;
                while id != NIL {
                    let key = self.gran.div(self.nodes[id as usize].rank);
                    if key < best_key {
                        (best, best_key) = (id, key);
                    }
                    id = self.nodes[id as usize].next;
                }
                let rank = self.remove(best)?;
                Some((best, rank))
            }
        }
    }

    /// Time mode: removes the first element whose bucket has started by
    /// `now`, if any (sets the floor to `now`).
    #[inline]
    pub fn pop_due(&mut self, now: u64) -> Option<(u32, u64)> {
        self.floor = now;
        let (t, b) = match self.locate_min() {
            Loc::Bucket(t, b) => (t, b),
            Loc::Empty | Loc::Overflow => return None,
        };
        if self.bucket_start(t, b) > now {
            return None;
        }
        Some(self.take_head(t, b))
    }

    #[inline]
    fn bucket_start(&self, tree: usize, b: u32) -> u64 {
        let w = if tree == self.main { 0 } else { self.horizon };
        self.base.saturating_add(w + u64::from(b) * self.gran.get())
    }

    /// Time mode: the earliest time [`Cffs::pop_due`] can return something
    /// (a lower bound when only clamped far-future elements remain).
    pub fn next_due(&self) -> Option<u64> {
        let m = self.main;
        if let Some(b) = self.trees[m].first() {
            return Some(self.bucket_start(m, b));
        }
        let b = self.trees[m ^ 1].first()?;
        Some(self.bucket_start(m ^ 1, b))
    }

    /// The id [`Cffs::pop`] would return next without rotating, if main
    /// holds anything; otherwise the first of buffer.
    pub fn peek(&self) -> Option<(u32, u64)> {
        let m = self.main;
        let (t, b) = match self.trees[m].first() {
            Some(b) => (m, b),
            None => (m ^ 1, self.trees[m ^ 1].first()?),
        };
        let id = self.trees[t].head(b);
        Some((id, self.nodes[id as usize].rank))
    }

    /// Takes `id` out wherever it is; returns its rank if it was queued.
    pub fn remove(&mut self, id: u32) -> Option<u64> {
        let loc = self.nodes.get(id as usize)?.loc;
        if loc == NIL {
            return None;
        }
        let tree = (loc / SIDE) as usize;
        self.trees[tree].unlink(&mut self.nodes, id, loc & !SIDE);
        self.lens[tree] -= 1;
        Some(self.nodes[id as usize].rank)
    }

    /// The rank `id` is queued with, if it is.
    pub fn rank_of(&self, id: u32) -> Option<u64> {
        queued_rank(&self.nodes, id)
    }

    /// True when `id` is queued.
    pub fn contains(&self, id: u32) -> bool {
        self.rank_of(id).is_some()
    }

    /// Ids queued.
    pub fn len(&self) -> usize {
        self.lens[0] + self.lens[1]
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Start of the main window.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Rank units per window (`H`).
    pub fn horizon(&self) -> u64 {
        self.horizon
    }

    /// Rank units per bucket.
    pub fn granularity(&self) -> u64 {
        self.gran.get()
    }

    /// Pushes clamped into an edge bucket since construction.
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// Pushes refused as out of window since construction.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }
}
