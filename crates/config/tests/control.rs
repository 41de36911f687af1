use pspat_config::{parse_control, parse_ipfw, ControlRequest, Deletable, ErrorKind, Listing};

#[test]
fn read_only_and_control_commands() {
    let show = |what, number| ControlRequest::Show { what, number };
    assert_eq!(
        parse_control("pipe show", "ctl").unwrap(),
        show(Listing::Pipes, None)
    );
    assert_eq!(
        parse_control("ipfw -q queue show", "ctl").unwrap(),
        show(Listing::Queues, None)
    );
    assert_eq!(
        parse_control("sched show 4", "ctl").unwrap(),
        show(Listing::Scheds, Some(4))
    );
    assert_eq!(
        parse_control("pipe 4 show", "ctl").unwrap(),
        show(Listing::Pipes, Some(4))
    );
    assert_eq!(
        parse_control("show rules", "ctl").unwrap(),
        show(Listing::Rules, None)
    );
    assert_eq!(
        parse_control("show", "ctl").unwrap(),
        show(Listing::Rules, None)
    );
    assert_eq!(
        parse_control("pipe 2 delete", "ctl").unwrap(),
        ControlRequest::Delete {
            what: Deletable::Pipe,
            numbers: vec![2]
        }
    );
    assert_eq!(
        parse_control("delete 100 200", "ctl").unwrap(),
        ControlRequest::Delete {
            what: Deletable::Rule,
            numbers: vec![100, 200]
        }
    );
    assert_eq!(
        parse_control("flush", "ctl").unwrap(),
        ControlRequest::Flush(Listing::Rules)
    );
    assert_eq!(
        parse_control("pipe flush", "ctl").unwrap(),
        ControlRequest::Flush(Listing::Pipes)
    );
    assert_eq!(
        parse_control("zero", "ctl").unwrap(),
        ControlRequest::Zero(Vec::new())
    );
    assert_eq!(
        parse_control("ipfw zero 100 200", "ctl").unwrap(),
        ControlRequest::Zero(vec![100, 200])
    );
    let e = parse_control("zero rules", "ctl").unwrap_err();
    assert_eq!(e.token, "rules");
    let e = parse_ipfw("zero\npipe 1 config bw 1Mbit/s", "cfg.ipfw").unwrap_err();
    assert_eq!((e.line, e.kind), (1, ErrorKind::NotConfiguration));
    match parse_control("pipe 1 config bw 1Mbit/s", "ctl").unwrap() {
        ControlRequest::Configure(cfg) => assert_eq!(cfg.pipes[0].link.bw, Some(1_000_000)),
        other => panic!("expected Configure, got {other:?}"),
    }
    let e = parse_control("pipe show extra words", "ctl").unwrap_err();
    assert_eq!(e.token, "extra");
    assert!(parse_control("", "ctl").is_err());
}

#[test]
fn control_commands_are_not_configuration_but_a_flush_preamble_is_accepted() {
    let e = parse_ipfw("pipe 1 config bw 1Mbit/s\npipe show", "cfg.ipfw").unwrap_err();
    assert_eq!(
        (e.line, e.column, e.kind),
        (2, 1, ErrorKind::NotConfiguration)
    );
    let cfg = parse_ipfw(
        "ipfw -q flush\nipfw -q pipe flush\npipe 1 config bw 1Mbit/s",
        "cfg.ipfw",
    )
    .unwrap();
    assert_eq!(cfg.pipes.len(), 1);
    let e = parse_ipfw("pipe 1 config bw 1Mbit/s\nflush", "cfg.ipfw").unwrap_err();
    assert_eq!(e.line, 2);
}

#[test]
fn configuration_lines_with_not_before_options_parse_and_print_back() {
    for line in [
        "add 100 pipe 1 not udp from any to any not dst-port 80,443",
        "add 200 pipe 1 tcp from any to any not src-port 1000-2000 in not recv eth0",
        "add 300 pipe 1 ip from any to not 10.0.0.0/8,192.168.0.0/16 not via eth*",
    ] {
        let ControlRequest::Configure(cfg) = parse_control(line, "ctl").unwrap() else {
            panic!("{line} is configuration");
        };
        assert_eq!(pspat_config::rule_line(&cfg.rules[0]), line);
    }
    // A bad `not` in a control line is named at its column.
    let e = parse_control("add 100 pipe 1 ip from any to any not not via eth0", "ctl").unwrap_err();
    assert_eq!((e.line, e.column, e.token.as_str()), (1, 39, "not"), "{e}");
    assert_eq!(e.kind, ErrorKind::Syntax);
}

#[test]
fn ecn_is_a_configuration_flag_on_the_control_socket() {
    for (line, pipe) in [
        ("pipe 1 config ecn", true),
        ("ipfw pipe 1 config red 0.002/30/80/0.1 ecn", true),
        ("pipe 1 config red 0.002/30/80/0.1", false),
    ] {
        let ControlRequest::Configure(cfg) = parse_control(line, "ctl").unwrap() else {
            panic!("{line} is configuration");
        };
        assert_eq!(cfg.pipes[0].queue.ecn, pipe, "{line}");
    }
    let ControlRequest::Configure(cfg) =
        parse_control("queue 4 config ecn sched 1 gred 0.002/30/80/0.1", "ctl").unwrap()
    else {
        panic!("a queue line is configuration");
    };
    assert!(cfg.queues[0].params.ecn);
    let e = parse_control("sched 1 config ecn", "ctl").unwrap_err();
    assert_eq!((e.column, e.kind), (16, ErrorKind::UnknownKeyword), "{e}");
}

#[test]
fn lossecn_is_a_configuration_flag_on_the_control_socket() {
    for (line, pipe) in [
        ("pipe 1 config lossecn", true),
        ("ipfw pipe 1 config plr 1% lossecn", true),
        ("pipe 1 config plr 0.01", false),
    ] {
        let ControlRequest::Configure(cfg) = parse_control(line, "ctl").unwrap() else {
            panic!("{line} is configuration");
        };
        assert_eq!(cfg.pipes[0].queue.lossecn, pipe, "{line}");
        assert!(!cfg.pipes[0].queue.ecn, "{line}");
    }
    let ControlRequest::Configure(cfg) =
        parse_control("queue 4 config lossecn sched 1 gemodel 0.01", "ctl").unwrap()
    else {
        panic!("a queue line is configuration");
    };
    assert!(cfg.queues[0].params.lossecn);
    let e = parse_control("sched 1 config lossecn", "ctl").unwrap_err();
    assert_eq!((e.column, e.kind), (16, ErrorKind::UnknownKeyword), "{e}");
}

#[test]
fn codel_is_configuration_on_the_control_socket() {
    use pspat_config::Codel;
    for (line, codel) in [
        ("pipe 1 config codel", Some(Codel::default())),
        (
            "ipfw pipe 1 config bw 1Mbit/s codel interval 20ms ecn",
            Some(Codel {
                interval_us: 20_000,
                ecn: true,
                ..Codel::default()
            }),
        ),
        ("pipe 1 config red 0.002/30/80/0.1", None),
    ] {
        let ControlRequest::Configure(cfg) = parse_control(line, "ctl").unwrap() else {
            panic!("{line} is configuration");
        };
        assert_eq!(cfg.pipes[0].queue.codel, codel, "{line}");
    }
    let ControlRequest::Configure(cfg) =
        parse_control("queue 4 config codel target 1ms sched 1", "ctl").unwrap()
    else {
        panic!("a queue line is configuration");
    };
    assert_eq!(cfg.queues[0].params.codel.map(|c| c.target_us), Some(1_000));
    let e = parse_control("sched 1 config codel", "ctl").unwrap_err();
    assert_eq!((e.column, e.kind), (16, ErrorKind::UnknownKeyword), "{e}");
    let e = parse_control("pipe 1 config codel red 0.002/30/80/0.1", "ctl").unwrap_err();
    assert_eq!(
        (e.column, e.token.as_str(), e.kind),
        (21, "red", ErrorKind::Duplicate),
        "{e}"
    );
}

#[test]
fn table_delete_and_destroy_are_control_commands() {
    let prefix = |s: &str| s.parse::<pspat_config::Prefix>().unwrap();
    assert_eq!(
        parse_control("ipfw table 3 delete 10.0.0.0/8 2001:db8::/32", "ctl").unwrap(),
        ControlRequest::TableDelete {
            table: 3,
            prefixes: vec![prefix("10.0.0.0/8"), prefix("2001:db8::/32")]
        }
    );
    assert_eq!(
        parse_control("table 3 destroy", "ctl").unwrap(),
        ControlRequest::TableDestroy(3)
    );
    assert_eq!(
        parse_control("table 3 flush", "ctl").unwrap(),
        ControlRequest::Flush(Listing::Table(3))
    );
    let e = parse_control("table 3 delete", "ctl").unwrap_err();
    assert_eq!((e.column, e.kind), (9, ErrorKind::Syntax), "{e}");
    let e = parse_control("table 3 delete 10.0.0.0/33", "ctl").unwrap_err();
    assert_eq!(e.token, "10.0.0.0/33", "{e}");
    let e = parse_control("table 3 destroy now", "ctl").unwrap_err();
    assert_eq!(e.token, "now", "{e}");
    // Not configuration: in a file, each is refused at its first word.
    let e = parse_ipfw("table 3 destroy\n", "cfg.ipfw").unwrap_err();
    assert_eq!((e.line, e.kind), (1, ErrorKind::NotConfiguration), "{e}");
}
