//! Cache-aware AHRW (CA-AHRW) and its tree form (H-CAHRW): AHRW whose queue
//! lengths are weighted by the cost of running a flow away from its home.
//!
//! # Source
//! \[H\] §6.2–6.4. The cost matrix holds c_{p,h} ≥ 1, the cost of running on
//! target p a flow whose home is h (Eq. 6.3: (Comp_p + Mem_p + Comm_{p,h}) /
//! (Comp_h + Mem_h), diagonal 1). The flow's home is its plain HRW target.
//! Weighted queues Q'_p = c_{p,home}·Q_p (Eq. 6.4) replace Q_p in AHRW:
//! h' = (Q'_min / Q'_p)·g (Eq. 6.5–6.6). H-CAHRW (Eq. 6.7–6.8) walks a tree:
//! the leaves carry the home's weighted queues and a parent's queue is 0 if
//! any child's is 0, else their sum.
//!
//! # Choices
//! * Q'_min is the minimum of the weighted queues, over non-zero ones by
//!   default ([`MinQueue`]).
//! * Eq. 6.7's printed condition and its justification disagree; pspat
//!   follows the justification: any empty child makes the parent 0.
//! * The H-CAHRW home is the hierarchical HRW leaf (no queue adjustment).
//!
//! # Complexity
//! * CA-AHRW: 2N weight evaluations (home, then scores), O(N), no allocation.
//! * H-CAHRW: the sum of the fan-outs on the home's path plus on the chosen
//!   path ([`HierCaAhrw::decide_from_home`] skips the home walk). The home's
//!   weighted internal queues are derived once per home per change of the
//!   leaf queues (O(nodes), cached), not per decision. No allocation.
//!
//! \[H\] D. Guo, *Multicore Scheduling for Network Applications Based on
//! Highest Random Weight*, PhD thesis, UC Riverside, 2010.

use super::ahrw::{multiplier, MinQueue};
use super::digest::{weight, FlowDigest};
use super::error::{check_ids, PlaceError};
use super::hier::{Aggregate, HierTree, TreeDecision};
use super::hrw::{argmax_by_score, argmax_plain};

/// A square matrix of cost ratios, rows = targets, columns = sources (homes),
/// every entry finite and ≥ 1.
#[derive(Clone, Debug, PartialEq)]
pub struct CostMatrix {
    n: usize,
    entries: Vec<f64>,
}

impl CostMatrix {
    /// A matrix from rows (`rows[target][source]`), for `targets` targets.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::place::CostMatrix;
    /// let c = CostMatrix::new(vec![vec![1.0, 2.0], vec![2.0, 1.0]], 2).unwrap();
    /// assert_eq!(c.get(0, 1), 2.0);
    /// assert!(CostMatrix::new(vec![vec![1.0, 0.5], vec![2.0, 1.0]], 2).is_err());
    /// ```
    ///
    /// # Errors
    /// [`PlaceError::NoTargets`] for `targets == 0`;
    /// [`PlaceError::CostMatrixSize`] unless it is `targets × targets`;
    /// [`PlaceError::CostBelowOne`] for an entry below 1 or not finite.
    pub fn new(rows: Vec<Vec<f64>>, targets: usize) -> Result<Self, PlaceError> {
        if targets == 0 {
            return Err(PlaceError::NoTargets);
        }
        let size_error = |cols: usize| PlaceError::CostMatrixSize {
            expected: targets,
            rows: rows.len(),
            cols,
        };
        if rows.len() != targets {
            return Err(size_error(rows.first().map_or(0, Vec::len)));
        }
        if let Some(r) = rows.iter().find(|r| r.len() != targets) {
            return Err(size_error(r.len()));
        }
        for (row, r) in rows.iter().enumerate() {
            for (col, &value) in r.iter().enumerate() {
                if !(value.is_finite() && value >= 1.0) {
                    return Err(PlaceError::CostBelowOne { row, col, value });
                }
            }
        }
        Ok(CostMatrix {
            n: targets,
            entries: rows.into_iter().flatten().collect(),
        })
    }

    /// All ones: CA-AHRW then decides as AHRW.
    ///
    /// # Errors
    /// [`PlaceError::NoTargets`] for `targets == 0`.
    pub fn uniform(targets: usize) -> Result<Self, PlaceError> {
        Self::new(vec![vec![1.0; targets]; targets], targets)
    }

    /// The number of targets (rows, and columns).
    pub fn targets(&self) -> usize {
        self.n
    }

    /// c_{target, source}.
    ///
    /// # Panics
    /// If either index is `>= self.targets()`.
    #[inline]
    pub fn get(&self, target: usize, source: usize) -> f64 {
        assert!(source < self.n, "source {source} out of {}", self.n);
        self.entries[target * self.n + source]
    }
}

fn check_size(costs: &CostMatrix, targets: usize) -> Result<(), PlaceError> {
    if costs.targets() == targets {
        Ok(())
    } else {
        Err(PlaceError::CostMatrixSize {
            expected: targets,
            rows: costs.targets(),
            cols: costs.targets(),
        })
    }
}

/// CA-AHRW over a flat set of targets.
///
/// # Examples
/// ```
/// use pspat_sched::place::{CaAhrw, CostMatrix, FlowDigest, MinQueue};
/// let costs = CostMatrix::new(vec![vec![1.0, 4.0], vec![4.0, 1.0]], 2).unwrap();
/// let mut ca = CaAhrw::new(vec![0, 1], costs, MinQueue::NonZero).unwrap();
/// let d = FlowDigest::of_u64(3);
/// let home = ca.home(d);
/// ca.queues_mut()[home] = 3_000;
/// ca.queues_mut()[1 - home] = 1_000;
/// // Away from home the queue weighs 4 × 1000 > 3000: the flow stays.
/// assert_eq!(ca.decide(d), home);
/// ```
#[derive(Clone, Debug)]
pub struct CaAhrw {
    ids: Vec<u32>,
    costs: CostMatrix,
    queues: Vec<u64>,
    min_queue: MinQueue,
}

impl CaAhrw {
    /// CA-AHRW over targets `ids` with `costs` (`ids.len()` square).
    ///
    /// # Errors
    /// [`PlaceError::NoTargets`], [`PlaceError::DuplicateTarget`],
    /// [`PlaceError::CostMatrixSize`].
    pub fn new(ids: Vec<u32>, costs: CostMatrix, min_queue: MinQueue) -> Result<Self, PlaceError> {
        check_ids(&ids)?;
        check_size(&costs, ids.len())?;
        let queues = vec![0; ids.len()];
        Ok(CaAhrw {
            ids,
            costs,
            queues,
            min_queue,
        })
    }

    /// The target ids, in decision order.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The queue lengths (bytes), by target position.
    pub fn queues_mut(&mut self) -> &mut [u64] {
        &mut self.queues
    }

    /// The flow's home: its plain HRW target.
    pub fn home(&self, digest: FlowDigest) -> usize {
        argmax_plain(&self.ids, digest)
    }

    /// The position of the target that wins `digest`. O(N), no allocation.
    pub fn decide(&self, digest: FlowDigest) -> usize {
        let home = self.home(digest);
        let c = &self.costs;
        let q = &self.queues;
        let weighted = |p: usize| c.get(p, home) * q[p] as f64;
        let q_min = self.min_queue.of((0..q.len()).map(weighted));
        argmax_by_score(&self.ids, |p, id| {
            multiplier(q_min, weighted(p)) * weight(digest, id) as f64
        })
    }
}

/// A decision of [`HierCaAhrw`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaTreeDecision {
    /// The chosen target position.
    pub target: usize,
    /// The flow's home (hierarchical HRW leaf).
    pub home: usize,
    /// Weight evaluations spent (home walk included when it was computed).
    pub evaluations: u32,
}

/// H-CAHRW: CA-AHRW level by level down a [`HierTree`].
///
/// # Examples
/// ```
/// use pspat_sched::place::{CostMatrix, FlowDigest, HierCaAhrw, HierTree, MinQueue};
/// let tree = HierTree::uniform(&[2, 2, 2]).unwrap();
/// let mut h = HierCaAhrw::new(tree, CostMatrix::uniform(8).unwrap(), MinQueue::NonZero).unwrap();
/// let d = h.decide(FlowDigest::of_u64(1));
/// assert_eq!(d.target, d.home); // all queues empty: the home wins
/// assert_eq!(d.evaluations, 2 * (2 + 2 + 2));
/// ```
#[derive(Clone, Debug)]
pub struct HierCaAhrw {
    tree: HierTree,
    costs: CostMatrix,
    queues: Vec<u64>,
    /// Row h: every node's derived queue as seen from home h.
    derived: Vec<f64>,
    derived_epoch: Vec<u64>,
    epoch: u64,
    min_queue: MinQueue,
}

impl HierCaAhrw {
    /// H-CAHRW over `tree` with `costs` (square over the tree's targets).
    ///
    /// # Errors
    /// [`PlaceError::CostMatrixSize`].
    pub fn new(tree: HierTree, costs: CostMatrix, min_queue: MinQueue) -> Result<Self, PlaceError> {
        let n = tree.targets();
        check_size(&costs, n)?;
        let nodes = tree.nodes();
        Ok(HierCaAhrw {
            derived: vec![0.0; n * nodes],
            // Epoch 0 is "never derived"; the queues start at epoch 1.
            derived_epoch: vec![0; n],
            epoch: 1,
            queues: vec![0; n],
            tree,
            costs,
            min_queue,
        })
    }

    /// The tree.
    pub fn tree(&self) -> &HierTree {
        &self.tree
    }

    /// The leaf queue lengths to update in place (bytes), by target.
    pub fn queues_mut(&mut self) -> &mut [u64] {
        self.epoch += 1;
        &mut self.queues
    }

    /// Every node's derived queue as seen from `home` (breadth-first order).
    ///
    /// # Errors
    /// [`PlaceError::IndexOutOfRange`] for a home beyond the targets.
    pub fn node_queues(&mut self, home: usize) -> Result<&[f64], PlaceError> {
        self.check_target(home)?;
        self.refresh(home);
        let nodes = self.tree.nodes();
        Ok(&self.derived[home * nodes..(home + 1) * nodes])
    }

    fn check_target(&self, t: usize) -> Result<(), PlaceError> {
        if t < self.queues.len() {
            Ok(())
        } else {
            Err(PlaceError::IndexOutOfRange {
                what: "target",
                index: t,
                len: self.queues.len(),
            })
        }
    }

    fn refresh(&mut self, home: usize) {
        if self.derived_epoch[home] != self.epoch {
            let nodes = self.tree.nodes();
            let (c, q) = (&self.costs, &self.queues);
            self.tree.derive(
                Aggregate::ZeroIfAnyChildEmpty,
                |p| c.get(p, home) * q[p] as f64,
                &mut self.derived[home * nodes..(home + 1) * nodes],
            );
            self.derived_epoch[home] = self.epoch;
        }
    }

    /// Computes the flow's home, then the adjusted walk. No allocation.
    pub fn decide(&mut self, digest: FlowDigest) -> CaTreeDecision {
        let home = self.tree.descend(digest, None, self.min_queue);
        let mut d = self.walk(digest, home.target);
        d.evaluations += home.evaluations;
        d
    }

    /// The adjusted walk for a flow whose home the caller keeps (e.g. in its
    /// flow state): costs only the chosen path's fan-outs.
    ///
    /// # Errors
    /// [`PlaceError::IndexOutOfRange`] for a home beyond the targets.
    pub fn decide_from_home(
        &mut self,
        digest: FlowDigest,
        home: usize,
    ) -> Result<CaTreeDecision, PlaceError> {
        self.check_target(home)?;
        Ok(self.walk(digest, home))
    }

    fn walk(&mut self, digest: FlowDigest, home: usize) -> CaTreeDecision {
        self.refresh(home);
        let nodes = self.tree.nodes();
        let TreeDecision {
            target,
            evaluations,
        } = self.tree.descend(
            digest,
            Some(&self.derived[home * nodes..(home + 1) * nodes]),
            self.min_queue,
        );
        CaTreeDecision {
            target,
            home,
            evaluations,
        }
    }

    /// The flow's home: hierarchical HRW without adjustment.
    pub fn home(&self, digest: FlowDigest) -> TreeDecision {
        self.tree.descend(digest, None, self.min_queue)
    }
}
