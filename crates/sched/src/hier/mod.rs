//! Hierarchies: a tree of nodes (link → tenant → VM → leaf, up to
//! [`MAX_LEVELS`] levels) where each node has a guaranteed rate, a ceiling
//! and a weight for the excess, and each leaf runs any algorithm of this
//! crate over its flows.
//!
//! Sources: Linux HTB (`sch_htb.c`, Devera 2002: rate/ceil buckets, the
//! three modes, borrowing from the lowest ancestor with spare); hClock
//! (Billaud and Gulati, EuroSys 2013: reservation/limit/shares); the
//! hierarchical policies of PIFO and Eiffel (`docs/REFERENCE.md` §5.5, §5.9).
//!
//! # Semantics
//! Every node has two token buckets refilled from `now` (integer ns; tokens
//! in units of 1/(8·10⁹) byte, so refills are exact): one at `rate_bps`
//! (the guarantee) and one at `ceil_bps`, each `burst_ns` of its rate deep
//! (at least [`MIN_BURST_PACKETS`] maximum packets); an idle node banks no
//! more than that. A packet may be sent while the tokens are positive and
//! may drive them negative. A node is
//! * **green** — rate and ceiling tokens positive: it sends on its own
//!   guarantee, and lends what its children leave unused;
//! * **yellow** — rate tokens spent, ceiling tokens positive: it borrows;
//! * **red** — ceiling tokens spent: nothing in its subtree is sent.
//!
//! A node is *ready* when it is not red and holds a packet it could send
//! (a leaf: backlogged; an inner node: a ready child). Each inner node keeps
//! two DRR rings of its ready children, with quanta proportional to their
//! weights: the **guarantee ring** (children that are green, or have a green
//! ready descendant) and the **excess ring** (every ready child).
//! `dequeue` descends from the root, taking at each node the guarantee ring
//! when it is non-empty and the excess ring otherwise, down to a leaf whose
//! policy picks the packet. The bytes are charged to the ceiling bucket of
//! every node on the path and to the rate bucket of the lowest green node on
//! the path (the lender) and of its ancestors; the nodes below the lender
//! borrowed and do not spend their guarantee (HTB's rule). The DRR credit of
//! the ring used at each level is charged too, so the excess ring's
//! credits count excess service only: **the excess splits by weight among
//! the yellow siblings** that want it.
//!
//! When packets are held but no path may send, `dequeue` returns `None` and
//! [`Scheduler::next_eligible`](crate::Scheduler::next_eligible) gives the
//! earliest time a bucket (or a shaping leaf policy) lets something go.
//!
//! # Guarantees
//! * **Rate.** Guarantees are served first at every level, so a
//!   backlogged node receives at least its rate, as long as each node's
//!   children are guaranteed no more than it is
//!   ([`HierarchyConfig::validate`] enforces Σ children's rates ≤ parent's
//!   rate). A green node waits only for a red ancestor, and for at most its
//!   parent's DRR round among green siblings.
//! * **Ceiling.** A node sends only while its ceiling tokens are positive,
//!   so over any window it sends at most `ceil × window + ceiling bucket +
//!   one packet`. The root's rate is the link rate: if the real link is
//!   faster, the hierarchy shapes.
//! * **Excess.** Siblings above their rate and below their ceiling share
//!   what their parent has beyond the guarantees in proportion to their
//!   weights, within one DRR quantum plus one packet per round.
//!
//! The integration tests (`tests/hier.rs`) check all three on a simulated
//! link with a 3-level tree (within 1%) and on random trees.
//!
//! # Complexity
//! O(depth) per enqueue and dequeue when all DRR quanta are at least one
//! packet (inner quanta are `quantum_unit × weight / smallest sibling
//! weight` ≥ `quantum_unit`), plus the leaf policy's own cost; no scan over
//! leaves or siblings. A bucket that runs out arms one timer for its node in
//! a binary heap (O(log nodes), only when a node changes color; at most one
//! live entry per node). Memory: one 64-byte cache line per node for what
//! decisions read, about 90 bytes more for buckets and timers (touched only
//! for shaped nodes), and per leaf either a queue in one shared arena (FIFO
//! leaves, and DRR/PRIO leaves of a single flow, which order alike) or a
//! scheduler of its own with its own arena.
//!
//! # Mapping
//! | HTB | hClock | here |
//! |---|---|---|
//! | `rate`, `burst` | reservation | `rate_bps`, `burst_ns` |
//! | `ceil`, `cburst` | limit | `ceil_bps`, `burst_ns` (same time, ceiling rate) |
//! | `quantum` (= rate / r2q) | shares | `weight` (quantum = unit × weight / smallest sibling) |
//! | CAN_SEND / MAY_BORROW / CANT_SEND | R-tag / S-tag / L-tag eligibility | green / yellow / red |
//! | leaf qdisc (pfifo) | per-VM queue | `leaf_alg` (any [`crate::AlgKind`] but a hierarchy) |
//! | `prio` (8 bands) | — | not offered: use PRIO as the leaf policy |
//!
//! # Deviations
//! * **Strict ceilings.** HTB lets a green class send even when an ancestor
//!   is over its ceiling; here a red node holds back its whole subtree, so
//!   no node ever exceeds its ceiling (beyond one bucket and one packet).
//! * **Top-down lender priority.** HTB serves the lowest-level lenders
//!   first across the whole tree; here priority to guarantees is decided at
//!   each node on the way down (guarantee ring before excess ring). Every
//!   node still gets its guarantee; only the order among green subtrees of
//!   different parents differs.
//! * **Weights, not rates, set the DRR quanta** (also in the guarantee
//!   ring). Green nodes are capped by their own buckets, so this only orders
//!   them in the short term; it also makes an unshaped tree weighted-fair.
//! * **No priorities between classes** (HTB's `prio`); the validation
//!   refuses children guaranteed more than their parent (HTB accepts it and
//!   then cannot honour the guarantees).
//! * **Capped nodes rejoin first.** A node coming back from red rejoins its
//!   parent's excess ring at the head rather than the tail: it was held
//!   below its weighted share by its own ceiling, and waiting a whole DRR
//!   round (longer than its ceiling bucket when the bucket is shallow) would
//!   lose it part of its ceiling. Plain DRR would append it.
//! * **Leaf arenas.** A leaf with a policy of its own (not FIFO) owns an
//!   arena of [`HierarchyConfig::leaf_capacity`] packets (default: twice its
//!   share of the capacity by flow count, at least 64); the scheduler
//!   capacity still bounds the total. Such a leaf can therefore refuse with
//!   `QueueFull` while the hierarchy as a whole has room.
//! * **Default tree.** Chosen by name without a description, the hierarchy
//!   is [`HierarchyConfig::for_flows`]: unlimited rates everywhere, so it is
//!   work-conserving hierarchical weighted DRR whatever `now` does.

//!
//! # Flow lifecycle
//! The tree (its nodes, rates, ceilings and the number of flow slots of
//! each leaf) is fixed at construction: a leaf holds the flow slots
//! `flows` of its description, and the flow table's capacity must equal
//! their sum. Inside that, flows are added, changed and removed freely:
//! * **Add**: the slot becomes present in its leaf (and in the leaf's own
//!   policy, which allocates nothing either). O(1) plus the leaf policy's
//!   cost.
//! * **Change**: passed to the leaf's policy (e.g. a DRR leaf's quanta);
//!   queued packets stay queued.
//! * **Remove**: the flow's packets leave its leaf (O(packets of the leaf)
//!   for a FIFO leaf, the policy's cost otherwise) and go to `purge` with
//!   [`crate::DropReason::FlowRemoved`]; the backlog of every node on the
//!   path and the hierarchy's total drop by their number, and each node
//!   from the leaf up is recolored and re-linked in its parent's rings
//!   (O(depth)).
//! * **Node weights** are those of the description, unless they follow the
//!   flows ([`Hierarchy::with_weights_following_flows`], on for the
//!   default tree): then a node's weight is the sum of the weights of the
//!   present flows beneath it, so a flow's weight change shows in its
//!   share from the next DRR round at every level.
//!
//! Not supported: adding or removing nodes, moving a flow to another leaf,
//! and changing a node's rate, ceiling or weight at run time (the
//! `Scheduler` lifecycle is per flow); rebuild the hierarchy for those.

mod config;
mod scheduler;

pub use config::{
    HierarchyConfig, NodeConfig, DEFAULT_BURST_NS, DEFAULT_LEAF_ALG, MAX_BURST_NS, MAX_LEVELS,
    MAX_NODES, MIN_BURST_PACKETS, UNLIMITED_BPS,
};
pub use scheduler::Hierarchy;
