//! The flow-id layout: which flow ids each pipe and flowset owns on each
//! link, so that a scheduler's [`FlowTable`] is built once.
//!
//! # Layout
//! Pipes and scheds share one number space; each number is a **link** (one
//! scheduler, one rate). Flow ids are dense **per link**, starting at 0:
//!
//! 1. a pipe's own queue first (id 0), when the link is a pipe;
//! 2. then every flowset (`queue N config sched|pipe L`) feeding the link,
//!    in increasing queue number, each a contiguous range:
//!    * a flowset without a mask: one id;
//!    * a flowset with a mask: `queues_per_flowset` ids, one per dynamic
//!      slot (`first + slot`), then, with [`OverflowPolicy::SharedQueue`],
//!      one more id: the flowset's overflow queue (`first + slots`).
//!
//! Every id of a range carries the flowset's weight, lmax and priority (a
//! pipe's queue: weight 1, the default lmax, priority 0), whatever the
//! link's algorithm (a pipe's `type`, FIFO by default), and every id is
//! present from the start: a dynamic queue is a slot of the range, not a flow
//! added at run time, so nothing in the scheduler changes when a dynamic
//! queue is created or expires.
//!
//! A link with an instance mask (`sched N config ... mask ...`, or a pipe's
//! mask) has `instances_per_sched` instances (plus an overflow instance under
//! [`OverflowPolicy::SharedQueue`]); every instance has the same layout, and
//! a dynamic queue's slot is unique across the link's instances, so one flow
//! table per link serves every instance.

use pspat_config::Plan;
use pspat_sched::{AlgKind, ConfigError, FlowId, FlowParams, FlowTable, DEFAULT_LMAX};

use crate::OverflowPolicy;

/// Which object of the plan owns a flow id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowOwner {
    /// The queue of `pipe N`.
    Pipe(u32),
    /// Flowset `queue N`.
    Queue(u32),
}

/// The ids one pipe or flowset owns on its link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRange {
    /// The owner.
    pub owner: FlowOwner,
    /// The first id.
    pub first: FlowId,
    /// Dynamic slots (`first..first + dynamic`); 0 for a pipe's queue or an
    /// unmasked flowset, whose one id is `first`.
    pub dynamic: u32,
    /// The overflow queue's id, for a masked flowset under
    /// [`OverflowPolicy::SharedQueue`].
    pub overflow: Option<FlowId>,
    /// The parameters of every id in the range.
    pub params: FlowParams,
}

impl FlowRange {
    /// Ids in the range.
    pub fn len(&self) -> u32 {
        self.dynamic.max(1) + u32::from(self.overflow.is_some())
    }

    /// Always false: a range holds at least one id.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `flow` is in the range.
    pub fn contains(&self, flow: FlowId) -> bool {
        flow.0 >= self.first.0 && flow.0 - self.first.0 < self.len()
    }
}

/// Whether a link is a pipe (a scheduler with its own queue, FIFO unless
/// its `type` says otherwise) or a sched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// `pipe N config`.
    Pipe,
    /// `sched N config`.
    Sched,
}

/// One link's flows.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkLayout {
    /// The pipe or sched number.
    pub number: u32,
    /// Pipe or sched.
    pub kind: LinkKind,
    /// The scheduling algorithm (a pipe's `type`, FIFO by default).
    pub alg: AlgKind,
    /// Scheduler instances (1 without an instance mask; otherwise the cap,
    /// plus the overflow instance under [`OverflowPolicy::SharedQueue`]).
    pub instances: u32,
    /// The ranges, in id order.
    pub ranges: Vec<FlowRange>,
}

impl LinkLayout {
    /// Ids on this link.
    pub fn flow_count(&self) -> u32 {
        self.ranges.iter().map(FlowRange::len).sum()
    }

    /// Every id with its parameters, in id order.
    pub fn flows(&self) -> impl Iterator<Item = (FlowId, FlowParams)> + '_ {
        self.ranges
            .iter()
            .flat_map(|r| (0..r.len()).map(move |i| (FlowId(r.first.0 + i), r.params)))
    }

    /// The flow table of this link (every id present), for each of its
    /// scheduler instances.
    ///
    /// # Errors
    /// [`ConfigError`] from [`FlowTable::new`]: a link no flow feeds (a sched
    /// without flowsets), or more ids than a table holds.
    pub fn flow_table(&self) -> Result<FlowTable, ConfigError> {
        FlowTable::new(self.flows().map(|(_, p)| p).collect())
    }

    /// The range that owns `flow`.
    pub fn owner_of(&self, flow: FlowId) -> Option<&FlowRange> {
        self.ranges.iter().find(|r| r.contains(flow))
    }
}

/// Every link's flows (module docs for the layout).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct FlowLayout {
    /// Links in increasing number.
    pub links: Vec<LinkLayout>,
}

impl FlowLayout {
    /// The link numbered `number`.
    pub fn link(&self, number: u32) -> Option<&LinkLayout> {
        self.links.iter().find(|l| l.number == number)
    }

    /// The range `owner` holds, and the number of its link.
    pub fn range_of(&self, owner: FlowOwner) -> Option<(u32, &FlowRange)> {
        self.links.iter().find_map(|l| {
            l.ranges
                .iter()
                .find(|r| r.owner == owner)
                .map(|r| (l.number, r))
        })
    }

    /// Builds the layout of `plan` (references already checked).
    pub(crate) fn new(
        plan: &Plan,
        queue_slots: impl Fn(u32) -> u32,
        instance_slots: u32,
        overflow: OverflowPolicy,
    ) -> Self {
        let shared = overflow == OverflowPolicy::SharedQueue;
        let mut numbers: Vec<u32> = plan
            .scheds
            .keys()
            .chain(plan.pipes.keys())
            .copied()
            .collect();
        numbers.sort_unstable();
        numbers.dedup();
        let links = numbers
            .into_iter()
            .map(|number| {
                let (kind, alg, mask) = match plan.pipes.get(&number) {
                    Some(p) => (LinkKind::Pipe, p.alg, p.mask),
                    None => {
                        let s = &plan.scheds[&number];
                        (LinkKind::Sched, s.alg, s.mask)
                    }
                };
                let mut ranges = Vec::new();
                let mut next = 0u32;
                if kind == LinkKind::Pipe {
                    ranges.push(FlowRange {
                        owner: FlowOwner::Pipe(number),
                        first: FlowId(0),
                        dynamic: 0,
                        overflow: None,
                        params: FlowParams {
                            weight: 1,
                            lmax: DEFAULT_LMAX,
                            priority: 0,
                        },
                    });
                    next = 1;
                }
                for q in plan.queues.values().filter(|q| q.parent.number() == number) {
                    let dynamic = if q.mask.is_empty() {
                        0
                    } else {
                        queue_slots(q.number)
                    };
                    let overflow = (dynamic > 0 && shared).then(|| FlowId(next + dynamic));
                    let r = FlowRange {
                        owner: FlowOwner::Queue(q.number),
                        first: FlowId(next),
                        dynamic,
                        overflow,
                        params: FlowParams {
                            weight: q.weight,
                            lmax: q.lmax,
                            priority: q.pri,
                        },
                    };
                    next = next.saturating_add(r.len());
                    ranges.push(r);
                }
                let instances = if mask.is_empty() {
                    1
                } else {
                    instance_slots + u32::from(shared)
                };
                LinkLayout {
                    number,
                    kind,
                    alg,
                    instances,
                    ranges,
                }
            })
            .collect();
        FlowLayout { links }
    }
}
