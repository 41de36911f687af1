//! ipfw's header rule options: `iplen LIST`, `tcpflags SPEC`, `setup` and
//! `established`, each negated or not, read in both syntaxes, printed back
//! as ipfw prints them, refused at the offending word.

use pspat_config::header::TcpFlags;
use pspat_config::{ErrorKind, PortRange};

use crate::support::{assert_at, error_of, ipfw, plan, printed_both};

#[test]
fn iplen_and_tcpflags_are_read_printed_and_planned() {
    // The classic acknowledgement priority of an asymmetric uplink.
    let text = "pipe 1 config bw 1Mbit/s\n\
                add 100 pipe 1 tcp from any to any iplen 0-80,1500 tcpflags ack,!syn\n\
                add 200 pipe 1 tcp from any to any not iplen 40 not tcpflags fin\n";
    let cfg = ipfw(text);
    let r = &cfg.rules[0];
    assert_eq!(
        r.ip_len,
        [
            PortRange { lo: 0, hi: 80 },
            PortRange { lo: 1500, hi: 1500 }
        ]
    );
    assert_eq!(
        r.tcp_flags,
        Some(TcpFlags {
            set: 0x10,
            clear: 0x02
        })
    );
    assert!(!r.ip_len_negated && !r.tcp_flags_negated);
    assert!(cfg.rules[1].ip_len_negated && cfg.rules[1].tcp_flags_negated);
    let (printed, toml) = printed_both(&cfg);
    assert!(
        printed.contains("add 100 pipe 1 tcp from any to any iplen 0-80,1500 tcpflags !syn,ack\n"),
        "{printed}"
    );
    assert!(
        printed.contains("add 200 pipe 1 tcp from any to any not iplen 40 not tcpflags fin\n"),
        "{printed}"
    );
    assert!(toml.contains("iplen = \"0-80,1500\"\n"), "{toml}");
    assert!(toml.contains("tcpflags = \"not fin\"\n"), "{toml}");
    let p = plan(text);
    assert_eq!(p.rules[&100].ip_len.len(), 2);
    assert!(p.rules[&200].tcp_flags_negated, "{:?}", p.rules[&200]);
}

#[test]
fn setup_and_established_are_ipfw_s_words() {
    let text = "pipe 1 config\n\
                add 100 pipe 1 tcp from any to any setup\n\
                add 200 pipe 1 tcp from any to any tcpflags syn,!ack\n\
                add 300 pipe 1 tcp from any to any established\n\
                add 400 pipe 1 ip from any to any not established\n";
    let cfg = ipfw(text);
    // `setup` is `tcpflags syn,!ack`, and both print as `setup`.
    assert_eq!(cfg.rules[0].tcp_flags, Some(TcpFlags::SETUP));
    assert_eq!(cfg.rules[1].tcp_flags, Some(TcpFlags::SETUP));
    assert!(cfg.rules[2].established && !cfg.rules[2].established_negated);
    assert!(cfg.rules[3].established && cfg.rules[3].established_negated);
    let (printed, toml) = printed_both(&cfg);
    for line in [
        "add 100 pipe 1 tcp from any to any setup\n",
        "add 200 pipe 1 tcp from any to any setup\n",
        "add 300 pipe 1 tcp from any to any established\n",
        "add 400 pipe 1 ip from any to any not established\n",
    ] {
        assert!(printed.contains(line), "{line}: {printed}");
    }
    assert!(toml.contains("tcpflags = \"syn,!ack\"\n"), "{toml}");
    assert!(toml.contains("established = true\n"), "{toml}");
    assert!(toml.contains("established = false\n"), "{toml}");
    let p = plan(text);
    assert!(p.rules[&400].established_negated, "{:?}", p.rules[&400]);
}

#[test]
fn bad_lengths_and_flags_are_refused_at_their_word() {
    let at = |line: &str| format!("pipe 1 config\n{line}\n");
    let e = error_of(
        &at("add 100 pipe 1 ip from any to any iplen 80-0"),
        "cfg.ipfw",
    );
    assert_at(&e, (2, 41, "80-0"), ErrorKind::OutOfRange, "runs backwards");
    let e = error_of(
        &at("add 100 pipe 1 ip from any to any iplen 70000"),
        "cfg.ipfw",
    );
    assert_at(&e, (2, 41, "70000"), ErrorKind::OutOfRange, "exceeds 65535");
    let e = error_of(
        &at("add 100 pipe 1 ip from any to any not iplen 100-65535,0-99"),
        "cfg.ipfw",
    );
    assert_at(
        &e,
        (2, 45, "100-65535,0-99"),
        ErrorKind::Syntax,
        "'not iplen' of every length matches no packet",
    );
    let e = error_of(
        &at("add 100 pipe 1 tcp from any to any tcpflags syn,push"),
        "cfg.ipfw",
    );
    assert_at(
        &e,
        (2, 45, "syn,push"),
        ErrorKind::Syntax,
        "'push' is not a TCP flag",
    );
    let e = error_of(
        &at("add 100 pipe 1 tcp from any to any tcpflags ack,!ack"),
        "cfg.ipfw",
    );
    assert_at(
        &e,
        (2, 45, "ack,!ack"),
        ErrorKind::Syntax,
        "both set and clear",
    );
    let e = error_of(
        &at("add 100 pipe 1 tcp from any to any setup tcpflags ack"),
        "cfg.ipfw",
    );
    assert_at(&e, (2, 42, "tcpflags"), ErrorKind::Duplicate, "given twice");
    let e = error_of(
        &at("add 100 pipe 1 tcp from any to any tcpflags"),
        "cfg.ipfw",
    );
    assert_at(&e, (2, 36, "tcpflags"), ErrorKind::Syntax, "needs a value");
    let e = error_of(
        "[[pipe]]\nnumber = 1\n\n[[rule]]\naction = \"pipe 1\"\nestablished = \"yes\"\n",
        "cfg.toml",
    );
    assert_eq!((e.line, e.kind), (6, ErrorKind::Syntax), "{e}");
    assert!(e.message.contains("true"), "{e}");
    // Validation refuses a code-built condition no packet meets.
    let mut cfg = ipfw("pipe 1 config\nadd 100 pipe 1 tcp from any to any setup\n");
    cfg.rules[0].tcp_flags = Some(TcpFlags {
        set: 0x02,
        clear: 0x02,
    });
    let e = cfg.validate(&pspat_config::NoProfiles).unwrap_err();
    assert!(e.to_string().contains("both set and clear"), "{e}");
    // And a negated list of lengths that holds them all.
    let mut cfg = ipfw("pipe 1 config\nadd 100 pipe 1 ip from any to any not iplen 0-100\n");
    cfg.rules[0].ip_len.push(PortRange { lo: 50, hi: 65535 });
    let e = cfg.validate(&pspat_config::NoProfiles).unwrap_err();
    assert!(e.to_string().contains("'not iplen' of every length"), "{e}");
}
