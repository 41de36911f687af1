//! Live changes of a running `pspat run`: what a new plan changes, whether
//! that can change while packets flow, and the arbiter's side of applying
//! it between two scheduler calls.
//!
//! # What can change live
//! * a pipe's or sched's link: `bw` (not on a `wf2q+` sched, whose virtual
//!   clock was built for one rate), `burst`, `delay`, jitter and its
//!   distribution, `profile` ([`Pipe::reconfigure`]: from the next packet
//!   to start on the link; packets in the delay line keep their exit times);
//! * a queue's parameters (a pipe's own queue, or a flowset's on every one
//!   of its dynamic queues): limit, `plr`, RED/GRED, Gilbert-Elliott loss
//!   ([`Pipe::set_queue`]: packets already queued stay);
//! * a flowset's `weight`, `lmax` and `pri` ([`pspat_sched::Scheduler::change_flow`]:
//!   queued packets stay in order);
//! * rules, table entries and the default action (a new classifier).
//!
//! Refused, with the reason, leaving everything as it was: adding or
//! removing a pipe, sched or queue, a new mask, parent, scheduler type or
//! `reorder`, and the seed. They change the flow ids the bridge and the
//! pipe set were sized for when the daemon started.
//!
//! # Applying
//! The control side plans a change ([`plan_change`]) and hands the
//! arbiter's part to the [`Inbox`]; the arbiter takes it at the start of
//! its next `enqueue` or `dequeue` (so between two packets, never inside
//! one), applies it to every instance of the links it names ([`apply`]),
//! and answers. Flow parameters go first and are rolled back if one is
//! refused, so a batch applies whole or not at all.
//!
//! # Cost
//! Nothing on the packet path but one Acquire load of the inbox's flag per
//! scheduler call. Applying: O(ids changed × instances) plus what
//! [`Pipe::reconfigure`] moves; it allocates (control path only).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use pspat_classify::{FlowLayout, FlowOwner};
use pspat_config::{pipe_config, queue_config, sched_config, Change, Plan};
use pspat_sched::pipe::{PipeConfig, QueueConfig};
use pspat_sched::{AlgKind, AnyScheduler, FlowId, FlowParams, PipeSet};

#[cfg(doc)]
use pspat_sched::Pipe;

/// One change for the arbiter, on every instance of `link`.
#[derive(Clone, Debug, PartialEq)]
pub enum LiveOp {
    /// The link and delay ([`Pipe::reconfigure`]).
    Link { link: u32, config: PipeConfig },
    /// The queue configuration of ids `first..first + len`.
    Queue {
        link: u32,
        first: u32,
        len: u32,
        config: QueueConfig,
    },
    /// The scheduling parameters of ids `first..first + len` (and the old
    /// ones, to roll back).
    Flow {
        link: u32,
        first: u32,
        len: u32,
        params: FlowParams,
        old: FlowParams,
    },
}

/// What a new plan changes: the arbiter's part, whether the classifier is
/// rebuilt, and one log line per change.
#[derive(Debug, Default)]
pub struct Planned {
    pub ops: Vec<LiveOp>,
    pub classifier: bool,
    pub log: Vec<String>,
}

/// The refusal of a change that needs a restart.
pub fn needs_restart(what: &str) -> String {
    format!("{what} cannot change while pspat run is running (the flow ids of the bridge and the pipes are fixed when it starts); change the file and restart it")
}

fn bw_text(bps: u64) -> String {
    if bps == 0 {
        "unlimited".into()
    } else {
        crate::units::human_rate(bps as f64)
    }
}

/// `20ms`, `1500us`: microseconds as written in a configuration.
fn us_text(us: u64) -> String {
    if us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}

/// Describes a link's parameters for a log line.
fn link_text(l: &pspat_config::LinkPlan) -> String {
    let mut s = format!("bw {} delay {}", bw_text(l.bw_bps), us_text(l.delay_us));
    if l.burst_bytes > 0 {
        s.push_str(&format!(" burst {} B", l.burst_bytes));
    }
    if l.jitter_us > 0 {
        s.push_str(&format!(" jitter {}", us_text(l.jitter_us)));
    }
    if l.profile.is_some() {
        s.push_str(" profile");
    }
    s
}

fn queue_text(q: &pspat_config::QueueSetPlan) -> String {
    let limit = match q.limit {
        pspat_config::QueueLimit::Slots(n) => format!("{n} slots"),
        pspat_config::QueueLimit::Bytes(b) => format!("{b} B"),
    };
    let mut s = format!("queue {limit} plr {}", q.plr);
    if let Some(r) = &q.red {
        s.push_str(&format!(
            " {} {}/{}/{}/{}",
            if r.gentle { "gred" } else { "red" },
            r.w_q,
            r.min_th,
            r.max_th,
            r.max_p
        ));
    }
    if q.gemodel.is_some() {
        s.push_str(" gemodel");
    }
    s
}

/// The ids `owner` holds on its link.
fn range(layout: &FlowLayout, owner: FlowOwner) -> Result<(u32, u32, u32), String> {
    layout
        .range_of(owner)
        .map(|(link, r)| (link, r.first.0, r.len()))
        .ok_or_else(|| format!("run: no flow ids for {owner:?} (internal)"))
}

/// Plans the change from `old` to `new` on a daemon whose flow ids are laid
/// out as `layout` (module docs for what is refused).
///
/// # Errors
/// The first change that cannot be made live, one line naming it.
pub fn plan_change(old: &Plan, new: &Plan, layout: &FlowLayout) -> Result<Planned, String> {
    let mut out = Planned::default();
    if old.seed != new.seed {
        return Err(format!("seed {}: {}", new.seed, needs_restart("the seed")));
    }
    for change in pspat_config::diff(old, new) {
        match change {
            Change::AddSched(s) => return Err(needs_restart(&format!("sched {} (new)", s.number))),
            Change::AddPipe(p) => return Err(needs_restart(&format!("pipe {} (new)", p.number))),
            Change::AddQueue(q) => return Err(needs_restart(&format!("queue {} (new)", q.number))),
            Change::RemoveSched(n) => return Err(needs_restart(&format!("sched {n} (removed)"))),
            Change::RemovePipe(n) => return Err(needs_restart(&format!("pipe {n} (removed)"))),
            Change::RemoveQueue(n) => return Err(needs_restart(&format!("queue {n} (removed)"))),
            Change::ChangeSched(s) => {
                let o = &old.scheds[&s.number];
                let what = format!("sched {}", s.number);
                if s.alg != o.alg {
                    return Err(needs_restart(&format!("{what}: its type")));
                }
                if s.mask != o.mask {
                    return Err(needs_restart(&format!("{what}: its mask")));
                }
                if s.link.reorder != o.link.reorder {
                    return Err(needs_restart(&format!("{what}: reorder")));
                }
                if s.alg == AlgKind::Wf2qPlus && s.link.bw_bps != o.link.bw_bps {
                    return Err(needs_restart(&format!(
                        "{what}: bw of a wf2q+ sched (its virtual clock follows the rate it was built with)"
                    )));
                }
                if s.link != o.link {
                    let config = sched_config(&s, new.seed).map_err(|e| format!("{what}: {e}"))?;
                    config.validate().map_err(|e| format!("{what}: {e}"))?;
                    out.ops.push(LiveOp::Link {
                        link: s.number,
                        config,
                    });
                    out.log.push(format!("{what}: {}", link_text(&s.link)));
                }
            }
            Change::ChangePipe(p) => {
                let o = &old.pipes[&p.number];
                let what = format!("pipe {}", p.number);
                if p.mask != o.mask {
                    return Err(needs_restart(&format!("{what}: its mask")));
                }
                if p.link.reorder != o.link.reorder {
                    return Err(needs_restart(&format!("{what}: reorder")));
                }
                let config = pipe_config(&p, new.seed).map_err(|e| format!("{what}: {e}"))?;
                config.validate().map_err(|e| format!("{what}: {e}"))?;
                if p.link != o.link {
                    out.ops.push(LiveOp::Link {
                        link: p.number,
                        config: config.clone(),
                    });
                    out.log.push(format!("{what}: {}", link_text(&p.link)));
                }
                if p.queue != o.queue {
                    let (link, first, len) = range(layout, FlowOwner::Pipe(p.number))?;
                    out.ops.push(LiveOp::Queue {
                        link,
                        first,
                        len,
                        config: config.queue,
                    });
                    out.log.push(format!("{what}: {}", queue_text(&p.queue)));
                }
            }
            Change::ChangeQueue(q) => {
                let o = &old.queues[&q.number];
                let what = format!("queue {}", q.number);
                if q.parent != o.parent {
                    return Err(needs_restart(&format!("{what}: its sched or pipe")));
                }
                if q.mask != o.mask {
                    return Err(needs_restart(&format!("{what}: its mask")));
                }
                let (link, first, len) = range(layout, FlowOwner::Queue(q.number))?;
                let params = FlowParams {
                    weight: q.weight,
                    lmax: q.lmax,
                    priority: q.pri,
                };
                let was = FlowParams {
                    weight: o.weight,
                    lmax: o.lmax,
                    priority: o.pri,
                };
                if params != was {
                    out.ops.push(LiveOp::Flow {
                        link,
                        first,
                        len,
                        params,
                        old: was,
                    });
                    out.log.push(format!(
                        "{what}: weight {} lmax {} pri {}",
                        q.weight, q.lmax, q.pri
                    ));
                }
                if q.queue != o.queue {
                    let config = queue_config(&q.queue);
                    config.validate().map_err(|e| format!("{what}: {e}"))?;
                    out.ops.push(LiveOp::Queue {
                        link,
                        first,
                        len,
                        config,
                    });
                    out.log.push(format!("{what}: {}", queue_text(&q.queue)));
                }
            }
            Change::SetTableEntry {
                table,
                prefix,
                value,
            } => {
                out.classifier = true;
                out.log.push(format!("table {table}: {prefix} = {value}"));
            }
            Change::RemoveTableEntry { table, prefix } => {
                out.classifier = true;
                out.log.push(format!("table {table}: {prefix} removed"));
            }
            Change::AddRule(r) => {
                out.classifier = true;
                out.log.push(format!("rule {} added", r.number));
            }
            Change::ChangeRule(r) => {
                out.classifier = true;
                out.log.push(format!("rule {} changed", r.number));
            }
            Change::RemoveRule(n) => {
                out.classifier = true;
                out.log.push(format!("rule {n} removed"));
            }
            Change::SetDefaultAction(a) => {
                out.classifier = true;
                out.log
                    .push(format!("default {}", format!("{a:?}").to_lowercase()));
            }
            Change::SetSeed(_) => return Err(needs_restart("the seed")),
            other => return Err(format!("{other:?}: not supported by pspat run")),
        }
    }
    Ok(out)
}

/// The arbiter's inbox of planned changes (module docs).
#[derive(Debug, Default)]
pub struct Inbox {
    /// Some batch waits. Stored with Release after the batch is pushed
    /// (pairs with the arbiter's Acquire load in [`Inbox::take`]); the
    /// mutex orders the batch itself, the flag only spares the arbiter a
    /// lock per call.
    pending: AtomicBool,
    batches: Mutex<Vec<(u64, Vec<LiveOp>)>>,
    answers: Mutex<Vec<(u64, Result<(), String>)>>,
    answered: Condvar,
    next_id: AtomicU64,
}

impl Inbox {
    /// Hands `ops` to the arbiter and waits up to `timeout` for its answer.
    /// A batch the arbiter did not take in time is withdrawn (never
    /// applied later).
    ///
    /// # Errors
    /// The arbiter refused the batch (nothing applied), or it did not take
    /// it in time.
    pub fn submit(&self, ops: Vec<LiveOp>, timeout: Duration) -> Result<(), String> {
        // Relaxed: only uniqueness matters.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.batches
            .lock()
            .map_err(|_| "run: the inbox is poisoned")?
            .push((id, ops));
        // Release: pairs with the Acquire load in `take`.
        self.pending.store(true, Ordering::Release);
        let deadline = Instant::now() + timeout;
        let mut answers = self.answers.lock().map_err(|_| "run: poisoned")?;
        loop {
            if let Some(i) = answers.iter().position(|a| a.0 == id) {
                return answers.swap_remove(i).1;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(answers);
                let mut batches = self.batches.lock().map_err(|_| "run: poisoned")?;
                if let Some(i) = batches.iter().position(|b| b.0 == id) {
                    batches.remove(i);
                    return Err(format!(
                        "run: the arbiter did not take the change within {} ms; nothing changed",
                        timeout.as_millis()
                    ));
                }
                // Taken: the answer comes right after.
                drop(batches);
                answers = self.answers.lock().map_err(|_| "run: poisoned")?;
                let (a, _) = self
                    .answered
                    .wait_timeout(answers, Duration::from_secs(5))
                    .map_err(|_| "run: poisoned")?;
                answers = a;
                if let Some(i) = answers.iter().position(|a| a.0 == id) {
                    return answers.swap_remove(i).1;
                }
                return Err("run: the arbiter took the change and did not answer".into());
            }
            let (a, _) = self
                .answered
                .wait_timeout(answers, left)
                .map_err(|_| "run: poisoned")?;
            answers = a;
        }
    }

    /// Whether a batch waits (tests).
    #[cfg(test)]
    pub fn is_pending(&self) -> bool {
        // Acquire: pairs with the Release store in `submit`.
        self.pending.load(Ordering::Acquire)
    }

    /// The arbiter: the waiting batches, if any. One Acquire load when
    /// there are none.
    pub fn take(&self) -> Vec<(u64, Vec<LiveOp>)> {
        // Acquire: pairs with the Release store in `submit`.
        if !self.pending.load(Ordering::Acquire) {
            return Vec::new();
        }
        // Cleared before the batches are taken: a batch pushed after this
        // sets the flag again and is taken on a later call.
        self.pending.store(false, Ordering::Relaxed);
        match self.batches.lock() {
            Ok(mut b) => std::mem::take(&mut *b),
            Err(_) => Vec::new(),
        }
    }

    /// The arbiter: the outcome of batch `id`.
    pub fn answer(&self, id: u64, result: Result<(), String>) {
        if let Ok(mut a) = self.answers.lock() {
            a.push((id, result));
        }
        self.answered.notify_all();
    }
}

/// Applies `ops` at `now` to every instance of the links they name: flow
/// parameters first (rolled back if one is refused), then queues and links
/// (checked by [`plan_change`], they cannot fail but for a bug, reported).
///
/// # Errors
/// The first refusal; with flow parameters nothing stays changed.
pub fn apply(
    set: &mut PipeSet<AnyScheduler>,
    now: pspat_sched::Instant,
    ops: &[LiveOp],
) -> Result<(), String> {
    let instances = |set: &PipeSet<AnyScheduler>, link: u32| -> Vec<u32> {
        set.members()
            .filter(|m| m.0 == link)
            .map(|m| m.1)
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .collect()
    };
    let mut done: Vec<(u32, u32, u32, FlowParams)> = Vec::new();
    let mut failure = None;
    'flows: for op in ops {
        if let LiveOp::Flow {
            link,
            first,
            len,
            params,
            old,
        } = op
        {
            for inst in instances(set, *link) {
                let Some(pipe) = set.pipe_mut(*link, inst) else {
                    continue;
                };
                for id in *first..first + len {
                    if let Err(e) = pipe.change_flow(FlowId(id), *params) {
                        failure = Some(format!("link {link}: flow {id}: {e}"));
                        break 'flows;
                    }
                    done.push((*link, inst, id, *old));
                }
            }
        }
    }
    if let Some(f) = failure {
        for (link, inst, id, old) in done.into_iter().rev() {
            if let Some(pipe) = set.pipe_mut(link, inst) {
                let _ = pipe.change_flow(FlowId(id), old);
            }
        }
        return Err(f);
    }
    for op in ops {
        match op {
            LiveOp::Flow { .. } => {}
            LiveOp::Queue {
                link,
                first,
                len,
                config,
            } => {
                for inst in instances(set, *link) {
                    if let Some(pipe) = set.pipe_mut(*link, inst) {
                        for id in *first..first + len {
                            pipe.set_queue(FlowId(id), *config)
                                .map_err(|e| format!("link {link}: queue {id}: {e}"))?;
                        }
                    }
                }
            }
            LiveOp::Link { link, config } => {
                for inst in instances(set, *link) {
                    if let Some(pipe) = set.pipe_mut(*link, inst) {
                        pipe.reconfigure(now, config)
                            .map_err(|e| format!("link {link}: {e}"))?;
                    }
                }
            }
        }
    }
    Ok(())
}
