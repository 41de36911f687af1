//! `pspat run` end to end: the daemon between three namespaces it does not
//! own (a sender, the bridge, a receiver, joined by two veth pairs), fed
//! by this test. Every name carries the `pspat-` prefix and every address
//! is in 10.199.0.0/16. Skipped, with the reason printed, without root.
//!
//! * Delay: UDP frames built here (checksums computed, so no offload is
//!   involved) to a `delay 20ms` pipe and to a pipe without delay,
//!   interleaved; one-way latency = the receiver's kernel timestamp − the
//!   send time (one realtime clock, one process). The pipe adds 20 ms ± 1 ms
//!   to what the bridge alone costs, and never leaves early; `ping` through
//!   a `delay 40ms` pipe (the reverse direction is forwarded unshaped)
//!   measures 40 ms plus the bridge's own latency both ways (below 3 ms).
//! * Rate: a greedy UDP stream at 20 Mbit/s into `bw 10Mbit/s` arrives at
//!   10 Mbit/s ± 2% (frame bytes over arrival time, steady state), the
//!   excess dropped at the pipe's queue limit and counted; two RX threads
//!   (PACKET_FANOUT) share the one classifier.
//! * TCP: one bulk stream (`pspat traffic send|recv --proto tcp`) through
//!   `bw 10Mbit/s` reaches at least 90% of it in goodput and never more, every
//!   byte arrives, and the pipe conserves its packets; the ACKs come back
//!   through the daemon's reverse direction, unshaped. The stack ends of the
//!   bed have their offloads off, and GRO, turned on where the daemon reads,
//!   is off while it runs and on again after it exits (docs/RUN.md,
//!   *Offloads*).
//! * Duplication: 2000 numbered frames through `duplicate 0.2` arrive once
//!   or twice (the copy right behind its original); the copies received
//!   are the daemon's count, within the binomial 99.9% interval.
//! * Both directions (rules naming interfaces shape the reverse direction
//!   too, classified in two passes as ipfw on a bridge): `ping` through 20 ms
//!   `in recv` each way, and through 30 ms `out xmit` + 10 ms `in recv`,
//!   measures 40 ms plus the bridge's own latency (min in [40, 41] ms, average
//!   at most 42 ms); each direction is counted apart and conserved.
//! * A converted tc-netem command (`delay 20ms`, `pspat config
//!   from-netem`'s conversion): its direction-less rule delays the forward
//!   direction only, as netem on one device's egress: `ping` measures 20 ms
//!   plus the bridge (min in [20, 21] ms), the reverse direction unshaped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::run_bed::{
    check_conservation, pace, ping_missing, ping_rtt, ping_through, pipe, realtime_ns, report_text,
    send_all, top_level_keys, Arrival, Bed,
};
use common::traffic::{send_tcp, tcp_receiver};

/// Waits for the daemon to exit; its JSON report.
fn finish(child: Child) -> serde_json::Value {
    let stdout = report_text(child);
    // The top-level keys in the order docs/JSON.md lists them.
    assert_eq!(
        top_level_keys(&stdout),
        [
            "schema_version",
            "command",
            "config",
            "input",
            "output",
            "elapsed_s",
            "pipes",
            "rules",
            "classifier",
            "totals",
            "reverse",
            "offloads",
            "offload_warnings",
            "error"
        ]
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(
        (doc["schema_version"].as_u64(), doc["command"].as_str()),
        (Some(1), Some("run"))
    );
    doc
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn run_delays_each_pipe_by_its_own_delay_to_the_millisecond() {
    if ping_missing() {
        return;
    }
    let Some(bed) = Bed::new("delay", 250) else {
        return;
    };
    let config = "\
        pipe 1 config delay 20ms\n\
        pipe 2 config\n\
        pipe 3 config delay 40ms\n\
        add 100 pipe 1 udp from any to any dst-port 5001\n\
        add 200 pipe 2 udp from any to any dst-port 5002\n\
        add 300 pipe 3 icmp from any to any\n\
        default allow\n";
    let (child, _log) = bed.start(config, &["--duration", "6"]);
    let collector = bed.receiver();
    let ping = bed
        .sender
        .run(|| {
            Command::new("ping")
                .args(["-n", "-c", "10", "-i", "0.2", "-W", "2", "10.199.250.2"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .unwrap()
        .expect("spawn ping");
    let mut tx = bed.sender_socket();
    for seq in 0..400u32 {
        for port in [5001u16, 5002] {
            let f = bed.frame(port, seq, realtime_ns(), 200);
            assert_eq!(tx.send_batch(&[f.as_slice()]).expect("send"), 1);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let ping = ping.wait_with_output().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let got = collector.finish();
    let doc = finish(child);
    check_conservation(&doc);
    let latency = |port: u16| -> Vec<f64> {
        got.iter()
            .filter(|a| a.port == port)
            .map(|a| (a.at as f64 - a.sent as f64) / 1e6)
            .collect()
    };
    let (mut slow, mut fast) = (latency(5001), latency(5002));
    assert!(
        slow.len() >= 390 && fast.len() >= 390,
        "frames lost: {} {}",
        slow.len(),
        fast.len()
    );
    // Order kept within each pipe.
    for port in [5001u16, 5002] {
        let seqs: Vec<u32> = got
            .iter()
            .filter(|a| a.port == port)
            .map(|a| a.seq)
            .collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "order of port {port}");
    }
    let (min_slow, min_fast) = (
        slow.iter().copied().fold(f64::MAX, f64::min),
        fast.iter().copied().fold(f64::MAX, f64::min),
    );
    let (m_slow, m_fast) = (median(&mut slow), median(&mut fast));
    let p99 = slow[slow.len() * 99 / 100];
    println!(
        "one-way latency, ms: delay 20ms pipe median {m_slow:.3} min {min_slow:.3} p99 {p99:.3}; \
         no-delay pipe median {m_fast:.3} min {min_fast:.3}; difference of medians {:.3}",
        m_slow - m_fast
    );
    // Never early: the pipe holds each packet 20 ms after the bridge got it.
    assert!(min_slow >= 20.0, "a packet left early: {min_slow} ms");
    // The pipe adds 20 ms ± 1 ms to what the bridge alone costs.
    assert!((m_slow - m_fast - 20.0).abs() <= 1.0, "{m_slow} - {m_fast}");
    assert!(m_slow <= 22.0, "median one-way {m_slow} ms");
    assert_eq!(pipe(&doc, 1)["delay_ns"], 20_000_000);
    assert!(pipe(&doc, 1)["out_packets"].as_u64().unwrap() >= 400);
    // ping: 40 ms one way, the reply unshaped.
    let text = String::from_utf8_lossy(&ping.stdout);
    println!("{text}");
    assert!(ping.status.success(), "ping failed: {text}");
    let (min_rtt, avg_rtt) = ping_rtt(&text);
    println!("ping through delay 40ms: min {min_rtt} avg {avg_rtt} ms");
    assert!(min_rtt >= 40.0, "ping faster than the pipe: {min_rtt}");
    // 40 ms plus the bridge's own latency both ways (each direction's RX
    // ring hands a lone frame over within its 1 ms block timeout).
    assert!(min_rtt <= 43.0, "ping {min_rtt} ms");
    assert!(pipe(&doc, 3)["out_packets"].as_u64().unwrap() >= 10);
    // ARP went through the pass pipe.
    assert!(doc["classifier"]["not_ip_passed"].as_u64().unwrap() >= 1);
}

/// Sends a greedy UDP stream to port 6000 through `pspat run` with
/// `config` (20 Mbit/s of 1000-byte frames, 2500 a second, in bursts of 25
/// every 10 ms, for `rounds` bursts), stops the daemon and returns the
/// rate received in the steady state (from 0.5 s after the first arrival
/// to the last one), the frames in that window and the daemon's report.
fn greedy_stream_rate(
    bed: &Bed,
    config: &str,
    args: &[&str],
    rounds: u32,
) -> (f64, usize, serde_json::Value) {
    let (child, _log) = bed.start(config, args);
    let collector = bed.receiver();
    let mut tx = bed.sender_socket();
    let start = Instant::now();
    let mut seq = 0u32;
    for round in 0..rounds {
        let batch: Vec<Vec<u8>> = (0..25)
            .map(|_| {
                seq += 1;
                bed.frame(6000, seq, realtime_ns(), 1000)
            })
            .collect();
        send_all(&mut tx, &batch);
        pace(start, Duration::from_millis(10), round);
    }
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let doc = finish(child);
    let got = collector.finish();
    check_conservation(&doc);
    let first = got.first().expect("frames arrived").at;
    let window: Vec<&Arrival> = got.iter().filter(|a| a.at >= first + 500_000_000).collect();
    assert!(window.len() > 1000, "{} frames", window.len());
    let span = (window.last().unwrap().at - window[0].at) as f64 / 1e9;
    let bytes: u64 = window[1..].iter().map(|a| a.len).sum();
    (bytes as f64 * 8.0 / span, window.len(), doc)
}

#[test]
fn run_holds_a_greedy_udp_stream_to_the_pipe_rate() {
    let Some(bed) = Bed::new("rate", 250) else {
        return;
    };
    let config = "\
        pipe 1 config bw 10Mbit/s queue 100\n\
        add 100 pipe 1 udp from any to any dst-port 6000\n\
        default deny\n";
    let (rate, frames, doc) = greedy_stream_rate(&bed, config, &["--rx-threads", "2"], 400);
    let p1 = pipe(&doc, 1);
    assert!(
        p1["dropped"]["flow_limit"].as_u64().unwrap_or(0) > 0,
        "{p1}"
    );
    println!(
        "received {:.4} Mbit/s ({frames} frames); pipe in {} out {} dropped {}",
        rate / 1e6,
        p1["in_packets"],
        p1["out_packets"],
        p1["dropped_total"]
    );
    assert!((rate / 10e6 - 1.0).abs() <= 0.02, "rate {rate} bit/s");
}

/// The same greedy stream into a pipe whose link carries ATM-like cells:
/// each 1000-byte frame weighs 1000 + 24 bytes in 48-byte cells of 53, 22
/// cells or 1166 bytes, so the frames arrive at 10 Mbit/s × 1000 / 1166.
#[test]
fn run_times_each_frame_by_its_bytes_on_the_framed_wire() {
    let Some(bed) = Bed::new("framing", 251) else {
        return;
    };
    let config = "\
        pipe 1 config bw 10Mbit/s queue 100 packetoverhead 24 cellsize 48 celloverhead 5\n\
        add 100 pipe 1 udp from any to any dst-port 6000\n\
        default deny\n";
    let (rate, frames, _) = greedy_stream_rate(&bed, config, &[], 300);
    let want = 10e6 * 1000.0 / 1166.0;
    println!(
        "received {:.4} Mbit/s ({frames} frames), expected {:.4}",
        rate / 1e6,
        want / 1e6
    );
    assert!(
        (rate / want - 1.0).abs() <= 0.02,
        "rate {rate} bit/s, expected {want}"
    );
}

/// One bulk TCP stream for 4 s through `bw 10Mbit/s` with a 100-slot
/// queue: at least 90% of the rate in goodput (the receiver's bytes over
/// the time from its first read to its last), never above it, every byte
/// sent received. GRO, turned on beforehand on the two interfaces the
/// daemon reads, is off while it runs and on again after it exits.
#[test]
fn run_carries_a_tcp_stream_at_90_percent_of_the_pipe_rate() {
    let subnet = 249;
    let Some(bed) = Bed::new("tcp", subnet) else {
        return;
    };
    // The host's stack sends on the sender's and the receiver's ends.
    bed.host_offloads_off();
    // GRO on where the daemon reads: it turns it off while it runs (or a
    // stream would reach its rings as aggregates) and back on at exit.
    let gro = |dev: &str, set: Option<bool>| bed.gro(dev, set);
    let read = bed.interfaces_read();
    for dev in &read {
        assert!(gro(dev, Some(true)), "{dev}: GRO on before the start");
    }
    let config = "\
        pipe 1 config bw 10Mbit/s queue 100\n\
        add 100 pipe 1 tcp from any to any dst-port 5056\n\
        default allow\n";
    let (child, _log) = bed.start(config, &[]);
    for dev in &read {
        assert!(!gro(dev, None), "{dev}: GRO off while the daemon runs");
    }
    let receiver = tcp_receiver(bed.receiver.name(), "12s");
    let dst = format!("10.199.{subnet}.2");
    let (sent, received) = send_tcp(bed.sender.name(), &dst, "4s", receiver);
    let pid = child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let doc = finish(child);
    for dev in &read {
        assert!(gro(dev, None), "{dev}: GRO back on after the exit");
        // The JSON report says so too.
        let row = doc["offloads"]
            .as_array()
            .expect("offloads")
            .iter()
            .find(|o| o["interface"] == dev.as_str())
            .unwrap_or_else(|| panic!("{dev} in {}", doc["offloads"]));
        assert_eq!(
            row["turned_off"],
            serde_json::json!(["generic-receive-offload"]),
            "{row}"
        );
        assert_eq!(row["restored"], true, "{row}");
        assert!(row["restore_error"].is_null(), "{row}");
    }
    assert_eq!(doc["offload_warnings"], serde_json::json!([]));
    check_conservation(&doc);
    let p1 = pipe(&doc, 1);
    let goodput = received["bps"].as_f64().expect("bps");
    println!(
        "TCP through bw 10Mbit/s: goodput {:.3} Mbit/s over {:.2} s, {} bytes; pipe in {} out {} dropped {}",
        goodput / 1e6,
        received["window_s"],
        received["bytes"],
        p1["in_packets"],
        p1["out_packets"],
        p1["dropped"]
    );
    assert_eq!(sent["bytes"], received["bytes"], "every byte arrives");
    assert!(goodput >= 0.9 * 10e6, "goodput {goodput} bit/s");
    assert!(goodput <= 10e6, "above the pipe's rate: {goodput} bit/s");
    assert!(p1["out_packets"].as_u64().unwrap() > 3000, "{p1}");
}

/// `kill -9` of the daemon: its offload guard (a child process) turns GRO
/// back on on both interfaces the daemon read, within 5 s, and says so on
/// the daemon's standard error.
#[test]
fn run_killed_with_sigkill_still_gets_gro_turned_back_on() {
    let Some(bed) = Bed::new("kill", 250) else {
        return;
    };
    let gro = |dev: &str, set: Option<bool>| bed.gro(dev, set);
    let read = bed.interfaces_read();
    for dev in &read {
        assert!(gro(dev, Some(true)), "{dev}: GRO on before the start");
    }
    let (mut child, log) = bed.start("pipe 1 config bw 10Mbit/s\ndefault allow\n", &[]);
    for dev in &read {
        assert!(!gro(dev, None), "{dev}: GRO off while the daemon runs");
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let deadline = Instant::now() + Duration::from_secs(5);
    while read.iter().any(|dev| !gro(dev, None)) {
        assert!(Instant::now() < deadline, "GRO still off 5 s after kill -9");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The guard's lines, one per interface.
    let mut said = Vec::new();
    while said.len() < read.len() {
        match log.recv_timeout(Duration::from_secs(5)) {
            Ok(line) if line.contains("offload guard") => said.push(line),
            Ok(_) => {}
            Err(e) => panic!("the guard's lines: {e}; got {said:?}"),
        }
    }
    for dev in &read {
        assert!(
            said.iter()
                .any(|l| l.contains(&format!("generic-receive-offload on again on {dev}"))),
            "{dev} in {said:?}"
        );
    }
}

/// `duplicate 0.2`: 2000 numbered UDP frames through the pipe; every frame
/// arrives once or twice, the copy right behind its original; the copies
/// the receiver counts are the daemon's (`totals.duplicated`, the pipe's
/// `duplicates`), within the binomial 99.9% interval of 0.2 × 2000.
#[test]
fn run_duplicates_frames_with_the_pipe_s_probability_and_counts_each_copy() {
    let Some(bed) = Bed::new("dup", 250) else {
        return;
    };
    let config = "\
        pipe 1 config duplicate 0.2\n\
        add 100 pipe 1 udp from any to any dst-port 7000\n\
        default deny\n";
    let (child, _log) = bed.start(config, &[]);
    let collector = bed.receiver();
    let mut tx = bed.sender_socket();
    let n = 2000u32;
    let start = Instant::now();
    for round in 0..n / 20 {
        let batch: Vec<Vec<u8>> = (round * 20..(round + 1) * 20)
            .map(|seq| bed.frame(7000, seq, realtime_ns(), 200))
            .collect();
        send_all(&mut tx, &batch);
        pace(start, Duration::from_millis(5), round);
    }
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let doc = finish(child);
    let got = collector.finish();
    check_conservation(&doc);
    let seqs: Vec<u32> = got
        .iter()
        .filter(|a| a.port == 7000)
        .map(|a| a.seq)
        .collect();
    // In order, each once or twice in a row.
    let mut count = vec![0u32; n as usize];
    for w in seqs.windows(2) {
        assert!(w[0] <= w[1], "{} after {}", w[1], w[0]);
    }
    for &s in &seqs {
        count[s as usize] += 1;
    }
    assert!(
        count.iter().all(|&c| c == 1 || c == 2),
        "every frame once or twice"
    );
    let copies = count.iter().filter(|&&c| c == 2).count() as u64;
    let t = &doc["totals"];
    let p1 = pipe(&doc, 1);
    println!(
        "duplicate 0.2: {n} frames, {copies} copies received; daemon: duplicated {}, pipe duplicates {}",
        t["duplicated"], p1["duplicates"]
    );
    assert_eq!(t["received"].as_u64(), Some(u64::from(n)), "{t}");
    assert_eq!(t["duplicated"].as_u64(), Some(copies), "{t}");
    assert_eq!(p1["duplicates"].as_u64(), Some(copies), "{p1}");
    assert_eq!(p1["out_packets"].as_u64(), Some(u64::from(n)), "{p1}");
    assert_eq!(
        t["transmitted"].as_u64(),
        Some(u64::from(n) + copies),
        "{t}"
    );
    let (mean, sd) = (f64::from(n) * 0.2, (f64::from(n) * 0.2 * 0.8).sqrt());
    assert!(
        (copies as f64 - mean).abs() <= 3.2905 * sd,
        "{copies} copies, expected {mean} ± {:.1}",
        3.2905 * sd
    );
}

/// The checks of a shaped reverse direction: its report, conservation in
/// both directions, and each pipe's share of the echoes.
fn check_both_directions(doc: &serde_json::Value, echoes: u64, pipes: [(u64, u64); 2]) {
    check_conservation(doc);
    let r = &doc["reverse"];
    assert_eq!(r["shaped"], true, "{r}");
    assert_eq!(r["conserved"], true, "{r}");
    assert_eq!(r["in_flight"], 0, "{r}");
    let received = r["received"].as_u64().unwrap();
    let gone = r["transmitted"].as_u64().unwrap() + r["dropped_total"].as_u64().unwrap();
    assert_eq!(
        received, gone,
        "reverse: received = transmitted + dropped: {r}"
    );
    assert!(received >= echoes, "{r}");
    for (number, least) in pipes {
        let p = pipe(doc, number);
        assert!(
            p["out_packets"].as_u64().unwrap() >= least,
            "pipe {number}: {p}"
        );
        assert_eq!(p["dropped_total"], 0, "pipe {number}: {p}");
    }
}

/// Runs `config` (pipes 1 and 2, one per direction, 40 ms in all), pings
/// 25 times through it and checks both directions' counts and the RTT: min
/// in [40, 41] ms, average at most 42 ms. The daemon's report.
fn ping_40ms_round_trip(bed: &Bed, subnet: u8, config: &str, what: &str) -> serde_json::Value {
    let (child, _log) = bed.start(config, &["--duration", "7"]);
    let (text, min_rtt, avg_rtt) = ping_through(bed, subnet, 25);
    println!("{text}");
    let doc = finish(child);
    println!(
        "ping through {what}: min {min_rtt} avg {avg_rtt} ms; reverse {}; rules {}",
        doc["reverse"], doc["rules"]
    );
    check_both_directions(&doc, 25, [(1, 25), (2, 25)]);
    assert!(
        (40.0..=41.0).contains(&min_rtt),
        "min RTT {min_rtt} ms, not in [40, 41]"
    );
    assert!(avg_rtt <= 42.0, "average RTT {avg_rtt} ms");
    doc
}

#[test]
fn run_delays_each_direction_by_its_in_recv_pipe() {
    if ping_missing() {
        return;
    }
    let subnet = 251;
    let Some(bed) = Bed::new("both", subnet) else {
        return;
    };
    // dummynet on a bridge: one pipe per direction, picked by the interface
    // each frame came in by.
    let config = format!(
        "pipe 1 config delay 20ms\n\
         pipe 2 config delay 20ms\n\
         add 100 pipe 1 ip from any to any in recv {}\n\
         add 200 pipe 2 ip from any to any in recv {}\n\
         default allow\n",
        bed.into.b, bed.out.a
    );
    // 20 ms + 20 ms, plus what the bridge costs in each direction.
    ping_40ms_round_trip(&bed, subnet, &config, "delay 20ms each way (in recv)");
}

#[test]
fn run_applies_out_xmit_to_the_forward_and_in_recv_to_the_reverse_direction() {
    if ping_missing() {
        return;
    }
    let subnet = 252;
    let Some(bed) = Bed::new("xmit", subnet) else {
        return;
    };
    // Forward frames (in on --in) match no `in` rule, pass the default and
    // meet rule 100 on their `out` pass by --out; echo replies come in by
    // --out and meet rule 200 on their `in` pass.
    let config = format!(
        "pipe 1 config delay 30ms\n\
         pipe 2 config delay 10ms\n\
         add 100 pipe 1 ip from any to any out xmit {out}\n\
         add 200 pipe 2 ip from any to any in recv {out}\n\
         default allow\n",
        out = bed.out.a
    );
    let doc = ping_40ms_round_trip(&bed, subnet, &config, "delay 30ms out xmit + 10ms in recv");
    // Each echo request counted by the default (its `in` pass) and rule 100
    // (its `out` pass); each reply by rule 200 alone.
    let rules = doc["rules"].as_array().unwrap();
    let count = |n: Option<u64>| {
        rules
            .iter()
            .find(|r| r["number"].as_u64() == n)
            .map(|r| r["packets"].as_u64().unwrap())
            .unwrap()
    };
    assert!(count(Some(100)) >= 25 && count(Some(200)) >= 25);
    assert!(count(None) >= count(Some(100)));
    // Each rule as its ipfw line, as `pspat ctl show` prints it.
    let line = |n: Option<u64>| {
        rules
            .iter()
            .find(|r| r["number"].as_u64() == n)
            .and_then(|r| r["rule"].as_str())
            .unwrap()
    };
    assert_eq!(
        line(Some(200)),
        format!("add 200 pipe 2 ip from any to any in recv {}", bed.out.a)
    );
    assert_eq!(line(None), "default allow");
}

/// A pasted tc-netem command, converted by `pspat config from-netem`'s
/// library function, runs as it reads: as netem on the egress of one
/// device, its rule (which names no direction) delays the forward direction
/// only, so `delay 20ms` makes a 20 ms round trip and the replies pass.
#[test]
fn a_converted_netem_command_delays_both_directions() {
    if ping_missing() {
        return;
    }
    let subnet = 250;
    let Some(bed) = Bed::new("netem", subnet) else {
        return;
    };
    let config = pspat_config::netem_to_config(
        "tc qdisc add dev eth0 root netem delay 20ms limit 100",
        1,
        "netem",
    )
    .expect("converts");
    let text = pspat_config::print_ipfw(&config);
    let (child, _log) = bed.start(&text, &["--duration", "7"]);
    let (out, min_rtt, avg_rtt) = ping_through(&bed, subnet, 25);
    println!("{out}");
    let doc = finish(child);
    println!(
        "ping through `{}`: min {min_rtt} avg {avg_rtt} ms",
        text.trim()
    );
    check_conservation(&doc);
    assert_eq!(doc["reverse"]["shaped"], false, "{}", doc["reverse"]);
    let p = pipe(&doc, 1);
    assert!(p["out_packets"].as_u64().unwrap() >= 25, "pipe 1: {p}");
    assert_eq!(p["dropped_total"], 0, "pipe 1: {p}");
    assert!(
        (20.0..=21.0).contains(&min_rtt),
        "min RTT {min_rtt} ms, not in [20, 21]"
    );
    assert!(avg_rtt <= 22.0, "average RTT {avg_rtt} ms");
}
