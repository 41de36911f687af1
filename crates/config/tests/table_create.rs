//! Tables as modern ipfw writes them: `table N create [type addr] ...`
//! before the entries, and several entries on one `add`.

use pspat_config::{parse_control, ControlRequest, ErrorKind};

use crate::support::{assert_at, error_of, ipfw, plan, printed_both};

#[test]
fn a_created_table_exists_empty_and_takes_entries_after() {
    let text = "table 1 create type addr valtype pipe algo addr:radix\n\
                table 2 create\n\
                table 1 add 10.0.0.0/8 1 192.168.0.0/16 2 2001:db8::/32 0x3\n\
                pipe 1 config bw 1Mbit/s\npipe 2 config bw 2Mbit/s\npipe 3 config bw 3Mbit/s\n\
                add 100 pipe tablearg ip from table(1) to any\n\
                add 200 pipe 1 ip from table(2) to any\n";
    let cfg = ipfw(text);
    let entries: Vec<_> = cfg
        .tables
        .iter()
        .map(|t| (t.number, t.entries.len()))
        .collect();
    assert_eq!(entries, [(1, 3), (2, 0)]);
    let values: Vec<_> = cfg.tables[0].entries.iter().map(|e| e.value).collect();
    assert_eq!(values, [1, 2, 3]);
    // The normal form writes `create` only for a table without entries.
    let (printed, toml) = printed_both(&cfg);
    assert!(printed.contains("table 2 create\n"), "{printed}");
    assert!(!printed.contains("table 1 create"), "{printed}");
    assert!(
        printed.contains("table 1 add 192.168.0.0/16 2\n"),
        "{printed}"
    );
    assert!(toml.contains("[[table]]\nnumber = 2\n"), "{toml}");
    // An empty table is a table: `table(2)` refers to something, and
    // matches nothing until it has entries.
    let p = plan(text);
    assert!(p.tables[&2].is_empty());
    assert_eq!(p.tables[&1].len(), 3);
    // A value may be left out between prefixes (0, as on its own line).
    let cfg = ipfw("table 3 add 10.1.0.0/16 10.2.0.0/16 7\n");
    let values: Vec<_> = cfg.tables[0].entries.iter().map(|e| e.value).collect();
    assert_eq!(values, [0, 7]);
    // On the control socket, a create is a configuration line.
    assert!(matches!(
        parse_control("ipfw table 9 create type addr", "ctl").unwrap(),
        ControlRequest::Configure(c) if c.tables.len() == 1 && c.tables[0].entries.is_empty()
    ));
}

#[test]
fn a_table_created_twice_or_of_another_type_is_refused_at_the_word() {
    let e = error_of("table 1 add 10.0.0.0/8 1\ntable 1 create\n", "cfg.ipfw");
    assert_at(&e, (2, 7, "1"), ErrorKind::Duplicate, "exists already");
    let e = error_of("table 1 create type iface\n", "cfg.ipfw");
    assert_at(
        &e,
        (1, 21, "iface"),
        ErrorKind::UnknownKeyword,
        "allowed: addr, cidr",
    );
    let e = error_of("table 1 create valtype dscp\n", "cfg.ipfw");
    assert_at(
        &e,
        (1, 24, "dscp"),
        ErrorKind::UnknownKeyword,
        "allowed: legacy, pipe",
    );
    let e = error_of("table 1 create missing\n", "cfg.ipfw");
    assert_at(
        &e,
        (1, 16, "missing"),
        ErrorKind::UnknownKeyword,
        "allowed: type, valtype, algo",
    );
    let e = error_of("table 1 add 10.0.0.0/8 1 nonsense\n", "cfg.ipfw");
    assert_eq!(
        (e.line, e.column, e.token.as_str()),
        (1, 26, "nonsense"),
        "{e}"
    );
    let e = error_of(
        "[[table]]\nnumber = 1\n\n[[table]]\nnumber = 1\n",
        "cfg.toml",
    );
    assert_eq!((e.line, e.kind), (5, ErrorKind::Duplicate), "{e}");
}
