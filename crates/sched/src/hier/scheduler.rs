//! The [`Hierarchy`] scheduler: buckets, rings, timers. See the
//! [module documentation](super) for the semantics.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::config::{
    leaf_kind, HierarchyConfig, DEFAULT_BURST_NS, MAX_LEVELS, MIN_BURST_PACKETS, UNLIMITED_BPS,
};
use crate::scheduler::purged;
use crate::{
    AlgKind, AnyScheduler, ConfigError, DropReason, FlowError, FlowId, FlowParams, FlowTable,
    Instant, Packet, PacketQueues, Rejected, Scheduler, SchedulerConfig,
};

const NIL: u32 = u32::MAX;
const NEVER: u64 = u64::MAX;
/// Token unit: one byte is 8·10⁹ units, so `ns × bit/s` refills exactly
/// (the service units of [`crate::rate`]).
const UNITS_PER_BYTE: i64 = crate::rate::UNITS_PER_BYTE as i64;
/// Ring index of the guarantee ring (children that can send on a guarantee).
const G: usize = 0;
/// Ring index of the excess ring (every child that can send).
const X: usize = 1;
/// Smallest per-leaf arena chosen by default, in packets.
const MIN_LEAF_CAPACITY: usize = 64;

/// Where a node stands against its buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Color {
    /// Within its rate: may send on, and lend, its guarantee.
    Green,
    /// Above its rate, within its ceiling: may borrow.
    Yellow,
    /// Above its ceiling: its whole subtree waits.
    Red,
}

/// A token bucket in units of 1/(8·10⁹) byte; `rate == 0` is unlimited.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    rate: i64,
    tokens: i64,
    depth: i64,
}

impl Bucket {
    fn new(rate_bps: i64, burst_ns: u64, min_bytes: u32) -> Self {
        if rate_bps == UNLIMITED_BPS {
            return Bucket {
                rate: 0,
                tokens: 1,
                depth: 1,
            };
        }
        let min = i128::from(min_bytes) * i128::from(UNITS_PER_BYTE);
        let depth = (i128::from(rate_bps) * i128::from(burst_ns))
            .max(min)
            .min(i128::from(i64::MAX / 4)) as i64;
        Bucket {
            rate: rate_bps,
            tokens: depth,
            depth,
        }
    }

    #[inline]
    fn refill(&mut self, dt_ns: u64) {
        if self.rate != 0 && dt_ns != 0 {
            let t = i128::from(self.tokens) + i128::from(dt_ns) * i128::from(self.rate);
            self.tokens = t.min(i128::from(self.depth)) as i64;
        }
    }

    #[inline]
    fn charge(&mut self, len: u32) {
        if self.rate != 0 {
            self.tokens = self
                .tokens
                .saturating_sub(i64::from(len).saturating_mul(UNITS_PER_BYTE));
        }
    }

    #[inline]
    fn positive(&self) -> bool {
        self.rate == 0 || self.tokens > 0
    }

    /// Nanoseconds until the tokens become positive (0 if they are).
    fn wait_ns(&self) -> u64 {
        if self.positive() {
            0
        } else {
            (self.tokens.unsigned_abs() / self.rate.unsigned_abs()).saturating_add(1)
        }
    }
}

/// A node's place in one of its parent's rings; `prev == NIL`: not a member.
#[derive(Clone, Copy, Debug)]
struct Link {
    prev: u32,
    next: u32,
    /// DRR credit in bytes for this ring; may go negative by one packet.
    credit: i64,
}

const UNLINKED: Link = Link {
    prev: NIL,
    next: NIL,
    credit: 0,
};

/// `Node::leaf` of an inner node.
const INNER: u32 = u32::MAX;
/// `Node::leaf` of a FIFO leaf kept inline in the shared arena.
const INLINE: u32 = u32::MAX - 1;

/// What every decision reads, packed in one cache line; the buckets and
/// timers live apart in [`Shape`] and are touched only for shaped nodes.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
struct Node {
    /// This node's membership in its parent's two rings ([`G`], [`X`]).
    links: [Link; 2],
    /// DRR quantum among siblings, bytes, proportional to the weight.
    quantum: i64,
    parent: u32,
    /// [`INNER`], [`INLINE`] or an index into `subs`.
    leaf: u32,
    /// Packets held in the subtree.
    backlog: u32,
    /// Heads of this node's two rings of children.
    heads: [u32; 2],
    color: Color,
    /// Has a finite rate (so buckets to keep); otherwise always green.
    shaped: bool,
    /// Leaves: the leaf policy holds its packets back until `sub_wake`.
    blocked: bool,
    /// Went red since it last joined its parent's excess ring: it rejoins
    /// at the head (see `ring_insert`).
    capped: bool,
}

#[derive(Clone, Debug)]
struct Shape {
    rate: Bucket,
    ceil: Bucket,
    /// Time the buckets were last refilled to.
    t_last: u64,
    /// When this node's state next improves by itself (NEVER: it won't, or
    /// nobody cares because it holds nothing).
    wake: u64,
    /// Earliest time of this node's entry in the timer heap (NEVER: none).
    queued_at: u64,
    /// Leaves: when the blocked leaf policy said to try again.
    sub_wake: u64,
}

struct Sub {
    sched: AnyScheduler,
    base: u32,
}

/// An HTB-like hierarchy of guaranteed rates, ceilings and weighted excess
/// sharing, with any algorithm as the policy inside each leaf.
///
/// # Examples
/// ```
/// use pspat_sched::{FlowId, FlowTable, Hierarchy, HierarchyConfig, Instant, NodeConfig, Packet, Scheduler};
/// let cfg = HierarchyConfig::new(vec![
///     NodeConfig::root("link", 8_000_000), // 1 byte per µs
///     NodeConfig::leaf("a", "link", 2_000_000, 8_000_000, 1, 1),
///     NodeConfig::leaf("b", "link", 6_000_000, 8_000_000, 1, 1),
/// ]);
/// let mut h = Hierarchy::new(&cfg, FlowTable::uniform(2).unwrap(), 64, 1500).unwrap();
/// h.enqueue(Instant::ZERO, Packet::new(FlowId(1), 1000, 7)).unwrap();
/// assert_eq!(h.dequeue(Instant::ZERO).map(|p| (p.flow, p.token)), Some((FlowId(1), 7)));
/// ```
pub struct Hierarchy {
    nodes: Box<[Node]>,
    shapes: Box<[Shape]>,
    /// Leaves with a policy of their own.
    subs: Box<[Sub]>,
    /// FIFO leaves: one queue per node index in one shared arena.
    inline: PacketQueues,
    names: Box<[String]>,
    /// Global flow id → its leaf's node index.
    flow_leaf: Box<[u32]>,
    flows: FlowTable,
    root: u32,
    leaf_count: usize,
    capacity: usize,
    total: usize,
    timers: BinaryHeap<Reverse<(u64, u32)>>,
    timer_cap: usize,
    /// Bytes of inner DRR quantum per unit of relative weight.
    quantum_unit: u32,
    /// Each node's weight among its siblings.
    weights: Box<[u64]>,
    /// Each node's children.
    children: Box<[Box<[u32]>]>,
    /// Node weights track the present flows beneath
    /// ([`Hierarchy::with_weights_following_flows`]): the sum of their
    /// weights, per node (the weight is this sum, at least 1).
    flow_sums: Option<Box<[u64]>>,
}

impl Hierarchy {
    /// Builds the tree `cfg` over `flows` (the leaves' flows, in leaf
    /// order), holding at most `capacity` packets in all. Inner DRR quanta
    /// are `quantum_unit × weight / smallest sibling weight` bytes; leaf
    /// policies get `quantum_unit` as their own.
    ///
    /// FIFO leaves (and DRR or PRIO leaves of a single flow, which order
    /// alike) share one arena of `capacity` packets; every other leaf policy
    /// is built by [`SchedulerConfig::build`] over the leaf's flows
    /// (renumbered from 0) with its own arena of
    /// [`HierarchyConfig::leaf_capacity`] packets.
    ///
    /// # Errors
    /// Anything [`HierarchyConfig::validate`] rejects; a flow count that
    /// differs from `flows.capacity()` (the flow slots); a zero capacity or quantum unit; a leaf
    /// policy that fails to build (named by node).
    pub fn new(
        cfg: &HierarchyConfig,
        flows: FlowTable,
        capacity: usize,
        quantum_unit: u32,
    ) -> Result<Self, ConfigError> {
        let tree = cfg.analyse()?;
        if tree.total_flows != flows.capacity() as u64 {
            return Err(ConfigError::invalid(
                "hierarchy flows",
                format!(
                    "the leaves hold {} flows in all but the flow table has {}; make them equal",
                    tree.total_flows,
                    flows.capacity()
                ),
            ));
        }
        ConfigError::check_range(
            "scheduler capacity (packets)",
            capacity,
            1..=PacketQueues::MAX_CAPACITY,
        )?;
        if quantum_unit == 0 {
            return Err(ConfigError::out_of_range(
                "hierarchy quantum unit (bytes)",
                0,
                "1..=65535",
            ));
        }
        let min_burst = MIN_BURST_PACKETS * flows.max_lmax();
        let n = cfg.nodes.len();
        let mut nodes = Vec::with_capacity(n);
        let mut shapes = Vec::with_capacity(n);
        for (i, nc) in cfg.nodes.iter().enumerate() {
            let burst = nc.burst_ns.unwrap_or(DEFAULT_BURST_NS);
            let quantum = match tree.parent[i] {
                None => i64::from(quantum_unit),
                Some(p) => {
                    let minw = tree.children[p]
                        .iter()
                        .map(|&c| cfg.nodes[c].weight)
                        .min()
                        .unwrap_or(1)
                        .max(1);
                    let q = u128::from(quantum_unit) * u128::from(nc.weight) / u128::from(minw);
                    q.clamp(1, (i64::MAX / 4) as u128) as i64
                }
            };
            nodes.push(Node {
                links: [UNLINKED; 2],
                quantum,
                parent: tree.parent[i].map_or(NIL, |p| p as u32),
                leaf: INNER,
                backlog: 0,
                heads: [NIL; 2],
                color: Color::Green,
                shaped: nc.rate_bps != UNLIMITED_BPS,
                blocked: false,
                capped: false,
            });
            shapes.push(Shape {
                rate: Bucket::new(nc.rate_bps, burst, min_burst),
                ceil: Bucket::new(nc.ceil_bps.unwrap_or(nc.rate_bps), burst, min_burst),
                t_last: 0,
                wake: NEVER,
                queued_at: NEVER,
                sub_wake: NEVER,
            });
        }
        let mut subs = Vec::new();
        let mut flow_leaf = Vec::with_capacity(flows.capacity());
        let mut any_inline = false;
        let mut leaf_count = 0;
        let total_flows = flows.capacity();
        for (i, nc) in cfg.nodes.iter().enumerate() {
            if !tree.children[i].is_empty() {
                continue;
            }
            leaf_count += 1;
            let k = nc.flows as usize;
            flow_leaf.extend(std::iter::repeat_n(i as u32, k));
            let kind = leaf_kind(nc)?;
            // FIFO, and any FIFO-equivalent policy over a single flow, runs
            // inline: same order, one indirection and four allocations fewer.
            if kind == AlgKind::Fifo || (k == 1 && matches!(kind, AlgKind::Drr | AlgKind::Prio)) {
                nodes[i].leaf = INLINE;
                any_inline = true;
                continue;
            }
            let base = tree.flow_base[i] as usize;
            // The leaf's slots, renumbered from 0, present as in `flows`.
            let mut sub_flows = FlowTable::with_capacity(k, Vec::new())?;
            for local in 0..k {
                if let Some(p) = flows.get(FlowId((base + local) as u32)) {
                    // Cannot fail: the slot exists and `p` is validated.
                    let _ = sub_flows.insert(FlowId(local as u32), p);
                }
            }
            let leaf_cap = cfg.leaf_capacity.unwrap_or_else(|| {
                let share = (capacity as u128 * k as u128).div_ceil(total_flows as u128) as usize;
                share.saturating_mul(2).max(MIN_LEAF_CAPACITY).min(capacity)
            });
            let mut sub_cfg = SchedulerConfig::new(kind);
            sub_cfg.capacity = leaf_cap;
            sub_cfg.quantum_unit = quantum_unit;
            let sched = sub_cfg
                .build(sub_flows)
                .map_err(|e| ConfigError::invalid(format!("node {:?}", nc.name), e.to_string()))?;
            nodes[i].leaf = subs.len() as u32;
            subs.push(Sub {
                sched,
                base: base as u32,
            });
        }
        let inline = PacketQueues::new(n, if any_inline { capacity } else { 1 }, None)?;
        let timer_cap = 2 * n + 8;
        Ok(Hierarchy {
            nodes: nodes.into_boxed_slice(),
            shapes: shapes.into_boxed_slice(),
            subs: subs.into_boxed_slice(),
            inline,
            names: cfg.nodes.iter().map(|nc| nc.name.clone()).collect(),
            flow_leaf: flow_leaf.into_boxed_slice(),
            flows,
            root: tree.root as u32,
            leaf_count,
            capacity,
            total: 0,
            timers: BinaryHeap::with_capacity(timer_cap),
            timer_cap,
            quantum_unit,
            weights: cfg.nodes.iter().map(|nc| u64::from(nc.weight)).collect(),
            children: tree
                .children
                .iter()
                .map(|c| c.iter().map(|&i| i as u32).collect())
                .collect(),
            flow_sums: None,
        })
    }

    /// Makes every node's weight the sum of the weights of the present
    /// flows beneath it (at least 1), now and after every
    /// [`Scheduler::add_flow`], [`Scheduler::change_flow`] and
    /// [`Scheduler::remove_flow`], recomputing the DRR quanta of the
    /// siblings on the flow's path (O(depth × fan-out) per flow change).
    /// This is what [`HierarchyConfig::for_flows`] describes at build time
    /// (one flow per leaf), so that tree stays weighted-fair among the flows
    /// as they come and go; [`SchedulerConfig::build`] turns it on for the
    /// default tree. Without it, node weights are those of the description
    /// and a flow's weight matters only to its leaf's policy.
    #[must_use]
    pub fn with_weights_following_flows(mut self) -> Self {
        let mut sums = vec![0u64; self.nodes.len()];
        for (f, p) in self.flows.iter() {
            let mut n = self.flow_leaf[f.index()];
            while n != NIL {
                sums[n as usize] += u64::from(p.weight);
                n = self.nodes[n as usize].parent;
            }
        }
        for (w, &s) in self.weights.iter_mut().zip(&sums) {
            *w = s.max(1);
        }
        self.flow_sums = Some(sums.into_boxed_slice());
        for p in 0..self.nodes.len() as u32 {
            self.requantum(p);
        }
        self
    }

    /// Recomputes the quanta of `p`'s children from their weights:
    /// `quantum_unit × weight / smallest sibling weight`.
    fn requantum(&mut self, p: u32) {
        let kids = &self.children[p as usize];
        let minw = kids
            .iter()
            .map(|&c| self.weights[c as usize])
            .min()
            .unwrap_or(1)
            .max(1);
        for &c in kids.iter() {
            let q = u128::from(self.quantum_unit) * u128::from(self.weights[c as usize])
                / u128::from(minw);
            self.nodes[c as usize].quantum = q.clamp(1, (i64::MAX / 4) as u128) as i64;
        }
    }

    /// With weights following flows: `flow`'s weight went from `old` to
    /// `new` (0 for absent); updates the sums and quanta along its path.
    fn reweigh(&mut self, flow: FlowId, old: u32, new: u32) {
        let Some(sums) = self.flow_sums.as_mut() else {
            return;
        };
        let mut n = self.flow_leaf[flow.index()];
        while n != NIL {
            let s = &mut sums[n as usize];
            *s = *s - u64::from(old) + u64::from(new);
            self.weights[n as usize] = (*s).max(1);
            n = self.nodes[n as usize].parent;
        }
        let mut n = self.flow_leaf[flow.index()];
        while n != NIL {
            let p = self.nodes[n as usize].parent;
            if p != NIL {
                self.requantum(p);
            }
            n = p;
        }
    }

    /// The leaf of `flow` and, for a leaf with a policy of its own, the
    /// index of that policy and the flow's id inside it.
    fn locate(&self, flow: FlowId) -> (u32, Option<(usize, FlowId)>) {
        let leaf = self.flow_leaf[flow.index()];
        let sub = self.nodes[leaf as usize].leaf;
        if sub == INLINE {
            (leaf, None)
        } else {
            let base = self.subs[sub as usize].base;
            (leaf, Some((sub as usize, FlowId(flow.0 - base))))
        }
    }

    /// Number of nodes; indices are those of [`HierarchyConfig::nodes`].
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Number of leaves.
    pub fn leaf_count(&self) -> usize {
        self.leaf_count
    }

    /// The index of the node called `name`.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// The name of node `index`.
    pub fn node_name(&self, index: usize) -> Option<&str> {
        self.names.get(index).map(String::as_str)
    }

    /// The nodes a packet of `flow` is charged to, from its leaf up to the
    /// root (indices of [`HierarchyConfig::nodes`]).
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::{FlowId, FlowTable, Hierarchy, HierarchyConfig};
    /// let cfg = HierarchyConfig::balanced(&[2, 2], 1, 1_000_000_000).unwrap();
    /// let h = Hierarchy::new(&cfg, FlowTable::uniform(4).unwrap(), 64, 1500).unwrap();
    /// let names: Vec<&str> = h.path_of(FlowId(3)).map(|i| h.node_name(i).unwrap()).collect();
    /// assert_eq!(names, ["n2.3", "n1.1", "root"]);
    /// ```
    pub fn path_of(&self, flow: FlowId) -> impl Iterator<Item = usize> + '_ {
        let mut n = self.flow_leaf.get(flow.index()).copied().unwrap_or(NIL);
        std::iter::from_fn(move || {
            if n == NIL {
                return None;
            }
            let cur = n;
            n = self.nodes[cur as usize].parent;
            Some(cur as usize)
        })
    }

    #[inline]
    fn is_ready(&self, n: u32) -> bool {
        let nd = &self.nodes[n as usize];
        nd.color != Color::Red
            && if nd.leaf == INNER {
                nd.heads[X] != NIL
            } else {
                nd.backlog > 0 && !nd.blocked
            }
    }

    /// Brings `n`'s buckets to `now`.
    #[inline]
    fn refill(&mut self, n: u32, now: u64) {
        if self.nodes[n as usize].shaped {
            let sh = &mut self.shapes[n as usize];
            let dt = now.saturating_sub(sh.t_last);
            sh.t_last = sh.t_last.max(now);
            sh.rate.refill(dt);
            sh.ceil.refill(dt);
        }
    }

    /// Recomputes `n`'s color from its buckets and arms its timer.
    #[inline]
    fn recolor(&mut self, n: u32) {
        let nd = &mut self.nodes[n as usize];
        if !nd.shaped && !nd.blocked {
            return; // always green, nothing to wait for
        }
        let sh = &mut self.shapes[n as usize];
        if nd.shaped {
            nd.color = if !sh.ceil.positive() {
                nd.capped = true;
                Color::Red
            } else if !sh.rate.positive() {
                Color::Yellow
            } else {
                Color::Green
            };
        }
        let bucket = if nd.backlog == 0 {
            NEVER
        } else {
            match nd.color {
                Color::Green => NEVER,
                Color::Yellow => sh.t_last.saturating_add(sh.rate.wait_ns()),
                Color::Red => sh.t_last.saturating_add(sh.ceil.wait_ns()),
            }
        };
        let sub = if nd.blocked { sh.sub_wake } else { NEVER };
        let wake = bucket.min(sub);
        sh.wake = wake;
        if wake != NEVER && wake < sh.queued_at {
            self.push_timer(wake, n);
        }
    }

    fn push_timer(&mut self, t: u64, n: u32) {
        if self.timers.len() >= self.timer_cap {
            // Drop entries superseded by an earlier one of the same node;
            // at most one per node remains, so this makes room.
            let shapes = &self.shapes;
            self.timers
                .retain(|&Reverse((t, n))| shapes[n as usize].queued_at == t);
        }
        self.shapes[n as usize].queued_at = t;
        self.timers.push(Reverse((t, n)));
    }

    /// Puts `c` in or out of its parent's rings to match its state.
    #[inline]
    fn fix_membership(&mut self, c: u32) {
        let p = self.nodes[c as usize].parent;
        if p == NIL {
            return;
        }
        let ready = self.is_ready(c);
        let nd = &self.nodes[c as usize];
        let gready = ready && (nd.color == Color::Green || nd.heads[G] != NIL);
        if ready != (nd.links[X].prev != NIL) {
            if ready {
                self.ring_insert(p, c, X);
            } else {
                self.ring_remove(p, c, X);
            }
        }
        if gready != (self.nodes[c as usize].links[G].prev != NIL) {
            if gready {
                self.ring_insert(p, c, G);
            } else {
                self.ring_remove(p, c, G);
            }
        }
    }

    /// Fixes memberships from `n` up to the root.
    fn refresh_up(&mut self, mut n: u32) {
        while n != NIL {
            self.fix_membership(n);
            n = self.nodes[n as usize].parent;
        }
    }

    /// Appends `c` to ring `r` of `p` with a fresh quantum of credit. A node
    /// back from its ceiling goes to the head of the excess ring instead: it
    /// was capped below its weighted share, and waiting a whole round would
    /// let its ceiling bucket overflow and lose it part of its ceiling.
    fn ring_insert(&mut self, p: u32, c: u32, r: usize) {
        let to_head = r == X && std::mem::take(&mut self.nodes[c as usize].capped);
        let head = self.nodes[p as usize].heads[r];
        let quantum = self.nodes[c as usize].quantum;
        if head == NIL {
            self.nodes[c as usize].links[r] = Link {
                prev: c,
                next: c,
                credit: quantum,
            };
            self.nodes[p as usize].heads[r] = c;
        } else {
            let tail = self.nodes[head as usize].links[r].prev;
            self.nodes[c as usize].links[r] = Link {
                prev: tail,
                next: head,
                credit: quantum,
            };
            self.nodes[tail as usize].links[r].next = c;
            self.nodes[head as usize].links[r].prev = c;
            if to_head {
                self.nodes[p as usize].heads[r] = c;
            }
        }
    }

    fn ring_remove(&mut self, p: u32, c: u32, r: usize) {
        let l = self.nodes[c as usize].links[r];
        self.nodes[c as usize].links[r] = UNLINKED;
        if l.next == c {
            self.nodes[p as usize].heads[r] = NIL;
        } else {
            self.nodes[l.prev as usize].links[r].next = l.next;
            self.nodes[l.next as usize].links[r].prev = l.prev;
            if self.nodes[p as usize].heads[r] == c {
                self.nodes[p as usize].heads[r] = l.next;
            }
        }
    }

    /// DRR over ring `r` of `p` (non-empty): the head keeps the turn while
    /// its credit is positive; otherwise it earns a quantum and the turn
    /// passes. Terminates: each pass adds a positive quantum.
    #[inline]
    fn ring_pick(&mut self, p: u32, r: usize) -> u32 {
        loop {
            let h = self.nodes[p as usize].heads[r];
            let nd = &mut self.nodes[h as usize];
            if nd.links[r].credit > 0 {
                return h;
            }
            nd.links[r].credit += nd.quantum;
            let next = nd.links[r].next;
            self.nodes[p as usize].heads[r] = next;
        }
    }

    fn process_timers(&mut self, now: u64) {
        while let Some(&Reverse((t, n))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let sh = &mut self.shapes[n as usize];
            if sh.queued_at != t {
                continue; // superseded by an earlier entry
            }
            sh.queued_at = NEVER;
            if sh.wake == NEVER {
                continue;
            }
            if sh.wake > now {
                let w = sh.wake;
                self.push_timer(w, n);
                continue;
            }
            sh.wake = NEVER;
            if sh.sub_wake <= now {
                sh.sub_wake = NEVER;
                self.nodes[n as usize].blocked = false;
            }
            self.refill(n, now);
            self.recolor(n);
            self.refresh_up(n);
        }
    }

    /// Leaves the heap's top exact, so `next_eligible` answers precisely.
    fn tidy_timers(&mut self) {
        while let Some(&Reverse((t, n))) = self.timers.peek() {
            let sh = &mut self.shapes[n as usize];
            if sh.queued_at != t {
                self.timers.pop();
            } else if sh.wake == NEVER {
                sh.queued_at = NEVER;
                self.timers.pop();
            } else if t < sh.wake {
                let w = sh.wake;
                sh.queued_at = NEVER;
                self.timers.pop();
                self.push_timer(w, n);
            } else {
                break;
            }
        }
    }

    /// Charges `len` bytes along `path` (root first) at `now`.
    #[inline]
    fn charge(&mut self, path: &[u32], via: &[usize], len: u32, now: u64) {
        // The lender is the lowest green node: it and its ancestors pay rate
        // tokens; the nodes below it borrowed and pay only ceiling tokens.
        let lender = path
            .iter()
            .rposition(|&n| self.nodes[n as usize].color == Color::Green);
        for i in (0..path.len()).rev() {
            let n = path[i];
            let nd = &mut self.nodes[n as usize];
            nd.backlog -= 1;
            if i > 0 {
                nd.links[via[i]].credit -= i64::from(len);
            }
            if nd.shaped {
                self.refill(n, now);
                let sh = &mut self.shapes[n as usize];
                if lender.is_some_and(|l| i <= l) {
                    sh.rate.charge(len);
                }
                sh.ceil.charge(len);
            }
            self.recolor(n);
            self.fix_membership(n);
        }
    }
}

impl Scheduler for Hierarchy {
    #[inline]
    fn enqueue(&mut self, now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.flows.admit(&pkt)?;
        if self.total >= self.capacity {
            return Err(Rejected {
                packet: pkt,
                reason: DropReason::QueueFull,
            });
        }
        let start = self.flow_leaf[pkt.flow.index()];
        let leaf = self.nodes[start as usize].leaf;
        if leaf == INLINE {
            self.inline.push(start as usize, pkt)?;
        } else {
            let sub = &mut self.subs[leaf as usize];
            let local = Packet::new(FlowId(pkt.flow.0 - sub.base), pkt.len, pkt.token);
            if let Err(rej) = sub.sched.enqueue(now, local) {
                return Err(Rejected {
                    packet: pkt,
                    reason: rej.reason,
                });
            }
        }
        self.total += 1;
        let now = now.as_nanos();
        let was_backlogged = self.nodes[start as usize].backlog > 0;
        let mut n = start;
        while n != NIL {
            let nd = &mut self.nodes[n as usize];
            nd.backlog += 1;
            let parent = nd.parent;
            if nd.backlog == 1 {
                // Idle nodes keep no timer: bring them up to date now.
                self.refill(n, now);
                self.recolor(n);
            }
            n = parent;
        }
        if !was_backlogged {
            self.refresh_up(start);
        }
        Ok(())
    }

    #[inline]
    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        if self.total == 0 {
            return None;
        }
        let now_ns = now.as_nanos();
        self.process_timers(now_ns);
        loop {
            let root = self.root;
            if !self.is_ready(root) {
                self.tidy_timers();
                return None;
            }
            let mut path = [NIL; MAX_LEVELS];
            let mut via = [X; MAX_LEVELS];
            path[0] = root;
            let mut len = 1;
            let mut n = root;
            while self.nodes[n as usize].leaf == INNER {
                let r = if self.nodes[n as usize].heads[G] != NIL {
                    G
                } else {
                    X
                };
                n = self.ring_pick(n, r);
                path[len] = n;
                via[len] = r;
                len += 1;
            }
            let leaf = self.nodes[n as usize].leaf;
            let pkt = if leaf == INLINE {
                self.inline.pop(n as usize)
            } else {
                let sub = &mut self.subs[leaf as usize];
                sub.sched.dequeue(now).map(|mut p| {
                    p.flow = FlowId(p.flow.0 + sub.base);
                    p
                })
            };
            if let Some(pkt) = pkt {
                self.total -= 1;
                self.charge(&path[..len], &via[..len], pkt.len, now_ns);
                return Some(pkt);
            }
            // The leaf's own policy is shaping: park the leaf until it says.
            let t = match self.subs.get(leaf as usize) {
                Some(sub) => sub
                    .sched
                    .next_eligible(now)
                    .map_or(now_ns, Instant::as_nanos),
                None => now_ns,
            }
            .max(now_ns.saturating_add(1));
            self.shapes[n as usize].sub_wake = t;
            self.nodes[n as usize].blocked = true;
            self.recolor(n);
            self.refresh_up(n);
        }
    }

    fn queued(&self) -> usize {
        self.total
    }

    fn next_eligible(&self, now: Instant) -> Option<Instant> {
        if self.total == 0 {
            return None;
        }
        if self.is_ready(self.root) {
            return Some(now);
        }
        self.timers
            .peek()
            .map(|&Reverse((t, _))| Instant::from_nanos(t).max(now))
    }

    fn name(&self) -> &'static str {
        "htb"
    }

    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.check_insert(flow, &params)?;
        if let (_, Some((sub, local))) = self.locate(flow) {
            self.subs[sub].sched.add_flow(local, params)?;
        }
        self.flows.insert(flow, params)?;
        self.reweigh(flow, 0, params.weight);
        Ok(())
    }

    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.check_update(flow, &params)?;
        if let (_, Some((sub, local))) = self.locate(flow) {
            self.subs[sub].sched.change_flow(local, params)?;
        }
        let old = self.flows.update(flow, params)?;
        self.reweigh(flow, old.weight, params.weight);
        Ok(())
    }

    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        self.flows.check_present(flow)?;
        let (leaf, sub) = self.locate(flow);
        let mut count = 0u32;
        match sub {
            Some((sub, local)) => {
                let base = self.subs[sub].base;
                self.subs[sub].sched.remove_flow(local, &mut |mut r| {
                    r.packet.flow = FlowId(r.packet.flow.0 + base);
                    count += 1;
                    purge(r);
                })?;
            }
            None => self.inline.retain(
                leaf as usize,
                |p| p.flow != flow,
                |p| {
                    count += 1;
                    purge(purged(p));
                },
            ),
        }
        let old = self.flows.remove(flow)?;
        self.reweigh(flow, old.weight, 0);
        if count > 0 {
            // The hierarchy's totals: backlogs along the path, then colors
            // and ring memberships from the leaf up.
            self.total -= count as usize;
            let mut n = leaf;
            while n != NIL {
                let nd = &mut self.nodes[n as usize];
                nd.backlog -= count;
                n = nd.parent;
            }
            let mut n = leaf;
            while n != NIL {
                self.recolor(n);
                self.fix_membership(n);
                n = self.nodes[n as usize].parent;
            }
        }
        Ok(())
    }

    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        if !self.flows.contains(flow) {
            return None;
        }
        match self.locate(flow) {
            (_, Some((sub, local))) => self.subs[sub].sched.flow_queued(local),
            (leaf, None) => Some(
                self.inline
                    .iter(leaf as usize)
                    .filter(|p| p.flow == flow)
                    .count(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hier::NodeConfig;

    #[test]
    fn bucket_refills_exactly_clamps_and_predicts_its_wait() {
        // 8 Mbit/s = 1 byte per µs; 1 ms deep but at least 3000 B.
        let mut b = Bucket::new(8_000_000, 1_000_000, 3_000);
        assert_eq!(b.depth, 3_000 * UNITS_PER_BYTE);
        assert_eq!(b.tokens, b.depth);
        b.charge(4_000); // 1000 B in debt
        assert!(!b.positive());
        assert_eq!(b.wait_ns(), 1_000_001);
        b.refill(1_000_000);
        assert!(!b.positive(), "exactly zero is not positive");
        b.refill(1);
        assert!(b.positive());
        assert_eq!(b.wait_ns(), 0);
        b.refill(u64::MAX);
        assert_eq!(b.tokens, b.depth, "no credit beyond the burst");
        // Huge rates and bursts do not overflow.
        let mut b = Bucket::new(i64::MAX - 1, u64::MAX, 3_000);
        b.refill(u64::MAX);
        b.charge(65_535);
        assert!(b.positive());
        b.charge(u32::MAX);
        assert!(!b.positive());
        assert!(b.wait_ns() >= 1);
    }

    #[test]
    fn unlimited_bucket_never_runs_out() {
        let mut b = Bucket::new(UNLIMITED_BPS, 1, 3_000);
        for _ in 0..1_000 {
            b.charge(65_535);
        }
        assert!(b.positive());
        assert_eq!(b.wait_ns(), 0);
    }

    #[test]
    fn rings_follow_readiness_and_colors() {
        // root(80 Mbit/s) -> a (rate 1, ceil 80) and b (rate 7, ceil 80)
        let cfg = HierarchyConfig::new(vec![
            NodeConfig::root("root", 80_000_000),
            NodeConfig::leaf("a", "root", 1_000_000, 80_000_000, 1, 1),
            NodeConfig::leaf("b", "root", 7_000_000, 80_000_000, 1, 1),
        ]);
        let mut h = Hierarchy::new(&cfg, FlowTable::uniform(2).unwrap(), 64, 1500).unwrap();
        let t0 = Instant::ZERO;
        assert_eq!(h.nodes[0].heads, [NIL, NIL]);
        h.enqueue(t0, Packet::new(FlowId(0), 1500, 0)).unwrap();
        h.enqueue(t0, Packet::new(FlowId(0), 1500, 1)).unwrap();
        // a is green and backlogged: in both rings.
        assert_eq!(h.nodes[0].heads, [1, 1]);
        assert!(h.dequeue(t0).is_some());
        assert!(h.dequeue(t0).is_some());
        // a spent its 3000 B of rate bucket: yellow, out of the rings
        // because it is empty, and no timer for an idle node.
        assert_eq!(h.nodes[1].color, Color::Yellow);
        assert_eq!(h.nodes[0].heads, [NIL, NIL]);
        assert_eq!(h.shapes[1].wake, NEVER);
        h.enqueue(t0, Packet::new(FlowId(0), 1500, 2)).unwrap();
        // Backlogged again but yellow: excess ring only, with a timer.
        assert_eq!(h.nodes[0].heads, [NIL, 1]);
        assert_ne!(h.shapes[1].wake, NEVER);
        assert_eq!(h.total, 1);
    }
}
