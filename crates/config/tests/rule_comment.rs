//! ipfw's rule comment (`add ... // TEXT`): kept with the rule, printed
//! back in both syntaxes, carried into the plan, and refused at the
//! offending token when it cannot be written back or is longer than
//! ipfw's 80 bytes.

use pspat_config::{parse_control, parse_toml, print_ipfw, print_toml, ControlRequest, ErrorKind};

use crate::support::{assert_at, error_of, ipfw, plan};

#[test]
fn a_comment_stays_with_its_rule_through_print_convert_and_plan() {
    let text = "pipe 1 config bw 10Mbit/s\n\
                add 100 pipe 1 tcp from any to any dst-port 80 //   web   servers; not ssh\n\
                add 200 pipe 1 ip from any to any // \n\
                add 300 pipe 1 udp from any to any; add 400 pipe 1 icmp from any to any // the last statement's\n";
    let cfg = ipfw(text);
    let comments: Vec<_> = cfg.rules.iter().map(|r| r.comment.as_deref()).collect();
    // Words one space apart; `;` is part of the comment; an empty comment
    // is none; a comment belongs to the last statement of its line.
    assert_eq!(
        comments,
        [
            Some("web servers; not ssh"),
            None,
            None,
            Some("the last statement's")
        ]
    );
    let printed = print_ipfw(&cfg);
    assert!(
        printed
            .contains("add 100 pipe 1 tcp from any to any dst-port 80 // web servers; not ssh\n"),
        "{printed}"
    );
    assert!(
        printed.contains("add 200 pipe 1 ip from any to any\n"),
        "{printed}"
    );
    assert_eq!(ipfw(&printed), cfg);

    let toml = print_toml(&cfg);
    assert!(
        toml.contains("comment = \"web servers; not ssh\"\n"),
        "{toml}"
    );
    assert_eq!(parse_toml(&toml, "cfg.toml").unwrap(), cfg);

    let p = plan(text);
    assert_eq!(
        p.rules[&100].comment.as_deref(),
        Some("web servers; not ssh")
    );
    assert_eq!(p.rules[&200].comment, None);
    let json = serde_json::to_value(&p.rules[&100]).unwrap();
    assert_eq!(json["comment"], "web servers; not ssh");
    // No comment, no key.
    assert!(serde_json::to_value(&p.rules[&200])
        .unwrap()
        .get("comment")
        .is_none());
}

#[test]
fn a_comment_elsewhere_than_a_rule_is_ignored_and_one_on_a_control_line_is_kept() {
    let cfg = ipfw("pipe 1 config bw 1Mbit/s // uplink\ntable 1 add 10.0.0.0/8 1 // lan\n");
    assert_eq!(
        print_ipfw(&cfg),
        "pipe 1 config bw 1Mbit/s\ntable 1 add 10.0.0.0/8 1\n"
    );
    let ControlRequest::Configure(change) = parse_control(
        "ipfw add 300 pipe 1 udp from any to any dst-port 53 // dns",
        "ctl",
    )
    .unwrap() else {
        panic!("an add is a change to apply");
    };
    assert_eq!(change.rules[0].comment.as_deref(), Some("dns"));
}

#[test]
fn a_comment_longer_than_ipfw_s_80_bytes_is_refused_at_its_slashes() {
    let ok = format!("add 100 allow ip from any to any // {}\n", "x".repeat(80));
    assert_eq!(
        ipfw(&ok).rules[0].comment.as_ref().map(String::len),
        Some(80)
    );
    let long = format!("add 100 allow ip from any to any // {} y\n", "x".repeat(79));
    let e = error_of(&long, "cfg.ipfw");
    let token = format!("// {} y", "x".repeat(79));
    assert_at(
        &e,
        (1, 34, &token),
        ErrorKind::OutOfRange,
        "at most 80 bytes",
    );
}

#[test]
fn a_toml_comment_that_ipfw_could_not_hold_is_refused_at_the_string() {
    for (value, says, kind) in [
        ("\"see #12\"", "cannot hold '#'", ErrorKind::Syntax),
        ("\"two\\nlines\"", "line break", ErrorKind::Syntax),
        ("3", "takes a string", ErrorKind::Syntax),
    ] {
        let text =
            format!("[[pipe]]\nnumber = 1\n\n[[rule]]\naction = \"pipe 1\"\ncomment = {value}\n");
        let e = error_of(&text, "cfg.toml");
        assert_eq!((e.line, e.kind), (6, kind), "{e}");
        assert!(e.message.contains(says), "{e}");
    }
    let long = format!(
        "[[pipe]]\nnumber = 1\n\n[[rule]]\naction = \"pipe 1\"\ncomment = \"{}\"\n",
        "y".repeat(81)
    );
    let e = error_of(&long, "cfg.toml");
    assert_at(
        &e,
        (6, 12, &"y".repeat(81)),
        ErrorKind::OutOfRange,
        "at most 80 bytes",
    );
    // Spaces are normalised as on an ipfw line.
    let cfg = parse_toml(
        "[[pipe]]\nnumber = 1\n\n[[rule]]\naction = \"pipe 1\"\ncomment = \"  a   b \"\n",
        "cfg.toml",
    )
    .unwrap();
    assert_eq!(cfg.rules[0].comment.as_deref(), Some("a b"));
    // A model built in code is checked by validation, as its ipfw form
    // must read back.
    for bad in ["a  b", "", "x # y", &"z".repeat(81)] {
        let mut cfg = ipfw("pipe 1 config\nadd 100 pipe 1 ip from any to any\n");
        cfg.rules[0].comment = Some(bad.to_string());
        assert!(cfg.validate(&pspat_config::NoProfiles).is_err(), "{bad:?}");
    }
}
