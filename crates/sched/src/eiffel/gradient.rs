//! Approximate ("gradient") priority queue, as an experiment. Saeed et al.,
//! "Eiffel", NSDI 2019 (the gradient queue); `docs/REFERENCE.md` §5.4.
//!
//! Each node of a 64-ary tree keeps, over its non-empty children `k`, the sums
//! `a = Σ w_k` and `b = Σ k·w_k` with weights `w_k = 2^(63−k)` (the
//! reference's `2^k` mirrored, since this queue extracts the minimum). The
//! descent picks child `⌊b/a⌋` without a find-first-set instruction.
//!
//! Since `w_k` exceeds the sum of all larger-index weights, `b/a − k_min =
//! Σ d·2^−d / (1 + Σ 2^−d)` over the offsets `d ≥ 1` of the other occupied
//! children, which stays below 1 for any finite set: `⌊b/a⌋ = k_min` exactly,
//! as long as the division is exact (128-bit integers here). The
//! reference's "one bucket short" (`docs/REFERENCE.md` §5.4) comes from rounding
//! the other way; this implementation keeps a defensive step back to the
//! previous child and counts any pop that missed the minimum in
//! [`GradientQueue::inexact`] (the `eiffel` tests find none).
//!
//! # Complexity
//! Push and pop: one 128-bit division per level, O(L).
//! # Guarantees
//! The same order as [`Hffs`](super::Hffs) (by bucket, FIFO within one), by
//! the argument above.
//! # Deviations
//! An experiment: not used by any scheduler; slower than hFFS (a 128-bit
//! division per level instead of one `trailing_zeros`). Memory: 24 bytes of
//! sums per tree node on top of hFFS's buckets and nodes.

use crate::ConfigError;

use super::hffs::{check_free, empty_buckets, new_nodes, Bucket, Gran, Levels, Node, NIL};
use super::{PushError, QueueConfig};

#[derive(Clone, Copy, Default)]
struct Sums {
    a: u64,
    b: u128,
}

/// An approximate min-queue over a fixed window `[0, 64^L × g)` (ranks
/// beyond it are clamped into the last bucket).
///
/// # Examples
/// ```
/// use pspat_sched::eiffel::{GradientQueue, QueueConfig};
/// let mut q = GradientQueue::new(QueueConfig { levels: 1, ..QueueConfig::default() }, 4).unwrap();
/// q.push(0, 9).unwrap();
/// q.push(1, 3).unwrap();
/// assert_eq!(q.pop(), Some((1, 3)));
/// assert_eq!(q.inexact(), 0);
/// ```
pub struct GradientQueue {
    /// Where each level's sums sit in `sums` (level 0 = the root).
    levels: Levels,
    sums: Box<[Sums]>,
    buckets: Box<[Bucket]>,
    nodes: Box<[Node]>,
    gran: Gran,
    len: usize,
    inexact: u64,
}

#[inline]
fn weight(k: u32) -> u64 {
    1u64 << (63 - k)
}

impl GradientQueue {
    /// An empty queue of shape `cfg` for ids `0..capacity` (the
    /// out-of-window policy is always clamp).
    ///
    /// # Errors
    /// Levels outside 1..=4, a zero granularity, a capacity of 0 or ≥ 2^32−1.
    pub fn new(cfg: QueueConfig, capacity: usize) -> Result<Self, ConfigError> {
        cfg.horizon()?;
        let levels = u32::from(cfg.levels);
        let (layout, total) = Levels::new(levels);
        Ok(GradientQueue {
            levels: layout,
            sums: vec![Sums::default(); total].into_boxed_slice(),
            buckets: empty_buckets(levels),
            nodes: new_nodes(capacity)?,
            gran: Gran::new(cfg.granularity),
            len: 0,
            inexact: 0,
        })
    }

    /// Queues `id` with `rank`.
    ///
    /// # Errors
    /// A bad or already queued id.
    pub fn push(&mut self, id: u32, rank: u64) -> Result<(), PushError> {
        check_free(&self.nodes, id)?;
        let nb = self.buckets.len() as u64;
        let b = self.gran.div(rank).min(nb - 1) as u32;
        let bk = &mut self.buckets[b as usize];
        let tail = bk.tail;
        bk.tail = id;
        if tail == NIL {
            bk.head = id;
            self.mark(b, true);
        } else {
            self.nodes[tail as usize].next = id;
        }
        let n = &mut self.nodes[id as usize];
        n.rank = rank;
        n.next = NIL;
        n.loc = b;
        self.len += 1;
        Ok(())
    }

    /// Adds (or removes) bucket `b` to the sums upward while nodes change
    /// between empty and non-empty.
    fn mark(&mut self, b: u32, occupied: bool) {
        let mut l = self.levels.count();
        while l > 0 {
            l -= 1;
            let (idx, k) = self.levels.position(l, b);
            let s = &mut self.sums[idx];
            let was_empty = s.a == 0;
            if occupied {
                s.a += weight(k);
                s.b += u128::from(k) * u128::from(weight(k));
                if !was_empty {
                    return;
                }
            } else {
                s.a -= weight(k);
                s.b -= u128::from(k) * u128::from(weight(k));
                if s.a != 0 {
                    return;
                }
            }
        }
    }

    /// Removes and returns an id of (about) the lowest rank, with its rank.
    pub fn pop(&mut self) -> Option<(u32, u64)> {
        if self.sums[0].a == 0 {
            return None;
        }
        let mut i = 0usize;
        let mut exact = true;
        for l in 0..self.levels.count() {
            let s = self.sums[self.levels.index(l, i)];
            let mut k = (s.b / u128::from(s.a)) as u32;
            if k > 63 || s.a & weight(k) == 0 {
                k = k.saturating_sub(1).min(63); // defensive: never taken
            }
            exact &= k == s.a.leading_zeros();
            i = (i << 6) | k as usize;
        }
        if !exact {
            self.inexact += 1;
        }
        let b = i as u32;
        let bk = &mut self.buckets[i];
        let id = bk.head;
        let next = self.nodes[id as usize].next;
        bk.head = next;
        if next == NIL {
            bk.tail = NIL;
            self.mark(b, false);
        }
        self.nodes[id as usize].loc = NIL;
        self.len -= 1;
        Some((id, self.nodes[id as usize].rank))
    }

    /// Ids queued.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pops that did not take the lowest non-empty bucket.
    pub fn inexact(&self) -> u64 {
        self.inexact
    }
}
