//! `pspat run` with `corrupt` end to end: the daemon between three
//! namespaces it does not own (a sender, the bridge, a receiver, joined by
//! two veth pairs), fed by this test; UDP datagrams reach a socket of the
//! receiver's own stack, whose checksums judge them. Every name carries
//! the `pspat-` prefix and every address is in 10.199.0.0/16. Skipped, with
//! the reason printed, without root.
//!
//! The frames are built here with their IPv4 and UDP checksums computed
//! and sent raw (AF_PACKET), so no checksum is left to an offload: a veth
//! would otherwise carry a stack's datagram with its checksum unfinished
//! (CHECKSUM_PARTIAL), and a flipped bit the receiver never checks could
//! pass. The receiver's end takes the frames' destination MAC address.
//!
//! * `corrupt 1`: none of 500 datagrams reaches the socket (each has one
//!   bit flipped in its IPv4 header, UDP header or payload, which the
//!   receiver's IPv4 header checksum or UDP checksum refuses: its
//!   `Ip InHdrErrors` and `Udp InErrors` add up to 500); the daemon sent
//!   500 and counted 500 corrupted (the pipe's `corrupted`, the totals',
//!   `pipe show`, the metrics), none dropped, and timed each one's sojourn
//!   (the mark does not hide its descriptor).
//! * `corrupt 0.5`: of 1 000 datagrams those the pipe did not corrupt
//!   arrive, each with its exact payload, and only they (arrived +
//!   corrupted = 1 000, corrupted within the binomial 99.9% interval of
//!   500); a second run with the same `seed` corrupts the same datagrams
//!   and flips bits in the same headers (the receiver's counts by layer
//!   are the same).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

mod common;

use common::run_bed::{
    check_conservation, ctl, finish, metrics_addr, pace, payload_seq, pipe, realtime_ns, send_all,
    Bed,
};

/// The destination port of the test's datagrams.
const PORT: u16 = 7300;
/// Where a [`Bed::frame`]'s UDP payload starts (Ethernet, IPv4, UDP).
const PAYLOAD: usize = 14 + 20 + 8;

/// What one run gave: the daemon's report, the payloads the socket got,
/// the receiver's counters, the frames sent.
struct Outcome {
    doc: serde_json::Value,
    got: Vec<Vec<u8>>,
    snmp: BTreeMap<String, u64>,
    sent: Vec<Vec<u8>>,
}

/// Runs `config` (pipe 1 for UDP to [`PORT`], the rest denied) on a bed
/// of its own and sends `n` numbered datagrams of 200 bytes through it, 20
/// every 5 ms; with `probe`, asks the running daemon (its log, metrics
/// address and control socket) before it stops. `None` without root.
fn run(
    tag: &str,
    subnet: u8,
    config: &str,
    n: u32,
    probe: impl FnOnce(&Bed, &str),
) -> Option<Outcome> {
    let bed = Bed::new(tag, subnet)?;
    bed.accept_own_frames();
    let sink = bed.udp_sink(PORT);
    let (mut child, log) = bed.start(config, &["--metrics", "127.0.0.1:0"]);
    let addr = metrics_addr(&log, &mut child);
    let mut tx = bed.sender_socket();
    let start = Instant::now();
    let mut sent = Vec::with_capacity(n as usize);
    for round in 0..n / 20 {
        let batch: Vec<Vec<u8>> = (round * 20..(round + 1) * 20)
            .map(|seq| bed.frame(PORT, seq, realtime_ns(), 200))
            .collect();
        send_all(&mut tx, &batch);
        sent.extend(batch);
        pace(start, Duration::from_millis(5), round);
    }
    std::thread::sleep(Duration::from_millis(300));
    probe(&bed, &addr);
    let doc = finish(child);
    let got = sink.finish();
    let snmp = bed.receiver_counters();
    Some(Outcome {
        doc,
        got,
        snmp,
        sent,
    })
}

/// Checks the daemon's counts of `n` datagrams through pipe 1, of which
/// it corrupted some; returns how many.
fn check_daemon(doc: &serde_json::Value, n: u64) -> u64 {
    check_conservation(doc);
    let t = &doc["totals"];
    let p1 = pipe(doc, 1);
    let corrupted = p1["corrupted"].as_u64().expect("the pipe's corrupted");
    assert_eq!(t["corrupted"].as_u64(), Some(corrupted), "{t}");
    // Corruption is neither a drop nor an extra packet.
    assert_eq!(p1["out_packets"].as_u64(), Some(n), "{p1}");
    assert_eq!(p1["dropped_total"], 0, "{p1}");
    assert_eq!(t["received"].as_u64(), Some(n), "{t}");
    assert_eq!(t["transmitted"].as_u64(), Some(n), "{t}");
    assert_eq!(t["duplicated"], 0, "{t}");
    corrupted
}

/// Checks what the receiver's stack did with `corrupted` datagrams: every
/// one refused by a checksum at the IPv4 or the UDP layer, no datagram
/// lost to its socket's buffer; returns the two counts.
fn check_refused(snmp: &BTreeMap<String, u64>, corrupted: u64) -> (u64, u64) {
    let count = |k: &str| snmp.get(k).copied().unwrap_or(0);
    let (ip, udp) = (count("Ip.InHdrErrors"), count("Udp.InErrors"));
    println!(
        "receiver: Ip InHdrErrors {ip}, Udp InErrors {udp} (InCsumErrors {}), Udp RcvbufErrors {}",
        count("Udp.InCsumErrors"),
        count("Udp.RcvbufErrors")
    );
    assert_eq!(count("Udp.RcvbufErrors"), 0, "the test's socket overflowed");
    assert_eq!(
        ip + udp,
        corrupted,
        "each corrupted datagram refused once, by IPv4 or by UDP"
    );
    (ip, udp)
}

#[test]
fn run_corrupt_one_delivers_no_datagram_and_counts_every_packet_corrupted() {
    let subnet = 248;
    let n = 500u64;
    let config = format!(
        "pipe 1 config corrupt 1\n\
         add 100 pipe 1 udp from any to any dst-port {PORT}\n\
         default deny\n"
    );
    let probe = |bed: &Bed, addr: &str| {
        let shown = ctl(&bed.socket(), &["pipe", "show", "1"]);
        let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
        assert!(shown.contains(&format!("corrupted {n} pkt")), "{shown}");
        let (status, body) = bed.http_get(addr, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK");
        for want in [
            format!("pspat_pipe_corrupted_total{{pipe=\"1\"}} {n}"),
            format!("pspat_pipe_out_packets_total{{pipe=\"1\"}} {n}"),
            format!("pspat_bridge_corrupted_packets_total{{direction=\"forward\"}} {n}"),
            format!("pspat_bridge_transmitted_packets_total{{direction=\"forward\"}} {n}"),
            // The corrupt mark leaves the packet's descriptor readable:
            // every sojourn is measured.
            format!("pspat_pipe_sojourn_seconds_count{{pipe=\"1\"}} {n}"),
            "pspat_sojourn_unmeasured_packets_total 0".to_string(),
        ] {
            assert!(body.contains(&want), "{want} not in\n{body}");
        }
    };
    let Some(out) = run("corrupt-all", subnet, &config, n as u32, probe) else {
        return;
    };
    let corrupted = check_daemon(&out.doc, n);
    println!(
        "corrupt 1: {n} datagrams sent, {} received; daemon: corrupted {corrupted}, totals {}",
        out.got.len(),
        out.doc["totals"]
    );
    assert_eq!(corrupted, n, "every packet corrupted");
    assert!(out.got.is_empty(), "{} datagrams arrived", out.got.len());
    check_refused(&out.snmp, n);
}

#[test]
fn run_corrupt_half_delivers_the_intact_datagrams_exactly_and_replays_with_the_seed() {
    let n = 1000u64;
    let config = format!(
        "seed 9\n\
         pipe 1 config corrupt 0.5\n\
         add 100 pipe 1 udp from any to any dst-port {PORT}\n\
         default deny\n"
    );
    let mut runs = Vec::new();
    for (tag, subnet) in [("corrupt-half-a", 247), ("corrupt-half-b", 246)] {
        let Some(out) = run(tag, subnet, &config, n as u32, |_, _| {}) else {
            return;
        };
        let corrupted = check_daemon(&out.doc, n);
        // Every datagram that arrives is one sent, once, byte for byte.
        let mut arrived = BTreeSet::new();
        for payload in &out.got {
            let seq = payload_seq(payload).expect("a numbered payload");
            let sent = out.sent.get(seq as usize).expect("a sequence number sent");
            assert_eq!(payload[..], sent[PAYLOAD..], "datagram {seq}");
            assert!(arrived.insert(seq), "datagram {seq} twice");
        }
        println!(
            "corrupt 0.5 ({tag}): {n} datagrams sent, {} arrived; daemon: corrupted {corrupted}",
            arrived.len()
        );
        assert_eq!(arrived.len() as u64 + corrupted, n, "only the intact ones");
        let (mean, sd) = (n as f64 * 0.5, (n as f64 * 0.25).sqrt());
        assert!(
            (corrupted as f64 - mean).abs() <= 3.2905 * sd,
            "{corrupted} corrupted, expected {mean} ± {:.0}",
            3.2905 * sd
        );
        let layers = check_refused(&out.snmp, corrupted);
        runs.push((arrived, layers));
    }
    // One seed: the same datagrams corrupted, the same bits flipped.
    assert_eq!(runs[0], runs[1], "the second run replays the first");
}
