//! Printers: a [`Config`] as normalised ipfw lines and as TOML.
//!
//! Both print every set value in one fixed order and in the normal form of
//! its unit (see [`crate::units`]), so that parsing the output gives back an
//! equal [`Config`] (the property tests check `parse(print(x)) == x` for both
//! syntaxes). Comments and the original spelling of aliases (`rr`, `flowset`,
//! `accept`) are not kept.

use std::collections::HashSet;
use std::fmt::Write as _;

use pspat_sched::AlgKind;

use crate::mask::FlowMask;
use crate::model::{
    Action, Codel, Config, DefaultAction, Direction, FqCodel, FqPie, LinkParams, Parent, Pie, Pipe,
    QueueParams, Rule, Sched, SlotInterval, SlotParams, Target,
};
use crate::net::format_ports;
use crate::units::{format_rate, format_size, format_time_us};

fn link_words(link: &LinkParams, out: &mut Vec<String>) {
    if let Some(bw) = link.bw {
        out.push(format!("bw {}", format_rate(bw)));
    }
    if let Some(d) = link.delay_us {
        out.push(format!("delay {}", format_time_us(d)));
    }
    if let Some(b) = link.burst {
        out.push(format!("burst {}", format_size(b)));
    }
    if let Some(p) = &link.profile {
        out.push(format!("profile {p}"));
    }
    if let Some(j) = link.jitter_us {
        out.push(format!("jitter {}", format_time_us(j)));
    }
    if let Some(d) = link.distribution {
        out.push(format!("distribution {}", d.name()));
    }
    if let Some(c) = link.jitter_correlation {
        out.push(format!("correlation {c}"));
    }
    match link.reorder_probability {
        Some(p) => out.push(chance_words("reorder", p, link.reorder_correlation)),
        None if link.reorder => out.push("reorder".into()),
        None => {}
    }
    if let Some(g) = link.reorder_gap {
        out.push(format!("gap {g}"));
    }
    if let Some(s) = &link.slot {
        out.push(slot_words(s));
    }
    if let Some(o) = link.packet_overhead {
        out.push(format!("packetoverhead {o}"));
    }
    if let Some(c) = link.cell_size {
        out.push(format!("cellsize {c}"));
    }
    if let Some(c) = link.cell_overhead {
        out.push(format!("celloverhead {c}"));
    }
}

/// `slot MIN [MAX] [packets N] [bytes N]` or `slot distribution D DELAY
/// JITTER [packets N] [bytes N]`.
pub fn slot_words(s: &SlotParams) -> String {
    let mut w = match s.interval {
        SlotInterval::Uniform { min_us, max_us } if min_us == max_us => {
            format!("slot {}", format_time_us(min_us))
        }
        SlotInterval::Uniform { min_us, max_us } => {
            format!("slot {} {}", format_time_us(min_us), format_time_us(max_us))
        }
        SlotInterval::Distribution {
            distribution,
            delay_us,
            jitter_us,
        } => format!(
            "slot distribution {} {} {}",
            distribution.name(),
            format_time_us(delay_us),
            format_time_us(jitter_us)
        ),
    };
    if let Some(p) = s.packets {
        let _ = write!(w, " packets {p}");
    }
    if let Some(b) = s.bytes {
        let _ = write!(w, " bytes {}", format_size(b));
    }
    w
}

fn queue_words(q: &QueueParams, out: &mut Vec<String>) {
    if let Some(l) = q.limit {
        out.push(format!("queue {l}"));
    }
    if let Some(p) = q.plr {
        out.push(format!("plr {p}"));
    }
    if let Some(r) = q.red {
        let name = if r.gentle { "gred" } else { "red" };
        out.push(format!(
            "{name} {}/{}/{}/{}",
            r.w_q, r.min_th, r.max_th, r.max_p
        ));
    }
    // Right after RED, as dummynet's `pipe show` writes ` (ecn)`.
    if q.ecn {
        out.push("ecn".into());
    }
    // In RED's place (a queue has one AQM), after RED's `ecn` so that an
    // `ecn` after the times is CoDel's; both times, defaults included.
    if let Some(c) = q.codel {
        out.push(codel_words(c));
    }
    if let Some(p) = q.pie {
        out.push(pie_words(&p));
    }
    if let Some(b) = q.buckets {
        out.push(format!("buckets {b}"));
    }
    if q.noerror {
        out.push("noerror".into());
    }
    if let Some(g) = q.gemodel {
        out.push(format!(
            "gemodel {} {} {} {}",
            g.p, g.r, g.one_minus_h, g.one_minus_k
        ));
    }
    if let Some(m) = q.lossstate {
        // All five, defaults included: the words read back as they were.
        out.push(format!(
            "lossstate {} {} {} {} {}",
            m.p13, m.p31, m.p32, m.p23, m.p14
        ));
    }
    // After every loss it marks instead (plr, gemodel, lossstate).
    if q.lossecn {
        out.push("lossecn".into());
    }
    if let Some(p) = q.duplicate {
        out.push(chance_words("duplicate", p, q.duplicate_correlation));
    }
    if let Some(p) = q.corrupt {
        out.push(chance_words("corrupt", p, q.corrupt_correlation));
    }
}

/// `codel target T interval I`, and `ecn` when it marks.
pub fn codel_words(c: Codel) -> String {
    let mut w = format!(
        "codel target {} interval {}",
        format_time_us(c.target_us),
        format_time_us(c.interval_us)
    );
    if c.ecn {
        w.push_str(" ecn");
    }
    w
}

/// The type of an `fq_codel` sched with every parameter, defaults
/// included: `fq_codel target T interval I ecn|noecn quantum Q limit L
/// flows F` (the words after `type`, as `sched show` prints them too).
///
/// # Examples
/// ```
/// use pspat_config::{fq_codel_words, FqCodel};
/// assert_eq!(
///     fq_codel_words(&FqCodel::default()),
///     "fq_codel target 5ms interval 100ms ecn quantum 1514 limit 10240 flows 1024"
/// );
/// ```
pub fn fq_codel_words(f: &FqCodel) -> String {
    format!(
        "fq_codel target {} interval {} {} quantum {} limit {} flows {}",
        format_time_us(f.codel.target_us),
        format_time_us(f.codel.interval_us),
        if f.codel.ecn { "ecn" } else { "noecn" },
        f.quantum,
        f.limit,
        f.flows
    )
}

/// PIE's parameters, every one, defaults included, in the order of
/// dummynet's `pipe show`: `target T tupdate T alpha A beta B max_burst T
/// max_ecnth P ecn|noecn capdrop|nocapdrop derand|noderand onoff|noonoff
/// dre|ts`.
fn pie_parameters(p: &Pie) -> String {
    format!(
        "target {} tupdate {} alpha {} beta {} max_burst {} max_ecnth {} {} {} {} {} {}",
        format_time_us(p.target_us),
        format_time_us(p.tupdate_us),
        p.alpha,
        p.beta,
        format_time_us(p.max_burst_us),
        p.max_ecnth,
        if p.ecn { "ecn" } else { "noecn" },
        if p.capdrop { "capdrop" } else { "nocapdrop" },
        if p.derand { "derand" } else { "noderand" },
        if p.onoff { "onoff" } else { "noonoff" },
        if p.dre { "dre" } else { "ts" },
    )
}

/// A queue's `pie` with every parameter, defaults included.
///
/// # Examples
/// ```
/// use pspat_config::{pie_words, Pie};
/// assert_eq!(
///     pie_words(&Pie::default()),
///     "pie target 15ms tupdate 15ms alpha 0.125 beta 1.25 max_burst 150ms max_ecnth 0.1 \
///      noecn capdrop derand noonoff dre"
/// );
/// ```
pub fn pie_words(p: &Pie) -> String {
    format!("pie {}", pie_parameters(p))
}

/// The type of an `fq_pie` sched with every parameter, defaults included
/// (the words after `type`, as `sched show` prints them too).
///
/// # Examples
/// ```
/// use pspat_config::{fq_pie_words, FqPie};
/// assert_eq!(
///     fq_pie_words(&FqPie::default()),
///     "fq_pie target 15ms tupdate 15ms alpha 0.125 beta 1.25 max_burst 150ms max_ecnth 0.1 \
///      ecn capdrop derand noonoff ts quantum 1514 limit 10240 flows 1024"
/// );
/// ```
pub fn fq_pie_words(f: &FqPie) -> String {
    format!(
        "fq_pie {} quantum {} limit {} flows {}",
        pie_parameters(&f.pie),
        f.quantum,
        f.limit,
        f.flows
    )
}

/// PIE's parameters as the keys of a TOML table (without braces).
fn pie_toml_keys(p: &Pie) -> String {
    format!(
        "target = {}, tupdate = {}, alpha = {}, beta = {}, max_burst = {}, max_ecnth = {}, ecn = {}, capdrop = {}, derand = {}, onoff = {}, estimator = {}",
        quote(&format_time_us(p.target_us)),
        quote(&format_time_us(p.tupdate_us)),
        toml_float(p.alpha),
        toml_float(p.beta),
        quote(&format_time_us(p.max_burst_us)),
        toml_float(p.max_ecnth),
        p.ecn,
        p.capdrop,
        p.derand,
        p.onoff,
        quote(if p.dre { "dre" } else { "ts" }),
    )
}

/// A real number as TOML writes one (`1` as `1.0`: TOML's integers are
/// another type, which the parsers read as the same number anyway).
fn toml_float(x: f64) -> String {
    let s = x.to_string();
    if s.contains(['.', 'e', 'E']) {
        s
    } else {
        format!("{s}.0")
    }
}

/// A sched's `type` words: `type fq_codel ...` or `type fq_pie ...` with
/// its parameters, or `type NAME`; nothing without a type.
fn sched_type_words(s: &Sched, out: &mut Vec<String>) {
    type_words(s.fq_codel, s.fq_pie, s.alg, out);
}

/// The `type` words of a sched or pipe (`type fq_codel ...`, `type NAME`),
/// nothing without a type.
fn type_words(
    fq_codel: Option<FqCodel>,
    fq_pie: Option<FqPie>,
    alg: Option<AlgKind>,
    out: &mut Vec<String>,
) {
    match (fq_codel, fq_pie, alg) {
        (Some(f), _, _) => out.push(format!("type {}", fq_codel_words(&f))),
        (None, Some(f), _) => out.push(format!("type {}", fq_pie_words(&f))),
        (None, None, Some(alg)) => out.push(format!("type {}", alg.name())),
        (None, None, None) => {}
    }
}

/// `word P`, or `word P C` with a correlation of successive decisions.
fn chance_words(word: &str, p: f64, correlation: Option<f64>) -> String {
    match correlation {
        Some(c) => format!("{word} {p} {c}"),
        None => format!("{word} {p}"),
    }
}

fn mask_words(mask: &FlowMask, out: &mut Vec<String>) {
    out.extend(mask_text(mask));
}

/// A mask as its configuration words (`mask src-ip 0xffffff00 dst-port
/// 0xffff`), or `None` for the empty mask (one queue, one instance).
///
/// # Examples
/// ```
/// let cfg = pspat_config::parse_ipfw("sched 1 config type qfq mask src-ip 0xffffff00", "x").unwrap();
/// assert_eq!(pspat_config::mask_text(&cfg.scheds[0].mask).as_deref(), Some("mask src-ip 0xffffff00"));
/// assert_eq!(pspat_config::mask_text(&Default::default()), None);
/// ```
pub fn mask_text(mask: &FlowMask) -> Option<String> {
    let fields = mask.fields();
    if fields.is_empty() {
        return None;
    }
    let mut s = String::from("mask");
    for (name, value) in fields {
        s.push(' ');
        s.push_str(name);
        if !value.is_empty() {
            s.push(' ');
            s.push_str(&value);
        }
    }
    Some(s)
}

fn action_text(action: Action) -> String {
    let target = |t: Target| match t {
        Target::Number(n) => n.to_string(),
        Target::Tablearg => "tablearg".into(),
    };
    match action {
        Action::Pipe(t) => format!("pipe {}", target(t)),
        Action::Queue(t) => format!("queue {}", target(t)),
        Action::Allow => "allow".into(),
        Action::Deny => "deny".into(),
    }
}

/// One rule as a normalised ipfw line (`add 100 queue 1 ip from 10.0.0.0/24 to any dst-port 80`).
pub fn rule_line(rule: &Rule) -> String {
    let mut s = String::from("add");
    if let Some(n) = rule.number {
        let _ = write!(s, " {n}");
    }
    if let Some(p) = rule.prob {
        let _ = write!(s, " prob {}", p.0);
    }
    let _ = write!(
        s,
        " {} {}{} from {} to {}",
        action_text(rule.action),
        not(rule.proto_negated),
        rule.proto.name(),
        rule.src,
        rule.dst
    );
    if !rule.src_ports.is_empty() {
        let _ = write!(
            s,
            " {}src-port {}",
            not(rule.src_ports_negated),
            format_ports(&rule.src_ports)
        );
    }
    if !rule.dst_ports.is_empty() {
        let _ = write!(
            s,
            " {}dst-port {}",
            not(rule.dst_ports_negated),
            format_ports(&rule.dst_ports)
        );
    }
    if !rule.dscp.is_empty() {
        let _ = write!(
            s,
            " {}dscp {}",
            not(rule.dscp_negated),
            crate::dscp::format_dscp_list(&rule.dscp)
        );
    }
    if !rule.ip_len.is_empty() {
        let _ = write!(
            s,
            " {}iplen {}",
            not(rule.ip_len_negated),
            format_ports(&rule.ip_len)
        );
    }
    if let Some(f) = rule.tcp_flags {
        // ipfw prints `tcpflags syn,!ack` as `setup`.
        let _ = if f == crate::header::TcpFlags::SETUP {
            write!(s, " {}setup", not(rule.tcp_flags_negated))
        } else {
            write!(s, " {}tcpflags {f}", not(rule.tcp_flags_negated))
        };
    }
    if rule.established {
        let _ = write!(s, " {}established", not(rule.established_negated));
    }
    match rule.direction {
        Direction::Any => {}
        Direction::In => s.push_str(" in"),
        Direction::Out => s.push_str(" out"),
    }
    if let Some(i) = &rule.interface {
        let _ = write!(s, " {}{} {}", not(i.negated), i.role.name(), i.name);
    }
    if let Some(c) = &rule.comment {
        let _ = write!(s, " // {c}");
    }
    s
}

/// `"not "` before a negated option, nothing before a positive one.
fn not(negated: bool) -> &'static str {
    if negated {
        "not "
    } else {
        ""
    }
}

fn line(head: String, words: Vec<String>) -> String {
    let mut s = head;
    for w in words {
        s.push(' ');
        s.push_str(&w);
    }
    s.push('\n');
    s
}

/// The configuration as normalised ipfw lines: scheds, pipes, queues,
/// tables, rules, then `default` and `seed` when set.
///
/// # Examples
/// ```
/// let cfg = pspat_config::parse_ipfw("ipfw pipe 1 config bw 300Kbit/s queue 50KBytes", "x").unwrap();
/// assert_eq!(pspat_config::print_ipfw(&cfg), "pipe 1 config bw 300Kbit/s queue 50KB\n");
/// ```
pub fn print_ipfw(config: &Config) -> String {
    let mut out = String::new();
    for s in &config.scheds {
        let mut w = Vec::new();
        sched_type_words(s, &mut w);
        link_words(&s.link, &mut w);
        if let Some(b) = s.buckets {
            w.push(format!("buckets {b}"));
        }
        mask_words(&s.mask, &mut w);
        out.push_str(&line(format!("sched {} config", s.number), w));
    }
    for p in &config.pipes {
        let mut w = Vec::new();
        type_words(p.fq_codel, p.fq_pie, pipe_alg(p), &mut w);
        link_words(&p.link, &mut w);
        queue_words(&p.queue, &mut w);
        mask_words(&p.mask, &mut w);
        out.push_str(&line(format!("pipe {} config", p.number), w));
    }
    for q in &config.queues {
        let mut w = Vec::new();
        if let Some(x) = q.weight {
            w.push(format!("weight {x}"));
        }
        if let Some(x) = q.lmax {
            w.push(format!("lmax {x}"));
        }
        if let Some(x) = q.pri {
            w.push(format!("pri {x}"));
        }
        match q.parent {
            Some(Parent::Sched(n)) => w.push(format!("sched {n}")),
            Some(Parent::Pipe(n)) => w.push(format!("pipe {n}")),
            None => {}
        }
        queue_words(&q.params, &mut w);
        mask_words(&q.mask, &mut w);
        out.push_str(&line(format!("queue {} config", q.number), w));
    }
    for t in &config.tables {
        if t.entries.is_empty() {
            let _ = writeln!(out, "table {} create", t.number);
        }
        for e in &t.entries {
            let _ = writeln!(out, "table {} add {} {}", t.number, e.prefix, e.value);
        }
    }
    for r in &config.rules {
        out.push_str(&rule_line(r));
        out.push('\n');
    }
    if config.default_action == DefaultAction::Deny {
        out.push_str("default deny\n");
    }
    if let Some(seed) = config.seed {
        let _ = writeln!(out, "seed {seed}");
    }
    out
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(q, "\\u{:04X}", c as u32);
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// A float that TOML reads back as the same float.
fn real(v: f64) -> String {
    let s = format!("{v:?}");
    if s.contains(['.', 'e', 'E']) {
        s
    } else {
        format!("{s}.0")
    }
}

fn toml_link(link: &LinkParams, out: &mut String) {
    if let Some(bw) = link.bw {
        let _ = writeln!(out, "bw = {}", quote(&format_rate(bw)));
    }
    if let Some(d) = link.delay_us {
        let _ = writeln!(out, "delay = {}", quote(&format_time_us(d)));
    }
    if let Some(b) = link.burst {
        let _ = writeln!(out, "burst = {}", quote(&format_size(b)));
    }
    if let Some(p) = &link.profile {
        let _ = writeln!(out, "profile = {}", quote(p));
    }
    if let Some(j) = link.jitter_us {
        let _ = writeln!(out, "jitter = {}", quote(&format_time_us(j)));
    }
    if let Some(d) = link.distribution {
        let _ = writeln!(out, "distribution = {}", quote(d.name()));
    }
    if let Some(c) = link.jitter_correlation {
        let _ = writeln!(out, "correlation = {}", real(c));
    }
    match link.reorder_probability {
        Some(p) => toml_chance(out, "reorder", p, link.reorder_correlation),
        None if link.reorder => out.push_str("reorder = true\n"),
        None => {}
    }
    if let Some(g) = link.reorder_gap {
        let _ = writeln!(out, "gap = {g}");
    }
    if let Some(s) = &link.slot {
        let mut keys = match s.interval {
            SlotInterval::Uniform { min_us, max_us } => vec![
                format!("min = {}", quote(&format_time_us(min_us))),
                format!("max = {}", quote(&format_time_us(max_us))),
            ],
            SlotInterval::Distribution {
                distribution,
                delay_us,
                jitter_us,
            } => vec![
                format!("distribution = {}", quote(distribution.name())),
                format!("delay = {}", quote(&format_time_us(delay_us))),
                format!("jitter = {}", quote(&format_time_us(jitter_us))),
            ],
        };
        if let Some(p) = s.packets {
            keys.push(format!("packets = {p}"));
        }
        if let Some(b) = s.bytes {
            keys.push(format!("bytes = {}", quote(&format_size(b))));
        }
        let _ = writeln!(out, "slot = {{ {} }}", keys.join(", "));
    }
    if let Some(o) = link.packet_overhead {
        let _ = writeln!(out, "packetoverhead = {o}");
    }
    if let Some(c) = link.cell_size {
        let _ = writeln!(out, "cellsize = {c}");
    }
    if let Some(c) = link.cell_overhead {
        let _ = writeln!(out, "celloverhead = {c}");
    }
}

fn toml_queue(q: &QueueParams, out: &mut String) {
    if let Some(l) = q.limit {
        match l {
            crate::units::QueueLimit::Slots(n) => {
                let _ = writeln!(out, "limit = {n}");
            }
            crate::units::QueueLimit::Bytes(b) => {
                let _ = writeln!(out, "limit = {}", quote(&format_size(b)));
            }
        }
    }
    if let Some(p) = q.plr {
        let _ = writeln!(out, "plr = {}", real(p));
    }
    if let Some(r) = q.red {
        let name = if r.gentle { "gred" } else { "red" };
        let _ = writeln!(
            out,
            "{name} = {}",
            quote(&format!("{}/{}/{}/{}", r.w_q, r.min_th, r.max_th, r.max_p))
        );
    }
    if q.ecn {
        out.push_str("ecn = true\n");
    }
    if let Some(c) = q.codel {
        let ecn = if c.ecn { ", ecn = true" } else { "" };
        let _ = writeln!(
            out,
            "codel = {{ target = {}, interval = {}{ecn} }}",
            quote(&format_time_us(c.target_us)),
            quote(&format_time_us(c.interval_us))
        );
    }
    if let Some(p) = q.pie {
        let _ = writeln!(out, "pie = {{ {} }}", pie_toml_keys(&p));
    }
    if let Some(b) = q.buckets {
        let _ = writeln!(out, "buckets = {b}");
    }
    if q.noerror {
        out.push_str("noerror = true\n");
    }
    if let Some(g) = q.gemodel {
        let _ = writeln!(
            out,
            "gemodel = {{ p = {}, r = {}, 1-h = {}, 1-k = {} }}",
            real(g.p),
            real(g.r),
            real(g.one_minus_h),
            real(g.one_minus_k)
        );
    }
    if let Some(m) = q.lossstate {
        let _ = writeln!(
            out,
            "lossstate = {{ p13 = {}, p31 = {}, p32 = {}, p23 = {}, p14 = {} }}",
            real(m.p13),
            real(m.p31),
            real(m.p32),
            real(m.p23),
            real(m.p14)
        );
    }
    if q.lossecn {
        out.push_str("lossecn = true\n");
    }
    if let Some(d) = q.duplicate {
        toml_chance(out, "duplicate", d, q.duplicate_correlation);
    }
    if let Some(c) = q.corrupt {
        toml_chance(out, "corrupt", c, q.corrupt_correlation);
    }
}

/// A probability with an optional correlation of successive decisions:
/// `key = P`, or `key = { p = P, correlation = C }`.
fn toml_chance(out: &mut String, key: &str, p: f64, correlation: Option<f64>) {
    let _ = match correlation {
        Some(c) => writeln!(
            out,
            "{key} = {{ p = {}, correlation = {} }}",
            real(p),
            real(c)
        ),
        None => writeln!(out, "{key} = {}", real(p)),
    };
}

fn toml_mask(mask: &FlowMask, out: &mut String) {
    let fields = mask.fields();
    if fields.is_empty() {
        return;
    }
    if fields.len() == 1 && fields[0].0 == "all" {
        out.push_str("mask = \"all\"\n");
        return;
    }
    let items: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{k} = {}", quote(v)))
        .collect();
    let _ = writeln!(out, "mask = {{ {} }}", items.join(", "));
}

fn toml_table(number: u32, items: &[String], out: &mut String) {
    let _ = writeln!(out, "\n[[table]]\nnumber = {number}");
    if !items.is_empty() {
        let _ = writeln!(out, "entries = {{ {} }}", items.join(", "));
    }
}

/// A sched's or pipe's `type` keys: `type` with an `fq_codel` or `fq_pie`
/// table, or `type` alone; nothing without a type.
fn toml_type(
    fq_codel: Option<FqCodel>,
    fq_pie: Option<FqPie>,
    alg: Option<AlgKind>,
    out: &mut String,
) {
    match (fq_codel, fq_pie, alg) {
        (None, Some(f), _) => {
            let _ = writeln!(out, "type = \"fq_pie\"");
            let _ = writeln!(
                out,
                "fq_pie = {{ {}, quantum = {}, limit = {}, flows = {} }}",
                pie_toml_keys(&f.pie),
                f.quantum,
                f.limit,
                f.flows
            );
        }
        (Some(f), _, _) => {
            let _ = writeln!(out, "type = \"fq_codel\"");
            let _ = writeln!(
                out,
                "fq_codel = {{ target = {}, interval = {}, ecn = {}, quantum = {}, limit = {}, flows = {} }}",
                quote(&format_time_us(f.codel.target_us)),
                quote(&format_time_us(f.codel.interval_us)),
                f.codel.ecn,
                f.quantum,
                f.limit,
                f.flows
            );
        }
        (None, None, Some(alg)) => {
            let _ = writeln!(out, "type = {}", quote(alg.name()));
        }
        (None, None, None) => {}
    }
}

/// A pipe's type as printed: `None` for the pipe's default, FIFO, which
/// the normal form leaves out.
fn pipe_alg(p: &Pipe) -> Option<AlgKind> {
    p.alg
        .filter(|&a| a != AlgKind::Fifo || p.fq_codel.is_some() || p.fq_pie.is_some())
}

/// The configuration as TOML (the format of `docs/CONFIG.md`).
///
/// # Examples
/// ```
/// let cfg = pspat_config::parse_ipfw("sched 4 config type qfq bw 4Mbit/s", "x").unwrap();
/// let toml = pspat_config::print_toml(&cfg);
/// assert!(toml.contains("[[sched]]\nnumber = 4\ntype = \"qfq\"\nbw = \"4Mbit/s\"\n"));
/// assert_eq!(pspat_config::parse_toml(&toml, "x.toml").unwrap(), cfg);
/// ```
pub fn print_toml(config: &Config) -> String {
    let mut out = String::new();
    if config.default_action == DefaultAction::Deny {
        out.push_str("default = \"deny\"\n");
    }
    if let Some(seed) = config.seed {
        let _ = writeln!(out, "seed = {seed}");
    }
    for s in &config.scheds {
        let _ = writeln!(out, "\n[[sched]]\nnumber = {}", s.number);
        toml_type(s.fq_codel, s.fq_pie, s.alg, &mut out);
        toml_link(&s.link, &mut out);
        if let Some(b) = s.buckets {
            let _ = writeln!(out, "buckets = {b}");
        }
        toml_mask(&s.mask, &mut out);
    }
    for p in &config.pipes {
        let _ = writeln!(out, "\n[[pipe]]\nnumber = {}", p.number);
        toml_type(p.fq_codel, p.fq_pie, pipe_alg(p), &mut out);
        toml_link(&p.link, &mut out);
        toml_queue(&p.queue, &mut out);
        toml_mask(&p.mask, &mut out);
    }
    for q in &config.queues {
        let _ = writeln!(out, "\n[[queue]]\nnumber = {}", q.number);
        match q.parent {
            Some(Parent::Sched(n)) => {
                let _ = writeln!(out, "sched = {n}");
            }
            Some(Parent::Pipe(n)) => {
                let _ = writeln!(out, "pipe = {n}");
            }
            None => {}
        }
        if let Some(x) = q.weight {
            let _ = writeln!(out, "weight = {x}");
        }
        if let Some(x) = q.lmax {
            let _ = writeln!(out, "lmax = {x}");
        }
        if let Some(x) = q.pri {
            let _ = writeln!(out, "pri = {x}");
        }
        toml_queue(&q.params, &mut out);
        toml_mask(&q.mask, &mut out);
    }
    for t in &config.tables {
        // A prefix given twice (validation refuses it, parsing keeps it)
        // cannot be two keys of one TOML table: each repeat starts another
        // [[table]] of the same number, whose entries the reader appends.
        let mut items: Vec<String> = Vec::new();
        let mut keys = HashSet::new();
        for e in &t.entries {
            if !keys.insert(e.prefix) {
                toml_table(t.number, &items, &mut out);
                items.clear();
                keys.clear();
                keys.insert(e.prefix);
            }
            items.push(format!("{} = {}", quote(&e.prefix.to_string()), e.value));
        }
        toml_table(t.number, &items, &mut out);
    }
    for r in &config.rules {
        out.push_str("\n[[rule]]\n");
        if let Some(n) = r.number {
            let _ = writeln!(out, "number = {n}");
        }
        if let Some(p) = r.prob {
            let _ = writeln!(out, "prob = {}", p.0);
        }
        let _ = writeln!(out, "action = {}", quote(&action_text(r.action)));
        let _ = writeln!(
            out,
            "proto = {}",
            quote(&format!("{}{}", not(r.proto_negated), r.proto.name()))
        );
        let _ = writeln!(out, "from = {}", quote(&r.src.to_string()));
        let _ = writeln!(out, "to = {}", quote(&r.dst.to_string()));
        if !r.src_ports.is_empty() {
            let ports = format_ports(&r.src_ports);
            let text = format!("{}{ports}", not(r.src_ports_negated));
            let _ = writeln!(out, "src-port = {}", quote(&text));
        }
        if !r.dst_ports.is_empty() {
            let ports = format_ports(&r.dst_ports);
            let text = format!("{}{ports}", not(r.dst_ports_negated));
            let _ = writeln!(out, "dst-port = {}", quote(&text));
        }
        if !r.dscp.is_empty() {
            let text = format!(
                "{}{}",
                not(r.dscp_negated),
                crate::dscp::format_dscp_list(&r.dscp)
            );
            let _ = writeln!(out, "dscp = {}", quote(&text));
        }
        if !r.ip_len.is_empty() {
            let text = format!("{}{}", not(r.ip_len_negated), format_ports(&r.ip_len));
            let _ = writeln!(out, "iplen = {}", quote(&text));
        }
        if let Some(f) = r.tcp_flags {
            let text = format!("{}{f}", not(r.tcp_flags_negated));
            let _ = writeln!(out, "tcpflags = {}", quote(&text));
        }
        if r.established {
            let _ = writeln!(out, "established = {}", !r.established_negated);
        }
        match r.direction {
            Direction::Any => {}
            Direction::In => out.push_str("direction = \"in\"\n"),
            Direction::Out => out.push_str("direction = \"out\"\n"),
        }
        if let Some(i) = &r.interface {
            let text = format!("{}{}", not(i.negated), i.name);
            let _ = writeln!(out, "{} = {}", i.role.name(), quote(&text));
        }
        if let Some(c) = &r.comment {
            let _ = writeln!(out, "comment = {}", quote(c));
        }
    }
    // Each table opens with a blank line; the first needs none.
    match out.strip_prefix('\n') {
        Some(rest) => rest.to_string(),
        None => out,
    }
}

#[cfg(test)]
mod tests {
    use crate::{parse_ipfw, parse_toml, print_toml};

    #[test]
    fn a_prefix_given_twice_prints_as_toml_that_reads_back() {
        let text = "table 1 add 1.2.3.0/24 20\n\
                    table 1 add 10.0.0.0/8 1\n\
                    table 1 add 1.2.3.0/24 20\n\
                    table 2 add ::1 3\n";
        let cfg = parse_ipfw(text, "x.ipfw").unwrap();
        let toml = print_toml(&cfg);
        assert_eq!(parse_toml(&toml, "x.toml").unwrap(), cfg, "{toml}");
        assert_eq!(toml.matches("[[table]]\nnumber = 1\n").count(), 2, "{toml}");
    }
}
