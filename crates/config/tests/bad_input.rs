use std::io;

use pspat_config::{
    parse_ipfw, parse_toml, print_ipfw, print_toml, AddrList, AddrListError, AddrMatch, Error,
    ErrorKind, NoProfiles, Prefix, ProfileLoader, MAX_ADDR_LIST_LEN,
};

/// Parses and validates; returns the one error.
fn error_of(text: &str, loader: &dyn ProfileLoader) -> Error {
    let file = "cfg.ipfw";
    match parse_ipfw(text, file) {
        Err(e) => e,
        Ok(cfg) => cfg.validate(loader).expect_err("the input is invalid"),
    }
}

fn error_of_toml(text: &str) -> Error {
    match parse_toml(text, "cfg.toml") {
        Err(e) => e,
        Ok(cfg) => cfg.validate(&NoProfiles).expect_err("the input is invalid"),
    }
}

fn assert_at(e: &Error, file: &str, line: u32, column: u32, token: &str, kind: ErrorKind) {
    assert_eq!(
        (e.file.as_str(), e.line, e.column, e.token.as_str(), e.kind),
        (file, line, column, token, kind),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with(&format!("{file}:{line}:{column}: ")),
        "{e}"
    );
}

#[test]
fn queue_attached_to_a_missing_sched() {
    let e = error_of(
        "sched 1 config type drr bw 10Mbit/s\nqueue 1 config weight 10 sched 9\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 32, "9", ErrorKind::MissingReference);
    assert!(
        e.message.contains("sched 9") && e.message.contains("defined: 1"),
        "{e}"
    );
    let e = error_of("queue 1 config weight 10\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 7, "1", ErrorKind::MissingReference);
}

#[test]
fn duplicate_numbers() {
    let e = error_of(
        "pipe 1 config bw 1Mbit/s\npipe 1 config bw 2Mbit/s\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 6, "1", ErrorKind::Duplicate);
    assert!(e.message.contains("pipe 1 is defined twice"), "{e}");
    let e = error_of(
        "sched 2 config type drr\n# a comment\npipe 2 config bw 1Mbit/s\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 3, 6, "2", ErrorKind::Duplicate);
    assert!(e.message.contains("share numbers"), "{e}");
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any\nadd 100 deny ip from any to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 3, 5, "100", ErrorKind::Duplicate);
    let e = error_of(
        "table 1 add 10.0.0.0/8 1\ntable 1 add 10.0.0.0/8 2\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 13, "10.0.0.0/8", ErrorKind::Duplicate);
    let e = error_of("pipe 1 config bw 1Mbit/s bw 2Mbit/s\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 26, "bw", ErrorKind::Duplicate);
}

#[test]
fn unknown_mask_field() {
    let e = error_of(
        "pipe 1 config bw 1Mbit/s\nqueue 3 config sched 1 mask src-mac 0xff\n",
        &NoProfiles,
    );
    assert_at(
        &e,
        "cfg.ipfw",
        2,
        29,
        "src-mac",
        ErrorKind::UnknownMaskField,
    );
    assert!(
        e.to_string()
            .starts_with("cfg.ipfw:2:29: unknown mask field 'src-mac' (allowed: src-ip, dst-ip"),
        "{e}"
    );
    let e = error_of("sched 1 config mask src-ip 0xff bogus 1\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 33, "bogus", ErrorKind::UnknownMaskField);
    assert!(e.message.contains("or a sched keyword: type, bw"), "{e}");
    let e = error_of_toml("[[sched]]\nnumber = 1\nmask = { src-mac = \"0xff\" }\n");
    assert_at(
        &e,
        "cfg.toml",
        3,
        10,
        "src-mac",
        ErrorKind::UnknownMaskField,
    );
}

#[test]
fn values_out_of_range() {
    let e = error_of(
        "pipe 1 config\nqueue 1 config weight 70000 sched 1\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 23, "70000", ErrorKind::OutOfRange);
    assert!(e.message.contains("1..=65536"), "{e}");
    let e = error_of(
        "pipe 1 config\nqueue 1 config weight 0 sched 1\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 23, "0", ErrorKind::OutOfRange);
    // One line each: the keywords after `pipe 1 config `, where the error
    // is (column, token), its kind and a piece of its message.
    use ErrorKind::{Duplicate, OutOfRange, Syntax};
    for (words, column, token, kind, says) in [
        ("plr 1.5", 19, "1.5", OutOfRange, ""),
        ("gemodel 0.1 0.2 2 0", 31, "2", OutOfRange, ""),
        // A time out of range, told in the units of times.
        (
            "delay 100s",
            21,
            "100s",
            OutOfRange,
            "pipe 1 delay 100s is out of range (allowed: 0ms..=60s)",
        ),
        // A percentage over 100, at its token; a bare '%', as no probability.
        ("plr 150%", 19, "150%", OutOfRange, "plr 1.5"),
        (
            "duplicate %",
            25,
            "%",
            Syntax,
            "not a probability (example: 0.01 or 1%)",
        ),
        // lossstate: a value out of 0..=1 (p13, and a later one), each at
        // its token.
        ("lossstate 1.5", 25, "1.5", OutOfRange, "lossstate p13"),
        (
            "lossstate 0.1 0.2 -0.1",
            33,
            "-0.1",
            OutOfRange,
            "lossstate p32",
        ),
        ("lossstate 0.1 0.2 0 1.25", 35, "1.25", OutOfRange, ""),
        // p13 + p14 above 1: at p14; p31 + p32 above 1: at p32.
        (
            "lossstate 0.6 0.3 0 1 0.5",
            37,
            "0.5",
            OutOfRange,
            "p13 + p14",
        ),
        ("lossstate 0.1 0.7 0.4", 33, "0.4", OutOfRange, "p31 + p32"),
        // lossstate and gemodel on one queue: at the second of the two.
        (
            "gemodel 0.1 0.2 1 0 lossstate 0.01",
            35,
            "lossstate",
            Duplicate,
            "both gemodel and lossstate",
        ),
        // Given twice.
        (
            "lossstate 0.1 lossstate 0.2",
            29,
            "lossstate",
            Duplicate,
            "",
        ),
    ] {
        let e = error_of(&format!("pipe 1 config {words}\n"), &NoProfiles);
        assert_at(&e, "cfg.ipfw", 1, column, token, kind);
        assert!(e.message.contains(says), "{words}: {e}");
    }
    let e = error_of(
        "pipe 1 config bw 1Mbit/s\nqueue 2 config pipe 1 lossstate 0.01 gemodel 0.1 0.2 1 0\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 38, "gemodel", ErrorKind::Duplicate);
    // TOML: p31 defaults to 1 - p13 = 0.9, so p32 = 0.2 is too much.
    let e = error_of_toml("[[pipe]]\nnumber = 1\nlossstate = { p13 = 0.1, p32 = 0.2 }\n");
    assert_at(&e, "cfg.toml", 3, 32, "0.2", ErrorKind::OutOfRange);
    assert!(e.message.contains("p31 + p32"), "{e}");
    let e = error_of_toml("[[pipe]]\nnumber = 1\nlossstate = { p13 = 0.1, p41 = 0.2 }\n");
    assert_at(&e, "cfg.toml", 3, 26, "p41", ErrorKind::UnknownKeyword);
    assert!(
        e.message.contains("allowed: p13, p31, p32, p23, p14"),
        "{e}"
    );
    let e = error_of_toml("[[pipe]]\nnumber = 1\nlossstate = { p31 = 0.2 }\n");
    assert_at(&e, "cfg.toml", 3, 1, "lossstate", ErrorKind::Syntax);
    let e = error_of("pipe 1 config red 0.002/80/30/0.1\n", &NoProfiles);
    assert_at(
        &e,
        "cfg.ipfw",
        1,
        19,
        "0.002/80/30/0.1",
        ErrorKind::OutOfRange,
    );
    let e = error_of("pipe 1 config delay 10ms jitter 20ms\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 33, "20ms", ErrorKind::OutOfRange);
    let e = error_of(
        "pipe 1 config\nqueue 1 config pri 64 sched 1\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 20, "64", ErrorKind::OutOfRange);
    let e =
        error_of_toml("[[pipe]]\nnumber = 1\n\n[[queue]]\nnumber = 2\npipe = 1\nweight = 100000\n");
    assert_at(&e, "cfg.toml", 7, 10, "100000", ErrorKind::OutOfRange);
    let e = error_of_toml("[[pipe]]\nnumber = 1\nplr = -0.5\n");
    assert_at(&e, "cfg.toml", 3, 7, "-0.5", ErrorKind::OutOfRange);
    let e = error_of(
        "pipe 1 config\nqueue 2 config pipe 1 corrupt 2\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 31, "2", ErrorKind::OutOfRange);
    assert!(e.message.contains("0..=1"), "{e}");
    let e = error_of_toml("[[pipe]]\nnumber = 1\ncorrupt = 1.01\n");
    assert_at(&e, "cfg.toml", 3, 11, "1.01", ErrorKind::OutOfRange);
    let e = error_of("pipe 1 config packetoverhead -2000\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 30, "-2000", ErrorKind::OutOfRange);
    assert!(e.message.contains("-1024..=1024"), "{e}");
    let e = error_of("sched 1 config cellsize 70000\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 25, "70000", ErrorKind::OutOfRange);
    let e = error_of("sched 1 config cellsize 0 celloverhead 5\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 40, "5", ErrorKind::MissingReference);
    let e = error_of("pipe 1 config cellsize 53 celloverhead 2000\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 40, "2000", ErrorKind::OutOfRange);
    let e = error_of_toml("[[pipe]]\nnumber = 1\npacketoverhead = 5000\n");
    assert_at(&e, "cfg.toml", 3, 18, "5000", ErrorKind::OutOfRange);
}

#[test]
fn a_cell_overhead_without_cells_is_named_in_both_syntaxes() {
    let e = error_of("pipe 1 config bw 1Mbit/s celloverhead 5\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 39, "5", ErrorKind::MissingReference);
    assert!(e.message.contains("cellsize"), "{e}");
    let e = error_of_toml("[[pipe]]\nnumber = 1\ncelloverhead = 5\n");
    assert_at(&e, "cfg.toml", 3, 16, "5", ErrorKind::MissingReference);
    let e = error_of("pipe 1 config packetoverhead 1.5\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 30, "1.5", ErrorKind::Syntax);
}

/// The rates `pspat run` would refuse when building the pipe are refused by
/// validation already, at the `bw` value, for pipes and scheds alike.
#[test]
fn link_rates_outside_the_core_range() {
    let ok = |text: &str| {
        parse_ipfw(text, "cfg.ipfw")
            .and_then(|c| c.validate(&NoProfiles))
            .unwrap_or_else(|e| panic!("{text}: {e}"))
    };
    // The edges of pspat-sched's range, and 0 (unlimited), are accepted.
    assert_eq!(
        ok("pipe 1 config bw 1Kbit/s\n").pipes[&1].link.bw_bps,
        1_000
    );
    assert_eq!(
        ok("pipe 1 config bw 1Tbit/s\n").pipes[&1].link.bw_bps,
        1_000_000_000_000
    );
    assert_eq!(ok("pipe 1 config bw 0\n").pipes[&1].link.bw_bps, 0);
    assert_eq!(ok("pipe 1 config\n").pipes[&1].link.bw_bps, 0);
    assert_eq!(
        ok("sched 2 config type drr bw 1000bit/s\n").scheds[&2]
            .link
            .bw_bps,
        1_000
    );

    // One bit/s outside either edge is refused.
    let e = error_of("pipe 1 config bw 999bit/s\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 18, "999bit/s", ErrorKind::OutOfRange);
    assert_eq!(
        e.to_string(),
        "cfg.ipfw:1:18: pipe 1 bw (bit/s) 999 is out of range \
         (allowed: 1000..=1000000000000 bit/s, or 0 for unlimited)"
    );
    let e = error_of("pipe 1 config bw 1000000000001bit/s\n", &NoProfiles);
    assert_at(
        &e,
        "cfg.ipfw",
        1,
        18,
        "1000000000001bit/s",
        ErrorKind::OutOfRange,
    );
    // The inputs of the bad-input sweep.
    let e = error_of("pipe 1 config bw 0.5Kbit/s\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 18, "0.5Kbit/s", ErrorKind::OutOfRange);
    let e = error_of("pipe 1 config delay 5ms bw 1bit/s\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 28, "1bit/s", ErrorKind::OutOfRange);
    let e = error_of("pipe 1 config bw 1000000Gbit/s\n", &NoProfiles);
    assert_at(
        &e,
        "cfg.ipfw",
        1,
        18,
        "1000000Gbit/s",
        ErrorKind::OutOfRange,
    );
    assert!(
        e.message.contains("1000000000000000 is out of range"),
        "{e}"
    );
    // A sched's link is the same link.
    let e = error_of(
        "pipe 1 config\nsched 2 config type drr bw 999\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 28, "999", ErrorKind::OutOfRange);
    assert!(e.message.starts_with("sched 2 bw (bit/s) 999 "), "{e}");
    // TOML, bare number and string.
    let e = error_of_toml("[[pipe]]\nnumber = 1\nbw = 5\n");
    assert_at(&e, "cfg.toml", 3, 6, "5", ErrorKind::OutOfRange);
    let e = error_of_toml("[[sched]]\nnumber = 3\nbw = \"100000000Gbit/s\"\n");
    assert_eq!((e.line, e.kind), (3, ErrorKind::OutOfRange), "{e}");
    assert_eq!(e.token, "100000000Gbit/s", "{e}");

    // A model built in code has no position: the value stands in for it.
    let mut cfg = pspat_config::Config::default();
    cfg.pipes.push(pspat_config::Pipe {
        number: 4,
        alg: None,
        fq_codel: None,
        fq_pie: None,
        link: pspat_config::LinkParams {
            bw: Some(5),
            ..Default::default()
        },
        queue: Default::default(),
        mask: Default::default(),
    });
    let e = cfg.validate(&NoProfiles).unwrap_err();
    assert_eq!(
        (e.line, e.column, e.token.as_str(), e.kind),
        (0, 0, "5", ErrorKind::OutOfRange)
    );
}

struct Files(&'static [(&'static str, &'static str)]);

impl ProfileLoader for Files {
    fn load(&self, name: &str) -> io::Result<String> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, text)| text.to_string())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "No such file or directory"))
    }
}

#[test]
fn profile_missing_or_malformed() {
    let files = Files(&[
        ("good.prof", "name good\nsamples 10\nprob delay\n0 1\n1 5\n"),
        ("bad.prof", "name bad\nloss-level 2\nprob delay\n0 1\n1 5\n"),
    ]);
    let cfg = parse_ipfw("pipe 1 config bw 1Mbit/s profile good.prof\n", "cfg.ipfw").unwrap();
    let plan = cfg.validate(&files).unwrap();
    let loaded = plan.pipes[&1].link.profile.as_ref().unwrap();
    assert_eq!(loaded.profile.name.as_deref(), Some("good"));
    assert_eq!(loaded.delay_table_us.len(), 10);

    let e = error_of("pipe 1 config bw 1Mbit/s profile nosuch.prof\n", &files);
    assert_at(
        &e,
        "cfg.ipfw",
        1,
        34,
        "nosuch.prof",
        ErrorKind::ProfileUnreadable,
    );
    assert!(e.message.contains("No such file"), "{e}");
    let e = error_of("pipe 1 config bw 1Mbit/s profile bad.prof\n", &files);
    assert_at(&e, "bad.prof", 2, 12, "2", ErrorKind::ProfileMalformed);
    // A profile delay above a pipe's 60 s cap is refused in the profile file.
    let files = Files(&[
        ("edge.prof", "prob delay\n0 1\n1 60000\n"),
        ("long.prof", "prob delay\n0 1\n1 60001\n"),
    ]);
    let cfg = parse_ipfw("pipe 1 config profile edge.prof\n", "cfg.ipfw").unwrap();
    let plan = cfg.validate(&files).unwrap();
    let loaded = plan.pipes[&1].link.profile.as_ref().unwrap();
    assert_eq!(loaded.delay_table_us.last(), Some(&60_000_000));
    let e = error_of("pipe 1 config profile long.prof\n", &files);
    assert_at(&e, "long.prof", 3, 3, "60001", ErrorKind::ProfileMalformed);
}

#[test]
fn rules_pointing_to_missing_objects() {
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 7 ip from any to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 14, "7", ErrorKind::MissingReference);
    let e = error_of(
        "pipe 1 config\nadd 100 queue 3 ip from any to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 15, "3", ErrorKind::MissingReference);
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from table(4) to any\n",
        &NoProfiles,
    );
    assert_at(
        &e,
        "cfg.ipfw",
        2,
        24,
        "table(4)",
        ErrorKind::MissingReference,
    );
    let e = error_of(
        "pipe 1 config\nqueue 1 config sched 1\ntable 1 add 1.2.3.0/24 20\nadd queue tablearg out src-ip table(1)\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 3, 24, "20", ErrorKind::MissingReference);
    let e = error_of_toml("[[pipe]]\nnumber = 1\n\n[[rule]]\nnumber = 5\naction = \"pipe 2\"\n");
    assert_at(&e, "cfg.toml", 6, 16, "2", ErrorKind::MissingReference);
}

#[test]
fn syntax_errors_name_the_token() {
    let e = error_of("pipe 1 config bw fast\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 18, "fast", ErrorKind::Syntax);
    let e = error_of("pipe 1 config colour blue\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 15, "colour", ErrorKind::UnknownKeyword);
    let e = error_of("sched 1 config type nope\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 21, "nope", ErrorKind::UnknownKeyword);
    let e = error_of("pipe 1 config bw\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 15, "bw", ErrorKind::Syntax);
    let e = error_of("add 100 pipe 1 ip from 10.0.0.0/33 to any\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 24, "10.0.0.0/33", ErrorKind::OutOfRange);
    let e = error_of("pipe x config\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 6, "x", ErrorKind::Syntax);
    let e = error_of_toml("[[pipe]]\nnumber = 1\nbw = \"10Mbit/s\n");
    assert_eq!((e.line, e.kind), (3, ErrorKind::Syntax), "{e}");
    let e = error_of_toml("[[pipe]]\nnumber = 1\ncolour = \"blue\"\n");
    assert_at(&e, "cfg.toml", 3, 1, "colour", ErrorKind::UnknownKeyword);
    let e = error_of_toml("[[pipe]]\nbw = \"1Mbit/s\"\n");
    assert_eq!((e.line, e.kind), (1, ErrorKind::Syntax), "{e}");
}

#[test]
fn the_first_error_in_the_file_wins_and_nothing_is_half_applied() {
    let text =
        "pipe 1 config\nqueue 1 config weight 0 sched 1\nadd 100 pipe 9 ip from any to any\n";
    let cfg = parse_ipfw(text, "cfg.ipfw").unwrap();
    let e = cfg.validate(&NoProfiles).unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    let all = cfg.validate_every(&NoProfiles).unwrap_err();
    assert_eq!(all.iter().map(|e| e.line).collect::<Vec<_>>(), vec![2, 3]);
}

#[test]
fn a_model_built_in_code_reports_errors_without_a_position() {
    let mut cfg = pspat_config::Config::default();
    cfg.queues.push(pspat_config::Queue {
        number: 1,
        parent: Some(pspat_config::Parent::Sched(3)),
        weight: None,
        lmax: None,
        pri: None,
        params: Default::default(),
        mask: Default::default(),
    });
    let e = cfg.validate(&NoProfiles).unwrap_err();
    assert_eq!(
        (e.line, e.column, e.token.as_str(), e.kind),
        (0, 0, "3", ErrorKind::MissingReference)
    );
}

#[test]
fn a_toml_key_with_a_newline_is_quoted_on_one_line() {
    let e = error_of_toml("\"a\\nb\" = 1\n");
    assert_eq!(e.kind, ErrorKind::UnknownKeyword, "{e}");
    assert!(!e.to_string().contains('\n'), "{e:?}");
    assert!(e.message.contains("'a\\nb'"), "{e}");
}

#[test]
fn not_before_an_address_reads_and_prints_in_both_syntaxes_and_not_any_is_refused() {
    let text = "pipe 1 config\ntable 2 add 10.1.0.0/16 1\n\
                add 100 pipe 1 udp from not 10.0.0.0/8 to not table(2) dst-port 53\n\
                add 200 pipe 1 ip from not me to any\n";
    let cfg = parse_ipfw(text, "cfg.ipfw").unwrap();
    cfg.clone().validate(&NoProfiles).unwrap();
    let printed = pspat_config::print_ipfw(&cfg);
    assert!(
        printed.contains("add 100 pipe 1 udp from not 10.0.0.0/8 to not table(2) dst-port 53"),
        "{printed}"
    );
    assert!(
        printed.contains("add 200 pipe 1 ip from not me to any"),
        "{printed}"
    );
    let toml = pspat_config::print_toml(&cfg);
    assert!(toml.contains("from = \"not 10.0.0.0/8\""), "{toml}");
    assert_eq!(parse_toml(&toml, "cfg.toml").unwrap(), cfg);
    // `not any` would match nothing; `not` needs an address after it.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from not any to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 28, "any", ErrorKind::Syntax);
    assert!(e.to_string().contains("matches nothing"), "{e}");
    let e = error_of("pipe 1 config\nadd 100 pipe 1 ip from not\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 2, 24, "not", ErrorKind::Syntax);
    let e =
        error_of_toml("[[pipe]]\nnumber = 1\n[[rule]]\naction = \"pipe 1\"\nfrom = \"not  \"\n");
    assert_eq!(e.kind, ErrorKind::Syntax, "{e}");
}

#[test]
fn address_lists_read_and_print_in_both_syntaxes() {
    let text = "pipe 1 config\n\
                add 100 pipe 1 ip from 10.0.0.1,10.0.0.0/24,2001:db8::/32 to any\n\
                add 200 pipe 1 udp from any to not 10.0.0.0/8,192.168.0.0/16 dst-port 53\n";
    let cfg = parse_ipfw(text, "cfg.ipfw").unwrap();
    let plan = cfg.clone().validate(&NoProfiles).unwrap();
    let AddrMatch::List(src) = &plan.rules[&100].src else {
        panic!("{:?}", plan.rules[&100].src)
    };
    let written: Vec<String> = src.prefixes().iter().map(|p| p.to_string()).collect();
    assert_eq!(written, ["10.0.0.1", "10.0.0.0/24", "2001:db8::/32"]);
    assert!(
        matches!(&plan.rules[&200].dst, AddrMatch::NotList(l) if l.prefixes().len() == 2),
        "{:?}",
        plan.rules[&200].dst
    );
    let printed = pspat_config::print_ipfw(&cfg);
    assert!(
        printed.contains("add 100 pipe 1 ip from 10.0.0.1,10.0.0.0/24,2001:db8::/32 to any\n"),
        "{printed}"
    );
    assert!(
        printed
            .contains("add 200 pipe 1 udp from any to not 10.0.0.0/8,192.168.0.0/16 dst-port 53\n"),
        "{printed}"
    );
    let toml = pspat_config::print_toml(&cfg);
    assert!(
        toml.contains("from = \"10.0.0.1,10.0.0.0/24,2001:db8::/32\""),
        "{toml}"
    );
    assert!(
        toml.contains("to = \"not 10.0.0.0/8,192.168.0.0/16\""),
        "{toml}"
    );
    assert_eq!(parse_toml(&toml, "cfg.toml").unwrap(), cfg);
    assert_eq!(parse_ipfw(&printed, "cfg.ipfw").unwrap(), cfg);
    // The plan's JSON: a list is its entries as written, and reads back
    // only with 2 to MAX_ADDR_LIST_LEN of them.
    let json = serde_json::to_value(&plan.rules[&200].dst).unwrap();
    assert_eq!(
        json,
        serde_json::json!({ "not_list": ["10.0.0.0/8", "192.168.0.0/16"] })
    );
    let back: AddrMatch = serde_json::from_value(json).unwrap();
    assert_eq!(back, plan.rules[&200].dst);
    let one = serde_json::json!({ "list": ["10.0.0.0/8"] });
    let err = serde_json::from_value::<AddrMatch>(one).unwrap_err();
    assert!(err.to_string().contains("at least 2 entries"), "{err}");
}

#[test]
fn an_address_list_of_one_prefix_is_that_prefix() {
    let p: Prefix = "10.0.0.0/8".parse().unwrap();
    assert_eq!(AddrMatch::any_of(vec![p]), Ok(AddrMatch::Prefix(p)));
    assert_eq!(
        AddrMatch::any_of(Vec::new()),
        Err(AddrListError::TooShort(0))
    );
    assert_eq!(
        AddrList::new(vec![p]).unwrap_err(),
        AddrListError::TooShort(1)
    );
    assert_eq!(
        AddrList::new(vec![p; MAX_ADDR_LIST_LEN + 1]).unwrap_err(),
        AddrListError::TooLong(MAX_ADDR_LIST_LEN + 1)
    );
}

#[test]
fn a_bad_address_list_entry_is_named_at_its_column() {
    // "add 100 pipe 1 ip from " is 23 characters: the list starts at 24.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from 10.0.0.1,any to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 33, "any", ErrorKind::Syntax);
    assert!(e.message.contains("cannot be in an address list"), "{e}");
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from not 10.0.0.1,me to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 37, "me", ErrorKind::Syntax);
    let e = error_of(
        "pipe 1 config\ntable 1 add 10.0.0.0/8 1\nadd 100 pipe 1 ip from any to 10.0.0.1,table(1)\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 3, 40, "table(1)", ErrorKind::Syntax);
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from 10.0.0.1,10.0.0.0/33 to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 33, "10.0.0.0/33", ErrorKind::OutOfRange);
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from 10.0.0.1,10.0.0.256 to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 33, "10.0.0.256", ErrorKind::Syntax);
    // Entries are counted in characters, as columns are.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from 10.0.0.1,é to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 33, "é", ErrorKind::Syntax);
}

#[test]
fn an_empty_address_list_entry_names_the_list() {
    for (list, entry) in [("1.2.3.4,,5.6.7.8", 2), ("10.0.0.1,", 2), (",10.0.0.1", 1)] {
        let e = error_of(
            &format!("pipe 1 config\nadd 100 pipe 1 ip from {list} to any\n"),
            &NoProfiles,
        );
        assert_at(&e, "cfg.ipfw", 2, 24, list, ErrorKind::Syntax);
        assert!(
            e.message
                .contains(&format!("entry {entry} of the address list is empty")),
            "{e}"
        );
    }
}

#[test]
fn an_address_list_beyond_its_cap_names_the_first_entry_too_many() {
    let entry = |i: usize| format!("10.{}.{}.0/24", i / 256, i % 256);
    let list = |n: usize| (0..n).map(entry).collect::<Vec<_>>().join(",");
    let text = |n: usize| format!("pipe 1 config\nadd 100 pipe 1 ip from {} to any\n", list(n));
    let cfg = parse_ipfw(&text(MAX_ADDR_LIST_LEN), "cfg.ipfw").unwrap();
    assert_eq!(cfg.rules[0].src.prefixes().len(), MAX_ADDR_LIST_LEN);
    let e = error_of(&text(MAX_ADDR_LIST_LEN + 1), &NoProfiles);
    let column = 24 + list(MAX_ADDR_LIST_LEN).chars().count() + 1;
    assert_at(
        &e,
        "cfg.ipfw",
        2,
        u32::try_from(column).unwrap(),
        &entry(MAX_ADDR_LIST_LEN),
        ErrorKind::OutOfRange,
    );
    assert!(e.message.contains("at most 256 entries"), "{e}");
    assert!(e.message.contains("table"), "{e}");
}

#[test]
fn address_list_errors_in_toml_name_the_entry_at_its_column() {
    // `from = "` is 8 characters: the list starts at column 9.
    let e = error_of_toml(
        "[[pipe]]\nnumber = 1\n[[rule]]\naction = \"pipe 1\"\nfrom = \"10.0.0.1,any\"\n",
    );
    assert_at(&e, "cfg.toml", 5, 18, "any", ErrorKind::Syntax);
    let e = error_of_toml(
        "[[pipe]]\nnumber = 1\n[[rule]]\naction = \"pipe 1\"\nto = \"not 10.0.0.1,,10.0.0.2\"\n",
    );
    assert_at(
        &e,
        "cfg.toml",
        5,
        11,
        "10.0.0.1,,10.0.0.2",
        ErrorKind::Syntax,
    );
    let cfg = parse_toml(
        "[[pipe]]\nnumber = 1\n[[rule]]\naction = \"pipe 1\"\nfrom = \"10.0.0.1,10.0.0.0/24\"\nto = \"not 10.0.0.0/8,192.168.0.0/16\"\n",
        "cfg.toml",
    )
    .unwrap();
    assert_eq!(
        pspat_config::rule_line(&cfg.rules[0]),
        "add pipe 1 ip from 10.0.0.1,10.0.0.0/24 to not 10.0.0.0/8,192.168.0.0/16"
    );
}

#[test]
fn an_address_list_entry_of_the_other_family_is_refused_under_ip4_or_ip6() {
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip4 from 10.0.0.1,2001:db8::/32 to any\n",
        &NoProfiles,
    );
    assert_at(
        &e,
        "cfg.ipfw",
        2,
        25,
        "10.0.0.1,2001:db8::/32",
        ErrorKind::OutOfRange,
    );
    assert!(
        e.message
            .contains("matches ip4 but 2001:db8::/32 is of the other address family"),
        "{e}"
    );
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip6 from any to not 2001:db8::/32,10.0.0.0/8\n",
        &NoProfiles,
    );
    assert!(e.message.contains("10.0.0.0/8 is of the other"), "{e}");
}

#[test]
fn a_tablearg_rule_with_only_address_lists_is_refused() {
    let e = error_of(
        "pipe 1 config\nadd 100 pipe tablearg ip from 10.0.0.1,10.0.0.2 to not 10.1.0.0/16,10.2.0.0/16\n",
        &NoProfiles,
    );
    assert_eq!(e.kind, ErrorKind::MissingReference, "{e}");
    assert!(
        e.message.contains("uses tablearg but matches no table"),
        "{e}"
    );
    assert!(e.message.contains("an address list"), "{e}");
    assert_at(
        &e,
        "cfg.ipfw",
        2,
        14,
        "tablearg",
        ErrorKind::MissingReference,
    );
}

#[test]
fn not_before_ports_protocols_and_interfaces_reads_and_prints_in_both_syntaxes() {
    let text = "pipe 1 config\n\
                add 100 pipe 1 ip from any to any not dst-port 80,443\n\
                add 200 pipe 1 not udp from any to any\n\
                add 300 pipe 1 tcp from any not 1000-2000 to any not 80\n\
                add 400 pipe 1 ip from any to any not via eth0\n\
                add 500 pipe 1 not ip4 from any to any not recv eth*\n\
                add 600 pipe 1 ip from any to any out not xmit eth1\n\
                add 700 pipe 1 ip from any to any not in\n\
                add 800 pipe 1 ip not src-ip 10.0.0.0/8 to any\n";
    let cfg = parse_ipfw(text, "cfg.ipfw").unwrap_or_else(|e| panic!("{e}"));
    let plan = cfg
        .clone()
        .validate(&NoProfiles)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(plan.rules[&100].dst_ports_negated && !plan.rules[&100].src_ports_negated);
    assert!(plan.rules[&200].proto_negated);
    assert!(plan.rules[&300].src_ports_negated && plan.rules[&300].dst_ports_negated);
    assert!(plan.rules[&400]
        .interface
        .as_ref()
        .is_some_and(|i| i.negated));
    assert_eq!(plan.rules[&700].direction, pspat_config::Direction::Out);
    assert_eq!(plan.rules[&800].src.to_string(), "not 10.0.0.0/8");
    let printed = pspat_config::print_ipfw(&cfg);
    for line in [
        "add 100 pipe 1 ip from any to any not dst-port 80,443",
        "add 200 pipe 1 not udp from any to any",
        "add 300 pipe 1 tcp from any to any not src-port 1000-2000 not dst-port 80",
        "add 400 pipe 1 ip from any to any not via eth0",
        "add 500 pipe 1 not ip4 from any to any not recv eth*",
        "add 600 pipe 1 ip from any to any out not xmit eth1",
        "add 700 pipe 1 ip from any to any out",
        "add 800 pipe 1 ip from not 10.0.0.0/8 to any",
    ] {
        assert!(printed.contains(&format!("{line}\n")), "{line}\n{printed}");
    }
    assert_eq!(parse_ipfw(&printed, "again.ipfw").unwrap(), cfg);
    let toml = pspat_config::print_toml(&cfg);
    for line in [
        "dst-port = \"not 80,443\"",
        "proto = \"not udp\"",
        "src-port = \"not 1000-2000\"",
        "via = \"not eth0\"",
        "proto = \"not ip4\"",
        "recv = \"not eth*\"",
        "xmit = \"not eth1\"",
    ] {
        assert!(toml.contains(&format!("{line}\n")), "{line}\n{toml}");
    }
    assert_eq!(parse_toml(&toml, "cfg.toml").unwrap(), cfg);
    // The JSON of the plan keeps the flags, and leaves them out when off.
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["rules"]["100"]["dst_ports_negated"], true);
    assert!(json["rules"]["100"].get("src_ports_negated").is_none());
    assert_eq!(json["rules"]["400"]["interface"]["negated"], true);
    let back: pspat_config::Plan = serde_json::from_value(json).unwrap();
    assert_eq!(back, plan);
}

#[test]
fn a_bang_before_an_option_is_not_as_in_ipfw() {
    let text = "pipe 1 config\n\
                add 100 pipe 1 ip from any to any !dst-port 80,443 !via eth0\n\
                add 200 pipe 1 tcp from any to any !src-port 1-1023 out\n";
    let cfg = parse_ipfw(text, "cfg.ipfw").unwrap_or_else(|e| panic!("{e}"));
    let printed = pspat_config::print_ipfw(&cfg);
    for line in [
        "add 100 pipe 1 ip from any to any not dst-port 80,443 not via eth0",
        "add 200 pipe 1 tcp from any to any not src-port 1-1023 out",
    ] {
        assert!(printed.contains(&format!("{line}\n")), "{line}\n{printed}");
    }
    // `not` and `!` together are one negation too many, named at the `!`.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any not !dst-port 80\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 39, "!dst-port", ErrorKind::Syntax);
    assert!(e.message.contains("twice"), "{e}");
    // A bare `!` is no option.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any ! dst-port 80\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 35, "!", ErrorKind::UnknownKeyword);
}

#[test]
fn a_negated_option_in_toml_reads_as_the_ipfw_words() {
    let toml = "[[pipe]]\nnumber = 1\n[[rule]]\nnumber = 100\naction = \"pipe 1\"\n\
                proto = \"not tcp\"\ndst-port = \"not 53\"\nsrc-port = \"not 1-1023\"\n\
                direction = \"not out\"\nxmit = \"not eth0\"\n";
    let cfg = parse_toml(toml, "cfg.toml").unwrap();
    assert_eq!(
        pspat_config::rule_line(&cfg.rules[0]),
        "add 100 pipe 1 not tcp from any to any not src-port 1-1023 not dst-port 53 in not xmit eth0"
    );
    // An interface called `not` is a name, not a negation.
    let cfg = parse_toml(
        "[[pipe]]\nnumber = 1\n[[rule]]\naction = \"pipe 1\"\nvia = \"not\"\n",
        "cfg.toml",
    )
    .unwrap();
    let i = cfg.rules[0].interface.as_ref().unwrap();
    assert_eq!((i.name.as_str(), i.negated), ("not", false));
}

#[test]
fn not_errors_name_the_offending_token() {
    // `not` at the end of the rule: nothing to negate.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any not\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 35, "not", ErrorKind::Syntax);
    assert!(
        e.message.contains("'not' needs a rule option after it"),
        "{e}"
    );
    assert!(e.message.contains("dst-port"), "{e}");
    // A doubled `not`: the second is named.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any not not dst-port 80\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 39, "not", ErrorKind::Syntax);
    assert!(e.message.contains("twice"), "{e}");
    // `not` before the address keyword, not the address.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip not from any to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 23, "from", ErrorKind::Syntax);
    assert!(e.message.contains("'from not ADDR'"), "{e}");
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any not to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 32, "to", ErrorKind::Syntax);
    // `not ip` would match nothing.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 not ip from any to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 20, "ip", ErrorKind::Syntax);
    assert!(e.message.contains("matches nothing"), "{e}");
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 not all from any to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 20, "all", ErrorKind::Syntax);
    // One `not` for one address.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any not dst-ip not 10.0.0.1\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 46, "not", ErrorKind::Syntax);
    // `not` before an unknown word names the word.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any not keep-state\n",
        &NoProfiles,
    );
    assert_at(
        &e,
        "cfg.ipfw",
        2,
        39,
        "keep-state",
        ErrorKind::UnknownKeyword,
    );
    // A port list after `not` is checked as any other.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any not dst-port 80-70\n",
        &NoProfiles,
    );
    assert_eq!(
        (e.line, e.column, e.token.as_str()),
        (2, 48, "80-70"),
        "{e}"
    );
    // A negated option keeps the once-per-rule check.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any dst-port 80 not dst-port 81\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 51, "dst-port", ErrorKind::Duplicate);
    // `not ip6` leaves IPv4 only: an IPv6 prefix is of the other family.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 not ip6 from 2001:db8::/32 to any\n",
        &NoProfiles,
    );
    assert_at(
        &e,
        "cfg.ipfw",
        2,
        29,
        "2001:db8::/32",
        ErrorKind::OutOfRange,
    );
    assert!(e.message.contains("matches not ip6 but"), "{e}");
}

#[test]
fn not_errors_in_toml_name_the_value() {
    // `proto = "` is 9 characters: `not` at column 10, `ip` at 14.
    let e =
        error_of_toml("[[pipe]]\nnumber = 1\n[[rule]]\naction = \"pipe 1\"\nproto = \"not ip\"\n");
    assert_at(&e, "cfg.toml", 5, 14, "ip", ErrorKind::Syntax);
    let e = error_of_toml(
        "[[pipe]]\nnumber = 1\n[[rule]]\naction = \"pipe 1\"\ndst-port = \"not not 80\"\n",
    );
    assert_at(&e, "cfg.toml", 5, 17, "not 80", ErrorKind::Syntax);
    assert!(e.message.contains("one word after 'not'"), "{e}");
    let e = error_of_toml("[[pipe]]\nnumber = 1\n[[rule]]\naction = \"pipe 1\"\nvia = \"not \"\n");
    assert_eq!((e.line, e.kind), (5, ErrorKind::Syntax), "{e}");
    let e = error_of_toml(
        "[[pipe]]\nnumber = 1\n[[rule]]\naction = \"pipe 1\"\ndirection = \"not up\"\n",
    );
    assert_at(&e, "cfg.toml", 5, 18, "up", ErrorKind::UnknownKeyword);
}

#[test]
fn service_names_read_as_their_ports_in_both_syntaxes() {
    let text = "pipe 1 config\n\
                add 100 pipe 1 tcp from any http to any not https,ssh\n\
                add 200 pipe 1 udp from any to any dst-port domain,ntp,sip-sips\n";
    let cfg = parse_ipfw(text, "cfg.ipfw").unwrap();
    assert_eq!(
        print_ipfw(&cfg),
        "pipe 1 config\n\
         add 100 pipe 1 tcp from any to any src-port 80 not dst-port 443,22\n\
         add 200 pipe 1 udp from any to any dst-port 53,123,5060-5061\n"
    );
    let toml = "[[pipe]]\nnumber = 1\n\n[[rule]]\nnumber = 100\naction = \"pipe 1\"\n\
                from = \"any\"\nto = \"any\"\ndst-port = \"http,https\"\n";
    let cfg = parse_toml(toml, "cfg.toml").unwrap();
    assert!(
        print_ipfw(&cfg).contains("dst-port 80,443"),
        "{}",
        print_ipfw(&cfg)
    );
    // A word that is no service name is named at its column; after an
    // address it is read as the next option.
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 tcp from any to any dst-port http,gopher\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 45, "http,gopher", ErrorKind::Syntax);
    assert!(e.message.contains("'gopher'"), "{e}");
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 tcp from any gopher to any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 29, "gopher", ErrorKind::UnknownKeyword);
}

#[test]
fn an_or_block_of_addresses_reads_as_an_address_list() {
    let text = "pipe 1 config\n\
                add 100 pipe 1 ip from { 10.0.0.1 or 10.0.0.0/24 or 2001:db8::/32 } to any\n\
                add 200 pipe 1 udp from {10.0.0.1 or 10.0.0.2} 53 to not { 10.1.0.0/16 or 10.2.0.0/16 }\n\
                add 300 pipe 1 ip from { 10.0.0.9 } to any\n";
    let cfg = parse_ipfw(text, "cfg.ipfw").unwrap();
    assert_eq!(
        print_ipfw(&cfg),
        "pipe 1 config\n\
         add 100 pipe 1 ip from 10.0.0.1,10.0.0.0/24,2001:db8::/32 to any\n\
         add 200 pipe 1 udp from 10.0.0.1,10.0.0.2 to not 10.1.0.0/16,10.2.0.0/16 src-port 53\n\
         add 300 pipe 1 ip from 10.0.0.9 to any\n"
    );
    let cases = [
        ("from { 10.0.0.1 or any } to any", 38, "any"),
        ("from { 10.0.0.1 10.0.0.2 } to any", 35, "10.0.0.2"),
        ("from { 10.0.0.1 or } to any", 38, "}"),
        ("from { or 10.0.0.1 } to any", 26, "or"),
        ("from { } to any", 26, "}"),
        ("from { 10.0.0.1 or 10.0.0.300 } to any", 38, "10.0.0.300"),
        ("from { 10.0.0.1 or 10.0.0.2", 24, "{"),
    ];
    for (body, column, token) in cases {
        let e = error_of(
            &format!("pipe 1 config\nadd 100 pipe 1 ip {body}\n"),
            &NoProfiles,
        );
        assert_eq!(
            (e.line, e.column, e.token.as_str()),
            (2, column, token),
            "{body}: {e}"
        );
        assert_eq!(e.kind, ErrorKind::Syntax, "{body}: {e}");
    }
}

#[test]
fn netem_reorder_errors_name_their_token_in_both_syntaxes() {
    let cases = [
        (
            "pipe 5 config reorder 0.5\n",
            23,
            "0.5",
            ErrorKind::MissingReference,
        ),
        (
            "pipe 5 config delay 1ms gap 5\n",
            29,
            "5",
            ErrorKind::MissingReference,
        ),
        (
            "pipe 5 config delay 1ms reorder 1.5\n",
            33,
            "1.5",
            ErrorKind::OutOfRange,
        ),
        (
            "pipe 5 config delay 1ms reorder 25% 1\n",
            37,
            "1",
            ErrorKind::OutOfRange,
        ),
        (
            "pipe 5 config delay 1ms reorder 0.1 gap 0\n",
            41,
            "0",
            ErrorKind::OutOfRange,
        ),
    ];
    for (text, column, token, kind) in cases {
        let e = error_of(text, &NoProfiles);
        assert_at(&e, "cfg.ipfw", 1, column, token, kind);
    }
    let e = error_of_toml("[[pipe]]\nnumber = 1\nreorder = 0.5\n");
    assert_at(&e, "cfg.toml", 3, 11, "0.5", ErrorKind::MissingReference);
    let e = error_of_toml("[[pipe]]\nnumber = 1\ndelay = \"1ms\"\nreorder = \"often\"\n");
    assert_eq!((e.line, e.kind), (4, ErrorKind::Syntax), "{e}");
    // Read in TOML as in ipfw lines.
    let cfg = parse_toml(
        "[[pipe]]\nnumber = 1\ndelay = \"5ms\"\nreorder = 0.25\ngap = 4\n",
        "cfg.toml",
    )
    .unwrap();
    assert_eq!(
        print_ipfw(&cfg),
        "pipe 1 config delay 5ms reorder 0.25 gap 4\n"
    );
}

#[test]
fn slot_errors_name_their_token_in_both_syntaxes() {
    let cases = [
        // The longest interval below the shortest.
        (
            "pipe 5 config slot 5ms 1ms\n",
            24,
            "1ms",
            ErrorKind::OutOfRange,
        ),
        (
            "pipe 5 config slot 1ms packets 0\n",
            32,
            "0",
            ErrorKind::OutOfRange,
        ),
        (
            "pipe 5 config slot 1ms bytes 0\n",
            30,
            "0",
            ErrorKind::OutOfRange,
        ),
        ("pipe 5 config slot 90s\n", 20, "90s", ErrorKind::OutOfRange),
        (
            "pipe 5 config slot distribution gaussian 1ms 1ms\n",
            33,
            "gaussian",
            ErrorKind::UnknownKeyword,
        ),
        ("pipe 5 config slot soon\n", 20, "soon", ErrorKind::Syntax),
        (
            "pipe 5 config slot 1ms packets 3 packets 4\n",
            34,
            "packets",
            ErrorKind::Duplicate,
        ),
    ];
    for (text, column, token, kind) in cases {
        let e = error_of(text, &NoProfiles);
        assert_at(&e, "cfg.ipfw", 1, column, token, kind);
    }
    let e = error_of("pipe 5 config slot\n", &NoProfiles);
    assert_eq!((e.line, e.kind), (1, ErrorKind::Syntax), "{e}");
    let e = error_of_toml("[[pipe]]\nnumber = 1\nslot = { min = \"1ms\", maxx = \"2ms\" }\n");
    assert_at(&e, "cfg.toml", 3, 23, "maxx", ErrorKind::UnknownKeyword);
    let e = error_of_toml("[[pipe]]\nnumber = 1\nslot = { min = \"3ms\", max = \"2ms\" }\n");
    assert_at(&e, "cfg.toml", 3, 30, "2ms", ErrorKind::OutOfRange);
    assert!(e.message.contains("shorter than its shortest 3ms"), "{e}");
    let e = error_of_toml(
        "[[pipe]]\nnumber = 1\nslot = { distribution = \"normal\", delay = \"1ms\" }\n",
    );
    assert_eq!((e.line, e.kind), (3, ErrorKind::Syntax), "{e}");
    // Read in TOML as in ipfw lines, and printed back.
    let cfg = parse_toml(
        "[[pipe]]\nnumber = 1\nslot = { min = \"800us\", max = \"1ms\", packets = 32 }\n",
        "cfg.toml",
    )
    .unwrap();
    assert_eq!(
        print_ipfw(&cfg),
        "pipe 1 config slot 800us 1ms packets 32\n"
    );
    assert_eq!(
        print_toml(&cfg),
        "[[pipe]]\nnumber = 1\nslot = { min = \"800us\", max = \"1ms\", packets = 32 }\n"
    );
    // `slot 0` turns slots off: the plan has none.
    let plan = parse_ipfw("pipe 1 config slot 0", "x")
        .unwrap()
        .validate(&NoProfiles)
        .unwrap();
    assert_eq!(plan.pipes[&1].link.slot, None);
}

#[test]
fn jitter_correlation_errors_name_their_token_in_both_syntaxes() {
    let e = error_of("pipe 5 config delay 10ms correlation 0.5\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 38, "0.5", ErrorKind::MissingReference);
    assert!(e.message.contains("add 'jitter TIME'"), "{e}");
    let e = error_of(
        "pipe 5 config delay 10ms jitter 1ms correlation 1.5\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 1, 49, "1.5", ErrorKind::OutOfRange);
    let e = error_of(
        "pipe 5 config delay 10ms jitter 1ms correlation often\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 1, 49, "often", ErrorKind::Syntax);
    let cfg = parse_toml(
        "[[pipe]]\nnumber = 1\ndelay = \"10ms\"\njitter = \"1ms\"\ncorrelation = 0.25\n",
        "cfg.toml",
    )
    .unwrap();
    assert_eq!(
        print_ipfw(&cfg),
        "pipe 1 config delay 10ms jitter 1ms correlation 0.25\n"
    );
    let e = error_of_toml("[[pipe]]\nnumber = 1\ndelay = \"10ms\"\ncorrelation = 0.25\n");
    assert_at(&e, "cfg.toml", 4, 15, "0.25", ErrorKind::MissingReference);
}

#[test]
fn a_correlation_of_duplication_corruption_or_reordering_out_of_range_is_refused_at_its_token() {
    for (text, column, token) in [
        ("pipe 1 config duplicate 0.01 1\n", 30, "1"),
        ("pipe 1 config duplicate 0.01 100%\n", 30, "100%"),
        ("pipe 1 config corrupt 0.01 -0.5\n", 28, "-0.5"),
        ("queue 2 config pipe 2 duplicate 1% 2\n", 36, "2"),
    ] {
        let text = format!("pipe 2 config bw 1Mbit/s\n{text}");
        let e = error_of(&text, &NoProfiles);
        assert_at(&e, "cfg.ipfw", 2, column, token, ErrorKind::OutOfRange);
        assert!(e.message.contains("correlation"), "{e}");
    }
    // The TOML table names the same values.
    let e = error_of_toml("[[pipe]]\nnumber = 1\nduplicate = { p = 0.01, correlation = 1 }\n");
    assert_eq!((e.line, e.kind), (3, ErrorKind::OutOfRange), "{e}");
    let e = error_of_toml("[[pipe]]\nnumber = 1\ncorrupt = { correlation = 0.5 }\n");
    assert_eq!((e.line, e.kind), (3, ErrorKind::Syntax), "{e}");
    assert!(e.message.contains("needs the key p"), "{e}");
    let e =
        error_of_toml("[[pipe]]\nnumber = 1\ndelay = \"1ms\"\nreorder = { p = 0.1, often = 1 }\n");
    assert_eq!((e.line, e.kind), (4, ErrorKind::UnknownKeyword), "{e}");
    // Valid, in both syntaxes, and printed back as read.
    let ipfw =
        "pipe 1 config delay 1ms reorder 0.25 0.5 gap 3 duplicate 0.01 0.25 corrupt 0.001 0.1\n";
    let cfg = parse_ipfw(ipfw, "cfg.ipfw").unwrap();
    cfg.validate(&NoProfiles).unwrap();
    let toml = print_toml(&cfg);
    assert!(
        toml.contains("duplicate = { p = 0.01, correlation = 0.25 }"),
        "{toml}"
    );
    assert!(
        toml.contains("reorder = { p = 0.25, correlation = 0.5 }"),
        "{toml}"
    );
    let back = parse_toml(&toml, "cfg.toml").unwrap();
    assert_eq!(back, cfg);
    assert!(
        print_ipfw(&back).contains("reorder 0.25 0.5 gap 3"),
        "{}",
        print_ipfw(&back)
    );
    assert!(print_ipfw(&back).contains("duplicate 0.01 0.25 corrupt 0.001 0.1"));
}

#[test]
fn a_netem_correlation_after_a_value_is_refused_with_what_to_write() {
    for (text, column, token, hint) in [
        (
            "pipe 1 config plr 0.01 25%\n",
            24,
            "25%",
            "'gemodel 0.0075 0.7425'",
        ),
        (
            "pipe 1 config plr 0.01 1\n",
            24,
            "1",
            "use 'gemodel p r 1-h 1-k'",
        ),
        (
            "pipe 1 config delay 10ms jitter 1ms 25%\n",
            37,
            "25%",
            "correlation 25%",
        ),
    ] {
        let e = error_of(text, &NoProfiles);
        assert_at(&e, "cfg.ipfw", 1, column, token, ErrorKind::Syntax);
        assert!(e.message.contains(hint), "{e}");
    }
}

/// dummynet's `ecn` marks what RED would drop: without `red`/`gred` on the
/// same pipe or queue (drop-tail, or after `droptail`) it is refused at
/// the `ecn` token, in both syntaxes.
#[test]
fn ecn_without_red_is_refused_at_its_token_in_both_syntaxes() {
    let needs = "'ecn' needs 'red' or 'gred' on the same queue";
    let e = error_of("pipe 1 config bw 1Mbit/s ecn\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 26, "ecn", ErrorKind::MissingReference);
    assert_eq!(
        e.to_string(),
        format!("cfg.ipfw:1:26: pipe 1 has 'ecn' but no RED: {needs}")
    );
    let e = error_of(
        "pipe 2 config bw 1Mbit/s\nqueue 3 config pipe 2 ecn weight 4\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 23, "ecn", ErrorKind::MissingReference);
    assert!(e.message.starts_with("queue 3 has 'ecn'"), "{e}");
    assert!(e.message.contains(needs), "{e}");
    // `droptail` is drop-tail: the same.
    let e = error_of("pipe 1 config droptail ecn\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 24, "ecn", ErrorKind::MissingReference);
    assert!(e.message.contains(needs), "{e}");
    // RED and `droptail` on one line are two drop policies; `ecn` twice too.
    let e = error_of(
        "pipe 1 config red 0.002/30/80/0.1 ecn droptail\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 1, 39, "droptail", ErrorKind::Duplicate);
    let e = error_of("pipe 1 config red 0.002/30/80/0.1 ecn ecn\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 39, "ecn", ErrorKind::Duplicate);
    // Not a sched keyword; listed among a pipe's.
    let e = error_of("sched 1 config type qfq ecn\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 25, "ecn", ErrorKind::UnknownKeyword);
    let e = error_of("pipe 1 config ecm\n", &NoProfiles);
    assert!(
        e.message
            .contains("gred, codel, pie, droptail, ecn, buckets"),
        "{e}"
    );
    let e = error_of("queue 1 config pipe 1 mask all ecm\n", &NoProfiles);
    assert!(e.message.contains("droptail, ecn, buckets"), "{e}");
    // TOML: at the key.
    let e = error_of_toml("[[pipe]]\nnumber = 1\nbw = \"1Mbit/s\"\necn = true\n");
    assert_at(&e, "cfg.toml", 4, 1, "ecn", ErrorKind::MissingReference);
    assert!(e.message.contains(needs), "{e}");
    let e = error_of_toml("[[pipe]]\nnumber = 1\n[[queue]]\nnumber = 2\npipe = 1\necn = true\n");
    assert_at(&e, "cfg.toml", 6, 1, "ecn", ErrorKind::MissingReference);
    // With RED, both syntaxes validate.
    let cfg = parse_ipfw("pipe 1 config red 0.002/30/80/0.1 ecn\n", "cfg.ipfw").unwrap();
    assert!(cfg.validate(&NoProfiles).unwrap().pipes[&1].queue.ecn);
}

#[test]
fn ecn_in_toml_takes_a_boolean_at_its_value() {
    for (value, token) in [("1", "integer"), ("\"yes\"", "string"), ("0.5", "float")] {
        let e = error_of_toml(&format!(
            "[[pipe]]\nnumber = 1\nred = \"0.002/30/80/0.1\"\necn = {value}\n"
        ));
        assert_at(&e, "cfg.toml", 4, 7, token, ErrorKind::Syntax);
        assert_eq!(
            e.to_string(),
            "cfg.toml:4:7: 'ecn' takes true or false",
            "{value}"
        );
    }
}

/// `lossecn` marks what a random loss would drop: without `plr` above 0,
/// `gemodel` or `lossstate` on the same pipe or queue (RED is not one) it
/// is refused at the `lossecn` token, in both syntaxes.
#[test]
fn lossecn_without_a_random_loss_is_refused_at_its_token_in_both_syntaxes() {
    let needs = "'lossecn' needs 'plr', 'gemodel' or 'lossstate' on the same queue";
    let e = error_of("pipe 1 config bw 1Mbit/s lossecn\n", &NoProfiles);
    assert_at(
        &e,
        "cfg.ipfw",
        1,
        26,
        "lossecn",
        ErrorKind::MissingReference,
    );
    assert_eq!(
        e.to_string(),
        format!("cfg.ipfw:1:26: pipe 1 has 'lossecn' but no random loss: {needs}")
    );
    // `plr 0` is no loss.
    let e = error_of("pipe 1 config plr 0 lossecn\n", &NoProfiles);
    assert_at(
        &e,
        "cfg.ipfw",
        1,
        21,
        "lossecn",
        ErrorKind::MissingReference,
    );
    assert!(e.message.contains(needs), "{e}");
    // RED drops, but not at random.
    let e = error_of(
        "pipe 2 config bw 1Mbit/s\nqueue 3 config pipe 2 lossecn weight 4 red 0.002/30/80/0.1 ecn\n",
        &NoProfiles,
    );
    assert_at(
        &e,
        "cfg.ipfw",
        2,
        23,
        "lossecn",
        ErrorKind::MissingReference,
    );
    assert!(e.message.starts_with("queue 3 has 'lossecn'"), "{e}");
    assert!(e.message.contains(needs), "{e}");
    // Twice on one line.
    let e = error_of("pipe 1 config plr 0.1 lossecn lossecn\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 31, "lossecn", ErrorKind::Duplicate);
    // Not a sched keyword; listed among a pipe's and a queue's.
    let e = error_of("sched 1 config type qfq lossecn\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 25, "lossecn", ErrorKind::UnknownKeyword);
    let e = error_of("pipe 1 config lossec\n", &NoProfiles);
    assert!(e.message.contains("lossstate, lossecn, duplicate"), "{e}");
    let e = error_of("queue 1 config pipe 1 mask all lossec\n", &NoProfiles);
    assert!(e.message.contains("lossstate, lossecn, duplicate"), "{e}");
    // TOML: at the key.
    let e = error_of_toml("[[pipe]]\nnumber = 1\nbw = \"1Mbit/s\"\nlossecn = true\n");
    assert_at(&e, "cfg.toml", 4, 1, "lossecn", ErrorKind::MissingReference);
    assert!(e.message.contains(needs), "{e}");
    let e = error_of_toml(
        "[[pipe]]\nnumber = 1\n[[queue]]\nnumber = 2\npipe = 1\nplr = 0\nlossecn = true\n",
    );
    assert_at(&e, "cfg.toml", 7, 1, "lossecn", ErrorKind::MissingReference);
    // With any random loss, both syntaxes validate.
    for loss in [
        "plr 0.01",
        "gemodel 0.01",
        "lossstate 0.01",
        "plr 0 gemodel 0",
    ] {
        let cfg = parse_ipfw(&format!("pipe 1 config {loss} lossecn\n"), "cfg.ipfw").unwrap();
        assert!(
            cfg.validate(&NoProfiles).unwrap().pipes[&1].queue.lossecn,
            "{loss}"
        );
    }
    let cfg = parse_toml(
        "[[pipe]]\nnumber = 1\nplr = \"1%\"\nlossecn = true\n",
        "cfg.toml",
    )
    .unwrap();
    assert!(cfg.validate(&NoProfiles).unwrap().pipes[&1].queue.lossecn);
}

/// dummynet's `ecn` on a queue with a random loss but no RED: refused as
/// without one, and told that tc-netem's marking is `lossecn`.
#[test]
fn ecn_with_a_random_loss_but_no_red_points_to_lossecn() {
    let e = error_of("pipe 1 config plr 0.01 ecn\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 24, "ecn", ErrorKind::MissingReference);
    assert_eq!(
        e.to_string(),
        "cfg.ipfw:1:24: pipe 1 has 'ecn' but no RED: 'ecn' needs 'red' or 'gred' on the same queue; \
         to mark instead of the random loss, as tc-netem's 'ecn' does, write 'lossecn'"
    );
}

#[test]
fn lossecn_in_toml_takes_a_boolean_at_its_value() {
    for (value, token) in [("1", "integer"), ("\"yes\"", "string"), ("0.5", "float")] {
        let e = error_of_toml(&format!(
            "[[pipe]]\nnumber = 1\nplr = 0.01\nlossecn = {value}\n"
        ));
        assert_at(&e, "cfg.toml", 4, 11, token, ErrorKind::Syntax);
        assert_eq!(
            e.to_string(),
            "cfg.toml:4:11: 'lossecn' takes true or false",
            "{value}"
        );
    }
}

/// dummynet's `codel`: a time missing, out of range or not a time is told
/// at its word or value; a word that is none of its parameters ends them
/// and is told as any unknown keyword; it is a queue's, not a sched's.
#[test]
fn codel_parameters_are_refused_at_their_token() {
    let e = error_of("pipe 1 config codel target\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 21, "target", ErrorKind::Syntax);
    assert_eq!(
        e.to_string(),
        "cfg.ipfw:1:21: 'target' needs a value (example: 5ms)"
    );
    let e = error_of("pipe 1 config codel target 0ms\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 28, "0ms", ErrorKind::OutOfRange);
    assert_eq!(
        e.message,
        "pipe 1 codel target 0ms is out of range (allowed: 1us..=3600s)"
    );
    // Hours are no unit of the crate's times: `2h` is no time at all, and
    // two hours in seconds is out of range.
    let e = error_of("pipe 1 config codel interval 2h\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 30, "2h", ErrorKind::Syntax);
    assert!(e.message.contains("'2h' is not a time"), "{e}");
    let e = error_of(
        "pipe 1 config bw 1Mbit/s\nqueue 2 config pipe 1 codel target 1ms interval 7200s\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 49, "7200s", ErrorKind::OutOfRange);
    assert_eq!(
        e.message,
        "queue 2 codel interval 7200s is out of range (allowed: 1us..=3600s)"
    );
    // One hour is the longest.
    let cfg = parse_ipfw(
        "pipe 1 config codel target 3600s interval 1us\n",
        "cfg.ipfw",
    )
    .unwrap();
    assert!(cfg.validate(&NoProfiles).is_ok());
    let e = error_of("pipe 1 config codel target 0.5us\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 28, "0.5us", ErrorKind::OutOfRange);
    // An unknown word after codel's parameters stays an error at that word.
    let e = error_of("pipe 1 config codel target 5ms tagret 1ms\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 32, "tagret", ErrorKind::UnknownKeyword);
    assert!(
        e.message
            .starts_with("unknown pipe keyword 'tagret' (allowed: "),
        "{e}"
    );
    assert!(
        e.message.contains("red, gred, codel, pie, droptail, ecn"),
        "{e}"
    );
    // A parameter given twice, and ecn with noecn.
    let e = error_of("pipe 1 config codel target 1ms target 2ms\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 32, "target", ErrorKind::Duplicate);
    let e = error_of("pipe 1 config codel ecn noecn\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 25, "noecn", ErrorKind::Duplicate);
    assert_eq!(
        e.message,
        "'noecn' after 'ecn' (column 21): CoDel takes one of ecn and noecn"
    );
    let e = error_of("pipe 1 config codel codel\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 21, "codel", ErrorKind::Duplicate);
    // `noecn` is CoDel's only.
    let e = error_of("pipe 1 config noecn\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 15, "noecn", ErrorKind::UnknownKeyword);
    // A queue's keyword, not a sched's.
    let e = error_of("sched 1 config type qfq codel target 5ms\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 25, "codel", ErrorKind::UnknownKeyword);
    assert!(
        e.message.starts_with("unknown sched keyword 'codel'"),
        "{e}"
    );
    // TOML: at the key or the value.
    let e = error_of_toml("[[pipe]]\nnumber = 1\ncodel = { target = \"0ms\" }\n");
    assert_at(&e, "cfg.toml", 3, 21, "0ms", ErrorKind::OutOfRange);
    let e = error_of_toml("[[pipe]]\nnumber = 1\ncodel = { interval = \"2h\" }\n");
    assert_at(&e, "cfg.toml", 3, 23, "2h", ErrorKind::Syntax);
    let e = error_of_toml("[[pipe]]\nnumber = 1\ncodel = { tagret = \"5ms\" }\n");
    assert_at(&e, "cfg.toml", 3, 11, "tagret", ErrorKind::UnknownKeyword);
    assert_eq!(
        e.message,
        "unknown codel key 'tagret' (allowed: target, interval, ecn)"
    );
    let e = error_of_toml("[[pipe]]\nnumber = 1\ncodel = { ecn = 1 }\n");
    assert_at(&e, "cfg.toml", 3, 17, "integer", ErrorKind::Syntax);
    assert_eq!(e.message, "CoDel's 'ecn' takes true or false");
    let e = error_of_toml("[[pipe]]\nnumber = 1\ncodel = \"5ms\"\n");
    assert_at(&e, "cfg.toml", 3, 9, "string", ErrorKind::Syntax);
    assert!(
        e.message.starts_with("'codel' takes a table or true"),
        "{e}"
    );
    let e = error_of_toml("[[sched]]\nnumber = 1\ncodel = true\n");
    assert_at(&e, "cfg.toml", 3, 1, "codel", ErrorKind::UnknownKeyword);
}

/// A queue has one AQM: `codel` with `red`/`gred` or `droptail` in one
/// statement is refused at whichever comes second, in both syntaxes;
/// RED's `ecn` on a CoDel queue is refused at `ecn` with CoDel's word.
#[test]
fn codel_and_red_on_one_queue_are_refused_at_the_second() {
    let one = "a queue has one AQM (red, gred, codel, pie, or droptail for none); give one of them";
    let e = error_of("pipe 1 config red 0.002/30/80/0.1 codel\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 35, "codel", ErrorKind::Duplicate);
    assert_eq!(
        e.to_string(),
        format!("cfg.ipfw:1:35: 'codel' after 'red' in the same statement: {one}")
    );
    let e = error_of(
        "pipe 1 config bw 1Mbit/s\nqueue 2 config pipe 1 codel target 2ms ecn gred 0.002/30/80/0.1\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 44, "gred", ErrorKind::Duplicate);
    assert_eq!(
        e.message,
        format!("'gred' after 'codel' in the same statement: {one}")
    );
    let e = error_of("pipe 1 config droptail codel\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 24, "codel", ErrorKind::Duplicate);
    assert!(e.message.starts_with("'codel' after 'droptail'"), "{e}");
    let e = error_of("pipe 1 config codel droptail\n", &NoProfiles);
    assert_at(&e, "cfg.ipfw", 1, 21, "droptail", ErrorKind::Duplicate);
    // TOML: at the second key, in the table's order.
    let e = error_of_toml(
        "[[pipe]]\nnumber = 1\nred = \"0.002/30/80/0.1\"\ncodel = { target = \"5ms\" }\n",
    );
    assert_at(&e, "cfg.toml", 4, 1, "codel", ErrorKind::Duplicate);
    let e = error_of_toml("[[pipe]]\nnumber = 1\ncodel = true\ngred = \"0.002/30/80/0.1\"\n");
    assert_at(&e, "cfg.toml", 4, 1, "gred", ErrorKind::Duplicate);
    // A model built in code with both: validation refuses it.
    let mut cfg = parse_ipfw("pipe 1 config red 0.002/30/80/0.1\n", "cfg.ipfw").unwrap();
    cfg.pipes[0].queue.codel = Some(pspat_config::Codel::default());
    let e = cfg.validate(&NoProfiles).unwrap_err();
    assert_eq!(
        (e.token.as_str(), e.kind),
        ("codel", ErrorKind::Duplicate),
        "{e}"
    );
    assert!(
        e.message.starts_with("pipe 1 has both RED and CoDel"),
        "{e}"
    );
    // RED's `ecn` after codel's words: no RED to mark with.
    let e = error_of(
        "pipe 1 config codel target 5ms bw 1Mbit/s ecn\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 1, 43, "ecn", ErrorKind::MissingReference);
    assert!(
        e.message.ends_with(
            "; for CoDel to mark, write 'ecn' among its parameters, right after 'codel' or its times (codel target 5ms ecn)"
        ),
        "{e}"
    );
}

/// `any` is no port condition, so `not ... any` would match nothing:
/// refused at `any`. A `//` comment ends its line, whatever it holds; on
/// a line other than a rule it is ignored.
#[test]
fn not_any_port_is_refused_and_a_rule_comment_ends_its_line() {
    let e = error_of(
        "pipe 1 config bw 1Mbit/s\nadd 100 pipe 1 ip from any to any not dst-port any\n",
        &NoProfiles,
    );
    assert_at(&e, "cfg.ipfw", 2, 48, "any", ErrorKind::Syntax);
    assert!(e.message.contains("matches no packet"), "{e}");
    let cfg = parse_ipfw(
        "pipe 1 config bw 1Mbit/s // uplink; pipe 2 config bw oops\n",
        "cfg.ipfw",
    )
    .unwrap();
    assert_eq!(print_ipfw(&cfg), "pipe 1 config bw 1Mbit/s\n");
}
