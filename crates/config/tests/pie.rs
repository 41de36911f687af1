//! dummynet's `pie` AQM and `fq_pie` sched type: read in both syntaxes with
//! dummynet's defaults, printed with every parameter, converted both ways,
//! refused at the offending token (values out of range by name, two AQMs),
//! lowered onto an fq_pie sched's flowsets, merged as a whole setting by a
//! live change.

use pspat_config::{
    merge, parse_control, parse_ipfw, parse_toml, pipe_config, print_ipfw, print_toml,
    queue_config, sched_config, ControlRequest, Error, ErrorKind, FlowMask, FqPie, NoProfiles, Pie,
    Plan, QueueLimit,
};
use pspat_sched::pipe::pie::DelayEstimator;
use pspat_sched::AlgKind;

use crate::support::{self, assert_at, ipfw, plan};

fn pie_of(text: &str) -> Pie {
    ipfw(text).pipes[0].queue.pie.expect("a pie queue")
}

fn error_of(text: &str) -> Error {
    support::error_of(text, "cfg.ipfw")
}

fn error_of_toml(text: &str) -> Error {
    support::error_of(text, "cfg.toml")
}

/// An input, the line, column and token of its error, its kind and what
/// its message says.
type ErrorCase = (
    &'static str,
    (u32, u32, &'static str),
    ErrorKind,
    &'static str,
);

#[test]
fn the_defaults_are_dummynet_s() {
    let d = Pie::default();
    assert_eq!(
        (d.target_us, d.tupdate_us, d.max_burst_us),
        (15_000, 15_000, 150_000)
    );
    assert_eq!((d.alpha, d.beta, d.max_ecnth), (0.125, 1.25, 0.1));
    // `pie`: noecn capdrop derand dre; fq_pie: ecn and ts.
    assert_eq!(
        (d.ecn, d.capdrop, d.derand, d.onoff, d.dre),
        (false, true, true, false, true)
    );
    let f = FqPie::default();
    assert_eq!((f.pie.ecn, f.pie.dre), (true, false));
    assert_eq!((f.quantum, f.limit, f.flows), (1514, 10_240, 1024));
    assert_eq!(pie_of("pipe 1 config pie"), d);
    let c = ipfw("sched 1 config type fq_pie");
    assert_eq!(c.scheds[0].alg, Some(AlgKind::Fq));
    assert_eq!(c.scheds[0].fq_pie, Some(f));
    // The core's defaults are the same numbers.
    let core = pspat_sched::pipe::Pie::default();
    assert_eq!(pspat_config::pie_config(&d), core);
    assert_eq!(
        pspat_config::pie_config(&Pie::fq_default()),
        pspat_sched::pipe::Pie::fq_default()
    );
}

#[test]
fn parameters_in_any_order_end_at_the_first_other_word() {
    let mine = Pie {
        target_us: 5_000,
        tupdate_us: 30_000,
        alpha: 0.25,
        beta: 2.5,
        max_burst_us: 0,
        max_ecnth: 0.2,
        ecn: true,
        capdrop: false,
        derand: false,
        onoff: true,
        dre: false,
    };
    for text in [
        "pipe 1 config pie target 5ms tupdate 30ms alpha 0.25 beta 2.5 max_burst 0 max_ecnth 0.2 ecn nocapdrop noderand onoff ts",
        "pipe 1 config bw 1Mbit/s pie ts onoff noderand nocapdrop ecn max_ecnth 0.2 max_burst 0ms beta 2.5 alpha 0.25 tupdate 30 target 5000us queue 100",
    ] {
        assert_eq!(pie_of(text), mine, "{text}");
    }
    // `ecn` after another keyword is RED's, not PIE's: refused without RED,
    // pointing at PIE's own word.
    let e = error_of("pipe 1 config pie target 5ms bw 1Mbit/s ecn\n");
    assert_at(
        &e,
        (1, 41, "ecn"),
        ErrorKind::MissingReference,
        "for PIE to mark, write 'ecn' among its parameters",
    );
}

#[test]
fn printed_with_every_parameter_and_converted_both_ways() {
    let cases = [
        (
            "pipe 1 config pie",
            "pipe 1 config pie target 15ms tupdate 15ms alpha 0.125 beta 1.25 max_burst 150ms max_ecnth 0.1 noecn capdrop derand noonoff dre\n",
        ),
        (
            "queue 2 config pipe 1 pie ts ecn alpha 1 onoff\npipe 1 config bw 1Mbit/s",
            "pipe 1 config bw 1Mbit/s\nqueue 2 config pipe 1 pie target 15ms tupdate 15ms alpha 1 beta 1.25 max_burst 150ms max_ecnth 0.1 ecn capdrop derand onoff ts\n",
        ),
        (
            "sched 1 config type fq_pie target 10ms flows 64 bw 10Mbit/s",
            "sched 1 config type fq_pie target 10ms tupdate 15ms alpha 0.125 beta 1.25 max_burst 150ms max_ecnth 0.1 ecn capdrop derand noonoff ts quantum 1514 limit 10240 flows 64 bw 10Mbit/s\n",
        ),
    ];
    for (input, printed) in cases {
        let c = ipfw(input);
        let text = print_ipfw(&c);
        assert!(text.contains(printed.trim_end()), "{input}\n{text}");
        // ipfw → ipfw, ipfw → TOML → ipfw: the same model.
        let again = parse_ipfw(&text, "p.ipfw").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(again.scheds, c.scheds);
        assert_eq!(again.pipes, c.pipes);
        assert_eq!(again.queues, c.queues);
        let toml = print_toml(&c);
        let from_toml = parse_toml(&toml, "p.toml").unwrap_or_else(|e| panic!("{e}\n{toml}"));
        assert_eq!(from_toml.scheds, c.scheds, "{toml}");
        assert_eq!(from_toml.pipes, c.pipes, "{toml}");
        assert_eq!(from_toml.queues, c.queues, "{toml}");
        assert_eq!(print_ipfw(&from_toml), text);
    }
    let toml = print_toml(&ipfw("pipe 1 config pie ts"));
    assert!(
        toml.contains(
            "pie = { target = \"15ms\", tupdate = \"15ms\", alpha = 0.125, beta = 1.25, max_burst = \"150ms\", max_ecnth = 0.1, ecn = false, capdrop = true, derand = true, onoff = false, estimator = \"ts\" }"
        ),
        "{toml}"
    );
}

#[test]
fn toml_takes_a_table_or_true() {
    let c = parse_toml(
        "[[pipe]]\nnumber = 1\npie = { target = \"5ms\", alpha = 0.5, ecn = true, onoff = true, estimator = \"ts\" }\n\
         [[pipe]]\nnumber = 2\npie = true\n\
         [[pipe]]\nnumber = 3\npie = false\n\
         [[sched]]\nnumber = 4\nfq_pie = { flows = 16, estimator = \"dre\", ecn = false }\ntype = \"fq_pie\"\n",
        "cfg.toml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.pipes[0].queue.pie,
        Some(Pie {
            target_us: 5_000,
            alpha: 0.5,
            ecn: true,
            onoff: true,
            dre: false,
            ..Pie::default()
        })
    );
    assert_eq!(c.pipes[1].queue.pie, Some(Pie::default()));
    assert_eq!(c.pipes[2].queue.pie, None);
    let f = c.scheds[0].fq_pie.unwrap();
    assert_eq!((f.flows, f.pie.dre, f.pie.ecn), (16, true, false));
    assert_eq!(c.scheds[0].alg, Some(AlgKind::Fq));
}

/// Every bad input at its token, in one line: values missing, not numbers
/// or out of dummynet's ranges (refused by name, never clamped), a
/// parameter twice or with its opposite, two AQMs, PIE's words elsewhere.
#[test]
fn ipfw_errors_name_the_offending_token() {
    let cases: [ErrorCase; 15] = [
        (
            "sched 1 config type fq_pie max_burst 6s",
            (1, 38, "6s"),
            ErrorKind::OutOfRange,
            "sched 1 fq_pie max_burst 6s is out of range",
        ),
        (
            "pipe 1 config pie target",
            (1, 19, "target"),
            ErrorKind::Syntax,
            "'target' needs a value",
        ),
        (
            "pipe 1 config pie alpha much",
            (1, 25, "much"),
            ErrorKind::Syntax,
            "is not a number",
        ),
        (
            "pipe 1 config pie alpha 8",
            (1, 25, "8"),
            ErrorKind::OutOfRange,
            "pipe 1 pie alpha 8 is out of range",
        ),
        (
            "pipe 1 config pie beta -1",
            (1, 24, "-1"),
            ErrorKind::OutOfRange,
            "pipe 1 pie beta -1 is out of range",
        ),
        (
            "pipe 1 config pie max_ecnth 1.5",
            (1, 29, "1.5"),
            ErrorKind::OutOfRange,
            "pipe 1 pie max_ecnth 1.5 is out of range",
        ),
        (
            "pipe 1 config pie tupdate 11s",
            (1, 27, "11s"),
            ErrorKind::OutOfRange,
            "pipe 1 pie tupdate 11s is out of range",
        ),
        (
            "pipe 1 config pie target 0",
            (1, 26, "0"),
            ErrorKind::OutOfRange,
            "pipe 1 pie target 0ms is out of range",
        ),
        (
            "pipe 1 config pie alpha 0.1 alpha 0.2",
            (1, 29, "alpha"),
            ErrorKind::Duplicate,
            "'alpha' is given twice",
        ),
        (
            "pipe 1 config pie dre ts",
            (1, 23, "ts"),
            ErrorKind::Duplicate,
            "'ts' after 'dre' (column 19): PIE takes one of dre and ts",
        ),
        (
            "pipe 1 config pie codel",
            (1, 19, "codel"),
            ErrorKind::Duplicate,
            "'codel' after 'pie' in the same statement: a queue has one AQM (red, gred, codel, pie, or droptail for none)",
        ),
        (
            "pipe 1 config codel pie",
            (1, 21, "pie"),
            ErrorKind::Duplicate,
            "'pie' after 'codel' in the same statement",
        ),
        (
            "pipe 1 config red 0.002/30/80/0.1 pie",
            (1, 35, "pie"),
            ErrorKind::Duplicate,
            "'pie' after 'red'",
        ),
        (
            "pipe 1 config bw 1Mbit/s tupdate 10ms",
            (1, 26, "tupdate"),
            ErrorKind::UnknownKeyword,
            "'tupdate' is a parameter of PIE: write it right after 'pie'",
        ),
        (
            "sched 1 config type fq_pie bw 1Mbit/s flows 8",
            (1, 39, "flows"),
            ErrorKind::UnknownKeyword,
            "the parameters of fq_pie go right after 'type fq_pie'",
        ),
    ];
    for (input, at, kind, says) in cases {
        assert_at(&error_of(input), at, kind, says);
    }
    // fq_pie's own ranges (quantum, limit, flows as fq_codel's).
    let e = error_of("sched 1 config type fq_pie quantum 0\nqueue 1 config sched 1");
    assert_at(
        &e,
        (1, 36, "0"),
        ErrorKind::OutOfRange,
        "sched 1 fq_pie quantum (bytes) 0 is out of range",
    );
    let e = error_of("sched 1 config type fq_pie beta 9");
    assert_at(
        &e,
        (1, 33, "9"),
        ErrorKind::OutOfRange,
        "sched 1 fq_pie beta 9 is out of range",
    );
    // On a pipe line, fq_pie is the word after `type`.
    let e = error_of("pipe 1 config fq_pie");
    assert_at(
        &e,
        (1, 15, "fq_pie"),
        ErrorKind::UnknownKeyword,
        "fq_pie is a scheduler type: write 'type fq_pie'",
    );
    // On a queue line, a sched's or pipe's type.
    let e = error_of("queue 1 config pipe 1 fq_pie");
    assert_at(
        &e,
        (1, 23, "fq_pie"),
        ErrorKind::UnknownKeyword,
        "fq_pie is a sched's or pipe's type, not a queue keyword",
    );
    // A model built in code with PIE and CoDel: validation refuses it.
    let mut c = ipfw("pipe 1 config pie");
    c.pipes[0].queue.codel = Some(pspat_config::Codel::default());
    let e = c.validate(&NoProfiles).unwrap_err();
    assert!(e.message.contains("has both CoDel and PIE"), "{e}");
    // And fq_pie with fq_codel.
    let mut c = ipfw("sched 1 config type fq_pie");
    c.scheds[0].fq_codel = Some(pspat_config::FqCodel::default());
    let e = c.validate(&NoProfiles).unwrap_err();
    assert!(e.message.contains("an fq_pie sched's type is fq"), "{e}");
}

#[test]
fn toml_errors_name_their_key_or_value() {
    let e = error_of_toml("[[pipe]]\nnumber = 1\npie = { estimator = \"fast\" }\n");
    assert_at(
        &e,
        (3, 22, "fast"),
        ErrorKind::Syntax,
        "PIE's 'estimator' takes \"dre\" (departure rate) or \"ts\" (timestamps)",
    );
    let e = error_of_toml("[[pipe]]\nnumber = 1\npie = { capdrop = 1 }\n");
    assert_at(
        &e,
        (3, 19, "integer"),
        ErrorKind::Syntax,
        "PIE's 'capdrop' takes true or false",
    );
    let e = error_of_toml("[[pipe]]\nnumber = 1\npie = { gamma = 1 }\n");
    assert_at(
        &e,
        (3, 9, "gamma"),
        ErrorKind::UnknownKeyword,
        "unknown pie key 'gamma'",
    );
    let e = error_of_toml("[[pipe]]\nnumber = 1\npie = { alpha = 7.5 }\n");
    assert_at(
        &e,
        (3, 17, "7.5"),
        ErrorKind::OutOfRange,
        "pipe 1 pie alpha 7.5 is out of range",
    );
    let e = error_of_toml("[[pipe]]\nnumber = 1\npie = 3\n");
    assert_at(
        &e,
        (3, 7, "integer"),
        ErrorKind::Syntax,
        "'pie' takes a table or true",
    );
    let e = error_of_toml("[[pipe]]\nnumber = 1\ncodel = true\npie = true\n");
    assert_at(
        &e,
        (4, 1, "pie"),
        ErrorKind::Duplicate,
        "'pie' after 'codel'",
    );
    let e = error_of_toml("[[sched]]\nnumber = 1\nfq_pie = { flows = 8 }\n");
    assert_at(
        &e,
        (3, 1, "fq_pie"),
        ErrorKind::MissingReference,
        "an 'fq_pie' table needs type = \"fq_pie\" on the same sched",
    );
    let e = error_of_toml("[[sched]]\nnumber = 1\ntype = \"fq_pie\"\ntupdate = \"30ms\"\n");
    assert_at(
        &e,
        (4, 1, "tupdate"),
        ErrorKind::UnknownKeyword,
        "in TOML it goes in the sched's fq_pie table",
    );
}

#[test]
fn an_fq_pie_sched_lowers_onto_its_flowsets() {
    let p = plan(
        "sched 1 config type fq_pie target 10ms limit 2000 flows 64 bw 10Mbit/s\n\
         queue 2 config sched 1\n\
         queue 3 config sched 1 pie alpha 0.5 queue 50 mask dst-ip 0xffffff00\n\
         queue 4 config sched 1 codel\n",
    );
    let s = &p.scheds[&1];
    assert_eq!(s.alg, AlgKind::Fq);
    // A flowset that sets nothing: mask all, the sched's PIE, limit slots.
    let q2 = &p.queues[&2];
    assert_eq!(q2.mask, FlowMask::all());
    assert_eq!(
        q2.queue.pie,
        Some(Pie {
            target_us: 10_000,
            ..Pie::fq_default()
        })
    );
    assert_eq!(q2.queue.limit, QueueLimit::Slots(2000));
    // One that sets its own keeps them.
    let q3 = &p.queues[&3];
    assert_eq!(
        q3.queue.pie,
        Some(Pie {
            alpha: 0.5,
            ..Pie::default()
        })
    );
    assert_eq!(q3.queue.limit, QueueLimit::Slots(50));
    assert_ne!(q3.mask, FlowMask::all());
    // Its own AQM, CoDel: no PIE added.
    assert_eq!(p.queues[&4].queue.pie, None);
    assert!(p.queues[&4].queue.codel.is_some());
    // Each flowset capped at flows; the sched's limit is its pipes' held
    // limit; the queue configuration carries PIE in ns.
    assert_eq!(p.flowset_queue_caps(), [(2, 64), (3, 64), (4, 64)].into());
    assert_eq!(sched_config(s, p.seed).unwrap().held_limit, Some(2000));
    let core = queue_config(&q2.queue).pie.unwrap();
    assert_eq!(
        (core.target_ns, core.estimator, core.ecn),
        (10_000_000, DelayEstimator::Timestamp, true)
    );
    // A pipe's `pie`, dre by default.
    let p = plan("pipe 5 config bw 1Mbit/s pie");
    let c = pipe_config(&p.pipes[&5], p.seed).unwrap();
    assert_eq!(
        c.queue.pie.map(|x| x.estimator),
        Some(DelayEstimator::DepartureRate)
    );
}

#[test]
fn a_live_pie_line_is_a_whole_setting_and_replaces_the_other_aqm() {
    let running = ipfw("pipe 1 config bw 1Mbit/s codel\npipe 2 config pie alpha 0.5 onoff\n");
    let lines = |text: &str| match parse_control(text, "<ctl>").unwrap() {
        ControlRequest::Configure(c) => c,
        other => panic!("{other:?}"),
    };
    let m = merge(
        &running,
        &lines("pipe 1 config pie ts\npipe 2 config pie beta 2\n"),
    );
    // PIE replaces CoDel.
    assert_eq!(m.pipes[0].queue.codel, None);
    assert_eq!(
        m.pipes[0].queue.pie,
        Some(Pie {
            dre: false,
            ..Pie::default()
        })
    );
    // A new `pie` line: what it leaves out is at its default again.
    assert_eq!(
        m.pipes[1].queue.pie,
        Some(Pie {
            beta: 2.0,
            ..Pie::default()
        })
    );
    // droptail and codel take it off.
    let m = merge(&running, &lines("pipe 2 config droptail\n"));
    assert_eq!(m.pipes[1].queue.pie, None);
    let m = merge(&running, &lines("pipe 2 config codel\n"));
    assert_eq!(m.pipes[1].queue.pie, None);
    assert!(m.pipes[1].queue.codel.is_some());
    // A sched's type is a whole setting: fq_pie in, then out.
    let running = ipfw("sched 1 config type fq_codel flows 8\n");
    let m = merge(&running, &lines("sched 1 config type fq_pie\n"));
    assert_eq!(
        (m.scheds[0].fq_codel, m.scheds[0].fq_pie),
        (None, Some(FqPie::default()))
    );
    let m = merge(&m, &lines("sched 1 config type drr\n"));
    assert_eq!(
        (m.scheds[0].fq_pie, m.scheds[0].alg),
        (None, Some(AlgKind::Drr))
    );
}

/// Old plan JSON (before PIE) still loads: the new fields default.
#[test]
fn old_plan_json_has_no_pie() {
    let p = plan("sched 1 config type fq_codel\nqueue 2 config sched 1\npipe 3 config pie");
    let mut json: serde_json::Value = serde_json::to_value(&p).unwrap();
    json["scheds"]["1"]
        .as_object_mut()
        .unwrap()
        .remove("fq_pie");
    json["pipes"]["3"]["queue"]
        .as_object_mut()
        .unwrap()
        .remove("pie");
    let back: Plan = serde_json::from_value(json).unwrap();
    assert_eq!(back.scheds[&1], p.scheds[&1]);
    assert_eq!(back.pipes[&3].queue.pie, None);
}
