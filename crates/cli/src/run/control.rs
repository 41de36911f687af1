//! The control plane of a running `pspat run`: the running configuration,
//! the requests of `pspat ctl` (ipfw lines: `pipe show`, `pipe 1 config bw
//! 20Mbit/s`, `delete 100`, ...), SIGHUP reloads, and the Unix socket that
//! carries the requests (docs/RUN.md, *Control*).
//!
//! # Guarantees
//! * **All or nothing.** A change is validated as a whole configuration
//!   (the running one with the request merged in, [`pspat_config::merge`]),
//!   planned ([`super::live::plan_change`]), and refused with one line if
//!   any part of it cannot be made live; then nothing changed.
//! * **One change at a time.** Requests and reloads take one lock, so the
//!   running configuration is the result of the changes in the order they
//!   were applied.
//! * **Only the owner.** The socket is created with mode 0600 and every
//!   connection's peer credentials (SO_PEERCRED) are checked: only the
//!   daemon's own user and root are served ([`authorised`]).
//! * **Counters survive a classifier change.** A rule or table change
//!   builds a new classifier; the old one's rule counters and statistics
//!   are kept and added to the new one's in every report.
//! * **Dynamic queues and instances survive a classifier change.** The new
//!   classifier takes the running one's dynamic entries under the
//!   classifier's lock ([`Classifier::carry_dynamic_from`]): with the same
//!   masks every flow keeps its slot; with a new mask each entry is masked
//!   again, and the arbiter, lent the new classifier, moves each held
//!   packet to the instance and queue its own key has there while the
//!   lock is held (docs/RUN.md, *What can change live*).
//!
//! # Protocol
//! One request per connection: the client writes one line (ipfw words) and
//! a newline; the daemon answers with one JSON object (`schema_version`,
//! `command` `"ctl"`, `request`, `ok`, `error`, `text`, `result`) and
//! closes. docs/JSON.md, `pspat ctl`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pspat_classify::{Classifier, ClassifierLimits, ClassifierStats, RuleCounters};
use pspat_config::{
    merge, parse_control, parse_file_text, queue_config, Config, ControlRequest, Deletable,
    FsProfiles, Listing, Plan, QueueLimit,
};
use serde_json::json;

use super::live::{self, Inbox};
use super::qstats;
use super::{
    classifier_json, limit_text, pipe_table, pipes_json, rate_text, LinkInfo, PipeJson, RuleJson,
    Snapshots, INPUT_INDEX, OUTPUT_INDEX,
};
use crate::doorbell::Service;

/// The file name errors in a request carry.
pub const CTL_FILE: &str = "<ctl>";

/// Longest request line, bytes.
pub const MAX_REQUEST: u64 = 64 * 1024;

/// ipfw's rule-number step: a rule without a number gets the largest so far plus this.
const RULE_STEP: u32 = 100;

/// How long a change waits for the arbiter to take it.
const APPLY_TIMEOUT: Duration = Duration::from_secs(2);

/// The configuration running now.
#[derive(Debug)]
pub struct Running {
    pub config: Config,
    pub plan: Plan,
}

/// Counters of classifiers that were replaced.
#[derive(Debug, Default)]
pub struct Retired {
    rules: BTreeMap<Option<u32>, RuleCounters>,
    stats: ClassifierStats,
}

/// Everything the control plane reads and changes.
pub struct Live {
    pub file: PathBuf,
    pub running: Mutex<Running>,
    pub limits: ClassifierLimits,
    pub classifier: Arc<Mutex<Classifier>>,
    pub retired: Mutex<Retired>,
    pub links: Mutex<Vec<LinkInfo>>,
    pub snaps: Snapshots,
    pub inbox: Arc<Inbox>,
    /// Where the links' ids are; the RX threads read it.
    pub routes: Arc<super::SharedRoutes>,
    /// Flow ids of the pipe set, the `--spare-flows` reserve included.
    pub total_flows: u32,
    /// Descriptors a pipe's scheduler holds (a new pipe's capacity).
    pub capacity: usize,
    pub not_ip: Arc<AtomicU64>,
    pub input: String,
    pub output: String,
    /// Per-queue copies from the arbiter (run/qstats.rs).
    pub queues: Arc<super::qstats::Board>,
    /// The running bridge, for its counters per direction in the metrics
    /// (run/metrics.rs); taken out to stop it once the control and metrics
    /// threads have ended.
    pub bridge: Mutex<Option<pspat_bridge::Bridge>>,
    /// The shaping of the reverse direction, turned by a change that brings
    /// the first rule naming a direction or an interface or removes the
    /// last one (run/bridged.rs); `None` with `--shape-reverse` (always
    /// shaped).
    pub reverse: Option<pspat_bridge::ReverseSwitch>,
}

/// The answer to one request.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Reply {
    pub schema_version: u32,
    pub command: &'static str,
    pub request: String,
    pub ok: bool,
    pub error: Option<String>,
    pub text: String,
    pub result: serde_json::Value,
}

impl Reply {
    fn ok(request: &str, text: String, result: serde_json::Value) -> Reply {
        Reply {
            schema_version: crate::SCHEMA_VERSION,
            command: "ctl",
            request: request.to_string(),
            ok: true,
            error: None,
            text,
            result,
        }
    }

    pub fn refused(request: &str, error: String) -> Reply {
        Reply {
            schema_version: crate::SCHEMA_VERSION,
            command: "ctl",
            request: request.to_string(),
            ok: false,
            error: Some(error),
            text: String::new(),
            result: serde_json::Value::Null,
        }
    }
}

/// Gives every rule of `config` the number validation gives it (ipfw's
/// auto-increment), so later requests can name it (`delete N`).
pub fn pin_rule_numbers(config: &mut Config) {
    let mut largest = 0u32;
    for r in &mut config.rules {
        let n = r
            .number
            .unwrap_or_else(|| largest.saturating_add(RULE_STEP));
        r.number = Some(n);
        largest = largest.max(n);
    }
}

/// Whether a peer with `peer_uid` may use the socket of a daemon running
/// as `own_uid`: the same user, or root.
pub fn authorised(peer_uid: u32, own_uid: u32) -> bool {
    peer_uid == own_uid || peer_uid == 0
}

fn sum_stats(a: &ClassifierStats, b: &ClassifierStats) -> ClassifierStats {
    let mut s = *a;
    s.packets += b.packets;
    s.enqueued += b.enqueued;
    s.passed += b.passed;
    for (x, y) in s.dropped.iter_mut().zip(b.dropped.iter()) {
        *x += y;
    }
    s
}

impl Live {
    /// The rule counters (the retired classifiers' included) and the
    /// classifier's statistics.
    pub fn rules_and_stats(&self, plan: &Plan) -> (Vec<RuleJson>, ClassifierStats) {
        let (mut rules, stats) = match self.classifier.lock() {
            Ok(c) => (super::rules_json(plan, &c), c.stats()),
            Err(_) => (Vec::new(), ClassifierStats::default()),
        };
        if let Ok(r) = self.retired.lock() {
            for rule in &mut rules {
                if let Some(old) = r.rules.get(&rule.number) {
                    rule.packets += old.packets;
                    rule.bytes += old.bytes;
                }
            }
            return (rules, sum_stats(&stats, &r.stats));
        }
        (rules, stats)
    }

    /// `zero [N ...]`: rules N's packet and byte counters (every rule's
    /// and the default action's without numbers) back to 0, in the
    /// classifier and in what the classifiers it replaced had counted.
    /// Requests are served one at a time, so no change of the classifier
    /// runs beside it.
    ///
    /// # Errors
    /// A number no rule has; nothing is zeroed then.
    fn zero(&self, numbers: &[u32]) -> Result<(String, serde_json::Value), String> {
        let plan = self.plan();
        if let Some(n) = numbers.iter().find(|n| !plan.rules.contains_key(n)) {
            return Err(format!(
                "{CTL_FILE}: zero {n}: rule {n} does not exist; nothing changed"
            ));
        }
        {
            let mut c = self
                .classifier
                .lock()
                .map_err(|_| "run: the classifier is poisoned".to_string())?;
            if numbers.is_empty() {
                c.zero_rule_counters(None);
            }
            for n in numbers {
                c.zero_rule_counters(Some(*n));
            }
        }
        if let Ok(mut r) = self.retired.lock() {
            if numbers.is_empty() {
                r.rules.clear();
            }
            for n in numbers {
                r.rules.remove(&Some(*n));
            }
        }
        if numbers.is_empty() {
            let all: Vec<u32> = plan.rules.keys().copied().collect();
            return Ok((
                "zeroed: every rule and the default action\n".into(),
                json!({ "zeroed": all, "default": true }),
            ));
        }
        let text = numbers
            .iter()
            .map(|n| format!("zeroed: rule {n}\n"))
            .collect();
        Ok((text, json!({ "zeroed": numbers, "default": false })))
    }

    /// The plan running now.
    pub fn plan(&self) -> Plan {
        self.running
            .lock()
            .map(|r| r.plan.clone())
            .unwrap_or_default()
    }

    /// Makes `config` the running configuration, applying only what differs
    /// (module docs); `origin` names the source in the logs. Returns one
    /// line per change.
    ///
    /// # Errors
    /// One line: the configuration is invalid, or a change cannot be made
    /// live; nothing changed then.
    pub fn commit(&self, mut config: Config, origin: &str) -> Result<Vec<String>, String> {
        let mut running = self
            .running
            .lock()
            .map_err(|_| "run: the running configuration is poisoned".to_string())?;
        let loader = FsProfiles {
            base: self
                .file
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        };
        let plan = config.validate(&loader).map_err(|e| e.to_string())?;
        let layout = match self.classifier.lock() {
            Ok(c) => c.layout().clone(),
            Err(_) => return Err("run: the classifier is poisoned".into()),
        };
        // The new plan's classifier, when rules, tables or links change:
        // its layout places links added or rebuilt, and it replaces the
        // running one.
        let mut fresh = if live::changes_classifier(&running.plan, &plan) {
            let limits = super::plan_limits(&self.limits, &plan);
            Some(Classifier::from_plan(&plan, &limits).map_err(|e| e.to_string())?)
        } else {
            None
        };
        let routes = self.routes.get();
        let planned = live::plan_change(
            &running.plan,
            &plan,
            &live::Room {
                layout: &layout,
                new_layout: fresh.as_ref().map_or(&layout, |c| c.layout()),
                routes: &routes,
                total: self.total_flows,
                capacity: self.capacity,
            },
        )?;
        if planned.classifier && fresh.is_none() {
            return Err(
                "run: the change needs a new classifier and none was built (internal)".into(),
            );
        }
        if let Some(c) = &mut fresh {
            c.bind_interface(&self.output, OUTPUT_INDEX);
            c.bind_interface(&self.input, INPUT_INDEX);
        }
        // The reverse direction's mode after the change, when it turns.
        let toggle = self
            .reverse
            .as_ref()
            .and_then(|s| super::bridged::toggle(false, s.shaped(), &plan));
        let live::Planned {
            mut ops,
            removals,
            classifier: swap,
            routes: new_routes,
            added,
            removed,
            log,
        } = planned;
        // A mask changed: where each packet goes depends on the dynamic
        // entries of the running classifier, so it is read, the arbiter
        // moves the packets and the classifier is replaced under one hold
        // of the classifier's lock (no entry is created in between; the RX
        // threads wait).
        // The new classifier is lent to the arbiter, which places each
        // held packet by its own key in it, and comes back before it
        // replaces the running one.
        let mut held = None;
        let mut lent = None;
        if live::remasks(&ops) {
            let c = self
                .classifier
                .lock()
                .map_err(|_| "run: the classifier is poisoned".to_string())?;
            if let Some(mut f) = fresh.take() {
                let carry = f.carry_dynamic_from(&c);
                live::fill_moves(&mut ops, &carry);
                let l = live::Lent::new(f);
                live::lend(&mut ops, &l);
                lent = Some(l);
            }
            held = Some(c);
        }
        if !ops.is_empty() {
            self.inbox.submit(ops, APPLY_TIMEOUT)?;
        }
        if let Some(l) = lent {
            fresh = Some(l.take_back());
        }
        // Links added are in the set now. The routes and the classifier
        // change together under the classifier's lock (the RX threads read
        // the routes under it); links deleted get no new packet after this.
        if let (true, Some(mut fresh)) = (swap, fresh) {
            let mut c = match held.take() {
                Some(c) => c,
                None => {
                    let c = self
                        .classifier
                        .lock()
                        .map_err(|_| "run: the classifier is poisoned".to_string())?;
                    // Dynamic queues and instances stay where they are.
                    fresh.carry_dynamic_from(&c);
                    c
                }
            };
            if let Some(r) = new_routes {
                self.routes.set(r);
            }
            let old = std::mem::replace(&mut *c, fresh);
            // With the classifier whose rules decide it: a forward frame
            // is classified in two passes exactly while the reverse
            // direction is shaped.
            if let (Some(s), Some(on)) = (&self.reverse, toggle) {
                s.set(on);
            }
            drop(c);
            if let Ok(mut r) = self.retired.lock() {
                for (n, rc) in old.rule_counters() {
                    let e = r.rules.entry(Some(n)).or_default();
                    e.packets += rc.packets;
                    e.bytes += rc.bytes;
                }
                let d = old.default_counters();
                let e = r.rules.entry(None).or_default();
                e.packets += d.packets;
                e.bytes += d.bytes;
                r.stats = sum_stats(&r.stats, &old.stats());
            }
        }
        drop(held);
        if !removals.is_empty() {
            // Cannot be refused (nothing to check); an error is a bug, and
            // the rest of the change is in place: reported, not undone.
            if let Err(e) = self.inbox.submit(removals, APPLY_TIMEOUT) {
                tracing::error!(target: "pspat::run", origin, "deleting links: {e}");
            }
        }
        if let Ok(mut links) = self.links.lock() {
            for n in &removed {
                links.retain(|l| !(l.removed && l.number == *n));
                for l in links.iter_mut().filter(|l| l.number == *n) {
                    l.removed = true;
                }
            }
            for info in added {
                match links
                    .iter_mut()
                    .find(|l| l.number == info.number && !l.removed)
                {
                    Some(l) => *l = info,
                    None => {
                        let at = links
                            .iter()
                            .position(|l| l.number > info.number)
                            .unwrap_or(links.len());
                        links.insert(at, info);
                    }
                }
            }
            refresh_links(&mut links, &plan);
        }
        let mut planned_log = log;
        if let (Some(s), Some(on)) = (&self.reverse, toggle) {
            if s.shaped() != on {
                // No new classifier (never expected: the rules changed):
                // turned under the classifier's lock all the same.
                let c = self
                    .classifier
                    .lock()
                    .map_err(|_| "run: the classifier is poisoned".to_string())?;
                s.set(on);
                drop(c);
            }
            planned_log.push(super::bridged::toggle_line(on, &self.input, &self.output));
        }

        if plan.seed != running.plan.seed {
            // The rules' `prob` draws start again from the new seed (a new
            // classifier, built from the plan, already has them).
            if !swap {
                self.classifier
                    .lock()
                    .map_err(|_| "run: the classifier is poisoned".to_string())?
                    .reseed_rules(plan.seed);
            }
            // The bits `corrupt` flips follow the new seed too.
            if let Some(b) = self
                .bridge
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .as_ref()
            {
                b.set_corrupt_seed(plan.seed);
            }
        }
        pin_rule_numbers(&mut config);
        running.config = config;
        running.plan = plan;
        for line in &planned_log {
            tracing::info!(target: "pspat::run", origin, "changed: {line}");
        }
        if planned_log.is_empty() {
            tracing::info!(target: "pspat::run", origin, "no change");
        }
        Ok(planned_log)
    }

    /// SIGHUP: reads the file again and applies the difference.
    ///
    /// # Errors
    /// As [`Live::commit`], or the file cannot be read or parsed.
    pub fn reload(&self) -> Result<Vec<String>, String> {
        let name = self.file.display().to_string();
        let text = pspat_config::read_regular_text_file(&self.file)
            .map_err(|e| format!("{name}: cannot read the configuration: {e}"))?;
        let config = parse_file_text(&text, &name).map_err(|e| e.to_string())?;
        self.commit(config, "reload")
    }

    /// Answers one request line.
    pub fn request(&self, line: &str) -> Reply {
        let line = line.trim();
        match self.answer(line) {
            Ok((text, result)) => Reply::ok(line, text, result),
            Err(e) => {
                tracing::warn!(target: "pspat::run", request = line, "refused: {e}");
                Reply::refused(line, e)
            }
        }
    }

    fn answer(&self, line: &str) -> Result<(String, serde_json::Value), String> {
        let req = parse_control(line, CTL_FILE).map_err(|e| e.to_string())?;
        let changed = |log: Vec<String>| {
            let text = if log.is_empty() {
                "no change\n".to_string()
            } else {
                log.iter().map(|l| format!("changed: {l}\n")).collect()
            };
            (text, json!({ "changes": log }))
        };
        match req {
            ControlRequest::Show { what, number } => self.show(what, number),
            ControlRequest::Configure(lines) => {
                // Merging lets a later rule of the request replace an
                // earlier one of the same number; a file refuses that.
                let mut seen = std::collections::BTreeSet::new();
                if let Some(n) = lines
                    .rules
                    .iter()
                    .filter_map(|r| r.number)
                    .find(|n| !seen.insert(*n))
                {
                    return Err(format!(
                        "{CTL_FILE}: rule {n} is given twice in one request; nothing changed"
                    ));
                }
                let config = {
                    let running = self.running.lock().map_err(|_| "run: poisoned")?;
                    // A table without entries in the lines is a `create`;
                    // of a table that exists it is refused, as ipfw's
                    // (and as a second `create` in a file is).
                    if let Some(t) = lines.tables.iter().find(|t| {
                        t.entries.is_empty()
                            && running.config.tables.iter().any(|r| r.number == t.number)
                    }) {
                        return Err(format!(
                            "{CTL_FILE}: table {n} create: table {n} exists already; nothing changed",
                            n = t.number
                        ));
                    }
                    merge(&running.config, &lines)
                };
                self.commit(config, "ctl").map(changed)
            }
            ControlRequest::Delete {
                what: Deletable::Rule,
                numbers,
            } => {
                let mut seen = std::collections::BTreeSet::new();
                if let Some(n) = numbers.iter().find(|n| !seen.insert(**n)) {
                    return Err(format!(
                        "{CTL_FILE}: delete: rule {n} is listed twice; nothing changed"
                    ));
                }
                let mut config = self.running_config()?;
                for n in &numbers {
                    let before = config.rules.len();
                    config.rules.retain(|r| r.number != Some(*n));
                    if config.rules.len() == before {
                        return Err(format!("{CTL_FILE}: delete {n}: rule {n} does not exist"));
                    }
                }
                self.commit(config, "ctl").map(changed)
            }
            ControlRequest::Delete { what, numbers } => {
                let mut config = self.running_config()?;
                for n in &numbers {
                    delete_object(&mut config, what, *n, false)?;
                }
                self.commit(config, "ctl").map(changed)
            }
            ControlRequest::Zero(numbers) => self.zero(&numbers),
            ControlRequest::Flush(Listing::Rules) => {
                let mut config = self.running_config()?;
                config.rules.clear();
                self.commit(config, "ctl").map(changed)
            }
            ControlRequest::Flush(Listing::Table(t)) => {
                // ipfw's flush: the table stays, empty, so rules naming it
                // stay valid (and match nothing from it).
                let mut config = self.running_config()?;
                table_of(&mut config, t, "flush")?.entries.clear();
                self.commit(config, "ctl").map(changed)
            }
            ControlRequest::Flush(Listing::AllTables) => {
                let mut config = self.running_config()?;
                for t in &mut config.tables {
                    t.entries.clear();
                }
                self.commit(config, "ctl").map(changed)
            }
            ControlRequest::TableDelete { table, prefixes } => {
                let mut config = self.running_config()?;
                let entries = &mut table_of(&mut config, table, "delete")?.entries;
                for p in &prefixes {
                    let Some(at) = entries.iter().position(|e| e.prefix == *p) else {
                        return Err(format!(
                            "{CTL_FILE}: table {table} delete: {p} is not in table {table}; nothing changed"
                        ));
                    };
                    entries.remove(at);
                }
                self.commit(config, "ctl").map(changed)
            }
            ControlRequest::TableDestroy(t) => {
                let mut config = self.running_config()?;
                table_of(&mut config, t, "destroy")?;
                let names =
                    |r: &&pspat_config::Rule| r.src.table() == Some(t) || r.dst.table() == Some(t);
                if let Some(r) = config.rules.iter().find(names) {
                    let rule = r
                        .number
                        .map_or_else(|| "a rule".into(), |m| format!("rule {m}"));
                    return Err(format!(
                        "{CTL_FILE}: table {t} destroy: {rule} matches on table({t}); delete the rule first (or flush the table); nothing changed"
                    ));
                }
                config.tables.retain(|x| x.number != t);
                self.commit(config, "ctl").map(changed)
            }
            ControlRequest::Flush(what) => {
                let mut config = self.running_config()?;
                let (kind, numbers): (Deletable, Vec<u32>) = match what {
                    Listing::Pipes => (
                        Deletable::Pipe,
                        config.pipes.iter().map(|p| p.number).collect(),
                    ),
                    Listing::Queues => (
                        Deletable::Queue,
                        config.queues.iter().map(|q| q.number).collect(),
                    ),
                    Listing::Scheds => (
                        Deletable::Sched,
                        config.scheds.iter().map(|s| s.number).collect(),
                    ),
                    other => {
                        return Err(format!(
                            "{}: flush is not supported by pspat run",
                            listing_name(other)
                        ))
                    }
                };
                for n in numbers {
                    delete_object(&mut config, kind, n, true)?;
                }
                self.commit(config, "ctl").map(changed)
            }
            other => Err(format!("{other:?}: not supported by pspat run")),
        }
    }

    /// The per-queue rows, asked of the arbiter now (run/qstats.rs), and
    /// whether they are fresh (the arbiter answered within the wait).
    pub fn queue_view(&self) -> (Vec<qstats::LinkQueues>, bool) {
        let (snap, fresh) = self.queues.fetch(qstats::FETCH_WAIT);
        match self.classifier.lock() {
            Ok(c) => (qstats::resolve(&snap, &c), fresh),
            Err(_) => (Vec::new(), false),
        }
    }

    fn running_config(&self) -> Result<Config, String> {
        self.running
            .lock()
            .map(|r| r.config.clone())
            .map_err(|_| "run: poisoned".into())
    }

    fn show(
        &self,
        what: Listing,
        number: Option<u32>,
    ) -> Result<(String, serde_json::Value), String> {
        let plan = self.plan();
        let missing = |kind: &str, n: u32| format!("{CTL_FILE}: {kind} {n} does not exist");
        match what {
            Listing::Pipes => {
                // The rows first: the arbiter publishes the pipes' totals
                // before it answers, so they are at least as new.
                let (view, fresh) = self.queue_view();
                let links = self.links.lock().map_err(|_| "run: poisoned")?.clone();
                let snaps = self.snaps.lock().map(|s| s.clone()).unwrap_or_default();
                let mut pipes = pipes_json(&links, &snaps);
                pipes.retain(|p| !p.removed);
                if let Some(n) = number {
                    pipes.retain(|p| p.number == Some(n));
                    if pipes.is_empty() {
                        return Err(missing("pipe", n));
                    }
                }
                let (text, rows) = pipes_with_queues(&pipes, &view)?;
                Ok((text, json!({ "pipes": rows, "queues_fresh": fresh })))
            }
            Listing::Scheds => {
                let links = self.links.lock().map_err(|_| "run: poisoned")?.clone();
                let c = self.classifier.lock().map_err(|_| "run: poisoned")?;
                let mut text = String::new();
                let mut rows = Vec::new();
                for l in links
                    .iter()
                    .filter(|l| l.number != super::PASS_LINK && !l.removed)
                {
                    if number.is_some_and(|n| n != l.number) {
                        continue;
                    }
                    let mask = plan
                        .pipes
                        .get(&l.number)
                        .map(|p| p.mask)
                        .or_else(|| plan.scheds.get(&l.number).map(|s| s.mask));
                    let live_instances = c.instance_stats(l.number).map(|s| s.live);
                    // An fq_codel or fq_pie sched or pipe: its type with
                    // every parameter, as the configuration prints it.
                    let (fq_codel, fq_pie) = match plan.pipes.get(&l.number) {
                        Some(p) => (p.fq_codel, p.fq_pie),
                        None => plan
                            .scheds
                            .get(&l.number)
                            .map_or((None, None), |s| (s.fq_codel, s.fq_pie)),
                    };
                    let fq_codel = fq_codel.map(|f| pspat_config::fq_codel_words(&f));
                    let fq_pie = fq_pie.map(|f| pspat_config::fq_pie_words(&f));
                    text.push_str(&format!(
                        "{:05}: {} {} type {} instances {}{}\n",
                        l.number,
                        rate_text(l.bw_bps),
                        l.kind,
                        fq_codel
                            .clone()
                            .or(fq_pie.clone())
                            .unwrap_or_else(|| l.alg.to_string()),
                        l.instances,
                        live_instances.map_or(String::new(), |n| format!(" (in use {n})")),
                    ));
                    rows.push(json!({
                        "number": l.number,
                        "kind": l.kind,
                        "alg": l.alg.to_string(),
                        "fq_codel": fq_codel,
                        "fq_pie": fq_pie,
                        "bw_bps": l.bw_bps,
                        "delay_ns": l.delay_ns,
                        "instances": l.instances,
                        "instances_in_use": live_instances,
                        "mask": mask.as_ref().and_then(pspat_config::mask_text),
                    }));
                }
                if let (Some(n), true) = (number, rows.is_empty()) {
                    return Err(missing("sched", n));
                }
                Ok((text, json!({ "scheds": rows })))
            }
            Listing::Queues => {
                let (view, fresh) = self.queue_view();
                let c = self.classifier.lock().map_err(|_| "run: poisoned")?;
                let mut text = String::new();
                let mut rows = Vec::new();
                for q in plan.queues.values() {
                    if number.is_some_and(|n| n != q.number) {
                        continue;
                    }
                    let parent = match q.parent {
                        pspat_config::Parent::Pipe(n) => format!("pipe {n}"),
                        pspat_config::Parent::Sched(n) => format!("sched {n}"),
                    };
                    let qc = queue_config(&q.queue);
                    let dynamic = c.flowset_stats(q.number);
                    let link = match q.parent {
                        pspat_config::Parent::Pipe(n) | pspat_config::Parent::Sched(n) => n,
                    };
                    let mine: Vec<qstats::QueueJson> = view
                        .iter()
                        .filter(|l| l.link == link)
                        .flat_map(|l| l.rows.iter())
                        .filter(|r| r.flowset == Some(q.number))
                        .cloned()
                        .collect();
                    let total = mine.len() as u64;
                    // The queue's filters and AQM (RED, CoDel, PIE with
                    // every parameter), as a pipe's settings print them.
                    let extras = super::live::queue_extras(&q.queue);
                    text.push_str(&format!(
                        "q{:05}: {parent} weight {} lmax {} pri {} {} plr {}{extras}{}\n",
                        q.number,
                        q.weight,
                        q.lmax,
                        q.pri,
                        limit_text(qc.limit),
                        q.queue.plr,
                        dynamic.map_or(String::new(), |d| format!(
                            " dynamic queues {} of {} (created {}, expired {}, overflowed {})",
                            d.live, d.capacity, d.created, d.expired, d.overflowed
                        )),
                    ));
                    text.push_str(&qstats::table(&mine, total));
                    let mut row = json!({
                        "number": q.number,
                        "parent": parent,
                        "weight": q.weight,
                        "lmax": q.lmax,
                        "pri": q.pri,
                        "queue_limit": limit_text(qc.limit),
                        "plr": q.queue.plr,
                        "settings": extras.trim_start(),
                        "dynamic": dynamic.map(|d| json!({
                            "capacity": d.capacity, "live": d.live, "created": d.created,
                            "expired": d.expired, "overflowed": d.overflowed,
                        })),
                    });
                    if let (Some(o), serde_json::Value::Object(f)) =
                        (row.as_object_mut(), qstats::json_fields(&mine, total))
                    {
                        o.extend(f);
                    }
                    rows.push(row);
                }
                if let (Some(n), true) = (number, rows.is_empty()) {
                    return Err(missing("queue", n));
                }
                Ok((text, json!({ "queues": rows, "queues_fresh": fresh })))
            }
            Listing::Rules => {
                let (rules, stats) = self.rules_and_stats(&plan);
                let mut text = String::new();
                let mut rows = Vec::new();
                for r in &rules {
                    if number.is_some_and(|n| Some(n) != r.number) {
                        continue;
                    }
                    let n = r.number.map_or("default".into(), |n| format!("{n:05}"));
                    text.push_str(&format!(
                        "{n:>7} {:>12} {:>14}  {}\n",
                        r.packets, r.bytes, r.rule
                    ));
                    let mut row = json!({
                        "number": r.number, "action": r.action, "rule": r.rule,
                        "packets": r.packets, "bytes": r.bytes,
                    });
                    if let Some(c) = &r.comment {
                        row["comment"] = json!(c);
                    }
                    rows.push(row);
                }
                if let (Some(n), true) = (number, rows.is_empty()) {
                    return Err(missing("rule", n));
                }
                let cls = classifier_json(&stats, self.not_ip.load(Ordering::Relaxed));
                Ok((text, json!({ "rules": rows, "classifier": cls })))
            }
            Listing::Table(t) => {
                // As ipfw: listing a table that does not exist is an error,
                // where an empty one lists nothing.
                let entries = plan.tables.get(&t).ok_or_else(|| {
                    format!("{CTL_FILE}: table {t} list: table {t} does not exist")
                })?;
                let mut text = String::new();
                let mut rows = Vec::new();
                for (prefix, value) in entries {
                    text.push_str(&format!("{prefix} {value}\n"));
                    rows.push(json!({ "prefix": prefix.to_string(), "value": value }));
                }
                Ok((text, json!({ "table": t, "entries": rows })))
            }
            Listing::AllTables => {
                // As ipfw's `table all list`: a header line a table.
                let mut text = String::new();
                let mut tables = Vec::new();
                for (t, entries) in &plan.tables {
                    text.push_str(&format!("--- table({t}) ---\n"));
                    let mut rows = Vec::new();
                    for (prefix, value) in entries {
                        text.push_str(&format!("{prefix} {value}\n"));
                        rows.push(json!({ "prefix": prefix.to_string(), "value": value }));
                    }
                    tables.push(json!({ "table": t, "entries": rows }));
                }
                Ok((text, json!({ "tables": tables })))
            }
        }
    }
}

/// `pipes` as `pipe show` prints them, each with its per-queue rows from
/// `view` (the 100 busiest, then how many were left out), and as JSON
/// objects with `queues`, `queues_total` and `queues_omitted`; a pipe
/// deleted while the daemon ran has none (its queues left with it). Also
/// the final report's (run.rs).
///
/// # Errors
/// What the table or the JSON encoding refused (neither does in practice).
pub fn pipes_with_queues(
    pipes: &[PipeJson],
    view: &[qstats::LinkQueues],
) -> Result<(String, Vec<serde_json::Value>), String> {
    let mut text = Vec::new();
    let mut rows = Vec::new();
    for p in pipes {
        pipe_table(&mut text, std::slice::from_ref(p)).map_err(|e| e.to_string())?;
        let link = p.number.unwrap_or(super::PASS_LINK);
        let lq = view.iter().find(|l| l.link == link && !p.removed);
        let (queues, total) = lq.map_or((&[][..], 0), |l| (&l.rows[..], l.total.queues));
        text.extend_from_slice(qstats::table(queues, total).as_bytes());
        let mut row = serde_json::to_value(p).map_err(|e| e.to_string())?;
        if let (Some(o), serde_json::Value::Object(q)) =
            (row.as_object_mut(), qstats::json_fields(queues, total))
        {
            o.extend(q);
        }
        rows.push(row);
    }
    Ok((String::from_utf8_lossy(&text).into_owned(), rows))
}

fn listing_name(l: Listing) -> String {
    match l {
        Listing::Pipes => "pipes".into(),
        Listing::Queues => "queues".into(),
        Listing::Scheds => "scheds".into(),
        Listing::Rules => "rules".into(),
        Listing::Table(t) => format!("table {t}"),
        Listing::AllTables => "table all".into(),
    }
}

/// A rule as ipfw prints it (`add 100 pipe 1 udp from any to any dst-port 9`).
pub(super) fn rule_text(r: &pspat_config::RulePlan) -> String {
    pspat_config::rule_line(&pspat_config::Rule {
        number: Some(r.number),
        action: r.action,
        proto: r.proto,
        proto_negated: r.proto_negated,
        src: r.src.clone(),
        dst: r.dst.clone(),
        src_ports: r.src_ports.clone(),
        src_ports_negated: r.src_ports_negated,
        dst_ports: r.dst_ports.clone(),
        dst_ports_negated: r.dst_ports_negated,
        direction: r.direction,
        interface: r.interface.clone(),
        dscp: r.dscp.clone(),
        dscp_negated: r.dscp_negated,
        ip_len: r.ip_len.clone(),
        ip_len_negated: r.ip_len_negated,
        tcp_flags: r.tcp_flags,
        tcp_flags_negated: r.tcp_flags_negated,
        established: r.established,
        established_negated: r.established_negated,
        prob: r.prob,
        comment: r.comment.clone(),
    })
}

/// Table `t` of `config`, for `table t WHAT`, or the error that it does not
/// exist.
fn table_of<'c>(
    config: &'c mut Config,
    t: u32,
    what: &str,
) -> Result<&'c mut pspat_config::Table, String> {
    config
        .tables
        .iter_mut()
        .find(|x| x.number == t)
        .ok_or_else(|| format!("{CTL_FILE}: table {t} {what}: table {t} does not exist"))
}

/// Takes `pipe N`, `queue N` or `sched N` out of `config` (`N delete`);
/// a pipe or sched goes with the flowsets that feed it (as ipfw's
/// `sched N delete` leaves none of its queues attached).
///
/// # Errors
/// One line: it does not exist, a rule still sends to it or to one of its
/// flowsets (named, with the `delete` to give first), or it is the last
/// flowset of a sched (delete the sched instead; not checked by a `flush`,
/// which validation then refuses if a sched is left without flowsets).
fn delete_object(config: &mut Config, what: Deletable, n: u32, flush: bool) -> Result<(), String> {
    use pspat_config::{Action, Parent, Target};
    let kind = match what {
        Deletable::Pipe => "pipe",
        Deletable::Queue => "queue",
        Deletable::Sched => "sched",
        Deletable::Rule => "rule",
    };
    let exists = match what {
        Deletable::Pipe => config.pipes.iter().any(|p| p.number == n),
        Deletable::Queue => config.queues.iter().any(|q| q.number == n),
        Deletable::Sched => config.scheds.iter().any(|s| s.number == n),
        Deletable::Rule => config.rules.iter().any(|r| r.number == Some(n)),
    };
    if !exists {
        return Err(format!(
            "{CTL_FILE}: {kind} {n} delete: {kind} {n} does not exist"
        ));
    }
    // The flowsets that go too: the queue itself, or those feeding the link.
    let feeds = |p: &Option<Parent>| match (what, p) {
        (Deletable::Pipe, Some(Parent::Pipe(m))) | (Deletable::Sched, Some(Parent::Sched(m))) => {
            *m == n
        }
        _ => false,
    };
    let flowsets: Vec<u32> = config
        .queues
        .iter()
        .filter(|q| (what == Deletable::Queue && q.number == n) || feeds(&q.parent))
        .map(|q| q.number)
        .collect();
    let sends = |a: &Action| match a {
        Action::Pipe(Target::Number(m)) => what == Deletable::Pipe && *m == n,
        Action::Queue(Target::Number(m)) => flowsets.contains(m),
        _ => false,
    };
    if let Some(r) = config.rules.iter().find(|r| sends(&r.action)) {
        let rule = r
            .number
            .map_or_else(|| "a rule".into(), |m| format!("rule {m}"));
        let hint = r
            .number
            .map_or_else(String::new, |m| format!(" (delete {m})"));
        let to = match r.action {
            Action::Queue(Target::Number(q)) if what != Deletable::Queue => {
                format!("to its queue {q}")
            }
            _ => "to it".into(),
        };
        return Err(format!(
            "{CTL_FILE}: {kind} {n} delete: {rule} still sends {to}; delete the rule first{hint}; nothing changed"
        ));
    }
    if what == Deletable::Queue && !flush {
        if let Some(Some(Parent::Sched(m))) = config
            .queues
            .iter()
            .find(|q| q.number == n)
            .map(|q| q.parent)
        {
            let others = config
                .queues
                .iter()
                .filter(|q| q.number != n && q.parent == Some(Parent::Sched(m)))
                .count();
            if others == 0 {
                return Err(format!(
                    "{CTL_FILE}: queue {n} delete: it is the last flowset of sched {m}, which needs one; delete the sched instead (sched {m} delete); nothing changed"
                ));
            }
        }
    }
    match what {
        Deletable::Pipe => config.pipes.retain(|p| p.number != n),
        Deletable::Sched => config.scheds.retain(|s| s.number != n),
        Deletable::Rule => config.rules.retain(|r| r.number != Some(n)),
        Deletable::Queue => {}
    }
    config.queues.retain(|q| !flowsets.contains(&q.number));
    Ok(())
}

/// Follows a plan's link parameters in the reports.
pub fn refresh_links(links: &mut [LinkInfo], plan: &Plan) {
    // A deleted link's row keeps what it was, even if its number is back.
    for l in links.iter_mut().filter(|l| !l.removed) {
        // The type's words: an fq_codel or fq_pie sched's or pipe's with
        // every parameter, a pipe's other type than FIFO by its name.
        let (link, queue, fq, alg) = match (plan.pipes.get(&l.number), plan.scheds.get(&l.number)) {
            (Some(p), _) => (
                &p.link,
                Some(&p.queue),
                (p.fq_codel, p.fq_pie),
                (p.alg != pspat_sched::AlgKind::Fifo).then_some(p.alg),
            ),
            (None, Some(s)) => (&s.link, None, (s.fq_codel, s.fq_pie), None),
            _ => continue,
        };
        l.bw_bps = (link.bw_bps > 0).then_some(link.bw_bps);
        l.delay_ns = link.delay_us.saturating_mul(1_000);
        // An fq_codel or fq_pie sched's type and parameters first, as its
        // line writes them.
        let mut words = match (fq, alg) {
            ((Some(f), _), _) => format!(" type {}", pspat_config::fq_codel_words(&f)),
            ((None, Some(f)), _) => format!(" type {}", pspat_config::fq_pie_words(&f)),
            ((None, None), Some(a)) => format!(" type {a}"),
            _ => String::new(),
        };
        words.push_str(&super::live::link_extras(link));
        if let Some(q) = queue {
            if q.plr > 0.0 {
                words.push_str(&format!(" plr {}", q.plr));
            }
            words.push_str(&super::live::queue_extras(q));
        }
        // The words each begin with a space.
        l.settings = words.trim_start().to_string();
        if let Some(q) = queue {
            l.queue = Some(match q.limit {
                QueueLimit::Slots(n) => pspat_sched::pipe::QueueLimit::Slots(n),
                QueueLimit::Bytes(b) => pspat_sched::pipe::QueueLimit::Bytes(b),
            });
        }
    }
}

/// Where the control socket goes when `--control` is not given: root's
/// daemon uses `/run/pspat/pspat.sock`; another user's
/// `$XDG_RUNTIME_DIR/pspat.sock`, or `/tmp/pspat-UID/pspat.sock` without it.
pub fn default_socket() -> PathBuf {
    let uid = rustix::process::getuid();
    if uid.is_root() {
        return PathBuf::from("/run/pspat/pspat.sock");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("pspat.sock"),
        _ => PathBuf::from(format!("/tmp/pspat-{}/pspat.sock", uid.as_raw())),
    }
}

/// Which directory [`listen`] may create: only the default socket's own
/// (`/run/pspat`, `/tmp/pspat-UID`), one level, never a tree a mistyped
/// `--control PATH` would leave behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketDir {
    /// `--control PATH`: its directory must exist.
    Given,
    /// [`default_socket`]: its directory is created (mode 0700) if missing.
    Default,
}

/// The socket file this run bound. Dropping it removes the file, so a
/// start that fails after the socket was opened leaves none behind (a
/// leftover file makes `pspat ctl` talk of a stale socket), and the end
/// of the run removes it the same way. Only the file this run created is
/// removed: once its listener is closed, another daemon may have found it
/// stale and bound its own at the same path, which has another inode.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    /// Where the socket is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if m.dev() == self.dev && m.ino() == self.ino {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Opens the control socket at `path` (mode 0600). Its directory must
/// exist, except the default one, which is created with mode 0700 (see
/// [`SocketDir`]). A stale socket file (nobody answers) is replaced; a
/// live one is refused. The returned [`SocketFile`] removes the file when
/// dropped.
///
/// # Errors
/// One line naming `--control`: its directory is missing, a daemon
/// already answers there, or the socket cannot be created.
pub fn listen(path: &Path, dir: SocketDir) -> anyhow::Result<(UnixListener, SocketFile)> {
    let flag = |msg: String| crate::usage(format!("--control {}: {msg}", path.display()));
    if let Some(parent) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !parent.exists() {
            if dir == SocketDir::Given {
                return Err(flag(format!(
                    "its directory {} does not exist",
                    parent.display()
                )));
            }
            // One level: the default directory's parent (/run, /tmp, the
            // runtime directory) is the system's.
            match std::fs::create_dir(parent) {
                Ok(()) => std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| flag(format!("cannot set its directory's mode: {e}")))?,
                // Another daemon made it meanwhile.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(flag(format!("cannot create its directory: {e}"))),
            }
        }
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(flag("another pspat run answers there".into()));
        }
        std::fs::remove_file(path).map_err(|e| flag(format!("cannot replace it: {e}")))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| flag(e.to_string()))?;
    let file = {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path).map_err(|e| flag(e.to_string()))?;
        SocketFile {
            path: path.to_path_buf(),
            dev: m.dev(),
            ino: m.ino(),
        }
    };
    // From here on, an error drops `file` and so removes the socket.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| flag(format!("cannot set its mode: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| flag(e.to_string()))?;
    Ok((listener, file))
}

/// How long a client has to send its whole request line.
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// Connections read at once, each on a thread of its own, so that a slow
/// or idle client delays no other; beyond this many the control thread
/// serves the next one itself. The requests themselves run one at a time.
const MAX_CONNECTIONS: usize = 32;

/// Reads a connection's request: one line ending in a newline (what
/// `pspat ctl` sends), at most [`MAX_REQUEST`] bytes, UTF-8 without control
/// characters, complete within [`REQUEST_DEADLINE`]. `Ok(None)` when the
/// client closed without sending anything. Anything else is refused whole:
/// a line cut by the size cap, by a client that died mid-write or by the
/// deadline is never run in part, and a second line is not dropped
/// silently.
fn read_request(stream: &mut UnixStream) -> Result<Option<String>, String> {
    let deadline = std::time::Instant::now() + REQUEST_DEADLINE;
    let mut bytes = Vec::with_capacity(256);
    let mut chunk = [0u8; 4096];
    let too_long = || {
        format!(
            "the request is longer than {} KiB; nothing was applied",
            MAX_REQUEST >> 10
        )
    };
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no complete request line within {} s; nothing was applied",
                REQUEST_DEADLINE.as_secs()
            ));
        }
        let _ = stream.set_read_timeout(Some(left));
        match stream.read(&mut chunk) {
            Ok(0) if bytes.is_empty() => return Ok(None),
            Ok(0) => {
                return Err(
                    "the request ended without a newline (cut off?); nothing was applied".into(),
                )
            }
            Ok(n) => {
                bytes.extend_from_slice(&chunk[..n]);
                if let Some(end) = bytes.iter().position(|&b| b == b'\n') {
                    if end as u64 > MAX_REQUEST {
                        return Err(too_long());
                    }
                    if bytes.len() > end + 1 {
                        return Err("one request line per connection, and more followed it; \
                                    nothing was applied"
                            .into());
                    }
                    bytes.truncate(end);
                    break;
                }
                if bytes.len() as u64 > MAX_REQUEST {
                    return Err(too_long());
                }
            }
            Err(e) if pspat_io::error::is_retryable(e.kind()) => {}
            Err(e) => return Err(format!("cannot read the request: {e}")),
        }
    }
    if bytes.last() == Some(&b'\r') {
        bytes.pop();
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| "the request is not UTF-8 text; nothing was applied".to_string())?;
    if let Some(c) = text.chars().find(|c| c.is_control() && *c != '\t') {
        return Err(format!(
            "the request holds a control character ({c:?}); nothing was applied"
        ));
    }
    Ok(Some(text))
}

/// Serves one connection: reads its request, checks the peer, runs the
/// request once it has the `turn` (requests run one at a time), answers.
/// The request is read even from a peer that is refused, so the answer
/// reaches it (closing with unread data would reset the connection
/// instead).
pub fn serve_one(live: &Live, mut stream: UnixStream, own_uid: u32, turn: &Mutex<()>) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let read = read_request(&mut stream);
    let reply = match rustix::net::sockopt::socket_peercred(&stream) {
        Err(e) => Reply::refused(
            "",
            format!("permission denied: cannot read the peer's credentials: {e}"),
        ),
        Ok(cred) if !authorised(cred.uid.as_raw(), own_uid) => {
            let msg = format!(
                "permission denied: uid {} may not control this pspat run (only uid {own_uid} and root may)",
                cred.uid.as_raw()
            );
            tracing::warn!(target: "pspat::run", pid = cred.pid.as_raw_nonzero().get(), "control connection refused: {msg}");
            Reply::refused("", msg)
        }
        Ok(_) => match read {
            Ok(None) => return,
            Ok(Some(line)) => {
                let _turn = turn
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                live.request(&line)
            }
            Err(e) => Reply::refused("", e),
        },
    };
    if let Ok(mut text) = serde_json::to_string(&reply) {
        text.push('\n');
        let _ = stream.write_all(text.as_bytes());
    }
}

/// The longest a service thread (control, metrics) sleeps without a
/// connection or a ring of its doorbell: a ring lost for any reason costs
/// at most this.
pub const SAFETY_WAKE: Duration = Duration::from_secs(1);

/// The control thread: serves the socket (if any) and SIGHUP reloads until
/// `stop`; sleeps until a connection comes or its doorbell rings (SIGHUP,
/// [`Service::stop`]), at most [`SAFETY_WAKE`] at a time. Register the
/// SIGHUP flag `hup` before.
pub fn spawn(
    live: Arc<Live>,
    listener: Option<UnixListener>,
    hup: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Service> {
    let own_uid = rustix::process::getuid().as_raw();
    Service::spawn(
        "pspat-control",
        &[signal_hook::consts::SIGHUP],
        move |doorbell| {
            // One request or reload at a time; the connections' reading
            // runs beside it.
            let turn = Arc::new(Mutex::new(()));
            let mut connections: Vec<std::thread::JoinHandle<()>> = Vec::new();
            // Acquire: pairs with the Release store of the main thread.
            while !stop.load(Ordering::Acquire) {
                // Acquire: pairs with signal-hook's store from the handler.
                if hup.swap(false, Ordering::Acquire) {
                    let file = live.file.display().to_string();
                    tracing::info!(target: "pspat::run", "SIGHUP: reloading {file}");
                    let reloaded = {
                        let _turn = turn
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        live.reload()
                    };
                    match reloaded {
                        Ok(log) => tracing::info!(
                            target: "pspat::run",
                            "reloaded {file}: {} change(s)",
                            log.len()
                        ),
                        Err(e) => tracing::warn!(
                            target: "pspat::run",
                            "reload refused, the running configuration stays: {e}"
                        ),
                    }
                }
                let mut served = false;
                if let Some(l) = &listener {
                    match l.accept() {
                        Ok((stream, _)) => {
                            connections.retain(|c| !c.is_finished());
                            if connections.len() < MAX_CONNECTIONS {
                                let (live, turn) = (Arc::clone(&live), Arc::clone(&turn));
                                match std::thread::Builder::new()
                                    .name("pspat-control-conn".into())
                                    .spawn(move || serve_one(&live, stream, own_uid, &turn))
                                {
                                    Ok(c) => connections.push(c),
                                    // The stream went with the closure: closed.
                                    Err(e) => {
                                        tracing::warn!(target: "pspat::run", "control connection dropped: no thread: {e}")
                                    }
                                }
                            } else {
                                // Every slot busy: this one waits its turn here
                                // (its reading is bounded by the deadline).
                                serve_one(&live, stream, own_uid, &turn);
                            }
                            served = true;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => {
                            tracing::warn!(target: "pspat::run", "control socket: {e}");
                            // Not at once again: an error that stays (no
                            // file descriptors left) would spin.
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
                if !served {
                    doorbell.wait(listener.as_ref(), SAFETY_WAKE);
                }
            }
            // Each ends within the deadline and one request.
            for c in connections {
                let _ = c.join();
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `read_request` makes of `sent` (then the writing side closed,
    /// or left open when `close` is false).
    fn request_of(sent: &[u8], close: bool) -> Result<Option<String>, String> {
        let (mut client, mut server) = UnixStream::pair().unwrap();
        client.write_all(sent).unwrap();
        if close {
            client.shutdown(std::net::Shutdown::Write).unwrap();
        }
        read_request(&mut server)
    }

    #[test]
    fn a_request_is_one_whole_line_or_nothing_is_run() {
        assert_eq!(
            request_of(b"pipe show\n", true),
            Ok(Some("pipe show".into()))
        );
        assert_eq!(
            request_of(b"pipe show\r\n", true),
            Ok(Some("pipe show".into()))
        );
        assert_eq!(request_of(b"", true), Ok(None));
        let refused = |sent: &[u8], close: bool, why: &str| {
            let e = request_of(sent, close).unwrap_err();
            assert!(e.contains(why), "{e}");
            assert!(e.ends_with("nothing was applied"), "{e}");
        };
        // A client that died mid-write: the part it sent is not run.
        refused(b"pipe 1 config bw 24Mbit/s", true, "without a newline");
        // Past the cap, with or without a newline after it.
        let mut long = b"pipe 1 config bw 4Mbit/s ".to_vec();
        long.extend(std::iter::repeat_n(b' ', 70_000));
        refused(&long, true, "longer than 64 KiB");
        long.extend_from_slice(b"plr 5\n");
        refused(&long, true, "longer than 64 KiB");
        refused(
            b"pipe 1 config bw 7Mbit/s\npipe 1 config bw 8Mbit/s\n",
            true,
            "one request line",
        );
        refused(b"pipe \0show\n", true, "control character ('\\0')");
        refused(&[0x70, 0xff, 0x0a], true, "not UTF-8");
        // A client that sends part of a line and waits.
        refused(b"pipe show", false, "within 2 s");
    }

    #[test]
    fn each_pipe_gets_its_own_queues_and_a_deleted_one_none() {
        let row = |instance: u32, n: u64| qstats::QueueJson {
            instance,
            bucket: instance,
            in_packets: n,
            in_bytes: n * 100,
            out_packets: n,
            out_bytes: n * 100,
            ..qstats::QueueJson::default()
        };
        let view = vec![qstats::LinkQueues {
            link: 1,
            rows: (0..105).map(|i| row(i, 200 - u64::from(i))).collect(),
            total: qstats::LinkTotal {
                link: 1,
                queues: 105,
                ..qstats::LinkTotal::default()
            },
        }];
        let live = PipeJson {
            number: Some(1),
            kind: "pipe",
            ..PipeJson::default()
        };
        let deleted = PipeJson {
            removed: true,
            ..live.clone()
        };
        let two = PipeJson {
            number: Some(2),
            ..live.clone()
        };
        let (text, rows) = pipes_with_queues(&[live, deleted, two], &view).unwrap();
        let counts: Vec<(usize, u64, u64)> = rows
            .iter()
            .map(|r| {
                (
                    r["queues"].as_array().unwrap().len(),
                    r["queues_total"].as_u64().unwrap(),
                    r["queues_omitted"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(counts, [(100, 105, 5), (0, 0, 0), (0, 0, 0)]);
        assert_eq!(rows[0]["queues"][0]["in_packets"], 200);
        assert_eq!(rows[1]["removed"], true);
        // The table under pipe 1 only: one header, 100 rows, the rest counted.
        assert_eq!(text.matches("BKT Prot").count(), 1, "{text}");
        assert!(
            text.contains("... 5 more queue(s) not shown (busiest 100 of 105)"),
            "{text}"
        );
        let under_one = text.split("00002:").next().unwrap();
        assert!(under_one.contains("BKT Prot"), "{text}");
    }

    #[test]
    fn a_ctl_line_with_not_shows_back_as_written() {
        let running = pspat_config::parse_ipfw("pipe 1 config\n", "run.ipfw").unwrap();
        for line in [
            "add 100 pipe 1 not udp from any to any not dst-port 80,443",
            "add 200 pipe 1 tcp from any to any not src-port 1000-2000 out not xmit eth1",
            "add 300 pipe 1 ip from not 10.0.0.0/8 to any not via eth0",
        ] {
            let ControlRequest::Configure(lines) =
                pspat_config::parse_control(line, "<ctl>").unwrap()
            else {
                panic!("{line} is configuration");
            };
            let plan = pspat_config::merge(&running, &lines)
                .validate(&pspat_config::NoProfiles)
                .unwrap();
            let rule = plan.rules.values().next().unwrap();
            assert_eq!(rule_text(rule), line);
        }
    }

    #[test]
    fn only_the_owner_and_root_are_authorised() {
        assert!(authorised(1000, 1000));
        assert!(authorised(0, 1000));
        assert!(authorised(0, 0));
        assert!(!authorised(65534, 0));
        assert!(!authorised(1001, 1000));
    }

    #[test]
    fn auto_numbers_are_pinned_as_validation_numbers_them() {
        let mut c = pspat_config::parse_ipfw(
            "pipe 1 config\nadd pipe 1 ip from any to any\nadd 50 pipe 1 udp from any to any\nadd pipe 1 tcp from any to any\n",
            "t",
        )
        .unwrap();
        let plan = c.validate(&pspat_config::NoProfiles).unwrap();
        pin_rule_numbers(&mut c);
        let pinned: Vec<u32> = c.rules.iter().filter_map(|r| r.number).collect();
        let planned: Vec<u32> = plan.rules.keys().copied().collect();
        let mut sorted = pinned.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, planned);
        assert_eq!(c.validate(&pspat_config::NoProfiles).unwrap(), plan);
    }
}
