//! Hierarchical AHRW (H-AHRW): AHRW applied level by level down a tree of
//! targets (socket → shared cache → core, or core → pipeline → thread).
//!
//! # Source
//! \[H\] §5.3, Def. 5.3: at each level, among the children of the node chosen
//! above, pick `argmax r·g(c, child)` with the children's queues; a parent's
//! queue is the sum of its children's. \[H\] Eq. 6.7 (H-CAHRW) instead makes a
//! parent's queue 0 when any child is empty ([`Aggregate::ZeroIfAnyChildEmpty`]),
//! which steers flows towards an idle leaf.
//!
//! # Choices
//! * Node ids for the weight function (\[H\] leaves the per-level ids
//!   unspecified): a leaf's id is its target position; an internal node's id
//!   is a digest of its level and group labels. Ids therefore do not depend
//!   on the rest of the tree: adding a leaf to an existing group leaves every
//!   other node's weights unchanged.
//! * Q_min is taken among the siblings being compared ([`MinQueue`] rule).
//!
//! # Complexity and guarantees
//! * One decision evaluates the weight function once per child of each node
//!   on the chosen path: the **sum of the fan-outs** (14 instead of 64 on a
//!   Niagara 2 tree of 8 × 2 × 4). [`TreeDecision::evaluations`] reports it.
//! * Internal queues are derived once per change of the leaf queues (O(nodes),
//!   then cached), not per decision. No allocation per decision.
//! * With all leaf queues equal or zero, the decision is hierarchical HRW:
//!   deterministic per flow, 1/N of the flows per leaf of a uniform tree.
//!
//! \[H\] D. Guo, *Multicore Scheduling for Network Applications Based on
//! Highest Random Weight*, PhD thesis, UC Riverside, 2010.

use super::ahrw::{multiplier, MinQueue};
use super::digest::{weight, xxh64, FlowDigest};
use super::error::PlaceError;

/// How a parent's queue derives from its children's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Aggregate {
    /// The sum of the children's queues (\[H\] §5.3, H-AHRW).
    #[default]
    Sum,
    /// 0 if any child's queue is 0, else the sum (\[H\] Eq. 6.7 as its
    /// justification reads; H-CAHRW).
    ZeroIfAnyChildEmpty,
}

impl Aggregate {
    /// A parent's queue from its children's.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::place::Aggregate;
    /// assert_eq!(Aggregate::Sum.of(&[3.0, 0.0, 4.0]), 7.0);
    /// assert_eq!(Aggregate::ZeroIfAnyChildEmpty.of(&[3.0, 0.0, 4.0]), 0.0);
    /// assert_eq!(Aggregate::ZeroIfAnyChildEmpty.of(&[3.0, 1.0, 4.0]), 8.0);
    /// ```
    pub fn of(self, children: &[f64]) -> f64 {
        let sum: f64 = children.iter().sum();
        match self {
            Aggregate::Sum => sum,
            Aggregate::ZeroIfAnyChildEmpty if children.iter().any(|&q| q <= 0.0) => 0.0,
            Aggregate::ZeroIfAnyChildEmpty => sum,
        }
    }
}

/// One decision in a tree: the leaf (target position) and how many weight
/// evaluations it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeDecision {
    /// Target position (the leaf's position in the description given).
    pub target: usize,
    /// Weight-function evaluations spent.
    pub evaluations: u32,
}

#[derive(Clone, Debug)]
struct Node {
    /// The S of the weight function: the target position for a leaf, a
    /// digest of the level and the group labels for an internal node, so
    /// that ids do not depend on the rest of the tree.
    id: u32,
    parent: u32,
    first_child: u32,
    children: u32,
    /// The target position, for a leaf.
    target: u32,
}

/// A tree of targets: leaves are targets, children of a node are contiguous
/// in breadth-first order.
#[derive(Clone, Debug)]
pub struct HierTree {
    nodes: Vec<Node>,
    /// Node index of each target.
    leaf_of_target: Vec<u32>,
}

const NO_TARGET: u32 = u32::MAX;

impl HierTree {
    /// A uniform tree: `fanouts[0]` children of the root, each with
    /// `fanouts[1]` children, and so on; leaves numbered left to right.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::place::HierTree;
    /// let niagara = HierTree::uniform(&[8, 2, 4]).unwrap(); // cores, pipelines, threads
    /// assert_eq!(niagara.targets(), 64);
    /// ```
    ///
    /// # Errors
    /// [`PlaceError::NoTargets`] for no levels or a zero fan-out;
    /// [`PlaceError::Tree`] beyond 2^24 leaves.
    pub fn uniform(fanouts: &[usize]) -> Result<Self, PlaceError> {
        if fanouts.is_empty() || fanouts.contains(&0) {
            return Err(PlaceError::NoTargets);
        }
        let leaves = fanouts
            .iter()
            .try_fold(1usize, |a, &f| a.checked_mul(f))
            .filter(|&n| n <= 1 << 24)
            .ok_or_else(|| PlaceError::Tree("more than 2^24 leaves".into()))?;
        let paths: Vec<Vec<u32>> = (0..leaves)
            .map(|mut leaf| {
                let mut path = vec![0u32; fanouts.len()];
                for (level, &f) in fanouts.iter().enumerate().rev() {
                    path[level] = (leaf % f) as u32;
                    leaf /= f;
                }
                path
            })
            .collect();
        // The last label distinguishes siblings: drop it, the leaf is the node.
        let groups: Vec<Vec<u32>> = paths
            .into_iter()
            .map(|mut p| {
                p.pop();
                p
            })
            .collect();
        Self::from_paths(&groups)
    }

    /// A tree from each target's path of group labels, top level first (e.g.
    /// `[package, shared L3, shared L2]`). Targets with equal labels down to
    /// a level share that subtree. Every path has the same length. Levels
    /// that split nothing (every group has one child) are dropped, so they
    /// cost no weight evaluation.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::place::HierTree;
    /// // Two sockets, each with two L2 groups of two cores.
    /// let paths: Vec<Vec<u32>> = (0..8u32).map(|c| vec![c / 4, c / 2]).collect();
    /// let t = HierTree::from_paths(&paths).unwrap();
    /// assert_eq!(t.fanouts_to(0).unwrap(), vec![2, 2, 2]);
    /// ```
    ///
    /// # Errors
    /// [`PlaceError::NoTargets`] for no paths; [`PlaceError::Tree`] for paths
    /// of different lengths or more than 2^24 targets.
    pub fn from_paths(paths: &[Vec<u32>]) -> Result<Self, PlaceError> {
        if paths.is_empty() {
            return Err(PlaceError::NoTargets);
        }
        if paths.len() > 1 << 24 {
            return Err(PlaceError::Tree("more than 2^24 leaves".into()));
        }
        let depth = paths[0].len();
        if let Some((i, p)) = paths.iter().enumerate().find(|(_, p)| p.len() != depth) {
            return Err(PlaceError::Tree(format!(
                "path of target {i} has {} labels, target 0's has {depth}",
                p.len()
            )));
        }
        // Sort targets by path (stable: equal paths keep input order).
        let mut order: Vec<usize> = (0..paths.len()).collect();
        order.sort_by(|&a, &b| paths[a].cmp(&paths[b]));
        // Depth d (1..=depth) groups by path[..d]; depth+1 is the leaf itself.
        // starts[j]: does sorted position j open a new group at depth d?
        let n = order.len();
        let mut kept: Vec<(usize, Vec<bool>)> = Vec::new();
        let mut prev_groups = 1usize;
        for d in 1..=depth + 1 {
            let starts: Vec<bool> = (0..n)
                .map(|j| j == 0 || d > depth || paths[order[j]][..d] != paths[order[j - 1]][..d])
                .collect();
            let groups = starts.iter().filter(|&&s| s).count();
            if d == depth + 1 || (groups > prev_groups && groups < n) {
                kept.push((d, starts));
                prev_groups = groups;
            }
        }
        // Build breadth-first: level k's nodes are the group starts of kept[k].
        let mut nodes = vec![Node {
            id: 0,
            parent: 0,
            first_child: 0,
            children: 0,
            target: NO_TARGET,
        }];
        // The node (index) of each sorted position at the previous level,
        // and at the level being built.
        let mut owner = vec![0u32; n];
        let mut next_owner = vec![0u32; n];
        for (k, (d, starts)) in kept.iter().enumerate() {
            let leaf_level = k + 1 == kept.len();
            let mut current = 0u32;
            for j in 0..n {
                // A new group at this level, or a new parent, opens a node.
                if starts[j] || (j > 0 && owner[j] != owner[j - 1]) {
                    current = nodes.len() as u32;
                    let parent = &mut nodes[owner[j] as usize];
                    if parent.children == 0 {
                        parent.first_child = current;
                    }
                    parent.children += 1;
                    let target = order[j];
                    nodes.push(Node {
                        parent: owner[j],
                        first_child: 0,
                        children: 0,
                        target: if leaf_level { target as u32 } else { NO_TARGET },
                        id: if leaf_level {
                            target as u32
                        } else {
                            group_id(*d, &paths[target][..*d])
                        },
                    });
                }
                next_owner[j] = current;
            }
            std::mem::swap(&mut owner, &mut next_owner);
        }
        let mut leaf_of_target = vec![0u32; n];
        for (i, node) in nodes.iter().enumerate() {
            if node.target != NO_TARGET {
                leaf_of_target[node.target as usize] = i as u32;
            }
        }
        Ok(HierTree {
            nodes,
            leaf_of_target,
        })
    }

    /// The number of targets (leaves).
    pub fn targets(&self) -> usize {
        self.leaf_of_target.len()
    }

    /// The number of nodes, root and leaves included.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The fan-outs along the path from the root to `target`'s leaf; their
    /// sum is the cost of a decision that ends there.
    ///
    /// # Errors
    /// [`PlaceError::IndexOutOfRange`] for a target beyond the leaves.
    pub fn fanouts_to(&self, target: usize) -> Result<Vec<usize>, PlaceError> {
        let mut node = *self
            .leaf_of_target
            .get(target)
            .ok_or(PlaceError::IndexOutOfRange {
                what: "target",
                index: target,
                len: self.targets(),
            })?;
        let mut out = Vec::new();
        while node != 0 {
            node = self.nodes[node as usize].parent;
            out.push(self.nodes[node as usize].children as usize);
        }
        out.reverse();
        Ok(out)
    }

    /// Derives every node's queue into `out` (one entry per node) from
    /// `leaf_queue(target)`, children before parents.
    pub(crate) fn derive(
        &self,
        rule: Aggregate,
        mut leaf_queue: impl FnMut(usize) -> f64,
        out: &mut [f64],
    ) {
        for i in (0..self.nodes.len()).rev() {
            let n = &self.nodes[i];
            out[i] = if n.children == 0 {
                leaf_queue(n.target as usize)
            } else {
                let c = n.first_child as usize..(n.first_child + n.children) as usize;
                rule.of(&out[c])
            };
        }
    }

    /// Walks down from the root: at each node, the child with the largest
    /// r·g (r from `queues`, per node, when given; else plain HRW).
    pub(crate) fn descend(
        &self,
        digest: FlowDigest,
        queues: Option<&[f64]>,
        min_queue: MinQueue,
    ) -> TreeDecision {
        let mut node = 0usize;
        let mut evaluations = 0u32;
        loop {
            let n = &self.nodes[node];
            if n.children == 0 {
                return TreeDecision {
                    target: n.target as usize,
                    evaluations,
                };
            }
            let first = n.first_child as usize;
            let span = first..first + n.children as usize;
            let q_min = queues.map_or(0.0, |q| min_queue.of(q[span.clone()].iter().copied()));
            let mut best = first;
            let mut best_score = f64::NEG_INFINITY;
            for c in span {
                let id = self.nodes[c].id;
                let g = weight(digest, id) as f64;
                let score = queues.map_or(g, |q| multiplier(q_min, q[c]) * g);
                // Ties to the lowest id.
                if score > best_score || (score == best_score && id < self.nodes[best].id) {
                    best = c;
                    best_score = score;
                }
            }
            evaluations += n.children;
            node = best;
        }
    }
}

/// The weight-function id of an internal node: XXH64 of its depth and its
/// group labels (little-endian), low 32 bits.
fn group_id(depth: usize, labels: &[u32]) -> u32 {
    let mut bytes = Vec::with_capacity(4 * (labels.len() + 1));
    bytes.extend_from_slice(&(depth as u32).to_le_bytes());
    for l in labels {
        bytes.extend_from_slice(&l.to_le_bytes());
    }
    xxh64(&bytes, 0) as u32
}

/// H-AHRW: AHRW level by level down a [`HierTree`].
///
/// # Examples
/// ```
/// use pspat_sched::place::{Aggregate, FlowDigest, HierAhrw, HierTree, MinQueue};
/// let tree = HierTree::uniform(&[8, 2, 4]).unwrap();
/// let mut h = HierAhrw::new(tree, MinQueue::NonZero, Aggregate::Sum);
/// let d = h.decide(FlowDigest::of_u64(1));
/// assert!(d.target < 64);
/// assert_eq!(d.evaluations, 8 + 2 + 4);
/// ```
#[derive(Clone, Debug)]
pub struct HierAhrw {
    tree: HierTree,
    leaf_queues: Vec<u64>,
    derived: Vec<f64>,
    stale: bool,
    min_queue: MinQueue,
    rule: Aggregate,
}

impl HierAhrw {
    /// H-AHRW over `tree`, all queues empty.
    pub fn new(tree: HierTree, min_queue: MinQueue, rule: Aggregate) -> Self {
        let leaf_queues = vec![0; tree.targets()];
        let derived = vec![0.0; tree.nodes()];
        HierAhrw {
            tree,
            leaf_queues,
            derived,
            stale: false,
            min_queue,
            rule,
        }
    }

    /// The tree.
    pub fn tree(&self) -> &HierTree {
        &self.tree
    }

    /// The leaf queue lengths (bytes), by target position.
    pub fn queues(&self) -> &[u64] {
        &self.leaf_queues
    }

    /// The leaf queue lengths to update in place; internal queues are
    /// re-derived at the next decision.
    pub fn queues_mut(&mut self) -> &mut [u64] {
        self.stale = true;
        &mut self.leaf_queues
    }

    /// The derived queue of every node (breadth-first order, root first).
    pub fn node_queues(&mut self) -> &[f64] {
        self.refresh();
        &self.derived
    }

    fn refresh(&mut self) {
        if self.stale {
            let q = &self.leaf_queues;
            self.tree
                .derive(self.rule, |t| q[t] as f64, &mut self.derived);
            self.stale = false;
        }
    }

    /// The leaf that wins `digest` under the current queues, and the number
    /// of weight evaluations (the sum of the fan-outs on its path). No
    /// allocation.
    pub fn decide(&mut self, digest: FlowDigest) -> TreeDecision {
        self.refresh();
        self.tree
            .descend(digest, Some(&self.derived), self.min_queue)
    }

    /// Hierarchical HRW without queue adjustment (the flow's home).
    pub fn home(&self, digest: FlowDigest) -> TreeDecision {
        self.tree.descend(digest, None, self.min_queue)
    }
}
