//! Differences between two plans, for a daemon that applies only what
//! changed on SIGHUP (or a control command) instead of rebuilding everything.
//!
//! [`diff`] lists one [`Change`] per object that was added, changed or
//! removed — nothing for objects that are equal — in this order:
//! scheds and pipes added or changed, queues added or changed, table entries
//! set, rules added or changed, rules removed, table entries removed, queues
//! removed, pipes and scheds removed, then the default action and the seed.
//! Objects are added before anything refers to them and removed after
//! nothing does, so every intermediate plan has no dangling reference (the
//! exception: a number that moves between pipe and sched is removed right
//! before it is added again). [`apply`] replays one change; applying a whole
//! diff to `old` gives `new`.
//!
//! Cost: O(n log n) in the number of objects of both plans.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::DefaultAction;
use crate::net::Prefix;
use crate::plan::{PipePlan, Plan, QueuePlan, RulePlan, SchedPlan};

/// One step from an old plan towards a new one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Change {
    /// A new sched.
    AddSched(SchedPlan),
    /// A sched whose parameters changed (same number).
    ChangeSched(SchedPlan),
    /// A sched that is gone.
    RemoveSched(u32),
    /// A new pipe.
    AddPipe(PipePlan),
    /// A pipe whose parameters changed.
    ChangePipe(PipePlan),
    /// A pipe that is gone.
    RemovePipe(u32),
    /// A new queue.
    AddQueue(QueuePlan),
    /// A queue whose parameters changed.
    ChangeQueue(QueuePlan),
    /// A queue that is gone.
    RemoveQueue(u32),
    /// A table entry added or given a new value.
    SetTableEntry {
        /// The table.
        table: u32,
        /// The prefix.
        prefix: Prefix,
        /// The new value.
        value: u32,
    },
    /// A table entry that is gone.
    RemoveTableEntry {
        /// The table.
        table: u32,
        /// The prefix.
        prefix: Prefix,
    },
    /// A new rule.
    AddRule(RulePlan),
    /// A rule that changed (same number).
    ChangeRule(RulePlan),
    /// A rule that is gone.
    RemoveRule(u32),
    /// A new default action.
    SetDefaultAction(DefaultAction),
    /// A new seed.
    SetSeed(u64),
}

/// Adds, changes and removals of one keyed collection.
fn keyed<V: PartialEq + Clone>(
    old: &BTreeMap<u32, V>,
    new: &BTreeMap<u32, V>,
    add: impl Fn(V) -> Change,
    change: impl Fn(V) -> Change,
    remove: impl Fn(u32) -> Change,
) -> (Vec<Change>, Vec<Change>) {
    let mut upserts = Vec::new();
    for (k, v) in new {
        match old.get(k) {
            None => upserts.push(add(v.clone())),
            Some(o) if o != v => upserts.push(change(v.clone())),
            Some(_) => {}
        }
    }
    let removals = old
        .keys()
        .filter(|k| !new.contains_key(k))
        .map(|k| remove(*k))
        .collect();
    (upserts, removals)
}

/// The changes that turn `old` into `new` (see the module docs for the order).
///
/// # Examples
/// ```
/// use pspat_config::{apply, diff, parse_ipfw, Change, NoProfiles};
/// let old = parse_ipfw("pipe 1 config bw 1Mbit/s\npipe 2 config bw 2Mbit/s", "a").unwrap().validate(&NoProfiles).unwrap();
/// let new = parse_ipfw("pipe 1 config bw 5Mbit/s\npipe 2 config bw 2Mbit/s", "b").unwrap().validate(&NoProfiles).unwrap();
/// let changes = diff(&old, &new);
/// assert!(matches!(&changes[..], [Change::ChangePipe(p)] if p.number == 1));
/// let mut plan = old.clone();
/// for c in &changes { apply(&mut plan, c); }
/// assert_eq!(plan, new);
/// ```
pub fn diff(old: &Plan, new: &Plan) -> Vec<Change> {
    let (mut sched_up, sched_rm) = keyed(
        &old.scheds,
        &new.scheds,
        Change::AddSched,
        Change::ChangeSched,
        Change::RemoveSched,
    );
    let (mut pipe_up, pipe_rm) = keyed(
        &old.pipes,
        &new.pipes,
        Change::AddPipe,
        Change::ChangePipe,
        Change::RemovePipe,
    );
    let (queue_up, queue_rm) = keyed(
        &old.queues,
        &new.queues,
        Change::AddQueue,
        Change::ChangeQueue,
        Change::RemoveQueue,
    );
    let (rule_up, rule_rm) = keyed(
        &old.rules,
        &new.rules,
        Change::AddRule,
        Change::ChangeRule,
        Change::RemoveRule,
    );

    // A number moving between pipe and sched: remove the old kind just before adding the new.
    let mut moved = Vec::new();
    let mut link_rm: Vec<Change> = Vec::new();
    for c in pipe_rm {
        match c {
            Change::RemovePipe(n) if new.scheds.contains_key(&n) => moved.push(c),
            c => link_rm.push(c),
        }
    }
    for c in sched_rm {
        match c {
            Change::RemoveSched(n) if new.pipes.contains_key(&n) => moved.push(c),
            c => link_rm.push(c),
        }
    }

    let mut table_set = Vec::new();
    for (t, entries) in &new.tables {
        for (prefix, value) in entries {
            if old.tables.get(t).and_then(|e| e.get(prefix)) != Some(value) {
                table_set.push(Change::SetTableEntry {
                    table: *t,
                    prefix: *prefix,
                    value: *value,
                });
            }
        }
    }
    let mut table_rm = Vec::new();
    for (t, entries) in &old.tables {
        for prefix in entries.keys() {
            if new.tables.get(t).is_none_or(|e| !e.contains_key(prefix)) {
                table_rm.push(Change::RemoveTableEntry {
                    table: *t,
                    prefix: *prefix,
                });
            }
        }
    }

    let mut out = moved;
    out.append(&mut sched_up);
    out.append(&mut pipe_up);
    out.extend(queue_up);
    out.extend(table_set);
    out.extend(rule_up);
    out.extend(rule_rm);
    out.extend(table_rm);
    out.extend(queue_rm);
    out.extend(link_rm);
    if old.default_action != new.default_action {
        out.push(Change::SetDefaultAction(new.default_action));
    }
    if old.seed != new.seed {
        out.push(Change::SetSeed(new.seed));
    }
    out
}

/// Applies one change to a plan (a change that names a missing object is a no-op removal).
pub fn apply(plan: &mut Plan, change: &Change) {
    match change {
        Change::AddSched(s) | Change::ChangeSched(s) => {
            plan.scheds.insert(s.number, s.clone());
        }
        Change::RemoveSched(n) => {
            plan.scheds.remove(n);
        }
        Change::AddPipe(p) | Change::ChangePipe(p) => {
            plan.pipes.insert(p.number, p.clone());
        }
        Change::RemovePipe(n) => {
            plan.pipes.remove(n);
        }
        Change::AddQueue(q) | Change::ChangeQueue(q) => {
            plan.queues.insert(q.number, q.clone());
        }
        Change::RemoveQueue(n) => {
            plan.queues.remove(n);
        }
        Change::SetTableEntry {
            table,
            prefix,
            value,
        } => {
            plan.tables
                .entry(*table)
                .or_default()
                .insert(*prefix, *value);
        }
        Change::RemoveTableEntry { table, prefix } => {
            if let Some(entries) = plan.tables.get_mut(table) {
                entries.remove(prefix);
                if entries.is_empty() {
                    plan.tables.remove(table);
                }
            }
        }
        Change::AddRule(r) | Change::ChangeRule(r) => {
            plan.rules.insert(r.number, r.clone());
        }
        Change::RemoveRule(n) => {
            plan.rules.remove(n);
        }
        Change::SetDefaultAction(a) => plan.default_action = *a,
        Change::SetSeed(s) => plan.seed = *s,
    }
}
