//! ipfw's `prob P` before a rule's action: read in both syntaxes, printed
//! back, carried into the plan, refused out of (0, 1] at the value.

use pspat_config::{ErrorKind, MatchProbability};

use crate::support::{assert_at, error_of, ipfw, plan, printed_both};

#[test]
fn prob_is_read_printed_converted_and_planned() {
    let text = "pipe 1 config delay 10ms\npipe 2 config delay 50ms\n\
                add 100 prob 50% pipe 1 ip from any to any\n\
                add prob 0.125 pipe 2 ip from any to any // two paths\n";
    let cfg = ipfw(text);
    let probs: Vec<_> = cfg.rules.iter().map(|r| r.prob).collect();
    assert_eq!(
        probs,
        [Some(MatchProbability(0.5)), Some(MatchProbability(0.125))]
    );
    let (printed, toml) = printed_both(&cfg);
    assert!(
        printed.contains("add 100 prob 0.5 pipe 1 ip from any to any\n"),
        "{printed}"
    );
    assert!(
        printed.contains("add prob 0.125 pipe 2 ip from any to any // two paths\n"),
        "{printed}"
    );
    assert!(toml.contains("prob = 0.125\n"), "{toml}");
    let p = plan(text);
    assert_eq!(p.rules[&200].prob, Some(MatchProbability(0.125)));
    let json = serde_json::to_value(&p.rules[&100]).unwrap();
    assert_eq!(json["prob"], 0.5);
}

#[test]
fn prob_out_of_its_range_or_without_a_value_is_refused_at_the_value() {
    for (value, column, kind, says) in [
        ("0", 14, ErrorKind::OutOfRange, "above 0, at most 1"),
        ("1.5", 14, ErrorKind::OutOfRange, "above 0, at most 1"),
        ("-0.5", 14, ErrorKind::OutOfRange, "above 0, at most 1"),
        ("half", 14, ErrorKind::Syntax, "not a probability"),
    ] {
        let text = format!("pipe 1 config\nadd 100 prob {value} pipe 1 ip from any to any\n");
        let e = error_of(&text, "cfg.ipfw");
        assert_at(&e, (2, column, value), kind, says);
    }
    let e = error_of("pipe 1 config\nadd 100 prob\n", "cfg.ipfw");
    assert_at(&e, (2, 9, "prob"), ErrorKind::Syntax, "needs a value");
    let e = error_of(
        "[[pipe]]\nnumber = 1\n\n[[rule]]\nprob = 2\naction = \"pipe 1\"\n",
        "cfg.toml",
    );
    assert_eq!((e.line, e.kind), (5, ErrorKind::OutOfRange), "{e}");
    // A model built in code is checked by validation.
    let mut cfg = ipfw("pipe 1 config\nadd 100 pipe 1 ip from any to any\n");
    cfg.rules[0].prob = Some(MatchProbability(f64::NAN));
    let e = cfg.validate(&pspat_config::NoProfiles).unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfRange, "{e}");
}
