//! dummynet's `fq_codel` sched type: read in both syntaxes, printed with
//! every parameter, refused at the offending token, lowered onto the
//! sched's flowsets, merged as a whole setting by a live change.

use pspat_config::{
    diff, merge, parse_control, parse_ipfw, parse_toml, pipe_config, print_ipfw, print_toml,
    queue_config, sched_config, Change, Codel, Config, ControlRequest, Error, ErrorKind, FlowMask,
    FqCodel, NoProfiles, Plan, QueueLimit, Sched,
};
use pspat_sched::AlgKind;

use crate::support::{self, ipfw, plan};

/// The fq_codel parameters of the one sched of `text`.
fn fq(text: &str) -> FqCodel {
    let c = ipfw(text);
    assert_eq!(c.scheds[0].alg, Some(AlgKind::Fq), "{text}");
    c.scheds[0].fq_codel.expect("an fq_codel sched")
}

fn error_of(text: &str) -> Error {
    support::error_of(text, "cfg.ipfw")
}

fn error_of_toml(text: &str) -> Error {
    support::error_of(text, "cfg.toml")
}

/// `e` is at `line`:`column` on `token`, of `kind`, and says `message`.
fn assert_error(e: &Error, at: (u32, u32, &str), kind: ErrorKind, message: &str) {
    support::assert_at(e, at, kind, message);
    assert_eq!(e.message, message, "{e}");
}

/// An input, the line, column and token of its error, its kind and
/// message.
type ErrorCase = (String, (u32, u32, &'static str), ErrorKind, String);

const EXAMPLE: &str =
    "sched 1 config type fq_codel target 5ms quantum 1514 limit 10240 flows 1024 bw 10Mbit/s";

#[test]
fn the_defaults_are_dummynet_s_with_ecn_on() {
    let d = FqCodel::default();
    assert_eq!(
        (d.codel.target_us, d.codel.interval_us, d.codel.ecn),
        (5_000, 100_000, true)
    );
    assert_eq!((d.quantum, d.limit, d.flows), (1514, 10_240, 1024));
    assert_eq!(d.quantum, pspat_sched::fq::DEFAULT_QUANTUM);
    // A queue's `codel` does not mark by default; fq_codel does.
    assert!(!Codel::default().ecn);
    assert_eq!(fq("sched 1 config type fq_codel"), d);
    assert_eq!(fq("ipfw -q sched 1 config type FQ_CODEL"), d);
}

#[test]
fn parameters_in_any_order_end_at_the_first_other_word() {
    let mine = FqCodel {
        codel: Codel {
            target_us: 2_000,
            interval_us: 50_000,
            ecn: false,
        },
        quantum: 3000,
        limit: 500,
        flows: 256,
    };
    for text in [
        "sched 1 config type fq_codel target 2ms interval 50ms noecn quantum 3000 limit 500 flows 256",
        "sched 1 config type fq_codel flows 256 noecn limit 500 interval 50 quantum 3000 target 2000us",
        "ipfw sched 1 config bw 10Mbit/s type fq_codel quantum 3000 limit 500 flows 256 target 2ms interval 50ms noecn mask all",
    ] {
        assert_eq!(fq(text), mine, "{text}");
    }
    // The pfSense line, and the brief's: the parameters end at `bw`.
    let c = ipfw("sched 1 config type fq_codel target 2ms flows 256 bw 10Mbit/s");
    assert_eq!(c.scheds[0].link.bw, Some(10_000_000));
    let f = c.scheds[0].fq_codel.unwrap();
    assert_eq!((f.codel.target_us, f.flows), (2_000, 256));
    assert_eq!(
        fq("sched 1 config type fq_codel target 5ms interval 100ms quantum 1514 limit 10240 flows 1024 noecn"),
        FqCodel {
            codel: Codel::default(),
            ..FqCodel::default()
        }
    );
}

#[test]
fn printed_with_every_parameter_and_converted_both_ways() {
    for (input, printed) in [
        (
            "sched 1 config type fq_codel",
            "sched 1 config type fq_codel target 5ms interval 100ms ecn quantum 1514 limit 10240 flows 1024\n",
        ),
        (
            "ipfw sched 1 config type fq_codel target 5ms interval 100ms quantum 1514 limit 10240 flows 1024 noecn bw 20Mbit/s",
            "sched 1 config type fq_codel target 5ms interval 100ms noecn quantum 1514 limit 10240 flows 1024 bw 20Mbit/s\n",
        ),
        (
            "sched 3 config mask src-ip 0xffffff00 type fq_codel flows 8 interval 1s buckets 128",
            "sched 3 config type fq_codel target 5ms interval 1s ecn quantum 1514 limit 10240 flows 8 buckets 128 mask src-ip 0xffffff00\n",
        ),
        // pspat's bare flow queueing, without CoDel's defaults.
        ("sched 2 config type fq", "sched 2 config type fq\n"),
    ] {
        let c = ipfw(input);
        assert_eq!(print_ipfw(&c), printed, "{input}");
        assert_eq!(ipfw(printed), c, "{input}");
        let toml = print_toml(&c);
        assert_eq!(
            parse_toml(&toml, "x.toml").unwrap_or_else(|e| panic!("{e}\n{toml}")),
            c,
            "{toml}"
        );
        assert_eq!(print_ipfw(&parse_toml(&toml, "x.toml").unwrap()), printed);
    }
    let toml = print_toml(&ipfw(
        "sched 1 config type fq_codel noecn flows 8 bw 20Mbit/s\nqueue 1 config sched 1",
    ));
    assert!(
        toml.contains(
            "[[sched]]\nnumber = 1\ntype = \"fq_codel\"\nfq_codel = { target = \"5ms\", interval = \"100ms\", ecn = false, quantum = 1514, limit = 10240, flows = 8 }\nbw = \"20Mbit/s\"\n"
        ),
        "{toml}"
    );
}

#[test]
fn toml_takes_an_optional_table_of_parameters() {
    let sched = |body: &str| -> Sched {
        parse_toml(&format!("[[sched]]\nnumber = 1\n{body}"), "x.toml")
            .unwrap_or_else(|e| panic!("{e}"))
            .scheds[0]
            .clone()
    };
    let s = sched("type = \"fq_codel\"\n");
    assert_eq!(
        (s.alg, s.fq_codel),
        (Some(AlgKind::Fq), Some(FqCodel::default()))
    );
    assert_eq!(
        sched("type = \"fq_codel\"\nfq_codel = {}\n").fq_codel,
        Some(FqCodel::default())
    );
    let mine = FqCodel {
        codel: Codel {
            target_us: 2_000,
            interval_us: 50_000,
            ecn: false,
        },
        quantum: 3000,
        limit: 500,
        flows: 256,
    };
    // Every key, in any order; the table before or after `type`.
    for body in [
        "type = \"fq_codel\"\nfq_codel = { target = \"2ms\", interval = \"50ms\", ecn = false, quantum = 3000, limit = 500, flows = 256 }\n",
        "fq_codel = { flows = 256, limit = 500, quantum = 3000, ecn = false, interval = 50, target = \"2000us\" }\nbw = \"1Mbit/s\"\ntype = \"fq_codel\"\n",
    ] {
        assert_eq!(sched(body).fq_codel, Some(mine), "{body}");
    }
    // Each key alone, the others at their defaults.
    assert_eq!(
        sched("type = \"fq_codel\"\nfq_codel = { quantum = 300 }\n").fq_codel,
        Some(FqCodel {
            quantum: 300,
            ..FqCodel::default()
        })
    );
    // `pspat config convert` both ways.
    let text = "sched 1 config type fq_codel target 2ms interval 50ms noecn quantum 3000 limit 500 flows 256 bw 10Mbit/s\nqueue 1 config sched 1\n";
    let c = ipfw(text);
    let toml = print_toml(&c);
    let back = parse_toml(&toml, "x.toml").unwrap();
    assert_eq!(back, c);
    assert_eq!(print_ipfw(&back), text);
}

#[test]
fn toml_errors_name_their_key_or_value() {
    let head = "[[sched]]\nnumber = 1\n";
    // A table with another type, or without one.
    let e = error_of_toml(&format!(
        "{head}type = \"drr\"\nfq_codel = {{ flows = 3 }}\n"
    ));
    assert_error(
        &e,
        (4, 1, "fq_codel"),
        ErrorKind::MissingReference,
        "an 'fq_codel' table needs type = \"fq_codel\" on the same sched (this one's type is \"drr\")",
    );
    let e = error_of_toml(&format!("{head}fq_codel = {{ flows = 3 }}\n"));
    assert_error(
        &e,
        (3, 1, "fq_codel"),
        ErrorKind::MissingReference,
        "an 'fq_codel' table needs type = \"fq_codel\" on the same sched (this one has no type)",
    );
    // An unknown key, a non-boolean ecn, a table that is not one.
    let fq =
        |table: &str| error_of_toml(&format!("{head}type = \"fq_codel\"\nfq_codel = {table}\n"));
    let e = fq("{ flow = 3 }");
    assert_error(
        &e,
        (4, 14, "flow"),
        ErrorKind::UnknownKeyword,
        "unknown fq_codel key 'flow' (allowed: target, interval, ecn, quantum, limit, flows)",
    );
    let e = fq("{ ecn = \"yes\" }");
    assert_error(
        &e,
        (4, 20, "string"),
        ErrorKind::Syntax,
        "fq_codel's 'ecn' takes true or false",
    );
    let e = fq("3");
    assert_eq!((e.line, e.column, e.token.as_str()), (4, 12, "integer"));
    assert!(e.message.starts_with("'fq_codel' takes a table"), "{e}");
    // Values out of range at the value, as in ipfw lines.
    let e = fq("{ quantum = 9001 }");
    assert_error(
        &e,
        (4, 24, "9001"),
        ErrorKind::OutOfRange,
        "sched 1 fq_codel quantum (bytes) 9001 is out of range (allowed: 1..=9000)",
    );
    let e = fq("{ target = \"0ms\" }");
    assert_error(
        &e,
        (4, 24, "0ms"),
        ErrorKind::OutOfRange,
        "sched 1 fq_codel target 0ms is out of range (allowed: 1us..=3600s)",
    );
    let e = fq("{ flows = \"many\" }");
    assert_eq!(
        (e.line, e.column, e.token.as_str(), e.kind),
        (4, 23, "many", ErrorKind::Syntax)
    );
    // Not a key of queues, or of a pipe without the type.
    let e = error_of_toml("[[pipe]]\nnumber = 1\nfq_codel = { flows = 3 }\n");
    assert_eq!(
        (e.line, e.column, e.token.as_str(), e.kind),
        (3, 1, "fq_codel", ErrorKind::MissingReference)
    );
    assert!(
        e.message
            .contains("needs type = \"fq_codel\" on the same pipe (this one has no type)"),
        "{e}"
    );
    let e = error_of_toml("[[queue]]\nnumber = 1\npipe = 1\nfq_codel = { flows = 3 }\n");
    assert_eq!(
        (e.line, e.column, e.kind),
        (4, 1, ErrorKind::UnknownKeyword)
    );
    assert!(
        e.message
            .starts_with("fq_codel is a sched's or pipe's type"),
        "{e}"
    );
    let e = error_of_toml(&format!("{head}type = \"fq_codel\"\nlimit = 100\n"));
    assert_eq!(
        (e.line, e.column, e.token.as_str(), e.kind),
        (4, 1, "limit", ErrorKind::UnknownKeyword)
    );
    assert_eq!(
        e.message,
        "'limit' is a parameter of the fq_codel sched type: in TOML it goes in the sched's fq_codel table (example: type = \"fq_codel\" and fq_codel = { limit = 10240 })"
    );
    let e = error_of_toml(&format!("{head}type = \"fq_codel\"\necn = true\n"));
    assert_eq!((e.line, e.column, e.token.as_str()), (4, 1, "ecn"));
    // An fq_codel table on an fq_pie sched: the table needs its own type.
    let e = error_of_toml(&format!(
        "{head}type = \"fq_pie\"\nfq_codel = {{ flows = 8 }}\n"
    ));
    assert_eq!((e.line, e.column, e.token.as_str()), (4, 1, "fq_codel"));
}

/// Every bad input at its token: a value missing or bad, out of range, a
/// parameter twice, `ecn` with `noecn`, a parameter elsewhere.
#[test]
fn ipfw_errors_name_the_offending_token() {
    let head = "sched 1 config type fq_codel";
    // Each input's one error: line, column, token, kind and message. A
    // value missing or not a number; a parameter given twice, `ecn` with
    // `noecn`; a parameter after another keyword ended them; one outside
    // fq_codel (another sched type, before the type, pipe and queue
    // lines).
    let cases: Vec<ErrorCase> = vec![
        (
            format!("{head} quantum"),
            (1, 30, "quantum"),
            ErrorKind::Syntax,
            "'quantum' needs a value (example: 1514)".to_string(),
        ),
        (
            format!("{head} flows 1024 limit"),
            (1, 41, "limit"),
            ErrorKind::Syntax,
            "'limit' needs a value (example: 10240)".to_string(),
        ),
        (
            format!("{head} target"),
            (1, 30, "target"),
            ErrorKind::Syntax,
            "'target' needs a value (example: 5ms)".to_string(),
        ),
        (
            format!("{head} quantum 1.5KB"),
            (1, 38, "1.5KB"),
            ErrorKind::Syntax,
            "'1.5KB' is not a whole number".to_string(),
        ),
        (
            format!("{head} quantum 1 flows 2 quantum 3"),
            (1, 48, "quantum"),
            ErrorKind::Duplicate,
            "'quantum' is given twice in this statement".to_string(),
        ),
        (
            format!("{head} ecn quantum 1514 noecn"),
            (1, 47, "noecn"),
            ErrorKind::Duplicate,
            "'noecn' after 'ecn' (column 30): fq_codel takes one of ecn and noecn".to_string(),
        ),
        (
            format!("{head} target 2ms bw 10Mbit/s flows 256"),
            (1, 53, "flows"),
            ErrorKind::UnknownKeyword,
            format!("'flows' after another keyword: the parameters of fq_codel go right after 'type fq_codel', before the sched's other keywords (example: {EXAMPLE})"),
        ),
        (
            "sched 1 config type drr quantum 1514".to_string(),
            (1, 25, "quantum"),
            ErrorKind::UnknownKeyword,
            format!("'quantum' is a parameter of the fq_codel sched type and goes right after 'type fq_codel' (example: {EXAMPLE}); this sched's type is drr"),
        ),
        (
            "sched 1 config flows 64 type fq_codel".to_string(),
            (1, 16, "flows"),
            ErrorKind::UnknownKeyword,
            format!("'flows' is a parameter of the fq_codel sched type and goes right after 'type fq_codel' (example: {EXAMPLE})"),
        ),
        (
            "pipe 1 config bw 1Mbit/s limit 100".to_string(),
            (1, 26, "limit"),
            ErrorKind::UnknownKeyword,
            format!("'limit' is a parameter of the fq_codel sched type and goes right after 'type fq_codel' (example: {EXAMPLE}); a pipe's own queue size is 'queue N'"),
        ),
        (
            "pipe 1 config type wf2q+ bw 1Mbit/s flows 100".to_string(),
            (1, 37, "flows"),
            ErrorKind::UnknownKeyword,
            format!("'flows' is a parameter of the fq_codel sched type and goes right after 'type fq_codel' (example: {EXAMPLE}); this pipe's type is wf2q+"),
        ),
        (
            "pipe 1 config type fq_codel flows 8 bw 1Mbit/s quantum 300".to_string(),
            (1, 48, "quantum"),
            ErrorKind::UnknownKeyword,
            format!("'quantum' after another keyword: the parameters of fq_codel go right after 'type fq_codel', before the pipe's other keywords (example: {EXAMPLE})"),
        ),
        (
            "queue 1 config sched 1 quantum 300".to_string(),
            (1, 24, "quantum"),
            ErrorKind::UnknownKeyword,
            format!("'quantum' is a parameter of the fq_codel sched type, not a queue keyword: write it on the sched line right after 'type fq_codel' (example: {EXAMPLE})"),
        ),
        (
            "sched 1 config fq_codel".to_string(),
            (1, 16, "fq_codel"),
            ErrorKind::UnknownKeyword,
            format!("fq_codel is a scheduler type: write 'type fq_codel' (example: {EXAMPLE})"),
        ),
    ];
    for (input, at, kind, message) in &cases {
        assert_error(&error_of(input), *at, *kind, message);
    }
    let e = error_of(&format!("{head} interval soon"));
    assert_eq!(
        (e.column, e.token.as_str(), e.kind),
        (39, "soon", ErrorKind::Syntax),
        "{e}"
    );
    assert!(e.message.contains("'soon' is not a time"), "{e}");
    let e = error_of(&format!("{head} flows -1"));
    assert_eq!((e.column, e.token.as_str()), (36, "-1"), "{e}");
    // Out of dummynet's ranges: refused where dummynet clamps, at the value.
    for (words, column, token, message) in [
        (
            "quantum 0",
            38,
            "0",
            "quantum (bytes) 0 is out of range (allowed: 1..=9000)",
        ),
        (
            "quantum 9001",
            38,
            "9001",
            "quantum (bytes) 9001 is out of range (allowed: 1..=9000)",
        ),
        (
            "limit 0",
            36,
            "0",
            "limit (packets) 0 is out of range (allowed: 1..=20480)",
        ),
        (
            "limit 20481",
            36,
            "20481",
            "limit (packets) 20481 is out of range (allowed: 1..=20480)",
        ),
        (
            "flows 0",
            36,
            "0",
            "flows 0 is out of range (allowed: 1..=65536)",
        ),
        (
            "flows 65537",
            36,
            "65537",
            "flows 65537 is out of range (allowed: 1..=65536)",
        ),
        (
            "target 0ms",
            37,
            "0ms",
            "target 0ms is out of range (allowed: 1us..=3600s)",
        ),
        (
            "interval 7200s",
            39,
            "7200s",
            "interval 7200s is out of range (allowed: 1us..=3600s)",
        ),
    ] {
        let e = error_of(&format!("{head} {words} bw 1Mbit/s"));
        assert_error(
            &e,
            (1, column, token),
            ErrorKind::OutOfRange,
            &format!("sched 1 fq_codel {message}"),
        );
    }
    // The bounds themselves are taken.
    for words in [
        "quantum 1 limit 1 flows 1 target 1us interval 1us",
        "quantum 9000 limit 20480 flows 65536 target 3600s interval 3600s",
    ] {
        plan(&format!("{head} {words}\nqueue 1 config sched 1"));
    }
    // Given twice, at the second.
    let e = error_of(&format!("{head} target 1ms target 2ms"));
    assert_eq!(
        (e.column, e.token.as_str(), e.kind),
        (41, "target", ErrorKind::Duplicate)
    );
    let e = error_of(&format!("{head} type drr"));
    assert_eq!(
        (e.column, e.token.as_str(), e.kind),
        (30, "type", ErrorKind::Duplicate)
    );
    // A parameter after another keyword.
    let e = error_of(&format!("{head} bw 10Mbit/s ecn"));
    assert_eq!((e.column, e.token.as_str()), (42, "ecn"), "{e}");
    // `target` on a pipe line outside `codel` and `type fq_codel`: both
    // places are named.
    let e = error_of("pipe 1 config target 5ms");
    assert_eq!((e.column, e.token.as_str()), (15, "target"), "{e}");
    assert!(
        e.message
            .ends_with("; for the pipe's own queue it goes right after 'codel'")
            && e.message.contains("right after 'type fq_codel'"),
        "{e}"
    );
    // An unknown type lists fq_codel among the allowed.
    let e = error_of("sched 1 config type fq_cdel");
    assert_eq!((e.column, e.token.as_str()), (21, "fq_cdel"));
    assert!(
        e.message.contains(", fq_codel, fq_pie; rr means drr"),
        "{e}"
    );
    // A model built in code with fq_codel's parameters and another type.
    let mut c = ipfw("sched 1 config type fq_codel\nqueue 1 config sched 1");
    c.scheds[0].alg = Some(AlgKind::Drr);
    let e = Config {
        sources: Default::default(),
        ..c
    }
    .validate(&NoProfiles)
    .unwrap_err();
    assert_eq!((e.line, e.column, e.token.as_str()), (0, 0, "drr"));
    assert_eq!(
        e.message,
        "sched 1 has fq_codel's parameters but the type drr: an fq_codel sched's type is fq"
    );
}

/// What a flowset sets itself stays; what it leaves at its default comes
/// from its fq_codel sched: (a) `mask all`, (b) `flows` dynamic queues at
/// most, (c) CoDel with the sched's target, interval and ECN, (d) `limit`
/// slots; the sched's scheduler is FQ with its quantum, its limit the
/// held limit of each instance.
#[test]
fn a_flowset_takes_what_it_does_not_set_from_its_fq_codel_sched() {
    let p = plan(
        "sched 1 config type fq_codel target 2ms interval 50ms noecn quantum 3000 limit 500 flows 64 bw 10Mbit/s\n\
         queue 1 config sched 1\n\
         queue 2 config sched 1 mask dst-ip 0xffffff00 queue 30 red 0.002/10/20/0.1 weight 2\n\
         queue 3 config sched 1 codel target 9ms queue 64KB\n\
         queue 4 config sched 1 gred 0.002/10/20/0.1 ecn\n\
         sched 5 config type drr\n\
         queue 6 config sched 5\n\
         pipe 7 config bw 1Mbit/s\n\
         queue 8 config pipe 7\n",
    );
    let sched = Codel {
        target_us: 2_000,
        interval_us: 50_000,
        ecn: false,
    };
    assert_eq!(p.scheds[&1].alg, AlgKind::Fq);
    // Queue 1 sets nothing: everything from the sched.
    let q1 = &p.queues[&1];
    assert_eq!(q1.mask, FlowMask::all(), "(a) one queue per 5-tuple");
    assert_eq!(q1.queue.codel, Some(sched), "(c)");
    assert_eq!(q1.queue.limit, QueueLimit::Slots(500), "(d)");
    let core = queue_config(&q1.queue);
    assert_eq!(core.limit, pspat_sched::pipe::QueueLimit::Slots(500));
    assert_eq!(
        core.codel,
        Some(pspat_sched::pipe::Codel {
            target_ns: 2_000_000,
            interval_ns: 50_000_000,
            ecn: false
        })
    );
    // Queue 2 sets its mask, size and AQM: all its own.
    let q2 = &p.queues[&2];
    assert_eq!(u32::from(q2.mask.dst_ip), 0xffff_ff00);
    assert_eq!(u32::from(q2.mask.src_ip), 0, "its own mask, not all");
    assert_eq!(q2.queue.limit, QueueLimit::Slots(30));
    assert!(q2.queue.red.is_some() && q2.queue.codel.is_none());
    assert_eq!(q2.weight, 2);
    // Queue 3's own CoDel (its defaults, not the sched's) and byte limit.
    let q3 = &p.queues[&3];
    assert_eq!(
        q3.queue.codel,
        Some(Codel {
            target_us: 9_000,
            ..Codel::default()
        })
    );
    assert_eq!(q3.queue.limit, QueueLimit::Bytes(65_536));
    assert_eq!(q3.mask, FlowMask::all());
    // Queue 4's gentle RED with its ECN: no CoDel beside it.
    let q4 = &p.queues[&4];
    assert!(q4.queue.codel.is_none() && q4.queue.ecn && q4.queue.red.is_some());
    assert_eq!(q4.queue.limit, QueueLimit::Slots(500));
    // Other scheds' and pipes' flowsets are as written.
    for n in [6, 8] {
        let q = &p.queues[&n];
        assert!(q.mask.is_empty() && q.queue.codel.is_none(), "queue {n}");
        assert_eq!(q.queue.limit, QueueLimit::DEFAULT, "queue {n}");
    }
    // (b) the cap of every flowset of the fq_codel sched, and theirs only.
    assert_eq!(
        p.flowset_queue_caps(),
        [(1, 64), (2, 64), (3, 64), (4, 64)].into()
    );
    // The held limit of the sched's pipes; none for other links.
    assert_eq!(
        sched_config(&p.scheds[&1], p.seed).unwrap().held_limit,
        Some(500)
    );
    assert_eq!(
        sched_config(&p.scheds[&5], p.seed).unwrap().held_limit,
        None
    );
    assert_eq!(pipe_config(&p.pipes[&7], p.seed).unwrap().held_limit, None);
    assert_eq!(p.scheds[&1].fq_codel.map(|f| f.quantum), Some(3000));
    // The defaults reach the flowsets as dummynet's: ECN on, 10240.
    let d = plan("sched 1 config type fq_codel\nqueue 1 config sched 1");
    assert_eq!(d.queues[&1].queue.codel, Some(FqCodel::default().codel));
    assert_eq!(d.queues[&1].queue.limit, QueueLimit::Slots(10_240));
    assert_eq!(d.flowset_queue_caps(), [(1, 1024)].into());
    // A flowset can name an fq_codel sched as `sched M` only (`pipe M`
    // names pipes), so only those flowsets are lowered.
    assert!(
        parse_ipfw("sched 1 config type fq_codel\nqueue 1 config pipe 1", "x")
            .unwrap()
            .validate(&NoProfiles)
            .is_err()
    );
}

/// A plan written before fq_codel existed (no such key) reads as none.
#[test]
fn an_older_plan_has_no_fq_codel() {
    let p = plan("sched 1 config type drr\nqueue 1 config sched 1");
    let mut json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["scheds"]["1"]["fq_codel"], serde_json::Value::Null);
    json["scheds"]["1"]
        .as_object_mut()
        .unwrap()
        .remove("fq_codel");
    let old: Plan = serde_json::from_value(json).unwrap();
    assert_eq!(old, p);
    let fq = plan("sched 1 config type fq_codel flows 8\nqueue 1 config sched 1");
    let json = serde_json::to_string(&fq).unwrap();
    assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), fq);
}

/// A live `type` is a whole setting: `type fq_codel ...` brings its
/// parameters with the defaults of those it leaves out, another type takes
/// them off, a line without `type` keeps them; the flowsets follow.
#[test]
fn a_live_type_is_a_whole_setting_and_the_flowsets_follow() {
    let running = ipfw(
        "sched 1 config type fq_codel target 2ms flows 256 noecn bw 10Mbit/s\nqueue 1 config sched 1\n",
    );
    let line = |text: &str| -> Plan {
        let ControlRequest::Configure(lines) = parse_control(text, "<ctl>").unwrap() else {
            panic!("{text} configures");
        };
        merge(&running, &lines)
            .validate(&NoProfiles)
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let before = running.validate(&NoProfiles).unwrap();
    // The brief's line: quantum 3000, the rest back at the defaults.
    let p = line("sched 1 config type fq_codel quantum 3000");
    assert_eq!(
        p.scheds[&1].fq_codel,
        Some(FqCodel {
            quantum: 3000,
            ..FqCodel::default()
        })
    );
    assert_eq!(p.scheds[&1].link.bw_bps, 10_000_000, "the link stays");
    assert_eq!(p.queues[&1].queue.codel, Some(FqCodel::default().codel));
    // The diff: the sched, and its flowset whose CoDel follows it.
    let changes = diff(&before, &p);
    assert!(
        matches!(&changes[..], [Change::ChangeSched(s), Change::ChangeQueue(q)]
            if s.number == 1 && q.number == 1),
        "{changes:?}"
    );
    // A line without a type keeps fq_codel as it runs.
    let p = line("sched 1 config bw 20Mbit/s");
    assert_eq!(p.scheds[&1].fq_codel, before.scheds[&1].fq_codel);
    assert_eq!(p.queues[&1], before.queues[&1]);
    let p = line("queue 1 config weight 3");
    assert_eq!(p.queues[&1].queue, before.queues[&1].queue);
    // Another type takes fq_codel off, and the flowset's lowering with it.
    let p = line("sched 1 config type drr");
    assert_eq!(
        (p.scheds[&1].alg, p.scheds[&1].fq_codel),
        (AlgKind::Drr, None)
    );
    let q = &p.queues[&1];
    assert!(q.mask.is_empty() && q.queue.codel.is_none());
    assert_eq!(q.queue.limit, QueueLimit::DEFAULT);
    assert!(p.flowset_queue_caps().is_empty());
    // And back: the defaults, not the parameters it had before.
    let off = merge(&running, &ipfw("sched 1 config type drr"));
    let ControlRequest::Configure(lines) =
        parse_control("sched 1 config type fq_codel", "<ctl>").unwrap()
    else {
        unreachable!()
    };
    let on = merge(&off, &lines).validate(&NoProfiles).unwrap();
    assert_eq!(on.scheds[&1].fq_codel, Some(FqCodel::default()));
    // A bad value on a live line is told at its token in the line.
    let ControlRequest::Configure(lines) =
        parse_control("sched 1 config type fq_codel flows 0", "<ctl>").unwrap()
    else {
        unreachable!()
    };
    let e = merge(&running, &lines).validate(&NoProfiles).unwrap_err();
    assert_eq!(
        (e.file.as_str(), e.column, e.token.as_str(), e.kind),
        ("<ctl>", 36, "0", ErrorKind::OutOfRange)
    );
}
