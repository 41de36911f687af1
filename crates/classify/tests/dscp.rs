//! `dscp LIST` on a rule: a packet matches when its code point is listed;
//! `not dscp LIST`: when it is not.

use pspat_classify::{Classifier, ClassifierLimits, PacketKey, Verdict};
use pspat_sched::Instant;

/// The classifier of an ipfw configuration, with the default limits.
fn classifier_of(text: &str) -> Classifier {
    super::classifier(text, &ClassifierLimits::default())
}

#[test]
fn a_dscp_rule_takes_the_listed_code_points_only() {
    let mut c = classifier_of(
        "pipe 1 config bw 1Mbit/s\npipe 2 config bw 9Mbit/s\n\
         add 100 pipe 1 udp from any to any dscp ef,af41,7\n\
         add 200 pipe 2 ip from any to any\n",
    );
    let link = |c: &mut Classifier, proto: u8, dscp: u8| {
        let mut k = PacketKey::new(
            "10.0.0.1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
            proto,
            5000,
            5060,
        );
        k.dscp = dscp;
        match c.classify(Instant::ZERO, &k, 100) {
            Verdict::Enqueue(p) => p.link,
            other => panic!("{other:?}"),
        }
    };
    for (proto, dscp, want) in [
        (17, 46, 1),
        (17, 34, 1),
        (17, 7, 1),
        (17, 0, 2),
        (17, 47, 2),
        (17, 35, 2),
        // Only the low six bits are a code point.
        (17, 64 + 46, 1),
        // The rule's other conditions still hold.
        (6, 46, 2),
    ] {
        assert_eq!(link(&mut c, proto, dscp), want, "proto {proto} dscp {dscp}");
    }
    let counts: Vec<(u32, u64)> = c.rule_counters().map(|(r, k)| (r, k.packets)).collect();
    assert_eq!(counts, [(100, 4), (200, 4)]);
}

#[test]
fn a_not_dscp_rule_takes_every_code_point_but_the_listed_ones() {
    let mut c = classifier_of(
        "pipe 1 config bw 1Mbit/s\npipe 2 config bw 9Mbit/s\n\
         add 100 pipe 1 ip from any to any not dscp ef,be\n\
         add 200 pipe 2 ip from any to any\n",
    );
    for dscp in 0..64u8 {
        let mut k = PacketKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            17,
            5000,
            5060,
        );
        k.dscp = dscp;
        let want = if dscp == 46 || dscp == 0 { 2 } else { 1 };
        match c.classify(Instant::ZERO, &k, 100) {
            Verdict::Enqueue(p) => assert_eq!(p.link, want, "dscp {dscp}"),
            other => panic!("{other:?}"),
        }
    }
    let counts: Vec<(u32, u64)> = c.rule_counters().map(|(r, k)| (r, k.packets)).collect();
    assert_eq!(counts, [(100, 62), (200, 2)]);
}
