//! `pspat run` with tc-netem's `slot` end to end: the daemon between three
//! namespaces of the test's own (a sender, the bridge, a receiver, two veth
//! pairs). 200 datagrams, one a millisecond, into `slot 20ms packets 5`
//! arrive at the receiver in bursts of at most 5, the bursts about 20 ms
//! apart, all of them and in order; `pipe show` names the slots, and
//! `pspat ctl pipe 1 config slot 0` takes them away. Every name carries the
//! `pspat-` prefix and every address is in 10.199.0.0/16. Skipped, with the
//! reason printed, without root.

use std::time::{Duration, Instant};

mod common;

use common::run_bed::{check_conservation, ctl, finish, pace, pipe, realtime_ns, send_all, Bed};

const PORT: u16 = 7400;

/// Arrival times (ns) grouped into bursts: a gap of over 5 ms starts a new
/// one. Returns each burst's size and first arrival.
fn bursts(times: &[u64]) -> Vec<(usize, u64)> {
    let mut out: Vec<(usize, u64)> = Vec::new();
    let mut last = None;
    for &t in times {
        match (out.last_mut(), last) {
            (Some((n, _)), Some(prev)) if t - prev <= 5_000_000 => *n += 1,
            _ => out.push((1, t)),
        }
        last = Some(t);
    }
    out
}

#[test]
fn run_sends_in_bursts_at_slot_instants_and_ctl_turns_slots_off() {
    let Some(bed) = Bed::new("slot", 244) else {
        return;
    };
    let config = format!(
        "pipe 1 config slot 20ms packets 5 queue 500\n\
         add 100 pipe 1 udp from any to any dst-port {PORT}\n\
         default allow\n"
    );
    let (child, _log) = bed.start(&config, &[]);
    let collector = bed.receiver();
    let mut tx = bed.sender_socket();
    let n = 200u32;
    let start = Instant::now();
    for seq in 0..n {
        send_all(&mut tx, &[bed.frame(PORT, seq, realtime_ns(), 200)]);
        pace(start, Duration::from_millis(1), seq);
    }
    // 200 packets at 5 a slot: 40 slots, 20 ms apart.
    std::thread::sleep(Duration::from_millis(1_100));
    let shown = ctl(&bed.socket(), &["pipe", "show"]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(shown.contains("slot 20ms packets 5"), "{shown}");
    let off = ctl(&bed.socket(), &["pipe", "1", "config", "slot", "0"]);
    assert!(
        off.status.success(),
        "{}",
        String::from_utf8_lossy(&off.stderr)
    );
    let shown = ctl(&bed.socket(), &["pipe", "show"]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(!shown.contains("slot"), "{shown}");
    std::thread::sleep(Duration::from_millis(200));
    let got = collector.finish();
    let doc = finish(child);
    check_conservation(&doc);
    let p1 = pipe(&doc, 1);
    assert_eq!(p1["out_packets"].as_u64(), Some(u64::from(n)), "{p1}");
    let seqs: Vec<u32> = got
        .iter()
        .filter(|a| a.port == PORT)
        .map(|a| a.seq)
        .collect();
    assert_eq!(seqs, (0..n).collect::<Vec<_>>(), "every datagram, in order");
    let times: Vec<u64> = got
        .iter()
        .filter(|a| a.port == PORT)
        .map(|a| a.at)
        .collect();
    let b = bursts(&times);
    let gaps: Vec<f64> = b
        .windows(2)
        .map(|w| (w[1].1 - w[0].1) as f64 / 1e6)
        .collect();
    let sizes: Vec<usize> = b.iter().map(|x| x.0).collect();
    println!(
        "bursts: {} of sizes {sizes:?}; gaps between them, ms: {gaps:.2?}",
        b.len()
    );
    // At most 5 a slot, and with a backlog from the second slot on, 5 in
    // almost every one (a burst split by a descheduled transmitter counts
    // as two smaller ones).
    assert!(sizes.iter().all(|&s| s <= 5), "{sizes:?}");
    assert_eq!(sizes.iter().sum::<usize>(), n as usize);
    let full = sizes.iter().filter(|&&s| s == 5).count();
    assert!(full >= 36, "{full} full bursts of {}", sizes.len());
    // The slots 20 ms apart: the median gap between bursts within 1 ms.
    let mut sorted = gaps.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    assert!((median - 20.0).abs() <= 1.0, "median gap {median} ms");
}
