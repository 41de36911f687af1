//! `prob P` on a rule: the share of packets it takes, its counters, the
//! replay from the seed, and the walk on to the next rule.

use std::net::IpAddr;

use pspat_classify::{Classifier, ClassifierLimits, PacketKey, Verdict};
use pspat_sched::Instant;

/// The classifier of an ipfw configuration, with the default limits.
fn classifier(text: &str) -> Classifier {
    super::classifier(text, &ClassifierLimits::default())
}

/// A UDP packet's key from port 5000 to `dport`.
fn udp_to(dport: u16) -> PacketKey {
    PacketKey::new(
        "10.0.0.1".parse::<IpAddr>().unwrap(),
        "10.0.0.2".parse::<IpAddr>().unwrap(),
        17,
        5000,
        dport,
    )
}

/// The link each of `n` UDP packets to port 80 goes to (0 for anything but
/// an enqueue).
fn links(c: &mut Classifier, n: u32) -> Vec<u32> {
    let key = udp_to(80);
    (0..n)
        .map(|_| match c.classify(Instant::ZERO, &key, 100) {
            Verdict::Enqueue(p) => p.link,
            _ => 0,
        })
        .collect()
}

const SPLIT: &str = "pipe 1 config delay 10ms\n\
                     pipe 2 config delay 50ms\n\
                     seed 7\n\
                     add 100 prob 0.3 pipe 1 udp from any to any dst-port 80\n\
                     add 200 pipe 2 ip from any to any\n";

#[test]
fn a_prob_rule_takes_its_share_and_the_rest_walk_on() {
    let n = 100_000;
    let mut c = classifier(SPLIT);
    let got = links(&mut c, n);
    let first = got.iter().filter(|&&l| l == 1).count() as f64;
    assert_eq!(
        got.iter().filter(|&&l| l == 2).count() as f64,
        f64::from(n) - first
    );
    // Within the binomial's 99.9% interval (3.29 standard deviations).
    let (mean, sd) = (0.3 * f64::from(n), (f64::from(n) * 0.3 * 0.7).sqrt());
    assert!((first - mean).abs() <= 3.29 * sd, "{first} of {n}");
    // Each rule counts what it took.
    let counts: Vec<(u32, u64)> = c.rule_counters().map(|(r, k)| (r, k.packets)).collect();
    assert_eq!(
        counts,
        [(100, first as u64), (200, u64::from(n) - first as u64)]
    );
}

#[test]
fn the_seed_replays_the_draws_and_another_seed_does_not() {
    let a = links(&mut classifier(SPLIT), 1000);
    assert_eq!(a, links(&mut classifier(SPLIT), 1000));
    let b = links(&mut classifier(&SPLIT.replace("seed 7", "seed 8")), 1000);
    assert_ne!(a, b);
    // A new seed given to a running classifier: its draws from the start.
    let mut c = classifier(SPLIT);
    links(&mut c, 300);
    c.reseed_rules(8);
    assert_eq!(links(&mut c, 1000), b);
}

#[test]
fn the_draw_is_made_only_for_packets_the_rule_admits() {
    // Packets to another port never reach the draw: the same packets to
    // port 80 after them are decided as if they had not been there.
    let mut c = classifier(SPLIT);
    let other = udp_to(81);
    for _ in 0..500 {
        assert!(
            matches!(c.classify(Instant::ZERO, &other, 100), Verdict::Enqueue(p) if p.link == 2)
        );
    }
    assert_eq!(links(&mut c, 1000), links(&mut classifier(SPLIT), 1000));
}

#[test]
fn prob_1_matches_every_packet() {
    let mut c = classifier(&SPLIT.replace("prob 0.3", "prob 1"));
    assert!(links(&mut c, 1000).iter().all(|&l| l == 1));
}
