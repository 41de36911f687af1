//! `pspat run` under a random sequence of live changes while traffic keeps
//! its queues full: the interleavings no single-change test of
//! `run_control.rs` reaches. The daemon runs between three namespaces of the
//! test's own (`common::run_bed`); every name carries the `pspat-` prefix
//! and every address is in 10.199.0.0/16. Skips, saying why, without root.
//!
//! The configuration has a pipe carrying two ports and a QFQ sched with a
//! masked flowset (five ports) and an unmasked one (one port). Every 120 ms
//! a change drawn from a seeded generator goes through `pspat ctl`: a pipe's
//! bandwidth, queue, delay, framing and slots; the sched's type and
//! bandwidth (a rebuild); a flowset's weight, queue limit, loss (`plr`,
//! the 4-state model, Gilbert-Elliott) or mask (a rebuild that moves
//! the held packets by their keys); the seed; a pipe added with its rule
//! and later deleted with its packets; a flowset added to the busy sched
//! and later deleted; the unmasked flowset's rule replaced by another that
//! matches the same traffic (an address list, `not` before the protocol
//! and a negated list, a negated port list). Every change must be
//! accepted. At the end:
//! * the daemon exits cleanly and its report conserves every packet
//!   (`received = transmitted + dropped`, nothing in flight, every pipe's
//!   `in = out + dropped + held`);
//! * drops carry only the reasons the changes explain (`flow_limit`,
//!   `filtered` for ports without a rule, `flow_removed` for a deleted
//!   link's packets, `unknown_flow` for a frame classified just before its
//!   link was deleted, and the configured loss);
//! * the receiver got exactly the frames the pipes sent, and no flow was
//!   reordered (a port from one source address is one flow under every
//!   mask the sequence sets).
//!
//! A second case sends each port from 32 source addresses into a daemon
//! that allows 8 dynamic queues per flowset, the masked flowset starting
//! with `mask src-ip 0xffffffff`: most keys share the flowset's overflow
//! queue (checked before the first change), and mask changes move held
//! packets between dynamic queues and the overflow queue.
//!
//! `PSPAT_SOAK_SECONDS` (default 3) and `PSPAT_SOAK_SEED` (default 1) make
//! a longer or another sequence: `PSPAT_SOAK_SECONDS=60 cargo test -p
//! pspat-cli --test run_soak -- --nocapture`.

use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::run_bed::{check_conservation, ctl, ctl_json, finish, pace, send_all, Bed};

/// Ports and the links their rules send them to.
const PIPE_PORTS: [u16; 2] = [7001, 7002];
const MASKED_PORTS: [u16; 5] = [7003, 7004, 7005, 7006, 7007];
const UNMASKED_PORT: u16 = 7010;
/// Sent to pipe 9 while it exists (rule 900), else refused by the default.
const ADDED_PIPE_PORT: u16 = 7008;
/// Sent to flowset 23 of sched 2 while it exists (rule 250).
const ADDED_QUEUE_PORT: u16 = 7009;

const CONFIG: &str = "\
    pipe 1 config bw 8Mbit/s queue 60\n\
    sched 2 config type qfq bw 6Mbit/s\n\
    queue 21 config sched 2 weight 1 queue 40 mask dst-port 0xffff\n\
    queue 22 config sched 2 weight 4 queue 40\n\
    add 100 pipe 1 udp from any to any dst-port 7001-7002\n\
    add 200 queue 21 udp from any to any dst-port 7003-7007\n\
    add 300 queue 22 udp from any to any dst-port 7010\n\
    default deny\n";

/// xorshift64*: the sequence of changes, replayable by its seed.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }
}

/// What the sequence added and has not deleted yet.
#[derive(Default)]
struct Added {
    pipe_9: bool,
    queue_23: bool,
}

/// The next change: the `pspat ctl` requests that make it, in order.
fn next_change(draw: &mut Draw, added: &mut Added) -> Vec<String> {
    match draw.below(10) {
        // Every form sends the unmasked port (and no other port that
        // reaches rule 300) to flowset 22: the sources are in
        // 10.199.0.0/16, the traffic is UDP.
        9 => vec![draw
            .pick(&[
                "add 300 queue 22 udp from any to any dst-port 7010",
                "add 300 queue 22 udp from 10.199.0.0/16,2001:db8::/32 to any dst-port 7010",
                "add 300 queue 22 not tcp from not 192.0.2.0/24,198.51.100.0/24 to any dst-port 7010",
                "add 300 queue 22 udp from any to any !dst-port 1-7009,7011-65535",
            ])
            .to_string()],
        0 => vec![format!(
            "pipe 1 config bw {}Mbit/s queue {} delay {}ms {} {}",
            2 + draw.below(19),
            20 + draw.below(101),
            draw.below(5),
            // The link's framing, on or off (cells taken away by 0).
            draw.pick(&[
                "packetoverhead 0 cellsize 0 celloverhead 0",
                "packetoverhead 24",
                "packetoverhead -8 cellsize 48 celloverhead 5",
            ]),
            // tc-netem's slots, on or off (`slot 0`).
            draw.pick(&["slot 0", "slot 0", "slot 1ms 3ms packets 8"])
        )],
        1 => vec![format!(
            "sched 2 config type {} bw {}Mbit/s",
            draw.pick(&["drr", "qfq", "wf2q+"]),
            2 + draw.below(11)
        )],
        2 => vec![format!(
            "queue 21 config weight {} mask {}",
            1 + draw.below(8),
            draw.pick(&[
                "dst-port 0xffff",
                "dst-port 0xfffe",
                "src-ip 0xffffffff",
                "src-ip 0xfffffff0",
                "src-ip 0xffffffff dst-port 0xffff",
            ])
        )],
        3 => vec![format!(
            "queue 22 config weight {} queue {}",
            1 + draw.below(8),
            10 + draw.below(71)
        )],
        // Random loss, or one of the two correlated loss models (each
        // replaces the other; `lossstate 0` loses nothing).
        4 => vec![format!(
            "queue 22 config {}",
            draw.pick(&[
                "plr 0",
                "plr 0",
                "plr 0.02",
                "lossstate 0.01 0.3 0.4 0.2 0.002",
                "lossstate 0",
                "gemodel 0.01 0.3 1 0",
            ])
        )],
        5 => vec![format!("seed {}", 1 + draw.below(1000))],
        6 | 7 if !added.pipe_9 && draw.below(2) == 0 => {
            added.pipe_9 = true;
            vec![
                format!("pipe 9 config bw {}Mbit/s queue 30", 1 + draw.below(6)),
                format!("add 900 pipe 9 udp from any to any dst-port {ADDED_PIPE_PORT}"),
            ]
        }
        6 if added.pipe_9 => {
            added.pipe_9 = false;
            vec!["delete 900".into(), "pipe 9 delete".into()]
        }
        7 | 8 if !added.queue_23 => {
            added.queue_23 = true;
            vec![format!(
                "queue 23 config sched 2 weight {} queue 30; \
                 add 250 queue 23 udp from any to any dst-port {ADDED_QUEUE_PORT}",
                1 + draw.below(4)
            )]
        }
        _ if added.queue_23 => {
            added.queue_23 = false;
            vec!["delete 250".into(), "queue 23 delete".into()]
        }
        _ => vec![format!("seed {}", 1 + draw.below(1000))],
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The source address of the `k`-th frame sent to `port` (10.199.S.`host`):
/// with `hosts` 1, one per port, so that a port is one flow under every
/// mask the sequence sets; else `hosts` addresses in turn, so that a
/// `src-ip` mask makes more keys than a flowset may have queues.
fn host_of(port: u16, k: u32, hosts: u8) -> u8 {
    if hosts <= 1 {
        10 + (port % 4) as u8
    } else {
        10 + (k % u32::from(hosts)) as u8
    }
}

#[test]
fn a_random_sequence_of_live_changes_loses_and_reorders_nothing() {
    soak("soak", 1, &["--spare-flows", "4096"]);
}

/// As above with 32 sources per port and 8 dynamic queues per flowset:
/// under `src-ip` masks most keys find no queue and share the flowset's
/// overflow queue, and each mask change moves held packets between
/// dynamic queues and the overflow queue. Order is checked per source and
/// port.
#[test]
fn live_changes_past_the_queue_cap_lose_and_reorder_nothing() {
    soak(
        "soak-cap",
        32,
        &["--spare-flows", "4096", "--max-queues", "8"],
    );
}

/// Runs the sequence with `hosts` sources per port (see [`host_of`]) and
/// the daemon's `extra` flags, and makes the checks of the module docs.
fn soak(tag: &str, hosts: u8, extra: &[&str]) {
    let Some(bed) = Bed::new(tag, 246) else {
        return;
    };
    let seconds = env_or("PSPAT_SOAK_SECONDS", 3).max(1);
    let seed = env_or("PSPAT_SOAK_SEED", 1);
    // With many sources, queue 21 starts with a mask that makes more keys
    // than it may have queues.
    let config = if hosts > 1 {
        CONFIG.replace("mask dst-port 0xffff", "mask src-ip 0xffffffff")
    } else {
        CONFIG.to_string()
    };
    let (child, _log) = bed.start(&config, extra);
    let socket = bed.socket();
    let collector = bed.receiver();
    let mut tx = bed.sender_socket();

    // The changes run beside the traffic, one request at a time.
    let stop = Arc::new(AtomicBool::new(false));
    let changer = {
        let stop = Arc::clone(&stop);
        let socket = socket.clone();
        std::thread::spawn(move || {
            // Spread, and never zero (xorshift's fixed point).
            let mut draw = Draw(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let mut added = Added::default();
            let mut applied: Vec<(String, Duration)> = Vec::new();
            let mut refused: Vec<(String, Output)> = Vec::new();
            std::thread::sleep(Duration::from_millis(200));
            let shown = ctl_json(&socket, &["queue", "show", "21"]);
            let first_dynamic = shown["result"]["queues"][0]["dynamic"].clone();
            // Acquire: pairs with the Release store once the traffic ends.
            while !stop.load(Ordering::Acquire) {
                for request in next_change(&mut draw, &mut added) {
                    let words: Vec<&str> = request.split(' ').collect();
                    let asked = Instant::now();
                    let out = ctl(&socket, &words);
                    if out.status.success() {
                        applied.push((request, asked.elapsed()));
                    } else {
                        refused.push((request, out));
                    }
                }
                std::thread::sleep(Duration::from_millis(120));
            }
            (applied, refused, first_dynamic)
        })
    };

    // Rounds of 4 ms: two 500-byte frames per port (2 Mbit/s each, 20 in
    // all), more than the pipe and the sched carry at most rates drawn.
    let ports: Vec<u16> = PIPE_PORTS
        .iter()
        .chain(&MASKED_PORTS)
        .chain(&[ADDED_PIPE_PORT, ADDED_QUEUE_PORT, UNMASKED_PORT])
        .copied()
        .collect();
    let start = Instant::now();
    let rounds = (seconds * 250) as u32;
    let mut seq = 0u32;
    let mut sent = 0u64;
    for round in 0..rounds {
        let mut batch = Vec::with_capacity(2 * ports.len());
        for k in 0..2 {
            for &port in &ports {
                seq += 1;
                // The source rides in the frame's time field (unused
                // here), for the order check per source.
                let host = host_of(port, 2 * round + k, hosts);
                batch.push(bed.frame_from(host, port, seq, u64::from(host), 500));
            }
        }
        sent += batch.len() as u64;
        send_all(&mut tx, &batch);
        pace(start, Duration::from_millis(4), round);
    }
    // Release: pairs with the changer's Acquire load.
    stop.store(true, Ordering::Release);
    let (applied, refused, first_dynamic) = changer.join().expect("the changer thread");
    // Long enough for the slowest queue drawn (120 slots at 2 Mbit/s).
    std::thread::sleep(Duration::from_millis(600));
    let doc = finish(child);
    let got = collector.finish();

    let slowest = applied.iter().map(|(_, d)| *d).max().unwrap_or_default();
    println!(
        "{tag}: seed {seed}, {seconds} s: {} requests applied (slowest answer {:.1} ms), {} refused; \
         {sent} frames sent, {} arrived; totals {}",
        applied.len(),
        slowest.as_secs_f64() * 1e3,
        refused.len(),
        got.len(),
        doc["totals"]
    );
    println!("{tag}: queue 21's dynamic queues before the first change: {first_dynamic}");
    for (request, _) in &applied {
        println!("  applied: {request}");
    }
    for (request, out) in &refused {
        println!(
            "  REFUSED: {request}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    assert!(refused.is_empty(), "every change of the sequence is valid");
    assert!(applied.len() >= 5, "changes were made: {}", applied.len());
    if hosts > 8 {
        assert!(
            first_dynamic["overflowed"].as_u64().is_some_and(|n| n > 0),
            "keys beyond the cap went to the overflow queue: {first_dynamic}"
        );
    }

    check_conservation(&doc);
    let totals = &doc["totals"];
    // The bed's own frames (IPv6 neighbour discovery) come on top.
    assert!(
        totals["received"].as_u64().unwrap() >= sent,
        "the daemon received every frame sent ({sent}): {totals}"
    );
    let allowed = [
        "flow_limit",
        "filtered",
        "flow_removed",
        "unknown_flow",
        "random_loss",
        "burst_loss",
    ];
    for (reason, count) in totals["dropped"].as_object().expect("totals.dropped") {
        assert!(
            allowed.contains(&reason.as_str()),
            "{count} frames dropped as {reason}, which no change explains: {totals}"
        );
    }
    // Every frame a pipe sent arrived (deleted pipes' rows included).
    let out: u64 = doc["pipes"]
        .as_array()
        .expect("pipes")
        .iter()
        .map(|p| p["out_packets"].as_u64().unwrap())
        .sum();
    assert_eq!(got.len() as u64, out, "arrivals against the pipes' output");
    // Each (port, source) is one flow under every mask.
    let mut last: std::collections::HashMap<(u16, u64), (u32, u64)> =
        std::collections::HashMap::new();
    for a in &got {
        if let Some((before, at)) = last.insert((a.port, a.sent), (a.seq, a.at)) {
            // Arrival times are the receiver's wall clock, as the daemon's
            // log lines are: the change that reordered can be found there.
            assert!(
                before < a.seq,
                "port {} from 10.199.246.{} reordered: frame {} arrived at {} ns (realtime) after \
                 frame {before}, which arrived at {at} ns",
                a.port,
                a.sent,
                a.seq,
                a.at
            );
        }
    }
}
