//! ipfw's `dscp LIST` and `not dscp LIST` rule options: names and numbers
//! read in both syntaxes, printed as a sorted set of names, refused at the
//! value.

use pspat_config::ErrorKind;

use crate::support::{assert_at, error_of, ipfw, plan, printed_both};

#[test]
fn dscp_lists_are_read_normalised_printed_and_planned() {
    let text =
        "pipe 1 config\nadd 100 pipe 1 udp from any to any dscp EF,10,af41,46,cs0 dst-port 5060\n";
    let cfg = ipfw(text);
    assert_eq!(cfg.rules[0].dscp, [0, 10, 34, 46]);
    let (printed, toml) = printed_both(&cfg);
    assert!(
        printed.contains("add 100 pipe 1 udp from any to any dst-port 5060 dscp be,af11,af41,ef\n"),
        "{printed}"
    );
    assert!(toml.contains("dscp = \"be,af11,af41,ef\"\n"), "{toml}");
    assert_eq!(plan(text).rules[&100].dscp, [0, 10, 34, 46]);
}

#[test]
fn not_dscp_is_read_printed_and_planned_in_both_syntaxes() {
    let text = "pipe 1 config\nadd 100 pipe 1 ip from any to any not dscp ef,cs6\n";
    let cfg = ipfw(text);
    assert_eq!(
        (cfg.rules[0].dscp.as_slice(), cfg.rules[0].dscp_negated),
        (&[46u8, 48][..], true)
    );
    let (printed, toml) = printed_both(&cfg);
    assert!(
        printed.contains("add 100 pipe 1 ip from any to any not dscp ef,cs6\n"),
        "{printed}"
    );
    assert!(toml.contains("dscp = \"not ef,cs6\"\n"), "{toml}");
    let p = plan(text);
    assert!(p.rules[&100].dscp_negated, "{:?}", p.rules[&100]);
    // Validation refuses a code-built negation of every code point.
    let mut all = cfg.clone();
    all.rules[0].dscp = (0..64).collect();
    let e = all.validate(&pspat_config::NoProfiles).unwrap_err();
    assert!(
        e.to_string()
            .contains("'not dscp' of every code point matches no packet"),
        "{e}"
    );
}

#[test]
fn a_bad_code_point_or_a_negation_of_every_one_is_refused_at_its_word() {
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any dscp ef,64\n",
        "cfg.ipfw",
    );
    assert_at(&e, (2, 40, "ef,64"), ErrorKind::OutOfRange, "0..=63");
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any dscp af44\n",
        "cfg.ipfw",
    );
    assert_at(
        &e,
        (2, 40, "af44"),
        ErrorKind::Syntax,
        "not a DiffServ code point",
    );
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any dscp ef,\n",
        "cfg.ipfw",
    );
    assert_at(
        &e,
        (2, 40, "ef,"),
        ErrorKind::Syntax,
        "not a DiffServ code point",
    );
    let all: Vec<String> = (0..64).map(|c| c.to_string()).collect();
    let line = format!(
        "add 100 pipe 1 ip from any to any not dscp {}\n",
        all.join(",")
    );
    let e = error_of(&format!("pipe 1 config\n{line}"), "cfg.ipfw");
    assert_at(
        &e,
        (2, 44, all.join(",").as_str()),
        ErrorKind::Syntax,
        "'not dscp' of every code point matches no packet",
    );
    let e = error_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any dscp\n",
        "cfg.ipfw",
    );
    assert_at(&e, (2, 35, "dscp"), ErrorKind::Syntax, "needs a value");
    let e = error_of(
        "[[pipe]]\nnumber = 1\n\n[[rule]]\naction = \"pipe 1\"\ndscp = \"ef,99\"\n",
        "cfg.toml",
    );
    assert_eq!((e.line, e.kind), (6, ErrorKind::OutOfRange), "{e}");
}
