//! The control commands a running daemon will take on its control socket, as
//! `ipfw(8)` spells them: `pipe show [N]`, `queue show`, `sched show`,
//! `show` / `show rules`, `pipe N delete`, `delete N`, `flush`, `pipe flush`,
//! and any configuration line (`pipe 1 config bw 10Mbit/s`). This module only
//! parses them into messages; acting on them is the daemon's job.

use crate::model::Config;

/// What a `show` (or `list`) command lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Listing {
    /// `pipe show`.
    Pipes,
    /// `queue show`.
    Queues,
    /// `sched show`.
    Scheds,
    /// `show`, `show rules`, `list`.
    Rules,
    /// `table N list`.
    Table(u32),
    /// `table all list` (and, flushed, `table all flush`: every table
    /// stays, empty).
    AllTables,
}

/// What a `delete` command removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Deletable {
    /// `pipe N delete`.
    Pipe,
    /// `queue N delete`.
    Queue,
    /// `sched N delete`.
    Sched,
    /// `delete N`: a rule.
    Rule,
}

/// One control request.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ControlRequest {
    /// List objects, all or one.
    Show {
        /// Which objects.
        what: Listing,
        /// One object, or all.
        number: Option<u32>,
    },
    /// Remove objects by number.
    Delete {
        /// Which kind.
        what: Deletable,
        /// The numbers, as written.
        numbers: Vec<u32>,
    },
    /// `flush` (rules), `pipe flush`, `queue flush`, `sched flush`, `table N
    /// flush` (the table stays, empty).
    Flush(Listing),
    /// `table N delete PREFIX ...`: those entries out of table N.
    TableDelete {
        /// The table.
        table: u32,
        /// The entries' prefixes, as written.
        prefixes: Vec<crate::net::Prefix>,
    },
    /// `table N destroy`: table N gone (no rule may name it).
    TableDestroy(u32),
    /// `zero [N ...]`: the packet and byte counters of rules N (of every
    /// rule and the default action without numbers) back to 0, as ipfw's.
    Zero(Vec<u32>),
    /// Configuration lines, to merge into the running configuration.
    Configure(Config),
}

/// The running configuration with configuration lines sent to a daemon
/// merged in, as `pspat ctl` means them: an object that exists keeps every
/// parameter the lines do not give (`pipe 1 config bw 20Mbit/s` changes the
/// bandwidth only; `reorder`, `noerror`, `ecn` and `lossecn` can be
/// turned on, not off; `droptail` turns RED off, and `ecn` with it, unless
/// the same line gives `ecn` again, which validation then refuses as in a
/// file; a queue has one AQM, so `codel ...` or `pie ...` replaces RED
/// (and its `ecn`) and the other, `red`/`gred` replace CoDel and PIE, and
/// `droptail` turns them off too; a `codel` or `pie` line is a whole new
/// setting of it, its parameters not given at their defaults, not merged
/// into the old ones; likewise a `plr 0` that
/// leaves the queue no random loss (no `gemodel`, no `lossstate`) turns
/// `lossecn` off with it, unless the same line gives `lossecn` again,
/// which validation then refuses); a sched's `type` is a whole setting
/// too: `type fq_codel ...` or `type fq_pie ...` brings its parameters, those not given at
/// their defaults, and another type takes them off; a new
/// number adds an object; `add N ...` replaces rule N or adds it, a
/// rule without a number is added after the others; `table N add P V`
/// sets one entry; `default` and `seed` replace theirs when given.
///
/// The result's [`crate::model::SourceMap`] holds the positions of the
/// lines (file name and all, re-indexed to the merged objects), so a
/// validation error names the line's token; objects of `running` that the
/// lines do not touch have no position.
///
/// # Examples
/// ```
/// use pspat_config::{merge, parse_ipfw, NoProfiles};
/// let running = parse_ipfw("pipe 1 config bw 5Mbit/s delay 20ms", "run.ipfw").unwrap();
/// let lines = parse_ipfw("pipe 1 config bw 20Mbit/s", "<ctl>").unwrap();
/// let plan = merge(&running, &lines).validate(&NoProfiles).unwrap();
/// assert_eq!((plan.pipes[&1].link.bw_bps, plan.pipes[&1].link.delay_us), (20_000_000, 20_000));
/// ```
pub fn merge(running: &Config, lines: &Config) -> Config {
    use crate::model::{LinkParams, QueueParams, Site, SiteKind, SourceMap};
    use std::collections::HashMap;

    fn link(old: &mut LinkParams, new: &LinkParams) {
        old.bw = new.bw.or(old.bw);
        old.delay_us = new.delay_us.or(old.delay_us);
        old.burst = new.burst.or(old.burst);
        old.profile = new.profile.clone().or(old.profile.take());
        old.jitter_us = new.jitter_us.or(old.jitter_us);
        old.distribution = new.distribution.or(old.distribution);
        old.jitter_correlation = new.jitter_correlation.or(old.jitter_correlation);
        old.reorder |= new.reorder;
        if new.reorder_probability.is_some() {
            // `reorder P` without a correlation takes the old one off.
            old.reorder_probability = new.reorder_probability;
            old.reorder_correlation = new.reorder_correlation;
        }
        old.reorder_gap = new.reorder_gap.or(old.reorder_gap);
        old.slot = new.slot.or(old.slot);
        old.packet_overhead = new.packet_overhead.or(old.packet_overhead);
        old.cell_size = new.cell_size.or(old.cell_size);
        old.cell_overhead = new.cell_overhead.or(old.cell_overhead);
    }
    /// Whether object `index` of `kind` in `lines` says `droptail`: no
    /// RED, but a position where `red`/`gred`/`droptail` was written (the
    /// model alone cannot tell `droptail` from nothing).
    fn droptail(lines: &Config, kind: SiteKind, index: usize, q: &QueueParams) -> bool {
        let site = Site {
            kind,
            index,
            sub: 0,
            field: "red",
        };
        q.red.is_none() && lines.sources.get(&site).is_some()
    }
    fn queue(old: &mut QueueParams, new: &QueueParams, droptail: bool) {
        old.limit = new.limit.or(old.limit);
        old.plr = new.plr.or(old.plr);
        if droptail {
            // ECN marks what RED would drop: without RED it goes too.
            old.red = None;
            old.ecn = false;
            old.codel = None;
            old.pie = None;
        } else if new.codel.is_some() || new.pie.is_some() {
            // One AQM a queue: CoDel or PIE replaces RED, and RED's
            // marking with it (each marks with its own `ecn`), and the
            // other. The parsers refuse two AQMs in one statement.
            old.codel = new.codel;
            old.pie = new.pie;
            old.red = None;
            old.ecn = false;
        } else if new.red.is_some() {
            old.red = new.red;
            old.codel = None;
            old.pie = None;
        }
        old.ecn |= new.ecn;
        old.buckets = new.buckets.or(old.buckets);
        old.noerror |= new.noerror;
        // The two loss models replace each other: a line that gives one
        // takes the other off (a line that gives both is refused by
        // validation).
        if new.lossstate.is_some() && new.gemodel.is_none() {
            old.gemodel = None;
        }
        if new.gemodel.is_some() && new.lossstate.is_none() {
            old.lossstate = None;
        }
        old.gemodel = new.gemodel.or(old.gemodel);
        old.lossstate = new.lossstate.or(old.lossstate);
        if new.plr.is_some() && !old.random_loss() {
            // `lossecn` marks what a random loss would drop: a `plr 0`
            // that takes the last one off takes it too.
            old.lossecn = false;
        }
        old.lossecn |= new.lossecn;
        // A probability given again brings its correlation, or none.
        if new.duplicate.is_some() {
            old.duplicate = new.duplicate;
            old.duplicate_correlation = new.duplicate_correlation;
        }
        if new.corrupt.is_some() {
            old.corrupt = new.corrupt;
            old.corrupt_correlation = new.corrupt_correlation;
        }
    }

    /// Where each key of `items` first is: objects are found by number
    /// with one lookup each, so a request of many lines into a large
    /// configuration stays linear.
    fn positions<T, K: std::hash::Hash + Eq>(
        items: &[T],
        key: impl Fn(&T) -> K,
    ) -> HashMap<K, usize> {
        let mut at = HashMap::with_capacity(items.len());
        for (k, item) in items.iter().enumerate() {
            at.entry(key(item)).or_insert(k);
        }
        at
    }

    let mut out = running.clone();
    // (kind, index in `lines`) → index in `out`; tables: (index, sub) too.
    let mut moved: HashMap<(SiteKind, usize), usize> = HashMap::new();
    let mut entry_moved: HashMap<(usize, usize), usize> = HashMap::new();
    let mut sched_at = positions(&out.scheds, |o| o.number);
    for (i, s) in lines.scheds.iter().enumerate() {
        let at = match sched_at.get(&s.number).copied() {
            Some(k) => {
                let o = &mut out.scheds[k];
                if s.alg.is_some() {
                    // A `type` is a whole setting: `type fq_codel` with
                    // its parameters, those left out at their defaults;
                    // any other type without them.
                    o.alg = s.alg;
                    o.fq_codel = s.fq_codel;
                    o.fq_pie = s.fq_pie;
                }
                link(&mut o.link, &s.link);
                if !s.mask.is_empty() {
                    o.mask = s.mask;
                }
                o.buckets = s.buckets.or(o.buckets);
                k
            }
            None => {
                out.scheds.push(s.clone());
                sched_at.insert(s.number, out.scheds.len() - 1);
                out.scheds.len() - 1
            }
        };
        moved.insert((SiteKind::Sched, i), at);
    }
    let mut pipe_at = positions(&out.pipes, |o| o.number);
    for (i, p) in lines.pipes.iter().enumerate() {
        let at = match pipe_at.get(&p.number).copied() {
            Some(k) => {
                let o = &mut out.pipes[k];
                if p.alg.is_some() {
                    // A `type` is a whole setting, as a sched's.
                    o.alg = p.alg;
                    o.fq_codel = p.fq_codel;
                    o.fq_pie = p.fq_pie;
                }
                link(&mut o.link, &p.link);
                let off = droptail(lines, SiteKind::Pipe, i, &p.queue);
                queue(&mut o.queue, &p.queue, off);
                if !p.mask.is_empty() {
                    o.mask = p.mask;
                }
                k
            }
            None => {
                out.pipes.push(p.clone());
                pipe_at.insert(p.number, out.pipes.len() - 1);
                out.pipes.len() - 1
            }
        };
        moved.insert((SiteKind::Pipe, i), at);
    }
    let mut queue_at = positions(&out.queues, |o| o.number);
    for (i, q) in lines.queues.iter().enumerate() {
        let at = match queue_at.get(&q.number).copied() {
            Some(k) => {
                let o = &mut out.queues[k];
                o.parent = q.parent.or(o.parent);
                o.weight = q.weight.or(o.weight);
                o.lmax = q.lmax.or(o.lmax);
                o.pri = q.pri.or(o.pri);
                let off = droptail(lines, SiteKind::Queue, i, &q.params);
                queue(&mut o.params, &q.params, off);
                if !q.mask.is_empty() {
                    o.mask = q.mask;
                }
                k
            }
            None => {
                out.queues.push(q.clone());
                queue_at.insert(q.number, out.queues.len() - 1);
                out.queues.len() - 1
            }
        };
        moved.insert((SiteKind::Queue, i), at);
    }
    // Tables by number, and a touched table's entries by prefix: a request
    // of many entries into a large table costs one lookup an entry.
    let mut table_at = positions(&out.tables, |t| t.number);
    for (i, t) in lines.tables.iter().enumerate() {
        let k = match table_at.get(&t.number) {
            Some(&k) => k,
            None => {
                out.tables.push(crate::model::Table {
                    number: t.number,
                    entries: Vec::new(),
                });
                table_at.insert(t.number, out.tables.len() - 1);
                out.tables.len() - 1
            }
        };
        moved.insert((SiteKind::Table, i), k);
        let entries = &mut out.tables[k].entries;
        let mut entry_at = positions(entries, |e| e.prefix);
        for (j, e) in t.entries.iter().enumerate() {
            let at = match entry_at.get(&e.prefix) {
                Some(&x) => {
                    entries[x].value = e.value;
                    x
                }
                None => {
                    entries.push(*e);
                    entry_at.insert(e.prefix, entries.len() - 1);
                    entries.len() - 1
                }
            };
            entry_moved.insert((i, j), at);
        }
    }
    let mut rule_at = positions(&out.rules, |o| o.number);
    for (i, r) in lines.rules.iter().enumerate() {
        let same = r.number.and_then(|n| rule_at.get(&Some(n)).copied());
        let at = match same {
            Some(k) => {
                out.rules[k] = r.clone();
                k
            }
            None => {
                out.rules.push(r.clone());
                rule_at.entry(r.number).or_insert(out.rules.len() - 1);
                out.rules.len() - 1
            }
        };
        moved.insert((SiteKind::Rule, i), at);
    }
    let global = |field| Site {
        kind: SiteKind::Global,
        index: 0,
        sub: 0,
        field,
    };
    if lines.sources.get(&global("default")).is_some() {
        out.default_action = lines.default_action;
    }
    out.seed = lines.seed.or(out.seed);
    let mut sources = SourceMap::new(lines.sources.file.clone());
    for (site, pos) in lines.sources.iter() {
        let mut s = *site;
        if s.kind != SiteKind::Global {
            let Some(&at) = moved.get(&(s.kind, s.index)) else {
                continue;
            };
            if s.kind == SiteKind::Table && s.field != "number" {
                match entry_moved.get(&(s.index, s.sub)) {
                    Some(&sub) => s.sub = sub,
                    None => continue,
                }
            }
            s.index = at;
        }
        sources.insert(s, pos.clone());
    }
    out.sources = sources;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_control, parse_ipfw, NoProfiles};

    fn merged(running: &str, lines: &str) -> Config {
        merge(
            &parse_ipfw(running, "run.ipfw").unwrap(),
            &parse_ipfw(lines, "<ctl>").unwrap(),
        )
    }

    /// Objects are found by number: a request that changes some of many
    /// objects and adds as many changes those in place and appends the
    /// others in its own order.
    #[test]
    fn many_lines_into_a_large_configuration_merge_in_place_and_in_order() {
        const N: u32 = 3000;
        let mut running = String::new();
        let mut lines = String::new();
        for n in 1..=N {
            running.push_str(&format!("pipe {n} config bw 1Mbit/s queue 10\n"));
            running.push_str(&format!("queue {n} config pipe {n} weight 1\n"));
            running.push_str(&format!("add {n} queue {n} udp from any to any\n"));
        }
        for n in (1..=N).step_by(3).chain(N + 1..=N + 500) {
            lines.push_str(&format!("pipe {n} config bw 2Mbit/s\n"));
            lines.push_str(&format!("queue {n} config pipe {n} weight 5\n"));
            lines.push_str(&format!("add {n} queue {n} tcp from any to any\n"));
        }
        let c = merged(&running, &lines);
        let (total, changed) = (N as usize + 500, (N as usize).div_ceil(3) + 500);
        assert_eq!(
            (c.pipes.len(), c.queues.len(), c.rules.len()),
            (total, total, total)
        );
        let numbers: Vec<u32> = c.pipes.iter().map(|p| p.number).collect();
        assert!(
            numbers.iter().copied().eq(1..=N + 500),
            "in place, then appended"
        );
        let two = c
            .pipes
            .iter()
            .filter(|p| p.link.bw == Some(2_000_000))
            .count();
        let five = c.queues.iter().filter(|q| q.weight == Some(5)).count();
        let tcp = c
            .rules
            .iter()
            .filter(|r| r.proto == crate::model::Proto::Tcp)
            .count();
        assert_eq!((two, five, tcp), (changed, changed, changed));
        assert_eq!(c.rules[3].number, Some(4));
        let plan = c.validate(&NoProfiles).unwrap();
        assert_eq!(plan.queues[&4].weight, 5);
        assert_eq!(plan.queues[&5].weight, 1);
    }

    #[test]
    fn table_entries_merge_by_prefix_in_order_across_many_tables() {
        let mut running = String::new();
        for n in 0..500 {
            running.push_str(&format!("table {n} add 10.{}.0.0/16 {n}\n", n % 250));
        }
        running.push_str("table 3 add 192.0.2.0/24 1\n");
        let lines = "table 3 add 192.0.2.0/24 7\n\
                     table 3 add 198.51.100.0/24 8\n\
                     table 3 add 198.51.100.0/24 9\n\
                     table 900 add ::1 4\n";
        let cfg = merged(&running, lines);
        assert_eq!(cfg.tables.len(), 501);
        let t3 = cfg.tables.iter().find(|t| t.number == 3).unwrap();
        let got: Vec<(String, u32)> = t3
            .entries
            .iter()
            .map(|e| (e.prefix.to_string(), e.value))
            .collect();
        let want = [
            ("10.3.0.0/16", 3),
            ("192.0.2.0/24", 7),
            ("198.51.100.0/24", 9),
        ];
        assert_eq!(
            got,
            want.map(|(p, v)| (p.to_string(), v)).to_vec(),
            "an existing prefix keeps its place, a repeated one its first"
        );
        let last = cfg.tables.last().unwrap();
        assert_eq!((last.number, last.entries.len()), (900, 1));
        // The builder finds each of 500 tables by number as well.
        let parsed = parse_ipfw(&running, "run.ipfw").unwrap();
        assert_eq!(parsed.tables.len(), 500);
        assert_eq!(parsed.tables[3].entries.len(), 2);
    }

    #[test]
    fn lines_change_only_what_they_give() {
        let c = merged(
            "sched 4 config type qfq bw 4Mbit/s\n\
             queue 1 config sched 4 weight 3 queue 20 plr 0.1\n\
             pipe 2 config bw 1Mbit/s delay 5ms queue 7\n\
             table 1 add 10.199.0.0/24 2\n\
             add 100 queue 1 udp from any to any\n\
             default deny\n",
            "queue 1 config weight 9\npipe 2 config plr 0.5\n\
             table 1 add 10.199.0.0/24 4\ntable 1 add 10.199.1.0/24 2\n\
             add 100 pipe 2 ip from any to any\nadd pipe 2 tcp from any to any\n",
        );
        let plan = c.validate(&NoProfiles).unwrap();
        let q = &plan.queues[&1];
        assert_eq!((q.weight, q.queue.plr), (9, 0.1));
        assert_eq!(q.queue.limit, crate::QueueLimit::Slots(20));
        let p = &plan.pipes[&2];
        assert_eq!(
            (p.link.bw_bps, p.link.delay_us, p.queue.plr),
            (1_000_000, 5_000, 0.5)
        );
        assert_eq!(plan.tables[&1].len(), 2);
        assert_eq!(
            plan.tables[&1].values().copied().collect::<Vec<_>>(),
            [4, 2]
        );
        assert_eq!(plan.rules.keys().copied().collect::<Vec<_>>(), [100, 200]);
        assert_eq!(
            plan.rules[&100].action,
            crate::Action::Pipe(crate::Target::Number(2))
        );
        // Not given on the line: the running default stays.
        assert_eq!(plan.default_action, crate::DefaultAction::Deny);
        let c = merged("pipe 1 config bw 1Mbit/s", "default deny");
        assert_eq!(c.default_action, crate::DefaultAction::Deny);
    }

    #[test]
    fn a_probability_given_again_brings_its_correlation_or_takes_it_off() {
        let running =
            "pipe 1 config delay 5ms reorder 0.2 0.5 duplicate 0.1 0.3 corrupt 0.01 0.2\n";
        // Other words leave the correlations alone.
        let c = merged(running, "pipe 1 config bw 1Mbit/s");
        let p = c.validate(&NoProfiles).unwrap().pipes[&1].clone();
        assert_eq!(p.link.reorder_correlation, 0.5);
        assert_eq!(
            (p.queue.duplicate, p.queue.duplicate_correlation),
            (0.1, 0.3)
        );
        assert_eq!((p.queue.corrupt, p.queue.corrupt_correlation), (0.01, 0.2));
        // A probability alone takes its correlation off; with one, replaces it.
        let c = merged(
            running,
            "pipe 1 config reorder 0.3 duplicate 0.2 corrupt 0.02 0.4",
        );
        let p = c.validate(&NoProfiles).unwrap().pipes[&1].clone();
        assert_eq!(
            (p.link.reorder_probability, p.link.reorder_correlation),
            (Some(0.3), 0.0)
        );
        assert_eq!(
            (p.queue.duplicate, p.queue.duplicate_correlation),
            (0.2, 0.0)
        );
        assert_eq!((p.queue.corrupt, p.queue.corrupt_correlation), (0.02, 0.4));
    }

    /// `ecn` is a flag as `noerror`: a line turns it on, never off;
    /// `droptail` turns RED off and `ecn` with it, and a line that gives
    /// both is refused at `ecn`, as a file would be.
    #[test]
    fn ecn_is_turned_on_by_a_line_and_off_with_droptail() {
        let running = "pipe 1 config bw 1Mbit/s red 0.002/30/80/0.1\n\
                       queue 2 config pipe 1 gred 0.002/30/80/0.1 ecn\n\
                       pipe 3 config bw 1Mbit/s\n";
        let plan = |lines: &str| merged(running, lines).validate(&NoProfiles);
        // Turned on, RED kept.
        let p = plan("pipe 1 config ecn").unwrap();
        assert!(p.pipes[&1].queue.ecn);
        assert_eq!(p.pipes[&1].queue.red.map(|r| r.max_th), Some(80));
        // Other words, and RED given again without it, keep it.
        let p = plan("queue 2 config weight 7").unwrap();
        assert!(p.queues[&2].queue.ecn && p.queues[&2].weight == 7);
        let p = plan("queue 2 config red 0.01/10/20/0.2").unwrap();
        assert!(p.queues[&2].queue.ecn);
        assert_eq!(
            p.queues[&2].queue.red.map(|r| (r.gentle, r.max_th)),
            Some((false, 20))
        );
        // `droptail` takes RED off, and `ecn` with it.
        let p = plan("queue 2 config droptail").unwrap();
        assert_eq!(
            (p.queues[&2].queue.red, p.queues[&2].queue.ecn),
            (None, false)
        );
        let p = plan("pipe 1 config droptail; queue 2 config weight 2").unwrap();
        assert_eq!(p.pipes[&1].queue.red, None);
        assert!(p.queues[&2].queue.ecn, "another object keeps its own");
        // A line without `droptail` keeps RED (the model's `None` is "not given").
        let p = plan("pipe 1 config plr 0.1").unwrap();
        assert!(p.pipes[&1].queue.red.is_some());
        // `droptail ecn`, or `ecn` on a drop-tail pipe: refused at `ecn`.
        for (lines, column) in [
            ("queue 2 config droptail ecn", 25),
            ("pipe 3 config ecn", 15),
        ] {
            let e = plan(lines).unwrap_err();
            assert_eq!(
                (e.file.as_str(), e.line, e.column, e.token.as_str(), e.kind),
                (
                    "<ctl>",
                    1,
                    column,
                    "ecn",
                    crate::ErrorKind::MissingReference
                ),
                "{lines}: {e}"
            );
            assert!(
                e.to_string()
                    .ends_with("'ecn' needs 'red' or 'gred' on the same queue"),
                "{e}"
            );
        }
    }

    /// `lossecn` is a flag as `ecn`: a line turns it on, never off; a
    /// `plr 0` that leaves no random loss turns it off, as `droptail`
    /// turns `ecn` off, and a line that gives both is refused at
    /// `lossecn`, as a file would be.
    #[test]
    fn lossecn_is_turned_on_by_a_line_and_off_with_the_last_loss() {
        let running = "pipe 1 config bw 1Mbit/s plr 0.01 lossecn\n\
                       queue 2 config pipe 1 gemodel 0.01 lossecn\n\
                       pipe 3 config bw 1Mbit/s\n";
        let plan = |lines: &str| merged(running, lines).validate(&NoProfiles);
        // Turned on with a loss the line gives.
        let p = plan("pipe 3 config plr 0.1 lossecn").unwrap();
        assert!(p.pipes[&3].queue.lossecn);
        // Other words, a loss given again or replaced, keep it.
        for lines in [
            "pipe 1 config bw 2Mbit/s",
            "pipe 1 config plr 0.02",
            "pipe 1 config plr 0 gemodel 0.05",
            "pipe 1 config plr 0 lossstate 0.01",
        ] {
            assert!(plan(lines).unwrap().pipes[&1].queue.lossecn, "{lines}");
        }
        for lines in [
            "queue 2 config weight 7",
            "queue 2 config plr 0",
            "queue 2 config lossstate 0.01",
        ] {
            assert!(plan(lines).unwrap().queues[&2].queue.lossecn, "{lines}");
        }
        // `plr 0` takes the last loss off, and `lossecn` with it.
        let p = plan("pipe 1 config plr 0; queue 2 config weight 2").unwrap();
        assert_eq!(
            (p.pipes[&1].queue.plr, p.pipes[&1].queue.lossecn),
            (0.0, false)
        );
        assert!(p.queues[&2].queue.lossecn, "another object keeps its own");
        // `plr 0 lossecn`, or `lossecn` on a pipe without loss: refused at
        // `lossecn`.
        for (lines, column) in [
            ("pipe 1 config plr 0 lossecn", 21),
            ("pipe 3 config lossecn", 15),
        ] {
            let e = plan(lines).unwrap_err();
            assert_eq!(
                (e.file.as_str(), e.line, e.column, e.token.as_str(), e.kind),
                (
                    "<ctl>",
                    1,
                    column,
                    "lossecn",
                    crate::ErrorKind::MissingReference
                ),
                "{lines}: {e}"
            );
            assert!(
                e.to_string()
                    .ends_with("'lossecn' needs 'plr', 'gemodel' or 'lossstate' on the same queue"),
                "{e}"
            );
        }
    }

    /// A queue has one AQM: a live `codel` replaces RED and RED's `ecn`,
    /// `red`/`gred` replace CoDel, `droptail` clears both; a `codel` line
    /// is a whole setting (what it leaves out is at its default), and a
    /// line without an AQM word keeps the running one.
    #[test]
    fn codel_replaces_red_red_replaces_codel_and_droptail_clears_both() {
        use crate::model::Codel;
        let running = "pipe 1 config bw 1Mbit/s red 0.002/30/80/0.1 ecn\n\
                       queue 2 config pipe 1 codel target 2ms interval 50ms ecn\n\
                       pipe 3 config bw 1Mbit/s codel\n";
        let plan = |lines: &str| merged(running, lines).validate(&NoProfiles);
        // CoDel replaces RED and its marking.
        let p = plan("pipe 1 config codel target 10ms").unwrap();
        let q = &p.pipes[&1].queue;
        assert_eq!((q.red, q.ecn), (None, false));
        assert_eq!(
            q.codel,
            Some(Codel {
                target_us: 10_000,
                ..Codel::default()
            })
        );
        // A new `codel` line: the parameters it leaves out are the
        // defaults, not the running ones.
        let p = plan("queue 2 config codel interval 200ms").unwrap();
        assert_eq!(
            p.queues[&2].queue.codel,
            Some(Codel {
                interval_us: 200_000,
                ..Codel::default()
            })
        );
        // Other words keep it whole.
        let p = plan("queue 2 config weight 4; pipe 3 config plr 0.1").unwrap();
        assert_eq!(
            p.queues[&2].queue.codel,
            Some(Codel {
                target_us: 2_000,
                interval_us: 50_000,
                ecn: true
            })
        );
        assert_eq!(p.pipes[&3].queue.codel, Some(Codel::default()));
        // RED replaces CoDel.
        let p = plan("queue 2 config gred 0.002/30/80/0.1 ecn").unwrap();
        let q = &p.queues[&2].queue;
        assert_eq!(q.codel, None);
        assert!(q.ecn && q.red.is_some_and(|r| r.gentle));
        // `droptail` clears CoDel, and RED on another object.
        let p = plan("queue 2 config droptail; pipe 1 config droptail").unwrap();
        assert_eq!(p.queues[&2].queue.codel, None);
        assert_eq!(
            (p.pipes[&1].queue.red, p.pipes[&1].queue.ecn),
            (None, false)
        );
        assert_eq!(p.pipes[&3].queue.codel, Some(Codel::default()));
        // RED's `ecn` on a CoDel queue: refused at `ecn`, with CoDel's word.
        let e = plan("pipe 3 config ecn").unwrap_err();
        assert_eq!(
            (e.line, e.column, e.token.as_str(), e.kind),
            (1, 15, "ecn", crate::ErrorKind::MissingReference),
            "{e}"
        );
        assert!(e.message.contains("right after 'codel'"), "{e}");
        // `red ... codel` in one line: refused at the second, as in a file.
        let e = parse_ipfw("pipe 1 config red 0.002/30/80/0.1 codel", "<ctl>").unwrap_err();
        assert_eq!(
            (e.column, e.token.as_str(), e.kind),
            (35, "codel", crate::ErrorKind::Duplicate),
            "{e}"
        );
    }

    #[test]
    fn an_error_names_the_line_s_token() {
        let c = merged(
            "pipe 1 config bw 1Mbit/s\npipe 2 config bw 1Mbit/s\nadd 100 pipe 1 ip from any to any",
            "queue 5 config sched 9 weight 2",
        );
        let e = c.validate(&NoProfiles).unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("<ctl>", 1), "{e}");
        assert!(e.column > 1, "{e}");
        let c = merged(
            "pipe 1 config bw 1Mbit/s\npipe 2 config bw 1Mbit/s",
            "pipe 3 config bw 1Mbit/s\npipe 2 config plr 2",
        );
        let e = c.validate(&NoProfiles).unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.line, e.token.as_str()),
            ("<ctl>", 2, "2"),
            "{e}"
        );
    }

    #[test]
    fn pipes_queues_and_scheds_are_deleted_by_number_in_either_order_of_words() {
        let del = |what, numbers: &[u32]| ControlRequest::Delete {
            what,
            numbers: numbers.to_vec(),
        };
        for (line, want) in [
            ("pipe 3 delete", del(Deletable::Pipe, &[3])),
            ("ipfw queue 4 delete", del(Deletable::Queue, &[4])),
            ("sched 2 delete", del(Deletable::Sched, &[2])),
            ("pipe delete 3 7", del(Deletable::Pipe, &[3, 7])),
            ("ipfw -q sched delete 9", del(Deletable::Sched, &[9])),
            ("delete 100 200", del(Deletable::Rule, &[100, 200])),
        ] {
            assert_eq!(parse_control(line, "<ctl>").unwrap(), want, "{line}");
        }
        for (line, want) in [
            ("queue 4 delete 5", "unexpected '5'"),
            ("sched delete", "'delete' needs at least one number"),
            ("pipe 3 delete; pipe 4 config", "must stand alone"),
            ("queue x delete", "x"),
        ] {
            let e = parse_control(line, "<ctl>").unwrap_err();
            assert!(e.to_string().contains(want), "{line}: {e}");
            assert!(e.to_string().starts_with("<ctl>:1:"), "{line}: {e}");
        }
    }

    #[test]
    fn table_all_lists_or_flushes_every_table() {
        let all = Listing::AllTables;
        for (line, want) in [
            (
                "table all list",
                ControlRequest::Show {
                    what: all,
                    number: None,
                },
            ),
            (
                "ipfw table all show",
                ControlRequest::Show {
                    what: all,
                    number: None,
                },
            ),
            ("table all flush", ControlRequest::Flush(all)),
        ] {
            assert_eq!(parse_control(line, "<ctl>").unwrap(), want, "{line}");
        }
        for (line, want) in [
            (
                "table all add 10.0.0.0/8 1",
                "unknown 'table all' command 'add' (allowed: flush, list)",
            ),
            ("table all destroy", "unknown 'table all' command 'destroy'"),
            ("table all flush 1", "unexpected '1'"),
            ("table all", "needs a value"),
        ] {
            let e = parse_control(line, "<ctl>").unwrap_err();
            assert!(e.to_string().contains(want), "{line}: {e}");
        }
    }
}
