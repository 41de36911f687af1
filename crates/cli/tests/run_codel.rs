//! CoDel against bufferbloat through `pspat run`, end to end: the daemon
//! between three namespaces it does not own (a sender, the bridge, a
//! receiver, joined by two veth pairs). One bulk TCP stream fills a
//! 10 Mbit/s pipe with a buffer of 1000 packets (1.2 s of full-size frames)
//! while `ping` measures the round trip through the same pipe: with
//! drop-tail the pings wait behind the whole buffer; with `codel` the queue
//! is held near CoDel's 5 ms target and the round trip stays short, while
//! the stream still fills the link. Every name carries the `pspat-` prefix
//! and every address is in 10.199.0.0/16. PIE and FQ-PIE are run the same
//! way (the second test). Skipped, with the reason printed, without root or
//! without `ping`.

use std::process::Command;
use std::time::Duration;

mod common;

use common::run_bed::{
    check_conservation, finish, ping_missing, ping_summary, ping_through, pipe, Bed,
};
use common::traffic::{send_tcp, tcp_receiver};

/// What one bulk stream with pings beside it gave.
struct Outcome {
    /// The stream's goodput, bit/s.
    goodput: f64,
    /// The pings' mean and largest round trip, ms.
    rtt_avg: f64,
    rtt_max: f64,
    /// The daemon's JSON report.
    doc: serde_json::Value,
}

/// Runs `config` on a bed of its own: 6 s of one TCP stream from the
/// sender to the receiver, and 15 pings 0.2 s apart from 1.5 s in; `None`
/// without root.
fn bulk_with_pings(tag: &str, subnet: u8, config: &str) -> Option<Outcome> {
    let bed = Bed::new(tag, subnet)?;
    // Segments as the wire carries them.
    bed.host_offloads_off();
    // Reno in the sender's namespace (its own setting): its slow start
    // runs until the buffer overflows, as a long transfer would; CUBIC's
    // HyStart leaves slow start on the first rise of delay and then grows
    // its window for seconds before the buffer fills, longer than this test.
    let reno = Command::new("ip")
        .args(["netns", "exec", bed.sender.name()])
        .args(["sysctl", "-qw", "net.ipv4.tcp_congestion_control=reno"])
        .status()
        .expect("sysctl runs");
    assert!(reno.success(), "Reno in the sender's namespace");
    let (child, _log) = bed.start(config, &[]);
    let receiver = tcp_receiver(bed.receiver.name(), "14s");
    let dst = format!("10.199.{subnet}.2");
    let (received, pings) = std::thread::scope(|s| {
        let pings = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(1_500));
            ping_through(&bed, subnet, 15)
        });
        let (_, received) = send_tcp(bed.sender.name(), &dst, "6s", receiver);
        (received, pings.join().expect("ping thread"))
    });
    let pid = child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let doc = finish(child);
    check_conservation(&doc);
    let [_, rtt_avg, rtt_max, _] = ping_summary(&pings.0);
    Some(Outcome {
        goodput: received["bps"].as_f64().expect("bps"),
        rtt_avg,
        rtt_max,
        doc,
    })
}

#[test]
fn run_codel_keeps_the_round_trip_short_under_a_bulk_stream() {
    if ping_missing() {
        return;
    }
    let config = |aqm: &str| {
        format!(
            "pipe 1 config bw 10Mbit/s queue 1000 {aqm}\n\
             add 100 pipe 1 ip from any to any\n"
        )
    };
    let Some(tail) = bulk_with_pings("bloat", 241, &config("")) else {
        return;
    };
    let Some(codel) = bulk_with_pings("codel", 240, &config("codel")) else {
        return;
    };
    let drops = |o: &Outcome, reason: &str| -> u64 {
        pipe(&o.doc, 1)["dropped"][reason].as_u64().unwrap_or(0)
    };
    println!(
        "TCP through bw 10Mbit/s queue 1000: drop-tail goodput {:.3} Mbit/s, ping avg {:.1} ms, \
         max {:.1} ms, flow_limit drops {}; codel goodput {:.3} Mbit/s, ping avg {:.1} ms, max {:.1} ms, \
         codel drops {}",
        tail.goodput / 1e6,
        tail.rtt_avg,
        tail.rtt_max,
        drops(&tail, "flow_limit"),
        codel.goodput / 1e6,
        codel.rtt_avg,
        codel.rtt_max,
        drops(&codel, "codel"),
    );
    // Drop-tail: the stream keeps the buffer full, the pings wait in it.
    assert!(tail.rtt_avg > 100.0, "drop-tail: {} ms", tail.rtt_avg);
    // CoDel: a short queue (about its 5 ms target, plus the pings' own
    // wait behind a packet or two), and CoDel dropped to keep it so.
    assert!(
        codel.rtt_avg < 50.0 && codel.rtt_avg < tail.rtt_avg / 10.0,
        "CoDel {} ms against drop-tail's {} ms",
        codel.rtt_avg,
        tail.rtt_avg
    );
    assert!(drops(&codel, "codel") > 0);
    // And the link stays busy.
    assert!(
        codel.goodput >= 0.85 * 10e6,
        "CoDel's goodput {} bit/s",
        codel.goodput
    );

    // FQ-CoDel: the pings are a flow of their own, served ahead of the
    // stream's backlog, so they wait behind at most the frame on the link
    // (1.2 ms at 10 Mbit/s) instead of CoDel's standing queue.
    let Some(fq) = bulk_with_pings(
        "fq-codel",
        239,
        "sched 1 config type fq_codel bw 10Mbit/s
         queue 1 config sched 1
         add 100 queue 1 ip from any to any
",
    ) else {
        return;
    };
    let sched_drops = |reason: &str| -> u64 {
        fq.doc["pipes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["dropped"][reason].as_u64())
            .sum()
    };
    println!(
        "fq_codel: goodput {:.3} Mbit/s, ping avg {:.2} ms, max {:.2} ms, codel drops {}, \
         marks {}",
        fq.goodput / 1e6,
        fq.rtt_avg,
        fq.rtt_max,
        sched_drops("codel"),
        fq.doc["pipes"][0]["marked"]
    );
    assert!(
        fq.rtt_avg < 5.0 && fq.rtt_avg < codel.rtt_avg,
        "FQ-CoDel {} ms against CoDel's {} ms",
        fq.rtt_avg,
        codel.rtt_avg
    );
    assert!(
        fq.goodput >= 0.85 * 10e6,
        "FQ-CoDel's goodput {} bit/s",
        fq.goodput
    );
}

/// PIE and FQ-PIE through `pspat run`: the same bulk stream and pings. PIE
/// drops on arrival with a probability steered toward its 15 ms target,
/// so the round trip stays near it (plus the pings' own wait); under
/// fq_pie the pings are a flow of their own and wait behind at most the
/// frame on the link.
#[test]
fn run_pie_keeps_the_round_trip_near_its_target_under_a_bulk_stream() {
    if ping_missing() {
        return;
    }
    let Some(pie) = bulk_with_pings(
        "pie",
        238,
        "pipe 1 config bw 10Mbit/s queue 1000 pie\nadd 100 pipe 1 ip from any to any\n",
    ) else {
        return;
    };
    let Some(fq) = bulk_with_pings(
        "fq-pie",
        237,
        "sched 1 config type fq_pie bw 10Mbit/s\nqueue 1 config sched 1\nadd 100 queue 1 ip from any to any\n",
    ) else {
        return;
    };
    let drops = |o: &Outcome| -> u64 {
        o.doc["pipes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["dropped"]["pie"].as_u64())
            .sum()
    };
    println!(
        "TCP through bw 10Mbit/s queue 1000: pie goodput {:.3} Mbit/s, ping avg {:.1} ms, max {:.1} ms, \
         PIE drops {}; fq_pie goodput {:.3} Mbit/s, ping avg {:.2} ms, max {:.2} ms, PIE drops {}",
        pie.goodput / 1e6,
        pie.rtt_avg,
        pie.rtt_max,
        drops(&pie),
        fq.goodput / 1e6,
        fq.rtt_avg,
        fq.rtt_max,
        drops(&fq),
    );
    // Drop-tail's pings wait behind the whole buffer (over 100 ms, the
    // test above); PIE holds the queue near its 15 ms target.
    assert!(pie.rtt_avg < 60.0, "PIE: {} ms", pie.rtt_avg);
    assert!(drops(&pie) > 0, "PIE dropped to hold the queue");
    assert!(
        pie.goodput >= 0.85 * 10e6,
        "PIE's goodput {} bit/s",
        pie.goodput
    );
    // The pings behind at most the frame on the link (1.2 ms) and their
    // own: a few ms at most, whatever PIE's queue holds.
    assert!(fq.rtt_avg < 5.0, "FQ-PIE {} ms", fq.rtt_avg);
    assert!(drops(&fq) > 0, "FQ-PIE dropped the stream's excess");
    assert!(
        fq.goodput >= 0.85 * 10e6,
        "FQ-PIE's goodput {} bit/s",
        fq.goodput
    );
}
