//! The declarative description of a hierarchy: plain data the config layer
//! deserialises, validated into a tree before anything is built.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::rate::{Rate, MIN_RATE_BPS};
use crate::{ConfigError, FlowTable, MAX_WEIGHT};

/// A rate (or ceiling) of exactly this value means "unlimited": the node has
/// no token bucket for it and never waits on it, whatever `now` does. Any
/// other rate must be a [`Rate`] (1000..=10¹² bit/s).
pub const UNLIMITED_BPS: i64 = i64::MAX;

/// Deepest tree accepted, counting the root as one level (HTB's limit).
pub const MAX_LEVELS: usize = 8;

/// Largest number of nodes accepted (indices are `u32`, arrays are dense).
pub const MAX_NODES: usize = 1 << 22;

/// Default bucket depth expressed in time: 1 ms worth of the rate (and of
/// the ceiling for the ceiling bucket). Every bucket is also at least
/// [`MIN_BURST_PACKETS`] of the largest packet deep.
pub const DEFAULT_BURST_NS: u64 = 1_000_000;

/// Longest bucket depth accepted, in ns (60 s).
pub const MAX_BURST_NS: u64 = 60_000_000_000;

/// A bucket always holds at least this many of the largest packets of the
/// flow table, so a node can send a back-to-back pair on its own tokens.
pub const MIN_BURST_PACKETS: u32 = 2;

/// One node of the tree: the root (the link), an inner class (tenant, VM) or
/// a leaf holding flows.
///
/// # Examples
/// ```
/// use pspat_sched::NodeConfig;
/// let vm = NodeConfig::inner("vm1", "tenant1", 100_000_000, 1_000_000_000, 2);
/// assert_eq!(vm.ceil_bps, Some(1_000_000_000));
/// let leaf = NodeConfig::leaf("q0", "vm1", 10_000_000, 1_000_000_000, 1, 4);
/// assert_eq!(leaf.flows, 4);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Unique name, used in every error message.
    pub name: String,
    /// The parent's name; `None` for the root (exactly one node).
    #[serde(default)]
    pub parent: Option<String>,
    /// Guaranteed rate in bit/s, in the range of a [`Rate`]
    /// ([`UNLIMITED_BPS`]: no limit). For the root, the link rate the
    /// hierarchy shapes to. Signed, so that a negative value in a config
    /// file reaches validation and is refused by name.
    pub rate_bps: i64,
    /// Ceiling in bit/s, a [`Rate`] >= `rate_bps` or [`UNLIMITED_BPS`];
    /// `None` means equal to `rate_bps` (the node never borrows).
    #[serde(default)]
    pub ceil_bps: Option<i64>,
    /// Share of the excess among siblings, 1..=2^32-1 (default 1).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Bucket depth in ns of the rate (and of the ceiling for the ceiling
    /// bucket); `None` is [`DEFAULT_BURST_NS`].
    #[serde(default)]
    pub burst_ns: Option<u64>,
    /// Leaves: how many flows this leaf holds (global flow ids are handed
    /// out in the order leaves appear in [`HierarchyConfig::nodes`]). Inner
    /// nodes: 0.
    #[serde(default)]
    pub flows: u32,
    /// Leaves: the policy among the leaf's flows, a name [`crate::AlgKind::parse`]
    /// accepts (`None`: [`DEFAULT_LEAF_ALG`]). Inner nodes: `None`.
    #[serde(default)]
    pub leaf_alg: Option<String>,
}

/// Policy of a leaf whose `leaf_alg` is not given.
pub const DEFAULT_LEAF_ALG: &str = "drr";

fn default_weight() -> u32 {
    1
}

impl NodeConfig {
    /// The root: the link of `rate_bps` (ceiling equal to the rate).
    pub fn root(name: &str, rate_bps: i64) -> Self {
        NodeConfig {
            name: name.to_string(),
            parent: None,
            rate_bps,
            ceil_bps: None,
            weight: 1,
            burst_ns: None,
            flows: 0,
            leaf_alg: None,
        }
    }

    /// An inner node under `parent`.
    pub fn inner(name: &str, parent: &str, rate_bps: i64, ceil_bps: i64, weight: u32) -> Self {
        NodeConfig {
            parent: Some(parent.to_string()),
            ceil_bps: Some(ceil_bps),
            weight,
            ..Self::root(name, rate_bps)
        }
    }

    /// A leaf under `parent` holding `flows` flows with the default policy.
    pub fn leaf(
        name: &str,
        parent: &str,
        rate_bps: i64,
        ceil_bps: i64,
        weight: u32,
        flows: u32,
    ) -> Self {
        NodeConfig {
            flows,
            ..Self::inner(name, parent, rate_bps, ceil_bps, weight)
        }
    }

    fn ceil(&self) -> i64 {
        self.ceil_bps.unwrap_or(self.rate_bps)
    }

    /// The guaranteed rate, `None` when unlimited.
    ///
    /// # Errors
    /// `rate_bps` neither a [`Rate`] nor [`UNLIMITED_BPS`], named by node.
    pub fn rate(&self) -> Result<Option<Rate>, ConfigError> {
        node_rate(format!("node {:?} rate_bps", self.name), self.rate_bps)
    }

    /// The ceiling (`rate_bps` when not given), `None` when unlimited.
    ///
    /// # Errors
    /// The ceiling neither a [`Rate`] nor [`UNLIMITED_BPS`], named by node.
    pub fn ceiling(&self) -> Result<Option<Rate>, ConfigError> {
        let field = if self.ceil_bps.is_some() {
            "ceil_bps"
        } else {
            "rate_bps"
        };
        node_rate(format!("node {:?} {field}", self.name), self.ceil())
    }
}

/// A node's rate field: [`UNLIMITED_BPS`] or a [`Rate`].
fn node_rate(field: String, bps: i64) -> Result<Option<Rate>, ConfigError> {
    if bps == UNLIMITED_BPS {
        return Ok(None);
    }
    Rate::checked(field.as_str(), bps).map(Some).map_err(|_| {
        ConfigError::out_of_range(
            field,
            bps,
            format!("{}, or {UNLIMITED_BPS} for unlimited", Rate::range_text()),
        )
    })
}

/// A hierarchy: a tree of [`NodeConfig`]s, serialisable as it is (unknown
/// fields are refused, so a misspelt `ceil_bps` is an error, not a default).
///
/// # Examples
/// ```
/// use pspat_sched::{HierarchyConfig, NodeConfig};
/// let cfg = HierarchyConfig::new(vec![
///     NodeConfig::root("link", 1_000_000_000),
///     NodeConfig::inner("a", "link", 400_000_000, 1_000_000_000, 1),
///     NodeConfig::leaf("a0", "a", 400_000_000, 1_000_000_000, 1, 2),
///     NodeConfig::leaf("b0", "link", 600_000_000, 1_000_000_000, 3, 1),
/// ]);
/// assert!(cfg.validate().is_ok());
/// assert_eq!(cfg.total_flows(), 3);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HierarchyConfig {
    /// Every node, in any order; leaves get their flow ids in this order.
    pub nodes: Vec<NodeConfig>,
    /// Packets each leaf's own arena holds; `None`: twice the leaf's share
    /// of the scheduler capacity by flow count, at least 64 and at most the
    /// whole capacity. The scheduler capacity bounds the total either way.
    #[serde(default)]
    pub leaf_capacity: Option<usize>,
}

/// The validated shape of a [`HierarchyConfig`], indices into `nodes`.
pub(crate) struct Tree {
    pub root: usize,
    pub parent: Vec<Option<usize>>,
    pub children: Vec<Vec<usize>>,
    /// First global flow id of each leaf (0 for inner nodes).
    pub flow_base: Vec<u32>,
    pub total_flows: u64,
}

impl HierarchyConfig {
    /// A description holding `nodes`, default leaf capacity.
    pub fn new(nodes: Vec<NodeConfig>) -> Self {
        HierarchyConfig {
            nodes,
            leaf_capacity: None,
        }
    }

    /// Flows held by all leaves together.
    pub fn total_flows(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.flows)).sum()
    }

    /// A balanced tree under a root of `link_rate_bps`: `fanouts[i]` children
    /// per node at depth `i`, the last level being leaves of
    /// `flows_per_leaf` flows each, named `n<depth>.<index>` (root `root`).
    /// Guarantees split the parent's rate evenly (floor), every ceiling is
    /// the link rate, every weight 1. With [`UNLIMITED_BPS`] nothing is
    /// shaped and the tree is work-conserving hierarchical DRR.
    ///
    /// # Errors
    /// A fanout of 0, more than [`MAX_LEVELS`] levels or [`MAX_NODES`]
    /// nodes, zero flows per leaf, or a rate too small to split.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::HierarchyConfig;
    /// let cfg = HierarchyConfig::balanced(&[10, 10, 100], 1, 1_000_000_000_000).unwrap();
    /// assert_eq!(cfg.total_flows(), 10_000);
    /// assert!(cfg.validate().is_ok());
    /// ```
    pub fn balanced(
        fanouts: &[usize],
        flows_per_leaf: u32,
        link_rate_bps: i64,
    ) -> Result<Self, ConfigError> {
        if fanouts.len() + 1 > MAX_LEVELS {
            return Err(ConfigError::out_of_range(
                "hierarchy levels",
                fanouts.len() + 1,
                format!("1..={MAX_LEVELS} counting the root"),
            ));
        }
        if let Some(i) = fanouts.iter().position(|&f| f == 0) {
            return Err(ConfigError::out_of_range(
                format!("hierarchy fanout at depth {i}"),
                0,
                "1..",
            ));
        }
        let mut total = 1usize;
        let mut width = 1usize;
        for &f in fanouts {
            width = width.saturating_mul(f);
            total = total.saturating_add(width);
        }
        if total > MAX_NODES {
            return Err(ConfigError::out_of_range(
                "hierarchy nodes",
                total,
                format!("1..={MAX_NODES}"),
            ));
        }
        if flows_per_leaf == 0 {
            return Err(ConfigError::out_of_range("flows per leaf", 0, "1.."));
        }
        let mut nodes = vec![NodeConfig::root("root", link_rate_bps)];
        let mut level: Vec<(String, i64)> = vec![("root".to_string(), link_rate_bps)];
        for (depth, &f) in fanouts.iter().enumerate() {
            let is_leaf = depth + 1 == fanouts.len();
            let mut next = Vec::with_capacity(level.len() * f);
            for (pname, prate) in &level {
                let rate = if *prate == UNLIMITED_BPS {
                    UNLIMITED_BPS
                } else {
                    *prate / f as i64
                };
                if rate < MIN_RATE_BPS as i64 {
                    return Err(ConfigError::out_of_range(
                        "link rate (bit/s)",
                        link_rate_bps,
                        format!(
                            "large enough to give every node of the tree at least {MIN_RATE_BPS} bit/s"
                        ),
                    ));
                }
                for _ in 0..f {
                    let name = format!("n{}.{}", depth + 1, next.len());
                    let mut node = NodeConfig::inner(&name, pname, rate, link_rate_bps, 1);
                    if is_leaf {
                        node.flows = flows_per_leaf;
                    }
                    nodes.push(node);
                    next.push((name, rate));
                }
            }
            level = next;
        }
        if fanouts.is_empty() {
            nodes[0].flows = flows_per_leaf;
        }
        Ok(HierarchyConfig::new(nodes))
    }

    /// The default tree for `flows` when the algorithm is chosen by name
    /// without a description: three levels under an unlimited root
    /// (tenant, VM, leaf), one flow slot per leaf with FIFO inside, about
    /// ∛n children per node (n = the table's capacity), weights the sum of
    /// the flow weights below (saturating; an absent slot counts as weight
    /// 1 here, and [`crate::Hierarchy::with_weights_following_flows`] makes
    /// the weights track the present flows). Every rate is [`UNLIMITED_BPS`]: work-conserving,
    /// hierarchical weighted DRR.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::{FlowTable, HierarchyConfig};
    /// let cfg = HierarchyConfig::for_flows(&FlowTable::uniform(1000).unwrap());
    /// assert_eq!(cfg.total_flows(), 1000);
    /// assert!(cfg.validate().is_ok());
    /// ```
    pub fn for_flows(flows: &FlowTable) -> Self {
        let n = flows.capacity();
        let mut f = 1usize;
        while f.saturating_mul(f).saturating_mul(f) < n {
            f += 1;
        }
        let vms = n.div_ceil(f);
        let tenants = vms.div_ceil(f);
        let weights: Vec<u64> = flows.slots().map(|p| u64::from(p.weight)).collect();
        let sat = |w: u64| u32::try_from(w.max(1)).unwrap_or(u32::MAX);
        let mut nodes = vec![NodeConfig::root("root", UNLIMITED_BPS)];
        let un = UNLIMITED_BPS;
        for t in 0..tenants {
            let vm_range = t * f..((t + 1) * f).min(vms);
            let flow_range = vm_range.start * f..(vm_range.end * f).min(n);
            let w: u64 = weights[flow_range].iter().sum();
            nodes.push(NodeConfig::inner(&format!("t{t}"), "root", un, un, sat(w)));
        }
        for v in 0..vms {
            let flow_range = v * f..((v + 1) * f).min(n);
            let w: u64 = weights[flow_range].iter().sum();
            let parent = format!("t{}", v / f);
            nodes.push(NodeConfig::inner(&format!("v{v}"), &parent, un, un, sat(w)));
        }
        for (i, &w) in weights.iter().enumerate() {
            let parent = format!("v{}", i / f);
            let mut leaf = NodeConfig::leaf(&format!("l{i}"), &parent, un, un, sat(w), 1);
            leaf.leaf_alg = Some("fifo".to_string());
            nodes.push(leaf);
        }
        HierarchyConfig::new(nodes)
    }

    /// Checks the description without building anything.
    ///
    /// Rules: names unique and non-empty; exactly one root; every parent
    /// names a node; no cycle; at most [`MAX_LEVELS`] levels; rates and
    /// ceilings [`Rate`]s or [`UNLIMITED_BPS`], with ceil >= rate; weights >= 1; bursts in
    /// 1..=[`MAX_BURST_NS`]; leaves hold >= 1 flow, inner nodes none and no
    /// `leaf_alg`; a leaf policy names a known non-hierarchical algorithm;
    /// the guarantees of a node's children sum to at most its own rate
    /// (the HTB rule: a class cannot promise more than it is promised).
    ///
    /// # Errors
    /// The first rule broken, as a [`ConfigError`] naming the node and field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.analyse().map(|_| ())
    }

    pub(crate) fn analyse(&self) -> Result<Tree, ConfigError> {
        let n = self.nodes.len();
        if n == 0 {
            return Err(ConfigError::invalid(
                "hierarchy",
                "no nodes: give at least a root holding flows",
            ));
        }
        if n > MAX_NODES {
            return Err(ConfigError::out_of_range(
                "hierarchy nodes",
                n,
                format!("1..={MAX_NODES}"),
            ));
        }
        let mut index = HashMap::with_capacity(n);
        for (i, node) in self.nodes.iter().enumerate() {
            if node.name.trim().is_empty() {
                return Err(ConfigError::invalid(
                    format!("hierarchy node #{i} name"),
                    "empty: every node needs a unique name",
                ));
            }
            if index.insert(node.name.as_str(), i).is_some() {
                return Err(ConfigError::invalid(
                    format!("node {:?} name", node.name),
                    "duplicate: names must be unique",
                ));
            }
        }
        let mut parent = vec![None; n];
        let mut roots = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            match &node.parent {
                None => roots.push(i),
                Some(p) => match index.get(p.as_str()) {
                    Some(&j) => parent[i] = Some(j),
                    None => {
                        return Err(ConfigError::invalid(
                            format!("node {:?} parent", node.name),
                            format!("{p:?} is not the name of any node"),
                        ))
                    }
                },
            }
        }
        let root = match roots.as_slice() {
            [r] => *r,
            [] => {
                return Err(ConfigError::invalid(
                    "hierarchy",
                    "no root: exactly one node must have no parent (a cycle?)",
                ))
            }
            many => {
                let names: Vec<&str> = many.iter().map(|&i| self.nodes[i].name.as_str()).collect();
                return Err(ConfigError::invalid(
                    "hierarchy",
                    format!(
                        "several roots ({}): exactly one node must have no parent",
                        names.join(", ")
                    ),
                ));
            }
        };
        // Depth of each node by walking up; a walk longer than n is a cycle.
        for i in 0..n {
            let mut d = 1;
            let mut cur = i;
            while let Some(p) = parent[cur] {
                d += 1;
                cur = p;
                if d > n {
                    return Err(ConfigError::invalid(
                        format!("node {:?} parent", self.nodes[i].name),
                        "the parent chain forms a cycle and never reaches the root",
                    ));
                }
            }
            if d > MAX_LEVELS {
                return Err(ConfigError::out_of_range(
                    format!("node {:?} depth", self.nodes[i].name),
                    d,
                    format!("1..={MAX_LEVELS} levels counting the root"),
                ));
            }
        }
        let mut children = vec![Vec::new(); n];
        for (i, p) in parent.iter().enumerate() {
            if let Some(p) = *p {
                children[p].push(i);
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let name = &node.name;
            node.rate()?;
            node.ceiling()?;
            let ceil = node.ceil();
            if ceil < node.rate_bps {
                return Err(ConfigError::out_of_range(
                    format!("node {name:?} ceil_bps"),
                    ceil,
                    format!("rate_bps ({})..={UNLIMITED_BPS}", node.rate_bps),
                ));
            }
            if node.weight == 0 {
                return Err(ConfigError::out_of_range(
                    format!("node {name:?} weight"),
                    0,
                    format!("1..={} (flows use 1..={MAX_WEIGHT})", u32::MAX),
                ));
            }
            if let Some(b) = node.burst_ns {
                ConfigError::check_range(format!("node {name:?} burst_ns"), b, 1..=MAX_BURST_NS)?;
            }
            let is_leaf = children[i].is_empty();
            if is_leaf && node.flows == 0 {
                return Err(ConfigError::invalid(
                    format!("node {name:?} flows"),
                    "a leaf must hold at least one flow",
                ));
            }
            if !is_leaf && node.flows != 0 {
                return Err(ConfigError::invalid(
                    format!("node {name:?} flows"),
                    "only leaves hold flows; this node has children",
                ));
            }
            if !is_leaf && node.leaf_alg.is_some() {
                return Err(ConfigError::invalid(
                    format!("node {name:?} leaf_alg"),
                    "only leaves take a policy; this node has children",
                ));
            }
            if is_leaf {
                leaf_kind(node)?;
            }
            if !is_leaf && node.rate_bps < UNLIMITED_BPS {
                let sum: i128 = children[i]
                    .iter()
                    .map(|&c| i128::from(self.nodes[c].rate_bps))
                    .sum();
                if sum > i128::from(node.rate_bps) {
                    return Err(ConfigError::invalid(
                        format!("node {name:?} rate_bps"),
                        format!(
                            "its children are guaranteed {sum} bit/s in all, more than its own {} bit/s; \
                             lower theirs or raise its rate",
                            node.rate_bps
                        ),
                    ));
                }
            }
        }
        let mut flow_base = vec![0u32; n];
        let mut total: u64 = 0;
        for (i, node) in self.nodes.iter().enumerate() {
            if node.flows > 0 {
                flow_base[i] = u32::try_from(total).unwrap_or(u32::MAX);
                total += u64::from(node.flows);
            }
        }
        if total > FlowTable::MAX_FLOWS as u64 {
            return Err(ConfigError::out_of_range(
                "hierarchy flows (sum over leaves)",
                total,
                format!("1..={}", FlowTable::MAX_FLOWS),
            ));
        }
        if self.leaf_capacity == Some(0) {
            return Err(ConfigError::out_of_range(
                "hierarchy leaf_capacity",
                0,
                "1.. packets",
            ));
        }
        Ok(Tree {
            root,
            parent,
            children,
            flow_base,
            total_flows: total,
        })
    }
}

/// The parsed policy of a leaf.
pub(crate) fn leaf_kind(node: &NodeConfig) -> Result<crate::AlgKind, ConfigError> {
    let name = node.leaf_alg.as_deref().unwrap_or(DEFAULT_LEAF_ALG);
    let kind = crate::AlgKind::parse(name).map_err(|e| {
        ConfigError::invalid(format!("node {:?} leaf_alg", node.name), e.to_string())
    })?;
    if kind == crate::AlgKind::Hierarchy {
        return Err(ConfigError::invalid(
            format!("node {:?} leaf_alg", node.name),
            "a leaf policy cannot itself be a hierarchy; add levels to this tree instead",
        ));
    }
    Ok(kind)
}
