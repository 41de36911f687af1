//! Hierarchical find-first-set queue (hFFS). Saeed et al., "Eiffel: Efficient
//! and Flexible Software Packet Scheduling", NSDI 2019; `docs/REFERENCE.md` §5.2.
//!
//! A 64-ary tree of occupancy words sits over `64^levels` FIFO buckets: bit
//! `i` of a word is set iff child `i` holds something. The minimum non-empty
//! bucket is found by one `trailing_zeros` per level, top down.
//!
//! Elements are caller-chosen ids `0..capacity` (flow numbers, slab slots):
//! the queue is *intrusive*, its links live in one preallocated node array
//! indexed by id, and buckets are `(head, tail)` pairs of `u32` indices into
//! it. Nothing allocates after construction.
//!
//! # Complexity
//! `push` O(1) plus at most `levels` word updates; `pop` and `peek`
//! `levels` `trailing_zeros`; `remove` O(position in its bucket) (buckets are
//! singly linked, to keep a node at 16 bytes).
//! # Memory
//! 16 bytes per id, 8 bytes per bucket, `(64^L − 1)/63` words of 8 bytes:
//! L = 3 → 262 144 buckets, 2 MiB of buckets and 33 KiB of bitmap.
//! # Guarantees
//! Exact order by bucket (`rank / granularity`); equal buckets leave in push
//! order (FIFO), so equal ranks leave in arrival order.
//! # Deviations
//! The window is fixed at `[0, 64^L · granularity)`; ranks beyond it are
//! clamped into the last bucket or refused (see [`OutOfWindow`]). The
//! circular variant that slides with time is [`Cffs`](super::Cffs).

use serde::{Deserialize, Serialize};

use crate::ConfigError;

pub(crate) const NIL: u32 = u32::MAX;

/// What a queue does with a rank outside its window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutOfWindow {
    /// Below the window: the first bucket; beyond it: the last bucket
    /// (cFFS re-sorts the last bucket when its window rotates). Counted in
    /// `clamped()`.
    #[default]
    Clamp,
    /// Refuse with [`PushError::OutOfWindow`]; counted in `rejected()`.
    Reject,
}

/// The shape of an integer priority queue.
///
/// # Examples
/// ```
/// use pspat_sched::eiffel::{OutOfWindow, QueueConfig};
/// let q = QueueConfig { levels: 3, granularity: 4, out_of_window: OutOfWindow::Clamp };
/// assert_eq!(q.buckets().unwrap(), 262_144);
/// assert_eq!(q.horizon().unwrap(), 1_048_576);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueConfig {
    /// Levels of 64-bit words, 1..=4: 64, 4096, 262 144 or 16 777 216 buckets.
    pub levels: u8,
    /// Rank units per bucket, at least 1.
    pub granularity: u64,
    /// Policy for ranks outside the window.
    pub out_of_window: OutOfWindow,
}

impl Default for QueueConfig {
    /// 3 levels, granularity 1, clamp.
    fn default() -> Self {
        QueueConfig {
            levels: 3,
            granularity: 1,
            out_of_window: OutOfWindow::Clamp,
        }
    }
}

impl QueueConfig {
    /// Largest number of levels.
    pub const MAX_LEVELS: u8 = 4;

    /// Buckets per window, `64^levels`.
    ///
    /// # Errors
    /// Levels outside 1..=4.
    pub fn buckets(&self) -> Result<u64, ConfigError> {
        ConfigError::check_range("eiffel queue levels", self.levels, 1..=Self::MAX_LEVELS)?;
        Ok(1u64 << (6 * u32::from(self.levels)))
    }

    /// Rank units covered by one window, `buckets × granularity`.
    ///
    /// # Errors
    /// Bad levels, a zero granularity, or a window too large for `u64`
    /// arithmetic (two windows must fit below 2^63).
    pub fn horizon(&self) -> Result<u64, ConfigError> {
        let buckets = self.buckets()?;
        if self.granularity == 0 {
            return Err(ConfigError::out_of_range(
                "eiffel queue granularity (rank units per bucket)",
                0,
                "1..",
            ));
        }
        buckets
            .checked_mul(self.granularity)
            .filter(|h| *h <= (1u64 << 61))
            .ok_or_else(|| {
                ConfigError::out_of_range(
                    "eiffel queue granularity (rank units per bucket)",
                    self.granularity,
                    format!("1..={}", (1u64 << 61) / buckets),
                )
            })
    }

    /// The smallest granularity whose window (of the given levels) covers
    /// `span` rank units; at least 1.
    pub fn granularity_for(levels: u8, span: u64) -> u64 {
        let buckets = 1u64 << (6 * u32::from(levels.clamp(1, Self::MAX_LEVELS)));
        span.div_ceil(buckets).max(1)
    }
}

/// Why a push was refused. These are caller errors or the configured
/// [`OutOfWindow::Reject`] policy; the queue is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum PushError {
    /// The id is not below the queue's capacity.
    #[error("id {0} is beyond the queue's capacity")]
    BadId(u32),
    /// The id is already queued (an id is queued at most once).
    #[error("id {0} is already queued")]
    AlreadyQueued(u32),
    /// The rank is outside the window and the policy is `Reject`.
    #[error("rank {0} is outside the queue's window")]
    OutOfWindow(u64),
}

/// 16 bytes, four to a cache line: buckets are singly linked, so `remove`
/// walks its bucket but `push` and `pop` touch one node each besides the
/// bucket's old tail.
#[derive(Clone, Copy)]
pub(crate) struct Node {
    pub rank: u64,
    pub next: u32,
    /// Bucket index, with bit 31 naming the tree (cFFS); NIL: not queued.
    pub loc: u32,
}

const FREE_NODE: Node = Node {
    rank: 0,
    next: NIL,
    loc: NIL,
};

pub(crate) fn new_nodes(capacity: usize) -> Result<Box<[Node]>, ConfigError> {
    if capacity == 0 || capacity >= NIL as usize {
        return Err(ConfigError::out_of_range(
            "eiffel queue capacity (ids)",
            capacity,
            format!("1..={}", NIL - 1),
        ));
    }
    Ok(vec![FREE_NODE; capacity].into_boxed_slice())
}

/// Fails unless `id` can be pushed: below the capacity and not queued.
#[inline]
pub(crate) fn check_free(nodes: &[Node], id: u32) -> Result<(), PushError> {
    match nodes.get(id as usize) {
        None => Err(PushError::BadId(id)),
        Some(n) if n.loc != NIL => Err(PushError::AlreadyQueued(id)),
        Some(_) => Ok(()),
    }
}

/// The rank `id` is queued with, if it is.
#[inline]
pub(crate) fn queued_rank(nodes: &[Node], id: u32) -> Option<u64> {
    nodes
        .get(id as usize)
        .filter(|n| n.loc != NIL)
        .map(|n| n.rank)
}

/// A FIFO bucket: the first and last ids of its list ([`NIL`] when empty).
#[derive(Clone, Copy)]
pub(crate) struct Bucket {
    pub head: u32,
    pub tail: u32,
}

/// The `64^levels` empty buckets of one window.
pub(crate) fn empty_buckets(levels: u32) -> Box<[Bucket]> {
    let empty = Bucket {
        head: NIL,
        tail: NIL,
    };
    vec![empty; 1usize << (6 * levels)].into_boxed_slice()
}

/// The shape of a 64-ary summary tree stored level by level in one flat
/// array (level 0 is the root word): where each level starts, and which
/// word and bit stand for a bucket at each level.
#[derive(Clone, Copy)]
pub(crate) struct Levels {
    levels: u32,
    /// Offset of each level in the flat array.
    offsets: [usize; 4],
}

impl Levels {
    /// The layout for `levels` levels (1..=4), and the flat array's length.
    pub(crate) fn new(levels: u32) -> (Self, usize) {
        let mut offsets = [0usize; 4];
        let mut total = 0usize;
        for (l, off) in offsets.iter_mut().enumerate().take(levels as usize) {
            *off = total;
            total += 1usize << (6 * l);
        }
        (Levels { levels, offsets }, total)
    }

    /// Number of levels.
    #[inline(always)]
    pub(crate) fn count(self) -> u32 {
        self.levels
    }

    /// The array index of word `i` of level `l`.
    #[inline(always)]
    pub(crate) fn index(self, l: u32, i: usize) -> usize {
        self.offsets[l as usize] + i
    }

    /// The word of level `l` summarising bucket `b`, and `b`'s bit (0..64)
    /// in it.
    #[inline(always)]
    pub(crate) fn position(self, l: u32, b: u32) -> (usize, u32) {
        let shift = 6 * (self.levels - l);
        (
            self.index(l, (b >> shift) as usize),
            (b >> (shift - 6)) & 63,
        )
    }
}

/// Occupancy bitmaps plus FIFO buckets: one window of buckets.
pub(crate) struct Tree {
    /// Where each level's words sit in `words` (level 0 = the root word).
    levels: Levels,
    words: Box<[u64]>,
    buckets: Box<[Bucket]>,
}

impl Tree {
    pub(crate) fn new(levels: u8) -> Self {
        let levels = u32::from(levels);
        let (layout, total) = Levels::new(levels);
        Tree {
            levels: layout,
            words: vec![0u64; total].into_boxed_slice(),
            buckets: empty_buckets(levels),
        }
    }

    #[inline]
    pub(crate) fn nbuckets(&self) -> u32 {
        self.buckets.len() as u32
    }

    #[inline]
    fn set(&mut self, b: u32) {
        let mut l = self.levels.count();
        while l > 0 {
            l -= 1;
            let (idx, bit) = self.levels.position(l, b);
            let w = &mut self.words[idx];
            let was = *w;
            *w = was | (1u64 << bit);
            if was != 0 {
                return;
            }
        }
    }

    #[inline]
    fn clear(&mut self, b: u32) {
        let mut l = self.levels.count();
        while l > 0 {
            l -= 1;
            let (idx, bit) = self.levels.position(l, b);
            let w = &mut self.words[idx];
            *w &= !(1u64 << bit);
            if *w != 0 {
                return;
            }
        }
    }

    /// The lowest non-empty bucket.
    #[inline]
    pub(crate) fn first(&self) -> Option<u32> {
        let root = self.words[0];
        if root == 0 {
            return None;
        }
        let mut i = root.trailing_zeros() as usize;
        for l in 1..self.levels.count() {
            let w = self.words[self.levels.index(l, i)];
            i = (i << 6) | w.trailing_zeros() as usize;
        }
        Some(i as u32)
    }

    #[inline]
    pub(crate) fn head(&self, b: u32) -> u32 {
        self.buckets[b as usize].head
    }

    /// Appends `id` to bucket `b`; `loc` is what the node records.
    #[inline]
    pub(crate) fn push_back(&mut self, nodes: &mut [Node], id: u32, b: u32, loc: u32) {
        let bk = &mut self.buckets[b as usize];
        let tail = bk.tail;
        bk.tail = id;
        if tail == NIL {
            bk.head = id;
            self.set(b);
        } else {
            nodes[tail as usize].next = id;
        }
        let n = &mut nodes[id as usize];
        n.next = NIL;
        n.loc = loc;
    }

    /// Removes the head of non-empty bucket `b`.
    #[inline]
    pub(crate) fn pop_front(&mut self, nodes: &mut [Node], b: u32) -> u32 {
        let bk = &mut self.buckets[b as usize];
        let id = bk.head;
        let next = nodes[id as usize].next;
        bk.head = next;
        if next == NIL {
            bk.tail = NIL;
            self.clear(b);
        } else if let Some(n) = nodes.get(next as usize) {
            // The new head is what the next pop of this bucket reads: start
            // loading it now.
            crate::prefetch::prefetch(n);
        }
        nodes[id as usize].loc = NIL;
        id
    }

    /// Unlinks `id` from bucket `b`, wherever it sits: O(position in the
    /// bucket).
    pub(crate) fn unlink(&mut self, nodes: &mut [Node], id: u32, b: u32) {
        let next = nodes[id as usize].next;
        let bk = self.buckets[b as usize];
        let mut prev = NIL;
        let mut cur = bk.head;
        while cur != id && cur != NIL {
            prev = cur;
            cur = nodes[cur as usize].next;
        }
        if cur == NIL {
            return; // not in this bucket: nothing to do
        }
        if prev == NIL {
            self.buckets[b as usize].head = next;
        } else {
            nodes[prev as usize].next = next;
        }
        if bk.tail == id {
            self.buckets[b as usize].tail = prev;
        }
        if self.buckets[b as usize].head == NIL {
            self.clear(b);
        }
        nodes[id as usize].loc = NIL;
    }

    /// Detaches the whole list of bucket `b` and returns its head; the
    /// caller walks `next` links (read each before re-pushing the node).
    pub(crate) fn take(&mut self, b: u32) -> u32 {
        let bk = &mut self.buckets[b as usize];
        let head = bk.head;
        if head != NIL {
            bk.head = NIL;
            bk.tail = NIL;
            self.clear(b);
        }
        head
    }
}

/// Divides by the granularity, with a shift when it is a power of two.
#[derive(Clone, Copy)]
pub(crate) struct Gran {
    g: u64,
    shift: Option<u32>,
}

impl Gran {
    pub(crate) fn new(g: u64) -> Self {
        Gran {
            g,
            shift: g.is_power_of_two().then(|| g.trailing_zeros()),
        }
    }
    #[inline]
    pub(crate) fn div(self, x: u64) -> u64 {
        match self.shift {
            Some(s) => x >> s,
            None => x / self.g,
        }
    }
    #[inline]
    pub(crate) fn get(self) -> u64 {
        self.g
    }
}

/// A fixed-window hierarchical FFS queue of ids ranked by `u64`.
///
/// # Examples
/// ```
/// use pspat_sched::eiffel::{Hffs, QueueConfig};
/// let mut q = Hffs::new(QueueConfig::default(), 8).unwrap();
/// q.push(3, 70).unwrap();
/// q.push(5, 10).unwrap();
/// q.push(1, 70).unwrap();
/// assert_eq!(q.pop(), Some((5, 10)));
/// assert_eq!(q.pop(), Some((3, 70))); // equal ranks: arrival order
/// assert_eq!(q.pop(), Some((1, 70)));
/// assert_eq!(q.pop(), None);
/// ```
pub struct Hffs {
    tree: Tree,
    nodes: Box<[Node]>,
    gran: Gran,
    out_of_window: OutOfWindow,
    len: usize,
    clamped: u64,
    rejected: u64,
}

impl Hffs {
    /// An empty queue of shape `cfg` for ids `0..capacity`.
    ///
    /// # Errors
    /// Levels outside 1..=4, a zero granularity, a capacity of 0 or ≥ 2^32−1.
    pub fn new(cfg: QueueConfig, capacity: usize) -> Result<Self, ConfigError> {
        cfg.horizon()?;
        Ok(Hffs {
            tree: Tree::new(cfg.levels),
            nodes: new_nodes(capacity)?,
            gran: Gran::new(cfg.granularity),
            out_of_window: cfg.out_of_window,
            len: 0,
            clamped: 0,
            rejected: 0,
        })
    }

    /// Queues `id` with `rank`.
    ///
    /// # Errors
    /// A bad or already queued id, or a rank beyond the window under
    /// [`OutOfWindow::Reject`].
    #[inline]
    pub fn push(&mut self, id: u32, rank: u64) -> Result<(), PushError> {
        self.push_with(id, rank, self.out_of_window)
    }

    /// Like [`Hffs::push`] but always clamps, whatever the configured policy.
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
        let mut b = self.gran.div(rank);
        if b >= u64::from(self.tree.nbuckets()) {
            if oow == OutOfWindow::Reject {
                self.rejected += 1;
                return Err(PushError::OutOfWindow(rank));
            }
            self.clamped += 1;
            b = u64::from(self.tree.nbuckets() - 1);
        }
        self.nodes[id as usize].rank = rank;
        self.tree.push_back(&mut self.nodes, id, b as u32, b as u32);
        self.len += 1;
        Ok(())
    }

    /// Removes and returns the id of lowest rank with its rank.
    #[inline]
    pub fn pop(&mut self) -> Option<(u32, u64)> {
        let b = self.tree.first()?;
        let id = self.tree.pop_front(&mut self.nodes, b);
        self.len -= 1;
        Some((id, self.nodes[id as usize].rank))
    }

    /// The id `pop` would return, left in place.
    #[inline]
    pub fn peek(&self) -> Option<(u32, u64)> {
        let b = self.tree.first()?;
        let id = self.tree.head(b);
        Some((id, self.nodes[id as usize].rank))
    }

    /// Takes `id` out wherever it is; returns its rank if it was queued.
    pub fn remove(&mut self, id: u32) -> Option<u64> {
        let loc = self.nodes.get(id as usize)?.loc;
        if loc == NIL {
            return None;
        }
        self.tree.unlink(&mut self.nodes, id, loc);
        self.len -= 1;
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
        self.len
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Rank units per bucket.
    pub fn granularity(&self) -> u64 {
        self.gran.get()
    }

    /// Pushes clamped into the last bucket since construction.
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// Pushes refused as out of window since construction.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }
}
