//! `pspat run` with RED's `ecn` end to end: the daemon between three
//! namespaces it does not own (a sender, the bridge, a receiver, joined by
//! two veth pairs), fed by this test; UDP datagrams reach a socket of the
//! receiver's own stack, whose counters say how each arrived. Every name
//! carries the `pspat-` prefix and every address is in 10.199.0.0/16.
//! Skipped, with the reason printed, without root.
//!
//! Raw frames (AF_PACKET), every other one ECN-capable (ECT(0) in its IPv4
//! header), are sent faster than the pipe's link carries them, into a queue
//! whose RED (`w_q` 1: the average is the queue's length) has `ecn`. RED's
//! decisions then fall on both kinds: the ECN-capable datagrams all arrive,
//! those RED picked marked Congestion Experienced, with a header checksum
//! the receiver accepts (its `Ip InHdrErrors` stays 0 and its `IpExt
//! InCEPkts` equals the pipe's `marked`), and only datagrams that are not
//! ECN-capable are dropped, for `red`. The same with tc-netem's `ecn`
//! (`plr 0.3 lossecn`): the losses fall on both kinds; the ECN-capable
//! datagrams picked arrive marked, the others picked are dropped
//! (`random_loss`). And with CoDel's `ecn` (`codel ecn`): once the queue's
//! delay has stayed above CoDel's target, its decisions fall on both kinds
//! as they leave the queue; the ECN-capable datagrams arrive marked, the
//! others are dropped (`codel`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

mod common;

use common::run_bed::{
    check_conservation, check_drop_reasons, ctl, finish, metrics_addr, pace, payload_seq, pipe,
    realtime_ns, send_all, Bed,
};

/// The destination port of the test's datagrams.
const PORT: u16 = 7310;
/// Where the IPv4 header starts in a [`Bed::frame`].
const IP: usize = 14;

/// `frame` with its IPv4 ECN field set to `ecn` and its header checksum
/// computed again.
fn with_ecn(mut frame: Vec<u8>, ecn: u8) -> Vec<u8> {
    frame[IP + 1] = (frame[IP + 1] & !3) | ecn;
    let checksum = etherparse::Ipv4HeaderSlice::from_slice(&frame[IP..])
        .expect("an IPv4 header")
        .to_header()
        .calc_header_checksum();
    frame[IP + 10..IP + 12].copy_from_slice(&checksum.to_be_bytes());
    frame
}

/// What one run of `n` datagrams, every other one ECN-capable (odd
/// sequence numbers), through `config` gave.
struct Outcome {
    doc: serde_json::Value,
    /// Sequence numbers that arrived.
    got: Vec<u32>,
    /// The receiver's counters' growth over the run.
    delta: BTreeMap<String, u64>,
    /// `pspat ctl pipe show 1` while the daemon ran.
    shown: String,
    /// The metrics while the daemon ran.
    metrics: String,
}

/// Runs `config` on a bed of its own and sends `n` numbered datagrams of
/// 250 bytes through it, 20 every 5 ms, every other one ECT(0), then lets
/// the queue drain for `drain`; `None` without root.
fn run(tag: &str, subnet: u8, config: &str, n: u32, drain: Duration) -> Option<Outcome> {
    let bed = Bed::new(tag, subnet)?;
    bed.accept_own_frames();
    let sink = bed.udp_sink(PORT);
    let before = bed.receiver_counters();
    let (mut child, log) = bed.start(config, &["--metrics", "127.0.0.1:0"]);
    let addr = metrics_addr(&log, &mut child);
    let mut tx = bed.sender_socket();
    let start = Instant::now();
    for round in 0..n / 20 {
        let batch: Vec<Vec<u8>> = (round * 20..(round + 1) * 20)
            .map(|seq| {
                with_ecn(
                    bed.frame(PORT, seq, realtime_ns(), 250),
                    (seq % 2) as u8 * 2,
                )
            })
            .collect();
        send_all(&mut tx, &batch);
        pace(start, Duration::from_millis(5), round);
    }
    std::thread::sleep(drain);
    let shown = ctl(&bed.socket(), &["pipe", "show", "1"]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    let (status, metrics) = bed.http_get(&addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let doc = finish(child);
    let got = sink
        .finish()
        .iter()
        .map(|p| payload_seq(p).expect("a numbered payload"))
        .collect();
    let after = bed.receiver_counters();
    let delta = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .collect();
    Some(Outcome {
        doc,
        got,
        delta,
        shown,
        metrics,
    })
}

/// Checks what every ECN test shares, and returns the pipe's `marked` and
/// drops: the ECN-capable datagrams all arrive, those marked with CE in a
/// header the receiver accepts, and only the others are dropped, for
/// `reason`.
fn check_marks(out: &Outcome, n: u32, reason: &str) -> (u64, u64) {
    check_conservation(&out.doc);
    let p1 = pipe(&out.doc, 1);
    let marked = p1["marked"].as_u64().expect("the pipe's marked");
    let dropped = p1["dropped_total"].as_u64().expect("the pipe's drops");
    check_drop_reasons(p1, &[reason]);
    let delta = |k: &str| out.delta.get(k).copied().unwrap_or(0);
    let (odd, even) = (
        out.got.iter().filter(|s| *s % 2 == 1).count() as u64,
        out.got.iter().filter(|s| *s % 2 == 0).count() as u64,
    );
    println!(
        "{n} sent, {} arrived ({odd} ECN-capable, {even} not); daemon: marked {marked}, \
         dropped {dropped}; receiver: InCEPkts {}, InECT0Pkts {}, InNoECTPkts {}, InHdrErrors {}",
        out.got.len(),
        delta("IpExt.InCEPkts"),
        delta("IpExt.InECT0Pkts"),
        delta("IpExt.InNoECTPkts"),
        delta("Ip.InHdrErrors"),
    );
    assert!(
        marked > 10,
        "marked {marked}: nothing acted on the ECN-capable datagrams"
    );
    assert!(dropped > 10, "dropped {dropped}");
    assert_eq!(odd, u64::from(n / 2), "every ECN-capable datagram arrives");
    assert_eq!(
        even + dropped,
        u64::from(n / 2),
        "only the others are dropped"
    );
    // Marked in the header the receiver reads, with a checksum it accepts.
    assert_eq!(delta("Ip.InHdrErrors"), 0);
    assert_eq!(delta("IpExt.InCEPkts"), marked);
    assert_eq!(delta("IpExt.InECT0Pkts") + marked, odd);
    assert_eq!(out.doc["totals"]["ce_marked"].as_u64(), Some(marked));
    assert_eq!(out.doc["totals"]["ce_unmarkable"], 0);
    assert!(
        out.shown.contains(&format!("marked CE {marked} pkt")),
        "{}",
        out.shown
    );
    // The metrics were read once the queue had drained: every mark is in.
    let want = format!("pspat_pipe_marked_total{{pipe=\"1\"}} {marked}");
    assert!(
        out.metrics.contains(&want),
        "{want} not in\n{}",
        out.metrics
    );
    (marked, dropped)
}

#[test]
fn run_red_ecn_marks_the_ecn_capable_datagrams_and_drops_only_the_others() {
    let n = 600u32;
    // 2 Mbit/s carries about 1 000 of these 250-byte frames a second; they
    // come at 4 000 a second.
    let config = format!(
        "seed 5\n\
         pipe 1 config bw 2Mbit/s queue 1000 red 1/5/20/0.2 ecn\n\
         add 100 pipe 1 udp from any to any dst-port {PORT}\n\
         default deny\n"
    );
    // A 2 Mbit/s queue drains at about 1 000 frames a second.
    let Some(out) = run("ecn", 244, &config, n, Duration::from_millis(800)) else {
        return;
    };
    check_marks(&out, n, "red");
    assert!(out.shown.contains("red 1/5/20/0.2 ecn"), "{}", out.shown);
}

#[test]
fn run_lossecn_marks_the_ecn_capable_datagrams_a_loss_picks() {
    // tc-netem's `loss 30% ecn`.
    let n = 600u32;
    let config = format!(
        "seed 5\n\
         pipe 1 config plr 0.3 lossecn\n\
         add 100 pipe 1 udp from any to any dst-port {PORT}\n\
         default deny\n"
    );
    let Some(out) = run("lossecn", 243, &config, n, Duration::from_millis(800)) else {
        return;
    };
    let (marked, dropped) = check_marks(&out, n, "random_loss");
    // Each half picked at 30%, within its binomial 99.9% interval.
    let (mean, sd) = (
        f64::from(n / 2) * 0.3,
        (f64::from(n / 2) * 0.3 * 0.7).sqrt(),
    );
    for (what, k) in [("marked", marked), ("dropped", dropped)] {
        assert!(
            (k as f64 - mean).abs() <= 3.2905 * sd,
            "{what} {k}, expected {mean} ± {:.0}",
            3.2905 * sd
        );
    }
    assert!(out.shown.contains("lossecn"), "{}", out.shown);
}

#[test]
fn run_codel_ecn_marks_the_ecn_capable_datagrams_it_would_drop() {
    // 1 600 frames at 4 000 a second into 2 Mbit/s (about 1 000 a second):
    // the queue's delay grows to about 1.2 s and stays above CoDel's 5 ms
    // target until it drains, about 1.6 s in all, long enough for some
    // sixty decisions (the n-th comes 100 ms/√n after the one before, so
    // n decisions take about 200 ms·√n), half of them on each kind.
    let n = 1_600u32;
    let config = format!(
        "seed 5\n\
         pipe 1 config bw 2Mbit/s queue 10000 codel ecn\n\
         add 100 pipe 1 udp from any to any dst-port {PORT}\n\
         default deny\n"
    );
    let Some(out) = run("codel", 242, &config, n, Duration::from_millis(2_000)) else {
        return;
    };
    check_marks(&out, n, "codel");
    assert!(
        out.shown.contains("codel target 5ms interval 100ms ecn"),
        "{}",
        out.shown
    );
}
