//! `iplen`, `tcpflags`, `setup` and `established` on rules: a packet's IP
//! length and TCP flag byte decide, each test inverted by `not`, and a
//! packet of another protocol never meets a flag test.

use pspat_classify::{Classifier, ClassifierLimits, PacketKey, Verdict};
use pspat_sched::Instant;

/// The classifier of an ipfw configuration, with the default limits.
fn classifier_of(text: &str) -> Classifier {
    super::classifier(text, &ClassifierLimits::default())
}

/// The link a packet of `proto` with `ip_len` and `flags` goes to.
fn link(c: &mut Classifier, proto: u8, ip_len: u16, flags: u8) -> u32 {
    let mut k = PacketKey::new(
        "10.0.0.1".parse().unwrap(),
        "10.0.0.2".parse().unwrap(),
        proto,
        40000,
        443,
    );
    k.ip_len = ip_len;
    k.tcp_flags = flags;
    match c.classify(Instant::ZERO, &k, u32::from(ip_len) + 14) {
        Verdict::Enqueue(p) => p.link,
        other => panic!("{other:?}"),
    }
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const RST: u8 = 0x04;
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;

#[test]
fn small_acknowledgements_take_the_priority_pipe() {
    // The classic uplink recipe: pure acknowledgements (small, ack set,
    // syn clear) ahead of the bulk.
    let mut c = classifier_of(
        "pipe 1 config bw 1Mbit/s\npipe 2 config bw 9Mbit/s\n\
         add 100 pipe 1 tcp from any to any iplen 0-80 tcpflags ack,!syn\n\
         add 200 pipe 2 ip from any to any\n",
    );
    assert!(c.reads_tcp_flags());
    for (proto, len, flags, want) in [
        (6, 52, ACK, 1),
        (6, 80, ACK | PSH, 1),
        (6, 81, ACK, 2),
        (6, 1500, ACK, 2),
        (6, 60, SYN | ACK, 2),
        (6, 60, SYN, 2),
        (6, 40, FIN, 2),
        // Not TCP: the flag byte is not read.
        (17, 52, ACK, 2),
    ] {
        assert_eq!(
            link(&mut c, proto, len, flags),
            want,
            "proto {proto} len {len} flags {flags:#x}"
        );
    }
    let counts: Vec<(u32, u64)> = c.rule_counters().map(|(r, k)| (r, k.packets)).collect();
    assert_eq!(counts, [(100, 2), (200, 6)]);
}

#[test]
fn setup_and_established_split_a_connection_s_segments() {
    let mut c = classifier_of(
        "pipe 1 config\npipe 2 config\npipe 3 config\n\
         add 100 pipe 1 tcp from any to any setup\n\
         add 200 pipe 2 tcp from any to any established\n\
         add 300 pipe 3 ip from any to any\n",
    );
    for (proto, flags, want) in [
        (6, SYN, 1),
        (6, SYN | PSH, 1),
        (6, SYN | ACK, 2),
        (6, ACK, 2),
        (6, RST, 2),
        (6, FIN | ACK, 2),
        (6, FIN, 3),
        (6, 0, 3),
        (17, ACK, 3),
    ] {
        assert_eq!(
            link(&mut c, proto, 60, flags),
            want,
            "proto {proto} flags {flags:#x}"
        );
    }
}

#[test]
fn not_before_a_header_option_admits_what_the_test_refuses() {
    let mut c = classifier_of(
        "pipe 1 config\npipe 2 config\npipe 3 config\npipe 4 config\n\
         add 100 pipe 1 ip from any to any not iplen 0-1000\n\
         add 200 pipe 2 ip from any to any not established\n\
         add 300 pipe 3 ip from any to any not tcpflags ack\n\
         add 400 pipe 4 ip from any to any\n",
    );
    for (proto, len, flags, want) in [
        (6, 1500, ACK, 1),
        (17, 1001, 0, 1),
        // Not established: TCP without ack or rst, and every other protocol.
        (6, 60, SYN, 2),
        (17, 60, 0, 2),
        (1, 60, ACK, 2),
        // Established, so past rule 200; ack set, so past rule 300.
        (6, 60, ACK, 4),
        // Established by rst; ack clear, so rule 300 admits it.
        (6, 60, RST, 3),
    ] {
        assert_eq!(
            link(&mut c, proto, len, flags),
            want,
            "proto {proto} len {len} flags {flags:#x}"
        );
    }
}

#[test]
fn a_rule_set_without_flag_tests_does_not_read_the_flags() {
    let c = classifier_of(
        "pipe 1 config\nadd 100 pipe 1 ip from any to any iplen 0-80\n\
         add 200 pipe 1 udp from any to any\n",
    );
    assert!(!c.reads_tcp_flags());
}
